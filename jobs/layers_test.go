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
			// A row range selects merged rows.
			op = &jobs.Op{Inputs: []string{jobs.RowRange("docs", 2, 7)}, Outputs: []jobs.Output{{Table: "range", RowType: pillar.Doc{}}}, SortBy: []string{"page_key"}}
			if err := b.runner.Sort(ctx, op); err != nil {
				t.Fatal(err)
			}
			if got := readDocTitles(t, b.store, "range"); len(got) != 5 {
				t.Errorf("rows [2,7) of layered docs: %d rows, want 5", len(got))
			}
			if b.fake != nil {
				n := 0
				for _, s := range b.fake.Specs() {
					if strings.Contains(s.Title, "resolve the layers of docs") {
						n++
					}
				}
				if n != 2 {
					t.Errorf("the YT runner resolved layered docs %d times, want 2 (once per operation)", n)
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
