package pipeline

import (
	"context"
	"fmt"
	"reflect"
	"sort"

	"go.ytsaurus.tech/yt/go/mapreduce"

	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/pillar"
)

func init() {
	jobs.Register("backfill-finish-delta", "source hashes + a version's row heads + its pending rows, reduced by page_key → the rows of changed pages, the pages removed, and the count changes", &FinishDeltaJob{})
}

// versionHead is the (page, content hash, chunk_no) projection of a row of
// a chunk or embedding table.
type versionHead struct {
	PageKey     string `yson:"page_key" parquet:"page_key"`
	ContentHash string `yson:"content_hash" parquet:"content_hash"`
	ChunkNo     int32  `yson:"chunk_no" parquet:"chunk_no"`
}

// DeltaSummary is one FinishDeltaJob's changes: pages and rows put and
// deleted, and what they change in the version's counts.
type DeltaSummary struct {
	PutPages    int64 `yson:"put_pages" parquet:"put_pages"`
	PutRows     int64 `yson:"put_rows" parquet:"put_rows"`
	DeletePages int64 `yson:"delete_pages" parquet:"delete_pages"`
	// Pages, Rows and Empty are the changes of the version's page count,
	// row count (empty-page markers included) and empty pages.
	Pages int64 `yson:"pages" parquet:"pages"`
	Rows  int64 `yson:"rows" parquet:"rows"`
	Empty int64 `yson:"empty" parquet:"empty"`
}

// FinishDeltaJob is a reducer over (grouped by page_key) input 0, the
// (page, content hash) of the source, input 1, the heads of the version's
// rows (versionHead), and input 2, its pending rows (Chunk or Embedding, by
// Kind). It is FinishJob for a version table that exists: instead of every
// row of current content it writes only what changes — to output 0 the
// rows of each page whose pending rows are of the source's current content
// (all of the page's rows, chunk_no order: they replace the page's rows),
// to output 1 the key of each page whose rows in the table are of another
// content and that has none pending (pillar.DeletedKey), and one
// DeltaSummary per job to output 2.
type FinishDeltaJob struct {
	Kind string
}

func (*FinishDeltaJob) InputTypes() []any  { return nil }
func (*FinishDeltaJob) OutputTypes() []any { return nil }

// Do implements mapreduce.Job.
func (j *FinishDeltaJob) Do(ctx mapreduce.JobContext, in mapreduce.Reader, out []mapreduce.Writer) error {
	var sum DeltaSummary
	err := mapreduce.GroupKeys(in, func(r mapreduce.Reader) error {
		var key, src string
		var oldRows, oldEmpty int64
		oldCurrent := true
		var rows []versionRow
		for r.Next() {
			switch r.TableIndex() {
			case 0:
				var h pageHash
				if err := r.Scan(&h); err != nil {
					return err
				}
				key, src = h.PageKey, h.ContentHash
			case 1:
				var h versionHead
				if err := r.Scan(&h); err != nil {
					return err
				}
				key = h.PageKey
				oldRows++
				if h.ChunkNo < 0 {
					oldEmpty++
				}
				if src == "" || h.ContentHash != src {
					oldCurrent = false
				}
			default:
				hash, vr, err := scanVersionRow(j.Kind, r)
				if err != nil {
					return err
				}
				if src != "" && hash == src {
					rows = append(rows, vr)
				}
			}
		}
		switch {
		case len(rows) > 0 && !(oldRows > 0 && oldCurrent):
			sort.SliceStable(rows, func(a, b int) bool { return rows[a].no < rows[b].no })
			var n, empty int64
			for i, vr := range rows {
				if i > 0 && vr.no == rows[i-1].no {
					continue // a slice done twice (an interrupted run)
				}
				n++
				if vr.no < 0 {
					empty++
				}
				if err := out[0].Write(vr.row); err != nil {
					return err
				}
			}
			sum.PutPages++
			sum.PutRows += n
			if oldRows == 0 {
				sum.Pages++
			}
			sum.Rows += n - oldRows
			sum.Empty += empty - oldEmpty
		case oldRows > 0 && !oldCurrent:
			if err := out[1].Write(&pillar.DeletedKey{PageKey: key}); err != nil {
				return err
			}
			sum.DeletePages++
			sum.Pages--
			sum.Rows -= oldRows
			sum.Empty -= oldEmpty
		}
		return nil
	})
	if err != nil {
		return err
	}
	return out[2].Write(&sum)
}

// finishDelta completes version v whose table exists (sorted by page_key,
// chunk_no) as a delta layer of it: FinishDeltaJob (a reduce by page on the
// runner that reads the source's and the table's key columns and the
// pending rows) writes the changed pages' rows and the removed pages into
// scratch tables, committed on their own; then one transaction streams
// them — the change, not the corpus — into a delta of the table, drops the
// pending, scratch and plan tables and marks the version complete with its
// counts moved by the summary.
func finishDelta(ctx context.Context, st pillar.Store, opts Options, v *pillar.Version, source string, pl *backfillPlan, res *Result, rowType any) error {
	next := nextPrefix + v.Table
	tx, err := st.Begin(ctx)
	if err != nil {
		return err
	}
	inputs := []string{source, v.Table, pendingTable(v.Table)}
	types := []any{&pageHash{}, &versionHead{}, reflect.New(reflect.TypeOf(rowType)).Interface()}
	op := &jobs.Op{Title: "backfill complete " + v.ID, Inputs: inputs, InputTypes: types,
		Outputs: []jobs.Output{
			{Table: next, RowType: rowType, SortedBy: []string{"page_key", "chunk_no"}},
			{Table: next + "-deletes", RowType: pillar.DeletedKey{}, SortedBy: []string{"page_key"}},
			{Table: next + "-summary", RowType: DeltaSummary{}},
		},
		ReduceBy: []string{"page_key"}, Tx: tx, Workers: opts.Workers, MemoryLimit: opts.MemoryLimit,
		Progress: opts.Progress, Logger: opts.Logger}
	if err := opts.Runner.Reduce(ctx, &FinishDeltaJob{Kind: v.Kind}, op); err != nil {
		tx.Abort()
		return fmt.Errorf("complete %s: %w", v.ID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("complete %s: %w", v.ID, err)
	}

	if tx, err = st.Begin(ctx); err != nil {
		return err
	}
	defer tx.Abort()
	var sum DeltaSummary
	err = eachRow(ctx, tx, next+"-summary", true, func(s *DeltaSummary) error {
		sum.PutPages += s.PutPages
		sum.PutRows += s.PutRows
		sum.DeletePages += s.DeletePages
		sum.Pages += s.Pages
		sum.Rows += s.Rows
		sum.Empty += s.Empty
		return nil
	})
	if err != nil {
		return err
	}
	total := v.Rows + v.EmptyPages + sum.Rows // merged rows after, markers included
	if sum.PutPages+sum.DeletePages > 0 {
		w, err := pillar.WriteDelta(ctx, tx, v.Table, rowType, total)
		if err != nil {
			return err
		}
		defer w.Close()
		put := func(row any) error { return w.Put(row) }
		if v.Kind == pillar.KindEmbeddings {
			err = eachRow(ctx, tx, next, true, func(e *pillar.Embedding) error { return put(e) })
		} else {
			err = eachRow(ctx, tx, next, true, func(c *pillar.Chunk) error { return put(c) })
		}
		if err != nil {
			return fmt.Errorf("complete %s: %w", v.ID, err)
		}
		err = eachRow(ctx, tx, next+"-deletes", true, func(k *pillar.DeletedKey) error { return w.Delete(ctx, k.PageKey) })
		if err != nil {
			return fmt.Errorf("complete %s: %w", v.ID, err)
		}
		if err := w.Close(); err != nil {
			return err
		}
	}
	v.Pages += sum.Pages
	v.EmptyPages += sum.Empty
	v.Rows = total - v.EmptyPages
	for _, t := range append([]string{pendingTable(v.Table), next, next + "-deletes", next + "-summary"}, planTables(v.Table)...) {
		if _, err := tx.Table(ctx, t); err == nil {
			if err := tx.DropTable(ctx, t); err != nil {
				return err
			}
		}
	}
	if err := completeVersion(ctx, tx, v, pl, res); err != nil {
		return err
	}
	compactLayered(ctx, st, opts, v.Table)
	return nil
}
