package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/pillarkit/pillar/pillar"
)

// TestCompactionKeepsLeasedFiles: with retention cut to nothing but
// leases, a snapshot opened before a compaction — and a reader in the
// middle of its rows — keeps reading the folded layers after the
// compaction, more commits and cleanups; once it is released, the next
// cleanup removes the superseded files.
func TestCompactionKeepsLeasedFiles(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "store")
	st, err := Create(dir, &Options{Partitions: 4, RetainManifests: 1, RetainFor: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	keys := make([]string, 300)
	for i := range keys {
		k, _, _ := pillar.KeyOfURL(fmt.Sprintf("http://lease.example/%d", i))
		keys[i] = k.String()
	}
	slices.Sort(keys)
	delta := func(tag string, puts []string, dels []string) {
		tx, err := st.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w, err := pillar.WriteDelta(ctx, tx, "docs", pillar.Doc{}, -1)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range puts {
			if err := w.Put(&pillar.Doc{PageKey: k, Title: tag}); err != nil {
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
	delta("base", keys[:250], nil)
	delta("d1", keys[240:260], keys[:10])
	delta("d2", keys[100:110], keys[260:262])

	sn, err := st.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var layerFiles []string
	for name, te := range sn.(*snapshot).m.Tables {
		if _, _, _, ok := pillar.IsLayerTable(name); ok {
			for _, f := range te.Files {
				layerFiles = append(layerFiles, filepath.Join(dir, "data", f.Name))
			}
		}
	}
	if len(layerFiles) < 3 {
		t.Fatalf("layer files: %v", layerFiles)
	}
	read := func(rr pillar.RowReader, n int) []string {
		var out []string
		for (n < 0 || len(out) < n) && rr.Next() {
			var d pillar.Doc
			if err := rr.Scan(&d); err != nil {
				t.Fatal(err)
			}
			out = append(out, d.PageKey+" "+d.Title)
		}
		if err := rr.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	all, _ := sn.ReadTable(ctx, "docs", nil)
	want := read(all, -1)
	all.Close()
	if len(want) != 250 { // 250 + 10 new - 10 deleted; 2 deleted keys were never there
		t.Fatalf("merged rows: %d, want 250", len(want))
	}
	mid, err := sn.ReadTable(ctx, "docs", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mid.Close()
	got := read(mid, 100)

	cs, err := pillar.Compact(ctx, st, "docs", nil)
	if err != nil || cs.Layers != 2 || cs.Rows != 250 {
		t.Fatalf("compact: %+v %v", cs, err)
	}
	for i := 0; i < 3; i++ {
		tx, _ := st.Begin(ctx)
		tx.SetAttr(ctx, "churn", i)
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	for _, f := range layerFiles {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("a file of a leased snapshot was removed: %v", err)
		}
	}
	// The reader in the middle goes on; the snapshot reads as before.
	got = append(got, read(mid, -1)...)
	if !slices.Equal(got, want) {
		t.Fatal("a reader across the compaction read other rows")
	}
	again, _ := sn.ReadTable(ctx, "docs", nil)
	if g := read(again, -1); !slices.Equal(g, want) {
		t.Fatal("the old snapshot reads other rows after the compaction")
	}
	again.Close()
	// The new state reads the same rows from one base.
	now, _ := st.Snapshot(ctx)
	nr, _ := now.ReadTable(ctx, "docs", nil)
	if g := read(nr, -1); !slices.Equal(g, want) {
		t.Fatal("the compacted docs read other rows")
	}
	nr.Close()
	now.Release()

	mid.Close()
	sn.Release()
	if _, err := st.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	for _, f := range layerFiles {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Fatalf("superseded layer file %s is still there after release and cleanup (%v)", f, err)
		}
	}
}
