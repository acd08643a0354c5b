package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/jobs/embedder"
	"github.com/pillarkit/pillar/pillar"
)

// PublishResult reports a publish or rollback.
type PublishResult struct {
	Published pillar.Published  `json:"published"`
	Previous  *pillar.Published `json:"previous,omitempty"`
	// RollbackTo is the pair `pillar rollback` returns to afterwards: the
	// previous pair when this changed it, else the one recorded before
	// (re-publishing the live pair does not move it). Nil: none.
	RollbackTo *pillar.Published `json:"rollback_to,omitempty"`
	Export     *ExportPlan       `json:"export"`
	DryRun     bool              `json:"dry_run,omitempty"`
	// Publication is the serving publication of the published pair
	// (pillar.EmbedVersionID).
	Publication string `json:"publication"`
	// ExportState says what the export work was computed against:
	// StateCurrent (the same pair again), StateSaved (the pair's own export
	// state, saved when another pair replaced it: only what changed since is
	// queued, never a bulk rebuild) or StateNew (a pair the serving tier
	// does not hold: a bulk rebuild).
	ExportState string `json:"export_state"`
}

// ExportState values.
const (
	StateCurrent = "current"
	StateSaved   = "saved"
	StateNew     = "new"
)

// SavedStateTable is the table that keeps publication pub's export state
// (what its serving database holds once everything queued for it is
// delivered) while another pair is published. Publish and Rollback write it
// for the pair they replace and read it for the pair they return to, so a
// return queues only what changed meanwhile.
func SavedStateTable(pub string) string { return "export/saved/" + pub }

// PublishOptions are Publish's and Rollback's serving-side options.
type PublishOptions struct {
	// Retained reports whether the serving tier still holds publication
	// pub (the control plane's view). A pair whose publication is not
	// retained is rebuilt (bulk) even if its export state was saved. The
	// default value nil takes a saved export state as retained.
	Retained func(pub string) bool
}

// resolveModel accepts a model id or a model spec (whose id it computes).
func resolveModel(model string) string {
	if e, err := embedder.Parse(model, nil); err == nil {
		return e.ID()
	}
	return model
}

// Publish makes (cv, model) the published pair in one transaction, together
// with the export work it causes: puts for exported pages whose record
// changes, deletes for pages that can no longer be exported, or — when
// most pages change, as with a new pair — a bulk-rebuild mark for `pillar
// export`. Both versions must be complete. Re-publishing the published
// pair after an incremental backfill exports just the changed pages.
//
// A new pair always gets a bulk rebuild (the serving tier needs a snapshot
// of its publication); returning to a pair whose export state was saved
// (see SavedStateTable) queues only what changed since.
func Publish(ctx context.Context, st pillar.Store, cv, model string, opts Options) (*PublishResult, error) {
	return PublishWith(ctx, st, cv, model, opts, nil)
}

// PublishWith is Publish with serving-side options.
func PublishWith(ctx context.Context, st pillar.Store, cv, model string, opts Options, po *PublishOptions) (*PublishResult, error) {
	return publish(ctx, st, cv, resolveModel(model), "publish", opts, po)
}

// ErrNoPrevious: Rollback with no previous published pair.
var ErrNoPrevious = errors.New("no previous published pair")

// Rollback republishes the previous pair: against its saved export state
// (only what changed since it was replaced is queued, no bulk rebuild), or,
// when none was saved, the way Publish does.
func Rollback(ctx context.Context, st pillar.Store, opts Options) (*PublishResult, error) {
	return RollbackWith(ctx, st, opts, nil)
}

// RollbackWith is Rollback with serving-side options.
func RollbackWith(ctx context.Context, st pillar.Store, opts Options, po *PublishOptions) (*PublishResult, error) {
	sn, err := st.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	var prev pillar.Published
	err = sn.Attr(ctx, pillar.AttrPrevious, &prev)
	cur, _ := pillar.LoadPublished(ctx, sn)
	sn.Release()
	if errors.Is(err, pillar.ErrNotFound) {
		if cur != nil {
			return nil, fmt.Errorf("rollback: %w: only chunks %s, model %s has been published (publish another pair first; `pillar versions` lists the complete ones)",
				ErrNoPrevious, cur.ChunkVersion, cur.Model)
		}
		return nil, fmt.Errorf("rollback: %w: nothing is published yet", ErrNoPrevious)
	}
	if err != nil {
		return nil, err
	}
	return publish(ctx, st, prev.ChunkVersion, prev.Model, "rollback", opts, po)
}

// ReturnTo republishes (cv, model) the way Rollback returns to the previous
// pair: against its saved export state when it has one. `pillar rollback
// --control` uses it to return the store to the serving tier's previous
// publication, whichever pair the store had before.
func ReturnTo(ctx context.Context, st pillar.Store, cv, model string, opts Options, po *PublishOptions) (*PublishResult, error) {
	return publish(ctx, st, cv, resolveModel(model), "rollback", opts, po)
}

func publish(ctx context.Context, st pillar.Store, cv, model, verb string, opts Options, po *PublishOptions) (*PublishResult, error) {
	if po == nil {
		po = &PublishOptions{}
	}
	opts.ensureDefaults(st)
	sn, err := st.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	defer sn.Release()
	cver, err := pillar.LoadVersion(ctx, sn, cv)
	if err != nil {
		return nil, fmt.Errorf("%s: chunk version %q: %w", verb, cv, err)
	}
	eid := pillar.EmbedVersionID(cv, model)
	ever, err := pillar.LoadVersion(ctx, sn, eid)
	if err != nil {
		return nil, fmt.Errorf("%s: embedding version %q (run `pillar backfill embed --chunks %s --model …`): %w", verb, eid, cv, err)
	}
	for _, v := range []*pillar.Version{cver, ever} {
		if v.State != pillar.StateComplete && v.State != pillar.StatePublished {
			return nil, fmt.Errorf("%s: version %s is %s, not complete: finish its backfill first", verb, v.ID, v.State)
		}
	}
	if ever.SourceGeneration < cver.SourceGeneration {
		// The chunks changed after the vectors were made.
		return nil, fmt.Errorf("%s: embedding version %s is older than its chunks (rerun `pillar backfill embed`)", verb, eid)
	}
	res := &PublishResult{Published: pillar.Published{ChunkVersion: cv, Model: model, EmbedVersion: eid, At: time.Now().UTC()}, DryRun: opts.DryRun,
		Publication: eid, ExportState: StateCurrent}
	if old, err := pillar.LoadPublished(ctx, sn); err == nil {
		res.Previous = old
	}
	switching := res.Previous != nil && (res.Previous.ChunkVersion != cv || res.Previous.Model != model)
	if switching {
		res.RollbackTo = res.Previous
	} else if prev := new(pillar.Published); sn.Attr(ctx, pillar.AttrPrevious, prev) == nil {
		res.RollbackTo = prev
	}
	// What the export work is computed against (see PublishResult).
	stateFrom := TableExportState
	if switching || res.Previous == nil {
		res.ExportState = StateNew
		if _, err := sn.Table(ctx, SavedStateTable(eid)); err == nil && (po.Retained == nil || po.Retained(eid)) {
			res.ExportState, stateFrom = StateSaved, SavedStateTable(eid)
		}
	}
	switch res.ExportState {
	case StateNew:
		// Its publication needs a snapshot in the serving tier (a node
		// passes deltas of a publication it has no database of).
		opts.BulkMinPages, opts.BulkRatio = 0, -1
	case StateSaved:
		// Its serving database holds the saved state: deltas, never a
		// rebuild, however much changed.
		opts.BulkMinPages = math.MaxInt
	}
	// Re-publishing the pair a bulk rebuild is still marked for: export/state
	// is stale until that export runs (it rewrites it), so diffing against
	// it would queue records the export supersedes anyway. The mark stays.
	var mark BulkMark
	if !switching && res.Previous != nil && sn.Attr(ctx, AttrBulk, &mark) == nil &&
		mark.Published.ChunkVersion == cv && mark.Published.Model == model {
		res.Export = &ExportPlan{Bulk: true, Reason: fmt.Sprintf("a bulk rebuild of %s is marked already (%s): `pillar export` (or `pillar publish --serve`) carries it out", eid, mark.Reason)}
		return res, nil
	}
	if opts.DryRun {
		members, err := exportedSubsets(ctx, sn)
		if err != nil {
			return nil, err
		}
		read := tableBytes(ctx, sn, append([]string{pillar.TableDocs, cver.Table, ever.Table, TableExportState}, members...)...)
		res.Export = &ExportPlan{Reason: fmt.Sprintf("would read docs, %s, %s, export/state and %d exported subsets (~%d MB), "+
			"write the published pointer, version states and export/state, and queue a put per changed record (or mark a bulk rebuild)",
			cver.Table, ever.Table, len(members), read>>20)}
		return res, nil
	}
	lk, err := acquire(ctx, st, verb)
	if err != nil {
		return nil, err
	}
	defer lk.abandon()
	lk.after = func() { compactLayered(ctx, st, opts, TableExportState) } // reconcile writes it as a delta
	sn2, err := st.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	members, err := exportedSubsets(ctx, sn2)
	sn2.Release()
	if err != nil {
		return nil, err
	}
	run := fmt.Sprintf("tmp/%s-%d", verb, time.Now().UnixNano())
	// Re-publishing the live pair: only the pages changed since
	// export/state's watermark, when it applies (see Watermark).
	work, err := prepareExport(ctx, st, opts, res.Published, memberSet{names: members}, run, stateFrom, "", res.ExportState == StateCurrent)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", verb, err)
	}
	tx, err := st.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Abort()
	// The published pointer is compared-and-swapped: a concurrent publish
	// (which the lock should already prevent) fails this commit.
	if err := tx.ExpectAttr(ctx, pillar.AttrPublished); err != nil {
		return nil, err
	}
	// Re-publishing the live pair delivers crawl updates (fresh); a new
	// pair or a rollback republishes the corpus (bulk).
	// Returning to a saved state queues what changed meanwhile: fresh too.
	priority := pillar.PriorityBulk
	if res.ExportState == StateSaved || verb == "publish" && res.Previous != nil && res.Previous.ChunkVersion == cv && res.Previous.Model == model {
		priority = pillar.PriorityFresh
	}
	if switching {
		// The pair being replaced keeps its export state for a return.
		if err := saveState(ctx, tx, opts, SavedStateTable(res.Previous.EmbedVersion)); err != nil {
			return nil, fmt.Errorf("%s: %w", verb, err)
		}
	}
	// Against a saved state the changes are not relative to export/state
	// (the replaced pair's): it is rewritten from desired.
	plan, err := reconcileState(ctx, st, tx, opts, work, verb+" "+eid, priority, res.Published, res.ExportState == StateSaved)
	if err != nil {
		return nil, err
	}
	if res.ExportState == StateSaved {
		// export/state is the pair's state again (rewritten by reconcile).
		if err := tx.DropTable(ctx, stateFrom); err != nil {
			return nil, err
		}
	}
	res.Export = plan
	if res.ExportState == StateNew && plan.Bulk {
		plan.Reason = fmt.Sprintf("publication %s is new to the serving tier, which needs a snapshot of it: bulk rebuild of %d pages with `pillar export` (or `pillar publish --serve`)", eid, plan.Desired)
	}
	if res.Previous != nil && (res.Previous.ChunkVersion != cv || res.Previous.Model != model) {
		if err := tx.SetAttr(ctx, pillar.AttrPrevious, res.Previous); err != nil {
			return nil, err
		}
		for _, id := range []string{res.Previous.ChunkVersion, res.Previous.EmbedVersion} {
			if id == cv || id == eid {
				continue
			}
			if v, err := pillar.LoadVersion(ctx, tx, id); err == nil && v.State == pillar.StatePublished {
				v.State = pillar.StateComplete
				if err := pillar.SaveVersion(ctx, tx, v); err != nil {
					return nil, err
				}
			}
		}
	}
	if err := tx.SetAttr(ctx, pillar.AttrPublished, res.Published); err != nil {
		return nil, err
	}
	for _, v := range []*pillar.Version{cver, ever} {
		if v.State != pillar.StatePublished {
			v.State = pillar.StatePublished
			v.PublishedAt = res.Published.At
		}
		if err := pillar.SaveVersion(ctx, tx, v); err != nil {
			return nil, err
		}
	}
	if err := lk.commit(tx); err != nil {
		return nil, fmt.Errorf("%s: commit: %w", verb, err)
	}
	return res, nil
}

// saveState copies export/state inside tx to table (a reduce on the
// runner; nothing when there is no export state yet).
func saveState(ctx context.Context, tx pillar.Tx, opts Options, table string) error {
	if _, err := tx.Table(ctx, TableExportState); errors.Is(err, pillar.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	op := &jobs.Op{Title: "save export state as " + table, Inputs: []string{TableExportState}, InputTypes: []any{&ExportState{}},
		Outputs:  []jobs.Output{{Table: table, RowType: ExportState{}, SortedBy: []string{"page_key"}}},
		ReduceBy: []string{"page_key"}, Tx: tx, Workers: opts.Workers, MemoryLimit: opts.MemoryLimit,
		Progress: opts.Progress, Logger: opts.Logger}
	if err := opts.Runner.Reduce(ctx, &StateJob{}, op); err != nil {
		return fmt.Errorf("save %s: %w", table, err)
	}
	return nil
}

// ExportSink receives the rows of a bulk export, sorted by page key within
// each partition (sstbuilder's ExportWriter is one).
type ExportSink interface {
	WriteRecord(pageKey, op string, value []byte) error
}

// ExportResult reports a bulk export.
type ExportResult struct {
	Pages     int64   `json:"pages"`
	Skipped   int     `json:"skipped"`
	Bytes     int64   `json:"bytes"`
	QueueEnds []int64 `json:"queue_ends"`
	// Publication is the serving publication the records were computed for
	// (pillar.EmbedVersionID of the published pair); the export's batches
	// carry it.
	Publication string `json:"publication"`
	Duration    string `json:"duration"`
}

// Export is the bulk rebuild: it builds every exported page's record from
// the published pair, streams them sorted by page key into sink (the caller
// routes them to partitions and finishes the export), and — when the sink
// is finished without error by commit — records export/state, the export's
// queue positions and clears the bulk mark in one transaction.
//
// The caller must call exactly one of the returned Pending's Commit (after
// finishing the export files) or Abort.
func Export(ctx context.Context, st pillar.Store, sink ExportSink, opts Options) (res *ExportResult, pending *Pending, err error) {
	opts.ensureDefaults(st)
	start := time.Now()
	lk, err := acquire(ctx, st, "export")
	if err != nil {
		return nil, nil, err
	}
	handed := false
	defer func() {
		if !handed {
			lk.abandon()
		}
	}()
	sn, err := st.Snapshot(ctx)
	if err != nil {
		return nil, nil, err
	}
	pub, err := pillar.LoadPublished(ctx, sn)
	if err != nil {
		sn.Release()
		return nil, nil, fmt.Errorf("export: nothing is published yet (`pillar publish`): %w", err)
	}
	members, err := exportedSubsets(ctx, sn)
	sn.Release()
	if err != nil {
		return nil, nil, err
	}
	run := fmt.Sprintf("tmp/export-%d", time.Now().UnixNano())
	desired, skipped := run+"/desired", run+"/skipped"
	mark, err := computeDesired(ctx, st, opts, *pub, memberSet{names: members}, desired, skipped, opts.encoding())
	if err != nil {
		return nil, nil, fmt.Errorf("export: %w", err)
	}
	tx, err := st.Begin(ctx)
	if err != nil {
		return nil, nil, err
	}
	res = &ExportResult{Publication: pillar.EmbedVersionID(pub.ChunkVersion, pub.Model)}
	if ti, err := tx.Table(ctx, skipped); err == nil {
		res.Skipped = int(ti.Rows)
	}
	// The desired table is sorted by page key overall; a partition's rows
	// are then sorted too. The records stream through; export/state is
	// rewritten from desired by an operation on the runner at commit.
	err = scanDesired(ctx, tx, desired, func(d *Desired) error {
		res.Pages++
		res.Bytes += int64(len(d.Value))
		return sink.WriteRecord(d.PageKey, pillar.OpPut, d.Value)
	})
	if err != nil {
		tx.Abort()
		return nil, nil, fmt.Errorf("export: %w", err)
	}
	for p := 0; p < st.Info().Partitions; p++ {
		end, err := tx.QueueEnd(ctx, p)
		if err != nil {
			tx.Abort()
			return nil, nil, err
		}
		res.QueueEnds = append(res.QueueEnds, end)
	}
	// The sink's snapshots supersede these offsets; the control plane then
	// refuses them until Lorry has delivered the records before them.
	if qs, ok := sink.(interface{ SetQueueEnds([]int64) }); ok {
		qs.SetQueueEnds(res.QueueEnds)
	}
	// Its batches belong to the published pair's publication.
	if ps, ok := sink.(interface{ SetPublication(string) }); ok {
		ps.SetPublication(res.Publication)
	}
	res.Duration = time.Since(start).Round(time.Millisecond).String()
	handed = true
	return res, &Pending{tx: tx, lock: lk, commit: func(id, dir string) error {
		if err := writeState(ctx, tx, opts, desired); err != nil {
			return err
		}
		// export/state is the desired records computed from mark's layers.
		if err := setWatermark(ctx, tx, mark, -1); err != nil {
			return err
		}
		if err := tx.DeleteAttr(ctx, AttrBulk); err != nil {
			return err
		}
		last := LastExport{ID: id, Dir: dir, Generation: tx.Info().Generation, Published: *pub, Pages: res.Pages, QueueEnds: res.QueueEnds, At: time.Now().UTC()}
		if err := tx.SetAttr(ctx, AttrLastExport, last); err != nil {
			return err
		}
		if err := lk.commit(tx); err != nil {
			return fmt.Errorf("export: commit: %w", err)
		}
		return nil
	}}, nil
}

// Pending is a bulk export waiting for its files to be finished.
type Pending struct {
	tx     pillar.Tx
	lock   *opLock
	commit func(id, dir string) error
	done   bool
}

// Commit records the export (id, where its files are) in the store.
func (p *Pending) Commit(id, dir string) error {
	if p.done {
		return pillar.ErrTxDone
	}
	p.done = true
	err := p.commit(id, dir)
	p.tx.Abort()
	p.lock.abandon() // a no-op when the commit released it
	return err
}

// Abort gives up: nothing is recorded, the lock is released.
func (p *Pending) Abort() {
	if p.done {
		return
	}
	p.done = true
	p.tx.Abort()
	p.lock.abandon()
}

func (o *Options) encoding() string { return o.Encoding }

// tableBytes sums the sizes of the tables that exist.
func tableBytes(ctx context.Context, sn pillar.Snapshot, tables ...string) int64 {
	var n int64
	for _, t := range tables {
		if ti, err := sn.Table(ctx, t); err == nil {
			n += ti.Bytes
		}
	}
	return n
}
