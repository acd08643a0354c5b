package lorry

// Riders in flight: the loss counter and
// the backlog gauge see them, on a FAKE clock.

import (
	"testing"
	"time"

	"github.com/pillarkit/pillar/internal/clock"
	"github.com/pillarkit/pillar/pillar"
	"github.com/prometheus/client_golang/prometheus"
)

// ridingSetup queues bulk 0-7 and fresh 8, 9 in partition 0 and starts a
// worker (MaxBatchRecords 4, a fake clock, every ordinary batch's upload
// held by the returned gate) that records the riding batch [0,3]+fresh to 9;
// it returns once that batch's upload hangs.
func ridingSetup(t *testing.T, e *env, fc *clock.Fake, edit func(*Options)) (*Worker, *gateObjects) {
	t.Helper()
	ks := keysIn(10, 0, 1)
	var rs []rec
	for i, k := range ks[:8] {
		rs = append(rs, rec{key: k, val: val(i, 500), pri: pillar.PriorityBulk})
	}
	e.enqueue(rs...)
	e.enqueue(rec{key: ks[8], val: val(80, 50)}, rec{key: ks[9], val: val(90, 50)})
	g := &gateObjects{Store: e.objs, gate: make(chan struct{})}
	t.Cleanup(func() { close(g.gate) })
	o := e.opts("w")
	o.Objects, o.Now = g, fc.Now
	o.LeaseTTL = time.Hour // the fake clock jumps; the lease must not lapse by it
	o.MaxBatchRecords = 4
	if edit != nil {
		edit(&o)
	}
	w := e.worker(o)
	runWorker(t, w)
	waitFor(t, "the riding batch [0,3]+fresh to 9 recorded, its upload hanging", 20*time.Second, func() bool {
		st := e.state(0)
		return st.Pending != nil && st.Pending.Last == 3 && st.Pending.FreshLast == 9 && g.blocked.Load() > 0
	})
	return w, g
}

// advanceTo moves the fake clock to start+to in 50ms steps, giving the
// partition loop (which sleeps on the fake clock) time to look each step.
func advanceTo(fc *clock.Fake, start time.Time, to time.Duration) {
	for fc.Now().Sub(start) < to {
		fc.Advance(min(50*time.Millisecond, to-fc.Now().Sub(start)))
		time.Sleep(5 * time.Millisecond)
	}
}

// TestLossCounterSeesRidersInFlight: riders spend
// their bulk batch's build and upload in the flight, out of the fresh
// buffer; until demotion (twice the ride wait) the loss counter and the
// backlog gauge must still see them. FreshRideWait 5s (demotion at 10s),
// LossAfter 6s: at 8s the two riders are lost, though still riding.
func TestLossCounterSeesRidersInFlight(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	m := NewMetrics()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collectors()...)
	fc := clock.NewFake(time.Now())
	start := fc.Now()
	w, _ := ridingSetup(t, e, fc, func(o *Options) {
		o.FreshRideWait, o.LossAfter, o.Metrics = 5*time.Second, 6*time.Second, m
	})
	// The gauge is set after each fill: move the clock a little so the
	// loop looks again.
	advanceTo(fc, start, 200*time.Millisecond)
	fresh := func() float64 {
		mfs, err := reg.Gather()
		must(t, err)
		for _, mf := range mfs {
			if mf.GetName() != "lorry_backlog_records" {
				continue
			}
			for _, mt := range mf.GetMetric() {
				for _, l := range mt.GetLabel() {
					if l.GetName() == "priority" && l.GetValue() == "fresh" {
						return mt.GetGauge().GetValue()
					}
				}
			}
		}
		return -1
	}
	if got := fresh(); got != 2 {
		t.Errorf("lorry_backlog_records{priority=fresh} = %v while fresh 8 and 9 ride the hanging batch, want 2", got)
	}
	advanceTo(fc, start, 8*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for w.Lost() < 2 && time.Now().Before(deadline) {
		advanceTo(fc, start, min(9*time.Second, fc.Now().Sub(start)+10*time.Millisecond))
		time.Sleep(10 * time.Millisecond)
	}
	st := e.state(0)
	if w.Lost() != 2 || st.Pending == nil || st.Pending.FreshLast != 9 || w.Stats().Demoted != 0 {
		t.Fatalf("loss counter %d, want 2 (fresh 8 and 9 ride a batch whose upload hangs, %v after their commit, LossAfter 6s); pending %+v, demoted %d",
			w.Lost(), fc.Now().Sub(start), st.Pending, w.Stats().Demoted)
	}
}
