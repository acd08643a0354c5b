package jobs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.ytsaurus.tech/yt/go/mapreduce"

	"github.com/pillarkit/pillar/internal/extsort"
	"github.com/pillarkit/pillar/jobs/internal/rowkey"
	"github.com/pillarkit/pillar/pillar"
)

// TxBeginner begins store transactions; pillar.Store is one.
type TxBeginner interface {
	Begin(ctx context.Context) (pillar.Tx, error)
}

// LocalOptions configure a Local runner.
type LocalOptions struct {
	// TempDir holds the sort's spill files, in a fresh directory per
	// operation that is removed when the operation ends. The default value
	// is os.TempDir().
	TempDir string
	// Logger receives the runner's log lines when an Op has none. The
	// default value discards them.
	Logger *slog.Logger
}

func (o *LocalOptions) ensureDefaults() {
	if o.TempDir == "" {
		o.TempDir = os.TempDir()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// Local runs jobs in this process over an embedded store (see the package
// comment for the guarantees).
type Local struct {
	store TxBeginner
	opts  LocalOptions
}

var _ Runner = (*Local)(nil)

// NewLocal returns a runner over store. store may be nil when every Op
// brings its own Tx.
func NewLocal(store TxBeginner, opts *LocalOptions) *Local {
	var o LocalOptions
	if opts != nil {
		o = *opts
	}
	o.ensureDefaults()
	return &Local{store: store, opts: o}
}

// OrderedMap reports that a Map's output rows are in its input rows'
// order: every split writes its own files, and the store keeps a table's
// files in the order their writers were opened, which is split order. A
// caller whose mapper writes rows in sorted order over a sorted input may
// record the output as sorted (Output.SortedBy).
func (l *Local) OrderedMap() bool { return true }

// Map implements Runner.
func (l *Local) Map(ctx context.Context, mapper mapreduce.Job, op *Op) error {
	return l.run(ctx, KindMap, op, []any{mapper}, func(r *run) error {
		outs := r.outputs(0, len(op.Outputs), mapper.OutputTypes())
		if err := checkTypes(outs); err != nil {
			return err
		}
		return r.mapPhase("map", mapper, outs, false)
	})
}

// MapReduce implements Runner.
func (l *Local) MapReduce(ctx context.Context, mapper, reducer mapreduce.Job, op *Op) error {
	return l.run(ctx, KindMapReduce, op, []any{mapper, reducer}, func(r *run) error {
		k := op.MapperOutputs
		var mtypes []any
		if mt := mapper.OutputTypes(); len(mt) > 1 {
			mtypes = mt[1:]
		}
		direct, reduced := r.outputs(0, k, mtypes), r.outputs(k, len(op.Outputs), reducer.OutputTypes())
		if err := checkTypes(append(slices.Clone(direct), reduced...)); err != nil {
			return err
		}
		if err := r.mapPhase("map", mapper, direct, true); err != nil {
			return err
		}
		return r.reducePhase(reducer, reduced, nil)
	})
}

// Reduce implements Runner. The inputs need not be sorted: the runner sorts
// them (YTsaurus requires sorted inputs; the local runner is lenient).
// Within a group, rows come in SortBy order, ties in input order (table
// index, then row index).
func (l *Local) Reduce(ctx context.Context, reducer mapreduce.Job, op *Op) error {
	return l.run(ctx, KindReduce, op, []any{reducer}, func(r *run) error {
		types, err := r.inputTypes(reducer.InputTypes())
		if err != nil {
			return err
		}
		outs := r.outputs(0, len(op.Outputs), reducer.OutputTypes())
		if err := checkTypes(outs); err != nil {
			return err
		}
		if err := r.openSorted(types); err != nil {
			return err
		}
		if err := r.readPhase("read", types); err != nil {
			return err
		}
		return r.reducePhase(reducer, outs, op.Inputs)
	})
}

// Sort implements Runner. Rows with equal keys keep their input order.
func (l *Local) Sort(ctx context.Context, op *Op) error {
	return l.run(ctx, KindSort, op, nil, func(r *run) error {
		rt := op.Outputs[0].RowType
		if rt == nil {
			return fmt.Errorf("jobs: sort: %w: output %q has no RowType", ErrInvalidOp, op.Outputs[0].Table)
		}
		types := op.InputTypes
		if types == nil {
			for range op.Inputs {
				types = append(types, rt)
			}
		}
		rtypes, err := r.inputTypes(types)
		if err != nil {
			return err
		}
		if err := r.readPhase("read", rtypes); err != nil {
			return err
		}
		return r.writeSorted(rt)
	})
}

// run is the state of one operation.
type run struct {
	kind    Kind
	op      *Op
	ctx     context.Context
	cancel  context.CancelCauseFunc
	tx      pillar.Tx
	txMu    sync.Mutex // a Tx is for one goroutine: WriteTable, ReadTable and writer Close go through here
	dir     string
	workers int
	mem     int64
	prog    Progress
	log     *slog.Logger
	vault   map[string]string
	tables  []pillar.TableInfo
	names   []string // input table names (without row ranges)
	offsets []int64  // first row of each input's range
	group   *rowkey.Encoder
	sub     *rowkey.Encoder
	sorters []*extsort.Sorter
	writers []*tableWriter
	// declared are the outputs the phases resolved (createEmptyOutputs).
	declared []outSpec
	// direct marks the inputs a Reduce merges as they are (recorded as
	// sorted by its sort columns); sources reads them.
	direct  []bool
	sources []extsort.Source

	jobs atomic.Int64

	errMu sync.Mutex
	err   error
}

// fail records the operation's first error and stops every worker.
func (r *run) fail(err error) {
	r.errMu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.errMu.Unlock()
	r.cancel(err)
}

func (r *run) firstErr() error {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return r.err
}

func (l *Local) run(ctx context.Context, k Kind, op *Op, jobsOf []any, body func(*run) error) (err error) {
	if err := op.Validate(k); err != nil {
		return err
	}
	r := &run{kind: k, op: op, workers: op.Workers, mem: op.MemoryLimit, prog: op.Progress, log: op.Logger, vault: op.Secrets}
	if r.workers == 0 {
		r.workers = runtime.GOMAXPROCS(0)
	}
	if r.mem == 0 {
		r.mem = DefaultMemoryLimit
	}
	if r.prog == nil {
		r.prog = nopProgress{}
	}
	if r.log == nil {
		r.log = l.opts.Logger
	}
	title := op.title(k, jobsOf...)
	r.log = r.log.With("op", title)
	for _, j := range jobsOf {
		if _, err := encodeJob(j); err != nil {
			return err
		}
	}
	r.ctx, r.cancel = context.WithCancelCause(ctx)
	defer r.cancel(nil)

	r.tx = op.Tx
	if r.tx == nil {
		if l.store == nil {
			return fmt.Errorf("jobs: %s: %w: no Tx and no store to begin one", title, ErrInvalidOp)
		}
		if r.tx, err = l.store.Begin(ctx); err != nil {
			return fmt.Errorf("jobs: %s: begin transaction: %w", title, err)
		}
	}
	if r.dir, err = os.MkdirTemp(l.opts.TempDir, "pillar-jobs-"); err != nil {
		r.tx.Abort()
		return fmt.Errorf("jobs: %s: temp dir: %w", title, err)
	}
	start := time.Now()
	defer func() {
		if op.Stats != nil {
			*op.Stats = r.stats(start)
		}
		for _, s := range r.sorters {
			s.Close()
		}
		for _, src := range r.sources {
			src.Close()
		}
		if rmErr := os.RemoveAll(r.dir); rmErr != nil && err == nil {
			err = fmt.Errorf("jobs: %s: remove temp dir: %w", title, rmErr)
		}
		r.prog.Done()
		if err != nil {
			// Partial output must never commit, whoever owns the Tx. (An
			// invalid Op is found before anything is written: the
			// caller's Tx stays usable then.)
			if op.Tx == nil || !errors.Is(err, ErrInvalidOp) {
				r.tx.Abort()
			}
			r.log.Warn("jobs: operation failed", "err", err, "elapsed", time.Since(start))
		}
	}()
	if k == KindReduce || k == KindMapReduce {
		r.group = rowkey.New(op.ReduceBy)
		if rest := op.sortBy()[len(op.ReduceBy):]; len(rest) > 0 {
			r.sub = rowkey.New(rest)
		}
	} else if k == KindSort {
		r.group = rowkey.New(op.SortBy)
	}
	for _, in := range op.Inputs {
		name, rg, err := SplitRowRange(in)
		if err != nil {
			return fmt.Errorf("jobs: %s: %w: %v", title, ErrInvalidOp, err)
		}
		ti, err := r.tx.Table(ctx, name)
		if err != nil {
			return fmt.Errorf("jobs: %s: input %q: %w", title, in, err)
		}
		var off int64
		if rg != nil {
			// A row range: the job sees rows [Start, End) of the table
			// (clamped to it), with their absolute row indexes.
			lo, hi := min(rg.Start, ti.Rows), min(rg.End, ti.Rows)
			if ti.Rows > 0 {
				ti.Bytes = ti.Bytes * (hi - lo) / ti.Rows
			}
			off, ti.Rows = lo, hi-lo
		}
		r.names = append(r.names, name)
		r.offsets = append(r.offsets, off)
		r.tables = append(r.tables, ti)
	}
	if err := body(r); err != nil {
		return r.diskFull(title, err)
	}
	if err := r.createEmptyOutputs(); err != nil {
		return r.diskFull(title, err)
	}
	if err := r.ctx.Err(); err != nil {
		return context.Cause(r.ctx)
	}
	if op.Tx == nil {
		if err := r.tx.Commit(ctx); err != nil {
			return r.diskFull(title, fmt.Errorf("jobs: %s: commit: %w", title, err))
		}
	}
	st := r.stats(start)
	r.log.Info("jobs: operation done", "elapsed", st.Elapsed, "workers", r.workers, "jobs", st.Jobs,
		"input_rows", st.InputRows, "output_rows", st.OutputRows, "spill_runs", st.SpillRuns, "spilled_bytes", st.SpilledBytes)
	return nil
}

func (r *run) stats(start time.Time) Stats {
	st := Stats{Elapsed: time.Since(start), Jobs: int(r.jobs.Load())}
	for _, t := range r.tables {
		st.InputRows += t.Rows
	}
	for _, w := range r.writers {
		st.OutputRows += w.rows
	}
	for _, s := range r.sorters {
		ss := s.Stats()
		st.SortedBytes += ss.Bytes
		st.SpillRuns += ss.Runs
		st.SpilledBytes += ss.SpilledBytes
	}
	return st
}

// outSpec is an output table with its row type resolved.
type outSpec struct {
	Output
	rowType any
}

// outputs resolves op.Outputs[from:to]; jobTypes are the job's
// OutputTypes() for those outputs.
func (r *run) outputs(from, to int, jobTypes []any) []outSpec {
	var outs []outSpec
	for i := from; i < to; i++ {
		o := r.op.Outputs[i]
		rt := o.RowType
		if rt == nil && i-from < len(jobTypes) {
			rt = jobTypes[i-from]
		}
		outs = append(outs, outSpec{Output: o, rowType: rt})
	}
	r.declared = append(r.declared, outs...)
	return outs
}

// createEmptyOutputs gives every output that no job opened (an operation
// without input rows, or whose jobs wrote nothing to it) an empty table, as
// the YTsaurus runner creates its outputs: after a successful operation
// every output table exists.
func (r *run) createEmptyOutputs() error {
	opened := map[string]bool{}
	for _, w := range r.writers {
		opened[w.name] = true
	}
	for _, o := range r.declared {
		if opened[o.Table] || o.rowType == nil {
			continue
		}
		opened[o.Table] = true
		r.txMu.Lock()
		ws, err := r.openWriters([]outSpec{o})
		r.txMu.Unlock()
		if err != nil {
			return err
		}
		if err := ws[0].finish(); err != nil {
			return err
		}
	}
	return nil
}

// checkTypes makes sure every output has a row type before anything is
// written.
func checkTypes(outs []outSpec) error {
	for _, o := range outs {
		if o.rowType == nil {
			return fmt.Errorf("jobs: %w: output %q has no RowType and the job declares no OutputTypes", ErrInvalidOp, o.Table)
		}
	}
	return nil
}

// openWriters opens one store writer per output. Callers hold txMu and call
// in split order: the store keeps a table's files in the order their
// writers were opened, which makes the output order the input order.
func (r *run) openWriters(outs []outSpec) ([]*tableWriter, error) {
	ws := make([]*tableWriter, len(outs))
	for i, o := range outs {
		if o.rowType == nil {
			return nil, fmt.Errorf("jobs: %w: output %q has no RowType and the job declares no OutputTypes", ErrInvalidOp, o.Table)
		}
		mode := pillar.Replace
		if o.Append {
			mode = pillar.Append
		}
		rg := OutputRowGroup(r.mem, r.workers*max(len(r.op.Outputs), 1))
		w, err := r.tx.WriteTable(r.ctx, o.Table, o.rowType, &pillar.WriteOptions{Mode: mode, SortedBy: o.SortedBy, RowGroupBytes: rg, Scratch: o.Scratch})
		if err != nil {
			return nil, fmt.Errorf("jobs: output %q: %w", o.Table, err)
		}
		ws[i] = &tableWriter{mu: &r.txMu, w: w, name: o.Table}
		r.writers = append(r.writers, ws[i])
	}
	return ws, nil
}

// split is a row range of one input table: the work of one map job.
type split struct {
	idx        int
	table      int
	start, end int64
}

// splits cuts the inputs into row ranges: about two per worker over all
// inputs, in proportion to each table's rows, none empty and none under
// minSplitRows unless the table is smaller. (Every range becomes one file
// per output table, so more ranges would only fragment the outputs.)
func (r *run) splits() ([]split, int64, int64) {
	var rows, bytes int64
	for ti, t := range r.tables {
		if !r.isDirect(ti) {
			rows += t.Rows
			bytes += t.Bytes
		}
	}
	target := int64(2 * r.workers)
	var out []split
	for ti, t := range r.tables {
		if t.Rows == 0 || r.isDirect(ti) {
			continue
		}
		n := max(1, (t.Rows*target+rows-1)/rows)
		n = max(1, min(n, t.Rows/minSplitRows))
		per := (t.Rows + n - 1) / n
		off := r.offsets[ti]
		for s := int64(0); s < t.Rows; s += per {
			out = append(out, split{idx: len(out), table: ti, start: off + s, end: off + min(s+per, t.Rows)})
		}
	}
	return out, rows, bytes
}

// minSplitRows is the smallest row range worth a job of its own.
const minSplitRows = 64

func (r *run) rowBytes(table int) int64 {
	t := r.tables[table]
	if t.Rows == 0 {
		return 0
	}
	return t.Bytes / t.Rows
}

func (r *run) openInput(s split) (pillar.RowReader, error) {
	name := r.names[s.table]
	rr, err := r.tx.ReadTable(r.ctx, name, &pillar.Range{Start: s.start, End: s.end})
	if err != nil {
		return nil, fmt.Errorf("jobs: input %q rows [%d,%d): %w", name, s.start, s.end, err)
	}
	return rr, nil
}

// forEachSplit runs work on every split with r.workers goroutines. open runs
// under txMu in split order before work, for whatever must happen in input
// order (opening writers and readers).
func (r *run) forEachSplit(splits []split, open func(worker int, s split) (any, error), work func(worker int, s split, opened any) error) error {
	var mu sync.Mutex
	next := 0
	var wg sync.WaitGroup
	for w := 0; w < min(r.workers, max(len(splits), 1)); w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for r.ctx.Err() == nil {
				mu.Lock()
				if next >= len(splits) {
					mu.Unlock()
					return
				}
				s := splits[next]
				next++
				r.txMu.Lock()
				opened, err := open(w, s)
				r.txMu.Unlock()
				mu.Unlock()
				if err == nil {
					err = work(w, s, opened)
				}
				if err != nil {
					r.fail(err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	if err := r.firstErr(); err != nil {
		return err
	}
	return context.Cause(r.ctx)
}

// SortShare is the part of an operation's memory limit (Op.MemoryLimit)
// its sorts buffer before spilling: an eighth. The sort is one consumer
// among several that do not shrink with the data (the readers' pages, a row
// group per open output, the reduce batches): with a larger share the
// buffer, which fills only once the sorted rows exceed it, would make the
// operation's peak grow with the input up to a larger N. At
// --memory-limit 64MiB the buffer is 8 MiB (about 30,000 subset matches),
// and the merge reads 256 runs in one pass, 1 GiB of sorted rows per
// worker (a larger sort merges in more passes).
func SortShare(limit int64) int64 { return limit / 8 }

// RowGroupShare is what one open output of an operation buffers before it
// flushes a row group (pillar.WriteOptions.RowGroupBytes): 1/32 of the
// memory limit, between 1 and 8 MiB, so that the outputs open at once
// (one per output table per worker) stay within about another eighth of
// the limit, beside the sorts' eighth, instead of 8 MiB each whatever the
// limit (a row group fills only once an output is that large: a peak
// growing with the data up to 8 MiB × open outputs).
func RowGroupShare(limit int64) int64 { return min(max(limit/32, 1<<20), 8<<20) }

// OutputShare is what all the outputs an operation has open at once
// buffer together: an eighth of its memory limit, beside the sorts' eighth.
func OutputShare(limit int64) int64 { return limit / 8 }

// minRowGroup is the smallest row group OutputRowGroup gives an output, so
// that an operation with very many outputs still writes row groups large
// enough to read efficiently.
const minRowGroup = 256 << 10

// OutputRowGroup is the row group one output of an operation buffers when
// open outputs are open at once (one per output table per worker): its
// part of OutputShare, at most RowGroupShare and at least 256 KiB. An
// operation of many outputs (a subset recompute's diff once wrote ten
// tables per worker) would otherwise hold a row group per writer, up to
// 40 MiB at --memory-limit 64MiB for twenty writers, a buffer that small
// corpora do not fill, so its peak grew with the corpus. Sharing the
// budget makes the bound reached at a small N and keeps the sum within the
// limit's eighth.
func OutputRowGroup(limit int64, open int) int64 {
	return min(RowGroupShare(limit), max(OutputShare(limit)/int64(max(open, 1)), minRowGroup))
}

func (r *run) newSorters() {
	r.sorters = make([]*extsort.Sorter, r.workers)
	// The sorters share an eighth of the memory limit (SortShare): the
	// rest is for what the operation holds besides them and the merge's
	// read buffers (input pages being decoded, each open output's row
	// group, the jobs' batches), so that the whole process stays near the
	// limit rather than the sort alone filling it at a large N and the rest
	// coming on top.
	sortMem := SortShare(r.mem)
	for i := range r.sorters {
		// Read buffers of about 1/512 of the sort budget keep the merge's
		// fan-in near 256 even for small limits, so that a sort of a few
		// GB merges its runs in one pass.
		buf := int(min(max(sortMem/512, 16<<10), 256<<10))
		r.sorters[i] = extsort.New(extsort.Options{MemoryLimit: max(sortMem/int64(r.workers), 64<<10), Dir: r.dir, BufferSize: buf})
	}
}

// mapPhase runs the mapper over every split. With toSort, mapper output 0
// goes to the sorters and outputs 1.. to direct; otherwise all outputs go
// to direct.
func (r *run) mapPhase(phase string, mapper mapreduce.Job, direct []outSpec, toSort bool) error {
	state, err := encodeJob(mapper)
	if err != nil {
		return err
	}
	if toSort {
		r.newSorters()
	}
	splits, rows, bytes := r.splits()
	r.prog.Phase(phase, rows, bytes)
	type opened struct {
		in   pillar.RowReader
		outs []*tableWriter
	}
	return r.forEachSplit(splits,
		func(w int, s split) (any, error) {
			outs, err := r.openWriters(direct)
			if err != nil {
				return nil, err
			}
			in, err := r.openInput(s)
			if err != nil {
				return nil, err
			}
			return opened{in, outs}, nil
		},
		func(w int, s split, o any) error {
			op := o.(opened)
			defer op.in.Close()
			job, err := decodeJob(state)
			if err != nil {
				return err
			}
			in := &tableReader{rr: op.in, done: r.ctx.Done(), cause: func() error { return context.Cause(r.ctx) },
				table: s.table, name: r.names[s.table], row: s.start - 1, rowBytes: r.rowBytes(s.table), prog: progressBatch{p: r.prog}}
			var outs []mapreduce.Writer
			if toSort {
				outs = append(outs, &sortWriter{s: r.sorters[w], group: r.group, sub: r.sub, split: uint64(s.idx)})
			}
			for _, tw := range op.outs {
				outs = append(outs, tw)
			}
			err = r.do(phase, job, s.idx, in, outs)
			in.prog.flush()
			for _, tw := range op.outs {
				if err == nil {
					err = tw.finish()
				}
			}
			return err
		})
}

// do runs one job and turns whatever went wrong into a *JobError.
func (r *run) do(phase string, job mapreduce.Job, cookie int, in interface {
	mapreduce.Reader
	position
}, outs []mapreduce.Writer) error {
	r.jobs.Add(1)
	err, stack := safeDo(job, &jobContext{vault: r.vault, cookie: cookie}, in, outs)
	if err == nil {
		err = in.Err()
	}
	if err == nil {
		for _, o := range outs {
			if sw, ok := o.(*sortWriter); ok && sw.err != nil {
				err = sw.err
			}
		}
	}
	if err == nil {
		return nil
	}
	if cause := context.Cause(r.ctx); cause != nil && r.firstErr() != nil {
		return cause // another job failed first; report that one
	}
	table, row := in.where()
	if ctxErr := r.ctx.Err(); ctxErr != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return fmt.Errorf("jobs: %s: cancelled at input row (%s, %d): %w", phase, table, row, err)
	}
	return &JobError{Phase: phase, Job: fmt.Sprintf("%T", job), Table: table, Row: row, Stack: stack, Err: err}
}

// inputTypes resolves the row type of every input.
func (r *run) inputTypes(jobTypes []any) ([]reflect.Type, error) {
	types := r.op.InputTypes
	if types == nil {
		types = jobTypes
	}
	if len(types) == 1 && len(r.op.Inputs) > 1 {
		// One type for all inputs.
		types = slices.Repeat(types, len(r.op.Inputs))
	}
	out := make([]reflect.Type, len(r.op.Inputs))
	for i, in := range r.op.Inputs {
		if i >= len(types) || types[i] == nil {
			return nil, fmt.Errorf("jobs: %s: %w: no row type for input %q (set Op.InputTypes or the job's InputTypes)", r.kind, ErrInvalidOp, in)
		}
		t := reflect.TypeOf(types[i])
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		out[i] = t
	}
	return out, nil
}

// readPhase reads every input row into the sorters, keyed, ties broken by
// (table index, row index).
func (r *run) readPhase(phase string, types []reflect.Type) error {
	r.newSorters()
	splits, rows, bytes := r.splits()
	r.prog.Phase(phase, rows, bytes)
	return r.forEachSplit(splits,
		func(w int, s split) (any, error) { return r.openInput(s) },
		func(w int, s split, o any) error {
			rr := o.(pillar.RowReader)
			defer rr.Close()
			name := r.names[s.table]
			sw := &sortWriter{s: r.sorters[w], group: r.group, sub: r.sub, table: s.table}
			v := reflect.New(types[s.table])
			prog := progressBatch{p: r.prog}
			defer prog.flush()
			rb := r.rowBytes(s.table)
			for row := s.start; rr.Next(); row++ {
				if row&255 == 0 && r.ctx.Err() != nil {
					return context.Cause(r.ctx)
				}
				v.Elem().SetZero()
				if err := rr.Scan(v.Interface()); err != nil {
					return fmt.Errorf("jobs: %s: input row (%s, %d): %w", phase, name, row, err)
				}
				sw.row = row
				if err := sw.add(v.Interface(), uint64(s.table)<<48|uint64(row)); err != nil {
					return fmt.Errorf("jobs: %s: input row (%s, %d): %w", phase, name, row, err)
				}
				prog.add(1, rb)
			}
			if err := rr.Err(); err != nil {
				return fmt.Errorf("jobs: %s: input %q: %w", phase, name, err)
			}
			return nil
		})
}

// merge finishes the sorters and merges their contents.
func (r *run) merge() (*extsort.Iterator, int64, error) {
	var recs int64
	for _, s := range r.sorters {
		recs += s.Stats().Records
	}
	for ti, t := range r.tables {
		if r.isDirect(ti) {
			recs += t.Rows
		}
	}
	it, err := extsort.MergeWith(r.sorters, r.sources)
	r.sources = nil // the iterator closes them
	if err != nil {
		return nil, 0, fmt.Errorf("jobs: %s: merge: %w", r.kind, err)
	}
	return it, recs, nil
}

// reducePhase hands the merged records to reduce jobs, whole key groups at a
// time, each job's share about 1/(2·workers) of the data. One goroutine (the
// dispatcher) reads the merge, so jobs and their writers start in key order.
// tables names the inputs when the records are input rows (Reduce), nil when
// they are mapper output (MapReduce).
func (r *run) reducePhase(reducer mapreduce.Job, outs []outSpec, tables []string) error {
	state, err := encodeJob(reducer)
	if err != nil {
		return err
	}
	return r.mergePhase("reduce", func() (mapreduce.Job, error) { return decodeJob(state) }, outs, tables)
}

// mergePhase runs the jobs newJob makes over the merged records (see
// reducePhase).
func (r *run) mergePhase(phase string, newJob func() (mapreduce.Job, error), outs []outSpec, tables []string) error {
	it, total, err := r.merge()
	if err != nil {
		return err
	}
	defer it.Close()
	var totalBytes int64
	for _, s := range r.sorters {
		totalBytes += s.Stats().Bytes
	}
	for ti, t := range r.tables {
		if r.isDirect(ti) {
			totalBytes += t.Bytes
		}
	}
	r.prog.Phase(phase, total, totalBytes)
	shareTarget := max(totalBytes/int64(2*r.workers), 64<<10)
	const batchBytes = 64 << 10

	sem := make(chan struct{}, r.workers)
	var wg sync.WaitGroup
	var feed chan *recBatch
	var fed int64
	var batch *recBatch
	var groupKey []byte
	haveGroup := false
	share := 0
	done := r.ctx.Done()

	send := func() bool {
		if batch == nil || len(batch.recs) == 0 {
			return true
		}
		select {
		case feed <- batch:
			batch = nil
			return true
		case <-done:
			return false
		}
	}
	endShare := func() bool {
		if feed == nil {
			return true
		}
		ok := send()
		close(feed)
		feed = nil
		return ok
	}
	startShare := func() error {
		select {
		case sem <- struct{}{}:
		case <-done:
			return context.Cause(r.ctx)
		}
		r.txMu.Lock()
		ws, err := r.openWriters(outs)
		r.txMu.Unlock()
		if err != nil {
			<-sem
			return err
		}
		ch := make(chan *recBatch, 4)
		feed, fed = ch, 0
		cookie := share
		share++
		// The first job's outputs are kept even when empty (every output
		// table exists); a later job's empty ones are discarded: a reduce
		// selecting a few pages (an incremental publish's SelectJob) wrote
		// an empty file per output and job, bytes growing with the corpus.
		for _, w := range ws {
			w.discardEmpty = cookie > 0
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			in := &recReader{ch: ch, done: done, cause: func() error { return context.Cause(r.ctx) }, i: -1,
				tables: tables, withIndex: tables != nil, prog: progressBatch{p: r.prog}}
			defer in.drain()
			job, err := newJob()
			if err == nil {
				wout := make([]mapreduce.Writer, len(ws))
				for i, w := range ws {
					wout[i] = w
				}
				err = r.do(phase, job, cookie, in, wout)
			}
			in.prog.flush()
			for _, w := range ws {
				if err == nil {
					err = w.finish()
				}
			}
			if err != nil {
				r.fail(err)
			}
		}()
		return nil
	}

	for it.Next() {
		rec := it.Record()
		g := rec.Key[:rec.Prefix]
		newGroup := !haveGroup || !bytes.Equal(g, groupKey)
		if newGroup {
			groupKey = append(groupKey[:0], g...)
			haveGroup = true
			if feed != nil && fed >= shareTarget && !endShare() {
				break
			}
		}
		keySwitch := newGroup
		if feed == nil {
			if err := startShare(); err != nil {
				r.fail(err)
				break
			}
			keySwitch = false // a job's first row starts its first group
		}
		if batch == nil {
			batch = &recBatch{arena: make([]byte, 0, batchBytes)}
		}
		batch.add(rec, keySwitch)
		fed += int64(len(rec.Key) + len(rec.Payload) + rec.Size)
		if batch.size() >= batchBytes && !send() {
			break
		}
	}
	if err := it.Err(); err != nil {
		r.fail(fmt.Errorf("jobs: reduce: merge: %w", err))
	}
	endShare()
	wg.Wait()
	if err := r.firstErr(); err != nil {
		return err
	}
	return context.Cause(r.ctx)
}

// writeSorted writes the merged rows to the Sort's output. The rows are
// cut, between distinct keys, into consecutive shares written by
// Op.Workers writers at once (one file each, opened in key order).
func (r *run) writeSorted(rowType any) error {
	o := r.op.Outputs[0]
	o.SortedBy = r.op.SortBy
	t := reflect.TypeOf(rowType)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return r.mergePhase("sort", func() (mapreduce.Job, error) { return &copyJob{t: t}, nil },
		[]outSpec{{Output: o, rowType: rowType}}, r.op.Inputs)
}

// copyJob copies its input rows, decoded as rows of t, to its output.
type copyJob struct {
	mapreduce.Untyped
	t reflect.Type
}

func (j *copyJob) Do(ctx mapreduce.JobContext, in mapreduce.Reader, out []mapreduce.Writer) error {
	v := reflect.New(j.t)
	for in.Next() {
		v.Elem().SetZero()
		if err := in.Scan(v.Interface()); err != nil {
			return err
		}
		if err := out[0].Write(v.Interface()); err != nil {
			return err
		}
	}
	return nil
}

func (r *run) isDirect(table int) bool { return table < len(r.direct) && r.direct[table] }

// openSorted opens, for a Reduce, every input recorded as sorted by the
// operation's sort columns (SortBy, or ReduceBy) as a source the merge reads
// in order: such an input is neither sorted nor spilled again, as on
// YTsaurus, whose reduce reads sorted tables as they are. The other inputs
// go through the external sort (readPhase).
func (r *run) openSorted(types []reflect.Type) error {
	want := r.op.sortBy()
	r.direct = make([]bool, len(r.tables))
	for ti, t := range r.tables {
		got := t.SortedBy
		if len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
			continue
		}
		r.direct[ti] = true
		if t.Rows == 0 {
			continue
		}
		off := r.offsets[ti]
		rr, err := r.tx.ReadTable(r.ctx, r.names[ti], &pillar.Range{Start: off, End: off + t.Rows})
		if err != nil {
			return fmt.Errorf("jobs: input %q: %w", r.names[ti], err)
		}
		r.sources = append(r.sources, &tableSource{r: r, rr: rr, table: ti, name: r.names[ti], row: off, t: types[ti],
			enc: sortWriter{group: r.group, sub: r.sub}, sortedBy: t.SortedBy, size: int(t.Bytes / max(t.Rows, 1))})
	}
	return nil
}

// tableSource reads a sorted input as sort records, checking the order it
// claims. A record carries the decoded row itself (Record.Value, a new one
// per row: the reduce job that scans it may keep it), not its YSON: such a
// record is never spilled, so the encoding and the decoding on the far
// side, which were most of a reduce's CPU over sorted tables (a backfill's
// finish and copy, publish, export: go test -bench StagesPostgres
// ./jobs/pipeline -cpuprofile, yson 2.0 s of the embed stage's 4.3 s), buy
// nothing. Its Size is the table's bytes per row.
type tableSource struct {
	r        *run
	rr       pillar.RowReader
	table    int
	name     string
	row      int64
	t        reflect.Type
	size     int
	enc      sortWriter
	sortedBy []string
	prev     []byte

	// A goroutine of its own reads and decodes the rows ahead (read), so
	// the decoding of every sorted input runs beside the dispatcher that
	// merges them and beside the jobs.
	started bool
	batches chan sourceBatch
	stop    chan struct{}
	done    chan struct{}
	cur     []extsort.Record
	i       int
	rec     extsort.Record
	err     error
}

// sourceBatch is rows read ahead, or the error that ended the reading.
type sourceBatch struct {
	recs []extsort.Record
	err  error
}

// sourceBatchRows is the rows of a read-ahead batch; two batches wait.
const sourceBatchRows = 128

func (s *tableSource) Next() bool {
	if s.err != nil {
		return false
	}
	if !s.started {
		s.started = true
		s.batches, s.stop, s.done = make(chan sourceBatch, 2), make(chan struct{}), make(chan struct{})
		go s.read()
	}
	for s.i >= len(s.cur) {
		b, ok := <-s.batches
		if !ok {
			return false
		}
		if b.err != nil {
			s.err = b.err
			return false
		}
		s.cur, s.i = b.recs, 0
	}
	s.rec = s.cur[s.i]
	s.cur[s.i] = extsort.Record{} // the job that scans the row may keep it, not this batch
	s.i++
	return true
}

// read decodes the rows into batches until the end, an error or Close.
func (s *tableSource) read() {
	defer close(s.done)
	defer close(s.batches)
	var recs []extsort.Record
	var arena []byte
	send := func(b sourceBatch) bool {
		select {
		case s.batches <- b:
			return true
		case <-s.stop:
			return false
		}
	}
	for {
		rec, ok, err := s.readRow()
		if err != nil {
			if len(recs) > 0 && !send(sourceBatch{recs: recs}) {
				return
			}
			send(sourceBatch{err: err})
			return
		}
		if !ok {
			if len(recs) > 0 {
				send(sourceBatch{recs: recs})
			}
			return
		}
		k := len(arena)
		arena = append(arena, rec.Key...) // the key is the encoder's buffer
		rec.Key = arena[k:len(arena):len(arena)]
		recs = append(recs, rec)
		if len(recs) == sourceBatchRows {
			if !send(sourceBatch{recs: recs}) {
				return
			}
			recs, arena = make([]extsort.Record, 0, sourceBatchRows), make([]byte, 0, len(arena))
		}
	}
}

// readRow reads and decodes the next row; ok is false at the end.
func (s *tableSource) readRow() (rec extsort.Record, ok bool, err error) {
	if !s.rr.Next() {
		if err := s.rr.Err(); err != nil {
			return rec, false, fmt.Errorf("jobs: read: input %q: %w", s.name, err)
		}
		return rec, false, nil
	}
	if s.row&255 == 0 && s.r.ctx.Err() != nil {
		return rec, false, context.Cause(s.r.ctx)
	}
	v := reflect.New(s.t).Interface()
	if err := s.rr.Scan(v); err != nil {
		return rec, false, fmt.Errorf("jobs: read: input row (%s, %d): %w", s.name, s.row, err)
	}
	key, prefix, err := s.enc.key(v)
	if err != nil {
		return rec, false, fmt.Errorf("jobs: read: input row (%s, %d): %w", s.name, s.row, err)
	}
	if s.prev != nil && bytes.Compare(key, s.prev) < 0 {
		return rec, false, fmt.Errorf("jobs: read: input %q is recorded as sorted by %v, but row %d is out of order", s.name, s.sortedBy, s.row)
	}
	s.prev = append(s.prev[:0], key...)
	rec = extsort.Record{Key: key, Prefix: prefix, Tie: uint64(s.table)<<48 | uint64(s.row), Table: s.table, Row: s.row, Value: v, Size: s.size}
	s.row++
	return rec, true, nil
}

func (s *tableSource) Record() *extsort.Record { return &s.rec }
func (s *tableSource) Err() error              { return s.err }

// Close stops the reading goroutine, then closes the reader.
func (s *tableSource) Close() {
	if s.started {
		close(s.stop)
		<-s.done
		s.started = false
	}
	s.rr.Close()
}

// diskFull turns a full disk (ENOSPC) into an error naming the operation's
// output tables and about the space it needs: its outputs (taken as the size
// of its inputs, which a merge or compaction rewrites) and, for a sort, the
// runs it spills (up to the rows it sorts) in its temp folder. The
// operation's transaction is aborted: the store stays as it was.
func (r *run) diskFull(title string, err error) error {
	if !errors.Is(err, syscall.ENOSPC) {
		return err
	}
	var in, sorted int64
	for _, t := range r.tables {
		in += t.Bytes
	}
	for _, s := range r.sorters {
		sorted += s.Stats().Bytes
	}
	var outs []string
	for _, o := range r.op.Outputs {
		outs = append(outs, strconv.Quote(o.Table))
	}
	return fmt.Errorf("jobs: %s: disk full writing table %s: it needs about %s free for its outputs (the size of its inputs) and %s for sort runs in %s; nothing was committed: %w",
		title, strings.Join(outs, ", "), extsort.HumanBytes(in), extsort.HumanBytes(sorted), r.dir, err)
}
