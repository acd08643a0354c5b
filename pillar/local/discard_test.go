package local

import (
	"path/filepath"
	"testing"

	"github.com/pillarkit/pillar/pillar"
)

// TestDiscardEmptyWriter: a writer discarded before any row leaves its part
// without files and the rows of the table's other parts in order; one that
// wrote rows refuses Discard and stays open.
func TestDiscardEmptyWriter(t *testing.T) {
	s := mustCreate(t, t.TempDir())
	tx, _ := s.Begin(ctx)
	open := func(mode pillar.WriteMode) pillar.RowWriter {
		w, err := tx.WriteTable(ctx, "docs", pillar.Doc{}, &pillar.WriteOptions{Mode: mode, SortedBy: []string{"page_key"}})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	type discarder interface{ Discard() error }
	a, empty, b := open(pillar.Replace), open(pillar.Append), open(pillar.Append)
	for _, kw := range []struct {
		w   pillar.RowWriter
		key string
	}{{a, "00000000000000000000000000000001"}, {b, "00000000000000000000000000000002"}} {
		if err := kw.w.Write(&pillar.Doc{PageKey: kw.key}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.(discarder).Discard(); err == nil {
		t.Fatal("Discard of a writer that wrote a row succeeded")
	}
	if err := empty.(discarder).Discard(); err != nil {
		t.Fatal(err)
	}
	for _, w := range []pillar.RowWriter{a, b} {
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	sn, _ := s.Snapshot(ctx)
	defer sn.Release()
	files, err := sn.(*snapshot).TableFiles(ctx, "docs")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 {
		t.Fatalf("%d files, want 2 (the discarded writer's part has none)", len(files))
	}
	var keys []string
	err = eachDoc(sn, "docs", func(d *pillar.Doc) { keys = append(keys, d.PageKey) })
	if err != nil || len(keys) != 2 || keys[0] > keys[1] {
		t.Fatalf("rows %q (%v), want the two written, in order", keys, err)
	}
	staged, _ := filepath.Glob(filepath.Join(s.Dir(), "tx", "*", "*.parquet"))
	if len(staged) != 0 {
		t.Fatalf("staged files left: %v", staged)
	}
}

func eachDoc(sn pillar.Snapshot, table string, fn func(*pillar.Doc)) error {
	rr, err := sn.ReadTable(ctx, table, nil)
	if err != nil {
		return err
	}
	defer rr.Close()
	for rr.Next() {
		var d pillar.Doc
		if err := rr.Scan(&d); err != nil {
			return err
		}
		fn(&d)
	}
	return rr.Err()
}
