package lorry

// Demotion waits for what a bulk batch usually takes to be uploaded
// (Stats.FlightTime), on a FAKE clock. ridingSetup and
// advanceTo: ride_loss_test.go.

import (
	"errors"
	"testing"
	"time"

	"github.com/pillarkit/pillar/internal/clock"
	"github.com/pillarkit/pillar/pillar"
)

// TestDemotionWaitsForUsualFlightTime: where bulk batches take 3s to be
// uploaded (Stats.FlightTime), a riding batch is not demoted at twice the
// ride wait (2s: it would throw nearly every riding build away) but after
// twice the flight time (6s); and at most after 8 times the ride wait.
func TestDemotionWaitsForUsualFlightTime(t *testing.T) {
	t.Parallel()
	lp := &loop{w: &Worker{o: Options{MaxBatchAge: time.Second, FreshRideWait: time.Second}}}
	for _, c := range []struct{ flight, want time.Duration }{
		{0, 2 * time.Second}, {500 * time.Millisecond, 2 * time.Second}, {3 * time.Second, 6 * time.Second}, {time.Minute, 8 * time.Second},
	} {
		lp.w.stats.FlightTime = c.flight
		if got := lp.demoteAfter(); got != c.want {
			t.Errorf("flight time %v: demotion after %v, want %v", c.flight, got, c.want)
		}
	}

	e := newEnv(t, 1)
	fc := clock.NewFake(time.Now())
	start := fc.Now()
	w, _ := ridingSetup(t, e, fc, func(o *Options) {})
	w.noteFlight(3 * time.Second)
	advanceTo(fc, start, 4*time.Second)
	time.Sleep(50 * time.Millisecond)
	if st := e.state(0); st.Pending == nil || st.Pending.FreshLast != 9 || w.Stats().Demoted != 0 {
		t.Fatalf("riding batch demoted at 4s (flight time 3s: want 6s): pending %+v, demoted %d", st.Pending, w.Stats().Demoted)
	}
	advanceTo(fc, start, 7*time.Second)
	waitFor(t, "the riders demoted and delivered by the fresh lane", 10*time.Second, func() bool {
		fc.Advance(10 * time.Millisecond)
		st := e.state(0)
		return w.Stats().Demoted == 1 && st.FreshOffset() == 10 && st.Pending != nil && st.Pending.FreshLast == 0
	})
}

// TestFlightTimeNoted: a bulk batch's time from being planned to its files
// uploaded (here 3s on the FAKE clock, its upload held) is the first sample
// of Stats.FlightTime; a batch of fresh records only and a failed upload are
// none, a demoted flight counts from its restart, and it is the median of
// the last samples.
func TestFlightTimeNoted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	ks := keysIn(4, 0, 1)
	var rs []rec
	for i, k := range ks {
		rs = append(rs, rec{key: k, val: val(i, 500), pri: pillar.PriorityBulk})
	}
	e.enqueue(rs...)
	g := &gateObjects{Store: e.objs, gate: make(chan struct{})}
	fc := clock.NewFake(time.Now())
	o := e.opts("w")
	o.Objects, o.Now = g, fc.Now
	o.LeaseTTL = time.Hour
	o.MaxBatchRecords = 4
	w := e.worker(o)
	runWorker(t, w)
	waitFor(t, "the bulk batch's upload hanging", 20*time.Second, func() bool { return g.blocked.Load() > 0 })
	fc.Advance(3 * time.Second)
	close(g.gate)
	waitFor(t, "the bulk batch delivered", 20*time.Second, func() bool { return e.state(0).Offset == 4 })
	if ft := w.Stats().FlightTime; ft != 3*time.Second {
		t.Fatalf("flight time %v, want 3s (the one bulk batch's upload took 3s)", ft)
	}

	// The rules, on a worker of its own.
	lp := &loop{w: &Worker{o: Options{Now: fc.Now}}}
	flight := func(took time.Duration, bulk, demoted bool, err error) *flight {
		pri := pillar.PriorityFresh
		if bulk {
			pri = pillar.PriorityBulk
		}
		done := make(chan struct{})
		close(done)
		return &flight{pl: &plan{recs: []pillar.ExportRecord{{Priority: pri}}, start: fc.Now().Add(-took), demoted: demoted},
			pre: &prefetch{done: done, err: err}}
	}
	lp.flightDone(flight(time.Second, true, false, nil))
	lp.flightDone(flight(100*time.Millisecond, false, false, nil))
	demoted := flight(5*time.Second, true, true, nil)
	demoted.pl.flightStart = fc.Now().Add(-time.Second) // restarted 1s ago
	lp.flightDone(demoted)
	lp.flightDone(flight(7*time.Second, true, false, errors.New("upload failed")))
	if ft := lp.w.Stats().FlightTime; ft != time.Second {
		t.Fatalf("flight time %v after a 1s bulk flight, then a fresh-only (0.1s), a demoted one (5s, 1s since its restart) and a failed one (7s); want 1s", ft)
	}
	lp.w.noteFlight(9 * time.Second)
	if ft := lp.w.Stats().FlightTime; ft != time.Second {
		t.Fatalf("flight time %v after 1s and 9s, want 1s (the lower median)", ft)
	}
	lp.w.noteFlight(3 * time.Second)
	lp.w.noteFlight(3 * time.Second)
	if ft := lp.w.Stats().FlightTime; ft != 3*time.Second {
		t.Fatalf("flight time %v after 1s, 1s, 9s, 3s and 3s, want 3s (the median)", ft)
	}
}

// TestFailedFlightRetriedInBackground: while every ordinary
// batch's put fails, fresh records (riding or not) are still delivered,
// the failed bulk flight is retried in the background (Stats.Retries),
// and once puts succeed again everything is delivered in per-key order.
func TestFailedFlightRetriedInBackground(t *testing.T) {
	t.Parallel()
	for _, ride := range []time.Duration{0, -1} {
		fc := clock.NewFake(time.Now())
		start := fc.Now()
		e := newEnvNow(t, 1, fc.Now)
		ks := keysIn(10, 0, 1)
		var rs []rec
		for i, k := range ks[:8] {
			rs = append(rs, rec{key: k, val: val(i, 500), pri: pillar.PriorityBulk})
		}
		e.enqueue(rs...)
		e.enqueue(rec{key: ks[0], val: val(80, 50)}, rec{key: ks[9], val: val(90, 50)}) // fresh 8 (key 0), 9
		f := &failObjects{Store: e.objs}
		f.fail.Store(true)
		o := e.opts("w")
		o.Objects, o.Now = f, fc.Now
		o.LeaseTTL = time.Hour
		o.MaxBatchRecords, o.FreshRideWait = 4, ride
		w := e.worker(o)
		stop := runWorker(t, w)
		waitFor(t, "an ordinary batch's put failing", 20*time.Second, func() bool { return f.failed.Load() > 0 })
		advanceTo(fc, start, 3*time.Second)
		waitFor(t, "fresh 8 and 9 delivered while bulk puts fail (ride wait "+ride.String()+")", 10*time.Second, func() bool {
			fc.Advance(10 * time.Millisecond)
			return e.state(0).FreshOffset() == 10
		})
		waitFor(t, "the failed bulk flight retried", 10*time.Second, func() bool { return w.Stats().Retries > 0 })
		f.fail.Store(false)
		waitFor(t, "everything delivered once puts succeed", 20*time.Second, func() bool {
			fc.Advance(10 * time.Millisecond)
			st := e.state(0)
			return st.Offset == 10 && st.Pending == nil && st.FreshPending == nil
		})
		stop()
		e.laneChain(0, 10)
		got := e.checkOrder(0, ks)
		if counter(got[ks[0]]) != 80 || counter(got[ks[9]]) != 90 || counter(got[ks[7]]) != 7 {
			t.Fatalf("ride wait %v: key 0 %d (want the fresh 80), key 9 %d (want 90), key 7 %d (want 7)", ride, counter(got[ks[0]]), counter(got[ks[9]]), counter(got[ks[7]]))
		}
	}
}
