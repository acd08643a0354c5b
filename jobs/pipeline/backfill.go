package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
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
	// Batch is the embedder batch size. The default value is 64.
	Batch int
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

// pageHashes reads page_key → content_hash of a table's rows (a missing
// table has none), and the bytes per page that a stage would read.
func pageHashes[T any](ctx context.Context, sn pillar.Snapshot, table string, get func(*T) (key, hash string, bytes int)) (map[string]string, map[string]int, error) {
	hashes := map[string]string{}
	sizes := map[string]int{}
	err := eachRow(ctx, sn, table, true, func(r *T) error {
		k, h, n := get(r)
		hashes[k] = h
		sizes[k] += n
		return nil
	})
	return hashes, sizes, err
}

// Projections of the row types: reading a table into one of these decodes
// only its columns, not the text or vectors the done-sets never look at.
type (
	docHead struct {
		PageKey     string `yson:"page_key" parquet:"page_key"`
		ContentHash string `yson:"content_hash" parquet:"content_hash"`
		TextLen     int64  `yson:"text_len" parquet:"text_len"`
	}
	chunkHead struct {
		PageKey     string `yson:"page_key" parquet:"page_key"`
		ContentHash string `yson:"content_hash" parquet:"content_hash"`
		Start       int32  `yson:"start" parquet:"start"`
		End         int32  `yson:"end" parquet:"end"`
	}
	embedHead struct {
		PageKey     string `yson:"page_key" parquet:"page_key"`
		ContentHash string `yson:"content_hash" parquet:"content_hash"`
	}
)

func docHashes(ctx context.Context, sn pillar.Snapshot) (map[string]string, map[string]int, error) {
	return pageHashes(ctx, sn, pillar.TableDocs, func(d *docHead) (string, string, int) {
		return d.PageKey, d.ContentHash, int(d.TextLen)
	})
}

func chunkHashes(ctx context.Context, sn pillar.Snapshot, table string) (map[string]string, map[string]int, error) {
	return versionHashes(ctx, sn, table, func(c *chunkHead) (string, string, int) {
		return c.PageKey, c.ContentHash, int(c.End - c.Start)
	})
}

// versionHashes is pageHashes over a version table and its pending rows
// (which are newer).
func versionHashes[T any](ctx context.Context, sn pillar.Snapshot, table string, get func(*T) (string, string, int)) (map[string]string, map[string]int, error) {
	h, sz, err := pageHashes(ctx, sn, table, get)
	if err != nil {
		return nil, nil, err
	}
	ph, psz, err := pageHashes(ctx, sn, pendingTable(table), get)
	if err != nil {
		return nil, nil, err
	}
	for k, v := range ph {
		h[k] = v
		sz[k] = psz[k]
	}
	return h, sz, nil
}

func embedHashes(ctx context.Context, sn pillar.Snapshot, table string) (map[string]string, map[string]int, error) {
	return versionHashes(ctx, sn, table, func(e *embedHead) (string, string, int) {
		return e.PageKey, e.ContentHash, 0
	})
}

// plan splits the pending keys (source hash differs from done) into key
// slices of at most n pages; it also returns the stale keys of done.
func plan(source, done map[string]string, n int) (pending []string, stale int, slices [][2]string) {
	for k, h := range source {
		if done[k] != h {
			pending = append(pending, k)
		}
	}
	for k, h := range done {
		if source[k] != h {
			stale++
		}
	}
	sort.Strings(pending)
	for i := 0; i < len(pending); i += n {
		lo := pending[i]
		hi := ""
		if i+n < len(pending) {
			hi = pending[i+n]
		}
		if i == 0 {
			lo = ""
		}
		slices = append(slices, [2]string{lo, hi})
	}
	return pending, stale, slices
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
	docs, docSizes, err := docHashes(ctx, sn)
	if err != nil {
		return nil, fmt.Errorf("rechunk %s: read docs: %w", cv, err)
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("rechunk %s: the docs table is empty or missing: run `pillar ingest` first", cv)
	}
	done, _, err := chunkHashes(ctx, sn, table)
	if err != nil {
		return nil, fmt.Errorf("rechunk %s: read %s: %w", cv, table, err)
	}
	pending, stale, slices := plan(docs, done, opts.SlicePages)
	res := &Result{Version: cv, Table: table, PendingPages: len(pending), StalePages: stale, DryRun: opts.DryRun}
	for _, k := range pending {
		res.ReadBytes += int64(docSizes[k])
	}
	res.WriteBytes = res.ReadBytes * 5 / 4 // text plus overlap and columns, roughly
	if opts.DryRun {
		res.Slices = len(slices)
		return res, nil
	}
	v, err := pillar.LoadVersion(ctx, sn, cv)
	if errors.Is(err, pillar.ErrNotFound) {
		v = &pillar.Version{ID: cv, Kind: pillar.KindChunks, Spec: ch.Spec(), Table: table, State: pillar.StateBuilding, CreatedAt: time.Now().UTC()}
	} else if err != nil {
		return nil, err
	}
	if len(pending) == 0 && stale == 0 && v.State != pillar.StateBuilding {
		res.Rows, res.Pages, res.Duration = v.Rows, v.Pages, time.Since(start).Round(time.Millisecond).String()
		return res, nil // up to date: commit nothing
	}
	return build(ctx, st, opts, v, res, start, slices, pillar.TableDocs, docs,
		func(lo, hi string) mapreduce.Job { return &RechunkJob{Spec: ch.Spec(), Done: done, Lo: lo, Hi: hi} },
		func(c *pillar.Chunk) (string, string, int32) { return c.PageKey, c.ContentHash, c.ChunkNo })
}

// Embed brings embedding version (cv, model spec) up to date with chunk
// version cv, which must exist and be complete.
func Embed(ctx context.Context, st pillar.Store, cv, modelSpec string, opts Options) (*Result, error) {
	opts.ensureDefaults(st)
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
	source, sizes, err := chunkHashes(ctx, sn, cver.Table)
	if err != nil {
		return nil, fmt.Errorf("embed %s: read %s: %w", id, cver.Table, err)
	}
	done, _, err := embedHashes(ctx, sn, table)
	if err != nil {
		return nil, fmt.Errorf("embed %s: read %s: %w", id, table, err)
	}
	pending, stale, slices := plan(source, done, opts.SlicePages)
	res := &Result{Version: id, Table: table, PendingPages: len(pending), StalePages: stale, DryRun: opts.DryRun}
	var chunks int64
	for _, k := range pending {
		res.ReadBytes += int64(sizes[k])
		chunks += int64(sizes[k]) / 2048
	}
	res.WriteBytes = int64(emb.Dims()) * 4 * max(chunks, int64(len(pending)))
	if opts.DryRun {
		res.Slices = len(slices)
		return res, nil
	}
	v, err := pillar.LoadVersion(ctx, sn, id)
	if errors.Is(err, pillar.ErrNotFound) {
		v = &pillar.Version{ID: id, Kind: pillar.KindEmbeddings, Spec: emb.Spec(), Table: table, ChunkVersion: cv,
			Model: model, Dims: emb.Dims(), State: pillar.StateBuilding, CreatedAt: time.Now().UTC()}
	} else if err != nil {
		return nil, err
	}
	if len(pending) == 0 && stale == 0 && v.State != pillar.StateBuilding {
		res.Rows, res.Pages, res.Duration = v.Rows, v.Pages, time.Since(start).Round(time.Millisecond).String()
		return res, nil // up to date: commit nothing
	}
	return build(ctx, st, opts, v, res, start, slices, cver.Table, source,
		func(lo, hi string) mapreduce.Job {
			return &EmbedJob{Spec: emb.Spec(), Done: done, Lo: lo, Hi: hi, Batch: opts.Batch}
		},
		func(e *pillar.Embedding) (string, string, int32) { return e.PageKey, e.ContentHash, e.ChunkNo })
}

// build runs a version's slices (each its own commit) into its pending
// table, then completes the version (finish).
func build[T any](ctx context.Context, st pillar.Store, opts Options, v *pillar.Version, res *Result, start time.Time,
	slices [][2]string, input string, source map[string]string,
	newJob func(lo, hi string) mapreduce.Job, get func(*T) (string, string, int32)) (*Result, error) {
	var zero T
	for i, sl := range slices {
		n, err := runSlice(ctx, st, opts, fmt.Sprintf("backfill %s %s slice %d/%d", v.Kind, v.ID, i+1, len(slices)), newJob(sl[0], sl[1]),
			[]string{input}, jobs.Output{Table: pendingTable(v.Table), RowType: zero, Append: true}, v)
		if err != nil {
			return res, err
		}
		res.Slices++
		res.RowsWritten += n
	}
	if err := finish(ctx, st, v, v.Table, get, source, res); err != nil {
		return res, err
	}
	res.Duration = time.Since(start).Round(time.Millisecond).String()
	return res, nil
}

// runSlice runs one slice's map into the version's table and commits it
// together with the registry entry (state building).
func runSlice(ctx context.Context, st pillar.Store, opts Options, title string, job mapreduce.Job, inputs []string, out jobs.Output, v *pillar.Version) (int64, error) {
	tx, err := st.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Abort()
	before := int64(0)
	if ti, err := tx.Table(ctx, out.Table); err == nil {
		before = ti.Rows
	}
	if err := opts.Runner.Map(ctx, job, opts.op(title, inputs, out, tx)); err != nil {
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

// finish compacts the version's table (drops rows whose content hash is not
// the source's current one, sorts by page key and number) and marks the
// version complete, in one transaction.
func finish[T any](ctx context.Context, st pillar.Store, v *pillar.Version, table string, get func(*T) (key, hash string, no int32), source map[string]string, res *Result) error {
	tx, err := st.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Abort()
	type item struct {
		key string
		no  int32
		row *T
	}
	var items []item
	dropped := 0
	for _, t := range []string{table, pendingTable(table)} {
		err := eachRow(ctx, tx, t, true, func(r *T) error {
			k, h, no := get(r)
			if source[k] != h {
				dropped++
				return nil
			}
			items = append(items, item{k, no, r})
			return nil
		})
		if err != nil {
			return err
		}
	}
	pages := map[string]bool{}
	var empty int64
	for _, it := range items {
		pages[it.key] = true
		if it.no < 0 {
			empty++
		}
	}
	_, perr := tx.Table(ctx, pendingTable(table))
	hasPending := perr == nil
	// Rewrite unless the table is already one sorted file with nothing to drop
	// or merge.
	rewrite := hasPending || dropped > 0
	if ti, err := tx.Table(ctx, table); err != nil || ti.Files > 1 || strings.Join(ti.SortedBy, ",") != "page_key,chunk_no" {
		rewrite = true
	}
	if hasPending {
		if err := tx.DropTable(ctx, pendingTable(table)); err != nil {
			return err
		}
	}
	if rewrite {
		sort.SliceStable(items, func(i, j int) bool {
			if items[i].key != items[j].key {
				return items[i].key < items[j].key
			}
			return items[i].no < items[j].no
		})
		rows := make([]T, len(items))
		for i, it := range items {
			rows[i] = *it.row
		}
		if err := writeRows(ctx, tx, table, rows, "page_key", "chunk_no"); err != nil {
			return err
		}
	}
	v.Rows = int64(len(items)) - empty
	v.Pages = int64(len(pages))
	v.EmptyPages = empty
	v.SourceGeneration = tx.Info().Generation
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
