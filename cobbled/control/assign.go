package control

import (
	"hash/fnv"
	"sort"
)

// Candidate is a node that may hold replicas: its id and zone. Nodes with an
// empty zone share the zone "".
type Candidate struct {
	ID   string
	Zone string
}

// Assign returns, for each of partitions partitions, the ids of the nodes
// that hold its replicas, most preferred first: min(replicas, len(nodes))
// distinct nodes, in as many distinct zones as possible.
//
// It is a pure, deterministic function of its arguments (the order of nodes
// does not matter) built on rendezvous (highest-random-weight) hashing: every
// (partition, node) pair gets a score, and each partition takes the
// best-scoring node of each of its best zones (a zone's score is that of its
// best node), then fills any remaining slots with the best remaining nodes.
// So when one node joins, a partition's replica set changes only by the new
// node replacing one replica (or being added, when there were fewer nodes
// than replicas), and when one node leaves only the partitions it held
// change, each by one replacement. Changing the hash moves everything: it is
// part of the on-disk contract.
func Assign(partitions int, nodes []Candidate, replicas int) [][]string {
	out := make([][]string, partitions)
	if len(nodes) == 0 || replicas <= 0 {
		for p := range out {
			out[p] = []string{}
		}
		return out
	}
	// Deduplicate by id (last one wins) and hash each id once.
	byID := make(map[string]Candidate, len(nodes))
	for _, n := range nodes {
		byID[n.ID] = n
	}
	type cand struct {
		Candidate
		h     uint64
		score uint64
	}
	cands := make([]cand, 0, len(byID))
	for _, n := range byID {
		f := fnv.New64a()
		f.Write([]byte(n.ID))
		cands = append(cands, cand{Candidate: n, h: f.Sum64()})
	}
	r := min(replicas, len(cands))
	ranked := make([]cand, len(cands))
	for p := 0; p < partitions; p++ {
		ps := mix64(uint64(p) + 0x9e3779b97f4a7c15)
		for i := range cands {
			cands[i].score = mix64(cands[i].h ^ ps)
		}
		copy(ranked, cands)
		sort.Slice(ranked, func(i, j int) bool {
			if ranked[i].score != ranked[j].score {
				return ranked[i].score > ranked[j].score
			}
			return ranked[i].ID < ranked[j].ID
		})
		chosen := make([]bool, len(ranked))
		zones := map[string]bool{}
		n := 0
		for i, c := range ranked {
			if n == r {
				break
			}
			if !zones[c.Zone] {
				zones[c.Zone] = true
				chosen[i] = true
				n++
			}
		}
		for i := range ranked {
			if n == r {
				break
			}
			if !chosen[i] {
				chosen[i] = true
				n++
			}
		}
		ids := make([]string, 0, r)
		for i, c := range ranked {
			if chosen[i] {
				ids = append(ids, c.ID)
			}
		}
		out[p] = ids
	}
	return out
}

// mix64 is the splitmix64 finalizer: a cheap, well-distributed bijection.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
