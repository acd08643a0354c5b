package router

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/pillarkit/pillar/cobbled"
	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/clock"
	"github.com/pillarkit/pillar/internal/objstore"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/sstbuilder"
)

// A fleet of real cobbled nodes on 127.0.0.1 holding two publications,
// each key's value naming its publication ("<pub>|<key hex>"), so any read
// shows which version answered; the routing table is the test's.
const (
	pubA = "cv1/m" // live
	pubB = "cv2/m" // candidate
)

type fleet struct {
	parts   int
	keys    [][]byte
	nodes   []*cobbled.Node
	metrics []*cobbled.Metrics
	srvs    []*grpc.Server
	addrs   []string

	mu      sync.Mutex
	rt      *control.Routing
	version int64
}

func valueOf(pub string, k []byte) string { return fmt.Sprintf("%s|%x", pub, k) }

// startFleet opens n nodes holding every partition of pubA (seq 1) and,
// on the nodes in withB, pubB (seq 2).
func startFleet(t *testing.T, n int, withB ...int) *fleet {
	t.Helper()
	return startFleetOpts(t, n, nil, withB...)
}

// startFleetOpts is startFleet with node i's options changed by nodeOpt.
func startFleetOpts(t *testing.T, n int, nodeOpt func(i int, o *cobbled.Options), withB ...int) *fleet {
	t.Helper()
	ctx := context.Background()
	f := &fleet{parts: 4}
	for i := range 48 {
		f.keys = append(f.keys, []byte(fmt.Sprintf("k%015d", i)))
	}
	objDir := t.TempDir()
	st, err := objstore.OpenLocal(objDir)
	if err != nil {
		t.Fatal(err)
	}
	build := func(p int, pub string) batch.Manifest {
		var rows []sstbuilder.Row
		for _, k := range f.keys {
			if pillar.Partition(k, f.parts) == p {
				rows = append(rows, sstbuilder.Row{Key: k, Value: []byte(valueOf(pub, k))})
			}
		}
		id := fmt.Sprintf("snap-p%d-%s", p, strings.ReplaceAll(pub, "/", "-"))
		m, paths, err := sstbuilder.BuildPartition(ctx, sstbuilder.SliceRows(rows), &sstbuilder.BuildOptions{
			Dir: t.TempDir(), Partition: p, Partitions: f.parts, Kind: batch.KindSnapshot, BatchID: id, Source: "test"})
		if err != nil {
			t.Fatal(err)
		}
		m.Publication = pub
		up, err := sstbuilder.Upload(ctx, st, m, paths)
		if err != nil {
			t.Fatal(err)
		}
		return *up
	}
	var snapA, snapB []batch.Manifest
	for p := range f.parts {
		snapA, snapB = append(snapA, build(p, pubA)), append(snapB, build(p, pubB))
	}
	for i := range n {
		m := cobbled.NewMetrics()
		o := cobbled.Options{ID: fmt.Sprintf("n%d", i), Dir: filepath.Join(t.TempDir(), "node"), Partitions: f.parts,
			CacheBytes: 8 << 20, Objects: st, Metrics: m}
		if nodeOpt != nil {
			nodeOpt(i, &o)
		}
		node, err := cobbled.Open(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		for p := range f.parts {
			if err := node.Apply(ctx, cobbled.Batch{Seq: 1, Manifest: snapA[p]}); err != nil {
				t.Fatal(err)
			}
			for _, j := range withB {
				if j == i {
					if err := node.Apply(ctx, cobbled.Batch{Seq: 2, Manifest: snapB[p]}); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := node.NewGRPCServer()
		go node.Serve(lis, srv) // gRPC and the wire protocol (TestWireVersions)
		f.nodes, f.metrics, f.srvs, f.addrs = append(f.nodes, node), append(f.metrics, m), append(f.srvs, srv), append(f.addrs, lis.Addr().String())
	}
	t.Cleanup(func() {
		for i, s := range f.srvs {
			s.Stop()
			f.nodes[i].Close()
		}
	})
	// Routing: every node holds every partition; applied seq 2 on the
	// nodes with B, 1 on the others; A live, B candidate (ready only if
	// every node has it).
	applied := make([]int64, n)
	for i := range applied {
		applied[i] = 1
	}
	for _, j := range withB {
		applied[j] = 2
	}
	f.setRouting(func(rt *control.Routing) {}, applied)
	return f
}

// setRouting rebuilds the table (new version) from applied and edit.
func (f *fleet) setRouting(edit func(*control.Routing), applied []int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.version++
	rt := &control.Routing{Version: f.version, Partitions: f.parts, Replicas: make([][]control.Replica, f.parts), NewestSeq: make([]int64, f.parts)}
	base := func(s int64) []int64 {
		b := make([]int64, f.parts)
		for i := range b {
			b[i] = s
		}
		return b
	}
	ready := true
	for p := range f.parts {
		rt.NewestSeq[p] = 2
		for i := range f.nodes {
			rt.Replicas[p] = append(rt.Replicas[p], control.Replica{NodeID: fmt.Sprintf("n%d", i), Addr: f.addrs[i], Zone: fmt.Sprintf("z%d", i), State: control.StateUp, AppliedSeq: applied[i]})
			ready = ready && applied[i] >= 2
		}
	}
	rt.Live = pubA
	rt.Publications = []control.Publication{
		{ID: pubA, Role: control.RoleLive, BaseSeq: base(1), Ready: true},
		{ID: pubB, Role: control.RoleCandidate, BaseSeq: base(2), Ready: ready},
	}
	edit(rt)
	f.rt = rt
}

func (f *fleet) GetRouting(ctx context.Context) (*control.Routing, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := *f.rt
	return &c, nil
}

// nodeVersionReads is a node's cobbled_batchget_version_requests_total for
// publication pub.
func nodeVersionReads(t testing.TB, m *cobbled.Metrics, pub string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "cobbled_batchget_version_requests_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			if mt.GetLabel()[0].GetValue() == pub {
				return mt.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// checkVersion checks that every key was read from want, found, and the
// response says so: never a mix.
func checkVersion(t testing.TB, keys [][]byte, resp *Response, err error, want string) {
	t.Helper()
	if err != nil {
		t.Fatalf("read %s: %v", want, err)
	}
	if resp.Version != want {
		t.Fatalf("read version %q, want %q", resp.Version, want)
	}
	for i, r := range resp.Results {
		if !r.Found || string(r.Value) != valueOf(want, keys[i]) {
			t.Fatalf("key %d: found=%v %q, want the value of %s", i, r.Found, r.Value, want)
		}
	}
}

// TestVersionOnlyToHolders: a request for the candidate goes only to the
// replicas that hold it (applied seq >= its base seq), fails over among
// them, and reads it for every key; the live one is read by default.
func TestVersionOnlyToHolders(t *testing.T) {
	f := startFleet(t, 3, 0, 1) // n2 has not applied B
	ctx := context.Background()
	r := newRouter(t, f, nil)
	for range 30 {
		resp, err := r.Read(ctx, f.keys, nil)
		checkVersion(t, f.keys, resp, err, pubA)
		resp, err = r.Read(ctx, f.keys, &ReadOptions{Version: pubB})
		checkVersion(t, f.keys, resp, err, pubB)
		resp, err = r.Read(ctx, f.keys, &ReadOptions{Version: AliasCandidate})
		checkVersion(t, f.keys, resp, err, pubB)
	}
	if got := nodeVersionReads(t, f.metrics[2], pubB); got != 0 {
		t.Fatalf("n2, which does not hold %s, got %v requests for it", pubB, got)
	}
	// Failover stays within the version: n0 dies; B is read from n1 only.
	f.srvs[0].Stop()
	for range 10 {
		resp, err := r.Read(ctx, f.keys, &ReadOptions{Version: pubB})
		checkVersion(t, f.keys, resp, err, pubB)
	}
	if got := nodeVersionReads(t, f.metrics[2], pubB); got != 0 {
		t.Fatalf("after failover: n2 got %v requests for %s", got, pubB)
	}
	if s := r.Stats(); len(s.Versions) != 2 || s.Versions[0].Version != pubA || s.Versions[1].Requests != 70 || s.Versions[1].Role != control.RoleCandidate || s.Live != pubA {
		t.Fatalf("version stats %+v, live %q", s.Versions, s.Live)
	}
}

// TestVersionStaleTableFallsBack: the table's applied seqs are stale (no
// replica holds B by them) but the nodes have it: the up replicas are tried
// and answer for B.
func TestVersionStaleTableFallsBack(t *testing.T) {
	f := startFleet(t, 2, 0, 1)
	f.setRouting(func(*control.Routing) {}, []int64{1, 1})
	r := newRouter(t, f, nil)
	resp, err := r.Read(context.Background(), f.keys, &ReadOptions{Version: pubB})
	checkVersion(t, f.keys, resp, err, pubB)
}

// TestVersionErrors: a version that cannot be served fails every key with
// an error naming it; nothing is sent to a node for a retired version.
func TestVersionErrors(t *testing.T) {
	f := startFleet(t, 2, 0, 1)
	f.setRouting(func(rt *control.Routing) {
		rt.Publications = append(rt.Publications,
			control.Publication{ID: "cv0/m", Role: control.RoleRetired, BaseSeq: []int64{1, 1, 1, 1}},
			control.Publication{ID: "cv3/m", Role: control.RoleCandidate, BaseSeq: []int64{0, 0, 0, 0}})
		rt.Publications[1].Role = control.RolePrevious // B previous; the new candidate cv3 has no data yet
	}, []int64{2, 2})
	r := newRouter(t, f, nil)
	ctx := context.Background()
	before := nodeVersionReads(t, f.metrics[0], "cv0/m") + nodeVersionReads(t, f.metrics[1], "cv0/m")
	for _, c := range []struct{ version, want string }{
		{"cv0/m", `version "cv0/m" is retired`},
		{"zz/top", `version "zz/top" is not a publication`},
		{"cv3/m", `version "cv3/m" has no data yet`},
		{AliasCandidate, `version "cv3/m" has no data yet`},
	} {
		resp, err := r.Read(ctx, f.keys[:5], &ReadOptions{Version: c.version})
		if !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("version %q: %v, want an error containing %s", c.version, err, c.want)
		}
		for i, x := range resp.Results {
			if !errors.Is(x.Err, ErrVersion) || !strings.Contains(x.Err.Error(), c.want) {
				t.Fatalf("version %q key %d: %v", c.version, i, x.Err)
			}
		}
	}
	if after := nodeVersionReads(t, f.metrics[0], "cv0/m") + nodeVersionReads(t, f.metrics[1], "cv0/m"); after != before {
		t.Fatalf("a retired version was sent to the nodes")
	}
	// Versions the callers made up (or retired ones) do not become metric
	// labels; a publication of the table does, even when it cannot serve.
	if vs := r.Stats().Versions; len(vs) != 2 || vs[0].Version != notServedLabel || vs[0].Requests != 2 || vs[0].FailedRequests != 2 ||
		vs[1].Version != "cv3/m" || vs[1].FailedRequests != 2 {
		t.Fatalf("version stats %+v", vs)
	}
	if _, err := r.Read(ctx, f.keys[:1], &ReadOptions{Version: strings.Repeat("v", 600)}); !errors.Is(err, ErrBadVersion) {
		t.Fatalf("a 600-byte version: %v", err)
	}
	resp, err := r.Read(ctx, f.keys, &ReadOptions{Version: AliasPrevious})
	checkVersion(t, f.keys, resp, err, pubB)
	// Options.Version is the default.
	r2 := newRouter(t, f, func(o *Options) { o.Version = AliasPrevious })
	resp, err = r2.Read(ctx, f.keys, nil)
	checkVersion(t, f.keys, resp, err, pubB)
	if _, err := New(ctx, Options{Source: f, Version: pubB, CandidateFraction: 0.5}); err == nil || !strings.Contains(err.Error(), "CandidateFraction") {
		t.Fatalf("fraction with a non-live default version: %v", err)
	}
}

// TestCandidateFraction: the A/B split sends about the fraction of
// requests to the ready candidate, or with a caller id always the same
// side per caller; a candidate that is not ready gets none.
func TestCandidateFraction(t *testing.T) {
	f := startFleet(t, 2, 0, 1)
	ctx := context.Background()
	r := newRouter(t, f, func(o *Options) { o.CandidateFraction = 0.5 })
	got := map[string]int{}
	for range 400 {
		resp, err := r.Read(ctx, f.keys[:4], nil)
		checkVersion(t, f.keys[:4], resp, err, resp.Version)
		got[resp.Version]++
	}
	if got[pubB] < 130 || got[pubB] > 270 { // 400 × 0.5 ± 7 sd
		t.Fatalf("candidate got %d of 400 requests at fraction 0.5", got[pubB])
	}
	callers := map[string]int{}
	for c := range 200 {
		caller := fmt.Sprintf("user-%d", c)
		var first string
		for i := range 5 {
			resp, err := r.Read(ctx, f.keys[:2], &ReadOptions{Caller: caller})
			checkVersion(t, f.keys[:2], resp, err, resp.Version)
			if i == 0 {
				first = resp.Version
			} else if resp.Version != first {
				t.Fatalf("caller %s read %s then %s", caller, first, resp.Version)
			}
		}
		callers[first]++
	}
	if callers[pubB] < 60 || callers[pubB] > 140 {
		t.Fatalf("candidate got %d of 200 callers at fraction 0.5", callers[pubB])
	}
	// A request naming a version, "live" too, is not split.
	for range 20 {
		resp, err := r.Read(ctx, f.keys, &ReadOptions{Version: AliasLive})
		checkVersion(t, f.keys, resp, err, pubA)
	}

	// Not ready (n1 lost it): no A/B traffic to it.
	f.setRouting(func(*control.Routing) {}, []int64{2, 1})
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		resp, err := r.Read(ctx, f.keys[:4], nil)
		checkVersion(t, f.keys[:4], resp, err, pubA)
	}
	// Per-version latency metrics, labelled by version and role.
	reg := prometheus.NewRegistry()
	reg.MustRegister(r.opts.Metrics.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() == "router_batchget_duration_seconds" {
			for _, m := range mf.GetMetric() {
				// Labels come sorted by name: role, version.
				series[m.GetLabel()[0].GetValue()+" "+m.GetLabel()[1].GetValue()] = m.GetHistogram().GetSampleCount() > 0
			}
		}
	}
	if !series["live "+pubA] || !series["candidate "+pubB] {
		t.Fatalf("latency series %v, want live %s and candidate %s", series, pubA, pubB)
	}
}

// TestSwitchNeverMixes: while readers run, the live publication flips
// A → B → A (a promote and a rollback, new routing versions): every read
// returns all its keys from the one version it names, none fails, and
// after each flip installs every read returns the new live one.
func TestSwitchNeverMixes(t *testing.T) {
	f := startFleet(t, 3, 0, 1, 2)
	ctx := context.Background()
	r := newRouter(t, f, nil)
	var stop atomic.Bool
	var reads, failed atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				resp, err := r.Read(ctx, f.keys, nil)
				reads.Add(1)
				if err != nil {
					failed.Add(1)
					continue
				}
				for i, x := range resp.Results {
					if string(x.Value) != valueOf(resp.Version, f.keys[i]) {
						select {
						case errc <- fmt.Errorf("a mix: version %q, key %d has %q", resp.Version, i, x.Value):
						default:
						}
					}
				}
			}
		}()
	}
	flip := func(live, other string) {
		f.setRouting(func(rt *control.Routing) {
			rt.Live = live
			for i := range rt.Publications {
				rt.Publications[i].Role = control.RolePrevious
				if rt.Publications[i].ID == live {
					rt.Publications[i].Role = control.RoleLive
				}
			}
		}, []int64{2, 2, 2})
		if err := r.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		for range 5 {
			resp, err := r.Read(ctx, f.keys, nil)
			checkVersion(t, f.keys, resp, err, live)
		}
	}
	more := func() { // let the readers run a while around each switch
		n := reads.Load() + 40
		waitFor(t, "reads", 30*time.Second, func() bool { return reads.Load() >= n })
	}
	more()
	flip(pubB, pubA) // promote
	more()
	flip(pubA, pubB) // rollback
	more()
	stop.Store(true)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	if failed.Load() != 0 || reads.Load() == 0 {
		t.Fatalf("%d of %d reads failed during the switches", failed.Load(), reads.Load())
	}
}

// TestServerVersion: the router's gRPC server takes the version and the
// caller id (field or x-pillar-caller metadata) and names the version read.
func TestServerVersion(t *testing.T) {
	f := startFleet(t, 2, 0, 1)
	r := newRouter(t, f, func(o *Options) { o.CandidateFraction = 0.5 })
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
	ctx := context.Background()
	check := func(resp *servepb.BatchGetResponse, err error, want string) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if resp.Version != want {
			t.Fatalf("version %q, want %q", resp.Version, want)
		}
		for i, x := range resp.Results {
			if string(x.Value) != valueOf(want, f.keys[i]) {
				t.Fatalf("key %d: %q", i, x.Value)
			}
		}
	}
	resp, err := cli.BatchGet(ctx, &servepb.BatchGetRequest{Keys: f.keys[:3], Version: "candidate"})
	check(resp, err, pubB)
	resp, err = cli.BatchGet(ctx, &servepb.BatchGetRequest{Keys: f.keys[:3], Version: pubA})
	check(resp, err, pubA)
	// One caller, by field or by metadata, always one side.
	first, err := cli.BatchGet(ctx, &servepb.BatchGetRequest{Keys: f.keys[:3], CallerId: "alice"})
	check(first, err, first.Version)
	for range 5 {
		resp, err = cli.BatchGet(metadata.AppendToOutgoingContext(ctx, CallerHeader, "alice"), &servepb.BatchGetRequest{Keys: f.keys[:3]})
		check(resp, err, first.Version)
	}
	resp, err = cli.BatchGet(ctx, &servepb.BatchGetRequest{Keys: f.keys[:3], Version: "nope/x"})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range resp.Results {
		if x.Status != servepb.KeyStatus_KEY_NOT_SERVED || !strings.Contains(x.Error, `"nope/x"`) {
			t.Fatalf("unknown version: %v", x)
		}
	}
}

// TestVersionHedgeStaysInVersion: the replica in the caller's zone (n0)
// is slow; hedges for the candidate go to the other replica holding it
// (n1), never to n2, which does not.
func TestVersionHedgeStaysInVersion(t *testing.T) {
	f := startFleetOpts(t, 3, func(i int, o *cobbled.Options) {
		if i == 0 {
			o.FaultDelay = cobbled.FaultDelay{Fraction: 1, Delay: 300 * time.Millisecond}
		}
	}, 0, 1)
	r := newRouter(t, f, func(o *Options) { o.Zone, o.HedgeBurst = "z0", 5 })
	for range 5 {
		resp, err := r.Read(context.Background(), f.keys, &ReadOptions{Version: pubB})
		checkVersion(t, f.keys, resp, err, pubB)
	}
	if s := r.Stats(); s.Hedges != 5 || s.HedgesWon != 5 {
		t.Fatalf("hedges %d, won %d; want 5 and 5", s.Hedges, s.HedgesWon)
	}
	if got := nodeVersionReads(t, f.metrics[2], pubB); got != 0 {
		t.Fatalf("n2, which does not hold %s, got %v requests for it", pubB, got)
	}
}

// TestVersionLegacyWithoutSnapshot: the legacy "" publication listed live
// with no snapshot (a log of deltas only) is still served by every
// replica, as before publications; a named one without a snapshot is not.
func TestVersionLegacyWithoutSnapshot(t *testing.T) {
	f := startFleet(t, 2, 0, 1)
	f.setRouting(func(rt *control.Routing) {
		rt.Live = ""
		rt.Publications = append(rt.Publications, control.Publication{ID: "", Role: control.RoleLive, BaseSeq: make([]int64, f.parts)})
		rt.Publications[0].Role = control.RolePrevious
	}, []int64{2, 2})
	r := newRouter(t, f, nil)
	tb := r.table.Load()
	c := r.resolve(tb, nil)
	if c.err != nil || c.id != "" || c.pub == nil {
		t.Fatalf("resolve: %+v", c)
	}
	g := &gather{r: r, t: tb, c: c}
	if allow, err := g.versionFilter(0); err != nil || allow != nil {
		t.Fatalf("legacy without a snapshot: allow %v, err %v", allow, err)
	}
	g.c = r.resolve(tb, &ReadOptions{Version: pubA})
	if allow, err := g.versionFilter(0); err != nil || len(allow) != 2 || !allow[0] || !allow[1] {
		t.Fatalf("%s: allow %v, err %v", pubA, allow, err)
	}
}

// TestVersionNotServedRemembered: the table says n0 holds the candidate
// but n0 answers KEY_NOT_SERVED (it does not have it): the read fails over
// to n1, and for EjectFor n0 is tried after the others for that version
// and partition, so it is not asked again.
func TestVersionNotServedRemembered(t *testing.T) {
	f := startFleet(t, 2, 1)                               // only n1 has B
	f.setRouting(func(*control.Routing) {}, []int64{2, 2}) // the table says both do
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	r := newRouter(t, f, func(o *Options) { o.Clock, o.DisableHedging = clk, true })
	ctx := context.Background()
	for range 20 {
		resp, err := r.Read(ctx, f.keys, &ReadOptions{Version: pubB})
		checkVersion(t, f.keys, resp, err, pubB)
	}
	// One sub-request per partition at most reached n0 (the first time it
	// was picked for it); A reads still go to n0.
	if got := nodeVersionReads(t, f.metrics[0], "(not held)") + nodeVersionReads(t, f.metrics[0], pubB); got > float64(f.parts) {
		t.Fatalf("n0 was asked for %s %v times; want at most once per partition (%d)", pubB, got, f.parts)
	}
	for range 20 {
		resp, err := r.Read(ctx, f.keys, &ReadOptions{Version: pubA})
		checkVersion(t, f.keys, resp, err, pubA)
	}
	if nodeVersionReads(t, f.metrics[0], pubA) == 0 {
		t.Fatalf("n0 got no reads of %s", pubA)
	}
	if n := r.Stats(); n.Failovers == 0 {
		t.Fatalf("no failover recorded: %+v", n)
	}
}
