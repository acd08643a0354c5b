package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.ytsaurus.tech/yt/go/mapreduce"

	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/jobs/chunker"
	"github.com/pillarkit/pillar/jobs/embedder"
	"github.com/pillarkit/pillar/pillar"
)

// Options configure the pipeline drivers. The zero value runs locally with
// defaults.
type Options struct {
	// Runner executes the jobs. The default value is a local runner over
	// the store.
	Runner jobs.Runner
	// SlicePages is how many pending pages one committed slice of a
	// backfill covers: an interrupted backfill loses at most one slice of
	// work. The default value is 5000.
	SlicePages int
	// Workers and MemoryLimit are passed to every operation. The default
	// values are the runner's.
	Workers     int
	MemoryLimit int64
	// Secrets reach the jobs (on YTsaurus through the secure vault), e.g.
	// PILLAR_EMBED_API_KEY. The default value is none.
	Secrets map[string]string
	// Progress receives rows done. The default value reports nothing.
	Progress jobs.Progress
	// Logger receives progress lines. The default value discards.
	Logger *slog.Logger
	// DryRun reports what would be read and written without writing.
	DryRun bool
	// BulkRatio: when a reconcile would enqueue puts and deletes for more
	// than this fraction of the exported pages, it marks a bulk rebuild
	// instead. The default value is 0.5.
	BulkRatio float64
	// BulkMinPages: below this many changes the work is always queued (the
	// bulk path pays off for large rebuilds only). The default value is 256.
	BulkMinPages int
	// Batch is the number of texts per Embed call of a backfill embed. The
	// default value is the model's batch size (batch= of a remote model), or 64.
	Batch int
	// EmbedConcurrency is the number of Embed calls each embed job keeps in
	// flight; for a remote model it also sets the spec's concurrency (its
	// requests in flight), which is not part of the version id. The default
	// value (0) takes the model's concurrency (concurrency=, default 4), or
	// 2 for a local model.
	EmbedConcurrency int
	// Encoding of vectors in exported records: "float16", "float32" or
	// "int8". The default value ("") is float16.
	Encoding string
	// Priority overrides the priority of the export records an operation
	// queues (pillar.PriorityFresh or PriorityBulk). The default value ("")
	// lets the operation choose: a publish of the pair already published
	// (crawl updates) and subset recomputes (policy entries and deletes)
	// queue fresh records; a publish of a new pair and a rollback
	// (republishes) queue bulk ones.
	Priority string
	// FullReconcile makes a publish or subset recompute compute every
	// exported page's record and compare all of export/state, as if
	// export/state had no watermark (see Watermark). The default value
	// false reconciles only the pages changed since the watermark when it
	// applies.
	FullReconcile bool
}

func (o *Options) ensureDefaults(st pillar.Store) {
	if o.Runner == nil {
		o.Runner = jobs.NewLocal(st, nil)
	}
	if o.SlicePages <= 0 {
		o.SlicePages = 5000
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.BulkRatio == 0 {
		o.BulkRatio = 0.5
	}
	if o.BulkMinPages == 0 {
		o.BulkMinPages = 256
	}
}

func (o *Options) op(title string, inputs []string, out jobs.Output, tx pillar.Tx) *jobs.Op {
	return &jobs.Op{Title: title, Inputs: inputs, Outputs: []jobs.Output{out}, Tx: tx,
		Workers: o.Workers, MemoryLimit: o.MemoryLimit, Secrets: o.Secrets, Progress: o.Progress, Logger: o.Logger}
}

// Result reports a backfill.
type Result struct {
	Version      string `json:"version"`
	Table        string `json:"table"`
	PendingPages int    `json:"pending_pages"` // pages processed by this run
	StalePages   int    `json:"stale_pages"`   // rows of old content dropped
	Slices       int    `json:"slices"`
	RowsWritten  int64  `json:"rows_written"`
	Rows         int64  `json:"rows"` // rows in the version afterwards
	Pages        int64  `json:"pages"`
	DryRun       bool   `json:"dry_run,omitempty"`
	ReadBytes    int64  `json:"read_bytes"`  // estimate: input bytes read
	WriteBytes   int64  `json:"write_bytes"` // estimate: output bytes written
	Duration     string `json:"duration"`
}

// PendingPrefix prefixes the table a version's backfill slices append to
// until the version is completed: the version table itself stays sorted
// (YTsaurus refuses unsorted appends to a sorted table), and completion
// merges the pending rows into it.
const PendingPrefix = "backfill-pending/"

// pendingTable returns the pending table of a version table.
func pendingTable(table string) string { return PendingPrefix + table }

// TodoPrefix prefixes the tables a backfill's plan writes: TodoPrefix +
// <version table> holds the source rows (docs for a rechunk, chunks for an
// embed) of the pages it must process, sorted by page key, and its "-stale"
// sibling the pages whose rows are of old content. Slices are row ranges of
// the todo table. Both are dropped when the version completes; a new run
// replaces them.
const TodoPrefix = "backfill-todo/"

// nextPrefix prefixes the table the completion writes before it replaces the
// version table (an operation cannot read and write one table).
const nextPrefix = "backfill-next/"

// Projections of the row types: reading a table into one of these decodes
// only its columns, not the text or vectors the plan never looks at.
type (
	// pageHash is the (page, content hash) of a row of docs, chunks or
	// embeddings.
	pageHash struct {
		PageKey     string `yson:"page_key" parquet:"page_key"`
		ContentHash string `yson:"content_hash" parquet:"content_hash"`
	}
	docHead struct {
		PageKey string `yson:"page_key" parquet:"page_key"`
		TextLen int64  `yson:"text_len" parquet:"text_len"`
	}
	chunkHead struct {
		PageKey string `yson:"page_key" parquet:"page_key"`
		Start   int32  `yson:"start" parquet:"start_offset"`
		End     int32  `yson:"end" parquet:"end_offset"`
	}
)

// backfillPlan is what a backfill's plan found: the todo table, its slices
// (row ranges of whole pages) and the counts.
type backfillPlan struct {
	todo, stale string
	generation  int64 // the generation the plan read the source at
	pending     int
	stalePages  int
	bytes       int64
	slices      [][2]int64
	// source is the source version's registry entry when a first build's
	// slices may go straight into the version table (Embed sets it: an
	// embedding version over every row of a chunk version has its counts);
	// direct reports that every slice did (build).
	source *pillar.Version
	// countPages has a first build's direct slices count their pages,
	// rows and empty pages (countedJob) into the counts table instead
	// (Rechunk: a chunk version's counts come from no registry entry).
	countPages bool
	direct     bool
	// aliased: a first build's todo is the source table itself (no
	// copy), valid while the source stays at sourceGen; the slices check it
	// (runSlice) and the run plans again when it moved.
	aliased   bool
	sourceGen int64
}

// planTables are the tables a plan of version table table writes (this
// run's, or a previous run's it left): never an aliased source.
func planTables(table string) []string {
	todo := TodoPrefix + table
	return []string{todo, todo + "-stale"}
}

// errSourceChanged: an aliased todo's source table changed since the plan.
var errSourceChanged = errors.New("the source table changed since the plan")

// countsTable is where a first build's direct slices append their counts.
func countsTable(table string) string { return pendingTable(table) + "-counts" }

// planBackfill runs PlanJob over the source table and the version's done
// rows (its table and its pending table) into the todo and stale tables,
// committed on their own, then reads the todo table's (page, size)
// projection once to cut it into slices of at most n pages. Nothing keyed
// by page is held: the driver keeps counts and slice bounds.
func planBackfill(ctx context.Context, st pillar.Store, opts Options, kind, source, table string, n int) (*backfillPlan, error) {
	pl := &backfillPlan{todo: TodoPrefix + table}
	pl.stale = pl.todo + "-stale"
	small, err := planByKeys(ctx, st, opts, kind, source, table, pl)
	if err != nil {
		return nil, err
	}
	if !small {
		first, err := planFirstBuild(ctx, st, kind, source, table, pl)
		if err != nil {
			return nil, err
		}
		if !first {
			if err := planFull(ctx, st, opts, kind, source, table, pl); err != nil {
				return nil, err
			}
		}
	}
	return slicePlan(ctx, st, kind, table, n, pl)
}

// planFirstBuild is the plan of a first build (neither the version table
// nor its pending table exists), which processes every source row: PlanJob
// would copy the source whole into the todo table, so the source itself is
// the todo (row ranges of it are the slices) and nothing is written. It
// applies only to a source that is one table (no delta layers) recorded
// sorted as the todo would be: by page_key (docs, one row per page), or by
// (page_key, chunk_no) (chunks). It reports false, having set nothing,
// otherwise.
func planFirstBuild(ctx context.Context, st pillar.Store, kind, source, table string, pl *backfillPlan) (bool, error) {
	sn, err := st.Snapshot(ctx)
	if err != nil {
		return false, err
	}
	defer sn.Release()
	for _, t := range []string{table, pendingTable(table)} {
		if _, err := sn.Table(ctx, t); err == nil {
			return false, nil
		} else if !errors.Is(err, pillar.ErrNotFound) {
			return false, err
		}
	}
	ti, err := sn.Table(ctx, source)
	if err != nil {
		return false, err
	}
	layers, err := pillar.Layers(ctx, sn, source)
	if err != nil || len(layers) != 1 || layers[0].Kind != pillar.LayerBase {
		return false, err // delta layers: rows are the merge of several tables
	}
	want := []string{"page_key"}
	if kind == pillar.KindEmbeddings {
		want = []string{"page_key", "chunk_no"}
	}
	if len(ti.SortedBy) < len(want) || !slices.Equal(ti.SortedBy[:len(want)], want) {
		return false, nil
	}
	pl.todo, pl.stale, pl.aliased = source, "", true
	pl.generation, pl.sourceGen = sn.Info().Generation, ti.Generation
	return true, nil
}

// planFull is the plan as one PlanJob reduce over the source rows.
func planFull(ctx context.Context, st pillar.Store, opts Options, kind, source, table string, pl *backfillPlan) error {
	tx, err := st.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Abort()
	var srcType, rowType any = &pillar.Doc{}, pillar.Doc{}
	if kind == pillar.KindEmbeddings {
		srcType, rowType = &pillar.Chunk{}, pillar.Chunk{}
	}
	inputs, types := []string{source}, []any{srcType}
	for _, t := range []string{table, pendingTable(table)} {
		if _, err := tx.Table(ctx, t); err == nil {
			inputs, types = append(inputs, t), append(types, &pageHash{})
		} else if !errors.Is(err, pillar.ErrNotFound) {
			return err
		}
	}
	op := &jobs.Op{Title: "backfill plan " + table, Inputs: inputs, InputTypes: types,
		Outputs: []jobs.Output{
			{Table: pl.todo, RowType: rowType, SortedBy: []string{"page_key"}, Scratch: true},
			{Table: pl.stale, RowType: pageHash{}, SortedBy: []string{"page_key"}, Scratch: true},
		},
		ReduceBy: []string{"page_key"}, Tx: tx, Workers: opts.Workers, MemoryLimit: opts.MemoryLimit,
		Progress: opts.Progress, Logger: opts.Logger}
	pl.generation = tx.Info().Generation
	if err := opts.Runner.Reduce(ctx, &PlanJob{Source: kind}, op); err != nil {
		return fmt.Errorf("backfill plan %s: %w", table, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("backfill plan %s: commit: %w", table, err)
	}
	return nil
}

// planByKeys is the plan of a version table that exists: PlanJob over the
// (page, content hash) projection of the source finds the pages to process
// (and writes the stale table); when they are at most MaxIncrementalPages,
// the todo table is the source rows of just those pages, selected as the
// incremental reconcile selects (selectChanged), instead of a pass that
// decodes every source row. It reports false, having written no todo
// table, when the version table is new or more pages are to be processed.
//
// The selection reads a later state than the projection did; pl.generation
// is the earlier one, so a change in between is planned again by the next
// run, and a page whose content changed in between is processed in its
// newer content (the completion keeps the rows of current content only).
func planByKeys(ctx context.Context, st pillar.Store, opts Options, kind, source, table string, pl *backfillPlan) (bool, error) {
	tx, err := st.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Abort()
	if _, err := tx.Table(ctx, table); errors.Is(err, pillar.ErrNotFound) {
		return false, nil // a first build processes every page
	} else if err != nil {
		return false, err
	}
	keys := pl.todo + "-keys"
	inputs, types := []string{source}, []any{&pageHash{}}
	for _, t := range []string{table, pendingTable(table)} {
		if _, err := tx.Table(ctx, t); err == nil {
			inputs, types = append(inputs, t), append(types, &pageHash{})
		} else if !errors.Is(err, pillar.ErrNotFound) {
			return false, err
		}
	}
	op := &jobs.Op{Title: "backfill plan " + table, Inputs: inputs, InputTypes: types,
		Outputs: []jobs.Output{
			{Table: keys, RowType: pageHash{}, SortedBy: []string{"page_key"}, Scratch: true},
			{Table: pl.stale, RowType: pageHash{}, SortedBy: []string{"page_key"}, Scratch: true},
		},
		ReduceBy: []string{"page_key"}, Tx: tx, Workers: opts.Workers, MemoryLimit: opts.MemoryLimit,
		Progress: opts.Progress, Logger: opts.Logger}
	generation := tx.Info().Generation
	if err := opts.Runner.Reduce(ctx, &PlanJob{Source: kind, Keys: true}, op); err != nil {
		return false, fmt.Errorf("backfill plan %s: %w", table, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("backfill plan %s: commit: %w", table, err)
	}
	if tx, err = st.Begin(ctx); err != nil {
		return false, err
	}
	defer tx.Abort()
	ti, err := tx.Table(ctx, keys)
	if err != nil {
		return false, err
	}
	if ti.Rows > MaxIncrementalPages {
		if err := tx.DropTable(ctx, keys); err != nil {
			return false, err
		}
		return false, tx.Commit(ctx)
	}
	var todo []string
	if _, local := opts.Runner.(*jobs.Local); local {
		err = eachRow(ctx, tx, keys, false, func(h *pageHash) error { todo = append(todo, h.PageKey); return nil })
		if err != nil {
			return false, err
		}
	}
	if err := selectChanged(ctx, tx, opts, todo, []string{keys}, []string{source}, []string{pl.todo}); err != nil {
		return false, fmt.Errorf("backfill plan %s: %w", table, err)
	}
	if err := tx.DropTable(ctx, keys); err != nil {
		return false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("backfill plan %s: commit: %w", table, err)
	}
	pl.generation = generation
	return true, nil
}

// slicePlan reads the committed todo table's (page, size) projection once
// to cut it into slices of at most n pages, and the stale table's count.
func slicePlan(ctx context.Context, st pillar.Store, kind, table string, n int, pl *backfillPlan) (*backfillPlan, error) {
	sn, err := st.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	defer sn.Release()
	if pl.stale != "" {
		ti, err := sn.Table(ctx, pl.stale)
		if err != nil {
			return nil, err
		}
		pl.stalePages = int(ti.Rows)
	}
	// Cut the todo rows into slices of at most n whole pages.
	var row, lo int64
	prev, pages := "", 0
	cut := func() {
		if row > lo {
			pl.slices = append(pl.slices, [2]int64{lo, row})
		}
		lo, pages = row, 0
	}
	visit := func(key string, size int64) {
		if key != prev {
			if pages == n {
				cut()
			}
			pages++
			pl.pending++
			prev = key
		}
		pl.bytes += size
		row++
	}
	if kind == pillar.KindEmbeddings {
		err = eachRow(ctx, sn, pl.todo, false, func(c *chunkHead) error { visit(c.PageKey, int64(c.End-c.Start)); return nil })
	} else {
		err = eachRow(ctx, sn, pl.todo, false, func(d *docHead) error { visit(d.PageKey, d.TextLen); return nil })
	}
	if err != nil {
		return nil, fmt.Errorf("backfill plan %s: read %s: %w", table, pl.todo, err)
	}
	cut()
	return pl, nil
}

// upToDate reports whether version v needs no run: it is complete (or
// published), nothing is pending, and its source table has not changed since
// it was completed. This is what makes a re-run commit nothing.
func upToDate(ctx context.Context, sn pillar.Snapshot, v *pillar.Version, source string) bool {
	if v.State == pillar.StateBuilding || v.SourceGeneration == 0 {
		return false
	}
	if _, err := sn.Table(ctx, pendingTable(v.Table)); err == nil {
		return false
	}
	ti, err := sn.Table(ctx, source)
	return err == nil && ti.Generation <= v.SourceGeneration
}

// Rechunk brings chunk version spec up to date with the docs table: only
// pages whose content hash has no rows in the version are chunked; each
// slice of pages commits on its own, so an interrupted run resumes where
// it stopped. The version is registered (building) and marked complete at
// the end, when its table is compacted (rows of old content dropped, sorted
// by page_key, chunk_no).
func Rechunk(ctx context.Context, st pillar.Store, spec string, opts Options) (*Result, error) {
	opts.ensureDefaults(st)
	ch, err := chunker.Parse(spec)
	if err != nil {
		return nil, err
	}
	cv := ch.ID()
	table := pillar.ChunksTable(cv)
	start := time.Now()
	sn, err := st.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	defer sn.Release()
	if ti, err := sn.Table(ctx, pillar.TableDocs); err != nil || ti.Rows == 0 {
		return nil, fmt.Errorf("rechunk %s: the docs table is empty or missing: run `pillar ingest` first", cv)
	}
	v, err := pillar.LoadVersion(ctx, sn, cv)
	if errors.Is(err, pillar.ErrNotFound) {
		v = &pillar.Version{ID: cv, Kind: pillar.KindChunks, Spec: ch.Spec(), Table: table, State: pillar.StateBuilding, CreatedAt: time.Now().UTC()}
	} else if err != nil {
		return nil, err
	}
	res := &Result{Version: cv, Table: table, DryRun: opts.DryRun}
	if upToDate(ctx, sn, v, pillar.TableDocs) {
		res.Rows, res.Pages, res.Duration = v.Rows, v.Pages, time.Since(start).Round(time.Millisecond).String()
		return res, nil // up to date: commit nothing
	}
	pl, err := planBackfill(ctx, st, opts, pillar.KindChunks, pillar.TableDocs, table, opts.SlicePages)
	if err != nil {
		return nil, fmt.Errorf("rechunk %s: %w", cv, err)
	}
	res.PendingPages, res.StalePages, res.ReadBytes = pl.pending, pl.stalePages, pl.bytes
	res.WriteBytes = res.ReadBytes * 5 / 4 // text plus overlap and columns, roughly
	if opts.DryRun {
		res.Slices = len(pl.slices)
		return res, dropPlan(ctx, st, table)
	}
	pl.countPages = true
	return build(ctx, st, opts, v, res, start, pl, pillar.TableDocs,
		func() mapreduce.Job { return &RechunkJob{Spec: ch.Spec()} })
}

// Embed brings embedding version (cv, model spec) up to date with chunk
// version cv, which must exist and be complete.
func Embed(ctx context.Context, st pillar.Store, cv, modelSpec string, opts Options) (*Result, error) {
	opts.ensureDefaults(st)
	if opts.EmbedConcurrency != 0 {
		spec, err := embedder.WithConcurrency(modelSpec, opts.EmbedConcurrency)
		if err != nil {
			return nil, fmt.Errorf("embed: --embed-concurrency %d: %w", opts.EmbedConcurrency, err)
		}
		modelSpec = spec
	}
	emb, err := embedder.Parse(modelSpec, opts.Secrets)
	if err != nil {
		return nil, err
	}
	model := emb.ID()
	id := pillar.EmbedVersionID(cv, model)
	table := pillar.EmbeddingsTable(cv, model)
	start := time.Now()
	sn, err := st.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	defer sn.Release()
	cver, err := pillar.LoadVersion(ctx, sn, cv)
	if errors.Is(err, pillar.ErrNotFound) {
		return nil, fmt.Errorf("embed %s: chunk version %q does not exist (see `pillar versions`): %w", id, cv, pillar.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	if cver.Kind != pillar.KindChunks {
		return nil, fmt.Errorf("embed %s: %q is not a chunk version", id, cv)
	}
	if cver.State == pillar.StateBuilding {
		return nil, fmt.Errorf("embed %s: chunk version %s is still building: finish `pillar backfill rechunk` first", id, cv)
	}
	v, err := pillar.LoadVersion(ctx, sn, id)
	if errors.Is(err, pillar.ErrNotFound) {
		v = &pillar.Version{ID: id, Kind: pillar.KindEmbeddings, Spec: emb.Spec(), Table: table, ChunkVersion: cv,
			Model: model, Dims: emb.Dims(), State: pillar.StateBuilding, CreatedAt: time.Now().UTC()}
	} else if err != nil {
		return nil, err
	}
	res := &Result{Version: id, Table: table, DryRun: opts.DryRun}
	if upToDate(ctx, sn, v, cver.Table) {
		res.Rows, res.Pages, res.Duration = v.Rows, v.Pages, time.Since(start).Round(time.Millisecond).String()
		return res, nil // up to date: commit nothing
	}
	pl, err := planBackfill(ctx, st, opts, pillar.KindEmbeddings, cver.Table, table, opts.SlicePages)
	if err != nil {
		return nil, fmt.Errorf("embed %s: %w", id, err)
	}
	res.PendingPages, res.StalePages, res.ReadBytes = pl.pending, pl.stalePages, pl.bytes
	chunks := pl.bytes / 2048
	res.WriteBytes = int64(emb.Dims()) * 4 * max(chunks, int64(pl.pending))
	if opts.DryRun {
		res.Slices = len(pl.slices)
		return res, dropPlan(ctx, st, table)
	}
	pl.source = cver
	return build(ctx, st, opts, v, res, start, pl, cver.Table,
		func() mapreduce.Job {
			return &EmbedJob{Spec: emb.Spec(), Batch: opts.Batch, Concurrency: opts.EmbedConcurrency}
		})
}

// dropPlan drops the plan's tables (after a dry run).
func dropPlan(ctx context.Context, st pillar.Store, table string) error {
	tx, err := st.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Abort()
	for _, t := range planTables(table) {
		if err := tx.DropTable(ctx, t); err != nil && !errors.Is(err, pillar.ErrNotFound) {
			return err
		}
	}
	return tx.Commit(ctx)
}

// build runs a version's slices (each its own commit: a map over a row range
// of the todo table) into its pending table, then completes the version
// (finish).
func build(ctx context.Context, st pillar.Store, opts Options, v *pillar.Version, res *Result, start time.Time,
	pl *backfillPlan, source string, newJob func() mapreduce.Job) (*Result, error) {
	rowType := any(pillar.Chunk{})
	if v.Kind == pillar.KindEmbeddings {
		rowType = pillar.Embedding{}
	}
	om, ordered := opts.Runner.(orderedMapper)
	ordered = ordered && om.OrderedMap()
	// A first build over a runner that keeps input order appends its slices
	// to the version table itself, recorded sorted, so finish has nothing
	// to merge or rewrite (a first build's finish was a fifth of an embed
	// step around a 50 ms model: pillar bench embed). The version stays
	// building until finish; a crash leaves the table, which the next run
	// plans against as done rows and completes through the pending table.
	direct := ordered && (pl.source != nil || pl.countPages) && len(pl.slices) > 0
	if direct {
		sn, err := st.Snapshot(ctx)
		if err != nil {
			return res, err
		}
		for _, t := range []string{v.Table, pendingTable(v.Table)} {
			if _, err := sn.Table(ctx, t); !errors.Is(err, pillar.ErrNotFound) {
				direct = false
			}
		}
		sn.Release()
	}
	for i, sl := range pl.slices {
		out := jobs.Output{Table: pendingTable(v.Table), RowType: rowType, Append: true, Scratch: true}
		if direct {
			keeps, err := appendKeepsOrder(ctx, st, pl.todo, sl[0], v.Table)
			if err != nil {
				return res, err
			}
			if direct = keeps; direct {
				out.Table, out.Scratch = v.Table, false
			}
		}
		if ordered && out.Table != v.Table {
			keeps, err := appendKeepsOrder(ctx, st, pl.todo, sl[0], out.Table)
			if err != nil {
				return res, err
			}
			if keeps {
				out.SortedBy = []string{"page_key", "chunk_no"}
			}
		} else if ordered {
			out.SortedBy = []string{"page_key", "chunk_no"}
		}
		job := newJob()
		var extra []jobs.Output
		if out.Table == v.Table && pl.countPages {
			job = &countedJob{Job: job}
			extra = []jobs.Output{{Table: countsTable(v.Table), RowType: FinishSummary{}, Append: true, Scratch: true}}
		}
		var pin *sourcePin
		if pl.aliased {
			pin = &sourcePin{table: pl.todo, gen: pl.sourceGen}
		}
		n, err := runSlice(ctx, st, opts, fmt.Sprintf("backfill %s %s slice %d/%d", v.Kind, v.ID, i+1, len(pl.slices)), job,
			[]string{jobs.RowRange(pl.todo, sl[0], sl[1])}, out, v, pin, extra...)
		if errors.Is(err, errSourceChanged) {
			// The slices so far are done rows; plan the rest against them,
			// as a run after a crash would.
			opts.Logger.Info("backfill: the source changed during a first build; planning again", "version", v.ID, "source", pl.todo, "slices done", i)
			next, err := planBackfill(ctx, st, opts, v.Kind, pl.todo, v.Table, opts.SlicePages)
			if err != nil {
				return res, err
			}
			next.source, next.countPages = pl.source, pl.countPages
			return build(ctx, st, opts, v, res, start, next, source, newJob)
		}
		if err != nil {
			return res, err
		}
		res.Slices++
		res.RowsWritten += n
	}
	pl.direct = direct
	if err := finish(ctx, st, opts, v, source, pl, res); err != nil {
		return res, err
	}
	res.Duration = time.Since(start).Round(time.Millisecond).String()
	return res, nil
}

// orderedMapper is a runner whose Map writes its output in input order
// (jobs.Local). RechunkJob and EmbedJob write a page's rows in chunk order,
// pages in input order, and the todo table is sorted by page: over such a
// runner a slice's rows are sorted by (page_key, chunk_no), and the pending
// table records it, so finish's reduce merges it as it is instead of
// sending every pending row through the external sort (its encoding and
// decoding were most of a first build's finish). The runner checks the
// claimed order as it reads; a runner without the guarantee (YTsaurus
// maps are unordered) records none.
type orderedMapper interface{ OrderedMap() bool }

// appendKeepsOrder reports whether appending the slice that starts at row
// start of todo to the pending table keeps it sorted: the pending table is
// absent or empty, or recorded sorted with its last page before the
// slice's first (a rerun's slice of pages already pending, or a page split
// between two slices, is appended unsorted, and the store then drops the
// claim).
func appendKeepsOrder(ctx context.Context, st pillar.Store, todo string, start int64, pending string) (bool, error) {
	sn, err := st.Snapshot(ctx)
	if err != nil {
		return false, err
	}
	defer sn.Release()
	pt, err := sn.Table(ctx, pending)
	if errors.Is(err, pillar.ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if strings.Join(pt.SortedBy, ",") != "page_key,chunk_no" {
		return false, nil
	}
	if pt.Rows == 0 {
		return true, nil
	}
	last, err := pageKeyAt(ctx, sn, pending, pt.Rows-1, pageHash{})
	if err != nil {
		return false, err
	}
	tt, err := sn.Table(ctx, todo)
	if err != nil {
		return false, err
	}
	if len(tt.SortedBy) == 0 || tt.SortedBy[0] != "page_key" {
		return false, nil
	}
	first, err := pageKeyAt(ctx, sn, todo, start, pageHash{})
	if err != nil {
		return false, err
	}
	return last < first, nil
}

// pageKeyAt is the page_key of row i of table, whose rows are of
// rowType's type.
func pageKeyAt(ctx context.Context, sn pillar.Snapshot, table string, i int64, rowType any) (string, error) {
	rr, err := sn.ReadTable(ctx, table, &pillar.Range{Start: i, End: i + 1})
	if err != nil {
		return "", err
	}
	defer rr.Close()
	if !rr.Next() {
		if err := rr.Err(); err != nil {
			return "", err
		}
		return "", fmt.Errorf("%s: no row %d", table, i)
	}
	row := reflect.New(reflect.TypeOf(rowType))
	if err := rr.Scan(row.Interface()); err != nil {
		return "", err
	}
	return row.Elem().FieldByName("PageKey").String(), nil
}

// sourcePin is the state an aliased todo table must still be in.
type sourcePin struct {
	table string
	gen   int64
}

// runSlice runs one slice's map into the version's table and commits it
// together with the registry entry (state building). With pin, it first
// checks that the aliased source is unchanged (errSourceChanged).
func runSlice(ctx context.Context, st pillar.Store, opts Options, title string, job mapreduce.Job, inputs []string, out jobs.Output, v *pillar.Version, pin *sourcePin, extra ...jobs.Output) (int64, error) {
	tx, err := st.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Abort()
	if pin != nil { // the slice reads the state tx began from: check that one
		ti, err := tx.Table(ctx, pin.table)
		if errors.Is(err, pillar.ErrNotFound) || err == nil && ti.Generation != pin.gen {
			return 0, errSourceChanged
		}
		if err != nil {
			return 0, err
		}
	}
	before := int64(0)
	if ti, err := tx.Table(ctx, out.Table); err == nil {
		before = ti.Rows
	}
	op := opts.op(title, inputs, out, tx)
	op.Outputs = append(op.Outputs, extra...)
	if err := opts.Runner.Map(ctx, job, op); err != nil {
		return 0, err
	}
	if v.State != pillar.StatePublished {
		v.State = pillar.StateBuilding
	}
	if err := pillar.SaveVersion(ctx, tx, v); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("%s: commit: %w", title, err)
	}
	sn, err := st.Snapshot(ctx)
	if err != nil {
		return 0, err
	}
	defer sn.Release()
	ti, err := sn.Table(ctx, out.Table)
	if err != nil {
		return 0, err
	}
	opts.Logger.Info("slice committed", "op", title, "rows", ti.Rows-before)
	return ti.Rows - before, nil
}

// finish completes the version: FinishJob (a reduce by page on the runner)
// keeps the rows of the source's current content from the version table
// and its pending rows, sorted by (page_key, chunk_no), into a next table
// (committed on its own); then one transaction copies it into the version
// table, drops the pending, next and plan tables and marks the version
// complete with the counts FinishJob summarised. When nothing is pending or
// stale and the table is already sorted, the rows stay as they are.
func finish(ctx context.Context, st pillar.Store, opts Options, v *pillar.Version, source string, pl *backfillPlan, res *Result) error {
	next := nextPrefix + v.Table
	summary := next + "-summary"
	sn, err := st.Snapshot(ctx)
	if err != nil {
		return err
	}
	_, perr := sn.Table(ctx, pendingTable(v.Table))
	hasPending := perr == nil
	ti, terr := sn.Table(ctx, v.Table)
	sn.Release()
	sorted := terr == nil && strings.Join(ti.SortedBy, ",") == "page_key,chunk_no"
	rewrite := hasPending || pl.stalePages > 0 || !sorted
	if !rewrite && pl.direct {
		// The slices wrote the version table itself. A table of another
		// size than their counts says the source moved under the build:
		// the general completion below sorts it out.
		c, err := directCounts(ctx, st, v, pl)
		if err != nil {
			return err
		}
		if c.Rows == ti.Rows {
			v.Rows, v.Pages, v.EmptyPages = c.Rows-c.Empty, c.Pages, c.Empty
		} else {
			rewrite = true
		}
	}
	rowType := any(pillar.Chunk{})
	if v.Kind == pillar.KindEmbeddings {
		rowType = pillar.Embedding{}
	}
	if rewrite && sorted && hasPending && v.SourceGeneration > 0 {
		// An incremental run over a complete version: a delta layer of
		// what changed instead of rewriting the table.
		return finishDelta(ctx, st, opts, v, source, pl, res, rowType)
	}
	// A first build (no version table yet) writes FinishJob's rows into the
	// version table itself: there is nothing to replace, so the copy from a
	// next table (a whole read, sort merge and write of the version's rows,
	// a quarter of a first `backfill embed`'s CPU) buys nothing. A crash
	// before the completing commit leaves the table and the pending rows; the
	// next run finds the table and rewrites it as any rerun does.
	direct := terr != nil
	if direct {
		next = v.Table
	}
	if rewrite {
		tx, err := st.Begin(ctx)
		if err != nil {
			return err
		}
		inputs, types := []string{source}, []any{&pageHash{}}
		for _, t := range []string{v.Table, pendingTable(v.Table)} {
			if _, err := tx.Table(ctx, t); err == nil {
				inputs = append(inputs, t)
				types = append(types, reflect.New(reflect.TypeOf(rowType)).Interface())
			}
		}
		op := &jobs.Op{Title: "backfill complete " + v.ID, Inputs: inputs, InputTypes: types,
			Outputs: []jobs.Output{
				{Table: next, RowType: rowType, SortedBy: []string{"page_key", "chunk_no"}, Scratch: true},
				{Table: summary, RowType: FinishSummary{}, Scratch: true},
			},
			ReduceBy: []string{"page_key"}, Tx: tx, Workers: opts.Workers, MemoryLimit: opts.MemoryLimit,
			Progress: opts.Progress, Logger: opts.Logger}
		if err := opts.Runner.Reduce(ctx, &FinishJob{Kind: v.Kind}, op); err != nil {
			tx.Abort()
			return fmt.Errorf("complete %s: %w", v.ID, err)
		}
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("complete %s: %w", v.ID, err)
		}
	}
	tx, err := st.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Abort()
	if rewrite {
		var sum FinishSummary
		err := eachRow(ctx, tx, summary, false, func(s *FinishSummary) error {
			sum.Pages += s.Pages
			sum.Rows += s.Rows
			sum.Empty += s.Empty
			return nil
		})
		if err != nil {
			return err
		}
		v.Rows, v.Pages, v.EmptyPages = sum.Rows-sum.Empty, sum.Pages, sum.Empty
	}
	if rewrite && !direct {
		op := &jobs.Op{Title: "backfill copy " + v.ID, Inputs: []string{next}, InputTypes: []any{reflect.New(reflect.TypeOf(rowType)).Interface()},
			Outputs:  []jobs.Output{{Table: v.Table, RowType: rowType, SortedBy: []string{"page_key", "chunk_no"}}},
			ReduceBy: []string{"page_key"}, SortBy: []string{"page_key", "chunk_no"}, Tx: tx, Workers: opts.Workers,
			MemoryLimit: opts.MemoryLimit, Progress: opts.Progress, Logger: opts.Logger}
		if err := opts.Runner.Reduce(ctx, &CopyJob{Kind: v.Kind}, op); err != nil {
			return fmt.Errorf("complete %s: %w", v.ID, err)
		}
	}
	drop := append([]string{pendingTable(v.Table), summary, countsTable(v.Table)}, planTables(v.Table)...)
	if !direct {
		drop = append(drop, next)
	}
	for _, t := range drop {
		if _, err := tx.Table(ctx, t); err == nil {
			if err := tx.DropTable(ctx, t); err != nil {
				return err
			}
		}
	}
	return completeVersion(ctx, tx, v, pl, res)
}

// directCounts is what a first build's direct slices wrote (rows with
// the empty-page markers, pages, markers): an embedding version's are its
// chunk version's, one row per source row; a chunk version's are what the
// slices counted into the counts table (countedJob).
func directCounts(ctx context.Context, st pillar.Store, v *pillar.Version, pl *backfillPlan) (FinishSummary, error) {
	if c := pl.source; c != nil {
		return FinishSummary{Rows: c.Rows + c.EmptyPages, Pages: c.Pages, Empty: c.EmptyPages}, nil
	}
	var sum FinishSummary
	sn, err := st.Snapshot(ctx)
	if err != nil {
		return sum, err
	}
	defer sn.Release()
	err = eachRow(ctx, sn, countsTable(v.Table), false, func(c *FinishSummary) error {
		sum.Pages += c.Pages
		sum.Rows += c.Rows
		sum.Empty += c.Empty
		return nil
	})
	return sum, err
}

// completeVersion marks v complete in tx (as of the plan's source
// generation), commits tx and reports the counts.
func completeVersion(ctx context.Context, tx pillar.Tx, v *pillar.Version, pl *backfillPlan, res *Result) error {
	// The source as the plan saw it: a change made since is not in the
	// version, and makes the next run plan again (upToDate).
	v.SourceGeneration = pl.generation
	if v.State != pillar.StatePublished {
		v.State = pillar.StateComplete
	}
	if v.CompletedAt.IsZero() || res.PendingPages > 0 {
		v.CompletedAt = time.Now().UTC()
	}
	if err := pillar.SaveVersion(ctx, tx, v); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("complete %s: %w", v.ID, err)
	}
	res.Rows, res.Pages = v.Rows, v.Pages
	return nil
}
