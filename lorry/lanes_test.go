package lorry

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pillarkit/pillar/cobbled"
	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/internal/clock"
	"github.com/pillarkit/pillar/pillar"
	"github.com/prometheus/client_golang/prometheus"
)

// val makes a value that carries an increasing counter n (so a test can
// tell an older value from a newer one) and pads it to size bytes.
func val(n, size int) string {
	s := fmt.Sprintf("%08d|", n)
	if len(s) < size {
		s += strings.Repeat("x", size-len(s))
	}
	return s
}

func counter(v string) int {
	n, _ := strconv.Atoi(strings.SplitN(v, "|", 2)[0])
	return n
}

// laneChain checks partition p's registered batches: ids unique, the
// ordinary batches in offset order, never overlapping, the
// fresh-lane batches each starting where the fresh position was, and
// nothing pending. It returns the batches' sources in seq order.
func (e *env) laneChain(p int, end int64) []string {
	e.t.Helper()
	var sources []string
	next, freshNext := int64(0), int64(0)
	seen := map[string]bool{}
	for _, b := range e.registered(p) {
		if seen[b.Manifest.ID] {
			e.t.Fatalf("partition %d: batch %s registered twice", p, b.Manifest.ID)
		}
		seen[b.Manifest.ID] = true
		sources = append(sources, b.Manifest.Source)
		var pp int
		var first, last int64
		switch {
		case strings.Contains(b.Manifest.Source, ":fresh:"):
			if _, err := fmt.Sscanf(b.Manifest.Source, "lorry:p%d:fresh:%d-%d", &pp, &first, &last); err != nil || pp != p {
				e.t.Fatalf("partition %d: batch %s source %q", p, b.Manifest.ID, b.Manifest.Source)
			}
			if first != max(next, freshNext) {
				e.t.Fatalf("partition %d: fresh batch %s starts at %d, the fresh position was %d", p, b.Manifest.ID, first, max(next, freshNext))
			}
			freshNext = last + 1
		case strings.Contains(b.Manifest.Source, ":replay:"):
		default:
			if _, err := fmt.Sscanf(b.Manifest.Source, "lorry:p%d:%d-%d", &pp, &first, &last); err != nil || pp != p {
				e.t.Fatalf("partition %d: batch %s source %q", p, b.Manifest.ID, b.Manifest.Source)
			}
			// A gap is a skip: offsets holding only delivered fresh
			// records and superseded bulk ones, committed without a batch.
			if first < next {
				e.t.Fatalf("partition %d: batch %s covers [%d,%d], overlapping the batches before it (up to %d): %v", p, b.Manifest.ID, first, last, next-1, sources)
			}
			next = last + 1
		}
	}
	st := e.state(p)
	if max(next, st.Offset) != end || st.Offset != end || st.Pending != nil {
		e.t.Fatalf("partition %d: batches cover [0,%d), state %+v, want offset %d and nothing pending", p, next, st, end)
	}
	return sources
}

// checkOrder applies partition p's batches one at a time, in seq order, to a
// fresh node and checks that no key's value ever goes back to an older
// counter; it returns the final values of keys.
func (e *env) checkOrder(p int, keys []string) map[string]string {
	e.t.Helper()
	ctx := context.Background()
	n, err := cobbled.Open(ctx, cobbled.Options{Dir: filepath.Join(e.t.TempDir(), "order"), Partitions: e.parts,
		CacheBytes: 8 << 20, Objects: e.objs.Store})
	must(e.t, err)
	defer n.Close()
	raws := make([][]byte, len(keys))
	for i, k := range keys {
		raws[i], _ = hex.DecodeString(k)
	}
	high := map[string]int{}
	out := map[string]string{}
	for _, b := range e.registered(p) {
		must(e.t, n.Apply(ctx, cobbled.Batch{Seq: b.Seq, Manifest: b.Manifest}))
		clear(out)
		must(e.t, n.MultiGet(p, raws, func(i int, v []byte, found bool) {
			if !found {
				return
			}
			k, c := keys[i], counter(string(v))
			if c < high[k] {
				e.t.Fatalf("partition %d: after batch %s (seq %d) key %s went back from update %d to %d", p, b.Manifest.ID, b.Seq, k, high[k], c)
			}
			high[k] = c
			out[k] = string(v)
		}))
	}
	return out
}

// TestFreshAheadOfBulk: with a bulk backlog queued before them, fresh
// records are delivered in the first batch (riding along with the first
// bulk one), and the rest of the backlog after them.
func TestFreshAheadOfBulk(t *testing.T) {
	t.Parallel()
	const parts = 2
	e := newEnv(t, parts)
	ks := keysIn(43, 0, parts)
	var rs []rec
	want := map[string]string{}
	for i, k := range ks[:40] {
		rs = append(rs, rec{key: k, val: val(i, 1000), pri: pillar.PriorityBulk})
		want[k] = val(i, 1000)
	}
	e.enqueue(rs...)
	rs = nil
	for i, k := range ks[40:] {
		rs = append(rs, rec{key: k, val: val(100+i, 100), pri: pillar.PriorityFresh})
		want[k] = val(100+i, 100)
	}
	e.enqueue(rs...)
	o := e.opts("w")
	// Every record is past MaxBatchAge on this FAKE clock (no sleep).
	o.Now = clock.NewFake(time.Now().Add(time.Second)).Now
	o.MaxBatchRecords, o.MaxBatchAge = 4, 50*time.Millisecond
	res, err := e.worker(o).Drain(context.Background())
	must(t, err)
	src := e.laneChain(0, 43)
	bs := e.registered(0)
	// The fresh records ride along with the first bulk batch (offsets 0-3
	// plus the fresh ones up to 42), ahead of the rest of the backlog.
	if !strings.HasSuffix(bs[0].Manifest.ID, "-0-3-f42") || bs[0].Manifest.Keys != 7 {
		t.Fatalf("first batch %s with %d keys, want bulk 0-3 with the 3 fresh records riding along; all: %v", bs[0].Manifest.ID, bs[0].Manifest.Keys, src)
	}
	// Then nine bulk batches, and a refresh of [40,42] (fresh records,
	// delivered already): it covers those offsets in the ordinary chain, so
	// the control plane knows everything below 43 is delivered.
	if len(src) != 11 || res.Stats.FreshBatches != 1 || res.Stats.BulkBatches != 10 || src[10] != "lorry:p0:40-42" {
		t.Fatalf("batches %v, stats %+v: want 10 bulk and a refresh of [40,42]", src, res.Stats)
	}
	if bs[10].Manifest.QueueFirst != 40 || bs[10].Manifest.QueueEnd != 43 || bs[0].Manifest.QueueEnd != 4 {
		t.Fatalf("queue ranges: refresh [%d,%d), first batch [%d,%d)", bs[10].Manifest.QueueFirst, bs[10].Manifest.QueueEnd, bs[0].Manifest.QueueFirst, bs[0].Manifest.QueueEnd)
	}
	e.checkServed(want, ks)
}

// TestPerKeyOrderAcrossLanes: a fresh record supersedes the queued bulk
// records of its key, a bulk record queued after a fresh one still lands
// after it, a fresh delete wins over an older bulk put, and no key's value
// ever goes back while the batches apply one by one.
func TestPerKeyOrderAcrossLanes(t *testing.T) {
	t.Parallel()
	const parts = 2
	e := newEnv(t, parts)
	ks := keysIn(24, 0, parts)
	A, B, C := ks[0], ks[1], ks[2]
	bulk, fresh := pillar.PriorityBulk, pillar.PriorityFresh
	rs := []rec{{key: A, val: val(1, 500), pri: bulk}, {key: B, val: val(2, 500), pri: bulk}, {key: C, val: val(3, 500), pri: bulk}}
	for i, k := range ks[3:] {
		rs = append(rs, rec{key: k, val: val(10+i, 500), pri: bulk})
	}
	rs = append(rs,
		rec{key: A, val: val(50, 50), pri: fresh},
		rec{key: A, val: val(51, 500), pri: bulk},
		rec{key: B, val: val(52, 50), pri: fresh},
		rec{key: C, del: true, pri: fresh},
	)
	e.enqueue(rs...)
	o := e.opts("w")
	// Every record is past MaxBatchAge on this FAKE clock (no sleep).
	o.Now = clock.NewFake(time.Now().Add(time.Second)).Now
	o.MaxBatchRecords, o.MaxBatchAge = 3, 50*time.Millisecond
	_, err := e.worker(o).Drain(context.Background())
	must(t, err)
	src := e.laneChain(0, int64(len(rs)))
	if id := e.registered(0)[0].Manifest.ID; !strings.HasSuffix(id, fmt.Sprintf("-f%d", len(rs)-1)) {
		t.Fatalf("first batch %s (%q), want the fresh records riding along (up to offset %d)", id, src[0], len(rs)-1)
	}
	got := e.checkOrder(0, ks)
	if counter(got[A]) != 51 || counter(got[B]) != 52 {
		t.Fatalf("A = update %d (want 51: the bulk put after the fresh one), B = %d (want 52: the fresh put superseding bulk 2)", counter(got[A]), counter(got[B]))
	}
	if _, ok := got[C]; ok {
		t.Fatalf("C = %q: the fresh delete lost to the older bulk put", got[C])
	}
}

// TestBulkMinimumShare: while fresh records wait behind a bulk backlog,
// every bulk batch carries some of them along (they are not held back by
// the backlog) but never more than 1-BulkMinShare of its bytes (the backlog
// keeps moving). The worker runs on a fixed FAKE clock and Drain delivers
// step by step, so the assertions are about the batches' order and
// proportions, not about what happens in some wall time.
func TestBulkMinimumShare(t *testing.T) {
	t.Parallel()
	const parts, nBulk, nFresh, size = 2, 60, 30, 2000
	e := newEnv(t, parts)
	ks := keysIn(nBulk+nFresh, 0, parts)
	var rs []rec
	for i, k := range ks[:nBulk] {
		rs = append(rs, rec{key: k, val: val(i, size), pri: pillar.PriorityBulk})
	}
	e.enqueue(rs...)
	rs = rs[:0]
	for i, k := range ks[nBulk:] {
		rs = append(rs, rec{key: k, val: val(1000+i, size), pri: pillar.PriorityFresh})
	}
	e.enqueue(rs...)
	o := e.opts("w")
	// A fixed clock: no batch comes of age, leases never run out; batches
	// close on MaxBatchRecords only.
	o.Now = clock.NewFake(time.Now().Add(time.Second)).Now
	o.MaxBatchRecords, o.MaxBatchAge, o.BulkMinShare = 10, time.Hour, 0.75
	_, err := e.worker(o).Drain(context.Background())
	must(t, err)
	e.laneChain(0, nBulk+nFresh)

	// Every record has the same size: byte shares are record shares.
	// Bulk records are [0,nBulk), fresh ones [nBulk,nBulk+nFresh).
	combined := regexp.MustCompile(`^lorry-.*-p00000-(\d+)-(\d+)(?:-f(\d+))?$`)
	freshNext := int64(nBulk)
	bulkBatches, bulkRecs, freshRecs := 0, int64(0), int64(0)
	for i, b := range e.registered(0) {
		m := combined.FindStringSubmatch(b.Manifest.ID)
		var first, last int64
		if m != nil {
			first, _ = strconv.ParseInt(m[1], 10, 64)
			last, _ = strconv.ParseInt(m[2], 10, 64)
		}
		if m == nil || first >= nBulk {
			continue // a fresh-lane or refresh batch, after the backlog
		}
		if i != bulkBatches {
			t.Fatalf("batch %d (%s) is the first to hold bulk records [%d,%d]: fresh batches went ahead of a ready backlog", i, b.Manifest.ID, first, last)
		}
		bulkBatches++
		nb, nf := min(last, nBulk-1)-first+1, int64(0)
		if m[3] != "" {
			fl, _ := strconv.ParseInt(m[3], 10, 64)
			nf, freshNext = fl+1-freshNext, fl+1
		}
		if float64(nb)/float64(nb+nf) < o.BulkMinShare {
			t.Fatalf("batch %s: %d bulk and %d fresh records: bulk below its %.2f share", b.Manifest.ID, nb, nf, o.BulkMinShare)
		}
		if nf == 0 && freshNext < nBulk+nFresh {
			t.Fatalf("batch %s: no fresh record rode along while %d waited behind the backlog", b.Manifest.ID, nBulk+nFresh-freshNext)
		}
		bulkRecs, freshRecs = bulkRecs+nb, freshRecs+nf
	}
	// 10 bulk records a batch carry 3 fresh ones (3 x 2064 B <= 1/3 of 10 x 2064 B).
	if bulkBatches != nBulk/10 || bulkRecs != nBulk || freshRecs != 3*nBulk/10 {
		t.Fatalf("%d bulk batches with %d bulk and %d fresh records; want %d with %d and %d", bulkBatches, bulkRecs, freshRecs, nBulk/10, nBulk, 3*nBulk/10)
	}
	got := e.checkOrder(0, ks)
	for i, k := range ks {
		want := i
		if i >= nBulk {
			want = 1000 + i - nBulk
		}
		if counter(got[k]) != want {
			t.Fatalf("key %d: update %d, want %d", i, counter(got[k]), want)
		}
	}
}

// TestCrashMidBacklogWithFreshTraffic kills Lorry repeatedly at random
// delivery steps while a bulk backlog drains and fresh updates keep
// arriving, restarting it each time: in the end every record is delivered,
// no batch is registered twice, ordinary batches cover every offset once,
// no key's value ever goes back, and every key holds its newest value.
func TestCrashMidBacklogWithFreshTraffic(t *testing.T) {
	t.Parallel()
	const parts = 2
	e := newEnv(t, parts)
	ks := keysIn(60, 1, parts)
	var mu sync.Mutex
	want := map[string]string{}
	n := 0
	for copy := 0; copy < 2; copy++ { // 120 bulk records, each key twice
		var rs []rec
		for _, k := range ks {
			n++
			rs = append(rs, rec{key: k, val: val(n, 800), pri: pillar.PriorityBulk})
			want[k] = val(n, 800)
		}
		e.enqueue(rs...)
	}
	total := int64(120)
	stopFresh := make(chan struct{})
	freshDone := make(chan struct{})
	go func() {
		defer close(freshDone)
		for {
			select {
			case <-stopFresh:
				return
			case <-time.After(7 * time.Millisecond):
			}
			k := ks[rand.IntN(len(ks))]
			mu.Lock()
			n++
			v := val(n, 80)
			mu.Unlock()
			e.enqueue(rec{key: k, val: v, pri: pillar.PriorityFresh})
			mu.Lock()
			want[k] = v
			total++
			mu.Unlock()
		}
	}()
	points := []string{"pending", "built", "uploaded", "registered", "committed", "poll"}
	for round := 0; round < 8; round++ {
		o := e.opts("lorry")
		o.MaxBatchRecords, o.MaxBatchAge, o.PollInterval = 7, 20*time.Millisecond, 10*time.Millisecond
		o.hook = crashAtNth(points[round%len(points)], 1, 2+rand.IntN(4))
		w := e.worker(o)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		done := make(chan struct{})
		go func() { defer close(done); _ = w.Run(ctx) }()
		waitFor(t, "the worker crashes or runs", 20*time.Second, func() bool {
			st := w.Stats()
			return strings.Contains(st.LastError, "injected crash") || ctx.Err() != nil
		})
		cancel()
		<-done
	}
	close(stopFresh)
	<-freshDone
	o := e.opts("lorry")
	o.MaxBatchRecords = 7
	_, err := e.worker(o).Drain(context.Background())
	must(t, err)
	e.laneChain(1, total)
	got := e.checkOrder(1, ks)
	for _, k := range ks {
		if got[k] != want[k] {
			t.Errorf("key %s: update %d, want %d", k, counter(got[k]), counter(want[k]))
		}
	}
}

// TestReplay: a replay re-delivers a delivered range as the newest value of
// each of its keys (an older record of the range never lands over a newer
// one), can be repeated, and refuses a range not delivered yet.
func TestReplay(t *testing.T) {
	t.Parallel()
	const parts = 2
	e := newEnv(t, parts)
	ks := keysIn(5, 0, parts)
	var rs []rec
	want := map[string]string{}
	for i, k := range ks {
		rs = append(rs, rec{key: k, val: val(i, 100), pri: pillar.PriorityBulk})
		want[k] = val(i, 100)
	}
	rs = append(rs, rec{key: ks[0], val: val(10, 100)}) // offset 5: a newer value of ks[0]
	want[ks[0]] = val(10, 100)
	e.enqueue(rs...)
	o := e.opts("w")
	_, err := e.worker(o).Drain(context.Background())
	must(t, err)
	before := len(e.registered(0))
	ctx := context.Background()
	if _, err := RequestReplay(ctx, e.store, 0, 0, 6, time.Now()); err == nil || !strings.Contains(err.Error(), "not delivered yet") {
		t.Fatalf("replay beyond the committed offset: %v", err)
	}
	for round := 1; round <= 2; round++ {
		req, err := RequestReplay(ctx, e.store, 0, 0, 2, time.Now())
		must(t, err)
		if _, err := RequestReplay(ctx, e.store, 0, 0, 2, time.Now()); !errors.Is(err, ErrReplayBusy) {
			t.Fatalf("a second waiting replay: %v", err)
		}
		_, err = e.worker(o).Drain(ctx)
		must(t, err)
		must(t, WaitReplay(ctx, e.store, 0, req.N, 10*time.Millisecond))
		bs := e.registered(0)
		if len(bs) != before+round {
			t.Fatalf("round %d: %d batches, want %d", round, len(bs), before+round)
		}
		if last := bs[len(bs)-1]; last.Manifest.Keys != 3 || !strings.Contains(last.Manifest.Source, ":replay:0-2:") || last.Manifest.QueueEnd != 0 {
			t.Fatalf("replay batch %+v", last.Manifest)
		}
	}
	got := e.checkOrder(0, ks)
	for _, k := range ks {
		if got[k] != want[k] {
			t.Errorf("key %s: update %d after the replays, want %d", k, counter(got[k]), counter(want[k]))
		}
	}
}

// lagSource reports every partition's replicas lag batches behind.
type lagSource struct {
	parts int
	lag   atomic.Int64
}

func (s *lagSource) GetRouting(ctx context.Context) (*control.Routing, error) {
	r := &control.Routing{Partitions: s.parts, Replicas: make([][]control.Replica, s.parts), NewestSeq: make([]int64, s.parts)}
	for p := range r.Replicas {
		r.NewestSeq[p] = 1000
		r.Replicas[p] = []control.Replica{{NodeID: "n1", AppliedSeq: 1000 - s.lag.Load()}}
	}
	return r, nil
}

// TestReplicaLagPausesBulk: while replicas lag more than MaxReplicaLag,
// bulk batches wait and fresh ones keep flowing (in fresh-lane batches);
// once the lag is gone the backlog is delivered.
func TestReplicaLagPausesBulk(t *testing.T) {
	t.Parallel()
	const parts = 2
	e := newEnv(t, parts)
	ks := keysIn(20, 0, parts)
	var rs []rec
	for i, k := range ks {
		rs = append(rs, rec{key: k, val: val(i, 300), pri: pillar.PriorityBulk})
	}
	src := &lagSource{parts: parts}
	src.lag.Store(50)
	o := e.opts("w")
	o.Replicas, o.MaxReplicaLag, o.ReplicaPoll, o.MaxBatchRecords = src, 8, 10*time.Millisecond, 5
	w := e.worker(o)
	stop := runWorker(t, w)
	defer stop()
	// Enqueue only once the watcher has read the lag (a fixed sleep was a
	// guess that a loaded machine can miss).
	waitFor(t, "the watcher read the lag", 10*time.Second, func() bool { return w.bulkPaused(0) })
	e.enqueue(rs...)
	fk := keysIn(3, 0, parts)
	for i, k := range fk {
		e.enqueue(rec{key: k, val: val(100+i, 50)})
	}
	waitFor(t, "fresh records delivered while bulk waits", 10*time.Second, func() bool { return e.state(0).FreshOffset() == 23 })
	if st := e.state(0); st.Offset != 0 {
		t.Fatalf("bulk delivered while replicas lag: %+v", st)
	}
	if bs := e.registered(0); len(bs) == 0 || !strings.Contains(bs[0].Manifest.Source, ":fresh:") {
		t.Fatalf("batches while paused: %v", bs)
	}
	src.lag.Store(0)
	waitFor(t, "backlog delivered once replicas caught up", 10*time.Second, func() bool { return e.state(0).Offset == 23 })
	stop()
	e.laneChain(0, 23)
	got := e.checkOrder(0, append(ks, fk...))
	if len(got) != 23 {
		t.Fatalf("%d keys served, want 23", len(got))
	}
}

// TestStatusByPriority: Status counts the backlog by priority from the
// store, and Report adds the live workers' latencies and loss counter. The
// worker runs on a FAKE clock one second after the commits, Drain delivers,
// and the heartbeat Run would write is written at that instant: exact
// counts and ages, no wall-clock wait.
func TestStatusByPriority(t *testing.T) {
	t.Parallel()
	const parts = 2
	e := newEnv(t, parts)
	ks := keysIn(8, 0, parts)
	var rs []rec
	for i, k := range ks[:5] {
		rs = append(rs, rec{key: k, val: val(i, 100), pri: pillar.PriorityBulk})
	}
	for i, k := range ks[5:] {
		rs = append(rs, rec{key: k, val: val(10+i, 100), pri: pillar.PriorityFresh})
	}
	e.enqueue(rs...)
	fc := clock.NewFake(time.Now().Add(time.Second))
	ctx := context.Background()
	r, err := Report(ctx, e.store, fc.Now())
	must(t, err)
	s := r.Partitions[0]
	if s.BulkBacklog != 5 || s.FreshBacklog != 3 || s.Depth != 8 || s.BulkOldestMS < 1000 || s.FreshOldestMS < 1000 || r.BulkBacklog != 5 || len(r.Workers) != 0 {
		t.Fatalf("before delivery: %+v (report %+v)", s, r)
	}
	o := e.opts("w")
	o.Now = fc.Now
	w := e.worker(o)
	_, err = w.Drain(ctx)
	must(t, err)
	must(t, w.heartbeat(ctx, fc.Now()))
	r, err = Report(ctx, e.store, fc.Now())
	must(t, err)
	// (The fresh records ride along with the first bulk batch, a refresh
	// covers [5,7].)
	if r.Depth != 0 || r.Lost != 0 || r.Partitions[0].Committed != 8 || r.Partitions[0].FreshOffset != 8 || r.Partitions[0].Pending != nil || len(r.Workers) != 1 {
		t.Fatalf("after delivery: %+v", r)
	}
	for pr, n := range map[string]int{pillar.PriorityFresh: 3, pillar.PriorityBulk: 5} {
		l := r.Workers[0].Latency[pr]
		if l.Samples != n || l.RegisteredP50 < 1000 || l.RegisteredMax < l.RegisteredP50 {
			t.Fatalf("%s latency %+v: want %d samples, each at least the 1s the fake clock stands after the commits", pr, l, n)
		}
	}
}

// TestLaneMetrics: the collectors register together, and a delivery
// records latency by priority and the backlog gauges.
func TestLaneMetrics(t *testing.T) {
	t.Parallel()
	const parts = 2
	e := newEnv(t, parts)
	m := NewMetrics()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collectors()...)
	ks := keysIn(3, 0, parts)
	e.enqueue(rec{key: ks[0], val: "a", pri: pillar.PriorityBulk}, rec{key: ks[1], val: "b"}, rec{key: ks[2], val: "c", pri: pillar.PriorityFresh})
	o := e.opts("w")
	o.Metrics = m
	_, err := e.worker(o).Drain(context.Background())
	must(t, err)
	mfs, err := reg.Gather()
	must(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range mt.GetLabel() {
				if l.GetName() == "priority" || l.GetName() == "stage" {
					name += "/" + l.GetValue()
				}
			}
			if h := mt.GetHistogram(); h != nil {
				got[name] += float64(h.GetSampleCount())
			}
			if c := mt.GetCounter(); c != nil {
				got[name] += c.GetValue()
			}
		}
	}
	if got["lorry_delivery_latency_seconds/bulk/registered"] != 1 || got["lorry_delivery_latency_seconds/fresh/registered"] != 2 || got["lorry_lost_records_total"] != 0 || got["lorry_records_total"] != 3 {
		t.Fatalf("metrics %v", got)
	}
}

// TestFreshAlone: with FreshAlone, due fresh records go in a batch of their
// own ahead of a ready bulk batch, and per-key order still holds.
func TestFreshAlone(t *testing.T) {
	t.Parallel()
	const parts = 2
	e := newEnv(t, parts)
	ks := keysIn(30, 0, parts)
	var rs []rec
	for i, k := range ks {
		rs = append(rs, rec{key: k, val: val(i, 500), pri: pillar.PriorityBulk})
	}
	for i, k := range ks[:5] {
		rs = append(rs, rec{key: k, val: val(100+i, 50), pri: pillar.PriorityFresh})
	}
	e.enqueue(rs...)
	o := e.opts("w")
	// Every record is past MaxBatchAge on this FAKE clock (no sleep).
	o.Now = clock.NewFake(time.Now().Add(time.Second)).Now
	o.MaxBatchRecords, o.MaxBatchAge, o.FreshAlone, o.BulkMinShare = 4, 50*time.Millisecond, true, 0.5
	_, err := e.worker(o).Drain(context.Background())
	must(t, err)
	src := e.laneChain(0, int64(len(rs)))
	// Four fresh records a batch (MaxBatchRecords), then the fifth: both
	// ahead of the backlog.
	if src[0] != "lorry:p0:fresh:0-33" || src[1] != "lorry:p0:fresh:34-34" {
		t.Fatalf("first batches %q, want the fresh records alone; all: %v", src[:2], src)
	}
	got := e.checkOrder(0, ks)
	for i, k := range ks[:5] {
		if counter(got[k]) != 100+i {
			t.Fatalf("key %d: update %d, want the fresh %d (superseding its bulk record)", i, counter(got[k]), 100+i)
		}
	}
}
