package router

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/connectivity"

	"github.com/pillarkit/pillar/cobbled"
	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/internal/clock"
	"github.com/pillarkit/pillar/internal/testcluster"
)

// startCluster runs real cobbled nodes on 127.0.0.1 with small data: 8
// partitions, values up to 4 KiB.
func startCluster(t testing.TB, mutate func(*testcluster.Options)) *testcluster.Cluster {
	t.Helper()
	o := testcluster.Options{Dir: t.TempDir(), Partitions: 8, Keys: 240, MaxValue: 4 << 10, CacheBytes: 8 << 20}
	if mutate != nil {
		mutate(&o)
	}
	// The nodes' ingest pacers run a control-window ticker; keep it on the
	// wall clock, so the fake-clock tests count only the timers of the read
	// path (refresh, timeouts, hedges, fault delays).
	node := o.Node
	o.Node = func(no *cobbled.Options) {
		no.Pace.Clock = clock.Real{}
		if node != nil {
			node(no)
		}
	}
	c, err := testcluster.Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newRouter(t testing.TB, src RoutingSource, mutate func(*Options)) *Router {
	t.Helper()
	o := Options{Source: src}
	if mutate != nil {
		mutate(&o)
	}
	r, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// awaitReady waits until the router's gRPC connection to the node at addr
// is READY. A test that restarts a node under a router it already made calls
// it: a sub-request sent while the connection is still in
// TRANSIENT_FAILURE (it tried to reconnect while the node was down) fails at
// once with Unavailable, ejects the node and fails over, so the request
// never reaches the node the test slowed down.
func awaitReady(t testing.TB, r *Router, addr string) {
	t.Helper()
	r.installMu.Lock()
	var n *node
	for _, x := range r.nodes {
		if x.addr == addr {
			n = x
		}
	}
	r.installMu.Unlock()
	if n == nil {
		t.Fatalf("router has no node at %s", addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for st := n.conn.GetState(); st != connectivity.Ready; st = n.conn.GetState() {
		n.conn.Connect()
		if !n.conn.WaitForStateChange(ctx, st) {
			t.Fatalf("connection to %s: still %v after 10s", addr, st)
		}
	}
}

// checkResults compares results with the cluster's data: known keys found
// with their values, others not found, no errors.
func checkResults(t testing.TB, c *testcluster.Cluster, keys [][]byte, res []Result) {
	t.Helper()
	if len(res) != len(keys) {
		t.Fatalf("%d results for %d keys", len(res), len(keys))
	}
	known := map[string]bool{}
	for _, k := range c.Keys() {
		known[string(k)] = true
	}
	for i, k := range keys {
		r := res[i]
		switch {
		case r.Err != nil:
			t.Errorf("key %d (%x): %v", i, k, r.Err)
		case known[string(k)] && (!r.Found || !bytes.Equal(r.Value, c.Value(k))):
			t.Errorf("key %d (%x): found %v, %d bytes; want its %d-byte value", i, k, r.Found, len(r.Value), len(c.Value(k)))
		case !known[string(k)] && r.Found:
			t.Errorf("key %d (%x): unknown key found", i, k)
		}
	}
}

// nodeRequests reads a node's cobbled_batchget_requests_total for a gRPC code.
func nodeRequests(t testing.TB, m *cobbled.Metrics, code string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "cobbled_batchget_requests_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "code" && l.GetValue() == code {
					return mt.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func nodeStats(r *Router, id string) NodeStats {
	for _, n := range r.Stats().Nodes {
		if n.ID == id {
			return n
		}
	}
	return NodeStats{}
}

// routingSource is a routing table the test edits, counting fetches.
type routingSource struct {
	fetches chan struct{}
	get     func() (*control.Routing, error)
}

func (s *routingSource) GetRouting(ctx context.Context) (*control.Routing, error) {
	select {
	case s.fetches <- struct{}{}:
	default:
	}
	return s.get()
}

type batchGetResult struct {
	res []Result
	err error
}

// batchGetAsync runs r.BatchGet in a goroutine (for fake-clock tests, which
// advance the clock while it waits).
func batchGetAsync(r *Router, ctx context.Context, keys [][]byte) <-chan batchGetResult {
	done := make(chan batchGetResult, 1)
	go func() {
		res, err := r.BatchGet(ctx, keys)
		done <- batchGetResult{res, err}
	}()
	return done
}

// settle waits (up to 10s of wall time) until clk has exactly n pending
// timers: the nodes have noticed that the previous request's losers were
// cancelled and dropped their fault-delay timers, so the next count is exact.
func settle(t testing.TB, clk *clock.Fake, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); clk.Waiters() != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("clock: %d pending timers, want %d once the last request settled", clk.Waiters(), n)
		}
	}
}

// blockUntilPending is blockUntil for a request in flight: it fails at once
// if the request answers first.
func blockUntilPending(t testing.TB, clk *clock.Fake, n int, done <-chan batchGetResult) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); clk.Waiters() < n; time.Sleep(time.Millisecond) {
		select {
		case out := <-done:
			t.Fatalf("request answered (err %v) before %d timers were pending (have %d)", out.err, n, clk.Waiters())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("clock: waiting for %d pending timers, have %d", n, clk.Waiters())
		}
	}
}

// expectPending fails if the request has already answered (checked for a
// moment of wall time: it can miss an early answer, never invent one).
func expectPending(t testing.TB, done <-chan batchGetResult, when string) {
	t.Helper()
	select {
	case out := <-done:
		t.Fatalf("%s: request answered early: %v", when, out.err)
	case <-time.After(20 * time.Millisecond):
	}
}

// waitUntil returns a channel closed once cond holds (polled; gives up
// after 10s of wall time, a safety bound).
func waitUntil(t testing.TB, cond func() bool) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if cond() {
				close(ch)
				return
			}
		}
	}()
	return ch
}

func waitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
