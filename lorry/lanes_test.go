package lorry

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
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
// ordinary batches in offset order, never overlapping, the fresh-lane
// batches each starting where the fresh position was (past the fresh ones
// before it), and nothing pending. It returns the batches' sources in seq order.
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
			// It starts at the fresh position of its plan: past the fresh
			// batches before it, and at most past the ordinary ones
			// registered before it (one registered in the background may
			// not have been committed yet when it was planned).
			if first < freshNext || first > max(next, freshNext) {
				e.t.Fatalf("partition %d: fresh batch %s starts at %d; the fresh lane was at %d, the ordinary batches at %d", p, b.Manifest.ID, first, freshNext, next)
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
			// Fresh records riding along (CombinedBatchID, "-f<last>"):
			// the fresh lane moves past them.
			var f0, f1, fl int64
			if i := strings.Index(b.Manifest.ID, fmt.Sprintf("-p%05d-", p)); i >= 0 {
				if n, _ := fmt.Sscanf(b.Manifest.ID[i:], fmt.Sprintf("-p%05d-%%d-%%d-f%%d", p), &f0, &f1, &fl); n == 3 {
					if f0 != first || f1 != last || fl <= last {
						e.t.Fatalf("partition %d: batch %s (source %q): riders to %d", p, b.Manifest.ID, b.Manifest.Source, fl)
					}
					freshNext = max(freshNext, fl+1)
				}
			}
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
// records are delivered in the first batch (a fresh-lane batch of their
// own), and the backlog after them.
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
	o.FreshRideWait = -1 // the fresh lane alone (riding: ride_test.go)
	res, err := e.worker(o).Drain(context.Background())
	must(t, err)
	src := e.laneChain(0, 43)
	bs := e.registered(0)
	// The fresh records go first, in a fresh-lane batch of their own,
	// ahead of the whole backlog.
	if src[0] != "lorry:p0:fresh:0-42" || bs[0].Manifest.Keys != 3 || bs[0].Manifest.QueueEnd != 0 {
		t.Fatalf("first batch %s (%q) with %d keys, want the 3 fresh records alone; all: %v", bs[0].Manifest.ID, src[0], bs[0].Manifest.Keys, src)
	}
	// Then ten bulk batches, and a refresh of [40,42] (fresh records,
	// delivered already): it covers those offsets in the ordinary chain, so
	// the control plane knows everything below 43 is delivered.
	if len(src) != 12 || res.Stats.FreshBatches != 2 || res.Stats.BulkBatches != 10 || src[11] != "lorry:p0:40-42" {
		t.Fatalf("batches %v, stats %+v: want a fresh one, 10 bulk and a refresh of [40,42]", src, res.Stats)
	}
	if bs[11].Manifest.QueueFirst != 40 || bs[11].Manifest.QueueEnd != 43 || bs[1].Manifest.QueueFirst != 0 || bs[1].Manifest.QueueEnd != 4 {
		t.Fatalf("queue ranges: refresh [%d,%d), first bulk batch [%d,%d)", bs[11].Manifest.QueueFirst, bs[11].Manifest.QueueEnd, bs[1].Manifest.QueueFirst, bs[1].Manifest.QueueEnd)
	}
	e.checkServed(want, ks)
}

// TestPerKeyOrderAcrossLanes: a fresh record supersedes the queued bulk
// records of its key, a bulk record queued after a fresh one still lands
// after it, a fresh delete wins over an older bulk put, and no key's value
// ever goes back while the batches apply one by one.
func TestPerKeyOrderAcrossLanes(t *testing.T) {
	t.Parallel()
	for _, ride := range []time.Duration{-1, time.Minute} {
		t.Run(fmt.Sprintf("ride=%v", ride), func(t *testing.T) {
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
			// Every record is past MaxBatchAge on this FAKE clock (no
			// sleep); with riding on, none is past FreshRideWait, so the
			// fresh records ride the first bulk batch.
			o.Now = clock.NewFake(time.Now().Add(time.Second)).Now
			// (4 a batch: the 3 fresh records are not a full batch, which
			// would go alone.)
			o.MaxBatchRecords, o.MaxBatchAge, o.FreshRideWait = 4, 50*time.Millisecond, ride
			_, err := e.worker(o).Drain(context.Background())
			must(t, err)
			src := e.laneChain(0, int64(len(rs)))
			first := fmt.Sprintf("lorry:p0:fresh:0-%d", len(rs)-1)
			if ride > 0 {
				first = "lorry:p0:0-3"
				if id := e.registered(0)[0].Manifest.ID; !strings.HasSuffix(id, fmt.Sprintf("-0-3-f%d", len(rs)-1)) {
					t.Fatalf("first batch %s, want the fresh records riding it", id)
				}
			}
			if src[0] != first {
				t.Fatalf("first batch %q, want %q; all: %v", src[0], first, src)
			}
			got := e.checkOrder(0, ks)
			if counter(got[A]) != 51 || counter(got[B]) != 52 {
				t.Fatalf("A = update %d (want 51: the bulk put after the fresh one), B = %d (want 52: the fresh put superseding bulk 2)", counter(got[A]), counter(got[B]))
			}
			if _, ok := got[C]; ok {
				t.Fatalf("C = %q: the fresh delete lost to the older bulk put", got[C])
			}
		})
	}
}

// TestFreshWhileBulkInFlight: the fresh lane has a slot of its own: while
// a bulk batch's upload hangs, fresh records are built, uploaded,
// registered and committed, except the one of a key the bulk batch holds,
// which waits for the bulk batch's registration (and then lands after it).
// Once the upload goes through, everything is delivered and no key's value
// ever goes back.
func TestFreshWhileBulkInFlight(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	ks := keysIn(10, 0, 1)
	var rs []rec
	for i, k := range ks[:8] {
		rs = append(rs, rec{key: k, val: val(i, 500), pri: pillar.PriorityBulk})
	}
	e.enqueue(rs...)
	gate := make(chan struct{})
	e.objs.blockOrdinary(gate)
	o := e.opts("w")
	o.MaxBatchRecords = 4
	o.FreshRideWait = -1 // fresh batches of their own past the hanging bulk batch
	w := e.worker(o)
	runWorker(t, w)
	waitFor(t, "the first bulk batch's upload hanging", 20*time.Second, func() bool {
		st := e.state(0)
		return st.Pending != nil && st.Pending.First == 0 && st.Pending.Last == 3 && e.objs.blocked.Load() > 0
	})
	// ks[4] is in the bulk backlog (not in flight), ks[0] in the batch in
	// flight.
	e.enqueue(rec{key: ks[8], val: val(100, 50)}, rec{key: ks[9], val: val(101, 50)}, rec{key: ks[4], val: val(102, 50)}, rec{key: ks[0], val: val(103, 50)})
	waitFor(t, "the fresh records of other keys delivered past the hanging bulk batch", 20*time.Second, func() bool {
		return e.state(0).FreshOffset() == 11
	})
	st := e.state(0)
	if st.Pending == nil || st.Pending.Last != 3 || st.Offset != 0 || st.FreshPending != nil {
		t.Fatalf("state %+v, want the bulk batch [0,3] still pending, the fresh lane at 11", st)
	}
	if src := e.sources(0); len(src) != 1 || src[0] != "lorry:p0:fresh:0-10" {
		t.Fatalf("registered %v, want only the fresh batch of offsets 8-10 (ks[0]'s fresh record waits for the bulk batch holding ks[0])", src)
	}
	close(gate)
	waitFor(t, "everything delivered", 20*time.Second, func() bool { st := e.state(0); return st.Offset == 12 && st.Pending == nil })
	src := e.laneChain(0, 12)
	// Once the bulk batch is registered, either lane may carry offset 11
	// (the fresh lane, or the bulk lane reaching it first): it must come
	// after the bulk batch.
	if src[1] != "lorry:p0:0-3" || !slices.ContainsFunc(src[2:], func(b string) bool { return batchCovers(b, 11) }) {
		t.Fatalf("batches %v: want the bulk batch [0,3], then (after it) ks[0]'s fresh record", src)
	}
	got := e.checkOrder(0, ks)
	for i, want := range map[int]int{0: 103, 1: 1, 4: 102, 7: 7, 8: 100, 9: 101} {
		if counter(got[ks[i]]) != want {
			t.Fatalf("key %d: update %d, want %d; batches %v", i, counter(got[ks[i]]), want, src)
		}
	}
}

// TestFreshLaneRules: with an ordinary batch in flight, the fresh lane's
// batch ends before the first record of a key the batch in flight holds
// (none when that is the first); a bulk plan leaves out the keys with a
// fresh record queued; while replicas lag, bulk waits unless its share of
// the recently delivered bytes is below BulkMinShare. On a fixed FAKE
// clock, by the loop's own rules (no store).
func TestFreshLaneRules(t *testing.T) {
	fc := clock.NewFake(time.Now())
	o := Options{BulkMinShare: 0.25, MaxBatchAge: time.Second, MaxBatchBytes: 1 << 20, MaxBatchRecords: 2,
		FreshBulkBatchBytes: 1 << 20, MaxReplicaLag: 8, Now: fc.Now}
	w := &Worker{o: o, storeID: "s", tr: newTracker()}
	ks := keysIn(4, 0, 1)
	old := fc.Now().Add(-2 * time.Second).UnixMilli()
	fresh := func(off int64, k string) pillar.ExportRecord {
		return pillar.ExportRecord{Offset: off, PageKey: k, Op: pillar.OpPut, Value: []byte("v"), CommittedAt: old, Priority: pillar.PriorityFresh}
	}
	lp := &loop{w: w, pt: &part{drainTo: -1}, shareAt: fc.Now(), freshMax: map[string]int64{}}
	lp.l = &lease{w: w, st: PartitionState{Pending: &Pending{ID: "b", First: 0, Last: 3}}}
	lp.bfl = &flight{pl: &plan{}, keys: map[string]bool{"\x00" + ks[1]: true}}
	lp.fbuf = []pillar.ExportRecord{fresh(5, ks[0]), fresh(6, ks[1]), fresh(7, ks[2])}
	pl := lp.nextFresh()
	if pl == nil || len(pl.recs) != 1 || pl.pend.Lane != LaneFresh || pl.pend.First != 0 || pl.pend.Last != 5 {
		t.Fatalf("fresh batch %+v, want offset 5 alone (6's key is in the batch in flight)", pl)
	}
	lp.fbuf = lp.fbuf[1:]
	if pl := lp.nextFresh(); pl != nil || !lp.held {
		t.Fatalf("fresh batch %+v starting with a key of the batch in flight", pl)
	}

	// The bulk plan, with the slot free: ks[3] has a fresh record queued
	// (a head not fetched yet), so its bulk record is left out.
	lp.bfl, lp.l.st.Pending = nil, nil
	lp.fbuf = nil
	lp.fresh = []head{{off: 9, key: "\x00" + ks[3]}}
	lp.bbuf = []pillar.ExportRecord{
		{Offset: 0, PageKey: ks[2], Op: pillar.OpPut, Value: []byte("b"), Priority: pillar.PriorityBulk},
		{Offset: 1, PageKey: ks[3], Op: pillar.OpPut, Value: []byte("b"), Priority: pillar.PriorityBulk},
	}
	lp.bnext = 2
	if !lp.bulkDue() {
		t.Fatal("a full bulk batch is not due")
	}
	bp := lp.bulkPlan()
	if len(bp.recs) != 1 || bp.recs[0].PageKey != ks[2] || bp.pend.First != 0 || bp.pend.Last != 1 {
		t.Fatalf("bulk plan %+v, want [0,1] holding ks[2] only", bp)
	}

	// Replicas lag: bulk waits while it had its share of the bytes, and
	// goes when below it.
	w.o.Replicas = &control.Client{}
	w.tr.part(0).known, w.tr.part(0).lag = true, 100
	lp.share = [2]float64{1, 9}
	if lp.bulkDue() {
		t.Fatal("bulk due while replicas lag and bulk had 90% of the bytes")
	}
	lp.share = [2]float64{9, 1}
	if !lp.bulkDue() {
		t.Fatal("bulk starved: not due while replicas lag with 10% of the bytes (min share 25%)")
	}
}

// TestSupersedeIsPerPublication: a fresh record supersedes bulk records of
// its key in its own publication only: a republish into a candidate
// publication (bulk) still delivers a key that a crawl update of the live
// one (fresh, queued after it) also carries.
func TestSupersedeIsPerPublication(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	ks := keysIn(3, 0, 1)
	const live, cand = "c1/hash-d8-aaaa", "c2/hash-d8-bbbb"
	e.enqueue(rec{key: ks[0], val: "cand0", pub: cand, pri: pillar.PriorityBulk}, rec{key: ks[1], val: "live1", pub: live, pri: pillar.PriorityBulk},
		rec{key: ks[2], val: "cand2", pub: cand, pri: pillar.PriorityBulk})
	e.enqueue(rec{key: ks[0], val: "live0", pub: live}, rec{key: ks[1], val: "live1b", pub: live})
	o := e.opts("w")
	o.Now = clock.NewFake(time.Now().Add(time.Second)).Now
	_, err := e.worker(o).Drain(context.Background())
	must(t, err)
	keys := map[string]int64{}
	for _, b := range e.registered(0) {
		keys[b.Manifest.Publication] += b.Manifest.Keys
	}
	// cand: ks[0] and ks[2] (ks[0]'s fresh record is the live one's); live:
	// ks[0] and ks[1] once each (ks[1]'s bulk record superseded), plus
	// whatever a refresh re-delivers.
	if keys[cand] != 2 || keys[live] < 2 {
		t.Fatalf("keys by publication %v, want 2 for %s (its republish not superseded by the other's fresh records)", keys, cand)
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
	dctx, dcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer dcancel()
	dw := e.worker(o)
	_, err := dw.Drain(dctx)
	if err != nil {
		t.Fatalf("drain: %v; state %+v; stats %+v", err, e.state(1), dw.Stats())
	}
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
	// Bulk keeps BulkMinShare of the delivered bytes while replicas lag: a
	// bulk lane that has delivered nothing has share 0, so one bulk batch
	// may follow the first fresh delivery; with a tiny share no second one.
	o.BulkMinShare = 1e-6
	w := e.worker(o)
	stop := runWorker(t, w)
	defer stop()
	// Enqueue only once the watcher has read the lag (a fixed sleep was a
	// guess that a loaded machine can miss).
	waitFor(t, "the watcher read the lag", 10*time.Second, func() bool { return w.bulkPaused(0, true) })
	e.enqueue(rs...)
	fk := keysIn(3, 0, parts)
	for i, k := range fk {
		e.enqueue(rec{key: k, val: val(100+i, 50)})
	}
	waitFor(t, "fresh records delivered while bulk waits", 10*time.Second, func() bool { return e.state(0).FreshOffset() == 23 })
	if st := e.state(0); st.Offset > int64(o.MaxBatchRecords) {
		t.Fatalf("bulk delivered more than one batch (its minimum share) while replicas lag: %+v", st)
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

// appliedSource reports every partition's replicas at one applied seq.
type appliedSource struct {
	parts   int
	applied atomic.Int64
}

func (s *appliedSource) GetRouting(ctx context.Context) (*control.Routing, error) {
	r := &control.Routing{Partitions: s.parts, Replicas: make([][]control.Replica, s.parts), NewestSeq: make([]int64, s.parts)}
	for p := range r.Replicas {
		r.NewestSeq[p] = 1 << 40
		r.Replicas[p] = []control.Replica{{NodeID: "n1", AppliedSeq: s.applied.Load()}}
	}
	return r, nil
}

// TestBulkUnappliedPausesBulk: with MaxBulkUnapplied 1, while fresh
// records flow, a partition's bulk lane waits while one of its bulk
// batches is registered and not applied on every replica; fresh batches
// (which do not count) keep flowing; once the replicas apply, the backlog
// is delivered. (Riding is off: a bulk batch carrying fresh records whose
// ride wait ran out would go despite the bound, see TestRideRules.)
func TestBulkUnappliedPausesBulk(t *testing.T) {
	t.Parallel()
	const parts = 2
	e := newEnv(t, parts)
	ks := keysIn(20, 0, parts)
	var rs []rec
	for i, k := range ks {
		rs = append(rs, rec{key: k, val: val(i, 300), pri: pillar.PriorityBulk})
	}
	src := &appliedSource{parts: parts}
	o := e.opts("w")
	o.Replicas, o.MaxReplicaLag, o.MaxBulkUnapplied, o.ReplicaPoll, o.MaxBatchRecords = src, -1, 1, 10*time.Millisecond, 5
	o.BulkMinShare = 1e-6 // the share lets no extra bulk batch through
	o.FreshRideWait = -1
	w := e.worker(o)
	stop := runWorker(t, w)
	defer stop()
	// A fresh record queued with the backlog: fresh records flow (the
	// bound holds bulk only then, for 2s after the last one seen).
	fk := keysIn(3, 0, parts)
	e.enqueue(append(rs, rec{key: fk[0], val: val(100, 50)})...)
	waitFor(t, "one bulk batch delivered", 10*time.Second, func() bool { return e.state(0).Offset > 0 })
	for i, k := range fk[1:] {
		e.enqueue(rec{key: k, val: val(101+i, 50)})
	}
	waitFor(t, "fresh records delivered while bulk waits", 10*time.Second, func() bool { return e.state(0).FreshOffset() == 23 })
	// One bulk batch (nothing unapplied yet), perhaps a second: the one
	// its commit records as the follow-up goes when the fresh batch of
	// fk[0] was delivered before that commit (bulk's share of the
	// delivered bytes is 0 then, below BulkMinShare). Then bulk waits.
	if st := e.state(0); st.Offset != int64(o.MaxBatchRecords) && st.Offset != 2*int64(o.MaxBatchRecords) {
		t.Fatalf("bulk delivered %d records while its batches are unapplied, want one or two batches of %d: %+v", st.Offset, o.MaxBatchRecords, st)
	}
	if !w.bulkPaused(0, true) {
		t.Fatal("bulk lane not paused with an unapplied bulk batch")
	}
	src.applied.Store(1 << 40)
	waitFor(t, "backlog delivered once replicas applied", 10*time.Second, func() bool { return e.state(0).Offset == 23 })
	stop()
	e.laneChain(0, 23)
	if got := e.checkOrder(0, append(ks, fk...)); len(got) != 23 {
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

// TestFreshGoesAlone: due fresh records go in a batch of their own ahead of
// a ready bulk batch, and per-key order still holds.
func TestFreshGoesAlone(t *testing.T) {
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
	o.MaxBatchRecords, o.MaxBatchAge = 4, 50*time.Millisecond
	o.FreshRideWait = -1 // the fresh lane alone (riding: ride_test.go)
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

// TestFreshPendingOfAnOlderVersion: a fresh batch recorded in Pending (as
// versions without the fresh slot did) moves to FreshPending at takeover
// and is delivered as recorded; nothing stays pending.
func TestFreshPendingOfAnOlderVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	ks := keysIn(4, 0, 1)
	e.enqueue(rec{key: ks[0], val: "b0", pri: pillar.PriorityBulk}, rec{key: ks[1], val: "b1", pri: pillar.PriorityBulk})
	e.enqueue(rec{key: ks[2], val: "f2"}, rec{key: ks[0], val: "f0"})
	ctx := context.Background()
	sid, err := storeID(ctx, e.store)
	must(t, err)
	old := Pending{ID: FreshBatchID(sid, 0, 0, 3), First: 0, Last: 3, Lane: LaneFresh}
	_, err = update(ctx, e.store, 0, func(cur PartitionState) (PartitionState, error) {
		cur.Pending = &old
		return cur, nil
	})
	must(t, err)
	o := e.opts("w")
	o.Now = clock.NewFake(time.Now().Add(time.Second)).Now
	_, err = e.worker(o).Drain(ctx)
	must(t, err)
	src := e.laneChain(0, 4)
	if src[0] != "lorry:p0:fresh:0-3" {
		t.Fatalf("batches %v: want the recorded fresh batch first", src)
	}
	if st := e.state(0); st.Pending != nil || st.FreshPending != nil || st.Offset != 4 {
		t.Fatalf("state %+v", st)
	}
	got := e.checkOrder(0, ks)
	if got[ks[0]] != "f0" || got[ks[1]] != "b1" || got[ks[2]] != "f2" {
		t.Fatalf("served %v", got)
	}
}

// TestSteadyFreshOnFewKeys: fresh updates of a few keys arrive steadily
// while a bulk backlog of the same keys drains and after it (fresh batches
// recorded by the previous fresh commit, bulk batches flying, fresh records
// made ordinary batches once the backlog is gone): applied batch by batch,
// no key ever goes back, and each ends with its newest update.
func TestSteadyFreshOnFewKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	ks := keysIn(4, 0, 1)
	n := 0
	want := map[string]string{}
	var rs []rec
	for i := 0; i < 21; i++ {
		n++
		k := ks[i%len(ks)]
		rs = append(rs, rec{key: k, val: val(n, 300), pri: pillar.PriorityBulk})
		want[k] = val(n, 300)
	}
	e.enqueue(rs...)
	o := e.opts("w")
	o.MaxBatchRecords, o.MaxBatchAge = 7, 15*time.Millisecond
	w := e.worker(o)
	stop := runWorker(t, w)
	for i := 0; i < 60; i++ {
		n++
		k := ks[i%3]
		e.enqueue(rec{key: k, val: val(n, 40)})
		want[k] = val(n, 40)
		time.Sleep(3 * time.Millisecond)
	}
	end := int64(21 + 60)
	waitFor(t, "everything delivered", 30*time.Second, func() bool {
		st := e.state(0)
		return st.Offset == end && st.Pending == nil && st.FreshPending == nil
	})
	stop()
	e.laneChain(0, end)
	got := e.checkOrder(0, ks)
	for _, k := range ks {
		if got[k] != want[k] {
			t.Errorf("key %s: update %d, want %d", k, counter(got[k]), counter(want[k]))
		}
	}
}

// TestFollowUpAfterRecordedFresh: a bulk batch's files finish uploading
// while a fresh batch is recorded (FreshPending, the follow-up of the last
// fresh commit) and more fresh records of the same key are due: the bulk
// batch finishes first, then the recorded fresh batch, then the rest.
// Applied batch by batch, the key never goes back and ends with its newest
// update. (The interleaving that broke order — the bulk batch's follow-up
// making the due fresh records an ordinary batch from the fresh position —
// needs the bulk lane to have nothing left there; the loop now plans no
// fresh batch at all while one is recorded.)
func TestFollowUpAfterRecordedFresh(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	ks := keysIn(5, 0, 1)
	var rs []rec
	for i, k := range ks[:4] {
		rs = append(rs, rec{key: k, val: val(i, 300), pri: pillar.PriorityBulk})
	}
	e.enqueue(rs...)
	gate := make(chan struct{})
	e.objs.blockOrdinary(gate)
	o := e.opts("w")
	o.MaxBatchRecords, o.MaxBatchAge = 4, 10*time.Millisecond
	var once sync.Once
	o.hook = func(point string, p int) error {
		if point != "committed" {
			return nil
		}
		// The first commit is the first fresh batch's (the bulk batch
		// hangs): it recorded the second one. Let the bulk batch's
		// upload finish before the loop goes on.
		once.Do(func() {
			close(gate)
			deadline := time.Now().Add(10 * time.Second)
			for e.objs.ordinaryPuts.Load() < 1 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(100 * time.Millisecond)
		})
		return nil
	}
	w := e.worker(o)
	runWorker(t, w)
	waitFor(t, "the bulk batch's upload hanging", 20*time.Second, func() bool {
		st := e.state(0)
		return st.Pending != nil && e.objs.blocked.Load() > 0
	})
	rs = nil
	for i := 0; i < 12; i++ {
		rs = append(rs, rec{key: ks[4], val: val(100+i, 40)})
	}
	e.enqueue(rs...)
	waitFor(t, "everything delivered", 20*time.Second, func() bool {
		st := e.state(0)
		return st.Offset == 16 && st.Pending == nil && st.FreshPending == nil
	})
	e.laneChain(0, 16)
	if got := e.checkOrder(0, ks); counter(got[ks[4]]) != 111 {
		t.Fatalf("fresh key: update %d, want 111; batches %v", counter(got[ks[4]]), e.sources(0))
	}
}

// TestRecordedPendingNotStarvedByFreshTraffic: a crashed run left an
// ordinary batch and a fresh one recorded; the restarted worker delivers
// the fresh one, then the ordinary one, while fresh records keep arriving
// (they must not chain fresh batches ahead of it for ever; this loaded
// interleaving is what chaos hit, the test does not force it).
func TestRecordedPendingNotStarvedByFreshTraffic(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	ks := keysIn(6, 0, 1)
	var rs []rec
	for i, k := range ks[:4] {
		rs = append(rs, rec{key: k, val: val(i, 300), pri: pillar.PriorityBulk})
	}
	e.enqueue(rs...)
	e.enqueue(rec{key: ks[4], val: val(10, 40)})
	ctx := context.Background()
	sid, err := storeID(ctx, e.store)
	must(t, err)
	_, err = update(ctx, e.store, 0, func(cur PartitionState) (PartitionState, error) {
		cur.Pending = &Pending{ID: BatchID(sid, 0, 0, 3), First: 0, Last: 3}
		cur.FreshPending = &Pending{ID: FreshBatchID(sid, 0, 0, 4), First: 0, Last: 4, Lane: LaneFresh}
		return cur, nil
	})
	must(t, err)
	stopFresh := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stopFresh:
				return
			case <-time.After(2 * time.Millisecond):
			}
			e.enqueue(rec{key: ks[5], val: val(100+i, 40)})
		}
	}()
	defer func() { close(stopFresh); <-done }()
	o := e.opts("w")
	o.MaxBatchAge = time.Millisecond
	runWorker(t, e.worker(o))
	waitFor(t, "the recorded ordinary batch delivered while fresh records keep coming", 20*time.Second, func() bool {
		return e.state(0).Offset >= 4
	})
}

// TestBulkWaitsForHeadScan: the bulk lane plans nothing before the head
// scan reached the end of the queue it first saw, so fresh records behind
// a bulk backlog are found before any bulk batch is planned (one planned
// earlier flies ahead of them, and they wait behind it on every replica).
func TestBulkWaitsForHeadScan(t *testing.T) {
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
	o.Now = clock.NewFake(time.Now().Add(time.Second)).Now
	o.MaxBatchRecords, o.MaxBatchAge = 4, 50*time.Millisecond
	o.HeadChunk = 4 // the scan takes 11 reads
	o.FreshRideWait = -1
	var w *Worker
	var once sync.Once
	scannedAtFirstBulk := int64(-1)
	o.hook = func(point string, p int) error {
		if point == "pending" && p == 0 && e.state(0).Pending != nil {
			once.Do(func() { scannedAtFirstBulk = w.Stats().Scanned })
		}
		return nil
	}
	w = e.worker(o)
	res, err := w.Drain(context.Background())
	must(t, err)
	if scannedAtFirstBulk < 43 {
		t.Fatalf("the first bulk batch was recorded after %d heads were scanned, want the whole queue (43) first", scannedAtFirstBulk)
	}
	if res.Stats.Scanned < 43 {
		t.Fatalf("stats: scanned %d heads, want at least 43", res.Stats.Scanned)
	}
	src := e.laneChain(0, 43)
	if src[0] != "lorry:p0:fresh:0-42" {
		t.Fatalf("first batch %q, want the fresh records alone; all: %v", src[0], src)
	}
	e.checkServed(want, ks)
}

// TestBulkWaitsOnlyForFirstEnd: the bulk lane waits for the end of the
// queue the head scan first saw, not for the queue's current end: while
// records come faster than the scan reads them, bulk still starts. (The
// records that come are bulk ones: fresh ones this fast would keep the
// fresh lane busy and bulk waiting for that reason.)
func TestBulkWaitsOnlyForFirstEnd(t *testing.T) {
	t.Parallel()
	const parts = 2
	e := newEnv(t, parts)
	ks := keysIn(52, 0, parts)
	var rs []rec
	for i, k := range ks[:40] {
		rs = append(rs, rec{key: k, val: val(i, 1000), pri: pillar.PriorityBulk})
	}
	e.enqueue(rs...)
	o := e.opts("w")
	o.MaxBatchRecords = 4
	o.HeadChunk = 4
	o.FreshRideWait = -1
	o.Partitions = []int{0}
	// The scan's shared snapshot is at most half a poll old: each read
	// sees the records the poll before enqueued.
	o.PollInterval = time.Millisecond
	const polls = 40
	var w *Worker
	var mu sync.Mutex
	n, scannedAtFirstBulk, enqueuedAtFirstBulk := 0, int64(-1), -1
	o.hook = func(point string, p int) error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case point == "poll" && n < polls:
			// 12 records a poll: more than a poll's scan reads (one
			// chunk of 4, and one per follow-up), so the scan never
			// reaches the current end while they come.
			var fr []rec
			for j := range 12 {
				fr = append(fr, rec{key: ks[40+j], val: val(1000+12*n+j, 100), pri: pillar.PriorityBulk})
			}
			n++
			e.enqueue(fr...)
		case point == "pending" && enqueuedAtFirstBulk < 0 && e.state(0).Pending != nil:
			scannedAtFirstBulk, enqueuedAtFirstBulk = w.Stats().Scanned, n
		}
		return nil
	}
	w = e.worker(o)
	stop := runWorker(t, w)
	waitFor(t, "the backlog delivered", 60*time.Second, func() bool { return e.state(0).Offset >= 40 })
	stop()
	mu.Lock()
	defer mu.Unlock()
	if enqueuedAtFirstBulk < 0 || enqueuedAtFirstBulk >= polls {
		t.Fatalf("the first bulk batch was recorded after %d of %d polls that enqueued (%d heads scanned): bulk waited for the queue's current end", enqueuedAtFirstBulk, polls, scannedAtFirstBulk)
	}
	if scannedAtFirstBulk < 40 {
		t.Fatalf("the first bulk batch was recorded after %d heads scanned, want at least the 40 first seen", scannedAtFirstBulk)
	}
	if st := w.Stats(); st.ScanTime <= 0 || st.HeadScan <= 0 {
		t.Fatalf("stats: %d heads scanned in %v, first scan %v", st.Scanned, st.ScanTime, st.HeadScan)
	}
}

// TestBulkUnappliedTotalPausesBulk: with MaxBulkUnappliedTotal 1 (and no
// per-partition bound to speak of), while fresh records flow, the bulk
// lanes of all the worker's partitions wait while one bulk batch of any of
// them is registered and not applied on every replica (a replica applies
// a few batches at a time across its partitions); once the replicas
// apply, every backlog is delivered.
func TestBulkUnappliedTotalPausesBulk(t *testing.T) {
	t.Parallel()
	const parts = 2
	e := newEnv(t, parts)
	var rs []rec
	var keys [parts][]string
	for p := range parts {
		keys[p] = keysIn(23, p, parts)
		for i, k := range keys[p][:20] {
			rs = append(rs, rec{key: k, val: val(i, 300), pri: pillar.PriorityBulk})
		}
		rs = append(rs, rec{key: keys[p][20], val: val(100, 50)})
	}
	src := &appliedSource{parts: parts}
	o := e.opts("w")
	o.Replicas, o.MaxReplicaLag, o.MaxBulkUnapplied, o.ReplicaPoll, o.MaxBatchRecords = src, -1, 100, 10*time.Millisecond, 5
	o.MaxBulkUnappliedTotal = 1
	o.BulkMinShare = 1e-6
	o.FreshRideWait = -1
	w := e.worker(o)
	stop := runWorker(t, w)
	defer stop()
	e.enqueue(rs...)
	waitFor(t, "a bulk batch delivered", 10*time.Second, func() bool { return e.state(0).Offset+e.state(1).Offset > 0 })
	// Fresh records keep flowing in both partitions, and are delivered.
	for p := range parts {
		for i, k := range keys[p][21:] {
			e.enqueue(rec{key: k, val: val(101+i, 50)})
		}
	}
	waitFor(t, "fresh records delivered while bulk waits", 10*time.Second, func() bool {
		return e.state(0).FreshOffset() == 23 && e.state(1).FreshOffset() == 23
	})
	// Each partition: at most its first batch and the follow-up its
	// commit records (planned before the first registration was seen);
	// without the bound both backlogs (8 batches) go.
	delivered := e.state(0).Offset + e.state(1).Offset
	if delivered > 4*int64(o.MaxBatchRecords) {
		t.Fatalf("bulk delivered %d records of the two partitions while a bulk batch is unapplied, want at most 4 batches of %d", delivered, o.MaxBatchRecords)
	}
	if !w.bulkPaused(0, true) || !w.bulkPaused(1, true) {
		t.Fatal("a bulk lane is not paused with an unapplied bulk batch of the worker")
	}
	if w.bulkPaused(0, false) {
		t.Fatal("bulk paused without fresh traffic")
	}
	src.applied.Store(1 << 40)
	waitFor(t, "backlogs delivered once replicas applied", 10*time.Second, func() bool {
		return e.state(0).Offset == 23 && e.state(1).Offset == 23
	})
	stop()
	for p := range parts {
		e.laneChain(p, 23)
	}
}

// batchCovers reports whether the batch named "lorry:p<n>:[fresh:]<first>-<last>"
// holds offset off.
func batchCovers(name string, off int64) bool {
	i := strings.LastIndexByte(name, ':')
	var first, last int64
	if _, err := fmt.Sscanf(name[i+1:], "%d-%d", &first, &last); err != nil {
		return false
	}
	return first <= off && off <= last
}
