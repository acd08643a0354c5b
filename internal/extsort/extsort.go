// Package extsort sorts records with bounded memory: each Sorter keeps up to
// its memory budget of records, sorts them and spills a sorted run to a file
// when the budget is full; Merge merges the runs of several sorters (and what
// they still hold in memory) into one sorted stream.
//
// Records compare by Key (bytes.Compare) and then by Tie, so the output order
// is fully determined by the records, not by which goroutine added them.
//
// A Sorter is for one goroutine. Merge is called once, after every Add; the
// sorters must not be used afterwards except for Close.
//
// Run file format (one record after another, no header):
//
//	uvarint len(Key) | uvarint Prefix | uvarint Tie | uvarint Table | varint Row |
//	uvarint len(Payload) | Key | Payload
package extsort

import (
	"bufio"
	"bytes"
	"cmp"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"unsafe"
)

// Record is one row being sorted.
type Record struct {
	// Key is the sort key; Key[:Prefix] is the group key (reduce key).
	Key    []byte
	Prefix int
	// Tie orders records with equal keys.
	Tie uint64
	// Table and Row say where the record came from.
	Table int
	Row   int64
	// Payload is the encoded row.
	Payload []byte
	// Value, set only by a Source, is the row itself in place of Payload
	// (nil Payload), and Size an estimate of its bytes (for the caller's
	// batching). A Sorter never holds one: Add keeps Key and Payload only.
	Value any
	Size  int
}

// recSize is what one buffered record costs beyond its bytes (its memRec).
const recSize = int64(unsafe.Sizeof(memRec{}))

// Options configure a Sorter.
type Options struct {
	// MemoryLimit is the budget of buffered records in bytes (keys, payloads
	// and per-record overhead). The default value is 64 MiB.
	MemoryLimit int64
	// Dir receives the run files. It must exist. The default value is
	// os.TempDir().
	Dir string
	// BufferSize is the read and write buffer of one run file. The default
	// value is 64 KiB.
	BufferSize int
}

func (o *Options) ensureDefaults() {
	if o.MemoryLimit <= 0 {
		o.MemoryLimit = 64 << 20
	}
	if o.Dir == "" {
		o.Dir = os.TempDir()
	}
	if o.BufferSize <= 0 {
		o.BufferSize = 64 << 10
	}
}

// Stats describe what a sorter did.
type Stats struct {
	Records      int64
	Bytes        int64 // key and payload bytes added
	Runs         int   // runs spilled to disk
	SpilledBytes int64 // bytes written to run files, merge passes included
}

type memRec struct {
	off           int
	klen, plen    int32
	prefix, table int32
	tie           uint64
	row           int64
}

var runSeq atomic.Int64

// Sorter buffers, sorts and spills records.
type Sorter struct {
	opts  Options
	arena []byte
	recs  []memRec
	runs  []string
	stats Stats
	err   error
}

// New returns a sorter.
func New(opts Options) *Sorter {
	opts.ensureDefaults()
	return &Sorter{opts: opts}
}

// allocated is what the buffers hold allocated: the arena's and the
// records' capacity, not just their length, so append's growth slack is
// inside the budget too.
func (s *Sorter) allocated() int64 { return int64(cap(s.arena)) + int64(cap(s.recs))*recSize }

// Add copies r into the sorter, spilling a run first if the budget is full.
// The buffers grow by doubling, each up to its share of the budget (in the
// proportion of the records buffered so far), and are reused after a
// spill; what they hold allocated stays within MemoryLimit, except that one
// record larger than the budget is still taken on its own.
func (s *Sorter) Add(r *Record) error {
	if s.err != nil {
		return s.err
	}
	n := len(r.Key) + len(r.Payload)
	for !s.room(n) {
		if len(s.recs) == 0 {
			// A record beyond the whole budget: take it alone.
			s.arena = make([]byte, 0, n)
			if cap(s.recs) == 0 {
				s.recs = make([]memRec, 0, 1)
			}
			break
		}
		if err := s.spill(); err != nil {
			s.err = err
			return err
		}
	}
	off := len(s.arena)
	s.arena = append(s.arena, r.Key...)
	s.arena = append(s.arena, r.Payload...)
	s.recs = append(s.recs, memRec{off: off, klen: int32(len(r.Key)), plen: int32(len(r.Payload)),
		prefix: int32(r.Prefix), table: int32(r.Table), tie: r.Tie, row: r.Row})
	s.stats.Records++
	s.stats.Bytes += int64(n)
	return nil
}

// room makes room for one more record of n bytes, growing the buffers
// within the budget; false when they are full (spill first).
func (s *Sorter) room(n int) bool {
	lim := s.opts.MemoryLimit
	// The mean record so far (this one included) splits the budget between
	// the arena and the records.
	avg := (int64(len(s.arena)) + int64(n)) / int64(len(s.recs)+1)
	maxRecs := max(lim/(avg+recSize), 1)
	if cap(s.recs) == len(s.recs) {
		nc := min(max(2*int64(cap(s.recs)), 64), maxRecs, (lim-int64(cap(s.arena)))/recSize)
		if nc <= int64(len(s.recs)) {
			return false
		}
		nr := make([]memRec, len(s.recs), nc)
		copy(nr, s.recs)
		s.recs = nr
	}
	if cap(s.arena)-len(s.arena) < n {
		need := int64(len(s.arena) + n)
		nc := min(max(2*int64(cap(s.arena)), need, 4096), max(maxRecs*avg, need), lim-int64(cap(s.recs))*recSize)
		if nc < need {
			return false
		}
		na := make([]byte, len(s.arena), nc)
		copy(na, s.arena)
		s.arena = na
	}
	return true
}

func (s *Sorter) key(m *memRec) []byte { return s.arena[m.off : m.off+int(m.klen)] }

func (s *Sorter) sortMem() {
	slices.SortFunc(s.recs, func(a, b memRec) int {
		if c := bytes.Compare(s.key(&a), s.key(&b)); c != 0 {
			return c
		}
		switch {
		case a.tie < b.tie:
			return -1
		case a.tie > b.tie:
			return 1
		}
		return 0
	})
}

func (s *Sorter) spill() error {
	s.sortMem()
	name := filepath.Join(s.opts.Dir, fmt.Sprintf("run-%06d", runSeq.Add(1)))
	w, err := createRun(name, s.opts.BufferSize)
	if err != nil {
		return err
	}
	var r Record
	for i := range s.recs {
		s.fill(&r, &s.recs[i])
		if err := w.write(&r); err != nil {
			w.abort()
			return err
		}
	}
	n, err := w.finish()
	if err != nil {
		return err
	}
	s.runs = append(s.runs, name)
	s.stats.Runs++
	s.stats.SpilledBytes += n
	s.recs = s.recs[:0]
	s.arena = s.arena[:0]
	if s.allocated() > s.opts.MemoryLimit {
		s.recs, s.arena = nil, nil // after a record beyond the budget
	}
	return nil
}

func (s *Sorter) fill(r *Record, m *memRec) {
	r.Key = s.arena[m.off : m.off+int(m.klen)]
	r.Payload = s.arena[m.off+int(m.klen) : m.off+int(m.klen)+int(m.plen)]
	r.Prefix, r.Table, r.Tie, r.Row = int(m.prefix), int(m.table), m.tie, m.row
}

// Stats returns what the sorter did so far.
func (s *Sorter) Stats() Stats { return s.stats }

// Close removes the sorter's run files and drops its buffer.
func (s *Sorter) Close() error {
	var errs []error
	for _, f := range s.runs {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	s.runs, s.recs, s.arena = nil, nil, nil
	return errors.Join(errs...)
}

// runWriter writes one run file.
type runWriter struct {
	f   *os.File
	w   *bufio.Writer
	n   int64
	hdr [6 * binary.MaxVarintLen64]byte
}

func createRun(name string, buf int) (*runWriter, error) {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("extsort: create run: %w", err)
	}
	return &runWriter{f: f, w: bufio.NewWriterSize(f, buf)}, nil
}

func (w *runWriter) write(r *Record) error {
	h := w.hdr[:0]
	h = binary.AppendUvarint(h, uint64(len(r.Key)))
	h = binary.AppendUvarint(h, uint64(r.Prefix))
	h = binary.AppendUvarint(h, r.Tie)
	h = binary.AppendUvarint(h, uint64(r.Table))
	h = binary.AppendVarint(h, r.Row)
	h = binary.AppendUvarint(h, uint64(len(r.Payload)))
	w.w.Write(h)
	w.w.Write(r.Key)
	_, err := w.w.Write(r.Payload)
	w.n += int64(len(h) + len(r.Key) + len(r.Payload))
	if err != nil {
		return fmt.Errorf("extsort: write run %s: %w", w.f.Name(), err)
	}
	return nil
}

func (w *runWriter) finish() (int64, error) {
	if err := w.w.Flush(); err != nil {
		w.abort()
		return 0, fmt.Errorf("extsort: write run %s: %w", w.f.Name(), err)
	}
	if err := w.f.Close(); err != nil {
		os.Remove(w.f.Name())
		return 0, fmt.Errorf("extsort: close run %s: %w", w.f.Name(), err)
	}
	return w.n, nil
}

func (w *runWriter) abort() {
	w.f.Close()
	os.Remove(w.f.Name())
}

// cursor walks one sorted source.
type cursor interface {
	next() bool
	rec() *Record
	err() error
	close()
}

type memCursor struct {
	s *Sorter
	i int
	r Record
}

func (c *memCursor) next() bool {
	if c.i >= len(c.s.recs) {
		return false
	}
	c.s.fill(&c.r, &c.s.recs[c.i])
	c.i++
	return true
}
func (c *memCursor) rec() *Record { return &c.r }
func (c *memCursor) err() error   { return nil }
func (c *memCursor) close()       {}

type fileCursor struct {
	f   *os.File
	br  *bufio.Reader
	buf []byte
	r   Record
	e   error
}

func openRun(name string, bufSize int) (*fileCursor, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("extsort: open run: %w", err)
	}
	return &fileCursor{f: f, br: bufio.NewReaderSize(f, bufSize)}, nil
}

func (c *fileCursor) next() bool {
	if c.e != nil {
		return false
	}
	klen, err := binary.ReadUvarint(c.br)
	if err == io.EOF {
		return false
	}
	var prefix, tie, table, plen uint64
	var row int64
	if err == nil {
		prefix, err = binary.ReadUvarint(c.br)
	}
	if err == nil {
		tie, err = binary.ReadUvarint(c.br)
	}
	if err == nil {
		table, err = binary.ReadUvarint(c.br)
	}
	if err == nil {
		row, err = binary.ReadVarint(c.br)
	}
	if err == nil {
		plen, err = binary.ReadUvarint(c.br)
	}
	if err == nil {
		n := int(klen + plen)
		if cap(c.buf) < n {
			c.buf = make([]byte, n)
		}
		c.buf = c.buf[:n]
		_, err = io.ReadFull(c.br, c.buf)
	}
	if err != nil {
		c.e = fmt.Errorf("extsort: run %s: truncated record: %w", c.f.Name(), err)
		return false
	}
	c.r = Record{Key: c.buf[:klen], Prefix: int(prefix), Tie: tie, Table: int(table), Row: row, Payload: c.buf[klen:]}
	return true
}
func (c *fileCursor) rec() *Record { return &c.r }
func (c *fileCursor) err() error   { return c.e }
func (c *fileCursor) close()       { c.f.Close() }

func less(a, b *Record) bool {
	if c := bytes.Compare(a.Key, b.Key); c != 0 {
		return c < 0
	}
	return a.Tie < b.Tie
}

type cursorHeap []cursor

func (h cursorHeap) Len() int           { return len(h) }
func (h cursorHeap) Less(i, j int) bool { return less(h[i].rec(), h[j].rec()) }
func (h cursorHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *cursorHeap) Push(x any)        { *h = append(*h, x.(cursor)) }
func (h *cursorHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Iterator yields the merged records in order.
type Iterator struct {
	h   cursorHeap
	all []cursor
	cur cursor
	e   error
}

func newIterator(cs []cursor) *Iterator {
	it := &Iterator{all: cs}
	for _, c := range cs {
		if c.next() {
			it.h = append(it.h, c)
		} else if err := c.err(); err != nil {
			it.e = err
		}
	}
	heap.Init(&it.h)
	return it
}

// Next advances to the next record.
func (it *Iterator) Next() bool {
	if it.e != nil {
		return false
	}
	if it.cur != nil {
		if it.cur.next() {
			heap.Fix(&it.h, 0)
		} else {
			if err := it.cur.err(); err != nil {
				it.e = err
				return false
			}
			heap.Pop(&it.h)
		}
		it.cur = nil
	}
	if len(it.h) == 0 {
		return false
	}
	it.cur = it.h[0]
	return true
}

// Record returns the current record; its slices stay valid until Next.
func (it *Iterator) Record() *Record { return it.cur.rec() }

// Err returns the first read error.
func (it *Iterator) Err() error { return it.e }

// Close closes the run files the iterator reads.
func (it *Iterator) Close() error {
	for _, c := range it.all {
		c.close()
	}
	it.all, it.h = nil, nil
	return nil
}

// Merge merges everything the sorters hold. When there are more run files
// than fit the budget at once (one read buffer each, at most half of the
// sorters' combined budget), it first merges groups of runs into longer runs,
// in as many passes as needed. The extra bytes written are added to the first
// sorter's stats.
func Merge(sorters []*Sorter) (*Iterator, error) {
	return MergeWith(sorters, nil)
}

// Source is a stream of records that is already sorted (by Key, then Tie),
// such as a table read in its sort order: MergeWith merges it with the
// sorters' contents without sorting or spilling it. Record's slices need
// stay valid only until the next call of Next.
type Source interface {
	Next() bool
	Record() *Record
	Err() error
	Close()
}

type sourceCursor struct{ s Source }

func (c sourceCursor) next() bool   { return c.s.Next() }
func (c sourceCursor) rec() *Record { return c.s.Record() }
func (c sourceCursor) err() error   { return c.s.Err() }
func (c sourceCursor) close()       { c.s.Close() }

// MergeWith is Merge of the sorters and the already sorted sources.
func MergeWith(sorters []*Sorter, sources []Source) (*Iterator, error) {
	if len(sorters) == 0 {
		var cs []cursor
		for _, src := range sources {
			cs = append(cs, sourceCursor{src})
		}
		it := newIterator(cs)
		if it.e != nil {
			it.Close()
			return nil, it.e
		}
		return it, nil
	}
	var budget int64
	for _, s := range sorters {
		if s.err != nil {
			return nil, s.err
		}
		budget += s.opts.MemoryLimit
		s.sortMem()
	}
	o := sorters[0].opts
	fanIn := int(budget / 2 / int64(o.BufferSize))
	fanIn = max(2, min(fanIn, 256))

	var runs []string
	for _, s := range sorters {
		runs = append(runs, s.runs...)
	}
	owner := sorters[0]
	// More runs than the fan-in: merge the smallest runs, no more of them
	// than it takes to bring the count down to the fan-in, so that only
	// they are rewritten and not the whole data set once more per pass.
	// (Merging every run in groups of fanIn rewrote the corpus once more as
	// soon as the runs outnumbered the fan-in: `pillar ingest` at 160k
	// 20 KB pages wrote 4.1× the bytes it stored, against 2.5× at 10k.)
	sizes := make(map[string]int64, len(runs))
	for _, r := range runs {
		fi, err := os.Stat(r)
		if err != nil {
			return nil, err
		}
		sizes[r] = fi.Size()
	}
	for len(runs) > fanIn {
		k := min(fanIn, len(runs)-fanIn+1)
		slices.SortStableFunc(runs, func(a, b string) int { return cmp.Compare(sizes[a], sizes[b]) })
		group := runs[:k]
		name, n, err := mergeRuns(group, o)
		if err != nil {
			return nil, err
		}
		owner.runs = append(owner.runs, name)
		owner.stats.SpilledBytes += n
		for _, g := range group {
			os.Remove(g)
		}
		sizes[name] = n
		runs = append([]string{name}, runs[k:]...)
	}
	// The final merge's read buffers share an eighth of the budget, so
	// that what the merge holds does not grow with the number of runs
	// (with the data) up to the fan-in's half of it: each run gets its part,
	// at most BufferSize and at least minReadBuffer.
	buf := readBuffer(budget, len(runs), o.BufferSize)
	var cs []cursor
	for _, r := range runs {
		c, err := openRun(r, buf)
		if err != nil {
			for _, c := range cs {
				c.close()
			}
			return nil, err
		}
		cs = append(cs, c)
	}
	for _, s := range sorters {
		if len(s.recs) > 0 {
			cs = append(cs, &memCursor{s: s})
		}
	}
	for _, src := range sources {
		cs = append(cs, sourceCursor{src})
	}
	it := newIterator(cs)
	if it.e != nil {
		it.Close()
		return nil, it.e
	}
	return it, nil
}

// minReadBuffer is the smallest read buffer of a run being merged.
const minReadBuffer = 4 << 10

// readBuffer is the read buffer of each of runs merged at once within
// budget: an eighth of the budget shared among them, between minReadBuffer
// and max.
func readBuffer(budget int64, runs, bufSize int) int {
	return int(min(max(budget/8/int64(max(runs, 1)), minReadBuffer), int64(bufSize)))
}

func mergeRuns(group []string, o Options) (string, int64, error) {
	var cs []cursor
	defer func() {
		for _, c := range cs {
			c.close()
		}
	}()
	for _, g := range group {
		c, err := openRun(g, o.BufferSize)
		if err != nil {
			return "", 0, err
		}
		cs = append(cs, c)
	}
	name := filepath.Join(o.Dir, fmt.Sprintf("run-%06d", runSeq.Add(1)))
	w, err := createRun(name, o.BufferSize)
	if err != nil {
		return "", 0, err
	}
	it := newIterator(cs)
	for it.Next() {
		if err := w.write(it.Record()); err != nil {
			w.abort()
			return "", 0, err
		}
	}
	if err := it.Err(); err != nil {
		w.abort()
		return "", 0, err
	}
	n, err := w.finish()
	return name, n, err
}
