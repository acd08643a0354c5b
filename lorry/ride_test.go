package lorry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/internal/clock"
	"github.com/pillarkit/pillar/pillar"
)

// rideQueue queues, in partition 0 of one: bulk ks[0..7] (offsets 0-7);
// fresh ks[5] (8, supersedes the queued bulk ks[5]), fresh ks[9] (9, a new
// key), a fresh delete of ks[6] (10); then bulk ks[9] (11, queued after
// the fresh one: it must land after it) and bulk ks[10] (12). It returns
// the keys and the values each must end with ("" : deleted).
func rideQueue(e *env) ([]string, map[string]string) {
	ks := keysIn(11, 0, 1)
	want := map[string]string{}
	var rs []rec
	for i, k := range ks[:8] {
		rs = append(rs, rec{key: k, val: val(i, 500), pri: pillar.PriorityBulk})
		want[k] = val(i, 500)
	}
	e.enqueue(rs...)
	e.enqueue(rec{key: ks[5], val: val(50, 60)}, rec{key: ks[9], val: val(51, 60)}, rec{key: ks[6], del: true})
	e.enqueue(rec{key: ks[9], val: val(60, 500), pri: pillar.PriorityBulk}, rec{key: ks[10], val: val(61, 500), pri: pillar.PriorityBulk})
	want[ks[5]], want[ks[9]], want[ks[10]] = val(50, 60), val(60, 500), val(61, 500)
	delete(want, ks[6])
	return ks, want
}

// checkRide checks what rideQueue's records became: the three fresh
// records rode along with the first bulk batch (no fresh batch of their
// own), the bulk records they supersede were left out, the bulk record
// queued after a fresh one of its key landed after it, and no key's value
// ever went back while the batches applied one by one.
func checkRide(t *testing.T, e *env, ks []string, want map[string]string) {
	t.Helper()
	src := e.laneChain(0, 13)
	if fmt.Sprint(src) != "[lorry:p0:0-3 lorry:p0:4-7 lorry:p0:8-12]" {
		t.Fatalf("batches %v, want three ordinary batches (the fresh records riding the first)", src)
	}
	bs := e.registered(0)
	if id := bs[0].Manifest.ID; !strings.HasSuffix(id, "-p00000-0-3-f10") {
		t.Fatalf("riding batch id %q, want the fresh records' last offset in it (-f10)", id)
	}
	// [0,3] + fresh ks[5], ks[9], delete ks[6]; [4,7] without ks[5] and
	// ks[6] (superseded by delivered fresh records); [8,12]: ks[9], ks[10].
	for i, want := range [][2]int64{{7, 1}, {2, 0}, {2, 0}} {
		if m := bs[i].Manifest; m.Keys != want[0] || m.Deletes != want[1] {
			t.Fatalf("batch %s: %d keys, %d deletes; want %d, %d", src[i], m.Keys, m.Deletes, want[0], want[1])
		}
	}
	if st := e.state(0); st.FreshOffset() != 13 || st.FreshPending != nil {
		t.Fatalf("state %+v", st)
	}
	got := e.checkOrder(0, ks)
	for _, k := range ks {
		if got[k] != want[k] {
			t.Fatalf("key %s: %q (update %d), want update %d", k, got[k][:min(9, len(got[k]))], counter(got[k]), counter(want[k]))
		}
	}
	e.checkServed(want, ks)
}

// TestFreshRidesBulkBatch: fresh records fetched while the partition's
// bulk lane delivers ride along with its next bulk batch instead of a
// batch of their own (FreshRideWait), with per-key order kept. On a fixed
// FAKE clock the fresh records never come of age, so only riding delivers
// them.
func TestFreshRidesBulkBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	ks, want := rideQueue(e)
	o := e.opts("w")
	o.Now = clock.NewFake(time.Now()).Now
	o.MaxBatchRecords, o.FreshRideWait = 4, time.Minute
	res, err := e.worker(o).Drain(context.Background())
	must(t, err)
	if res.Stats.FreshBatches != 0 || res.Stats.FreshRode != 3 || res.Stats.BulkBatches != 3 {
		t.Fatalf("stats %+v: want 3 bulk batches carrying the 3 fresh records, no fresh batch", res.Stats)
	}
	checkRide(t, e, ks, want)
}

// TestFreshRideOff: with FreshRideWait negative the same queue delivers
// the fresh records in a fresh batch of their own, ahead of the backlog
// (the lanes as before riding).
func TestFreshRideOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	ks, want := rideQueue(e)
	o := e.opts("w")
	o.Now = clock.NewFake(time.Now().Add(time.Second)).Now
	o.MaxBatchRecords, o.FreshRideWait = 4, -1
	res, err := e.worker(o).Drain(context.Background())
	must(t, err)
	src := e.laneChain(0, 13)
	if src[0] != "lorry:p0:fresh:0-10" || res.Stats.FreshRode != 0 {
		t.Fatalf("batches %v, stats %+v: want the fresh records alone first", src, res.Stats)
	}
	got := e.checkOrder(0, ks)
	for _, k := range ks {
		if got[k] != want[k] {
			t.Fatalf("key %s: update %d, want update %d", k, counter(got[k]), counter(want[k]))
		}
	}
}

// TestRideCrashRecovery: Lorry dies at each step of delivering a bulk
// batch that fresh records ride (recorded with FreshLast); a restart
// delivers the recorded batch with the same riders, read again from the
// queue when its manifest was not written yet, exactly once, and the end
// state is the same as without the crash.
func TestRideCrashRecovery(t *testing.T) {
	t.Parallel()
	for _, point := range []string{"pending", "built", "uploaded", "registered", "committed"} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 1)
			ks, want := rideQueue(e)
			o := e.opts("w")
			o.Now = clock.NewFake(time.Now()).Now
			o.MaxBatchRecords, o.FreshRideWait = 4, time.Minute
			o.hook = crashAt(point, 0)
			_, err := e.worker(o).Drain(context.Background())
			if !errors.Is(err, errCrash) {
				t.Fatalf("first run: %v, want an injected crash", err)
			}
			st := e.state(0)
			if point == "committed" {
				if st.Offset != 4 || st.FreshOffset() != 11 {
					t.Fatalf("after a crash past the riding batch's commit: %+v", st)
				}
			} else if st.Pending == nil || st.Pending.First != 0 || st.Pending.Last != 3 || st.Pending.FreshLast != 10 || st.FreshPending != nil {
				t.Fatalf("after a crash at %s: state %+v, want [0,3] pending with the fresh records to 10 riding", point, st)
			}
			o.hook = nil
			res, err := e.worker(o).Drain(context.Background()) // the same id: it takes its lease back at once
			must(t, err)
			if res.Stats.FreshBatches != 0 {
				t.Fatalf("restart stats %+v: a fresh batch of its own", res.Stats)
			}
			checkRide(t, e, ks, want)
		})
	}
}

// TestRideRules: on a fixed FAKE clock, by the loop's own rules (no
// store): fresh records wait for a bulk batch to carry them only while the
// bulk lane is delivering records of their publication (paused by replica
// lag or not); they wait at most FreshRideWait; a bulk plan takes a prefix of them of
// its publication, and none while a fresh batch is recorded.
func TestRideRules(t *testing.T) {
	fc := clock.NewFake(time.Now())
	o := Options{BulkMinShare: 0.25, MaxBatchAge: 100 * time.Millisecond, MaxBatchBytes: 1 << 20, MaxBatchRecords: 2,
		FreshBulkBatchBytes: 1 << 20, MaxReplicaLag: 8, FreshRideWait: 2 * time.Second, Now: fc.Now}
	w := &Worker{o: o, storeID: "s", tr: newTracker()}
	ks := keysIn(6, 0, 1)
	const live, cand = "live", "cand"
	at := func(ago time.Duration) int64 { return fc.Now().Add(-ago).UnixMilli() }
	fresh := func(off int64, k, pub string, ago time.Duration) pillar.ExportRecord {
		return pillar.ExportRecord{Offset: off, PageKey: k, Op: pillar.OpPut, Value: []byte("f"), CommittedAt: at(ago), Priority: pillar.PriorityFresh, Publication: pub}
	}
	bulk := func(off int64, k, pub string) pillar.ExportRecord {
		return pillar.ExportRecord{Offset: off, PageKey: k, Op: pillar.OpPut, Value: []byte("b"), Priority: pillar.PriorityBulk, Publication: pub}
	}
	lp := &loop{w: w, pt: &part{drainTo: -1}, shareAt: fc.Now(), freshMax: map[string]int64{}}
	lp.l = &lease{w: w, st: PartitionState{}}

	// No bulk work: fresh records go at MaxBatchAge, also while an
	// ordinary batch of fresh records only (no bulk before them) flies.
	lp.fbuf = []pillar.ExportRecord{fresh(5, ks[0], live, time.Second)}
	if lp.rideable() || !lp.freshDue() {
		t.Fatal("fresh records with no bulk work wait to ride")
	}
	lp.bfl = &flight{pl: &plan{recs: []pillar.ExportRecord{fresh(4, ks[5], live, time.Second)}, fresh: true}}
	if lp.rideable() || !lp.freshDue() {
		t.Fatal("fresh records wait to ride behind a batch of fresh records only")
	}
	lp.bfl = nil
	// Bulk records of the live publication buffered: they wait, up to
	// FreshRideWait.
	lp.bbuf = []pillar.ExportRecord{bulk(0, ks[1], live)}
	lp.bnext = 1
	if !lp.rideable() || lp.freshDue() || lp.nextFresh() != nil {
		t.Fatal("fresh records 1s old do not wait for the bulk batch (FreshRideWait 2s)")
	}
	lp.fbuf[0].CommittedAt = at(2 * time.Second)
	if !lp.freshDue() {
		t.Fatal("fresh records older than FreshRideWait still wait for a bulk batch")
	}
	lp.fbuf[0].CommittedAt = at(time.Second)
	// Bulk of another publication cannot carry them.
	lp.bbuf[0].Publication = cand
	if lp.rideable() || !lp.freshDue() {
		t.Fatal("fresh records wait for a bulk batch of another publication")
	}
	lp.bbuf[0].Publication = live
	// Replicas lag and bulk had its share: bulk is paused; fresh records
	// still wait for it, up to FreshRideWait.
	w.o.Replicas = &control.Client{}
	w.tr.part(0).known, w.tr.part(0).lag = true, 100
	lp.share = [2]float64{1, 9}
	if lp.bulkDue() || !lp.rideable() || lp.freshDue() {
		t.Fatal("fresh records 1s old do not wait for a bulk lane paused by replica lag")
	}
	lp.fbuf[0].CommittedAt = at(2 * time.Second)
	if !lp.freshDue() {
		t.Fatal("fresh records older than FreshRideWait wait for a paused bulk lane")
	}
	w.tr.part(0).lag = 0

	// The bulk plan takes the prefix of the live publication's records,
	// and its commit moves the fresh position past them.
	lp.fbuf = []pillar.ExportRecord{fresh(5, ks[0], live, 0), fresh(6, ks[2], live, 0), fresh(7, ks[3], cand, 0), fresh(8, ks[4], live, 0)}
	pl := lp.bulkPlan()
	if pl.pend.First != 0 || pl.pend.Last != 0 || pl.pend.FreshLast != 6 || !pl.fresh || len(pl.recs) != 3 {
		t.Fatalf("bulk plan %+v, want [0,0] with the fresh records 5 and 6 riding", pl.pend)
	}
	if after := applyCommit(lp.l.st, pl.pend, 1, 3); after.Offset != 1 || after.FreshOffset() != 7 {
		t.Fatalf("after the riding batch's commit: %+v, want offset 1, fresh position 7", after)
	}
	// A batch carrying fresh records in flight: the fresh lane waits for it.
	lp.take(pl)
	lp.bfl = newFlight(pl, &prefetch{done: make(chan struct{})})
	lp.fbuf[0].CommittedAt = at(time.Minute)
	if p := lp.nextFresh(); p != nil || !lp.held {
		t.Fatalf("fresh batch %+v planned while a batch carrying fresh records flies", p)
	}
	// A recorded fresh batch: nothing rides (the fresh position must cover
	// the records before the riders).
	lp.bfl = nil
	lp.l.st.FreshPending = &Pending{ID: "f", First: 0, Last: 6, Lane: LaneFresh}
	lp.bbuf, lp.bnext = []pillar.ExportRecord{bulk(0, ks[1], live)}, 1
	lp.fbuf = []pillar.ExportRecord{fresh(8, ks[4], live, 0)}
	if lp.rideable() {
		t.Fatal("rideable while a fresh batch is recorded")
	}
	if pl := lp.bulkPlan(); pl.pend.FreshLast != 0 || pl.fresh || len(pl.recs) != 1 {
		t.Fatalf("bulk plan %+v took riders while a fresh batch is recorded", pl.pend)
	}

	// A complete bulk batch held only by MaxBulkUnapplied (fresh records
	// flow): the fresh records wait for it up to FreshRideWait, then it
	// goes and carries them (no fresh batch of their own). Held by
	// MaxReplicaLag, they go alone. Without fresh traffic MaxBulkUnapplied
	// holds nothing.
	lp.l.st.FreshPending = nil
	w.o.MaxBulkUnapplied = 2
	pt := w.tr.part(0)
	pt.known, pt.lag = true, 0
	pt.batches = []*trackedBatch{{seq: 1, bulk: true}, {seq: 2, bulk: true}}
	lp.lastFresh = fc.Now()
	lp.share = [2]float64{1, 9}
	lp.bulk = []head{{off: 0, key: live + "\x00" + ks[1]}, {off: 1, key: live + "\x00" + ks[5]}}
	lp.bbuf, lp.bnext = []pillar.ExportRecord{bulk(0, ks[1], live), bulk(1, ks[5], live)}, 2
	lp.fbuf = []pillar.ExportRecord{fresh(8, ks[4], live, time.Second)}
	if !lp.bulkPaused() || lp.bulkDue() || lp.freshDue() {
		t.Fatal("a batch due while bulk waits for MaxBulkUnapplied and the fresh records have ride wait left")
	}
	lp.fbuf[0].CommittedAt = at(2 * time.Second)
	if !lp.carryDue() || !lp.bulkDue() {
		t.Fatal("the waiting bulk batch does not go to carry fresh records whose ride wait ran out")
	}
	if p := lp.nextFresh(); p != nil {
		t.Fatalf("fresh batch %+v of their own, with a bulk batch to carry them", p.pend)
	}
	if pl := lp.bulkPlan(); pl.pend.First != 0 || pl.pend.Last != 1 || pl.pend.FreshLast != 8 || len(pl.recs) != 3 {
		t.Fatalf("bulk plan %+v with %d records, want [0,1] carrying fresh record 8", pl.pend, len(pl.recs))
	}
	pt.lag = 100
	if lp.carryDue() || lp.bulkDue() {
		t.Fatal("bulk goes past MaxReplicaLag to carry fresh records")
	}
	if p := lp.nextFresh(); p == nil || p.pend.Lane != LaneFresh || p.pend.Last != 8 {
		t.Fatalf("fresh batch %+v, want fresh record 8 alone (bulk held by replica lag)", p)
	}
	pt.lag = 0
	lp.fbuf = nil
	lp.lastFresh = fc.Now().Add(-3 * time.Second)
	if lp.bulkPaused() || !lp.bulkDue() {
		t.Fatal("bulk held by MaxBulkUnapplied without fresh traffic")
	}
}

// countingStore counts the queue records its snapshots read with their
// values (ReadQueue), not the heads.
type countingStore struct {
	pillar.Store
	values atomic.Int64
}

func (s *countingStore) Snapshot(ctx context.Context) (pillar.Snapshot, error) {
	sn, err := s.Store.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	return &countingSnap{Snapshot: sn, s: s}, nil
}

type countingSnap struct {
	pillar.Snapshot
	s *countingStore
}

func (c *countingSnap) ReadQueue(ctx context.Context, p int, from int64, limit int) ([]pillar.ExportRecord, error) {
	recs, err := c.Snapshot.ReadQueue(ctx, p, from, limit)
	c.s.values.Add(int64(len(recs)))
	return recs, err
}

func (c *countingSnap) ReadQueueHeads(ctx context.Context, p int, from int64, limit int) ([]pillar.ExportRecord, error) {
	return c.Snapshot.(pillar.QueueHeadReader).ReadQueueHeads(ctx, p, from, limit)
}

// TestReadFreshSkipsBulkValues: reading a recorded batch's fresh records
// again (a fresh batch's range from the fresh position, a bulk batch's
// riders) reads the values of the fresh records only, not of the bulk
// backlog queued between them.
func TestReadFreshSkipsBulkValues(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	ks := keysIn(60, 0, 1)
	var rs []rec
	for i, k := range ks[:50] {
		rs = append(rs, rec{key: k, val: val(i, 500), pri: pillar.PriorityBulk})
	}
	rs = append(rs, rec{key: ks[50], val: "f50"}, rec{key: ks[51], val: "f51"}, rec{key: ks[52], val: "b52", pri: pillar.PriorityBulk}, rec{key: ks[53], val: "f53"})
	e.enqueue(rs...)
	cs := &countingStore{Store: e.store}
	o := e.opts("w")
	o.Store = cs
	w := e.worker(o)
	got, err := w.readFresh(context.Background(), 0, 0, 53)
	must(t, err)
	var vals []string
	for _, r := range got {
		vals = append(vals, string(r.Value))
	}
	if fmt.Sprint(vals) != "[f50 f51 f53]" {
		t.Fatalf("fresh records %v, want [f50 f51 f53]", vals)
	}
	// Offsets 50-53 (the bulk record in the gap is read and dropped).
	if n := cs.values.Load(); n != 4 {
		t.Fatalf("%d records read with their values, want 4 (none of the bulk backlog)", n)
	}
}
