package extsort

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
)

// TestSpillAndMerge sorts 4 sorters' worth of records, each sorter several
// times over its budget, and checks order, completeness and cleanup.
func TestSpillAndMerge(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limit  int64
		buf    int
		n      int
		spills bool
	}{
		{"in-memory", 64 << 20, 0, 20000, false},
		{"spill", 64 << 10, 4 << 10, 20000, true},
		{"multi-pass", 16 << 10, 4 << 10, 20000, true}, // fan-in 2: several merge passes
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			rng := rand.New(rand.NewPCG(1, 2))
			var want []string
			var sorters []*Sorter
			for w := 0; w < 4; w++ {
				s := New(Options{MemoryLimit: tc.limit, Dir: dir, BufferSize: tc.buf})
				sorters = append(sorters, s)
				for i := 0; i < tc.n/4; i++ {
					k := fmt.Sprintf("k%05d", rng.IntN(3000))
					tie := uint64(w)<<32 | uint64(i)
					p := binary.BigEndian.AppendUint64([]byte(k+"|"), tie)
					if err := s.Add(&Record{Key: []byte(k), Prefix: 2, Tie: tie, Table: w, Row: int64(i), Payload: p}); err != nil {
						t.Fatal(err)
					}
					want = append(want, string(p))
				}
			}
			slices.Sort(want)
			it, err := Merge(sorters)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			var prev *Record
			for it.Next() {
				r := it.Record()
				if prev != nil && less(r, prev) {
					t.Fatalf("out of order: %q after %q", r.Key, prev.Key)
				}
				if !bytes.HasPrefix(r.Payload, r.Key) || r.Prefix != 2 {
					t.Fatalf("record fields mixed up: %+v", r)
				}
				cp := *r
				cp.Key = slices.Clone(r.Key)
				prev = &cp
				got = append(got, string(r.Payload))
			}
			if err := it.Err(); err != nil {
				t.Fatal(err)
			}
			it.Close()
			if !slices.Equal(got, want) {
				t.Fatalf("got %d records, want %d (or order differs)", len(got), len(want))
			}
			runs := 0
			for _, s := range sorters {
				runs += s.Stats().Runs
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if (runs > 0) != tc.spills {
				t.Fatalf("runs = %d, spills expected %v", runs, tc.spills)
			}
			left, _ := os.ReadDir(dir)
			if len(left) != 0 {
				t.Fatalf("stray run files: %v", left)
			}
		})
	}
}

// The sorter's buffers, capacity included (append's growth slack), stay
// within MemoryLimit whatever the mix of record sizes; a record beyond the
// budget is still sorted, alone.
func TestAllocatedWithinBudget(t *testing.T) {
	const limit = 256 << 10
	s := New(Options{MemoryLimit: limit, Dir: t.TempDir(), BufferSize: 4 << 10})
	defer s.Close()
	rng := rand.New(rand.NewPCG(5, 6))
	worst := int64(0)
	n := 0
	for i := range 20000 {
		size := 8 + rng.IntN(64)
		if i > 10000 {
			size = 500 + rng.IntN(3000) // the mean changes: buffers re-split
		}
		if i == 15000 {
			size = 2 * limit
		}
		key := []byte(fmt.Sprintf("%08d", rng.IntN(1_000_000)))
		if err := s.Add(&Record{Key: key, Payload: make([]byte, size), Tie: uint64(i)}); err != nil {
			t.Fatal(err)
		}
		n++
		if i != 15000 && s.allocated() > worst {
			worst = s.allocated()
		}
	}
	if worst > limit {
		t.Fatalf("buffers held %d bytes allocated, budget %d", worst, limit)
	}
	got := 0
	var last []byte
	it, err := Merge([]*Sorter{s})
	if err != nil {
		t.Fatal(err)
	}
	for it.Next() {
		r := it.Record()
		if last != nil && bytes.Compare(last, r.Key) > 0 {
			t.Fatalf("record %d out of order", got)
		}
		last = append(last[:0], r.Key...)
		got++
	}
	err = it.Err()
	it.Close()
	if err != nil || got != n {
		t.Fatalf("merged %d of %d records: %v", got, n, err)
	}
	if st := s.Stats(); st.Runs < 10 {
		t.Fatalf("%d runs for ~30 MB through a 256 KiB budget", st.Runs)
	}
}

// The final merge's read buffers stay within an eighth of the budget
// however many runs there are (down to 4 KiB each), instead of BufferSize
// per run: what a merge holds no longer grows with the data.
func TestReadBuffer(t *testing.T) {
	const budget = 16 << 20
	for _, c := range []struct{ runs, want int }{{1, 32 << 10}, {8, 32 << 10}, {64, 32 << 10}, {128, 16 << 10}, {256, 8 << 10}, {4096, 4 << 10}} {
		if got := readBuffer(budget, c.runs, 32<<10); got != c.want {
			t.Errorf("readBuffer(16MiB, %d runs, 32KiB) = %d, want %d", c.runs, got, c.want)
		}
	}
}

// With a few more runs than the fan-in, the merge rewrites only the
// smallest runs it takes to get down to the fan-in, not every run once
// more: the bytes it rewrites are a small part of what was spilled, and
// the output is still complete and in order.
func TestMergeRewritesFewestRuns(t *testing.T) {
	dir := t.TempDir()
	// Fan-in: 64 KiB budget / 2 / 4 KiB buffers = 8 runs.
	s := New(Options{MemoryLimit: 64 << 10, Dir: dir, BufferSize: 4 << 10})
	defer s.Close()
	rng := rand.New(rand.NewPCG(7, 8))
	n := 0
	for s.Stats().Runs < 10 {
		key := []byte(fmt.Sprintf("%08d", rng.IntN(1_000_000)))
		if err := s.Add(&Record{Key: key, Payload: make([]byte, 200), Tie: uint64(n)}); err != nil {
			t.Fatal(err)
		}
		n++
	}
	spilled := s.Stats().SpilledBytes
	it, err := Merge([]*Sorter{s})
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	var last []byte
	for it.Next() {
		r := it.Record()
		if last != nil && bytes.Compare(last, r.Key) > 0 {
			t.Fatalf("record %d out of order", got)
		}
		last = append(last[:0], r.Key...)
		got++
	}
	err = it.Err()
	it.Close()
	if err != nil || got != n {
		t.Fatalf("merged %d of %d records: %v", got, n, err)
	}
	// 10 runs and the records in memory (one cursor each) against a fan-in
	// of 8: merging the 3 smallest runs is enough (10-3+1 = 8 cursors plus
	// memory). Rewriting all 10 in groups of 8 would rewrite all of it.
	rewritten := s.Stats().SpilledBytes - spilled
	if rewritten == 0 || rewritten > spilled/2 {
		t.Fatalf("merge rewrote %d bytes of %d spilled in %d runs; want a few runs' worth", rewritten, spilled, s.Stats().Runs)
	}
	t.Logf("%d runs spilled %d bytes; the merge rewrote %d (%.0f%%)", s.Stats().Runs, spilled, rewritten, 100*float64(rewritten)/float64(spilled))
}
