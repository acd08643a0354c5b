// Package writeset records what a pillar.Tx changes until it commits: the
// tables it writes (one staged part per writer, in the order the writers
// were opened) or drops, the attributes it sets, deletes or expects, the
// export records it appends and the input ids it marks consumed. Both store
// backends (pillar/local and pillar/ytstore) keep a transaction's changes in
// one Set; only the staging of a part (a Parquet file, a YTsaurus table) and
// the commit itself are theirs.
//
// The rules a Set enforces, the same for every backend:
//
//   - a table name is non-empty segments separated by '/', none of them '.'
//     or '..';
//   - a row type is a struct (or a pointer to one); every writer of one
//     table in one Tx uses the same row type, and the first writer's mode
//     (Replace or Append) is the table's;
//   - Append onto a table whose rows at Begin are of another type is
//     refused;
//   - a table dropped earlier in the Tx and then written is replaced (there
//     is nothing left to append to); a table written and then dropped is
//     dropped;
//   - after Finish, every change fails with pillar.ErrTxDone;
//   - Enqueue validates each record against the partition count.
//
// Errors name the table, attribute or record at fault, without a backend
// prefix (the backend wraps them with %w), and wrap pillar sentinels where
// callers branch on them (pillar.ErrNotFound, pillar.ErrTxDone).
//
// Concurrency: every method may be called from many goroutines; stage
// callbacks run under the Set's lock, so one Tx opens its writers one at a
// time (they are written concurrently).
package writeset

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/pillarkit/pillar/pillar"
)

// Part is what one writer of a table staged.
type Part[S any] struct {
	// Staged is the backend's handle of the part (a file, a table).
	Staged S
	closed bool
}

// Table is one table the Tx writes or drops.
type Table[S any] struct {
	Name     string
	Drop     bool
	Mode     pillar.WriteMode
	RowType  reflect.Type
	SortedBy []string
	// Parts in the order their writers were opened.
	Parts []*Part[S]
}

// Attr is one attribute change.
type Attr struct {
	Name   string
	Delete bool // DeleteAttr
	Expect bool // ExpectAttr only: nothing is written
	Value  json.RawMessage
}

// Set is a transaction's write-set. The zero value is not usable; call New.
type Set[S any] struct {
	mu       sync.Mutex
	done     bool
	tables   map[string]*Table[S]
	order    []string
	attrs    map[string]*Attr
	queue    []pillar.ExportRecord
	consumed []string
	nparts   int
}

// New returns an empty write-set.
func New[S any]() *Set[S] {
	return &Set[S]{tables: map[string]*Table[S]{}, attrs: map[string]*Attr{}}
}

// ValidTableName checks a table name (see the package comment).
func ValidTableName(name string) error {
	if name == "" || strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") || strings.Contains(name, "//") {
		return fmt.Errorf("table name %q: must be non-empty path segments separated by '/'", name)
	}
	for _, seg := range strings.Split(name, "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("table name %q: '.' and '..' are not allowed", name)
		}
	}
	return nil
}

// RowType returns the struct type of a row value (or of a pointer to one).
func RowType(table string, row any) (reflect.Type, error) {
	rt := reflect.TypeOf(row)
	for rt != nil && rt.Kind() == reflect.Pointer {
		rt = rt.Elem()
	}
	if rt == nil || rt.Kind() != reflect.Struct {
		return nil, fmt.Errorf("table %q: row type %T is not a struct", table, row)
	}
	return rt, nil
}

// BaseRowType reports the row type name (reflect.Type.String) of a table
// in the state the Tx began from; ok is false when the table did not exist
// or records no row type.
type BaseRowType func(table string) (name string, ok bool)

// Write records a new writer of a table and calls stage, under the Set's
// lock, to stage its part; n numbers the parts of the Tx from 1. The table
// must have passed ValidTableName and rt must come from RowType.
func (s *Set[S]) Write(name string, rt reflect.Type, opts *pillar.WriteOptions, base BaseRowType,
	stage func(t *Table[S], n int) (S, error)) (*Part[S], error) {
	o := pillar.WriteOptions{}
	if opts != nil {
		o = *opts
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return nil, pillar.ErrTxDone
	}
	t := s.tables[name]
	fresh := t == nil
	switch {
	case t == nil || t.Drop:
		mode := o.Mode
		if t != nil {
			mode = pillar.Replace // dropped earlier in this Tx: nothing to append to
		}
		t = &Table[S]{Name: name, Mode: mode, RowType: rt, SortedBy: slices.Clone(o.SortedBy)}
	case t.RowType != rt:
		return nil, fmt.Errorf("table %q: row type %s differs from %s written earlier in this transaction", name, rt, t.RowType)
	}
	if t.Mode == pillar.Append && base != nil {
		if old, ok := base(name); ok && old != rt.String() {
			return nil, fmt.Errorf("table %q: cannot append rows of type %s to a table of %s", name, rt, old)
		}
	}
	st, err := stage(t, s.nparts+1)
	if err != nil {
		return nil, fmt.Errorf("table %q: %w", name, err)
	}
	s.nparts++
	if fresh {
		s.order = append(s.order, name)
	}
	s.tables[name] = t
	p := &Part[S]{Staged: st}
	t.Parts = append(t.Parts, p)
	return p, nil
}

// Closed marks a part's writer closed (its rows complete) and applies
// update to its handle under the Set's lock. Only closed parts commit.
func (s *Set[S]) Closed(p *Part[S], update func(*S)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if update != nil {
		update(&p.Staged)
	}
	p.closed = true
}

// Drop records that the table is dropped; existed says whether it existed
// when the Tx began. Dropping a table that neither existed nor was written
// in this Tx is pillar.ErrNotFound.
func (s *Set[S]) Drop(name string, existed bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return pillar.ErrTxDone
	}
	t := s.tables[name]
	if !existed && (t == nil || t.Drop) {
		return fmt.Errorf("drop table %q: %w", name, pillar.ErrNotFound)
	}
	if t == nil {
		s.order = append(s.order, name)
	}
	s.tables[name] = &Table[S]{Name: name, Drop: true}
	return nil
}

// SetAttr records a JSON-encoded attribute value.
func (s *Set[S]) SetAttr(name string, value any) error {
	b, err := json.Marshal(value)
	if err != nil {
		return fmt.Errorf("attribute %q: %w", name, err)
	}
	return s.attr(&Attr{Name: name, Value: b}, true)
}

// DeleteAttr records that the attribute is removed.
func (s *Set[S]) DeleteAttr(name string) error { return s.attr(&Attr{Name: name, Delete: true}, true) }

// ExpectAttr records that the attribute must be unchanged at commit; a set
// or delete of the same attribute in this Tx already implies it.
func (s *Set[S]) ExpectAttr(name string) error { return s.attr(&Attr{Name: name, Expect: true}, false) }

func (s *Set[S]) attr(a *Attr, overwrite bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return pillar.ErrTxDone
	}
	if overwrite || s.attrs[a.Name] == nil {
		s.attrs[a.Name] = a
	}
	return nil
}

// Enqueue records export-queue appends after validating each record for a
// store of the given partition count.
func (s *Set[S]) Enqueue(partitions int, recs ...pillar.ExportRecord) error {
	for i := range recs {
		if err := recs[i].Validate(partitions); err != nil {
			return fmt.Errorf("enqueue record %d: %w", i, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return pillar.ErrTxDone
	}
	s.queue = append(s.queue, recs...)
	return nil
}

// MarkConsumed records input ids to mark consumed.
func (s *Set[S]) MarkConsumed(ids ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return pillar.ErrTxDone
	}
	s.consumed = append(s.consumed, ids...)
	return nil
}

// Finish ends the write-set: every later change fails with ErrTxDone. It
// reports whether this call ended it (false: already finished), so that
// Commit and Abort run once.
func (s *Set[S]) Finish() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return false
	}
	s.done = true
	return true
}

// The accessors below are for the commit, after Finish: the Set no longer
// changes then.

// CheckClosed fails if a writer of a table to be committed was not closed.
func (s *Set[S]) CheckClosed() error {
	for _, name := range s.order {
		for _, p := range s.tables[name].Parts {
			if !p.closed {
				return fmt.Errorf("table %q: a writer was not closed (or its Close failed) before Commit; nothing committed", name)
			}
		}
	}
	return nil
}

// Tables returns the tables written or dropped, in first-touch order.
func (s *Set[S]) Tables() []*Table[S] {
	out := make([]*Table[S], 0, len(s.order))
	for _, name := range s.order {
		out = append(out, s.tables[name])
	}
	return out
}

// Touches reports whether the Tx writes or drops the table.
func (s *Set[S]) Touches(table string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.tables[table]
	return ok
}

// Attrs returns the attribute changes in name order.
func (s *Set[S]) Attrs() []*Attr {
	out := make([]*Attr, 0, len(s.attrs))
	for _, a := range s.attrs {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Queue returns the appended records by partition (in append order) and
// the partitions in increasing order.
func (s *Set[S]) Queue() (parts []int, byPart map[int][]pillar.ExportRecord) {
	byPart = map[int][]pillar.ExportRecord{}
	for _, r := range s.queue {
		byPart[int(r.Partition)] = append(byPart[int(r.Partition)], r)
	}
	for p := range byPart {
		parts = append(parts, p)
	}
	sort.Ints(parts)
	return parts, byPart
}

// Queued is the number of appended records.
func (s *Set[S]) Queued() int { return len(s.queue) }

// Consumed returns the input ids marked consumed, without repeats, in the
// order first marked.
func (s *Set[S]) Consumed() []string {
	seen := map[string]bool{}
	var out []string
	for _, id := range s.consumed {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}
