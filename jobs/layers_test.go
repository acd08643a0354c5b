package jobs_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/pillar"
)

// TestLayeredInputs: an operation over a layered table (a base and two
// deltas with deletes) sees its merged rows on both backends — the local
// runner through the store's merged reader, the YT runner through its
// resolve step (a layers-merge reduce) — also for a row range.
func TestLayeredInputs(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs the job binary on the fake cluster")
	}
	for _, b := range []*backend{embeddedBackend(t), ytBackend(t, nil)} {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			keys := make([]string, 40)
			for i := range keys {
				k, _, _ := pillar.KeyOfURL(fmt.Sprintf("https://example.org/l/%d", i))
				keys[i] = k.String()
			}
			slices.Sort(keys)
			delta := func(tag string, puts, dels []string) {
				tx, err := b.store.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				w, err := pillar.WriteDelta(ctx, tx, "docs", pillar.Doc{}, -1)
				if err != nil {
					t.Fatal(err)
				}
				for _, k := range puts {
					if err := w.Put(&pillar.Doc{PageKey: k, URL: "https://example.org/" + k, Title: tag, Text: tag + " text"}); err != nil {
						t.Fatal(err)
					}
				}
				for _, k := range dels {
					if err := w.Delete(ctx, k); err != nil {
						t.Fatal(err)
					}
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
			}
			delta("base", keys[:30], nil)
			delta("d1", []string{keys[3], keys[31]}, []string{keys[5], keys[6]})
			delta("d2", []string{keys[5]}, []string{keys[3], keys[10]})
			want := map[string]string{}
			for _, k := range keys[:30] {
				want[k] = "base"
			}
			want[keys[31]] = "d1"
			want[keys[5]] = "d2"
			delete(want, keys[3])
			delete(want, keys[6])
			delete(want, keys[10])

			op := &jobs.Op{Inputs: []string{"docs"}, Outputs: []jobs.Output{{Table: "by-title", RowType: pillar.Doc{}}}, SortBy: []string{"page_key"}}
			if err := b.runner.Sort(ctx, op); err != nil {
				t.Fatal(err)
			}
			got := readDocTitles(t, b.store, "by-title")
			if len(got) != len(want) {
				t.Errorf("sort over layered docs: %d rows, want %d", len(got), len(want))
			}
			for k, tag := range want {
				if got[k] != tag {
					t.Errorf("page %s: %q, want %q", k[:8], got[k], tag)
				}
			}
			// A layered input after a plain one is resolved too.
			tx, err := b.store.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			pw, err := tx.WriteTable(ctx, "plain", pillar.Doc{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			k, _, _ := pillar.KeyOfURL("https://example.org/plain")
			pw.Write(&pillar.Doc{PageKey: k.String(), Title: "plain", Text: "plain text"})
			pw.Close()
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			op = &jobs.Op{Inputs: []string{"plain", "docs"}, Outputs: []jobs.Output{{Table: "both", RowType: pillar.Doc{}}}, SortBy: []string{"page_key"}}
			if err := b.runner.Sort(ctx, op); err != nil {
				t.Fatal(err)
			}
			if got := readDocTitles(t, b.store, "both"); len(got) != len(want)+1 || got[keys[5]] != "d2" || got[k.String()] != "plain" {
				t.Errorf("sort over plain + layered docs: %d rows (page 5: %q), want %d", len(got), got[keys[5]], len(want)+1)
			}
			// A row range selects merged rows.
			op = &jobs.Op{Inputs: []string{jobs.RowRange("docs", 2, 7)}, Outputs: []jobs.Output{{Table: "range", RowType: pillar.Doc{}}}, SortBy: []string{"page_key"}}
			if err := b.runner.Sort(ctx, op); err != nil {
				t.Fatal(err)
			}
			if got := readDocTitles(t, b.store, "range"); len(got) != 5 {
				t.Errorf("rows [2,7) of layered docs: %d rows, want 5", len(got))
			}
			// An output that replaces the layered table takes its layers
			// along: docs is then exactly the operation's rows, in the
			// runner's own transaction and in a store transaction.
			for _, inTx := range []bool{false, true} {
				op = &jobs.Op{Inputs: []string{"plain"}, Outputs: []jobs.Output{{Table: "docs", RowType: pillar.Doc{}, SortedBy: []string{"page_key"}}}, SortBy: []string{"page_key"}}
				if inTx {
					delta("again", []string{keys[1]}, nil)
					if op.Tx, err = b.store.Begin(ctx); err != nil {
						t.Fatal(err)
					}
				}
				if err := b.runner.Sort(ctx, op); err != nil {
					t.Fatal(err)
				}
				if inTx {
					if err := op.Tx.Commit(ctx); err != nil {
						t.Fatal(err)
					}
				}
				if got := readDocTitles(t, b.store, "docs"); len(got) != 1 || got[k.String()] != "plain" {
					t.Errorf("docs replaced by an operation (in a store tx: %v): %d rows %v, want only the plain row", inTx, len(got), got)
				}
			}
			if b.fake != nil {
				n := 0
				for _, s := range b.fake.Specs() {
					if strings.Contains(s.Title, "resolve the layers of docs") {
						n++
					}
				}
				if n != 3 {
					t.Errorf("the YT runner resolved layered docs %d times, want 3 (once per operation)", n)
				}
			}
		})
	}
}

func readDocTitles(t *testing.T, st pillar.Store, table string) map[string]string {
	t.Helper()
	ctx := context.Background()
	sn, err := st.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	rr, err := sn.ReadTable(ctx, table, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	out := map[string]string{}
	for rr.Next() {
		var d pillar.Doc
		if err := rr.Scan(&d); err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(d.Text, " text") {
			t.Errorf("row %s: text %q", d.PageKey, d.Text)
		}
		out[d.PageKey] = d.Title
	}
	if err := rr.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCompactOnYTRunner: with CompactOptions.Merge running a layers-merge
// reduce on the YT runner, compaction folds the deltas on the (fake)
// cluster inside the store transaction — the base is read as it is, not
// resolved first — and the table reads the same rows from one base.
func TestCompactOnYTRunner(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs the job binary on the fake cluster")
	}
	b := ytBackend(t, nil)
	ctx := context.Background()
	keys := make([]string, 50)
	for i := range keys {
		k, _, _ := pillar.KeyOfURL(fmt.Sprintf("https://example.org/c/%d", i))
		keys[i] = k.String()
	}
	slices.Sort(keys)
	for i, d := range []struct{ puts, dels []string }{{keys[:40], nil}, {keys[35:45], keys[:5]}, {keys[10:12], keys[44:45]}} {
		tx, _ := b.store.Begin(ctx)
		w, err := pillar.WriteDelta(ctx, tx, "docs", pillar.Doc{}, -1)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range d.puts {
			w.Put(&pillar.Doc{PageKey: k, Title: fmt.Sprint("l", i), Text: "x text"})
		}
		for _, k := range d.dels {
			w.Delete(ctx, k)
		}
		w.Close()
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	before := readDocTitles(t, b.store, "docs")
	if len(before) != 39 {
		t.Fatalf("merged docs: %d rows, want 39", len(before))
	}
	cs, err := pillar.Compact(ctx, b.store, "docs", &pillar.CompactOptions{Merge: jobs.CompactMerge(b.runner)})
	if err != nil {
		t.Fatal(err)
	}
	if cs.Layers != 2 || cs.Rows != 39 {
		t.Errorf("compaction: %+v, want 2 deltas folded into 39 rows", cs)
	}
	after := readDocTitles(t, b.store, "docs")
	if len(after) != len(before) {
		t.Fatalf("after compaction %d rows, before %d", len(after), len(before))
	}
	for k, v := range before {
		if after[k] != v {
			t.Errorf("page %s: %q after compaction, %q before", k[:8], after[k], v)
		}
	}
	sn, _ := b.store.Snapshot(ctx)
	ls, _ := pillar.Layers(ctx, sn, "docs")
	ti, _ := sn.Table(ctx, "docs")
	sn.Release()
	if len(ls) != 1 || len(ti.SortedBy) == 0 || ti.SortedBy[0] != "page_key" {
		t.Errorf("after compaction: layers %+v, sorted by %v; want one base sorted by page_key", ls, ti.SortedBy)
	}
	compacts, resolves := 0, 0
	for _, s := range b.fake.Specs() {
		if strings.Contains(s.Title, "compact docs") {
			compacts++
		}
		if strings.Contains(s.Title, "resolve the layers") {
			resolves++
		}
	}
	if compacts != 1 || resolves != 0 {
		t.Errorf("operations: %d compaction reduces, %d layer resolves; want 1 and 0", compacts, resolves)
	}
}
