package router

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/pillarkit/pillar/pillar"
)

// split groups a request's keys by partition (increasing), keys in
// first-seen order, duplicates folded, every position mapped to its key,
// and every part's keys one slice of flat in that order; the same on the
// map path (over smallKeys keys) as on the compare path.
func TestSplit(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 12, smallKeys, smallKeys + 1, 200} {
		for range 20 {
			keys := make([][]byte, n)
			for i := range keys {
				if i > 0 && rng.IntN(4) == 0 {
					keys[i] = keys[rng.IntN(i)] // a duplicate
					continue
				}
				k := make([]byte, pillar.KeySize)
				binary.BigEndian.PutUint64(k, rng.Uint64())
				binary.BigEndian.PutUint64(k[8:], rng.Uint64())
				keys[i] = k
			}
			g := &gather{t: &table{partitions: 16}}
			g.split(keys)
			if g.open != len(g.parts) {
				t.Fatalf("%d keys: open %d, %d parts", n, g.open, len(g.parts))
			}
			// The reference: partitions in order, distinct keys first-seen.
			byPart := map[int][]string{}
			seen := map[string]bool{}
			for _, k := range keys {
				if !seen[string(k)] {
					seen[string(k)] = true
					p := pillar.Partition(k, 16)
					byPart[p] = append(byPart[p], string(k))
				}
			}
			var ps []int
			for p := range byPart {
				ps = append(ps, p)
			}
			slices.Sort(ps)
			if len(ps) != len(g.parts) {
				t.Fatalf("%d keys: %d parts, want %d", n, len(g.parts), len(ps))
			}
			off := 0
			for i, pt := range g.parts {
				if pt.p != ps[i] || pt.off != off {
					t.Fatalf("%d keys: part %d is partition %d at %d, want %d at %d", n, i, pt.p, pt.off, ps[i], off)
				}
				for j, k := range pt.keys {
					if string(k) != byPart[pt.p][j] || string(g.flat[off+j]) != string(k) {
						t.Fatalf("%d keys: partition %d key %d out of order", n, pt.p, j)
					}
				}
				if len(pt.keys) != len(byPart[pt.p]) || cap(pt.keys) != len(pt.keys) {
					t.Fatalf("%d keys: partition %d: %d keys (cap %d), want %d", n, pt.p, len(pt.keys), cap(pt.keys), len(byPart[pt.p]))
				}
				off += len(pt.keys)
			}
			for i, at := range g.at {
				if string(at.pt.keys[at.j]) != string(keys[i]) {
					t.Fatalf("%d keys: position %d maps to another key", n, i)
				}
			}
		}
	}
}

// A 12-key request splits in a fixed handful of allocations (the old
// split: two maps, a part and a key slice per partition and a position
// slice per key: 40–60).
func TestSplitAllocs(t *testing.T) {
	keys := make([][]byte, 12)
	for i := range keys {
		keys[i] = make([]byte, pillar.KeySize)
		binary.BigEndian.PutUint64(keys[i], uint64(i*7919))
	}
	tb := &table{partitions: 64}
	allocs := testing.AllocsPerRun(200, func() {
		g := &gather{t: tb}
		g.split(keys)
	})
	if allocs > 8 {
		t.Errorf("split of 12 keys: %.0f allocations, want at most 8", allocs)
	}
}
