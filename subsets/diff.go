package subsets

import (
	"fmt"
	"iter"
	"slices"
	"strings"
	"time"

	"github.com/pillarkit/pillar/pillar"
)

// ChangeKind says how a page's membership of one subset changed between two
// generations.
type ChangeKind int8

const (
	// Enter: a member of the new generation only.
	Enter ChangeKind = iota + 1
	// Leave: a member of the old generation only.
	Leave
	// Stay: a member of both.
	Stay
)

func (k ChangeKind) String() string {
	switch k {
	case Enter:
		return "enter"
	case Leave:
		return "leave"
	case Stay:
		return "stay"
	}
	return fmt.Sprintf("ChangeKind(%d)", int8(k))
}

// Change is one page's membership change of one subset.
type Change struct {
	Subset   string
	PageKey  string
	Kind     ChangeKind
	OldScore float64 // Leave and Stay
	NewScore float64 // Enter and Stay
}

// Diff joins the old and new generation of one subset by page key. Both must
// be sorted by page key without repeats (the subsets/<name> tables are);
// otherwise it fails with ErrUnsorted. Changes come in page-key order.
func Diff(subset string, old, new []pillar.SubsetMember) ([]Change, error) {
	var out []Change
	for c, err := range DiffSeq(subset, slices.Values(old), slices.Values(new)) {
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// DiffSeq is Diff over streams (a merge join in constant memory): use it on
// table readers. It stops at the first error, which it yields last.
func DiffSeq(subset string, old, new iter.Seq[pillar.SubsetMember]) iter.Seq2[Change, error] {
	return func(yield func(Change, error) bool) {
		nextOld, stopOld := iter.Pull(old)
		defer stopOld()
		nextNew, stopNew := iter.Pull(new)
		defer stopNew()
		var prevOld, prevNew string
		pull := func(next func() (pillar.SubsetMember, bool), prev *string, which string) (pillar.SubsetMember, bool, error) {
			m, ok := next()
			if !ok {
				return m, false, nil
			}
			if *prev != "" && m.PageKey <= *prev {
				return m, false, fmt.Errorf("subsets: diff of %q: %s generation: key %s after %s: %w", subset, which, m.PageKey, *prev, ErrUnsorted)
			}
			*prev = m.PageKey
			return m, true, nil
		}
		o, okO, err := pull(nextOld, &prevOld, "old")
		if err != nil {
			yield(Change{}, err)
			return
		}
		n, okN, err := pull(nextNew, &prevNew, "new")
		if err != nil {
			yield(Change{}, err)
			return
		}
		for okO || okN {
			var c Change
			advO, advN := false, false
			switch {
			case okO && okN && o.PageKey == n.PageKey:
				c = Change{Subset: subset, PageKey: o.PageKey, Kind: Stay, OldScore: o.Score, NewScore: n.Score}
				advO, advN = true, true
			case okO && (!okN || o.PageKey < n.PageKey):
				c = Change{Subset: subset, PageKey: o.PageKey, Kind: Leave, OldScore: o.Score}
				advO = true
			default:
				c = Change{Subset: subset, PageKey: n.PageKey, Kind: Enter, NewScore: n.Score}
				advN = true
			}
			if !yield(c, nil) {
				return
			}
			if advO {
				if o, okO, err = pull(nextOld, &prevOld, "old"); err != nil {
					yield(Change{}, err)
					return
				}
			}
			if advN {
				if n, okN, err = pull(nextNew, &prevNew, "new"); err != nil {
					yield(Change{}, err)
					return
				}
			}
		}
	}
}

// Decision is what the serving tier must do about one page.
type Decision struct {
	PageKey string
	// Op is pillar.OpPut, pillar.OpDelete, or "" for nothing to do.
	Op string
	// Cause explains the decision, for ExportRecord.Cause.
	Cause string
}

// ExportDecision decides what the serving tier must do about one page, from
// the exported subsets it belonged to in the old generation, those it belongs
// to in the new one, and whether its record changed since the old generation
// was exported:
//
//   - in no exported subset before, in one now: put (it entered);
//   - in one before and now, record changed: put (re-export);
//   - in one before and now, record unchanged: nothing, even if it moved
//     between exported subsets (the serving value is the same);
//   - in one before, in none now: delete (it left every exported subset);
//   - in none before or now: nothing.
//
// oldExported must list the subsets that were exported when the old
// generation was made (record the flag with each generation: a policy that
// stops being exported must delete its members). The lists are sets in any
// order; the function does not modify them.
func ExportDecision(pageKey string, oldExported, newExported []string, recordChanged bool) Decision {
	d := Decision{PageKey: pageKey}
	switch {
	case len(newExported) > 0 && len(oldExported) == 0:
		d.Op, d.Cause = pillar.OpPut, "subsets: entered "+joinSorted(newExported)
	case len(newExported) > 0 && recordChanged:
		d.Op, d.Cause = pillar.OpPut, "subsets: changed while in "+joinSorted(newExported)
	case len(newExported) == 0 && len(oldExported) > 0:
		d.Op, d.Cause = pillar.OpDelete, "subsets: left "+joinSorted(oldExported)
	}
	return d
}

// Decide is ExportDecision for a reducer that groups the changes of all
// subsets by page key: changes are one page's changes (any order, any
// subsets, Stay included), oldExported and newExported tell whether a subset
// was exported in the old generation and is in the new one.
func Decide(pageKey string, changes []Change, oldExported, newExported func(subset string) bool, recordChanged bool) Decision {
	var oldE, newE []string
	for _, c := range changes {
		if c.Kind != Enter && oldExported(c.Subset) {
			oldE = append(oldE, c.Subset)
		}
		if c.Kind != Leave && newExported(c.Subset) {
			newE = append(newE, c.Subset)
		}
	}
	return ExportDecision(pageKey, oldE, newE, recordChanged)
}

// ReadMembers adapts a reader of a subsets/<name> table (rows of
// pillar.SubsetMember, sorted by page key) to the sequence DiffSeq takes.
// The sequence ends early on a read error, which err then returns; the
// caller still closes r.
func ReadMembers(r pillar.RowReader) (seq iter.Seq[pillar.SubsetMember], err func() error) {
	var readErr error
	seq = func(yield func(pillar.SubsetMember) bool) {
		for r.Next() {
			var m pillar.SubsetMember
			if e := r.Scan(&m); e != nil {
				readErr = fmt.Errorf("subsets: read members: %w", e)
				return
			}
			if !yield(m) {
				return
			}
		}
		if e := r.Err(); e != nil {
			readErr = fmt.Errorf("subsets: read members: %w", e)
		}
	}
	return seq, func() error { return readErr }
}

func joinSorted(names []string) string {
	s := slices.Clone(names)
	slices.Sort(s)
	return strings.Join(slices.Compact(s), ",")
}

// Generation describes one membership generation of a subset. Recompute
// records it with the generation (e.g. as a JSON attribute) so that the next
// run can diff against it and knows whether its members were exported.
type Generation struct {
	Subset      string    `json:"subset"`
	Number      int64     `json:"number"`      // increasing per subset
	AsOf        time.Time `json:"as_of"`       // the --as-of of the evaluation
	Exported    bool      `json:"exported"`    // the policy's flag at the time
	Fingerprint string    `json:"fingerprint"` // Set.Fingerprint at the time
	Members     int64     `json:"members"`
	Table       string    `json:"table"` // where the members are stored
}

// Prune splits generation numbers into the newest keep (kept, ascending) and
// the rest (dropped, ascending). keep < 1 keeps one: the current generation
// is never dropped.
func Prune(generations []int64, keep int) (kept, dropped []int64) {
	g := slices.Clone(generations)
	slices.Sort(g)
	g = slices.Compact(g)
	if keep < 1 {
		keep = 1
	}
	if len(g) <= keep {
		return g, nil
	}
	return g[len(g)-keep:], g[:len(g)-keep]
}
