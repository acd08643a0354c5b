package local

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/pillarkit/pillar/pillar"
)

// TestTableFilesReadOutside: the listed files, read with parquet-go's
// generic reader (not the row types), hold exactly the snapshot's rows.
func TestTableFilesReadOutside(t *testing.T) {
	s := mustCreate(t, t.TempDir())
	tx, _ := s.Begin(ctx)
	writeDocs(t, tx, "docs", pillar.Replace, "a", "b")
	writeDocs(t, tx, "docs", pillar.Replace, "c")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tx, _ = s.Begin(ctx)
	writeDocs(t, tx, "docs", pillar.Append, "d")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	sn, _ := s.Snapshot(ctx)
	defer sn.Release()
	paths, err := sn.(*snapshot).TableFiles(ctx, "docs")
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 3 {
		t.Fatalf("docs files = %q, want 3", paths)
	}
	var keys []string
	for _, p := range paths {
		if !filepath.IsAbs(p) {
			t.Errorf("%s is not absolute", p)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		pf, err := parquet.OpenFile(f, st.Size())
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		col, ok := pf.Schema().Lookup("page_key")
		if !ok {
			t.Fatalf("%s: no page_key column in %s", p, pf.Schema())
		}
		r := parquet.NewReader(f) // untyped: the file alone, no row type
		rows := make([]parquet.Row, pf.NumRows())
		n, err := r.ReadRows(rows)
		if err != nil && n != len(rows) {
			t.Fatalf("%s: %v", p, err)
		}
		for _, row := range rows[:n] {
			keys = append(keys, row[col.ColumnIndex].String())
		}
		r.Close()
		f.Close()
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"a", "b", "c", "d"}) {
		t.Fatalf("rows read outside = %q", keys)
	}
	if _, err := sn.(*snapshot).TableFiles(ctx, "nope"); !errors.Is(err, pillar.ErrNotFound) {
		t.Fatalf("missing table: %v", err)
	}
}
