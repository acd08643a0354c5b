package router

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pillarkit/pillar/cobbled"
	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/objstore"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/sstbuilder"
)

// The switch between versions end to end: a real control plane (SQLite)
// on loopback, three cobbled nodes running their ingest loops against it,
// two publications exported as tagged snapshot batches, and a router
// watching the routing; readers run while the control plane promotes the
// candidate and rolls back (and forward). TestSwitchControlPlane asserts
// correctness (no failed read, never a mix, every read eventually the new
// live version); BenchmarkSwitch measures the switch time.

type switchRig struct {
	cc     *control.Client
	r      *Router
	keys   [][]byte
	stopFn []func()
}

func (s *switchRig) close() {
	for i := len(s.stopFn) - 1; i >= 0; i-- {
		s.stopFn[i]()
	}
}

// startSwitchRig starts the rig with pubA live and pubB a ready candidate.
func startSwitchRig(tb testing.TB, ropts func(*Options)) *switchRig {
	tb.Helper()
	ctx := context.Background()
	const parts, nodes = 4, 3
	dir := tb.TempDir()
	s := &switchRig{}
	fail := func(err error) {
		tb.Helper()
		if err != nil {
			s.close()
			tb.Fatal(err)
		}
	}
	store, err := control.OpenStore(ctx, "sqlite:"+filepath.Join(dir, "control.db"), &control.StoreOptions{Partitions: parts})
	fail(err)
	s.stopFn = append(s.stopFn, func() { store.Close() })
	cp, err := control.NewServer(&control.Options{Store: store, NoAuth: true})
	fail(err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	fail(err)
	gs := cp.GRPCServer()
	go gs.Serve(lis)
	s.stopFn = append(s.stopFn, gs.Stop)
	s.cc, err = control.Dial(lis.Addr().String(), nil)
	fail(err)
	s.stopFn = append(s.stopFn, func() { s.cc.Close() })

	objects := filepath.Join(dir, "objects")
	objs, err := objstore.OpenLocal(objects)
	fail(err)
	for i := range 96 {
		s.keys = append(s.keys, []byte(fmt.Sprintf("s%015d", i)))
	}
	publish := func(pub string) {
		for p := range parts {
			var rows []sstbuilder.Row
			for _, k := range s.keys {
				if pillar.Partition(k, parts) == p {
					rows = append(rows, sstbuilder.Row{Key: k, Value: []byte(valueOf(pub, k))})
				}
			}
			m, paths, err := sstbuilder.BuildPartition(ctx, sstbuilder.SliceRows(rows), &sstbuilder.BuildOptions{
				Dir: tb.TempDir(), Partition: p, Partitions: parts, Kind: batch.KindSnapshot,
				BatchID: fmt.Sprintf("snap-p%d-%s", p, strings.ReplaceAll(pub, "/", "-")), Source: "switch test"})
			fail(err)
			m.Publication = pub
			up, err := sstbuilder.Upload(ctx, objs, m, paths)
			fail(err)
			_, err = s.cc.RegisterBatch(ctx, up)
			fail(err)
		}
	}

	for i := range nodes {
		nl, err := net.Listen("tcp", "127.0.0.1:0")
		fail(err)
		n, err := cobbled.Open(ctx, cobbled.Options{ID: fmt.Sprintf("n%d", i), Zone: fmt.Sprintf("z%d", i), Addr: nl.Addr().String(),
			Dir: filepath.Join(dir, fmt.Sprintf("n%d", i)), CacheBytes: 8 << 20, Control: cobbled.FromControlClient(s.cc), Objects: objs,
			LongPoll: time.Second, Heartbeat: 100 * time.Millisecond, RetryBackoff: 10 * time.Millisecond, RetryBackoffMax: 100 * time.Millisecond})
		fail(err)
		srv := n.NewGRPCServer()
		go srv.Serve(nl)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { n.Run(rctx); close(done) }()
		s.stopFn = append(s.stopFn, func() { cancel(); <-done; srv.Stop(); n.Close() })
	}
	_, err = s.cc.RegisterPublication(ctx, pubA, true)
	fail(err)
	publish(pubA)
	s.waitRouting(tb, "A live and ready on every replica", func(rt *control.Routing) bool {
		p := rt.Publication(pubA)
		return rt.Live == pubA && p != nil && p.Ready && len(rt.Replicas[0]) == nodes
	})
	_, err = s.cc.RegisterPublication(ctx, pubB, false)
	fail(err)
	publish(pubB)
	s.waitRouting(tb, "B a ready candidate", func(rt *control.Routing) bool {
		p := rt.Publication(pubB)
		return p != nil && p.Role == control.RoleCandidate && p.Ready
	})
	o := Options{Source: s.cc}
	if ropts != nil {
		ropts(&o)
	}
	s.r, err = New(ctx, o)
	fail(err)
	s.stopFn = append(s.stopFn, func() { s.r.Close() })
	return s
}

func (s *switchRig) waitRouting(tb testing.TB, what string, cond func(*control.Routing) bool) {
	tb.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		rt, err := s.cc.GetRouting(context.Background())
		if err == nil && cond(rt) {
			return
		}
		if time.Now().After(deadline) {
			s.close()
			tb.Fatalf("timed out waiting for %s (last error %v)", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readLog is what the readers saw.
type readLog struct {
	mu     sync.Mutex
	reads  []readRec
	failed atomic.Int64
	mixed  atomic.Int64
	n      atomic.Int64
}

type readRec struct {
	start, end time.Time
	version    string
}

// readers runs c readers until stop is closed.
func (s *switchRig) readers(c int, stop <-chan struct{}, log *readLog) *sync.WaitGroup {
	var wg sync.WaitGroup
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				resp, err := s.r.Read(context.Background(), s.keys, nil)
				end := time.Now()
				log.n.Add(1)
				if err != nil {
					log.failed.Add(1)
					continue
				}
				for i, x := range resp.Results {
					if !x.Found || string(x.Value) != valueOf(resp.Version, s.keys[i]) {
						log.mixed.Add(1)
						break
					}
				}
				log.mu.Lock()
				log.reads = append(log.reads, readRec{start, end, resp.Version})
				log.mu.Unlock()
			}
		}()
	}
	return &wg
}

// switchOnce runs change (a promote or rollback) while readers run and
// returns the switch time: from just before the control-plane call until
// the end of the last read that still returned the old version (every read
// that started later returned want). It waits until 200 reads in a row
// started after the call returned want.
func (s *switchRig) switchOnce(tb testing.TB, log *readLog, want string, change func() error) time.Duration {
	tb.Helper()
	t0 := time.Now()
	if err := change(); err != nil {
		tb.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		log.mu.Lock()
		run := 0
		for i := len(log.reads) - 1; i >= 0 && log.reads[i].start.After(t0) && log.reads[i].version == want; i-- {
			run++
		}
		log.mu.Unlock()
		if run >= 200 {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("reads did not all switch to %s", want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	var last time.Time
	for _, rd := range log.reads {
		if rd.version != want && rd.end.After(last) {
			last = rd.end
		}
	}
	if last.Before(t0) {
		return 0
	}
	return last.Sub(t0)
}

// TestSwitchControlPlane: promote, rollback and roll-forward through the
// real control plane while readers run: no read fails, none mixes
// versions, and afterwards every read returns the new live version.
func TestSwitchControlPlane(t *testing.T) {
	s := startSwitchRig(t, nil)
	defer s.close()
	ctx := context.Background()
	log := &readLog{}
	stop := make(chan struct{})
	wg := s.readers(3, stop, log)
	s.switchOnce(t, log, pubB, func() error { _, err := s.cc.Promote(ctx, pubB, false); return err })
	s.switchOnce(t, log, pubA, func() error { _, err := s.cc.Rollback(ctx, false); return err })
	s.switchOnce(t, log, pubB, func() error { _, err := s.cc.Rollback(ctx, false); return err }) // roll forward
	close(stop)
	wg.Wait()
	if f, m := log.failed.Load(), log.mixed.Load(); f != 0 || m != 0 {
		t.Fatalf("%d failed and %d mixed reads of %d", f, m, log.n.Load())
	}
	vs := s.r.Stats().Versions
	if len(vs) != 2 || vs[0].Requests == 0 || vs[1].Requests == 0 || vs[0].FailedRequests+vs[1].FailedRequests != 0 {
		t.Fatalf("per-version stats %+v", vs)
	}
}

// BenchmarkSwitch measures how long after a promote or a rollback every
// router read returns the other version, with readers running (3
// closed-loop readers of 96 keys over 4 partitions × 3 replicas). One
// iteration is one switch: the first a promote, the others rollbacks
// (alternately back and forward). Reported: switch_ms_max and
// switch_ms_mean over the iterations, promote_ms (the first), failed and
// mixed reads (both must be 0).
//
//	go test -run '^$' -bench Switch -benchtime 10x ./cobbled/router/
func BenchmarkSwitch(b *testing.B) {
	s := startSwitchRig(b, nil)
	defer s.close()
	ctx := context.Background()
	log := &readLog{}
	stop := make(chan struct{})
	wg := s.readers(3, stop, log)
	var times []time.Duration
	want := pubB
	b.ResetTimer()
	for i := range b.N {
		var d time.Duration
		if i == 0 {
			d = s.switchOnce(b, log, want, func() error { _, err := s.cc.Promote(ctx, pubB, false); return err })
			b.ReportMetric(float64(d.Microseconds())/1000, "promote_ms")
		} else {
			d = s.switchOnce(b, log, want, func() error { _, err := s.cc.Rollback(ctx, false); return err })
		}
		times = append(times, d)
		want = map[string]string{pubA: pubB, pubB: pubA}[want]
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	var sum time.Duration
	for _, d := range times {
		sum += d
	}
	b.ReportMetric(float64(slices.Max(times).Microseconds())/1000, "switch_ms_max")
	b.ReportMetric(float64(sum.Microseconds())/1000/float64(len(times)), "switch_ms_mean")
	b.ReportMetric(float64(log.failed.Load()), "failed_reads")
	b.ReportMetric(float64(log.mixed.Load()), "mixed_reads")
	b.ReportMetric(float64(log.n.Load()), "reads")
}
