package router

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/pillarkit/pillar/cobbled"
	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/internal/clock"
	"github.com/pillarkit/pillar/internal/testcluster"
	"github.com/pillarkit/pillar/pillar"
)

func randomKey() []byte {
	k := make([]byte, 16)
	rand.Read(k)
	return k
}

// With one replica per partition (partition p on node p%3), a request's
// keys go out as exactly one sub-request per node that holds some of them,
// and come back in request order, duplicates and unknown keys included.
func TestBatchGetGroupingAndOrder(t *testing.T) {
	c := startCluster(t, func(o *testcluster.Options) { o.Replicas = 1 })
	r := newRouter(t, c, nil)
	ks := c.Keys()
	keys := [][]byte{ks[5], ks[0], randomKey(), ks[17], ks[5], ks[3], ks[99], randomKey(), ks[0], ks[42]}
	nodes := map[int]bool{}
	for _, k := range keys {
		nodes[pillar.Partition(k, c.Partitions())%3] = true
	}
	res, err := r.BatchGet(context.Background(), keys)
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, c, keys, res)
	if res[2].Found || res[7].Found {
		t.Error("unknown keys found")
	}
	s := r.Stats()
	if s.Primaries != int64(len(nodes)) || s.Hedges != 0 || s.Failovers != 0 {
		t.Errorf("sub-requests: %d primaries (want %d, one per node), %d hedges, %d failovers", s.Primaries, len(nodes), s.Hedges, s.Failovers)
	}
	// Only unknown keys: found=false, not an error.
	res, err = r.BatchGet(context.Background(), [][]byte{randomKey(), randomKey()})
	if err != nil || res[0].Found || res[1].Found || res[0].Err != nil {
		t.Errorf("unknown keys: %+v, %v", res, err)
	}
}

func TestBadInput(t *testing.T) {
	c := startCluster(t, nil)
	r := newRouter(t, c, func(o *Options) { o.MaxKeys = 16 })
	ctx := context.Background()
	many := make([][]byte, 17)
	for i := range many {
		many[i] = c.Keys()[i]
	}
	for _, tc := range []struct {
		name string
		keys [][]byte
		want error
		msg  string
	}{
		{"empty", nil, ErrEmpty, "empty request"},
		{"too many", many, ErrTooManyKeys, "17 keys, over the limit of 16"},
		{"short key", [][]byte{c.Keys()[0], []byte("short")}, ErrBadKey, "key 1"},
	} {
		res, err := r.BatchGet(ctx, tc.keys)
		if !errors.Is(err, tc.want) || res != nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: got %v (%d results), want %v containing %q", tc.name, err, len(res), tc.want, tc.msg)
		}
	}
	if s := r.Stats(); s.Requests != 0 || s.Primaries != 0 {
		t.Errorf("bad requests reached nodes: %+v", s)
	}
}

func TestZonePreference(t *testing.T) {
	c := startCluster(t, nil)
	ctx := context.Background()
	batches := c.Batches(12)
	r := newRouter(t, c, func(o *Options) { o.Zone = "zone-b"; o.DisableHedging = true })
	for _, b := range batches[:20] {
		res, err := r.BatchGet(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		checkResults(t, c, b, res)
	}
	if a, b, cc := nodeStats(r, "node-0").RPCs, nodeStats(r, "node-1").RPCs, nodeStats(r, "node-2").RPCs; b != 20 || a != 0 || cc != 0 {
		t.Errorf("zone-b caller: sub-requests per node %d/%d/%d, want 0/20/0", a, b, cc)
	}

	// Without a zone, concurrent requests spread over every node.
	r2 := newRouter(t, c, func(o *Options) { o.DisableHedging = true })
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, b := range batches[w*5 : w*5+5] {
				if _, err := r2.BatchGet(ctx, b); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	for _, id := range []string{"node-0", "node-1", "node-2"} {
		if n := nodeStats(r2, id).RPCs; n == 0 {
			t.Errorf("no zone: %s got no sub-requests", id)
		}
	}

	// The same-zone replica marked down is never used.
	c.SetDown(1, true)
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	before := nodeStats(r, "node-1").RPCs
	for _, b := range batches[:10] {
		res, err := r.BatchGet(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		checkResults(t, c, b, res)
	}
	if n := nodeStats(r, "node-1").RPCs; n != before {
		t.Errorf("down node-1 got %d sub-requests", n-before)
	}
}

// A replica lagging more than MaxLagBatches is not chosen while a fresher
// one is up; when all lag, the least-lagging serve.
func TestLaggingReplica(t *testing.T) {
	c := startCluster(t, nil)
	lag := map[string]int64{"node-0": 5}
	src := RoutingFunc(func(ctx context.Context) (*control.Routing, error) {
		rt, _ := c.GetRouting(ctx)
		for p := range rt.Replicas {
			rt.NewestSeq[p] = 6
			for i := range rt.Replicas[p] {
				rt.Replicas[p][i].AppliedSeq = 6 - lag[rt.Replicas[p][i].NodeID]
			}
		}
		return rt, nil
	})
	r := newRouter(t, src, func(o *Options) { o.Zone = "zone-a"; o.MaxLagBatches = 2; o.DisableHedging = true })
	for _, b := range c.Batches(12)[:10] {
		res, err := r.BatchGet(context.Background(), b)
		if err != nil {
			t.Fatal(err)
		}
		checkResults(t, c, b, res)
	}
	if n := nodeStats(r, "node-0").RPCs; n != 0 {
		t.Errorf("lagging node-0 got %d sub-requests", n)
	}
	lag["node-1"], lag["node-2"] = 3, 3
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Every replica lags past the limit: the least-lagging ones (node-1 and
	// node-2, 3 behind) serve rather than nothing; node-0 (5 behind) does not.
	before := nodeStats(r, "node-1").RPCs + nodeStats(r, "node-2").RPCs
	for _, b := range c.Batches(12)[:10] {
		res, err := r.BatchGet(context.Background(), b)
		if err != nil {
			t.Fatalf("all lagging: %v, want the least-lagging replicas to serve", err)
		}
		checkResults(t, c, b, res)
	}
	if n := nodeStats(r, "node-0").RPCs; n != 0 {
		t.Errorf("the most lagging node-0 got %d sub-requests", n)
	}
	if nodeStats(r, "node-1").RPCs+nodeStats(r, "node-2").RPCs == before {
		t.Error("the least-lagging replicas served nothing")
	}
}

// The hedge goes out only after the delay, the first answer wins, and the
// loser is cancelled on its node. Router and nodes share a fake clock.
func TestHedgeAfterDelayLoserCancelled(t *testing.T) {
	clk := clock.NewFake(time.Time{})
	c := startCluster(t, func(o *testcluster.Options) { o.Clock = clk })
	ctx := context.Background()
	const delay = 250 * time.Millisecond
	r := newRouter(t, c, func(o *Options) {
		o.Zone, o.Clock = "zone-a", clk
		o.HedgeInitialDelay, o.HedgeMaxDelay, o.MinSamples = delay, delay, 512 // keep the initial delay
	})
	// Healthy: the clock does not move, so however slowly this machine
	// answers, nothing is hedged.
	for _, b := range c.Batches(12)[:20] {
		if _, err := r.BatchGet(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if s := r.Stats(); s.Hedges != 0 {
		t.Fatalf("healthy cluster: %d hedges", s.Hedges)
	}

	slow := c.Members()[0]
	okBefore := nodeRequests(t, slow.Metrics, "OK")
	if err := slow.Restart(ctx, cobbled.FaultDelay{Fraction: 1, Delay: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	awaitReady(t, r, slow.Addr)
	b := c.Batches(12)[3]
	const base = 1 // the refresh ticker
	settle(t, clk, base)
	start := clk.Now()
	done := batchGetAsync(r, ctx, b)
	blockUntilPending(t, clk, base+3, done) // the request's timeout, the hedge timer, the slow node's fault delay
	clk.Advance(delay - time.Nanosecond)
	expectPending(t, done, "before the hedge delay")
	if s := r.Stats(); s.Hedges != 0 {
		t.Fatalf("%d hedges before the delay", s.Hedges)
	}
	clk.Advance(time.Nanosecond)
	out := <-done
	if out.err != nil {
		t.Fatal(out.err)
	}
	checkResults(t, c, b, out.res)
	s := r.Stats()
	if took := clk.Now().Sub(start); took != delay {
		t.Errorf("hedged request answered at +%v, want the hedge delay %v (the slow node waits 5s)", took, delay)
	}
	if s.Hedges != 1 || s.HedgesWon != 1 || s.Cancelled != 1 {
		t.Errorf("hedges %d won %d cancelled %d, want 1/1/1", s.Hedges, s.HedgesWon, s.Cancelled)
	}
	// The slow node saw the cancellation (it would otherwise answer OK after 5s).
	waitFor(t, "the slow node to see its request cancelled", 10*time.Second, func() bool {
		return nodeRequests(t, slow.Metrics, "Canceled") == 1
	})
	if ok := nodeRequests(t, slow.Metrics, "OK"); ok != okBefore {
		t.Errorf("slow node answered %v requests", ok-okBefore)
	}
}

// A hedge timer that fires late (the fake clock jumps past it: on a real
// machine, this process was not running) is put off once by a quarter of
// the delay, so an answer waiting unread is not hedged; then it hedges.
func TestLateHedgeTimerDeferred(t *testing.T) {
	clk := clock.NewFake(time.Time{})
	c := startCluster(t, func(o *testcluster.Options) { o.Clock = clk })
	ctx := context.Background()
	const delay = 20 * time.Millisecond
	r := newRouter(t, c, func(o *Options) {
		o.Zone, o.Clock = "zone-a", clk
		o.HedgeInitialDelay, o.MinSamples = delay, 512 // keep the initial delay
	})
	slow := c.Members()[0]
	if err := slow.Restart(ctx, cobbled.FaultDelay{Fraction: 1, Delay: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	awaitReady(t, r, slow.Addr)
	b := c.Batches(12)[3]
	const base = 1 // the refresh ticker
	settle(t, clk, base)
	start := clk.Now()
	done := batchGetAsync(r, ctx, b)
	blockUntilPending(t, clk, base+3, done) // the request's timeout, the hedge timer, the slow node's fault delay
	clk.Jump(3 * delay)                     // the hedge timer fires 2 × delay late (Advance could fire it on time)
	blockUntilPending(t, clk, base+3, done) // … and is armed again, for delay/4
	if s := r.Stats(); s.Hedges != 0 {
		t.Fatalf("%d hedges sent by a late timer", s.Hedges)
	}
	clk.Advance(delay/4 - time.Nanosecond)
	expectPending(t, done, "before the deferred hedge")
	clk.Advance(time.Nanosecond)
	out := <-done
	if out.err != nil {
		t.Fatal(out.err)
	}
	checkResults(t, c, b, out.res)
	if took := clk.Now().Sub(start); took != 3*delay+delay/4 {
		t.Errorf("answered at +%v, want %v", took, 3*delay+delay/4)
	}
	if s := r.Stats(); s.Hedges != 1 || s.HedgesWon != 1 || s.HedgesDeferred != 1 || s.HedgeWait != 3*delay+delay/4 {
		t.Errorf("hedges %d won %d deferred %d, waited %v; want 1/1/1 after %v", s.Hedges, s.HedgesWon, s.HedgesDeferred, s.HedgeWait, 3*delay+delay/4)
	}
}

// Hedges spend from a token bucket: at most HedgeBudget per primary plus
// the burst, however slow the cluster is. On a fake clock every primary
// crosses its hedge delay, so the budget alone decides.
func TestHedgeBudget(t *testing.T) {
	clk := clock.NewFake(time.Time{})
	c := startCluster(t, func(o *testcluster.Options) { o.Clock = clk })
	ctx := context.Background()
	if err := c.Members()[0].Restart(ctx, cobbled.FaultDelay{Fraction: 1, Delay: 40 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	r := newRouter(t, c, func(o *Options) {
		o.Zone, o.Clock = "zone-a", clk
		o.HedgeInitialDelay, o.MinSamples = 5*time.Millisecond, 512
		o.HedgeBudget, o.HedgeBurst = 0.1, 2
		o.StallRatio = -1 // every request to node-0 stalls: keep it the primary, to measure the budget
	})
	const requests = 120
	const base = 1 // the refresh ticker
	for i := range requests {
		k := c.Keys()[i]
		before := r.Stats()
		settle(t, clk, base)
		done := batchGetAsync(r, ctx, [][]byte{k}) // one partition: one primary
		blockUntilPending(t, clk, base+3, done)    // timeout, hedge timer, fault delay
		clk.Advance(5 * time.Millisecond)          // the hedge timer fires
		var out batchGetResult
		select {
		case out = <-done: // hedged: the other replica answered
		case <-waitUntil(t, func() bool { return r.Stats().HedgesDenied > before.HedgesDenied }):
			clk.Advance(35 * time.Millisecond) // denied: the slow node answers
			out = <-done
		}
		if out.err != nil {
			t.Fatal(out.err)
		}
		checkResults(t, c, [][]byte{k}, out.res)
	}
	s := r.Stats()
	limit := int64(0.1*float64(s.Primaries)) + 2
	if s.Primaries != requests || s.Hedges > limit || s.Hedges < limit-2 || s.Hedges+s.HedgesDenied != requests {
		t.Errorf("%d primaries, %d hedges (budget allows %d), %d denied; %+v", s.Primaries, s.Hedges, limit, s.HedgesDenied, s)
	}
	if s.HedgeRatio > 0.1+2.0/float64(s.Primaries) {
		t.Errorf("hedge ratio %.3f over the budget", s.HedgeRatio)
	}
}

// Stalls the budget could not hedge are recorded as at most the delay they
// had, so a burst of them does not become the node's p99 and lift its hedge
// delay to the stall (after which hedges would come too late to win, and
// more stalls would be recorded). Recorded in full, 2 of 64+ samples at 40
// ms make the p99 40 ms.
func TestUnhedgedStallsHoldTheBar(t *testing.T) {
	clk := clock.NewFake(time.Time{})
	c := startCluster(t, func(o *testcluster.Options) { o.Clock = clk })
	ctx := context.Background()
	r := newRouter(t, c, func(o *Options) {
		o.Zone, o.Clock = "zone-a", clk
		o.MinSamples = 16
		o.HedgeBudget, o.HedgeBurst = 0.1, 1
		o.StallRatio = -1 // keep the stalling node-0 the primary: the bar is under test
	})
	const base = 1 // the refresh ticker
	keys := c.Keys()
	// Healthy: on the fake clock every answer takes 0, so the learned delay
	// is the floor.
	for _, k := range keys[:64] {
		if _, err := r.BatchGet(ctx, [][]byte{k}); err != nil {
			t.Fatal(err)
		}
	}
	slow := c.Members()[0]
	r.installMu.Lock()
	n0 := r.nodes[slow.ID+"@"+slow.Addr]
	r.installMu.Unlock()
	if n0 == nil {
		t.Fatalf("no node %s in the router", slow.ID)
	}
	floor := r.opts.HedgeMinDelay
	if d := r.hedgeDelay(n0, 1); d != floor {
		t.Fatalf("healthy: delay %v, want the floor %v", d, floor)
	}
	if err := slow.Restart(ctx, cobbled.FaultDelay{Fraction: 1, Delay: 40 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	awaitReady(t, r, slow.Addr)
	// Every request now stalls 40 ms on node-0; the budget hedges about one
	// in ten, the rest wait the stall out.
	var denied int
	for _, k := range keys[64:104] {
		if d := r.hedgeDelay(n0, 1); d != floor {
			t.Fatalf("after %d unhedged stalls: delay %v, want it held at %v", denied, d, floor)
		}
		before := r.Stats()
		settle(t, clk, base)
		done := batchGetAsync(r, ctx, [][]byte{k})
		blockUntilPending(t, clk, base+3, done) // timeout, hedge timer, fault delay
		clk.Advance(floor)                      // the hedge timer fires
		var out batchGetResult
		select {
		case out = <-done: // hedged: the other replica answered
		case <-waitUntil(t, func() bool { return r.Stats().HedgesDenied > before.HedgesDenied }):
			denied++
			clk.Advance(40*time.Millisecond - floor) // denied: the slow node answers
			out = <-done
		}
		if out.err != nil {
			t.Fatal(out.err)
		}
		checkResults(t, c, [][]byte{k}, out.res)
	}
	if denied < 20 {
		t.Errorf("%d stalls waited out, want most of 40 (budget 0.1)", denied)
	}
	if s := nodeStats(r, slow.ID); s.P99 != floor || s.HedgeDelay != floor {
		t.Errorf("node-0 p99 %v, hedge delay %v after %d unhedged 40 ms stalls; want both %v", s.P99, s.HedgeDelay, denied, floor)
	}
}

func TestHedgeDelayLearned(t *testing.T) {
	r := &Router{opts: Options{Source: RoutingFunc(nil)}}
	r.opts.ensureDefaults()
	n := &node{}
	r.opts.HedgeQuantile, r.opts.HedgeOutlier = 0.95, 1 // the quantile alone
	n.initLatencies(r.opts.LatencyWindow, r.opts.HedgeQuantile, r.opts.HedgeQuantile)
	if d := r.hedgeDelay(n, 12); d != r.opts.HedgeInitialDelay {
		t.Errorf("no samples: delay %v, want the initial %v", d, r.opts.HedgeInitialDelay)
	}
	for i := 1; i <= 100; i++ {
		x := time.Duration(i) * time.Millisecond
		n.observe(x, x, time.Now(), 12)
	}
	if d := r.hedgeDelay(n, 12); d < 90*time.Millisecond || d > 95*time.Millisecond {
		t.Errorf("1..100ms: delay %v, want p95 of the samples so far (recomputed every 16)", d)
	}
	c := &n.byClass[sizeClass(12)]
	c.mu.Lock()
	c.recompute()
	c.mu.Unlock()
	if d := r.hedgeDelay(n, 12); d != 95*time.Millisecond {
		t.Errorf("1..100ms: delay %v, want p95 = 95ms", d)
	}
	for range 2000 { // the window forgets the old samples
		n.observe(100*time.Microsecond, 100*time.Microsecond, time.Now(), 12)
	}
	if d := r.hedgeDelay(n, 12); d != r.opts.HedgeMinDelay {
		t.Errorf("fast node: delay %v, want the floor %v", d, r.opts.HedgeMinDelay)
	}
}

// While the budget holds at least half its bank the bar is
// HedgeQuantileFull (p98.5); drawn below half, HedgeQuantile (p99); full
// again, the lower bar.
func TestHedgeBarLowerWhileBudgetFull(t *testing.T) {
	r := &Router{opts: Options{Source: RoutingFunc(nil), HedgeOutlier: 1}}
	r.opts.ensureDefaults()
	if r.opts.HedgeQuantileFull != 0.985 {
		t.Fatalf("default HedgeQuantileFull %v, want 0.985", r.opts.HedgeQuantileFull)
	}
	r.budget = newBudget(r.opts.HedgeBudget, r.opts.HedgeBurst)
	n := &node{}
	n.initLatencies(r.opts.LatencyWindow, r.opts.HedgeQuantile, r.opts.HedgeQuantileFull)
	now := time.Now()
	for i := range 512 { // sorted: 504 × 3 ms, 2 × 4 ms (p98.5), 6 × 8 ms (p99)
		d := 3 * time.Millisecond
		if i >= 506 {
			d = 8 * time.Millisecond
		} else if i >= 504 {
			d = 4 * time.Millisecond
		}
		n.observe(d, d, now, 12)
	}
	c := &n.byClass[sizeClass(12)]
	c.mu.Lock()
	c.recompute()
	c.mu.Unlock()
	if d := r.hedgeDelay(n, 12); d != 4*time.Millisecond {
		t.Errorf("budget full: delay %v, want p98.5 = 4ms", d)
	}
	for r.budget.level() >= r.opts.HedgeBurst/2 {
		r.budget.take()
	}
	if d := r.hedgeDelay(n, 12); d != 8*time.Millisecond {
		t.Errorf("budget at %.1f of %v tokens: delay %v, want p99 = 8ms", r.budget.level(), r.opts.HedgeBurst, d)
	}
	for range 1000 {
		r.budget.earn()
	}
	if d := r.hedgeDelay(n, 12); d != 4*time.Millisecond {
		t.Errorf("budget refilled: delay %v, want p98.5 = 4ms", d)
	}
	bad := Options{Source: RoutingFunc(nil), HedgeQuantile: 0.95, HedgeQuantileFull: 0.99}
	bad.ensureDefaults()
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "HedgeQuantileFull") {
		t.Errorf("HedgeQuantileFull above HedgeQuantile: %v", err)
	}
	low := Options{Source: RoutingFunc(nil), HedgeQuantile: 0.95}
	low.ensureDefaults()
	if low.HedgeQuantileFull != 0.95 {
		t.Errorf("HedgeQuantile 0.95: default HedgeQuantileFull %v, want 0.95", low.HedgeQuantileFull)
	}
}

// The hedge delay is per size class, and never under HedgeOutlier × the
// class's median: a tight distribution is not hedged for its jitter.
func TestHedgeDelayPerSizeAndOutlier(t *testing.T) {
	r := &Router{opts: Options{Source: RoutingFunc(nil)}}
	r.opts.ensureDefaults() // p99, outlier 2×, window 512, 32 samples
	n := &node{}
	n.initLatencies(r.opts.LatencyWindow, r.opts.HedgeQuantile, r.opts.HedgeQuantile)
	now := time.Now()
	for i := range 512 {
		// 1-key reads: 1.0-1.1 ms (tight); 16-key reads: 4 ms, 1% at 40 ms.
		x := time.Millisecond + time.Duration(i%100)*time.Microsecond
		n.observe(x, x, now, 1)
		d := 4 * time.Millisecond
		if i%100 == 0 {
			d = 40 * time.Millisecond
		}
		n.observe(d, d, now, 16)
	}
	for _, c := range []*latencies{&n.byClass[sizeClass(1)], &n.byClass[sizeClass(16)], &n.lat} {
		c.mu.Lock()
		c.recompute()
		c.mu.Unlock()
	}
	if d := r.hedgeDelay(n, 1); d < 2*time.Millisecond || d > 2100*time.Microsecond {
		t.Errorf("1 key: delay %v, want 2× the median (p99 1.1ms is jitter)", d)
	}
	if d := r.hedgeDelay(n, 16); d != 40*time.Millisecond {
		t.Errorf("16 keys: delay %v, want their p99, 40ms", d)
	}
	if d := r.hedgeDelay(n, 4); d != r.hedgeDelay(n, 0) {
		t.Errorf("4 keys (no samples of that size): delay %v, want the node's over every size %v", d, r.hedgeDelay(n, 0))
	}
	for keys, want := range map[int]int{0: 0, 1: 0, 2: 1, 3: 1, 4: 2, 12: 3, 16: 4, 31: 4, 32: 5, 1024: 5} {
		if c := sizeClass(keys); c != want {
			t.Errorf("sizeClass(%d) = %d, want %d", keys, c, want)
		}
	}
}

func TestBudget(t *testing.T) {
	b := newBudget(0.05, 2)
	if first, second, third := b.take(), b.take(), b.take(); !first || !second || third {
		t.Fatal("burst of 2 not honoured")
	}
	for range 19 {
		b.earn()
	}
	if b.take() {
		t.Fatal("hedge allowed after 19 primaries at 5%")
	}
	b.earn()
	if first, second := b.take(), b.take(); !first || second {
		t.Fatal("20 primaries at 5% should allow exactly one hedge")
	}
	for range 1000 {
		b.earn()
	}
	if b.level() != 2 {
		t.Fatalf("bucket over its burst: %v", b.level())
	}
}

// A killed node: its sub-requests fail over, then it is avoided.
func TestFailoverOnKilledNode(t *testing.T) {
	c := startCluster(t, nil)
	ctx := context.Background()
	r := newRouter(t, c, func(o *Options) { o.Zone = "zone-a"; o.EjectFor = 10 * time.Second; o.DisableHedging = true })
	c.Members()[0].Kill()
	b := c.Batches(12)[0]
	res, err := r.BatchGet(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, c, b, res)
	s := r.Stats()
	if s.Failovers != 1 {
		t.Errorf("%d failovers, want 1", s.Failovers)
	}
	if !nodeStats(r, "node-0").Ejected {
		t.Error("killed node not avoided")
	}
	for _, b := range c.Batches(12)[1:10] {
		res, err := r.BatchGet(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		checkResults(t, c, b, res)
	}
	if s2 := r.Stats(); s2.Failovers != 1 || nodeStats(r, "node-0").RPCs != 1 {
		t.Errorf("after ejection: %d failovers, %d sub-requests to node-0; want 1 and 1", s2.Failovers, nodeStats(r, "node-0").RPCs)
	}
}

// A routing table naming a node that is gone (nothing listens at its
// address): its partitions fail over to the other replicas.
func TestRoutingNamesGoneNode(t *testing.T) {
	c := startCluster(t, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := lis.Addr().String()
	lis.Close()
	src := RoutingFunc(func(ctx context.Context) (*control.Routing, error) {
		rt, _ := c.GetRouting(ctx)
		for p := range rt.Replicas {
			rt.Replicas[p] = append([]control.Replica{{NodeID: "node-gone", Addr: gone, Zone: "zone-x", State: control.StateUp, AppliedSeq: 1}}, rt.Replicas[p]...)
		}
		return rt, nil
	})
	r := newRouter(t, src, func(o *Options) { o.Zone = "zone-x"; o.DisableHedging = true })
	for _, b := range c.Batches(12)[:5] {
		res, err := r.BatchGet(context.Background(), b)
		if err != nil {
			t.Fatal(err)
		}
		checkResults(t, c, b, res)
	}
	if s := r.Stats(); s.Failovers < 1 || nodeStats(r, "node-gone").Errors < 1 {
		t.Errorf("%d failovers, %d errors on the gone node", s.Failovers, nodeStats(r, "node-gone").Errors)
	}
}

// "Not my partition" fails over to the next replica and refreshes routing.
func TestNotServedFailoverAndRefresh(t *testing.T) {
	c := startCluster(t, func(o *testcluster.Options) { o.Replicas = 1 })
	var mu sync.Mutex
	wrong := true
	src := &routingSource{fetches: make(chan struct{}, 16), get: func() (*control.Routing, error) {
		rt, _ := c.GetRouting(context.Background())
		mu.Lock()
		defer mu.Unlock()
		if wrong { // list a node that does not hold the partition first
			for p := range rt.Replicas {
				right := rt.Replicas[p][0]
				other, _ := c.GetRouting(context.Background())
				bad := other.Replicas[(p+1)%len(other.Replicas)][0]
				rt.Replicas[p] = []control.Replica{bad, right}
			}
		} else {
			rt.Version = 2
		}
		return rt, nil
	}}
	// zone-b: node-1, which does not hold partition 0, is tried first.
	r := newRouter(t, src, func(o *Options) { o.Zone = "zone-b"; o.RefreshInterval = time.Hour; o.DisableHedging = true })
	<-src.fetches // New's fetch
	mu.Lock()
	wrong = false
	mu.Unlock()
	// Keys of partition 0 (node-0); the table says node-1 first.
	var keys [][]byte
	for _, k := range c.Keys() {
		if pillar.Partition(k, c.Partitions()) == 0 && len(keys) < 3 {
			keys = append(keys, k)
		}
	}
	res, err := r.BatchGet(context.Background(), keys)
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, c, keys, res)
	if s := r.Stats(); s.Failovers != 1 {
		t.Errorf("%d failovers, want 1", s.Failovers)
	}
	select {
	case <-src.fetches:
	case <-time.After(10 * time.Second):
		t.Fatal("'not my partition' did not trigger a routing refresh")
	}
	waitFor(t, "routing version 2", 10*time.Second, func() bool { return r.RoutingVersion() == 2 })
}

// Every replica failed: only that partition's keys fail, with
// ErrUnavailable; the others answer.
func TestAllReplicasFailed(t *testing.T) {
	c := startCluster(t, func(o *testcluster.Options) { o.Replicas = 1 })
	r := newRouter(t, c, nil)
	c.Members()[0].Kill()
	keys := c.Batches(12)[0]
	res, err := r.BatchGet(context.Background(), keys)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable", err)
	}
	var failed int
	for i, k := range keys {
		if pillar.Partition(k, c.Partitions())%3 == 0 {
			failed++
			if !errors.Is(res[i].Err, ErrUnavailable) || !strings.Contains(res[i].Err.Error(), "node-0") {
				t.Errorf("key %d on the dead node: %v", i, res[i].Err)
			}
		} else if res[i].Err != nil || !res[i].Found {
			t.Errorf("key %d on a live node: %+v", i, res[i])
		}
	}
	if failed == 0 {
		t.Fatal("batch has no key of node-0; pick another")
	}
}

// Nodes slower than the deadline (on a fake clock): the request ends at the
// caller's deadline or at Options.Timeout, with per-key DeadlineExceeded.
func TestDeadline(t *testing.T) {
	clk := clock.NewFake(time.Time{})
	c := startCluster(t, func(o *testcluster.Options) { o.Clock = clk })
	ctx := context.Background()
	for _, m := range c.Members() {
		if err := m.Restart(ctx, cobbled.FaultDelay{Fraction: 1, Delay: 3 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	r := newRouter(t, c, func(o *Options) {
		o.Timeout, o.HedgeInitialDelay, o.Clock = 150*time.Millisecond, 20*time.Millisecond, clk
	})
	keys := c.Batches(12)[0]
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want time.Duration
	}{
		{"caller's deadline", func() (context.Context, context.CancelFunc) { return clk.WithTimeout(ctx, 100*time.Millisecond) }, 100 * time.Millisecond},
		{"default timeout", func() (context.Context, context.CancelFunc) { return context.WithCancel(ctx) }, 150 * time.Millisecond},
	} {
		settle(t, clk, 1) // the refresh ticker
		cctx, cancel := tc.ctx()
		start := clk.Now()
		done := batchGetAsync(r, cctx, keys)
		// The refresh ticker, the caller's deadline or the router's
		// timeout, the hedge timer, the primary's fault delay.
		blockUntilPending(t, clk, 4, done)
		clk.Advance(tc.want - time.Nanosecond)
		expectPending(t, done, tc.name+": before the deadline")
		clk.Advance(time.Nanosecond)
		out := <-done
		res, err := out.res, out.err
		took := clk.Now().Sub(start)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || len(res) != len(keys) {
			t.Errorf("%s: %v, want DeadlineExceeded and per-key results", tc.name, err)
			continue
		}
		for i, x := range res {
			if !errors.Is(x.Err, context.DeadlineExceeded) {
				t.Errorf("%s: key %d: %v", tc.name, i, x.Err)
			}
		}
		if took != tc.want {
			t.Errorf("%s: returned at +%v, want %v", tc.name, took, tc.want)
		}
	}
}

// A routing version change is picked up by the periodic refresh.
func TestRoutingRefreshOnVersionChange(t *testing.T) {
	c := startCluster(t, nil)
	ctx := context.Background()
	c.SetDown(0, true)
	clk := clock.NewFake(time.Time{})
	r := newRouter(t, c, func(o *Options) {
		o.Zone, o.Clock = "zone-a", clk
		o.RefreshInterval = 20 * time.Millisecond
		o.DisableHedging = true
	})
	v := r.RoutingVersion()
	b := c.Batches(12)[0]
	if _, err := r.BatchGet(ctx, b); err != nil {
		t.Fatal(err)
	}
	if n := nodeStats(r, "node-0").RPCs; n != 0 {
		t.Fatalf("down node-0 got %d sub-requests", n)
	}
	c.SetDown(0, false)
	time.Sleep(20 * time.Millisecond)
	if r.RoutingVersion() != v {
		t.Fatal("routing refreshed before RefreshInterval passed")
	}
	clk.Advance(20 * time.Millisecond)
	waitFor(t, "a newer routing version", 10*time.Second, func() bool { return r.RoutingVersion() > v })
	if _, err := r.BatchGet(ctx, b); err != nil {
		t.Fatal(err)
	}
	if n := nodeStats(r, "node-0").RPCs; n != 1 {
		t.Errorf("node-0 back up in zone-a: %d sub-requests, want 1", n)
	}
}

// A real control plane (SQLite) as the routing source: it is needed at
// start, and its later outage leaves the cached table serving.
func TestControlPlane(t *testing.T) {
	ctx := context.Background()
	// Down at start: a clear error.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := lis.Addr().String()
	lis.Close()
	dead, err := control.Dial(deadAddr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	start := time.Now()
	_, err = New(ctx, Options{Source: dead, InitTimeout: 300 * time.Millisecond})
	if !errors.Is(err, ErrNoRouting) || !strings.Contains(err.Error(), "control plane") || time.Since(start) > 2*time.Second {
		t.Fatalf("control plane down at start: %v", err)
	}

	c := startCluster(t, nil)
	store, err := control.OpenStore(ctx, "sqlite:"+filepath.Join(t.TempDir(), "control.db"), &control.StoreOptions{Partitions: c.Partitions()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cp, err := control.NewServer(&control.Options{Store: store, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	lis, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := cp.GRPCServer()
	go gs.Serve(lis)
	defer gs.Stop()
	cli, err := control.Dial(lis.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for _, m := range c.Members() {
		if err := cli.RegisterNode(ctx, control.Node{ID: m.ID, Addr: m.Addr, Zone: m.Zone}); err != nil {
			t.Fatal(err)
		}
	}
	// zone-d: the node that joins later (in zone-d) is tried first.
	r := newRouter(t, cli, func(o *Options) {
		o.Zone, o.RefreshInterval, o.InitTimeout = "zone-d", 20*time.Millisecond, 300*time.Millisecond
	})
	b := c.Batches(12)[0]
	res, err := r.BatchGet(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, c, b, res)

	// A node joins (registered, then unreachable): the version changes, the
	// router installs the new table, and the partitions assigned to the
	// new node fail over to replicas that answer.
	v := r.RoutingVersion()
	if err := cli.RegisterNode(ctx, control.Node{ID: "node-3", Addr: deadAddr, Zone: "zone-d"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new routing version", 10*time.Second, func() bool { return r.RoutingVersion() > v })
	for _, b := range c.Batches(12)[4:12] {
		res, err := r.BatchGet(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		checkResults(t, c, b, res)
	}
	if n := nodeStats(r, "node-3"); n.RPCs == 0 || n.Errors != n.RPCs {
		t.Errorf("node-3 (unreachable): %d sub-requests, %d errors; want some, all failed", n.RPCs, n.Errors)
	}

	gs.Stop() // the control plane goes away
	waitFor(t, "a failed routing refresh", 10*time.Second, func() bool {
		return r.Stats().RoutingErrors > 0
	})
	for _, b := range c.Batches(12)[1:4] {
		res, err := r.BatchGet(ctx, b)
		if err != nil {
			t.Fatalf("with the control plane down: %v", err)
		}
		checkResults(t, c, b, res)
	}
}

// The router as a gRPC server speaks cobbled's Serve API.
func TestServer(t *testing.T) {
	c := startCluster(t, nil)
	r := newRouter(t, c, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := NewServer(r).GRPCServer()
	go gs.Serve(lis)
	defer gs.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), append(servepb.DialOptions(0), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cli := servepb.NewServeClient(conn)
	keys := append(append([][]byte{}, c.Batches(12)[1]...), randomKey(), c.Keys()[12])
	resp, err := cli.BatchGet(context.Background(), &servepb.BatchGetRequest{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	res := make([]Result, len(resp.Results))
	for i, x := range resp.Results {
		res[i] = Result{Found: x.Found, Value: x.Value}
		if x.Status != servepb.KeyStatus_KEY_OK {
			res[i].Err = errors.New(x.Error)
		}
	}
	checkResults(t, c, keys, res)
	_, err = cli.BatchGet(context.Background(), &servepb.BatchGetRequest{})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "empty request") {
		t.Errorf("empty request: %v", err)
	}
	// Concurrent callers each get exactly their values while the server
	// recycles the nodes' answer buffers (the window between encoding and
	// release is too short for this to catch a release before encoding:
	// it catches answers crossed between requests).
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				b := c.Batches(12)[(w*20+i)%len(c.Batches(12))]
				resp, err := cli.BatchGet(context.Background(), &servepb.BatchGetRequest{Keys: b})
				if err != nil {
					t.Error(err)
					return
				}
				for j, k := range b {
					if x := resp.Results[j]; !x.Found || !bytes.Equal(x.Value, c.Value(k)) {
						t.Errorf("key %x: found %v, %d bytes, want its %d-byte value", k, x.Found, len(x.Value), len(c.Value(k)))
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

// Many concurrent requests with hedges, failovers and a node going away
// (run with -race).
func TestConcurrent(t *testing.T) {
	c := startCluster(t, nil)
	ctx := context.Background()
	if err := c.Members()[1].Restart(ctx, cobbled.FaultDelay{Fraction: 0.2, Delay: 30 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	r := newRouter(t, c, func(o *Options) { o.HedgeInitialDelay = 5 * time.Millisecond; o.HedgeBudget = 0.5 })
	batches := c.Batches(12)
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 30 {
				if w == 0 && i == 10 {
					c.Members()[2].Kill()
				}
				b := batches[(w*30+i)%len(batches)]
				res, err := r.BatchGet(ctx, b)
				if err != nil {
					t.Error(err)
					return
				}
				checkResults(t, c, b, res)
			}
		}()
	}
	wg.Wait()
	s := r.Stats()
	if s.Requests != 180 || s.FailedKeys != 0 {
		t.Errorf("stats: %+v", s)
	}
	t.Logf("primaries %d hedges %d won %d failovers %d cancelled %d", s.Primaries, s.Hedges, s.HedgesWon, s.Failovers, s.Cancelled)
}

// A routing table with another partition count is refused: at start (an
// error), and later (the cached table stays).
func TestPartitionMismatch(t *testing.T) {
	c := startCluster(t, nil)
	_, err := New(context.Background(), Options{Source: c, Partitions: 16})
	if !errors.Is(err, ErrNoRouting) || !errors.Is(err, ErrPartitions) || !strings.Contains(err.Error(), "8 partitions, this deployment has 16") {
		t.Fatalf("got %v", err)
	}
	var mu sync.Mutex
	parts := 8
	src := RoutingFunc(func(ctx context.Context) (*control.Routing, error) {
		rt, _ := c.GetRouting(ctx)
		mu.Lock()
		defer mu.Unlock()
		if parts != 8 {
			rt.Version, rt.Partitions, rt.Replicas, rt.NewestSeq = 99, parts, append(rt.Replicas, rt.Replicas...), append(rt.NewestSeq, rt.NewestSeq...)
		}
		return rt, nil
	})
	r := newRouter(t, src, nil)
	mu.Lock()
	parts = 16
	mu.Unlock()
	if err := r.Refresh(context.Background()); !errors.Is(err, ErrPartitions) {
		t.Fatalf("refresh with 16 partitions: %v", err)
	}
	b := c.Batches(12)[0]
	res, err := r.BatchGet(context.Background(), b)
	if err != nil || r.RoutingVersion() == 99 || r.Partitions() != 8 {
		t.Fatalf("after a refused table: %v, version %d, %d partitions", err, r.RoutingVersion(), r.Partitions())
	}
	checkResults(t, c, b, res)
}

// Through the server, a key whose partition failed on every replica is a
// per-key KEY_ERROR; the others answer.
func TestServerPerKeyErrors(t *testing.T) {
	c := startCluster(t, func(o *testcluster.Options) { o.Replicas = 1 })
	r := newRouter(t, c, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := NewServer(r).GRPCServer()
	go gs.Serve(lis)
	defer gs.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), append(servepb.DialOptions(0), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c.Members()[1].Kill()
	keys := c.Batches(12)[0]
	resp, err := servepb.NewServeClient(conn).BatchGet(context.Background(), &servepb.BatchGetRequest{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	var failed int
	for i, k := range keys {
		x := resp.Results[i]
		if pillar.Partition(k, c.Partitions())%3 == 1 {
			failed++
			if x.Status != servepb.KeyStatus_KEY_ERROR || !strings.Contains(x.Error, "every replica failed") {
				t.Errorf("key %d on the dead node: %v %q", i, x.Status, x.Error)
			}
		} else if x.Status != servepb.KeyStatus_KEY_OK || !x.Found {
			t.Errorf("key %d on a live node: %v %q", i, x.Status, x.Error)
		}
	}
	if failed == 0 {
		t.Fatal("batch has no key of node-1; pick another")
	}
}

// One stalled first answer does not price a node out: until it has
// scoreSamples answers its estimate is at most 1 ms.
func TestScoreFewSamples(t *testing.T) {
	now := time.Now()
	fresh, measured := &node{}, &node{}
	for _, n := range []*node{fresh, measured} {
		n.initLatencies(512, 0.99, 0.99)
	}
	fresh.observe(50*time.Millisecond, 50*time.Millisecond, now, 12)
	for range scoreSamples {
		measured.observe(time.Millisecond, time.Millisecond, now, 12)
	}
	if f, m := fresh.score(now.UnixNano(), 0), measured.score(now.UnixNano(), 0); f > m {
		t.Errorf("one stalled answer: score %v, a measured 1 ms node %v", f, m)
	}
	for range scoreSamples {
		measured.observe(50*time.Millisecond, 50*time.Millisecond, now, 12)
		measured.observe(50*time.Millisecond, 50*time.Millisecond, now, 12)
	}
	if m := measured.score(now.UnixNano(), 0); m < float64(10*time.Millisecond) {
		t.Errorf("a node measured slow: score %v, want its median", m)
	}
}

// A primary that goes silent (a black-holed node: no answer, no error)
// whose hedge the budget refused is resent to another replica at half the
// time left to the deadline, so the read succeeds instead of failing at the
// deadline; the resend counts as a failover, and the silent node is avoided
// afterwards as after a transport error.
func TestRescueAfterDeniedHedge(t *testing.T) {
	clk := clock.NewFake(time.Time{})
	c := startCluster(t, func(o *testcluster.Options) { o.Clock = clk })
	ctx := context.Background()
	if err := c.Members()[0].Restart(ctx, cobbled.FaultDelay{Fraction: 1, Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	r := newRouter(t, c, func(o *Options) {
		o.Zone, o.Clock = "zone-a", clk
		o.HedgeInitialDelay, o.MinSamples = 5*time.Millisecond, 512
		o.HedgeBudget, o.HedgeBurst = 0.01, 1
		o.Timeout = 2 * time.Second
	})
	const base = 1 // the refresh ticker
	rescued := -1
	for i := 0; i < 8 && rescued < 0; i++ {
		k := c.Keys()[i]
		before := r.Stats()
		settle(t, clk, base)
		done := batchGetAsync(r, ctx, [][]byte{k})
		blockUntilPending(t, clk, base+3, done) // timeout, hedge timer, fault delay
		clk.Advance(5 * time.Millisecond)       // the hedge timer fires
		var out batchGetResult
		select {
		case out = <-done: // hedged within the budget
		case <-waitUntil(t, func() bool { return r.Stats().HedgesDenied > before.HedgesDenied }):
			blockUntilPending(t, clk, base+3, done) // timeout, rescue timer, fault delay
			clk.Advance(time.Second)                // half the 2 s left: the rescue fires
			out = <-done
			rescued = i
			if s := r.Stats(); s.Failovers != before.Failovers+1 {
				t.Errorf("rescue: %d failovers, want %d", s.Failovers, before.Failovers+1)
			}
		}
		if out.err != nil {
			t.Fatalf("request %d: %v", i, out.err)
		}
		checkResults(t, c, [][]byte{k}, out.res)
	}
	if rescued < 0 {
		t.Fatal("no hedge denied in 8 requests at budget 0.01")
	}
	// The silent node is avoided now: the next read is answered without
	// the clock moving.
	k := c.Keys()[rescued+1]
	settle(t, clk, base)
	select {
	case out := <-batchGetAsync(r, ctx, [][]byte{k}):
		if out.err != nil {
			t.Fatal(out.err)
		}
		checkResults(t, c, [][]byte{k}, out.res)
	case <-time.After(5 * time.Second):
		t.Fatal("the read after a rescue went to the silent node again")
	}
}

// A zone's node that stalls on a quarter of its requests (a lossy link's
// retransmission timeouts) outruns the hedge budget when it takes every
// primary: without steering, some stalls are waited out unhedged. With it,
// the router reads from the other zones once the node's stall rate passes
// StallRatio, and comes back to the node once it is healthy and the rate
// has decayed.
func TestStallingNodeSteeredAway(t *testing.T) {
	c := startCluster(t, nil)
	ctx := context.Background()
	slow := c.Members()[0] // zone-a
	if err := slow.Restart(ctx, cobbled.FaultDelay{Fraction: 0.25, Delay: 30 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	keys := c.Keys()
	read := func(r *Router, ks [][]byte) {
		for _, k := range ks {
			res, err := r.BatchGet(ctx, [][]byte{k})
			if err != nil {
				t.Fatal(err)
			}
			checkResults(t, c, [][]byte{k}, res)
		}
	}
	const n = 200
	off := newRouter(t, c, func(o *Options) { o.Zone = "zone-a"; o.StallRatio = -1 })
	read(off, keys[:n])
	so := off.Stats()
	if so.HedgesDenied < 5 || nodeStats(off, slow.ID).RPCs < n {
		t.Fatalf("steering off: %d hedges denied, %d sub-requests to %s; the fault did not outrun the budget", so.HedgesDenied, nodeStats(off, slow.ID).RPCs, slow.ID)
	}

	on := newRouter(t, c, func(o *Options) { o.Zone = "zone-a" })
	read(on, keys[:n])
	s := on.Stats()
	ns := nodeStats(on, slow.ID)
	if s.HedgesDenied > so.HedgesDenied/2 || ns.RPCs > n/2 {
		t.Errorf("steering on: %d hedges denied (off: %d), %d of %d primaries' sub-requests to the stalling %s (stall rate %.3f)",
			s.HedgesDenied, so.HedgesDenied, ns.RPCs, n, slow.ID, ns.StallRate)
	}
	t.Logf("steering off: %d hedges denied; on: %d denied, %d sub-requests to %s, stall rate %.3f (bar %.3f)", so.HedgesDenied, s.HedgesDenied, ns.RPCs, slow.ID, ns.StallRate, on.opts.StallRatio)
	if ns.StallRate <= on.opts.StallRatio/2 {
		t.Errorf("stall rate %.3f of a node stalling on 25%%, bar %.3f", ns.StallRate, on.opts.StallRatio)
	}

	// Healed: once its rate has decayed under the bar it is the zone's
	// node again and takes the primaries. Wait for half the bar: right at
	// it, one ordinary stall of the healed node (a busy machine, the race
	// detector) would put it over again.
	if err := slow.Restart(ctx, cobbled.FaultDelay{}); err != nil {
		t.Fatal(err)
	}
	awaitReady(t, on, slow.Addr)
	waitFor(t, "the stall rate to decay under half the bar", 20*time.Second, func() bool {
		return nodeStats(on, slow.ID).StallRate <= on.opts.StallRatio/2
	})
	before := nodeStats(on, slow.ID).RPCs
	read(on, keys[n:n+40])
	if got := nodeStats(on, slow.ID).RPCs - before; got < 30 {
		t.Errorf("healed %s got %d of 40 primaries, want most (its zone's)", slow.ID, got)
	}
}
