package pipeline

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"sort"
	"strings"
	"time"

	"go.ytsaurus.tech/yt/go/mapreduce"

	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/subsets"
)

func init() {
	jobs.Register("subset-eval", "docs + signals, reduced by page_key → the policies each page satisfies (before top-K)", &SubsetEvalJob{})
	jobs.Register("subset-top", "policy matches, reduced by (subset, group) → the members each policy keeps (its top K per group)", &SubsetTopJob{})
	jobs.Register("subset-split", "members, reduced by (subset, page_key) → one member table per subset", &SubsetSplitJob{})
	jobs.Register("subset-diff", "old and new member tables, reduced by page_key → adds and removes per subset", &SubsetDiffJob{})
	jobs.Register("subset-copy", "member rows, reduced by page_key → the same rows (a member table's new contents)", &MemberCopyJob{})
}

// memberRow is a member of one subset, before it goes to the subset's table.
type memberRow struct {
	Subset  string  `yson:"subset" parquet:"subset"`
	PageKey string  `yson:"page_key" parquet:"page_key"`
	Score   float64 `yson:"score" parquet:"score"`
	Reason  string  `yson:"reason" parquet:"reason"`
}

// SubsetTopJob is a reducer over policy matches grouped by (subset, group):
// a policy without top keeps every match, one with top its best K of the
// group (subsets.TopK, O(K) memory). Output 0 gets memberRow rows.
type SubsetTopJob struct {
	Filename string
	Source   []byte
}

func (*SubsetTopJob) InputTypes() []any  { return []any{&subsets.Match{}} }
func (*SubsetTopJob) OutputTypes() []any { return []any{&memberRow{}} }

// Do implements mapreduce.Job.
func (j *SubsetTopJob) Do(ctx mapreduce.JobContext, in mapreduce.Reader, out []mapreduce.Writer) error {
	set, err := subsets.Parse(j.Filename, j.Source)
	if err != nil {
		return err
	}
	write := func(subset string, m pillar.SubsetMember) error {
		return out[0].Write(&memberRow{Subset: subset, PageKey: m.PageKey, Score: m.Score, Reason: m.Reason})
	}
	return mapreduce.GroupKeys(in, func(r mapreduce.Reader) error {
		var tk *subsets.TopK
		var subset string
		for r.Next() {
			var m subsets.Match
			if err := r.Scan(&m); err != nil {
				return err
			}
			subset = m.Subset
			if !set.HasTop(m.Subset) {
				if err := write(m.Subset, m.Member()); err != nil {
					return err
				}
				continue
			}
			if tk == nil {
				if tk, err = set.NewTopK(m.Subset); err != nil {
					return err
				}
			}
			tk.Push(m)
		}
		if tk == nil {
			return nil
		}
		for _, m := range tk.Members() {
			if err := write(subset, m); err != nil {
				return err
			}
		}
		return nil
	})
}

// SubsetSplitJob is a reducer over memberRow rows sorted by (subset,
// page_key): each goes to output i, the table of subset Names[i], so every
// output comes out sorted by page_key.
type SubsetSplitJob struct {
	Names []string
}

func (*SubsetSplitJob) InputTypes() []any  { return []any{&memberRow{}} }
func (*SubsetSplitJob) OutputTypes() []any { return nil }

// Do implements mapreduce.Job.
func (j *SubsetSplitJob) Do(ctx mapreduce.JobContext, in mapreduce.Reader, out []mapreduce.Writer) error {
	idx := make(map[string]int, len(j.Names))
	for i, n := range j.Names {
		idx[n] = i
	}
	for in.Next() {
		var m memberRow
		if err := in.Scan(&m); err != nil {
			return err
		}
		i, ok := idx[m.Subset]
		if !ok {
			return fmt.Errorf("subsets: member of unknown subset %q", m.Subset)
		}
		if err := out[i].Write(&pillar.SubsetMember{PageKey: m.PageKey, Score: m.Score, Reason: m.Reason}); err != nil {
			return err
		}
	}
	return nil
}

// SubsetDiffJob is a reducer over member tables grouped by page_key: input
// i is the old (Sides[i] = 2·s) or new (2·s+1) generation of subset
// Names[s]. Each job writes one DiffCount per subset to output 0, and to
// output 1 one MemberChange per subset and page whose membership changed
// from old to new (entered, left, or stayed with another row): the
// membership delta and its undo of every subset in one table, sorted by
// page_key. (One table per subset and kind made an operation of ten
// outputs per worker, whose row groups filled only at a large N.)
type SubsetDiffJob struct {
	Names []string
	Sides []int
}

// DiffCount is the number of pages that entered and left one subset (a
// SubsetDiffJob's summary); Changed counts the members that stayed with
// another row.
type DiffCount struct {
	Subset  string `yson:"subset" parquet:"subset"`
	Adds    int64  `yson:"adds" parquet:"adds"`
	Removes int64  `yson:"removes" parquet:"removes"`
	Changed int64  `yson:"changed" parquet:"changed"`
}

// MemberChange is a row of a recompute's membership delta
// (SubsetDiffJob's output 1): page PageKey entered subset Subset (Put, not
// Was), left it (not Put, Was) or stayed with another row (Put, Was). Score
// and Reason are the new row (Put), OldScore and OldReason the old one
// (Was): the delta of the member table is the rows put and the keys
// deleted, its undo the old rows and an absent marker for each page that
// entered.
type MemberChange struct {
	PageKey   string  `yson:"page_key" parquet:"page_key"`
	Subset    string  `yson:"subset" parquet:"subset"`
	Put       bool    `yson:"put" parquet:"put"`
	Score     float64 `yson:"score" parquet:"score"`
	Reason    string  `yson:"reason" parquet:"reason"`
	Was       bool    `yson:"was" parquet:"was"`
	OldScore  float64 `yson:"old_score" parquet:"old_score"`
	OldReason string  `yson:"old_reason" parquet:"old_reason"`
}

// member is the change's new row (Put).
func (c *MemberChange) member() *pillar.SubsetMember {
	return &pillar.SubsetMember{PageKey: c.PageKey, Score: c.Score, Reason: c.Reason}
}

// undo is the change's undo row: the old row, or absent for a page that
// entered.
func (c *MemberChange) undo() *MemberUndo {
	if !c.Was {
		return &MemberUndo{PageKey: c.PageKey, Absent: true}
	}
	return &MemberUndo{PageKey: c.PageKey, Score: c.OldScore, Reason: c.OldReason}
}

func (*SubsetDiffJob) InputTypes() []any  { return []any{&pillar.SubsetMember{}} }
func (*SubsetDiffJob) OutputTypes() []any { return []any{&DiffCount{}, &MemberChange{}} }

// pageHead projects a row on its page key.
type pageHead struct {
	PageKey string `yson:"page_key" parquet:"page_key"`
}

// Do implements mapreduce.Job.
func (j *SubsetDiffJob) Do(ctx mapreduce.JobContext, in mapreduce.Reader, out []mapreduce.Writer) error {
	counts := make([]DiffCount, len(j.Names))
	for i, n := range j.Names {
		counts[i].Subset = n
	}
	type side struct {
		row pillar.SubsetMember
		ok  bool
	}
	old := make([]side, len(j.Names))
	cur := make([]side, len(j.Names))
	var ch MemberChange
	err := mapreduce.GroupKeys(in, func(r mapreduce.Reader) error {
		clear(old)
		clear(cur)
		for r.Next() {
			var m pillar.SubsetMember
			if err := r.Scan(&m); err != nil {
				return err
			}
			sd := j.Sides[r.TableIndex()]
			if sd%2 == 0 {
				old[sd/2] = side{m, true}
			} else {
				cur[sd/2] = side{m, true}
			}
		}
		for i, name := range j.Names {
			o, c := old[i], cur[i]
			switch {
			case c.ok && !o.ok:
				counts[i].Adds++
			case o.ok && !c.ok:
				counts[i].Removes++
			case c.ok && o.row != c.row:
				counts[i].Changed++
			default:
				continue // not a member, or the same row
			}
			ch = MemberChange{PageKey: cmp.Or(c.row.PageKey, o.row.PageKey), Subset: name,
				Put: c.ok, Score: c.row.Score, Reason: c.row.Reason,
				Was: o.ok, OldScore: o.row.Score, OldReason: o.row.Reason}
			if err := out[1].Write(&ch); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := range counts {
		if err := out[0].Write(&counts[i]); err != nil {
			return err
		}
	}
	return nil
}

// MemberUndo is a row of a generation's undo table (a history table of
// SubsetGen.Undo): with the next generation's member table it gives this
// generation's members — the row of each page that left or changed in the
// next recompute, Absent for each page that entered in it.
type MemberUndo struct {
	PageKey string  `yson:"page_key" parquet:"page_key"`
	Score   float64 `yson:"score" parquet:"score"`
	Reason  string  `yson:"reason" parquet:"reason"`
	Absent  bool    `yson:"absent" parquet:"absent"`
}

// MemberCopyJob copies member rows to output 0.
type MemberCopyJob struct{}

func (*MemberCopyJob) InputTypes() []any  { return []any{&pillar.SubsetMember{}} }
func (*MemberCopyJob) OutputTypes() []any { return []any{&pillar.SubsetMember{}} }

// Do implements mapreduce.Job.
func (*MemberCopyJob) Do(ctx mapreduce.JobContext, in mapreduce.Reader, out []mapreduce.Writer) error {
	for in.Next() {
		var m pillar.SubsetMember
		if err := in.Scan(&m); err != nil {
			return err
		}
		if err := out[0].Write(&m); err != nil {
			return err
		}
	}
	return nil
}

// SubsetEvalJob is a reducer over (grouped by page_key) input 0 docs and
// input 1 signals: it evaluates every policy of the file at AsOf and writes
// a subsets.Match per satisfied policy. The policy file travels as source so
// the job can run in another process.
type SubsetEvalJob struct {
	Filename string
	Source   []byte
	AsOfMS   int64
}

func (*SubsetEvalJob) InputTypes() []any  { return []any{&pillar.Doc{}, &pillar.Signal{}} }
func (*SubsetEvalJob) OutputTypes() []any { return []any{&subsets.Match{}} }

// Do implements mapreduce.Job.
func (j *SubsetEvalJob) Do(ctx mapreduce.JobContext, in mapreduce.Reader, out []mapreduce.Writer) error {
	set, err := subsets.Parse(j.Filename, j.Source)
	if err != nil {
		return err
	}
	asOf := time.UnixMilli(j.AsOfMS)
	var buf []subsets.Match
	return mapreduce.GroupKeys(in, func(r mapreduce.Reader) error {
		var doc *pillar.Doc
		var sigs []pillar.Signal
		for r.Next() {
			if r.TableIndex() == 0 {
				var d pillar.Doc
				if err := r.Scan(&d); err != nil {
					return err
				}
				doc = &d
				continue
			}
			var s pillar.Signal
			if err := r.Scan(&s); err != nil {
				return err
			}
			sigs = append(sigs, s)
		}
		if doc == nil {
			return nil // signals of a page that is not in docs
		}
		p, err := subsets.NewPage(doc, sigs)
		if err != nil {
			return fmt.Errorf("subsets: page %s: %w", doc.PageKey, err)
		}
		buf = set.AppendEval(buf[:0], &p, asOf)
		for i := range buf {
			if err := out[0].Write(&buf[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// RecomputeResult reports a subset recompute.
type RecomputeResult struct {
	RunID    string          `json:"run_id"`
	AsOf     time.Time       `json:"as_of"`
	Skipped  bool            `json:"skipped"` // the same inputs were already processed
	Subsets  []SubsetSummary `json:"subsets"`
	Export   *ExportPlan     `json:"export,omitempty"`
	Duration string          `json:"duration"`
	Docs     int64           `json:"docs"`
	// DryRun: nothing was evaluated or written; ReadBytes is what a run
	// would read.
	DryRun    bool  `json:"dry_run,omitempty"`
	ReadBytes int64 `json:"read_bytes,omitempty"`
}

// SubsetSummary is one subset's outcome.
type SubsetSummary struct {
	Name       string `json:"name"`
	Exported   bool   `json:"exported"`
	Generation int64  `json:"generation"`
	Size       int    `json:"size"`
	Adds       int    `json:"adds"`
	Removes    int    `json:"removes"`
}

func historyTable(name string, gen int64) string {
	return fmt.Sprintf("subsets-history/%s/g%06d", name, gen)
}

// Recompute evaluates every policy over docs (and signals) at asOf in one
// pass, writes each subset's new generation, and — in one transaction with
// them — the export work (puts for pages that enter an exported subset or
// whose record changed, deletes for pages that left every exported subset),
// and marks the run consumed. A re-run with the same inputs and asOf does
// nothing. It refuses while another pipeline operation (publish, export)
// holds the store.
func Recompute(ctx context.Context, st pillar.Store, set *subsets.Set, asOf time.Time, opts Options) (*RecomputeResult, error) {
	opts.ensureDefaults(st)
	start := time.Now()
	sn, err := st.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	docsInfo, err := sn.Table(ctx, pillar.TableDocs)
	if err != nil {
		sn.Release()
		return nil, fmt.Errorf("subsets recompute: %w (run `pillar ingest` first)", err)
	}
	sigGen := int64(0)
	if ti, err := sn.Table(ctx, pillar.TableSignals); err == nil {
		sigGen = ti.Generation
	}
	pub, _ := pillar.LoadPublished(ctx, sn)
	h := sha256.New()
	fmt.Fprintf(h, "%d\x00%d\x00%d\x00", docsInfo.Generation, sigGen, asOf.UnixMilli())
	for _, n := range set.Names() {
		fmt.Fprintf(h, "%s=%s\x00", n, set.Fingerprint(n))
	}
	if pub != nil {
		fmt.Fprintf(h, "%s/%s", pub.ChunkVersion, pub.Model)
	}
	runID := "subsets:" + hex.EncodeToString(h.Sum(nil)[:12])
	res := &RecomputeResult{RunID: runID, AsOf: asOf.UTC(), Docs: docsInfo.Rows}
	done, err := sn.Consumed(ctx, runID)
	sn.Release()
	if err != nil {
		return nil, err
	}
	if done {
		res.Skipped = true
		res.Duration = time.Since(start).Round(time.Millisecond).String()
		return res, nil
	}
	if opts.DryRun {
		res.DryRun = true
		sn, err := st.Snapshot(ctx)
		if err != nil {
			return nil, err
		}
		res.ReadBytes = tableBytes(ctx, sn, pillar.TableDocs, pillar.TableSignals)
		if pub != nil {
			res.ReadBytes += tableBytes(ctx, sn, pillar.ChunksTable(pub.ChunkVersion), pillar.EmbeddingsTable(pub.ChunkVersion, pub.Model), TableExportState)
		}
		sn.Release()
		for _, n := range set.Names() {
			res.Subsets = append(res.Subsets, SubsetSummary{Name: n, Exported: set.Exported(n)})
		}
		return res, nil
	}
	lk, err := acquire(ctx, st, "subsets recompute")
	if err != nil {
		return nil, err
	}
	defer lk.abandon()
	// reconcile writes export/state as a delta, and the member tables are
	// written as deltas of their changes.
	layered := []string{TableExportState}
	for _, name := range set.Names() {
		layered = append(layered, pillar.SubsetTable(name))
	}
	lk.after = func() { compactLayered(ctx, st, opts, layered...) }
	scratch := fmt.Sprintf("tmp/recompute-%d", time.Now().UnixNano())
	matchesTable := scratch + "/matches"

	// Pass 1: evaluate every policy (a reduce of docs and signals by page).
	tx, err := st.Begin(ctx)
	if err != nil {
		return nil, err
	}
	inputs := []string{pillar.TableDocs}
	types := []any{&pillar.Doc{}}
	if sigGen > 0 {
		inputs = append(inputs, pillar.TableSignals)
		types = append(types, &pillar.Signal{})
	}
	op := &jobs.Op{Title: "subsets eval", Inputs: inputs, InputTypes: types,
		Outputs: []jobs.Output{{Table: matchesTable, RowType: subsets.Match{}, Scratch: true}}, ReduceBy: []string{"page_key"},
		Tx: tx, Workers: opts.Workers, MemoryLimit: opts.MemoryLimit, Progress: opts.Progress, Logger: opts.Logger}
	job := &SubsetEvalJob{Filename: set.Filename(), Source: set.Source(), AsOfMS: asOf.UnixMilli()}
	if err := opts.Runner.Reduce(ctx, job, op); err != nil {
		tx.Abort()
		return nil, fmt.Errorf("subsets recompute: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}

	// Top-K and membership, per subset: two reduces on the runner (by
	// subset and group, then by subset and page) into one scratch table per
	// subset, committed; then the enter/leave counts against the current
	// generations, a third reduce. The driver holds counts only.
	names := set.Names()
	newTable := func(name string) string { return scratch + "/members/" + name }
	sizes, diffs, err := computeMembers(ctx, st, opts, set, matchesTable, scratch, newTable)
	if err != nil {
		return nil, fmt.Errorf("subsets recompute: %w", err)
	}

	// Pass 2 (when something is published): the records of the new exported
	// membership.
	// Incrementally when export/state's watermark applies: the pages whose
	// membership changed (the membership deltas) and those changed since.
	var work *exportWork
	if pub != nil {
		var members memberSet
		for _, name := range names {
			if set.Exported(name) {
				members.names = append(members.names, pillar.SubsetTable(name))
				members.from = append(members.from, newTable(name))
			}
		}
		if len(members.names) > 0 {
			// The pages of every subset's change: more than the exported
			// subsets' (never less), and as many as changed.
			members.changed = []string{memberChanges(scratch)}
		}
		var err error
		if work, err = prepareExport(ctx, st, opts, *pub, members, scratch, TableExportState, opts.encoding(), true); err != nil {
			return nil, fmt.Errorf("subsets recompute: %w", err)
		}
	}

	// The one transaction: generations, history, export work, consumed mark.
	tx, err = st.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Abort()
	now := time.Now().UTC()
	defined := map[string]bool{}
	for _, name := range set.Names() {
		defined[name] = true
		var meta SubsetMeta
		err := tx.Attr(ctx, AttrSubsetPrefix+name, &meta)
		if err != nil && !errors.Is(err, pillar.ErrNotFound) {
			return nil, err
		}
		adds, removes := int(diffs[name].Adds), int(diffs[name].Removes)
		size := sizes[name]
		gen := meta.Generation + 1
		// Keep the previous generation in history (its own table: the undo
		// of this recompute's change), drop generations beyond the
		// policy's history.
		keep := max(set.History(name), 1)
		hist := append([]SubsetGen(nil), meta.History...)
		hist = append(hist, SubsetGen{Generation: gen, Table: pillar.SubsetTable(name), Size: size,
			Adds: int64(adds), Removes: int64(removes), AsOf: asOf.UTC(), At: now, Exported: set.Exported(name)})
		for i := range hist[:len(hist)-1] {
			hist[i].Table = historyTable(name, hist[i].Generation)
		}
		for len(hist) > keep {
			if _, err := tx.Table(ctx, hist[0].Table); err == nil {
				if err := tx.DropTable(ctx, hist[0].Table); err != nil {
					return nil, err
				}
			}
			hist = hist[1:]
		}
		if meta.Generation > 0 && len(hist) >= 2 {
			// The generation replaced is kept as the undo of this
			// recompute's change (O(changes)), not a copy of its members.
			if err := writeUndo(ctx, tx, memberChanges(scratch), name, historyTable(name, meta.Generation)); err != nil {
				return nil, err
			}
			hist[len(hist)-2].Undo = true
		}
		if _, err := writeMembers(ctx, tx, opts, newTable(name), memberChanges(scratch), name, size, diffs[name]); err != nil {
			return nil, err
		}
		meta = SubsetMeta{Name: name, Exported: set.Exported(name), Table: pillar.SubsetTable(name), Generation: gen,
			Size: size, AsOf: asOf.UTC(), Fingerprint: set.Fingerprint(name), History: hist}
		if err := tx.SetAttr(ctx, AttrSubsetPrefix+name, meta); err != nil {
			return nil, err
		}
		res.Subsets = append(res.Subsets, SubsetSummary{Name: name, Exported: meta.Exported, Generation: gen, Size: int(size), Adds: adds, Removes: removes})
	}
	// Subsets the file no longer defines stop being exported.
	attrs, err := tx.Attrs(ctx)
	if err != nil {
		return nil, err
	}
	for a := range attrs {
		if name, ok := strings.CutPrefix(a, AttrSubsetPrefix); ok && !defined[name] {
			var meta SubsetMeta
			if err := tx.Attr(ctx, a, &meta); err == nil && meta.Exported {
				meta.Exported = false
				if err := tx.SetAttr(ctx, a, meta); err != nil {
					return nil, err
				}
				res.Subsets = append(res.Subsets, SubsetSummary{Name: name, Generation: meta.Generation, Size: int(meta.Size)})
			}
		}
	}
	sort.Slice(res.Subsets, func(i, j int) bool { return res.Subsets[i].Name < res.Subsets[j].Name })
	if pub != nil {
		plan, err := reconcile(ctx, st, tx, opts, work, "subsets recompute "+asOf.UTC().Format(time.RFC3339), pillar.PriorityFresh, *pub)
		if err != nil {
			return nil, err
		}
		res.Export = plan
	}
	if err := tx.MarkConsumed(ctx, runID); err != nil {
		return nil, err
	}
	if err := lk.commit(tx); err != nil {
		return nil, fmt.Errorf("subsets recompute: commit: %w", err)
	}
	res.Duration = time.Since(start).Round(time.Millisecond).String()
	return res, nil
}

// computeMembers turns the committed matches into one scratch member table
// per subset (newTable(name)), sorted by page_key, committed on their own,
// and returns each subset's size and its enter/leave counts against its
// current generation.
func computeMembers(ctx context.Context, st pillar.Store, opts Options, set *subsets.Set, matches, scratch string, newTable func(string) string) (map[string]int64, map[string]DiffCount, error) {
	names := set.Names()
	selected := scratch + "/selected"
	tx, err := st.Begin(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer tx.Abort()
	base := jobs.Op{Tx: tx, Workers: opts.Workers, MemoryLimit: opts.MemoryLimit, Progress: opts.Progress, Logger: opts.Logger}
	top := base
	top.Title, top.Inputs = "subsets top-k", []string{matches}
	top.Outputs = []jobs.Output{{Table: selected, RowType: memberRow{}, Scratch: true}}
	top.ReduceBy = []string{"subset", "group"}
	if err := opts.Runner.Reduce(ctx, &SubsetTopJob{Filename: set.Filename(), Source: set.Source()}, &top); err != nil {
		return nil, nil, err
	}
	// No page matched any policy: the reduce had no rows; the runner still
	// creates its (empty) output, which the split below reads.
	if err := tx.Commit(ctx); err != nil {
		return nil, nil, err
	}
	if tx, err = st.Begin(ctx); err != nil {
		return nil, nil, err
	}
	defer tx.Abort()
	split := base
	split.Tx = tx
	split.Title, split.Inputs = "subsets members", []string{selected}
	for _, n := range names {
		split.Outputs = append(split.Outputs, jobs.Output{Table: newTable(n), RowType: pillar.SubsetMember{}, SortedBy: []string{"page_key"}, Scratch: true})
	}
	split.ReduceBy = []string{"subset", "page_key"}
	if err := opts.Runner.Reduce(ctx, &SubsetSplitJob{Names: names}, &split); err != nil {
		return nil, nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, nil, err
	}
	// A subset with no members may have no table yet: give it an empty one.
	if tx, err = st.Begin(ctx); err != nil {
		return nil, nil, err
	}
	defer tx.Abort()
	sizes := map[string]int64{}
	var inputs []string
	var sides []int
	created := false
	for i, n := range names {
		ti, err := tx.Table(ctx, newTable(n))
		switch {
		case errors.Is(err, pillar.ErrNotFound):
			if err := writeRows[pillar.SubsetMember](ctx, tx, newTable(n), nil, "page_key"); err != nil {
				return nil, nil, err
			}
			created = true
		case err != nil:
			return nil, nil, err
		default:
			sizes[n] = ti.Rows
			inputs, sides = append(inputs, newTable(n)), append(sides, 2*i+1)
		}
		if _, err := tx.Table(ctx, pillar.SubsetTable(n)); err == nil {
			inputs, sides = append(inputs, pillar.SubsetTable(n)), append(sides, 2*i)
		}
	}
	if created {
		if err := tx.Commit(ctx); err != nil {
			return nil, nil, err
		}
	}
	diffs := map[string]DiffCount{}
	if len(inputs) == 0 {
		return sizes, diffs, nil
	}
	counts := scratch + "/diff-counts"
	if tx, err = st.Begin(ctx); err != nil {
		return nil, nil, err
	}
	defer tx.Abort()
	diff := base
	diff.Tx = tx
	diff.Title, diff.Inputs = "subsets diff", inputs
	diff.Outputs = []jobs.Output{{Table: counts, RowType: DiffCount{}, Scratch: true},
		{Table: memberChanges(scratch), RowType: MemberChange{}, SortedBy: []string{"page_key"}, Scratch: true}}
	diff.ReduceBy = []string{"page_key"}
	if err := opts.Runner.Reduce(ctx, &SubsetDiffJob{Names: names, Sides: sides}, &diff); err != nil {
		return nil, nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, nil, err
	}
	sn, err := st.Snapshot(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer sn.Release()
	err = eachRow(ctx, sn, counts, true, func(c *DiffCount) error {
		d := diffs[c.Subset]
		d.Subset, d.Adds, d.Removes, d.Changed = c.Subset, d.Adds+c.Adds, d.Removes+c.Removes, d.Changed+c.Changed
		diffs[c.Subset] = d
		return nil
	})
	return sizes, diffs, err
}

// minMemberRewrite: a member table takes its changes as a delta unless they
// are more than half of max(its rows, minMemberRewrite); a small table's
// deltas are folded by compaction.
const minMemberRewrite = 1024

// memberChanges names the scratch table of a recompute's membership
// changes (MemberChange rows of every subset, SubsetDiffJob).
func memberChanges(scratch string) string { return scratch + "/delta/changes" }

// eachChange calls fn with the rows of the scratch table changes (sorted
// by page_key) that are subset name's; a missing table has none.
func eachChange(ctx context.Context, sn pillar.Snapshot, changes, name string, fn func(*MemberChange) error) error {
	return eachRow(ctx, sn, changes, true, func(c *MemberChange) error {
		if c.Subset != name {
			return nil
		}
		return fn(c)
	})
}

// writeUndo makes table the undo of subset name's change, from the
// committed scratch table changes, inside tx (streamed: the change, not
// the members; a missing changes table gives an empty table).
func writeUndo(ctx context.Context, tx pillar.Tx, changes, name, table string) error {
	w, err := tx.WriteTable(ctx, table, MemberUndo{}, &pillar.WriteOptions{SortedBy: []string{"page_key"}})
	if err != nil {
		return err
	}
	if err := eachChange(ctx, tx, changes, name, func(c *MemberChange) error { return w.Write(c.undo()) }); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

// writeMembers makes the member table of subset name the committed scratch
// table from, inside tx: as a delta of subset name's rows of the committed
// scratch table changes when the table exists and the change is at most
// half of its new rows or of minMemberRewrite (delta reports it; nothing is
// written when nothing changed), else rewritten whole.
func writeMembers(ctx context.Context, tx pillar.Tx, opts Options, from, changes, name string, size int64, d DiffCount) (delta bool, err error) {
	to := pillar.SubsetTable(name)
	n := d.Adds + d.Removes + d.Changed
	_, errOld := tx.Table(ctx, to)
	_, errChanges := tx.Table(ctx, changes)
	if errOld != nil || errChanges != nil || 2*n > max(size, minMemberRewrite) {
		return false, copyMembers(ctx, tx, opts, from, to)
	}
	if n == 0 {
		return true, nil // the same members: the table stays as it is
	}
	dw, err := pillar.WriteDelta(ctx, tx, to, pillar.SubsetMember{}, size)
	if err != nil {
		return false, err
	}
	defer dw.Close()
	err = eachChange(ctx, tx, changes, name, func(c *MemberChange) error {
		if !c.Put {
			return nil
		}
		return dw.Put(c.member())
	})
	if err != nil {
		return false, err
	}
	err = eachChange(ctx, tx, changes, name, func(c *MemberChange) error {
		if c.Put {
			return nil
		}
		return dw.Delete(ctx, c.PageKey)
	})
	if err != nil {
		return false, err
	}
	return true, dw.Close()
}

// copyMembers replaces the member table to with the rows of from, inside
// tx: a reduce on the runner, sorted by page_key.
func copyMembers(ctx context.Context, tx pillar.Tx, opts Options, from, to string) error {
	// An empty or missing source: an empty target (an operation without
	// input rows may write no output table).
	if ti, err := tx.Table(ctx, from); errors.Is(err, pillar.ErrNotFound) || (err == nil && ti.Rows == 0) {
		return writeRows[pillar.SubsetMember](ctx, tx, to, nil, "page_key")
	}
	op := &jobs.Op{Title: "subsets copy " + to, Inputs: []string{from},
		Outputs:  []jobs.Output{{Table: to, RowType: pillar.SubsetMember{}, SortedBy: []string{"page_key"}}},
		ReduceBy: []string{"page_key"}, Tx: tx, Workers: opts.Workers, MemoryLimit: opts.MemoryLimit,
		Progress: opts.Progress, Logger: opts.Logger}
	if err := opts.Runner.Reduce(ctx, &MemberCopyJob{}, op); err != nil {
		return fmt.Errorf("write %s: %w", to, err)
	}
	return nil
}

// SubsetInfo is what `subsets show` prints.
func SubsetInfo(ctx context.Context, sn pillar.Snapshot) ([]SubsetMeta, error) {
	attrs, err := sn.Attrs(ctx)
	if err != nil {
		return nil, err
	}
	var out []SubsetMeta
	for a := range attrs {
		if !strings.HasPrefix(a, AttrSubsetPrefix) {
			continue
		}
		var m SubsetMeta
		if err := sn.Attr(ctx, a, &m); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// EachSubsetChange calls fn with each change of a subset's last recompute
// (its current generation against the one before), in page-key order, Stay
// included: a merge join of the two sorted member tables (subsets.DiffSeq)
// that holds no generation in memory. A missing table is an empty
// generation. It stops at the first error, fn's included.
func EachSubsetChange(ctx context.Context, sn pillar.Snapshot, name string, fn func(subsets.Change) error) (*SubsetMeta, error) {
	var meta SubsetMeta
	if err := sn.Attr(ctx, AttrSubsetPrefix+name, &meta); err != nil {
		if errors.Is(err, pillar.ErrNotFound) {
			return nil, fmt.Errorf("subsets diff: unknown subset %q (see `pillar subsets show`): %w", name, subsets.ErrUnknownSubset)
		}
		return nil, err
	}
	cur, curErr, err := openMembers(ctx, sn, meta.Table)
	if err != nil {
		return nil, err
	}
	defer cur.Close()
	old, oldErr := noMembers()
	if len(meta.History) >= 2 {
		prev := meta.History[len(meta.History)-2]
		if prev.Undo {
			old, oldErr, err = openUndone(ctx, sn, meta.Table, prev.Table)
		} else {
			old, oldErr, err = openMembers(ctx, sn, prev.Table)
		}
		if err != nil {
			return nil, err
		}
		defer old.Close()
	}
	for ch, err := range subsets.DiffSeq(name, old.seq, cur.seq) {
		// A read error ends its side early: check before fn sees a change
		// that only the truncation made.
		if err == nil {
			err = errors.Join(oldErr(), curErr())
		}
		if err == nil {
			err = fn(ch)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := errors.Join(oldErr(), curErr()); err != nil {
		return nil, err
	}
	return &meta, nil
}

// memberReader is an open member table as a sequence (rr nil: empty).
type memberReader struct {
	rr  pillar.RowReader
	seq iter.Seq[pillar.SubsetMember]
	// also are closed with it (openUndone's readers).
	also []*memberReader
}

func (m *memberReader) Close() {
	if m.rr != nil {
		m.rr.Close()
	}
	for _, a := range m.also {
		a.Close()
	}
}

// openUndone opens the members of the generation before the current one
// (table), kept as the undo table undo: the current members with each
// undo row's page replaced by its old row, or left out when it is marked
// absent. Both tables are sorted by page_key; the merge holds one row of
// each.
func openUndone(ctx context.Context, sn pillar.Snapshot, table, undo string) (m *memberReader, errFn func() error, err error) {
	cur, curErr, err := openMembers(ctx, sn, table)
	if err != nil {
		return nil, nil, err
	}
	rr, err := sn.ReadTable(ctx, undo, nil)
	if err != nil {
		cur.Close()
		return nil, nil, err
	}
	var undoErr error
	undos := func(yield func(MemberUndo) bool) {
		for rr.Next() {
			var u MemberUndo
			if err := rr.Scan(&u); err != nil {
				undoErr = fmt.Errorf("subsets: read %s: %w", undo, err)
				return
			}
			if !yield(u) {
				return
			}
		}
		undoErr = rr.Err()
	}
	seq := func(yield func(pillar.SubsetMember) bool) {
		nextCur, stopCur := iter.Pull(cur.seq)
		defer stopCur()
		nextUndo, stopUndo := iter.Pull(iter.Seq[MemberUndo](undos))
		defer stopUndo()
		c, cok := nextCur()
		u, uok := nextUndo()
		for cok || uok {
			switch {
			case uok && (!cok || u.PageKey <= c.PageKey):
				if cok && c.PageKey == u.PageKey {
					c, cok = nextCur()
				}
				if !u.Absent && !yield(pillar.SubsetMember{PageKey: u.PageKey, Score: u.Score, Reason: u.Reason}) {
					return
				}
				u, uok = nextUndo()
			default:
				if !yield(c) {
					return
				}
				c, cok = nextCur()
			}
		}
	}
	m = &memberReader{rr: rr, seq: seq, also: []*memberReader{cur}}
	return m, func() error { return errors.Join(curErr(), undoErr) }, nil
}

func noMembers() (*memberReader, func() error) {
	return &memberReader{seq: func(func(pillar.SubsetMember) bool) {}}, func() error { return nil }
}

// openMembers opens a subsets/<name> table (sorted by page_key) for
// subsets.DiffSeq; a missing table reads as empty. errFn reports a read
// error that ended the sequence early.
func openMembers(ctx context.Context, sn pillar.Snapshot, table string) (m *memberReader, errFn func() error, err error) {
	rr, err := sn.ReadTable(ctx, table, nil)
	if errors.Is(err, pillar.ErrNotFound) {
		m, errFn := noMembers()
		return m, errFn, nil
	}
	if err != nil {
		return nil, nil, err
	}
	seq, errFn := subsets.ReadMembers(rr)
	return &memberReader{rr: rr, seq: seq}, errFn, nil
}
