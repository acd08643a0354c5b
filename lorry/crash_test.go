package lorry

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// crashAt returns a hook that crashes the first time point is reached in
// partition p.
func crashAt(point string, p int) func(string, int) error { return crashAtNth(point, p, 1) }

// crashAtNth crashes the nth time point is reached in partition p.
func crashAtNth(point string, p, n int) func(string, int) error {
	var seen atomic.Int64
	return func(at string, part int) error {
		if at == point && part == p && seen.Add(1) == int64(n) {
			return errors.New("crash at " + point)
		}
		return nil
	}
}

// TestCrashRecovery crashes a worker at each point of a delivery (after the
// pending record, mid-upload, after upload, after registration, before and
// after the offset commit), then runs a fresh worker on the same store,
// object store and control plane: every record is delivered, each offset
// range is registered exactly once, and nothing registered is lost.
func TestCrashRecovery(t *testing.T) {
	t.Parallel()
	points := []string{"pending", "mid-upload", "built", "uploaded", "registered", "committed"}
	for _, point := range points {
		t.Run(point, func(t *testing.T) {
			const parts = 2
			e := newEnv(t, parts)
			var universe []string
			want := map[string]string{}
			for p := 0; p < parts; p++ {
				ks := keysIn(6, p, parts)
				universe = append(universe, ks...)
				var rs []rec
				for i, k := range ks {
					rs = append(rs, rec{key: k, val: fmt.Sprintf("%s-v%d", point, i)})
					want[k] = fmt.Sprintf("%s-v%d", point, i)
				}
				rs = append(rs, rec{key: ks[0], del: true})
				delete(want, ks[0])
				e.enqueue(rs...)
			}
			o := e.opts("first")
			o.LeaseTTL = 5 * time.Second
			if point == "mid-upload" {
				// The SST goes up, then the process dies before manifest.json.
				e.objs.crashAfterPuts("batches/p00001/", 1)
			} else {
				o.hook = crashAt(point, 1)
			}
			_, err := e.worker(o).Drain(context.Background())
			if !errors.Is(err, errCrash) {
				t.Fatalf("first worker: %v, want an injected crash", err)
			}
			st := e.state(1)
			switch point {
			case "committed":
				if st.Offset != 7 || st.Pending != nil {
					t.Fatalf("after a crash past the commit: %+v", st)
				}
			default:
				if st.Offset != 0 || st.Pending == nil || st.Pending.First != 0 || st.Pending.Last != 6 {
					t.Fatalf("after a crash at %s: state %+v, want the batch pending", point, st)
				}
			}
			if st.Owner != "first" {
				t.Fatalf("a crashed worker keeps its lease until it lapses: %+v", st)
			}
			regBefore := len(e.registered(1))

			// A second worker with another id leaves the partition alone
			// while the lease is live, and takes it over once it lapsed (its
			// clock runs 10s ahead).
			res, err := e.worker(e.opts("second")).Drain(context.Background())
			must(t, err)
			if len(res.Skipped) != 1 || res.Skipped[0] != 1 {
				t.Fatalf("second worker took partition 1 while the lease was live: %+v", res)
			}
			o2 := e.opts("second")
			o2.Now = func() time.Time { return time.Now().Add(10 * time.Second) }
			res, err = e.worker(o2).Drain(context.Background())
			must(t, err)
			if len(res.Skipped) != 0 {
				t.Fatalf("lapsed lease not taken over: %+v", res)
			}
			for p := 0; p < parts; p++ {
				e.checkChain(p, 7)
			}
			if n := len(e.registered(1)); n != 1 {
				t.Fatalf("partition 1 has %d registered batches (had %d before recovery), want exactly 1", n, regBefore)
			}
			e.checkServed(want, universe)

			// Orphans: only the mid-upload crash leaves one (its SST, rebuilt
			// under a new content name). Cleanup removes it once older than
			// the grace period, and nothing a manifest names.
			before := e.objectKeys()
			cs, err := Cleanup(context.Background(), CleanupOptions{Store: e.store, Objects: e.objs, Grace: time.Second,
				Now: func() time.Time { return time.Now().Add(time.Hour) }})
			must(t, err)
			wantRemoved := 0
			if point == "mid-upload" {
				wantRemoved = 1
			}
			// A batch's files upload while its pending record commits: a
			// crash right after that commit may leave them (rebuilt under
			// new content names by the next holder).
			if point == "pending" && cs.Removed <= 1 {
				wantRemoved = cs.Removed
			}
			if cs.Removed != wantRemoved {
				t.Fatalf("cleanup removed %d (%v) of %v, want %d", cs.Removed, cs.Keys, before, wantRemoved)
			}
			for _, k := range cs.Keys {
				if path.Ext(k) != ".sst" {
					t.Fatalf("cleanup removed %s", k)
				}
			}
			e.checkServed(want, universe) // every registered batch still downloads
		})
	}
}

// TestCleanupKeepsYoungAndPending: orphans younger than the grace period
// and the objects of a pending batch stay.
func TestCleanupKeepsYoungAndPending(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	ks := keysIn(3, 0, 1)
	e.enqueue(rec{key: ks[0], val: "a"}, rec{key: ks[1], val: "b"})
	e.objs.crashAfterPuts("batches/", 1)
	_, err := e.worker(e.opts("w")).Drain(context.Background())
	if !errors.Is(err, errCrash) {
		t.Fatal(err)
	}
	pend := e.state(0).Pending
	if pend == nil {
		t.Fatal("no pending batch")
	}
	late := func() time.Time { return time.Now().Add(time.Hour) }
	cs, err := Cleanup(context.Background(), CleanupOptions{Store: e.store, Objects: e.objs, Grace: time.Second, Now: late})
	must(t, err)
	if cs.Removed != 0 || cs.Batches != 1 {
		t.Fatalf("cleanup touched the pending batch: %+v", cs)
	}
	// Restarted under the same id, the worker takes its lease back at once.
	_, err = e.worker(e.opts("w")).Drain(context.Background())
	must(t, err)
	e.checkChain(0, 2)
	cs, err = Cleanup(context.Background(), CleanupOptions{Store: e.store, Objects: e.objs, Grace: time.Minute})
	must(t, err)
	if cs.Removed != 0 || cs.Young != 1 {
		t.Fatalf("young orphan: %+v", cs)
	}
	cs, err = Cleanup(context.Background(), CleanupOptions{Store: e.store, Objects: e.objs, Grace: time.Minute, Now: late, DryRun: true})
	must(t, err)
	if cs.Removed != 1 || len(e.objectKeys()) != 3 {
		t.Fatalf("dry run: %+v, objects %v", cs, e.objectKeys())
	}
}

// TestLeaseTakeover: two running workers split the partitions; when one
// dies (stops renewing without giving its leases back) the other takes its
// partitions after the lease lapses and delivers everything exactly once.
func TestLeaseTakeover(t *testing.T) {
	t.Parallel()
	const parts = 4
	e := newEnv(t, parts)
	var dead atomic.Bool
	oa := e.opts("a")
	oa.hook = func(string, int) error {
		if dead.Load() {
			return errors.New("killed")
		}
		return nil
	}
	a := e.worker(oa)
	runWorker(t, a)
	waitFor(t, "a holds every partition", 20*time.Second, func() bool { return len(a.Stats().Held) == parts })
	b := e.worker(e.opts("b"))
	runWorker(t, b)
	waitFor(t, "a and b hold two partitions each", 20*time.Second, func() bool {
		return len(a.Stats().Held) == 2 && len(b.Stats().Held) == 2
	})
	var universe []string
	want := map[string]string{}
	counts := make([]int64, parts)
	put := func(round int) {
		var rs []rec
		for p := 0; p < parts; p++ {
			for _, k := range keysIn(3, p, parts) {
				v := fmt.Sprintf("r%d", round)
				rs = append(rs, rec{key: k, val: v})
				want[k] = v
				universe = append(universe, k)
				counts[p]++
			}
		}
		e.enqueue(rs...)
	}
	put(1)
	waitFor(t, "round 1 delivered", 10*time.Second, func() bool {
		for p := 0; p < parts; p++ {
			if e.state(p).Offset != counts[p] {
				return false
			}
		}
		return true
	})
	aHeld := a.Stats().Held
	dead.Store(true) // a hangs: no renewals, no release
	put(2)
	waitFor(t, "b holds every partition", 10*time.Second, func() bool { return len(b.Stats().Held) == parts })
	waitFor(t, "round 2 delivered", 10*time.Second, func() bool {
		for p := 0; p < parts; p++ {
			if e.state(p).Offset != counts[p] {
				return false
			}
		}
		return true
	})
	for _, p := range aHeld {
		if st := e.state(p); st.Owner != "b" || st.Token < 2 {
			t.Fatalf("partition %d after takeover: %+v", p, st)
		}
	}
	for p := 0; p < parts; p++ {
		e.checkChain(p, counts[p])
	}
	e.checkServed(want, universe)
}

// TestStaleWorkerFenced: a worker that stalls after registering (a long GC
// pause) loses its lease; the new holder finishes the same pending batch
// (registered once) and moves on; when the stale worker wakes, its commit
// fails and it stops. No offset range is registered twice.
func TestStaleWorkerFenced(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	ks := keysIn(4, 0, 1)
	e.enqueue(rec{key: ks[0], val: "a"}, rec{key: ks[1], val: "b"})
	stall, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	oa := e.opts("a")
	oa.hook = func(at string, p int) error {
		if at == "registered" {
			once.Do(func() { close(stall); <-resume })
		}
		return nil
	}
	a := e.worker(oa)
	aDone := make(chan error, 1)
	go func() { _, err := a.Drain(context.Background()); aDone <- err }()
	<-stall
	e.enqueue(rec{key: ks[2], val: "c"}, rec{key: ks[0], val: "a2"})
	ob := e.opts("b")
	ob.Now = func() time.Time { return time.Now().Add(10 * time.Second) } // a's lease has lapsed
	res, err := e.worker(ob).Drain(context.Background())
	must(t, err)
	if res.Stats.Batches != 2 {
		t.Fatalf("b delivered %d batches, want the pending one and the new one", res.Stats.Batches)
	}
	close(resume)
	err = <-aDone
	if !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("stale worker: %v, want a lost lease", err)
	}
	if a.Stats().Lost != 1 {
		t.Fatalf("stale worker stats %+v", a.Stats())
	}
	if r := e.checkChain(0, 4); len(r) != 2 {
		t.Fatalf("chain %v", r)
	}
	e.checkServed(map[string]string{ks[0]: "a2", ks[1]: "b", ks[2]: "c"}, ks)
	if st := e.state(0); st.Owner != "" || !strings.HasPrefix(st.Batch, "lorry-") {
		t.Fatalf("state %+v", st)
	}
}

// TestFollowUpBatch: on a busy queue the offset commit of one batch records
// the next as pending (one store commit per batch) while the next one's SST
// is uploaded; a crash right after such a commit, or in that early upload, is
// recovered by delivering exactly the recorded batch.
func TestFollowUpBatch(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		point string
		nth   int
	}{{"committed", 1}, {"built", 2}} {
		t.Run(c.point, func(t *testing.T) {
			e := newEnv(t, 1)
			ks := keysIn(30, 0, 1)
			want := map[string]string{}
			var rs []rec
			for i, k := range ks {
				v := fmt.Sprintf("%03d%s", i, strings.Repeat("x", 97))
				rs = append(rs, rec{key: k, val: v})
				want[k] = v
			}
			e.enqueue(rs...)
			o := e.opts("w")
			o.MaxBatchBytes = 10 * (100 + 64)
			o.hook = crashAtNth(c.point, 0, c.nth)
			_, err := e.worker(o).Drain(context.Background())
			if !errors.Is(err, errCrash) {
				t.Fatalf("drain: %v, want the injected crash", err)
			}
			if st := e.state(0); st.Offset != 10 || st.Pending == nil || st.Pending.First != 10 || st.Pending.Last != 19 {
				t.Fatalf("after the first commit: %+v, want offset 10 and [10,19] pending", st)
			}
			o.hook = nil
			res, err := e.worker(o).Drain(context.Background())
			must(t, err)
			if res.Stats.Batches != 2 || res.Stats.FollowUps != 1 {
				t.Fatalf("recovery: %+v, want 2 batches, the second a follow-up", res.Stats)
			}
			if r := e.checkChain(0, 30); fmt.Sprint(r) != "[[0 9] [10 19] [20 29]]" {
				t.Fatalf("chain %v", r)
			}
			e.checkServed(want, ks)
		})
	}
}

// TestRegisteredThenCollected: a worker crashes after registering a batch;
// before the retry, garbage collection removes the batch's objects. The
// retry rebuilds the batch (a new manifest), the control plane refuses the
// id with another manifest, and Lorry commits the offset: the range stays
// registered once and the partition moves on.
func TestRegisteredThenCollected(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	ks := keysIn(3, 0, 1)
	e.enqueue(rec{key: ks[0], val: "a"}, rec{key: ks[1], val: "b"})
	o := e.opts("w")
	o.hook = crashAt("registered", 0)
	if _, err := e.worker(o).Drain(context.Background()); !errors.Is(err, errCrash) {
		t.Fatal(err)
	}
	for _, k := range e.objectKeys() {
		must(t, e.objs.Delete(context.Background(), k))
	}
	o.hook = nil
	_, err := e.worker(o).Drain(context.Background())
	must(t, err)
	if r := e.checkChain(0, 2); len(r) != 1 {
		t.Fatalf("chain %v", r)
	}
	e.enqueue(rec{key: ks[2], val: "c"})
	_, err = e.worker(o).Drain(context.Background())
	must(t, err)
	if r := e.checkChain(0, 3); len(r) != 2 {
		t.Fatalf("chain %v", r)
	}
}
