package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/pillar"
)

// Attributes of the export path.
const (
	// AttrBulk marks that a bulk rebuild is due (BulkMark); `pillar export`
	// carries it out and clears it.
	AttrBulk = "export/bulk"
	// AttrLastExport describes the last bulk export (LastExport).
	AttrLastExport = "export/last"
	// AttrLock is held by the one pipeline operation that may change
	// subsets, the published pair or the export state at a time (OpLock).
	AttrLock = "pipeline/lock"
	// AttrSubsetPrefix prefixes each subset's metadata (SubsetMeta).
	AttrSubsetPrefix = "subset/"
)

// BulkMark says why a bulk rebuild is due.
type BulkMark struct {
	Reason    string           `json:"reason"`
	At        time.Time        `json:"at"`
	Published pillar.Published `json:"published"`
	Changes   int              `json:"changes"`
}

// LastExport records a bulk export: where it went and, per partition, the
// export-queue offset it supersedes (records before it are older than the
// snapshot and must be delivered before it is registered).
type LastExport struct {
	ID         string           `json:"id"`
	Dir        string           `json:"dir"`
	Generation int64            `json:"generation"`
	Published  pillar.Published `json:"published"`
	Pages      int64            `json:"pages"`
	QueueEnds  []int64          `json:"queue_ends"`
	At         time.Time        `json:"at"`
}

// SubsetMeta is a subset's metadata attribute.
type SubsetMeta struct {
	Name        string    `json:"name"`
	Exported    bool      `json:"exported"`
	Table       string    `json:"table"`
	Generation  int64     `json:"generation"` // recompute generation (1, 2, …)
	Size        int64     `json:"size"`
	AsOf        time.Time `json:"as_of"`
	Fingerprint string    `json:"fingerprint"` // of the policy
	// History holds the last generations, newest last; each keeps its
	// member table so `subsets diff` can compare.
	History []SubsetGen `json:"history"`
}

// SubsetGen is one kept generation of a subset.
type SubsetGen struct {
	Generation int64     `json:"generation"`
	Table      string    `json:"table"`
	Size       int64     `json:"size"`
	Adds       int64     `json:"adds"`
	Removes    int64     `json:"removes"`
	AsOf       time.Time `json:"as_of"`
	At         time.Time `json:"at"`
	Exported   bool      `json:"exported"`
	// Undo: Table holds the undo of the next generation's change
	// (MemberUndo rows), not this generation's members; the next
	// generation's table and it give them. False for the current
	// generation and for history written before undo tables.
	Undo bool `json:"undo,omitempty"`
}

// OpLock is the pipeline lock's value.
type OpLock struct {
	Op    string    `json:"op"`
	PID   int       `json:"pid"`
	Host  string    `json:"host"`
	Since time.Time `json:"since"`
}

// ErrBusy: another pipeline operation (publish, recompute, export) holds
// the lock.
var ErrBusy = errors.New("another pipeline operation is in progress")

// lockTTL: a lock older than this is considered abandoned.
const lockTTL = time.Hour

// opLock is the held pipeline lock of one operation. Scratch tables (tmp/)
// belong to the holder: acquire drops stale ones, and commit drops the
// holder's in its final transaction.
type opLock struct {
	ctx  context.Context
	st   pillar.Store
	held bool
	// after runs once commit has committed (compaction of what the
	// operation layered); nil: nothing.
	after func()
}

// acquire takes the pipeline lock for op, refusing while another live
// operation holds it, and drops scratch tables left by dead operations. A
// lock of a dead process on this host, or older than lockTTL, is taken over.
// The caller defers abandon and ends with commit.
func acquire(ctx context.Context, st pillar.Store, op string) (*opLock, error) {
	host, _ := os.Hostname()
	tx, err := st.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Abort()
	var cur OpLock
	if err := tx.Attr(ctx, AttrLock, &cur); err == nil {
		alive := time.Since(cur.Since) < lockTTL
		if alive && cur.Host == host && syscall.Kill(cur.PID, 0) != nil {
			alive = false // the holder died
		}
		if alive {
			return nil, fmt.Errorf("pipeline: %s refused: %s (pid %d on %s) holds the store since %s: %w",
				op, cur.Op, cur.PID, cur.Host, cur.Since.Format(time.RFC3339), ErrBusy)
		}
	} else if !errors.Is(err, pillar.ErrNotFound) {
		return nil, err
	}
	if err := tx.SetAttr(ctx, AttrLock, OpLock{Op: op, PID: os.Getpid(), Host: host, Since: time.Now().UTC()}); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		if errors.Is(err, pillar.ErrConflict) {
			return nil, fmt.Errorf("pipeline: %s refused: another operation took the lock just now: %w", op, ErrBusy)
		}
		return nil, err
	}
	lk := &opLock{ctx: ctx, st: st, held: true}
	if err := lk.dropScratch(nil); err != nil {
		lk.abandon()
		return nil, err
	}
	return lk, nil
}

// commit ends the operation: tx drops the scratch tables, releases the
// lock and commits, all at once.
func (l *opLock) commit(tx pillar.Tx) error {
	if err := l.dropScratch(tx); err != nil {
		return err
	}
	if err := tx.DeleteAttr(l.ctx, AttrLock); err != nil {
		return err
	}
	if err := tx.Commit(l.ctx); err != nil {
		return err
	}
	l.held = false
	if l.after != nil {
		l.after()
	}
	return nil
}

// abandon releases the lock (scratch stays for the next holder to drop);
// a no-op after commit.
func (l *opLock) abandon() {
	if !l.held {
		return
	}
	l.held = false
	tx, err := l.st.Begin(l.ctx)
	if err != nil {
		return
	}
	defer tx.Abort()
	if tx.DeleteAttr(l.ctx, AttrLock) == nil {
		_ = tx.Commit(l.ctx)
	}
}

// dropScratch drops every tmp/ table, in tx or (nil) in a commit of its own.
func (l *opLock) dropScratch(tx pillar.Tx) error {
	own := tx == nil
	if own {
		var err error
		if tx, err = l.st.Begin(l.ctx); err != nil {
			return err
		}
		defer tx.Abort()
	}
	tables, err := tx.Tables(l.ctx)
	if err != nil {
		return err
	}
	n := 0
	for _, t := range tables {
		if strings.HasPrefix(t.Name, "tmp/") {
			if err := tx.DropTable(l.ctx, t.Name); err != nil {
				return err
			}
			n++
		}
	}
	if !own || n == 0 {
		return nil
	}
	return tx.Commit(l.ctx)
}

// exportedSubsets returns the member tables of the exported subsets.
func exportedSubsets(ctx context.Context, sn pillar.Snapshot) ([]string, error) {
	attrs, err := sn.Attrs(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for name := range attrs {
		if !strings.HasPrefix(name, AttrSubsetPrefix) {
			continue
		}
		var m SubsetMeta
		if err := sn.Attr(ctx, name, &m); err != nil {
			return nil, err
		}
		if m.Exported && m.Table != "" {
			out = append(out, m.Table)
		}
	}
	sort.Strings(out)
	return out, nil
}

// computeDesired runs the export job for pub over the members into the
// scratch table desired (and skipped), committed on their own (scratch
// tables are harmless: they are dropped by the operation's final commit).
// It returns the watermark of the inputs it read (see Watermark).
func computeDesired(ctx context.Context, st pillar.Store, opts Options, pub pillar.Published, members memberSet, desired, skipped, encoding string) (*Watermark, error) {
	tx, err := st.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Abort()
	mark, err := newWatermark(ctx, tx, pub, members.names, encoding)
	if err != nil {
		return nil, err
	}
	if err := exportOp(ctx, tx, st, opts, pub, exportInputs(pub, members.inputs()), len(members.names), desired, skipped, encoding); err != nil {
		return nil, err
	}
	return mark, tx.Commit(ctx)
}

// runExport is computeDesired over other inputs (ExportJob's: docs,
// chunks, embeddings, then members member tables), without a watermark.
func runExport(ctx context.Context, st pillar.Store, opts Options, pub pillar.Published, inputs []string, members int, desired, skipped, encoding string) error {
	tx, err := st.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Abort()
	if err := exportOp(ctx, tx, st, opts, pub, inputs, members, desired, skipped, encoding); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// exportOp runs the export job over inputs into desired and skipped,
// inside tx.
func exportOp(ctx context.Context, tx pillar.Tx, st pillar.Store, opts Options, pub pillar.Published, inputs []string, members int, desired, skipped, encoding string) error {
	types := []any{&pillar.Doc{}, &pillar.Chunk{}, &pillar.Embedding{}}
	for range members {
		types = append(types, &pillar.SubsetMember{})
	}
	if members == 0 {
		// Nothing is exported: an empty desired set.
		for _, t := range []struct {
			name string
			row  any
		}{{desired, Desired{}}, {skipped, Skipped{}}} {
			w, err := tx.WriteTable(ctx, t.name, t.row, nil)
			if err != nil {
				return err
			}
			if err := w.Close(); err != nil {
				return err
			}
		}
		return nil
	}
	op := &jobs.Op{
		Title: "export " + pub.ChunkVersion + "/" + pub.Model, Inputs: inputs, InputTypes: types,
		Outputs:  []jobs.Output{{Table: desired, RowType: Desired{}, SortedBy: []string{"page_key"}, Scratch: true}, {Table: skipped, RowType: Skipped{}, Scratch: true}},
		ReduceBy: []string{"page_key"}, Tx: tx, Workers: opts.Workers, MemoryLimit: opts.MemoryLimit,
		Progress: opts.Progress, Logger: opts.Logger,
	}
	job := &ExportJob{ChunkVersion: pub.ChunkVersion, ModelVersion: pub.Model, Partitions: st.Info().Partitions, Encoding: encoding}
	return opts.Runner.Reduce(ctx, job, op)
}

// ExportPlan is the export work a publish or recompute produced.
type ExportPlan struct {
	Desired   int `json:"desired"` // pages the serving tier should hold
	Puts      int `json:"puts"`
	Deletes   int `json:"deletes"`
	Unchanged int `json:"unchanged"`
	// Skipped counts member pages without current chunks/vectors; in an
	// incremental plan, among the changed pages only.
	Skipped int    `json:"skipped"`
	Bulk    bool   `json:"bulk"` // a bulk rebuild was marked instead of queueing
	Reason  string `json:"reason,omitempty"`
	// Incremental: only the pages changed since export/state's watermark
	// were computed and compared (Changed of them); see Watermark.
	Incremental bool `json:"incremental,omitempty"`
	Changed     int  `json:"changed,omitempty"`
}

// reconcile applies the committed export work w (prepareExport) inside tx:
// it enqueues a put for every page whose record is new or changed and a
// delete for every page no longer desired, and changes export/state by a
// delta of them — or, when the changes exceed BulkRatio of the pages,
// marks a bulk rebuild. It records export/state's watermark in tx (or
// removes it, when export/state is left stale by a bulk mark).
//
// Nothing here is keyed by page in this process: the comparison is a reduce
// by page_key on the runner (ReconcileJob) into two scratch tables, puts and
// deletes, committed on their own; the driver reads their row counts, then
// streams just those rows into the queue (the change, not the corpus).
func reconcile(ctx context.Context, st pillar.Store, tx pillar.Tx, opts Options, w *exportWork, cause, priority string, pub pillar.Published) (*ExportPlan, error) {
	return reconcileState(ctx, st, tx, opts, w, cause, priority, pub, false)
}

// reconcileState is reconcile; with rewrite, the puts and deletes were
// computed against another state than export/state (a publication's saved
// state, on a return to it), so export/state is rewritten whole from
// desired instead of changed by a delta layer of them (which would apply
// them to the other pair's state).
func reconcileState(ctx context.Context, st pillar.Store, tx pillar.Tx, opts Options, w *exportWork, cause, priority string, pub pillar.Published, rewrite bool) (*ExportPlan, error) {
	if opts.Priority != "" {
		priority = opts.Priority
	}
	if _, err := pillar.ParsePriority(priority); err != nil {
		return nil, err
	}
	if rewrite && w.incremental {
		return nil, errors.New("pipeline: an incremental reconcile cannot rewrite export/state")
	}
	desired, skipped := w.desired, w.skipped
	plan := &ExportPlan{Incremental: w.incremental, Changed: w.changed}
	if ti, err := tx.Table(ctx, skipped); err == nil {
		plan.Skipped = int(ti.Rows)
	}
	puts, deletes := diffTables(desired)
	sn, err := st.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	defer sn.Release()
	rows := func(t string) int {
		ti, err := sn.Table(ctx, t)
		if err != nil {
			return 0
		}
		return int(ti.Rows)
	}
	stateRows := 0
	if ti, err := tx.Table(ctx, TableExportState); err == nil {
		stateRows = int(ti.Rows)
	}
	plan.Desired, plan.Puts, plan.Deletes = rows(desired), rows(puts), rows(deletes)
	if w.incremental {
		// The unchanged pages keep their rows of export/state.
		plan.Desired = stateRows - int(w.stateK) + int(w.desiredK)
	}
	plan.Unchanged = plan.Desired - plan.Puts
	changes := plan.Puts + plan.Deletes
	base := max(stateRows, plan.Desired, 1)
	if changes >= opts.BulkMinPages && float64(changes) > opts.BulkRatio*float64(base) {
		plan.Bulk = true
		plan.Reason = fmt.Sprintf("%d of %d pages change (over %.0f%%): bulk rebuild with `pillar export`", changes, base, 100*opts.BulkRatio)
		if err := tx.SetAttr(ctx, AttrBulk, BulkMark{Reason: cause + ": " + plan.Reason, At: time.Now().UTC(), Published: pub, Changes: changes}); err != nil {
			return nil, err
		}
		// export/state stays as it was until the export rewrites it.
		return plan, setWatermark(ctx, tx, nil, 0)
	}
	var state stateWriter = discardState{}
	if rewrite {
		if err := writeState(ctx, tx, opts, desired); err != nil {
			return nil, err
		}
	}
	if changes == 0 {
		return plan, setWatermark(ctx, tx, w.mark, -1)
	}
	nextSeq := int64(-1)
	if !rewrite {
		// export/state changes by the same puts and deletes: a delta layer
		// of O(changes) rows (the first state is its base), not a rewrite.
		dw, err := pillar.WriteDelta(ctx, tx, TableExportState, ExportState{}, int64(plan.Desired))
		if err != nil {
			return nil, err
		}
		defer dw.Close()
		state = dw
		if d := dw.Delta(); !d.Base {
			nextSeq = d.Seq + 1
		}
	}
	var batch []pillar.ExportRecord
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := tx.Enqueue(ctx, batch...)
		batch = batch[:0]
		return err
	}
	add := func(r pillar.ExportRecord) error {
		batch = append(batch, r)
		if len(batch) >= 256 {
			return flush()
		}
		return nil
	}
	err = eachRow(ctx, sn, puts, false, func(d *Desired) error {
		if err := state.Put(&ExportState{PageKey: d.PageKey, Partition: d.Partition, RecordHash: d.RecordHash}); err != nil {
			return err
		}
		return add(pillar.ExportRecord{Partition: d.Partition, PageKey: d.PageKey, Op: pillar.OpPut, Value: d.Value, Cause: cause, Priority: priority, Publication: pillar.EmbedVersionID(pub.ChunkVersion, pub.Model)})
	})
	if err != nil {
		return nil, err
	}
	err = eachRow(ctx, sn, deletes, false, func(s *ExportState) error {
		if err := state.Delete(ctx, s.PageKey); err != nil {
			return err
		}
		return add(pillar.ExportRecord{Partition: s.Partition, PageKey: s.PageKey, Op: pillar.OpDelete, Cause: cause, Priority: priority, Publication: pillar.EmbedVersionID(pub.ChunkVersion, pub.Model)})
	})
	if err != nil {
		return nil, err
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if err := state.Close(); err != nil {
		return nil, err
	}
	return plan, setWatermark(ctx, tx, w.mark, nextSeq)
}

// setWatermark records in tx that export/state reflects mark once tx
// commits (nil: removes the watermark, export/state is stale or its
// inputs unknown). nextSeq is export/state's next delta seq after tx (-1:
// tx writes no delta of it, its current one holds).
func setWatermark(ctx context.Context, tx pillar.Tx, mark *Watermark, nextSeq int64) error {
	if mark == nil {
		var old Watermark
		if err := tx.Attr(ctx, AttrWatermark, &old); errors.Is(err, pillar.ErrNotFound) {
			return nil
		} else if err != nil {
			return err
		}
		return tx.DeleteAttr(ctx, AttrWatermark)
	}
	m := *mark
	if nextSeq < 0 {
		var err error
		if nextSeq, err = stateSeq(ctx, tx); err != nil {
			return err
		}
	}
	m.State = nextSeq
	return tx.SetAttr(ctx, AttrWatermark, m)
}

// stateWriter is the part of a pillar delta writer reconcile uses.
type stateWriter interface {
	Put(row any) error
	Delete(ctx context.Context, pageKey string) error
	Close() error
}

// discardState is the stateWriter of a rewrite (export/state is written
// from desired instead).
type discardState struct{}

func (discardState) Put(any) error                        { return nil }
func (discardState) Delete(context.Context, string) error { return nil }
func (discardState) Close() error                         { return nil }

func init() {
	// export/state is layered (reconcile writes deltas): compaction folds
	// them with this row type.
	pillar.RegisterRowType(TableExportState, ExportState{})
}

// compactLayered folds the delta layers of tables the pipeline writes as
// deltas once they are more than pillar.DefaultMaxLayers
// (pillar.AutoCompact); the operations call it after they committed. On
// YTsaurus the fold is a reduce on the cluster (jobs.CompactMerge). A
// failure is logged, not returned: the operation is committed, and a later
// one (or `pillar compact`) folds the layers.
func compactLayered(ctx context.Context, st pillar.Store, opts Options, tables ...string) {
	co := &pillar.CompactOptions{}
	if _, local := opts.Runner.(*jobs.Local); !local && opts.Runner != nil {
		co.Merge = jobs.CompactMerge(opts.Runner)
	}
	for _, t := range tables {
		if cs, err := pillar.AutoCompact(ctx, st, t, co); err != nil {
			opts.Logger.Warn("pipeline: compaction failed (run `pillar compact`)", "table", t, "err", err)
		} else if cs != nil {
			opts.Logger.Info("pipeline: compacted", "table", t, "deltas", cs.Layers, "rows", cs.Rows)
		}
	}
}

// diffTables names the scratch tables of the puts and deletes of desired.
func diffTables(desired string) (puts, deletes string) {
	return desired + "-puts", desired + "-deletes"
}

// diffStateFrom runs ReconcileJob over desired and the export state
// table state (export/state; a publication's saved state, see publish.go;
// or the changed pages' rows of export/state) into the scratch tables of
// diffTables, committed on their own (scratch tables are dropped by the
// operation's final commit). It must run before the transaction that calls
// reconcile begins.
func diffStateFrom(ctx context.Context, st pillar.Store, opts Options, desired, state string) error {
	puts, deletes := diffTables(desired)
	tx, err := st.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Abort()
	inputs := []string{desired}
	types := []any{&Desired{}}
	if _, err := tx.Table(ctx, state); err == nil {
		inputs = append(inputs, state)
		types = append(types, &ExportState{})
	} else if !errors.Is(err, pillar.ErrNotFound) {
		return err
	}
	op := &jobs.Op{Title: "reconcile " + desired, Inputs: inputs, InputTypes: types,
		Outputs: []jobs.Output{
			{Table: puts, RowType: Desired{}, SortedBy: []string{"page_key"}, Scratch: true},
			{Table: deletes, RowType: ExportState{}, SortedBy: []string{"page_key"}, Scratch: true},
		},
		ReduceBy: []string{"page_key"}, Tx: tx, Workers: opts.Workers, MemoryLimit: opts.MemoryLimit,
		Progress: opts.Progress, Logger: opts.Logger}
	if err := opts.Runner.Reduce(ctx, &ReconcileJob{}, op); err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	return tx.Commit(ctx)
}

// writeState replaces export/state inside tx with the (page, partition,
// record hash) of every row of the committed table desired: a reduce on the
// runner, sorted by page_key.
func writeState(ctx context.Context, tx pillar.Tx, opts Options, desired string) error {
	op := &jobs.Op{Title: "export state " + desired, Inputs: []string{desired}, InputTypes: []any{&ExportState{}},
		Outputs:  []jobs.Output{{Table: TableExportState, RowType: ExportState{}, SortedBy: []string{"page_key"}}},
		ReduceBy: []string{"page_key"}, Tx: tx, Workers: opts.Workers, MemoryLimit: opts.MemoryLimit,
		Progress: opts.Progress, Logger: opts.Logger}
	if err := opts.Runner.Reduce(ctx, &StateJob{}, op); err != nil {
		return fmt.Errorf("write %s: %w", TableExportState, err)
	}
	return nil
}

func scanDesired(ctx context.Context, sn pillar.Snapshot, table string, fn func(*Desired) error) error {
	return eachRow(ctx, sn, table, false, fn)
}
