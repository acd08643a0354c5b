package subsets

import (
	"fmt"
	"sort"
	"time"

	"github.com/pillarkit/pillar/pillar"
)

// Previous is the last generation of one subset, as a recompute finds it.
type Previous struct {
	// Exported is the policy's exported flag when the generation was made.
	Exported bool
	// Members sorted by page key.
	Members []pillar.SubsetMember
}

// Plan is the outcome of one recompute: the new generation of every subset,
// the membership changes, and the export work.
type Plan struct {
	// Members is the new generation of each subset of the Set, sorted by
	// page key (empty subsets have an empty, non-nil slice).
	Members map[string][]pillar.SubsetMember
	// Changes per subset in page-key order, subsets in file order, then
	// subsets that only the previous generation has (their members leave).
	Changes []Change
	// Decisions are the puts and deletes, sorted by page key.
	Decisions []Decision
}

// Plan runs a whole recompute in memory: Eval over every page at asOf,
// top-K, Diff against prev (by subset name), and ExportDecision per page.
// changed reports whether a page's record changed since the previous
// generation was exported (nil: none did). It is the reference for the
// MapReduce recompute, and enough for small corpora and tests; it holds
// every match in memory.
//
// A subset in prev that the Set no longer defines has its members leave.
func (s *Set) Plan(pages []Page, asOf time.Time, prev map[string]Previous, changed func(pageKey string) bool) (*Plan, error) {
	var matches []Match
	for i := range pages {
		matches = s.AppendEval(matches, &pages[i], asOf)
	}
	pl := &Plan{Members: make(map[string][]pillar.SubsetMember, len(s.policies))}
	byPage := map[string][]Change{}
	diff := func(name string, old, new []pillar.SubsetMember) error {
		ch, err := Diff(name, old, new)
		if err != nil {
			return err
		}
		pl.Changes = append(pl.Changes, ch...)
		for _, c := range ch {
			byPage[c.PageKey] = append(byPage[c.PageKey], c)
		}
		return nil
	}
	for _, name := range s.Names() {
		m, err := s.Members(name, matches)
		if err != nil {
			return nil, err
		}
		if m == nil {
			m = []pillar.SubsetMember{}
		}
		pl.Members[name] = m
		if err := diff(name, prev[name].Members, m); err != nil {
			return nil, err
		}
	}
	var gone []string
	for name := range prev {
		if _, ok := s.byName[name]; !ok {
			gone = append(gone, name)
		}
	}
	sort.Strings(gone)
	for _, name := range gone {
		if err := diff(name, prev[name].Members, nil); err != nil {
			return nil, err
		}
	}
	keys := make([]string, 0, len(byPage))
	for k := range byPage {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	oldExported := func(name string) bool { return prev[name].Exported }
	for _, k := range keys {
		d := Decide(k, byPage[k], oldExported, s.Exported, changed != nil && changed(k))
		if d.Op != "" {
			pl.Decisions = append(pl.Decisions, d)
		}
	}
	return pl, nil
}

// Previous returns the plan's generation as the prev of the next Plan.
func (s *Set) Previous(pl *Plan) map[string]Previous {
	out := make(map[string]Previous, len(pl.Members))
	for name, m := range pl.Members {
		out[name] = Previous{Exported: s.Exported(name), Members: m}
	}
	return out
}

// String renders the decisions one a line: "put 01ab… subsets: entered fresh".
func (d Decision) String() string {
	return fmt.Sprintf("%s %s %s", d.Op, d.PageKey, d.Cause)
}
