package jobs

import (
	"bytes"
	"encoding/gob"
	"fmt"
	"reflect"
	"runtime/debug"
	"strings"
	"sync"

	"go.ytsaurus.tech/yt/go/mapreduce"
	"go.ytsaurus.tech/yt/go/yson"

	"github.com/pillarkit/pillar/internal/extsort"
	"github.com/pillarkit/pillar/jobs/internal/rowkey"
	"github.com/pillarkit/pillar/pillar"
)

// jobBox is what travels: the same gob encoding of an interface value that
// the SDK's job state uses, so a job that runs locally also survives the
// trip to a YTsaurus job process (exported fields only, registered type).
type jobBox struct{ Job any }

func encodeJob(job any) ([]byte, error) {
	var b bytes.Buffer
	box := &jobBox{Job: job}
	if err := gob.NewEncoder(&b).Encode(&box); err != nil {
		if strings.Contains(err.Error(), "not registered") {
			return nil, fmt.Errorf("jobs: %T: %w (call mapreduce.Register in an init function): %v", job, ErrNotRegistered, err)
		}
		return nil, fmt.Errorf("jobs: %T: gob-encode job: %w", job, err)
	}
	return b.Bytes(), nil
}

func decodeJob(b []byte) (mapreduce.Job, error) {
	var box *jobBox
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&box); err != nil {
		return nil, fmt.Errorf("jobs: gob-decode job: %w", err)
	}
	j, ok := box.Job.(mapreduce.Job)
	if !ok {
		return nil, fmt.Errorf("jobs: decoded %T is not a mapreduce.Job", box.Job)
	}
	return j, nil
}

// jobContext is the local mapreduce.JobContext.
type jobContext struct {
	vault  map[string]string
	cookie int
}

func (c *jobContext) LookupVault(name string) (string, bool) {
	v, ok := c.vault[name]
	return v, ok
}
func (c *jobContext) JobCookie() int { return c.cookie }

// mustError carries the error of MustScan/MustWrite out of the job as a
// panic, the local equivalent of the SDK's exit from the job process.
type mustError struct{ err error }

// safeDo runs the job, turning a panic into an error.
func safeDo(job mapreduce.Job, jc mapreduce.JobContext, in mapreduce.Reader, out []mapreduce.Writer) (err error, stack string) {
	defer func() {
		if p := recover(); p != nil {
			if me, ok := p.(mustError); ok {
				err = me.err
				return
			}
			err = fmt.Errorf("%w: %v", ErrJobPanic, p)
			stack = string(debug.Stack())
		}
	}()
	return job.Do(jc, in, out), ""
}

// position is what a reader remembers for error messages.
type position interface {
	where() (table string, row int64)
}

// progressBatch accumulates progress and hands it on every 256 rows.
type progressBatch struct {
	p           Progress
	rows, bytes int64
}

func (b *progressBatch) add(rows, bytes int64) {
	b.rows += rows
	b.bytes += bytes
	if b.rows >= 256 {
		b.flush()
	}
}

func (b *progressBatch) flush() {
	if b.rows > 0 || b.bytes > 0 {
		b.p.Add(b.rows, b.bytes)
		b.rows, b.bytes = 0, 0
	}
}

// tableReader is the mapreduce.Reader over a row range of one store table.
type tableReader struct {
	rr       pillar.RowReader
	done     <-chan struct{}
	cause    func() error
	table    int
	name     string
	row      int64 // index of the current row
	n        int64 // rows read
	rowBytes int64 // average row size, for progress
	has      bool
	err      error
	prog     progressBatch
}

func (r *tableReader) Next() bool {
	r.has = false
	if r.err != nil {
		return false
	}
	select {
	case <-r.done:
		r.err = r.cause()
		return false
	default:
	}
	if !r.rr.Next() {
		r.err = r.rr.Err()
		return false
	}
	r.row++
	r.n++
	r.has = true
	r.prog.add(1, r.rowBytes)
	return true
}

func (r *tableReader) check(call string) {
	if !r.has {
		panic(call + " called out of sequence")
	}
}

func (r *tableReader) TableIndex() int { r.check("TableIndex()"); return r.table }
func (r *tableReader) KeySwitch() bool { r.check("KeySwitch()"); return false }
func (r *tableReader) RowIndex() int64 { r.check("RowIndex()"); return r.row }
func (r *tableReader) RangeIndex() int { r.check("RangeIndex()"); return 0 }
func (r *tableReader) Scan(v any) error {
	r.check("Scan()")
	return r.rr.Scan(v)
}
func (r *tableReader) MustScan(v any) {
	if err := r.Scan(v); err != nil {
		panic(mustError{err})
	}
}
func (r *tableReader) Err() error { return r.err }
func (r *tableReader) where() (string, int64) {
	if r.n == 0 {
		return r.name, -1
	}
	return r.name, r.row
}

// tableWriter is the mapreduce.Writer of one output table.
type tableWriter struct {
	mu     *sync.Mutex // the Tx's: Close is serialized with WriteTable
	w      pillar.RowWriter
	name   string
	rows   int64
	err    error
	closed bool
	// discardEmpty: finish discards the store writer if no row was
	// written (a reduce job after the first that selected nothing), so the
	// table gets no empty file from it.
	discardEmpty bool
}

// discarder is a store writer that can be dropped when it wrote no rows
// (local.rowWriter.Discard): its part of the table then has no files.
type discarder interface{ Discard() error }

func (w *tableWriter) Write(v any) error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return fmt.Errorf("jobs: output %q: Write after Close", w.name)
	}
	if err := w.w.Write(v); err != nil {
		w.err = fmt.Errorf("jobs: output %q: %w", w.name, err)
		return w.err
	}
	w.rows++
	return nil
}

func (w *tableWriter) MustWrite(v any) {
	if err := w.Write(v); err != nil {
		panic(mustError{err})
	}
}

// Close is a no-op for the job; the runner closes the store writer once the
// job succeeded (finish), so a failed job's rows never reach a Close.
func (w *tableWriter) Close() error { return w.err }

func (w *tableWriter) finish() error {
	if w.closed {
		return w.err
	}
	w.closed = true
	w.mu.Lock()
	var err error
	if d, ok := w.w.(discarder); ok && w.discardEmpty && w.rows == 0 {
		err = d.Discard()
	} else {
		err = w.w.Close()
	}
	w.mu.Unlock()
	// The run keeps its tableWriters to the end of the operation (their row
	// counts, the outputs opened); a closed store writer still holds its
	// buffers, up to a row group and its pages per column once the output
	// filled them. Dropping it frees them now: an operation of many jobs
	// otherwise held one full set per job, a peak that grew with the data
	// until every job's output filled its row group (a 160k-page `backfill
	// embed` copy: 30 jobs, live heap 13 → 34 MB over the operation).
	w.w = nil
	if err != nil && w.err == nil {
		w.err = fmt.Errorf("jobs: output %q: close: %w", w.name, err)
	}
	return w.err
}

// sortWriter is the mapreduce.Writer of the intermediate output of a
// MapReduce mapper (and of the reading phase of Reduce and Sort): it keys
// each row and hands it to the worker's sorter.
type sortWriter struct {
	s          *extsort.Sorter
	group, sub *rowkey.Encoder // reduce_by, then the rest of sort_by
	split      uint64
	seq        uint64
	table      int
	row        int64
	kbuf       []byte
	buf        bytes.Buffer
	yw         *yson.Writer // writes into buf; nil until the first row
	ye         *yson.Encoder
	err        error
	bytes      int64
}

func (w *sortWriter) Write(v any) error {
	if w.err != nil {
		return w.err
	}
	w.seq++
	return w.add(v, w.split<<40|w.seq)
}

// key encodes one row's sort key (Key[:prefix] its group key); the slice
// stays valid until the next call.
func (w *sortWriter) key(v any) (key []byte, prefix int, err error) {
	w.kbuf, err = w.group.Append(w.kbuf[:0], v)
	if err != nil {
		return nil, 0, fmt.Errorf("jobs: intermediate row %T: %w", v, err)
	}
	prefix = len(w.kbuf)
	if w.sub != nil {
		if w.kbuf, err = w.sub.Append(w.kbuf, v); err != nil {
			return nil, 0, fmt.Errorf("jobs: intermediate row %T: %w", v, err)
		}
	}
	return w.kbuf, prefix, nil
}

// encode keys and encodes one row; the slices stay valid until the next
// call.
func (w *sortWriter) encode(v any) (key []byte, prefix int, payload []byte, err error) {
	if key, prefix, err = w.key(v); err != nil {
		return nil, 0, nil, err
	}
	// One YSON writer per sortWriter, writing a list fragment (each row
	// followed by ';') into buf: a writer per row would allocate its 4 KiB
	// buffer and validator for every record (garbage at the rate of the
	// sort, which the collector has to keep up with).
	w.buf.Reset()
	if w.yw == nil {
		w.yw = yson.NewWriterConfig(&w.buf, yson.WriterConfig{Format: yson.FormatBinary, Kind: yson.StreamListFragment})
		w.ye = yson.NewEncoderWriter(w.yw)
	}
	if err := w.ye.Encode(v); err != nil {
		w.yw, w.ye = nil, nil // its state is unknown after an error
		return nil, 0, nil, fmt.Errorf("jobs: intermediate row %T: yson: %w", v, err)
	}
	b := w.buf.Bytes()
	if len(b) == 0 || b[len(b)-1] != ';' {
		w.yw, w.ye = nil, nil
		return nil, 0, nil, fmt.Errorf("jobs: intermediate row %T: yson: no item separator after the row", v)
	}
	return key, prefix, b[:len(b)-1], nil
}

func (w *sortWriter) add(v any, tie uint64) error {
	key, prefix, payload, err := w.encode(v)
	if err != nil {
		w.err = err
		return w.err
	}
	w.bytes += int64(len(key) + len(payload))
	if err := w.s.Add(&extsort.Record{Key: key, Prefix: prefix, Tie: tie, Table: w.table, Row: w.row, Payload: payload}); err != nil {
		w.err = err
		return err
	}
	return nil
}

func (w *sortWriter) MustWrite(v any) {
	if err := w.Write(v); err != nil {
		panic(mustError{err})
	}
}

func (w *sortWriter) Close() error { return w.err }

// batchRec is one record of a reduce batch; its bytes live in the batch's
// arena.
type batchRec struct {
	off, klen, plen int
	table           int
	row             int64
	keySwitch       bool
	// val is the row of a sorted input, decoded once by its tableSource
	// (plen 0), and size its estimated bytes.
	val  any
	size int
}

// bytes is what the record counts for in batches, shares and progress.
func (b *batchRec) bytes() int { return b.klen + b.plen + b.size }

// recBatch carries consecutive sorted records from the merge to a reduce
// worker.
type recBatch struct {
	arena []byte
	recs  []batchRec
	// vals is the estimated bytes of the records' values (batchRec.val).
	vals int
}

func (b *recBatch) add(r *extsort.Record, keySwitch bool) {
	off := len(b.arena)
	b.arena = append(b.arena, r.Key...)
	b.arena = append(b.arena, r.Payload...)
	b.recs = append(b.recs, batchRec{off: off, klen: len(r.Key), plen: len(r.Payload), table: r.Table, row: r.Row, keySwitch: keySwitch,
		val: r.Value, size: r.Size})
	b.vals += r.Size
}

// size is the batch's bytes: its arena and its values.
func (b *recBatch) size() int { return len(b.arena) + b.vals }

// recReader is the mapreduce.Reader of a reduce job: the records of its
// share of the key groups, in order.
type recReader struct {
	ch         <-chan *recBatch
	done       <-chan struct{}
	cause      func() error
	b          *recBatch
	i          int
	cur        *batchRec
	tables     []string // nil: the rows come from a mapper
	withIndex  bool     // table and row indexes are visible (Reduce, not MapReduce)
	n          int64    // rows read
	err        error
	prog       progressBatch
	lastTable  int
	lastRowIdx int64
}

func (r *recReader) Next() bool {
	r.cur = nil
	if r.err != nil {
		return false
	}
	r.i++
	for r.b == nil || r.i >= len(r.b.recs) {
		select {
		case b, ok := <-r.ch:
			if !ok {
				r.b = nil
				return false
			}
			r.b, r.i = b, 0
		case <-r.done:
			r.err = r.cause()
			return false
		}
	}
	r.cur = &r.b.recs[r.i]
	r.lastTable, r.lastRowIdx = r.cur.table, r.cur.row
	r.n++
	r.prog.add(1, int64(r.cur.bytes()))
	return true
}

func (r *recReader) check(call string) {
	if r.cur == nil {
		panic(call + " called out of sequence")
	}
}

func (r *recReader) TableIndex() int {
	r.check("TableIndex()")
	if !r.withIndex {
		return 0
	}
	return r.cur.table
}
func (r *recReader) KeySwitch() bool { r.check("KeySwitch()"); return r.cur.keySwitch }
func (r *recReader) RowIndex() int64 {
	r.check("RowIndex()")
	if !r.withIndex {
		return r.n - 1
	}
	return r.cur.row
}
func (r *recReader) RangeIndex() int { r.check("RangeIndex()"); return 0 }
func (r *recReader) Scan(v any) error {
	r.check("Scan()")
	if r.cur.val != nil {
		return scanValue(r.cur.val, v)
	}
	p := r.b.arena[r.cur.off+r.cur.klen : r.cur.off+r.cur.klen+r.cur.plen]
	if err := yson.Unmarshal(p, v); err != nil {
		return fmt.Errorf("jobs: decode row into %T: %w", v, err)
	}
	return nil
}

// scanValue sets *v to the decoded row val (a pointer to a struct) of a
// sorted input: a copy of the struct when v has its type (the common case:
// a job scans the type it declared, the row's strings and slices shared,
// as nothing else holds them), else through YSON as a record from a sort
// would be decoded.
func scanValue(val, v any) error {
	src := reflect.ValueOf(val)
	if dst := reflect.ValueOf(v); dst.Kind() == reflect.Pointer && !dst.IsNil() && dst.Type() == src.Type() {
		dst.Elem().Set(src.Elem())
		return nil
	}
	b, err := yson.Marshal(val)
	if err != nil {
		return fmt.Errorf("jobs: decode row into %T: %w", v, err)
	}
	if err := yson.Unmarshal(b, v); err != nil {
		return fmt.Errorf("jobs: decode row into %T: %w", v, err)
	}
	return nil
}

func (r *recReader) MustScan(v any) {
	if err := r.Scan(v); err != nil {
		panic(mustError{err})
	}
}
func (r *recReader) Err() error { return r.err }
func (r *recReader) where() (string, int64) {
	if r.n == 0 {
		return "", -1
	}
	if r.tables == nil {
		return "(map output)", r.n - 1
	}
	return r.tables[r.lastTable], r.lastRowIdx
}

// drain empties the channel after the job stopped reading, so the
// dispatcher never blocks on a finished worker.
func (r *recReader) drain() {
	for {
		select {
		case _, ok := <-r.ch:
			if !ok {
				return
			}
		case <-r.done:
			return
		}
	}
}
