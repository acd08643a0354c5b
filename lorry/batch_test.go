package lorry

import (
	"context"
	"fmt"
	"github.com/pillarkit/pillar/internal/clock"
	"strings"
	"testing"
	"time"
)

// TestBatchBySize: with a long maximum age, batches close exactly at the
// size threshold and the remainder waits for its age.
func TestBatchBySize(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	keys := keysIn(35, 1, 2)
	o := e.opts("w1")
	o.MaxBatchAge = time.Hour
	o.MaxBatchBytes = 10 * (100 + 64) // ten 100-byte records
	w := e.worker(o)
	stop := runWorker(t, w)
	want := map[string]string{}
	for i := 0; i < 35; i += 5 { // several commits, so batches span them
		var rs []rec
		for _, k := range keys[i : i+5] {
			v := strings.Repeat(fmt.Sprint(i%10), 100)
			rs = append(rs, rec{key: k, val: v})
			want[k] = v
		}
		e.enqueue(rs...)
	}
	waitFor(t, "30 records committed", 10*time.Second, func() bool { return e.state(1).Offset == 30 })
	time.Sleep(200 * time.Millisecond)
	if st := e.state(1); st.Offset != 30 || st.Pending != nil {
		t.Fatalf("state %+v: the last 5 records should wait for the batch age", st)
	}
	stop()
	ranges := e.checkChain(1, 30)
	if fmt.Sprint(ranges) != "[[0 9] [10 19] [20 29]]" {
		t.Fatalf("batches %v, want three of ten", ranges)
	}
	if e.state(1).Owner != "" {
		t.Fatalf("lease not given back on stop: %+v", e.state(1))
	}
	// A drain delivers the rest without waiting for the age.
	res, err := e.worker(o).Drain(context.Background())
	must(t, err)
	if res.Stats.Batches != 1 || res.Stats.Records != 5 {
		t.Fatalf("drain: %+v", res.Stats)
	}
	e.checkChain(1, 35)
	e.checkChain(0, 0)
	e.checkServed(want, keys)
}

// TestBatchByAge: a batch below the size threshold closes once its oldest
// record is MaxBatchAge old, not before. The worker's clock is FAKE and
// moves only when the test moves it, so "not before" is checked a minute
// short of the age, whatever the machine's load.
func TestBatchByAge(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	start := time.Now() // before every commit below
	fc := clock.NewFake(start)
	o := e.opts("w1")
	o.MaxBatchAge, o.Now = time.Hour, fc.Now
	w := e.worker(o)
	runWorker(t, w)
	keys := keysIn(3, 0, 1)
	e.enqueue(rec{key: keys[0], val: "a"}, rec{key: keys[1], val: "b"})
	fc.Advance(100 * time.Millisecond)
	e.enqueue(rec{key: keys[2], val: "c"})
	// The worker shares a store snapshot for PollInterval/2 of its clock:
	// move the clock on in small steps until it has read c.
	waitFor(t, "the three records read", 20*time.Second, func() bool {
		fc.Advance(o.PollInterval / 2)
		return w.Stats().Buffered == 3*(1+64)
	})
	notYet := func(at string) {
		t.Helper()
		// Some poll cycles at this time: nothing may be delivered. (A slow
		// machine runs fewer cycles here, which can only let a broken
		// worker pass, never fail a correct one.)
		time.Sleep(20 * o.PollInterval)
		if st := e.state(0); st.Offset != 0 || st.Pending != nil {
			t.Fatalf("a batch closed %s, before its age of %v: %+v", at, o.MaxBatchAge, st)
		}
	}
	notYet("at once")
	fc.Advance(start.Add(o.MaxBatchAge - time.Minute).Sub(fc.Now()))
	notYet("a minute early")
	fc.Advance(2 * time.Minute)
	waitFor(t, "the batch committed", 20*time.Second, func() bool { return e.state(0).Offset == 3 })
	if r := e.checkChain(0, 3); len(r) != 1 {
		t.Fatalf("batches %v, want one", r)
	}
	e.checkServed(map[string]string{keys[0]: "a", keys[1]: "b", keys[2]: "c"}, keys)
}

// TestLastWriteWinsAndTombstones: within one batch the newest record of a key
// wins; a delete becomes a tombstone that hides an earlier batch's value.
func TestLastWriteWinsAndTombstones(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	k := keysIn(5, 0, 1)
	w := e.worker(e.opts("w1"))
	e.enqueue(rec{key: k[3], val: "old-d"}, rec{key: k[4], val: "e"})
	_, err := w.Drain(context.Background())
	must(t, err)
	e.enqueue(
		rec{key: k[0], val: "a1"}, rec{key: k[1], val: "b1"},
		rec{key: k[0], val: "a2"}, // newer put wins
		rec{key: k[1], del: true}, // put then delete: tombstone
		rec{key: k[2], del: true}, // delete of a key never seen
		rec{key: k[3], del: true}, // delete of an earlier batch's key
	)
	e.enqueue(rec{key: k[0], val: "a3"}, rec{key: k[2], val: "c"}) // a later commit, same batch
	res, err := e.worker(e.opts("w2")).Drain(context.Background())
	must(t, err)
	if res.Stats.Batches != 1 || res.Stats.Records != 8 || res.Stats.Keys != 4 || res.Stats.Deletes != 2 {
		t.Fatalf("stats %+v: want 1 batch, 8 records, 4 keys of which 2 tombstones", res.Stats)
	}
	bs := e.registered(0)
	if m := bs[len(bs)-1].Manifest; m.Keys != 4 || m.Deletes != 2 {
		t.Fatalf("manifest keys %d deletes %d, want 4 and 2", m.Keys, m.Deletes)
	}
	e.checkChain(0, 10)
	e.checkServed(map[string]string{k[0]: "a3", k[2]: "c", k[4]: "e"}, k)
}

// TestDrainEmptyAndStatus: a drain of an empty queue does nothing; Status
// reports depth, committed offset and the oldest record's age.
func TestDrainEmptyAndStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3)
	res, err := e.worker(e.opts("w1")).Drain(context.Background())
	must(t, err)
	if res.Stats.Batches != 0 || len(res.Delivered) != 3 {
		t.Fatalf("empty drain: %+v", res)
	}
	keys := keysIn(4, 2, 3)
	e.enqueue(rec{key: keys[0], val: "x"}, rec{key: keys[1], val: "y"})
	time.Sleep(50 * time.Millisecond)
	st, err := Status(context.Background(), e.store, time.Now())
	must(t, err)
	if s := st[2]; s.QueueEnd != 2 || s.Committed != 0 || s.Depth != 2 || s.OldestAge < 40*time.Millisecond || s.Owner != "" {
		t.Fatalf("status before delivery: %+v", s)
	}
	_, err = e.worker(e.opts("w1")).Drain(context.Background())
	must(t, err)
	st, err = Status(context.Background(), e.store, time.Now())
	must(t, err)
	if s := st[2]; s.QueueEnd != 2 || s.Committed != 2 || s.Depth != 0 || s.OldestAge != 0 || s.Seq != 1 || s.Batch == "" {
		t.Fatalf("status after delivery: %+v", s)
	}
}

// TestPositions: Positions reports Status's positions and queue ends
// without the backlog scan.
func TestPositions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3)
	keys := keysIn(4, 1, 3)
	e.enqueue(rec{key: keys[0], val: "x"}, rec{key: keys[1], val: "y"}, rec{key: keys[2], val: "z"})
	ps, err := Positions(context.Background(), e.store)
	must(t, err)
	if s := ps[1]; len(ps) != 3 || s.QueueEnd != 3 || s.Committed != 0 || s.Depth != 0 || s.Pending != nil {
		t.Fatalf("positions before delivery: %+v", ps)
	}
	_, err = e.worker(e.opts("w1")).Drain(context.Background())
	must(t, err)
	ps, err = Positions(context.Background(), e.store)
	must(t, err)
	st, err := Status(context.Background(), e.store, time.Now())
	must(t, err)
	for p := range ps {
		a, b := ps[p], st[p]
		if a.QueueEnd != b.QueueEnd || a.Committed != b.Committed || a.FreshOffset != b.FreshOffset || a.Seq != b.Seq || a.Batch != b.Batch || a.Pending != nil {
			t.Fatalf("partition %d: positions %+v, status %+v", p, a, b)
		}
	}
	if ps[1].Committed != 3 || ps[1].Seq != 1 {
		t.Fatalf("positions after delivery: %+v", ps[1])
	}
}
