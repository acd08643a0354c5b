package lorry

import (
	"context"
	"fmt"
	"github.com/pillarkit/pillar/internal/clock"
	"strings"
	"testing"
	"time"
)

// TestBackpressureObjectStoreDown: while the object store is down the worker
// retries with backoff, keeps its leases, reads no further ahead than one
// batch per partition and commits nothing; when it comes back every record
// is delivered, each exactly once.
func TestBackpressureObjectStoreDown(t *testing.T) {
	t.Parallel()
	const parts = 2
	e := newEnv(t, parts)
	o := e.opts("w")
	const val = 1000
	o.MaxBatchBytes = 5 * (val + 64)
	o.LeaseTTL = 1500 * time.Millisecond
	w := e.worker(o)
	runWorker(t, w)
	waitFor(t, "worker holds both partitions", 20*time.Second, func() bool { return len(w.Stats().Held) == parts })

	var universe []string
	want := map[string]string{}
	counts := make([]int64, parts)
	put := func(round, n int) {
		var rs []rec
		for p := 0; p < parts; p++ {
			for _, k := range keysIn(n, p, parts) {
				v := strings.Repeat(fmt.Sprint(round%10), val)
				rs = append(rs, rec{key: k, val: v})
				want[k] = v
				universe = append(universe, k)
				counts[p]++
			}
		}
		e.enqueue(rs...)
	}
	put(0, 3)
	waitFor(t, "first records delivered", 10*time.Second, func() bool { return e.state(0).Offset == 3 && e.state(1).Offset == 3 })

	e.objs.down.Store(true)
	for round := 1; round <= 6; round++ {
		put(round, 4)                      // 24 records per partition queue up behind the outage
		time.Sleep(400 * time.Millisecond) // 2.4s in all: longer than the lease
	}
	// The retries and the read-ahead are waited for, not assumed to have
	// happened in 2.4s of wall time on a loaded machine.
	waitFor(t, "retries and a read-ahead during the outage", 10*time.Second, func() bool {
		return e.objs.failed.Load() >= 5 && w.Stats().Buffered > 0
	})
	st := w.Stats()
	// The batch in flight, plus at most one more batch read ahead.
	bound := int64(parts) * 2 * (o.MaxBatchBytes + val + 64)
	if st.PeakBuffered > bound {
		t.Fatalf("read ahead %d (peak %d) bytes, bound %d", st.Buffered, st.PeakBuffered, bound)
	}
	// The lease is renewed while the batch retries: a renewal after this
	// moment (the outage still on) must show up. Whether the lease is
	// unexpired at one instant is a matter of timing on a loaded machine
	// (a renewal commit can stall past the 1.5 s TTL); a worker that
	// stopped renewing during retries never writes one.
	retrying := time.Now().UnixMilli()
	for p := 0; p < parts; p++ {
		waitFor(t, fmt.Sprintf("partition %d lease renewed during the retries", p), 20*time.Second, func() bool {
			s := e.state(p)
			return s.Owner == "w" && s.UpdatedMS >= retrying
		})
		if s := e.state(p); s.Offset != 3 {
			t.Fatalf("partition %d committed %d during the outage", p, s.Offset)
		}
	}
	ss, err := Status(context.Background(), e.store, time.Now())
	must(t, err)
	if ss[0].Depth != counts[0]-3 || ss[0].OldestAge < 500*time.Millisecond {
		t.Fatalf("status during the outage: %+v", ss[0])
	}

	e.objs.down.Store(false)
	waitFor(t, "backlog delivered", 20*time.Second, func() bool {
		return e.state(0).Offset == counts[0] && e.state(1).Offset == counts[1]
	})
	st = w.Stats()
	if st.Retries == 0 || st.Lost != 0 {
		t.Fatalf("stats %+v", st)
	}
	for p := 0; p < parts; p++ {
		e.checkChain(p, counts[p])
	}
	e.checkServed(want, universe)
}

// TestBackpressureControlPlaneDown: the control plane stops; uploads go on
// but nothing is committed past an unregistered batch; when it comes back
// (same address, same database) the backlog is registered once.
func TestBackpressureControlPlaneDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	w := e.worker(e.opts("w"))
	runWorker(t, w)
	ks := keysIn(6, 0, 1)
	e.enqueue(rec{key: ks[0], val: "a"})
	waitFor(t, "first record delivered", 10*time.Second, func() bool { return e.state(0).Offset == 1 })
	addr := e.ctlAddr
	e.ctlSrv.Stop()
	e.enqueue(rec{key: ks[1], val: "b"}, rec{key: ks[2], val: "c"})
	// Wait for the batch to be recorded as pending and its registration
	// retried (on a loaded machine that may take longer than any fixed
	// sleep), then queue one more record behind it and let the worker
	// retry twice more: nothing may be committed past the pending batch.
	waitFor(t, "a pending batch whose registration is retried", 10*time.Second, func() bool {
		return e.state(0).Pending != nil && w.Stats().Retries >= 1
	})
	e.enqueue(rec{key: ks[3], val: "d"})
	r0 := w.Stats().Retries
	waitFor(t, "two more retries", 10*time.Second, func() bool { return w.Stats().Retries >= r0+2 })
	if s := e.state(0); s.Offset != 1 || s.Pending == nil {
		t.Fatalf("state during the outage: %+v", s)
	}
	e.startControl(addr)
	waitFor(t, "backlog delivered", 30*time.Second, func() bool { return e.state(0).Offset == 4 })
	e.checkChain(0, 4)
	e.checkServed(map[string]string{ks[0]: "a", ks[1]: "b", ks[2]: "c", ks[3]: "d"}, ks)
}

// TestMemoryBudget: across partitions the worker holds at most
// MaxBufferedBytes of records (plus one record per partition), even with a
// backlog behind an object-store outage, and delivers everything afterwards.
func TestMemoryBudget(t *testing.T) {
	t.Parallel()
	const parts, val = 4, 1000
	e := newEnv(t, parts)
	var universe []string
	want := map[string]string{}
	var rs []rec
	for p := 0; p < parts; p++ {
		for i, k := range keysIn(30, p, parts) {
			v := fmt.Sprintf("%d%s", i, strings.Repeat("v", val-1))
			rs = append(rs, rec{key: k, val: v})
			want[k] = v
			universe = append(universe, k)
		}
	}
	e.enqueue(rs...)
	o := e.opts("w")
	o.MaxBatchBytes = 10 * (val + 64)
	o.MaxBufferedBytes = 12 * (val + 64)
	o.LeaseTTL = 3 * time.Second
	e.objs.down.Store(true)
	w := e.worker(o)
	runWorker(t, w)
	// Every partition has hit the outage at least twice: each read its
	// batch and what the budget let it read ahead.
	waitFor(t, "uploads failing in every partition", 10*time.Second, func() bool {
		return e.objs.failed.Load() >= 2*parts && w.Stats().PeakBuffered >= o.MaxBatchBytes
	})
	st := w.Stats()
	if bound := o.MaxBufferedBytes + parts*(val+64); st.PeakBuffered > bound || st.PeakBuffered < o.MaxBatchBytes {
		t.Fatalf("peak buffered %d, want between %d and the budget bound %d", st.PeakBuffered, o.MaxBatchBytes, bound)
	}
	e.objs.down.Store(false)
	waitFor(t, "backlog delivered", 20*time.Second, func() bool {
		for p := 0; p < parts; p++ {
			if e.state(p).Offset != 30 {
				return false
			}
		}
		return true
	})
	for p := 0; p < parts; p++ {
		e.checkChain(p, 30)
	}
	e.checkServed(want, universe)
}

// TestWaitsOnTheFakeClock: with Options.Clock, the worker's waits (polls,
// batch age, retry backoff) run on that clock: a refused upload is retried
// only once the fake clock has moved past the backoff (an hour here), however
// much wall time passes.
func TestWaitsOnTheFakeClock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	fc := clock.NewFake(time.Now())
	o := e.opts("w")
	o.Clock = fc
	o.RetryMin, o.RetryMax, o.LeaseTTL = time.Hour, time.Hour, 3*time.Hour
	w := e.worker(o)
	runWorker(t, w)
	ks := keysIn(1, 0, 1)
	e.objs.down.Store(true)
	e.enqueue(rec{key: ks[0], val: "a"})
	waitFor(t, "a refused upload", 20*time.Second, func() bool {
		fc.Advance(o.PollInterval)
		return e.objs.failed.Load() >= 1
	})
	e.objs.down.Store(false)
	failed := e.objs.failed.Load()
	// Wall time passes with the fake clock still: no retry may happen (a
	// slow machine runs fewer cycles here, which can only let a broken
	// worker pass, never fail a correct one).
	time.Sleep(50 * o.PollInterval)
	if st := e.state(0); st.Offset != 0 || e.objs.failed.Load() != failed || w.Stats().Retries != 1 {
		t.Fatalf("retried before the backoff passed on the fake clock: %+v, retries %d", st, w.Stats().Retries)
	}
	fc.Advance(time.Hour)
	waitFor(t, "the record delivered once the fake hour passed", 20*time.Second, func() bool {
		fc.Advance(o.PollInterval)
		return e.state(0).Offset == 1
	})
	e.checkServed(map[string]string{ks[0]: "a"}, ks)
}
