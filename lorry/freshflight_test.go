package lorry

// Fresh records in flight: the loss counter and backlog gauge see them,
// and demotion of a riding bulk batch waits for Stats.FlightTime. Real
// store, object store and control plane (env), a FAKE clock.

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pillarkit/pillar/internal/clock"
	"github.com/pillarkit/pillar/internal/objstore"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/local"
)

// newEnvNow is newEnv whose store stamps queue records with now (the fake
// clock), so a record's age on the fake clock is its true age.
func newEnvNow(t *testing.T, parts int, now func() time.Time) *env {
	t.Helper()
	e := newEnv(t, parts)
	st, err := local.Create(filepath.Join(e.dir, "store-now"), &local.Options{Partitions: parts, RetainFor: time.Second, Now: now})
	must(t, err)
	t.Cleanup(func() { st.Close() })
	e.store = st
	return e
}

// slowObjects makes every ordinary (bulk or riding) batch's upload take
// took on the fake clock from its first Put: a slow machine, where a bulk
// batch takes longer than twice the ride wait. Fresh batches are not
// slowed.
type slowObjects struct {
	objstore.Store
	fc    *clock.Fake
	took  time.Duration
	mu    sync.Mutex
	since map[string]time.Time
}

func (s *slowObjects) Put(ctx context.Context, key string, r io.Reader, size int64, opts *objstore.PutOptions) error {
	if b := batchPrefix.FindString(key); b != "" {
		s.mu.Lock()
		t0, ok := s.since[b]
		if !ok {
			t0 = s.fc.Now()
			s.since[b] = t0
		}
		s.mu.Unlock()
		for s.fc.Now().Sub(t0) < s.took {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Millisecond):
			}
		}
	}
	return s.Store.Put(ctx, key, r, size, opts)
}

// failObjects fails every Put into an ordinary (bulk or riding) batch's
// prefix while fail is set (a store refusing large puts, a full build
// disk); fresh batches' puts succeed.
type failObjects struct {
	objstore.Store
	fail   atomic.Bool
	failed atomic.Int64
}

var errBulkPut = errors.New("failObjects: put of an ordinary batch refused (injected)")

func (f *failObjects) Put(ctx context.Context, key string, r io.Reader, size int64, opts *objstore.PutOptions) error {
	if f.fail.Load() && batchPrefix.MatchString(key) {
		f.failed.Add(1)
		return errBulkPut
	}
	return f.Store.Put(ctx, key, r, size, opts)
}

// TestDemotionLearnsOnSlowMachine: Stats.FlightTime takes no
// sample from a demoted flight, and while fresh records flow nearly every
// bulk batch carries riders. On the slow machine this is for (every
// bulk batch 3s from planned to uploaded, the ride wait 1s), every riding
// batch is demoted at 2s: none is ever a sample, FlightTime stays 0, the
// bound stays at 2s, and demotion fires on every riding batch for ever —
// the behaviour of a fixed bound (survivor
// bias: only flights faster than the bound are sampled). After the first
// demotion and its plain restart being uploaded (3s more), the flight
// time must know bulk batches take at least 2s; and of the 3 bulk batches
// at most the first may be demoted.
func TestDemotionLearnsOnSlowMachine(t *testing.T) {
	t.Parallel()
	fc := clock.NewFake(time.Now())
	start := fc.Now()
	e := newEnvNow(t, 1, fc.Now)
	ks := keysIn(400, 0, 1)
	var rs []rec
	for i, k := range ks[:12] {
		rs = append(rs, rec{key: k, val: val(i, 500), pri: pillar.PriorityBulk})
	}
	e.enqueue(rs...)                                                                    // bulk 0-11: 3 batches of 4
	e.enqueue(rec{key: ks[12], val: val(120, 50)}, rec{key: ks[13], val: val(130, 50)}) // fresh 12, 13
	s := &slowObjects{Store: e.objs, fc: fc, took: 3 * time.Second, since: map[string]time.Time{}}
	o := e.opts("w")
	o.Objects, o.Now = s, fc.Now
	o.LeaseTTL = time.Hour
	o.MaxBatchRecords = 4
	w := e.worker(o)
	runWorker(t, w)
	waitFor(t, "the riding batch [0,3]+fresh to 13 recorded", 20*time.Second, func() bool {
		st := e.state(0)
		return st.Pending != nil && st.Pending.Last == 3 && st.Pending.FreshLast == 13
	})
	// Steady fresh traffic (one update every 100ms of the fake clock, 10ms
	// of it per 5ms), as in the bench's mixed phase, until the bulk
	// backlog is delivered.
	next, nextAt := 14, 100*time.Millisecond
	checkedFirst := false
	deadline := time.Now().Add(90 * time.Second)
	for i := 0; ; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("bulk backlog not delivered by %v on the fake clock: state %+v, stats %+v", fc.Now().Sub(start), e.state(0), w.Stats())
		}
		fc.Advance(10 * time.Millisecond)
		time.Sleep(5 * time.Millisecond)
		if el := fc.Now().Sub(start); el >= nextAt && next < len(ks) {
			e.enqueue(rec{key: ks[next], val: val(next, 50)})
			next++
			nextAt += 100 * time.Millisecond
		}
		if i%4 != 0 {
			continue
		}
		st := e.state(0)
		if !checkedFirst && st.Offset >= 4 {
			// [0,3] is delivered: demoted at 2s, its plain restart uploaded
			// 3s later.
			checkedFirst = true
			if ft, d := w.Stats().FlightTime, w.Stats().Demoted; ft < 2*time.Second {
				t.Errorf("after the first bulk batch (demoted: %d) took %v on the fake clock to be delivered, Stats.FlightTime = %v, want at least 2s "+
					"(a demoted flight took at least the bound; with no sample the bound stays 2s and every riding batch is demoted)", d, fc.Now().Sub(start), ft)
			}
		}
		if st.Offset >= 12 {
			break
		}
	}
	if st := w.Stats(); st.Demoted > 1 {
		t.Errorf("%d of 3 riding bulk batches demoted (each a bulk build thrown away and a fresh batch of its own), flight time %v; "+
			"every bulk batch takes 3s here: after the first demotion the bound must have learned that", st.Demoted, st.FlightTime)
	}
}

// TestFlightTimeForgetsOneHungFlight: Stats.FlightTime is
// documented as "a moving mean of the last ~8", but it is an exponential
// mean with weight 1/8 of raw, unclamped samples: one bulk flight that
// hung for 10 minutes (a non-riding batch is never demoted, so its whole
// hang is a sample) moves it from 500ms to 75s, and 8 ordinary flights
// later it is still 26s; it takes about 22 flights to leave the bound's
// ceiling and about 40 to come back below 1s. Meanwhile the bound sits at
// 8 × the ride wait (8s by default, above the 5s fresh p99
// target), so a riding batch that really hangs holds its riders 8s instead
// of 2s; and the bench prints the 26s as "bulk batch flight time". After 8
// ordinary flights of 500ms, the mean of the last ~8 is 500ms.
func TestFlightTimeForgetsOneHungFlight(t *testing.T) {
	t.Parallel()
	fc := clock.NewFake(time.Now())
	lp := &loop{w: &Worker{o: Options{Now: fc.Now, MaxBatchAge: time.Second, FreshRideWait: time.Second}}}
	bulkFlight := func(took time.Duration) *flight {
		done := make(chan struct{})
		close(done)
		return &flight{pl: &plan{recs: []pillar.ExportRecord{{Priority: pillar.PriorityBulk}}, start: fc.Now().Add(-took)},
			pre: &prefetch{done: done}}
	}
	for range 4 {
		lp.flightDone(bulkFlight(500 * time.Millisecond))
	}
	lp.flightDone(bulkFlight(10 * time.Minute)) // one hung upload, not demoted (no riders)
	for range 8 {
		lp.flightDone(bulkFlight(500 * time.Millisecond))
	}
	if ft, da := lp.w.Stats().FlightTime, lp.demoteAfter(); ft > time.Second || da > 2*time.Second {
		t.Fatalf("after one 10-minute flight and then 8 flights of 500ms: FlightTime %v (want about 500ms: the mean of the last ~8), "+
			"demotion after %v (want 2s, twice the ride wait)", ft, da)
	}
}

// TestLossCounterSeesBatchBeingDelivered: freshInFlight sees
// the flight (bfl) and the recorded fresh batch (fplanned), but not the
// batch the loop delivers itself: a fresh batch from nextFresh (or a
// failed flight's batch, or one recorded by a previous holder) is taken out
// of the fresh buffer and delivered in the loop's goroutine, where upload
// and registration are retried for as long as they fail — and checkLoss
// runs only at the loop's top. During an object store outage longer than
// LossAfter the loss counter (the alert) stays 0; it counts the records
// only once the outage is over and they are registered. Here: LossAfter
// 5s, the object store down from the record's commit; at 10s on the fake
// clock, still down, the record must count as lost, and once delivered it
// must not count again.
func TestLossCounterSeesBatchBeingDelivered(t *testing.T) {
	t.Skip("known gap: a fresh batch the loop delivers itself, retried during an object store outage, is counted as lost only once registered")
	t.Parallel()
	fc := clock.NewFake(time.Now())
	start := fc.Now()
	e := newEnvNow(t, 1, fc.Now)
	ks := keysIn(1, 0, 1)
	e.objs.down.Store(true)
	e.enqueue(rec{key: ks[0], val: val(1, 50)}) // fresh 0
	o := e.opts("w")
	o.Now = fc.Now
	o.LeaseTTL = time.Hour
	o.LossAfter = 5 * time.Second
	w := e.worker(o)
	runWorker(t, w)
	waitFor(t, "the fresh batch's upload failing", 20*time.Second, func() bool {
		fc.Advance(10 * time.Millisecond)
		return e.objs.failed.Load() > 0
	})
	advanceTo(fc, start, 10*time.Second)
	time.Sleep(300 * time.Millisecond) // more attempts on the real clock
	lostDown, st := w.Lost(), e.state(0)
	e.objs.down.Store(false)
	waitFor(t, "fresh 0 delivered once the store is back", 20*time.Second, func() bool {
		fc.Advance(10 * time.Millisecond)
		return e.state(0).FreshOffset() == 1
	})
	advanceTo(fc, start, 13*time.Second) // checkLoss runs once a second
	time.Sleep(100 * time.Millisecond)
	if lostDown != 1 || w.Lost() != 1 {
		t.Fatalf("loss counter %d at 10s with the object store down (fresh 0 undelivered: fresh position %d; LossAfter 5s), %d after its delivery; want 1 and 1",
			lostDown, st.FreshOffset(), w.Lost())
	}
}

// TestRidersNotHeldByFailingBulkUpload: demotion only looks at
// a flight that is not done; a riding batch whose upload FAILS (instead of
// hanging) is done at once, leaves bfl and is delivered by the loop
// itself, which retries the upload for as long as it fails — its riders
// with it, and demotion never fires. Fresh batches' puts succeed here;
// only ordinary (bulk, riding) batches' puts fail. The riders 8 and 9 must
// reach the fresh lane within a few ride waits.
func TestRidersNotHeldByFailingBulkUpload(t *testing.T) {
	t.Parallel()
	fc := clock.NewFake(time.Now())
	start := fc.Now()
	e := newEnvNow(t, 1, fc.Now)
	ks := keysIn(10, 0, 1)
	var rs []rec
	for i, k := range ks[:8] {
		rs = append(rs, rec{key: k, val: val(i, 500), pri: pillar.PriorityBulk})
	}
	e.enqueue(rs...)                                                                // bulk 0-7
	e.enqueue(rec{key: ks[8], val: val(80, 50)}, rec{key: ks[9], val: val(90, 50)}) // fresh 8, 9
	f := &failObjects{Store: e.objs}
	f.fail.Store(true)
	o := e.opts("w")
	o.Objects, o.Now = f, fc.Now
	o.LeaseTTL = time.Hour
	o.MaxBatchRecords = 4
	w := e.worker(o)
	runWorker(t, w)
	// The riding batch is demoted as soon as its upload fails, so its
	// recorded state with FreshLast 9 may last too short to be seen;
	// waiting for the first failed put is enough.
	waitFor(t, "an ordinary batch's upload failing", 20*time.Second, func() bool { return f.failed.Load() > 0 })
	advanceTo(fc, start, 5*time.Second) // 2.5 × the demotion bound
	waitFor(t, "fresh 8 and 9 delivered while the bulk batch they rode fails to upload", 10*time.Second, func() bool {
		fc.Advance(10 * time.Millisecond)
		return e.state(0).FreshOffset() == 10
	})
}

// TestFreshNotHeldByFailingBulkUpload: with riding
// off, a bulk flight whose upload fails is delivered by the loop itself
// with retries, and the partition's whole fresh lane waits for it: fresh
// records are stuck behind bulk work for as long as bulk puts fail. A
// fresh record queued meanwhile must be delivered.
func TestFreshNotHeldByFailingBulkUpload(t *testing.T) {
	t.Parallel()
	fc := clock.NewFake(time.Now())
	start := fc.Now()
	e := newEnvNow(t, 1, fc.Now)
	ks := keysIn(9, 0, 1)
	var rs []rec
	for i, k := range ks[:8] {
		rs = append(rs, rec{key: k, val: val(i, 500), pri: pillar.PriorityBulk})
	}
	e.enqueue(rs...) // bulk 0-7
	f := &failObjects{Store: e.objs}
	f.fail.Store(true)
	o := e.opts("w")
	o.Objects, o.Now = f, fc.Now
	o.LeaseTTL = time.Hour
	o.MaxBatchRecords = 4
	o.FreshRideWait = -1
	w := e.worker(o)
	runWorker(t, w)
	waitFor(t, "the bulk batch [0,3]'s upload failing", 20*time.Second, func() bool {
		fc.Advance(10 * time.Millisecond)
		st := e.state(0)
		return st.Pending != nil && st.Pending.Last == 3 && f.failed.Load() > 0
	})
	e.enqueue(rec{key: ks[8], val: val(80, 50)}) // fresh 8
	advanceTo(fc, start, 5*time.Second)
	waitFor(t, "fresh 8 delivered while bulk uploads fail", 10*time.Second, func() bool {
		fc.Advance(10 * time.Millisecond)
		return e.state(0).FreshOffset() == 9
	})
}
