package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"go.ytsaurus.tech/yt/go/mapreduce"

	"github.com/pillarkit/pillar/internal/record"
	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/pillar"
)

// The incremental reconcile (see "Watermark" in doc.go).

// AttrWatermark records which layers of the export inputs export/state
// reflects (Watermark). Only this package writes it, in the transaction
// that writes export/state or leaves it stale.
const AttrWatermark = "export/watermark"

// MaxIncrementalPages is the most changed pages an incremental reconcile
// takes on; more fall back to the full one. The driver holds their keys.
const MaxIncrementalPages = 1 << 16

// Watermark says what export/state reflects: the desired records of the
// published pair computed from these layers of the inputs. A reconcile
// against export/state then needs only the pages that appear in a layer
// written since (a delta or deletes layer of seq ≥ Next on the same base).
type Watermark struct {
	ChunkVersion string `json:"chunk_version"`
	Model        string `json:"model"`
	Encoding     string `json:"encoding"`
	Partitions   int    `json:"partitions"`
	// Members are the member tables of the exported subsets, sorted.
	Members []string `json:"members"`
	// Tables holds, per input table (docs, the chunk and embedding
	// tables, Members), the layers reflected.
	Tables map[string]LayerMark `json:"tables"`
	// State is export/state's next delta seq (pillar.LayerMeta.NextSeq; 0:
	// none) once the watermark's commit is applied: another delta of it
	// since makes the watermark void.
	State int64 `json:"state"`
}

// LayerMark is the layers of one table a Watermark reflects: every delta
// of seq < Next on the base of generation Base (-1: the table did not
// exist). A compaction or a rewrite replaces the base, and with it what a
// mark can tell: the watermark no longer applies to the table.
type LayerMark struct {
	Base int64 `json:"base"`
	Next int64 `json:"next"`
}

// exportInputs names the tables the desired records of pub are computed
// from, in ExportJob's input order.
func exportInputs(pub pillar.Published, members []string) []string {
	return append([]string{pillar.TableDocs, pillar.ChunksTable(pub.ChunkVersion), pillar.EmbeddingsTable(pub.ChunkVersion, pub.Model)}, members...)
}

// markOf returns the layers of t in sn as a LayerMark.
func markOf(ctx context.Context, sn pillar.Snapshot, t string) (LayerMark, error) {
	src, ok := sn.(pillar.LayerSource)
	if !ok {
		return LayerMark{}, fmt.Errorf("pipeline: snapshot %T does not support layered tables", sn)
	}
	base, ok := src.RawTable(t)
	if !ok {
		if pillar.LayersOf(src, t) != nil {
			return LayerMark{}, fmt.Errorf("table %q has delta layers but no base", t)
		}
		return LayerMark{Base: -1}, nil
	}
	m := LayerMark{Base: base.Generation}
	for _, l := range pillar.LayersOf(src, t) {
		m.Next = max(m.Next, l.Seq+1)
	}
	return m, nil
}

// newWatermark describes the inputs of pub's desired records in sn.
func newWatermark(ctx context.Context, sn pillar.Snapshot, pub pillar.Published, members []string, encoding string) (*Watermark, error) {
	w := &Watermark{ChunkVersion: pub.ChunkVersion, Model: pub.Model, Encoding: canonicalEncoding(encoding), Partitions: sn.Info().Partitions,
		Members: sortedCopy(members), Tables: map[string]LayerMark{}}
	for _, t := range exportInputs(pub, members) {
		m, err := markOf(ctx, sn, t)
		if err != nil {
			return nil, err
		}
		w.Tables[t] = m
	}
	return w, nil
}

// canonicalEncoding names a vector encoding the one way ("" and "f16"
// are "float16"): a publish computes records with the default, a bulk
// export with the one its flag names.
func canonicalEncoding(enc string) string {
	if e, err := record.ParseEncoding(enc); err == nil {
		return e.Short()
	}
	return enc
}

func sortedCopy(s []string) []string {
	out := append([]string{}, s...)
	sort.Strings(out)
	return out
}

// stateSeq is export/state's next delta seq in sn (0: it has none).
func stateSeq(ctx context.Context, sn pillar.Snapshot) (int64, error) {
	var meta pillar.LayerMeta
	err := sn.Attr(ctx, pillar.AttrLayerPrefix+TableExportState, &meta)
	if errors.Is(err, pillar.ErrNotFound) {
		return 0, nil
	}
	return meta.NextSeq, err
}

// newLayers returns the layers of the inputs of w's pair written since w,
// in sn, or why w does not apply there ("" when it does).
func newLayers(ctx context.Context, sn pillar.Snapshot, w *Watermark, pub pillar.Published, members []string, encoding string) ([]string, string, error) {
	switch {
	case w.ChunkVersion != pub.ChunkVersion || w.Model != pub.Model:
		return nil, "export/state reflects another pair", nil
	case w.Encoding != canonicalEncoding(encoding):
		return nil, "export/state reflects another encoding", nil
	case w.Partitions != sn.Info().Partitions:
		return nil, "the partition count changed", nil
	case !slices.Equal(w.Members, sortedCopy(members)):
		return nil, "the exported subsets changed", nil
	}
	seq, err := stateSeq(ctx, sn)
	if err != nil {
		return nil, "", err
	}
	if seq != w.State {
		return nil, "export/state changed since its watermark", nil
	}
	src := sn.(pillar.LayerSource)
	var out []string
	for _, t := range exportInputs(pub, members) {
		was, ok := w.Tables[t]
		if !ok {
			return nil, "the watermark does not name " + t, nil
		}
		now, err := markOf(ctx, sn, t)
		if err != nil {
			return nil, "", err
		}
		if now.Base != was.Base {
			return nil, t + " was rewritten or compacted since the watermark", nil
		}
		for _, l := range pillar.LayersOf(src, t) {
			if l.Kind != pillar.LayerBase && l.Seq >= was.Next {
				out = append(out, l.Table)
			}
		}
	}
	return out, "", nil
}

// changedKeys reads the page keys of layers (small tables: the deltas
// since a watermark), sorted and distinct; ok is false when there are more
// than MaxIncrementalPages.
func changedKeys(ctx context.Context, sn pillar.Snapshot, layers []string) (keys []string, ok bool, err error) {
	for _, l := range layers {
		ti, err := sn.Table(ctx, l)
		if err != nil {
			return nil, false, err
		}
		if int64(len(keys))+ti.Rows > 4*MaxIncrementalPages {
			return nil, false, nil
		}
		err = eachRow(ctx, sn, l, false, func(k *pillar.DeletedKey) error {
			if n := len(keys); n == 0 || keys[n-1] != k.PageKey {
				keys = append(keys, k.PageKey)
			}
			return nil
		})
		if err != nil {
			return nil, false, err
		}
	}
	sort.Strings(keys)
	keys = slices.Compact(keys)
	return keys, len(keys) <= MaxIncrementalPages, nil
}

// exportWork is what a reconcile commits: the desired records and their
// puts and deletes against export/state, committed scratch tables.
type exportWork struct {
	desired, skipped string
	// incremental: desired holds only the changed pages' records, and the
	// puts and deletes were computed against their rows of export/state.
	incremental bool
	changed     int   // pages looked at (incremental)
	desiredK    int64 // incremental: rows of desired
	stateK      int64 // incremental: rows of export/state among the changed pages
	// mark is the watermark export/state has once the work is applied (its
	// State is filled in at commit); nil: none.
	mark *Watermark
}

// memberSet names the exported member tables of an export computation.
type memberSet struct {
	// names are the member tables the watermark names (subsets/<name>).
	names []string
	// from are the tables the members are read from, index for index with
	// names; nil: names themselves. A recompute reads its new generations
	// from scratch tables before it writes them.
	from []string
	// changed are tables whose page keys changed besides those of the
	// deltas since the watermark (a recompute's membership deltas); a
	// missing one has none.
	changed []string
}

func (m memberSet) inputs() []string {
	if m.from != nil {
		return m.from
	}
	return m.names
}

// prepareExport computes the export work of pub over the exported members
// (the tables export/state's rows are relative to are stateFrom):
// incrementally — the records of the pages changed since export/state's
// watermark only — when allowed and the watermark applies, else in full.
// The scratch tables go under run.
//
// The watermark of the work names the member tables' layers as they are
// before the operation writes them: a later reconcile looks at the pages
// of the deltas written since, this operation's included, which is more
// than it must (their records are unchanged) but never less.
func prepareExport(ctx context.Context, st pillar.Store, opts Options, pub pillar.Published, members memberSet, run, stateFrom, encoding string, allowIncremental bool) (*exportWork, error) {
	if allowIncremental && stateFrom == TableExportState && !opts.FullReconcile {
		w, err := prepareIncremental(ctx, st, opts, pub, members, run, encoding)
		if err != nil || w != nil {
			return w, err
		}
	}
	w := &exportWork{desired: run + "/desired", skipped: run + "/skipped"}
	mark, err := computeDesired(ctx, st, opts, pub, members, w.desired, w.skipped, encoding)
	if err != nil {
		return nil, err
	}
	w.mark = mark
	if err := diffStateFrom(ctx, st, opts, w.desired, stateFrom); err != nil {
		return nil, err
	}
	return w, nil
}

// prepareIncremental is prepareExport's incremental path; nil work when
// the watermark does not apply (the reason is logged).
func prepareIncremental(ctx context.Context, st pillar.Store, opts Options, pub pillar.Published, members memberSet, run, encoding string) (*exportWork, error) {
	tx, err := st.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Abort()
	var wm Watermark
	if err := tx.Attr(ctx, AttrWatermark, &wm); errors.Is(err, pillar.ErrNotFound) {
		opts.Logger.Info("pipeline: full reconcile", "why", "export/state has no watermark")
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	layers, why, err := newLayers(ctx, tx, &wm, pub, members.names, encoding)
	if err != nil || why != "" {
		if why != "" {
			opts.Logger.Info("pipeline: full reconcile", "why", why)
		}
		return nil, err
	}
	for _, t := range members.changed {
		if _, err := tx.Table(ctx, t); err == nil {
			layers = append(layers, t)
		} else if !errors.Is(err, pillar.ErrNotFound) {
			return nil, err
		}
	}
	keys, ok, err := changedKeys(ctx, tx, layers)
	if err != nil {
		return nil, err
	}
	if !ok {
		opts.Logger.Info("pipeline: full reconcile", "why", fmt.Sprintf("more than %d pages changed since the watermark", MaxIncrementalPages))
		return nil, nil
	}
	mark, err := newWatermark(ctx, tx, pub, members.names, encoding)
	if err != nil {
		return nil, err
	}
	inputs := append(exportInputs(pub, members.inputs()), TableExportState)
	sel := make([]string, len(inputs))
	for i := range inputs {
		sel[i] = fmt.Sprintf("%s/changed/%d", run, i)
	}
	if err := selectChanged(ctx, tx, opts, keys, layers, inputs, sel); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	w := &exportWork{desired: run + "/desired", skipped: run + "/skipped", incremental: true, changed: len(keys), mark: mark}
	if err := runExport(ctx, st, opts, pub, sel[:len(sel)-1], len(members.names), w.desired, w.skipped, encoding); err != nil {
		return nil, err
	}
	if err := diffStateFrom(ctx, st, opts, w.desired, sel[len(sel)-1]); err != nil {
		return nil, err
	}
	sn, err := st.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	defer sn.Release()
	for _, c := range []struct {
		table string
		n     *int64
	}{{w.desired, &w.desiredK}, {sel[len(sel)-1], &w.stateK}} {
		ti, err := sn.Table(ctx, c.table)
		if err != nil {
			return nil, err
		}
		*c.n = ti.Rows
	}
	opts.Logger.Info("pipeline: incremental reconcile", "pages", len(keys), "layers", len(layers))
	return w, nil
}

// rowTypeOf is the row type of an export input or export/state.
func rowTypeOf(table string) any {
	switch {
	case table == pillar.TableDocs:
		return pillar.Doc{}
	case table == TableExportState:
		return ExportState{}
	case len(table) >= len(pillar.PrefixChunks) && table[:len(pillar.PrefixChunks)] == pillar.PrefixChunks:
		return pillar.Chunk{}
	case len(table) >= len(pillar.PrefixEmbed) && table[:len(pillar.PrefixEmbed)] == pillar.PrefixEmbed:
		return pillar.Embedding{}
	}
	return pillar.SubsetMember{}
}

// selectChanged writes to sel[i], inside tx, the rows of tables[i] whose
// page is one of keys (the keys of the tables layers), each sorted by
// page_key. On the local runner it reads them with pillar.ReadKeys in
// this process (a merge that scans only the selected rows); on another
// runner (YTsaurus) one SelectJob reduce does it on the cluster.
func selectChanged(ctx context.Context, tx pillar.Tx, opts Options, keys, layers, tables, sel []string) error {
	if _, local := opts.Runner.(*jobs.Local); local {
		for i, t := range tables {
			if err := copyKeys(ctx, tx, t, keys, sel[i]); err != nil {
				return fmt.Errorf("select the changed pages of %s: %w", t, err)
			}
		}
		return nil
	}
	job := &SelectJob{Keys: len(layers)}
	inputs := append([]string{}, layers...)
	types := make([]any, 0, len(layers))
	for range layers {
		types = append(types, &pageHead{})
	}
	var outs []jobs.Output
	for i, t := range tables {
		names, ls, err := pillar.LayerInputs(ctx, tx, t)
		if errors.Is(err, pillar.ErrNotFound) {
			names, ls = nil, nil
		} else if err != nil {
			return err
		}
		g := SelectGroup{Row: rowKind(rowTypeOf(t)), First: len(inputs)}
		for j, n := range names {
			inputs = append(inputs, n)
			g.Deletes = append(g.Deletes, ls[j].Kind == pillar.LayerDeletes)
			if ls[j].Kind == pillar.LayerDeletes {
				types = append(types, &pillar.DeletedKey{})
			} else {
				types = append(types, newRow(g.Row))
			}
		}
		job.Groups = append(job.Groups, g)
		outs = append(outs, jobs.Output{Table: sel[i], RowType: rowTypeOf(t), SortedBy: []string{"page_key"}, Scratch: true})
	}
	op := &jobs.Op{Title: "select changed pages", Inputs: inputs, InputTypes: types, Outputs: outs,
		ReduceBy: []string{"page_key"}, Tx: tx, Workers: opts.Workers, MemoryLimit: opts.MemoryLimit,
		Progress: opts.Progress, Logger: opts.Logger}
	if err := opts.Runner.Reduce(ctx, job, op); err != nil {
		return fmt.Errorf("select the changed pages: %w", err)
	}
	return nil
}

// copyKeys writes the rows of t whose page is one of keys to table to,
// inside tx (a missing t gives an empty table).
func copyKeys(ctx context.Context, tx pillar.Tx, t string, keys []string, to string) error {
	row := rowTypeOf(t)
	w, err := tx.WriteTable(ctx, to, row, &pillar.WriteOptions{SortedBy: []string{"page_key"}})
	if err != nil {
		return err
	}
	rr, err := pillar.ReadKeys(ctx, tx, t, keys)
	if errors.Is(err, pillar.ErrNotFound) {
		return w.Close()
	}
	if err != nil {
		w.Close()
		return err
	}
	defer rr.Close()
	kind := rowKind(row)
	for rr.Next() {
		v := newRow(kind)
		if err := rr.Scan(v); err != nil {
			w.Close()
			return err
		}
		if err := w.Write(v); err != nil {
			w.Close()
			return err
		}
	}
	if err := rr.Err(); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

// Row kinds of SelectJob.
const (
	rowDoc       = "doc"
	rowChunk     = "chunk"
	rowEmbedding = "embedding"
	rowMember    = "member"
	rowState     = "state"
)

func rowKind(row any) string {
	switch row.(type) {
	case pillar.Doc:
		return rowDoc
	case pillar.Chunk:
		return rowChunk
	case pillar.Embedding:
		return rowEmbedding
	case ExportState:
		return rowState
	}
	return rowMember
}

func newRow(kind string) any {
	switch kind {
	case rowDoc:
		return &pillar.Doc{}
	case rowChunk:
		return &pillar.Chunk{}
	case rowEmbedding:
		return &pillar.Embedding{}
	case rowState:
		return &ExportState{}
	}
	return &pillar.SubsetMember{}
}

func init() {
	jobs.Register("select-keys", "the keys of delta layers + the layers of tables, reduced by page_key → each table's resolved rows of those keys", &SelectJob{})
}

// SelectJob is a reducer over (grouped by page_key): inputs [0, Keys), the
// tables that name the selected keys (read for page_key only), then per
// group g the layers of one table, oldest first, as pillar.LayerInputs
// gives them (inputs [First, First+len(Deletes))). For every selected key
// it writes to output g the rows of the newest layer of g holding the key,
// unless that layer deletes it: the table's resolved rows of the key.
type SelectJob struct {
	Keys   int
	Groups []SelectGroup
}

// SelectGroup is one table of a SelectJob.
type SelectGroup struct {
	Row     string // row kind: doc, chunk, embedding, member, state
	First   int    // its first input
	Deletes []bool // per layer: a deletes layer
}

func (*SelectJob) InputTypes() []any  { return nil }
func (*SelectJob) OutputTypes() []any { return nil }

// Do implements mapreduce.Job.
func (j *SelectJob) Do(ctx mapreduce.JobContext, in mapreduce.Reader, out []mapreduce.Writer) error {
	best := make([]int, len(j.Groups))   // per group: the layer whose rows are held (-1 none)
	rows := make([][]any, len(j.Groups)) // its rows
	return mapreduce.GroupKeys(in, func(r mapreduce.Reader) error {
		selected := false
		for g := range best {
			best[g], rows[g] = -1, rows[g][:0]
		}
		for r.Next() {
			ti := r.TableIndex()
			if ti < j.Keys {
				selected = true
				continue
			}
			g := sort.Search(len(j.Groups), func(i int) bool { return j.Groups[i].First > ti }) - 1
			if g < 0 {
				return fmt.Errorf("select: input %d belongs to no group", ti)
			}
			grp := j.Groups[g]
			l := ti - grp.First
			if l < best[g] {
				continue // an older layer than the one held
			}
			if l > best[g] {
				best[g], rows[g] = l, rows[g][:0]
			}
			if grp.Deletes[l] {
				continue
			}
			v := newRow(grp.Row)
			if err := r.Scan(v); err != nil {
				return err
			}
			rows[g] = append(rows[g], v)
		}
		if !selected {
			return nil
		}
		for g := range j.Groups {
			for _, v := range rows[g] {
				if err := out[g].Write(v); err != nil {
					return err
				}
			}
		}
		return nil
	})
}
