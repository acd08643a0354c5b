package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
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
		Outputs: []jobs.Output{{Table: matchesTable, RowType: subsets.Match{}}}, ReduceBy: []string{"page_key"},
		Tx: tx, Workers: opts.Workers, MemoryLimit: opts.MemoryLimit, Progress: opts.Progress, Logger: opts.Logger}
	job := &SubsetEvalJob{Filename: set.Filename(), Source: set.Source(), AsOfMS: asOf.UnixMilli()}
	if err := opts.Runner.Reduce(ctx, job, op); err != nil {
		tx.Abort()
		return nil, fmt.Errorf("subsets recompute: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}

	// Top-K and membership, per subset (in memory: members are small rows).
	sn, err = st.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	var matches []subsets.Match
	err = eachRow(ctx, sn, matchesTable, false, func(m *subsets.Match) error {
		matches = append(matches, *m)
		return nil
	})
	sn.Release()
	if err != nil {
		return nil, err
	}
	members := map[string][]pillar.SubsetMember{}
	for _, name := range set.Names() {
		ms, err := set.Members(name, matches)
		if err != nil {
			return nil, err
		}
		members[name] = ms
	}

	// Pass 2 (when something is published): the records of the new exported
	// membership, from scratch tables.
	var desired, skipped string
	if pub != nil {
		tx, err := st.Begin(ctx)
		if err != nil {
			return nil, err
		}
		var memberTables []string
		for _, name := range set.Names() {
			if !set.Exported(name) {
				continue
			}
			t := scratch + "/members/" + name
			if err := writeMembers(ctx, tx, t, members[name]); err != nil {
				tx.Abort()
				return nil, err
			}
			memberTables = append(memberTables, t)
		}
		if err := tx.Commit(ctx); err != nil {
			return nil, err
		}
		desired, skipped = scratch+"/desired", scratch+"/skipped"
		if err := computeDesired(ctx, st, opts, *pub, memberTables, desired, skipped, opts.encoding()); err != nil {
			return nil, fmt.Errorf("subsets recompute: %w", err)
		}
		if err := diffState(ctx, st, opts, desired); err != nil {
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
		old, err := readMembers(ctx, tx, pillar.SubsetTable(name))
		if err != nil {
			return nil, err
		}
		changes, err := subsets.Diff(name, old, members[name])
		if err != nil {
			return nil, err
		}
		var adds, removes int
		for _, c := range changes {
			switch c.Kind {
			case subsets.Enter:
				adds++
			case subsets.Leave:
				removes++
			}
		}
		gen := meta.Generation + 1
		// Keep the previous generation in history (its own table), drop
		// generations beyond the policy's history.
		keep := max(set.History(name), 1)
		hist := append([]SubsetGen(nil), meta.History...)
		hist = append(hist, SubsetGen{Generation: gen, Table: pillar.SubsetTable(name), Size: int64(len(members[name])),
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
			if err := writeMembers(ctx, tx, historyTable(name, meta.Generation), old); err != nil {
				return nil, err
			}
		}
		if err := writeMembers(ctx, tx, pillar.SubsetTable(name), members[name]); err != nil {
			return nil, err
		}
		meta = SubsetMeta{Name: name, Exported: set.Exported(name), Table: pillar.SubsetTable(name), Generation: gen,
			Size: int64(len(members[name])), AsOf: asOf.UTC(), Fingerprint: set.Fingerprint(name), History: hist}
		if err := tx.SetAttr(ctx, AttrSubsetPrefix+name, meta); err != nil {
			return nil, err
		}
		res.Subsets = append(res.Subsets, SubsetSummary{Name: name, Exported: meta.Exported, Generation: gen, Size: len(members[name]), Adds: adds, Removes: removes})
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
		plan, err := reconcile(ctx, st, tx, opts, desired, skipped, "subsets recompute "+asOf.UTC().Format(time.RFC3339), pillar.PriorityFresh, *pub)
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

func writeMembers(ctx context.Context, tx pillar.Tx, table string, rows []pillar.SubsetMember) error {
	return writeRows(ctx, tx, table, rows, "page_key")
}

func readMembers(ctx context.Context, sn pillar.Snapshot, table string) ([]pillar.SubsetMember, error) {
	var out []pillar.SubsetMember
	err := eachRow(ctx, sn, table, true, func(m *pillar.SubsetMember) error {
		out = append(out, *m)
		return nil
	})
	return out, err
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

// SubsetDiff returns the changes of a subset's last recompute (its current
// generation against the one before).
func SubsetDiff(ctx context.Context, sn pillar.Snapshot, name string) (*SubsetMeta, []subsets.Change, error) {
	var meta SubsetMeta
	if err := sn.Attr(ctx, AttrSubsetPrefix+name, &meta); err != nil {
		if errors.Is(err, pillar.ErrNotFound) {
			return nil, nil, fmt.Errorf("subsets diff: unknown subset %q (see `pillar subsets show`): %w", name, subsets.ErrUnknownSubset)
		}
		return nil, nil, err
	}
	cur, err := readMembers(ctx, sn, meta.Table)
	if err != nil {
		return nil, nil, err
	}
	var old []pillar.SubsetMember
	if len(meta.History) >= 2 {
		old, err = readMembers(ctx, sn, meta.History[len(meta.History)-2].Table)
		if err != nil {
			return nil, nil, err
		}
	}
	ch, err := subsets.Diff(name, old, cur)
	return &meta, ch, err
}
