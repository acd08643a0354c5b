package subsets

import (
	"fmt"
	"sort"

	"github.com/pillarkit/pillar/pillar"
)

// TopK keeps the best K matches of one group, in O(log K) per Push and O(K)
// memory however many matches arrive: a reducer pushes the matches of one
// (subset, group) and reads Members at the end. The result does not depend on
// the order of pushes: ranks go by score (per the policy's direction), ties
// to the smaller page key, matches without a score last.
//
// A TopK is not safe for concurrent use. Each page may be pushed once.
type TopK struct {
	k     int
	desc  bool
	label string
	h     []Match // a heap with the worst kept match at the root
	n     int64
}

// NewTopK returns a TopK keeping k matches, best by descending score if desc.
// label describes the ordering in reasons ("per host by text_len desc").
// Set.NewTopK configures one from a policy.
func NewTopK(k int, desc bool, label string) *TopK {
	if k < 1 {
		panic(fmt.Sprintf("subsets: NewTopK: k = %d, want at least 1", k))
	}
	return &TopK{k: k, desc: desc, label: label}
}

// better reports whether a ranks before b.
func (t *TopK) better(a, b *Match) bool {
	if a.NoScore != b.NoScore {
		return !a.NoScore
	}
	if a.Score != b.Score {
		if t.desc {
			return a.Score > b.Score
		}
		return a.Score < b.Score
	}
	return a.PageKey < b.PageKey
}

// Push offers one match.
func (t *TopK) Push(m Match) {
	t.n++
	if len(t.h) < t.k {
		t.h = append(t.h, m)
		t.up(len(t.h) - 1)
		return
	}
	if t.better(&m, &t.h[0]) {
		t.h[0] = m
		t.down(0)
	}
}

// Seen returns how many matches were pushed since the last Reset.
func (t *TopK) Seen() int64 { return t.n }

// heap order: the parent is worse than (ranks after) its children.
func (t *TopK) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !t.better(&t.h[p], &t.h[i]) {
			return
		}
		t.h[p], t.h[i] = t.h[i], t.h[p]
		i = p
	}
}

func (t *TopK) down(i int) {
	n := len(t.h)
	for {
		w := i
		l, r := 2*i+1, 2*i+2
		if l < n && t.better(&t.h[w], &t.h[l]) {
			w = l
		}
		if r < n && t.better(&t.h[w], &t.h[r]) {
			w = r
		}
		if w == i {
			return
		}
		t.h[w], t.h[i] = t.h[i], t.h[w]
		i = w
	}
}

// Ranked returns the kept matches, best first, each reason extended with its
// rank ("...; rank 3 of top 200 per host by text_len desc").
func (t *TopK) Ranked() []Match {
	out := append([]Match(nil), t.h...)
	sort.Slice(out, func(i, j int) bool { return t.better(&out[i], &out[j]) })
	for i := range out {
		out[i].Reason = fmt.Sprintf("%s; rank %d of top %d %s", out[i].Reason, i+1, t.k, t.label)
	}
	return out
}

// Members returns the kept matches as membership rows sorted by page key.
func (t *TopK) Members() []pillar.SubsetMember {
	r := t.Ranked()
	sort.Slice(r, func(i, j int) bool { return r[i].PageKey < r[j].PageKey })
	out := make([]pillar.SubsetMember, len(r))
	for i := range r {
		out[i] = r[i].Member()
	}
	return out
}

// Reset empties t for the next group.
func (t *TopK) Reset() {
	t.h = t.h[:0]
	t.n = 0
}

// Members turns the matches of one subset (all groups, any order) into its
// membership rows sorted by page key, applying the subset's top-K per group.
// It holds everything in memory: a convenience for small inputs and tests;
// a MapReduce job reduces by (subset, group) with TopK instead.
func (s *Set) Members(subset string, matches []Match) ([]pillar.SubsetMember, error) {
	p, ok := s.byName[subset]
	if !ok {
		return nil, fmt.Errorf("subsets: %q: %w", subset, ErrUnknownSubset)
	}
	var out []pillar.SubsetMember
	if p.Top == nil {
		for i := range matches {
			if matches[i].Subset == subset {
				out = append(out, matches[i].Member())
			}
		}
	} else {
		groups := map[string]*TopK{}
		var order []string
		for _, m := range matches {
			if m.Subset != subset {
				continue
			}
			tk := groups[m.Group]
			if tk == nil {
				tk, _ = s.NewTopK(subset)
				groups[m.Group] = tk
				order = append(order, m.Group)
			}
			tk.Push(m)
		}
		for _, g := range order {
			out = append(out, groups[g].Members()...)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PageKey < out[j].PageKey })
	return out, nil
}
