package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.ytsaurus.tech/yt/go/mapreduce"

	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/pillar"
)

func init() {
	jobs.Register("signals-merge", "docs keys + signals + imported signals, reduced by page_key → the new signals table (an import replaces a page's signal of the same name) and counts", &SignalMergeJob{})
}

// ImportedSignal is one imported signal, the row of an import's scratch
// table: Row is the source row (line) it came from, Seq its order in the
// import (a later signal of the same page and name wins).
type ImportedSignal struct {
	PageKey string  `yson:"page_key" parquet:"page_key"`
	Name    string  `yson:"name" parquet:"name"`
	Num     float64 `yson:"num" parquet:"num"`
	Str     string  `yson:"str" parquet:"str"`
	IsNum   bool    `yson:"is_num" parquet:"is_num"`
	Row     int64   `yson:"row" parquet:"row"`
	Seq     int64   `yson:"seq" parquet:"seq"`
}

// SignalCounts is SignalMergeJob's summary row (one per job).
type SignalCounts struct {
	Imported    int64 `yson:"imported" parquet:"imported"`
	UnknownRows int64 `yson:"unknown_rows" parquet:"unknown_rows"`
}

// docKey is the page_key projection of docs.
type docKey struct {
	PageKey string `yson:"page_key" parquet:"page_key"`
}

// SignalMergeJob is a reducer over (grouped by page_key) input 0, the
// page_key of docs, inputs 1 .. Imported-1, the current signals, and input
// Imported, the imported signals. For a page in docs it writes to output 0
// the page's signals, sorted by name, an imported one replacing the current
// one of the same name (the highest Seq winning among imports); a page not
// in docs keeps its current signals and its imports are counted as unknown
// rows. Output 1 gets one SignalCounts row.
type SignalMergeJob struct {
	Imported int // table index of the imported signals
}

func (*SignalMergeJob) InputTypes() []any  { return nil }
func (*SignalMergeJob) OutputTypes() []any { return nil }

// Do implements mapreduce.Job.
func (j *SignalMergeJob) Do(ctx mapreduce.JobContext, in mapreduce.Reader, out []mapreduce.Writer) error {
	var counts SignalCounts
	err := mapreduce.GroupKeys(in, func(r mapreduce.Reader) error {
		known := false
		var cur []pillar.Signal
		var imp []ImportedSignal
		for r.Next() {
			switch t := r.TableIndex(); {
			case t == 0:
				var k docKey
				if err := r.Scan(&k); err != nil {
					return err
				}
				known = true
			case t == j.Imported:
				var s ImportedSignal
				if err := r.Scan(&s); err != nil {
					return err
				}
				imp = append(imp, s)
			default:
				var s pillar.Signal
				if err := r.Scan(&s); err != nil {
					return err
				}
				cur = append(cur, s)
			}
		}
		if !known {
			var rows []int64
			for _, s := range imp {
				if !slices.Contains(rows, s.Row) {
					rows = append(rows, s.Row)
				}
			}
			counts.UnknownRows += int64(len(rows))
			imp = nil
		}
		counts.Imported += int64(len(imp))
		// One page's signals: a handful, merged by name.
		slices.SortStableFunc(imp, func(a, b ImportedSignal) int { return int(min(max(a.Seq-b.Seq, -1), 1)) })
		for _, s := range imp {
			ns := pillar.Signal{PageKey: s.PageKey, Name: s.Name, Num: s.Num, Str: s.Str, IsNum: s.IsNum}
			if i := slices.IndexFunc(cur, func(c pillar.Signal) bool { return c.Name == s.Name }); i >= 0 {
				cur[i] = ns
			} else {
				cur = append(cur, ns)
			}
		}
		slices.SortFunc(cur, func(a, b pillar.Signal) int {
			switch {
			case a.Name < b.Name:
				return -1
			case a.Name > b.Name:
				return 1
			}
			return 0
		})
		for i := range cur {
			if err := out[0].Write(&cur[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return out[1].Write(&counts)
}

// SignalImportResult reports ImportSignals.
type SignalImportResult struct {
	Imported    int64  `json:"imported"`     // signals written for pages in docs
	UnknownRows int64  `json:"unknown_rows"` // source rows naming pages not in docs (skipped)
	Duration    string `json:"duration"`
}

// ImportSignals merges signals into the signals table: each imports calls
// emit with every signal (any order, any page; Row is the source row, for
// the unknown-row count), which streams into a scratch table; then a reduce
// by page_key on the runner joins them with docs and the current signals
// into the new table (sorted by page_key, name), committed with the pipeline
// lock released. An imported signal replaces the page's signal of the same
// name; signals of pages not in docs are skipped and counted. Nothing keyed
// by page is held in this process.
func ImportSignals(ctx context.Context, st pillar.Store, imports func(emit func(ImportedSignal) error) error, opts Options) (*SignalImportResult, error) {
	opts.ensureDefaults(st)
	start := time.Now()
	lk, err := acquire(ctx, st, "signals import")
	if err != nil {
		return nil, err
	}
	defer lk.abandon()
	scratch := fmt.Sprintf("tmp/signals-import-%d", time.Now().UnixNano())
	imported, merged := scratch+"/imported", scratch+"/merged"

	tx, err := st.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Abort()
	w, err := tx.WriteTable(ctx, imported, ImportedSignal{}, nil)
	if err != nil {
		return nil, err
	}
	var seq int64
	err = imports(func(s ImportedSignal) error {
		s.Seq = seq
		seq++
		return w.Write(&s)
	})
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("signals import: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}

	if tx, err = st.Begin(ctx); err != nil {
		return nil, err
	}
	defer tx.Abort()
	inputs, types := []string{pillar.TableDocs}, []any{&docKey{}}
	if _, err := tx.Table(ctx, pillar.TableDocs); err != nil {
		return nil, fmt.Errorf("signals import: %w (run `pillar ingest` first)", err)
	}
	if _, err := tx.Table(ctx, pillar.TableSignals); err == nil {
		inputs, types = append(inputs, pillar.TableSignals), append(types, &pillar.Signal{})
	} else if !errors.Is(err, pillar.ErrNotFound) {
		return nil, err
	}
	inputs, types = append(inputs, imported), append(types, &ImportedSignal{})
	counts := merged + "-counts"
	op := &jobs.Op{Title: "signals import", Inputs: inputs, InputTypes: types,
		Outputs: []jobs.Output{
			{Table: merged, RowType: pillar.Signal{}, SortedBy: []string{"page_key", "name"}},
			{Table: counts, RowType: SignalCounts{}},
		},
		ReduceBy: []string{"page_key"}, Tx: tx, Workers: opts.Workers, MemoryLimit: opts.MemoryLimit,
		Progress: opts.Progress, Logger: opts.Logger}
	if err := opts.Runner.Reduce(ctx, &SignalMergeJob{Imported: len(inputs) - 1}, op); err != nil {
		return nil, fmt.Errorf("signals import: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}

	// The new contents replace the table (an operation cannot read and
	// write one table), with the lock released, in one transaction.
	if tx, err = st.Begin(ctx); err != nil {
		return nil, err
	}
	defer tx.Abort()
	res := &SignalImportResult{}
	err = eachRow(ctx, tx, counts, true, func(c *SignalCounts) error {
		res.Imported += c.Imported
		res.UnknownRows += c.UnknownRows
		return nil
	})
	if err != nil {
		return nil, err
	}
	if ti, err := tx.Table(ctx, merged); err != nil || ti.Rows == 0 {
		// No signal at all: an empty table (an operation without input
		// rows may write no output).
		if err := writeRows[pillar.Signal](ctx, tx, pillar.TableSignals, nil, "page_key", "name"); err != nil {
			return nil, err
		}
	} else {
		cp := &jobs.Op{Title: "signals copy", Inputs: []string{merged}, InputTypes: []any{&pillar.Signal{}},
			Outputs:  []jobs.Output{{Table: pillar.TableSignals, RowType: pillar.Signal{}, SortedBy: []string{"page_key", "name"}}},
			ReduceBy: []string{"page_key"}, SortBy: []string{"page_key", "name"}, Tx: tx, Workers: opts.Workers,
			MemoryLimit: opts.MemoryLimit, Progress: opts.Progress, Logger: opts.Logger}
		if err := opts.Runner.Reduce(ctx, &SignalCopyJob{}, cp); err != nil {
			return nil, fmt.Errorf("signals import: write %s: %w", pillar.TableSignals, err)
		}
	}
	if err := lk.commit(tx); err != nil {
		return nil, fmt.Errorf("signals import: commit: %w", err)
	}
	res.Duration = time.Since(start).Round(time.Millisecond).String()
	return res, nil
}

func init() {
	jobs.Register("signals-copy", "signals rows, reduced by page_key → the same rows (the signals table's new contents)", &SignalCopyJob{})
}

// SignalCopyJob copies signal rows (input 0) to output 0.
type SignalCopyJob struct{}

func (*SignalCopyJob) InputTypes() []any  { return nil }
func (*SignalCopyJob) OutputTypes() []any { return nil }

// Do implements mapreduce.Job.
func (*SignalCopyJob) Do(ctx mapreduce.JobContext, in mapreduce.Reader, out []mapreduce.Writer) error {
	for in.Next() {
		var s pillar.Signal
		if err := in.Scan(&s); err != nil {
			return err
		}
		if err := out[0].Write(&s); err != nil {
			return err
		}
	}
	return nil
}
