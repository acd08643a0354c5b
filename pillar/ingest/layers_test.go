package ingest

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/pillarkit/pillar/jobs/ytfake"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/local"
	"github.com/pillarkit/pillar/pillar/ytstore"
)

func layerBackends(t *testing.T) map[string]func(t *testing.T) pillar.Store {
	return map[string]func(t *testing.T) pillar.Store{
		"local": func(t *testing.T) pillar.Store {
			st, err := local.Create(filepath.Join(t.TempDir(), "store"), &local.Options{Partitions: 8})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		},
		"yt": func(t *testing.T) pillar.Store {
			c := ytfake.New(&ytfake.Options{SandboxDir: t.TempDir()})
			t.Cleanup(func() { c.Close() })
			st, err := ytstore.Create(context.Background(), c, "//tmp/pillar", &ytstore.Options{Partitions: 8, PollInterval: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		},
	}
}

func docsLayers(t *testing.T, st pillar.Store) []pillar.Layer {
	t.Helper()
	sn, err := st.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	ls, err := pillar.Layers(context.Background(), sn, pillar.TableDocs)
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

// TestIngestWritesDeltas: an ingest of k changed pages into an N-page store
// writes k rows (a delta of docs), and the store reads exactly as after a
// full rewrite; the full path (the first ingest, or Rewrite) writes every
// row and leaves no layer; automatic compaction folds the deltas once
// there are more than Compact.MaxLayers. On both backends.
func TestIngestWritesDeltas(t *testing.T) {
	base, update := crashCorpus(t) // 200 pages; update: 20 changed, 10 new
	for name, open := range layerBackends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st := open(t)
			s, err := Run(ctx, st, Options{From: base, Now: fixedNow})
			if err != nil {
				t.Fatal(err)
			}
			if s.Delta || s.RowsWritten != 200 {
				t.Fatalf("first ingest: delta %v, %d rows written; want the base, 200 rows", s.Delta, s.RowsWritten)
			}
			// The small change: 30 rows written into a 200-page store.
			s, err = Run(ctx, st, Options{From: update, Now: fixedNow})
			if err != nil {
				t.Fatal(err)
			}
			if !s.Delta || s.RowsWritten != 30 || s.Changed != 20 || s.New != 10 {
				t.Fatalf("update: delta %v, %d rows written, %d changed, %d new; want a delta of 30 rows", s.Delta, s.RowsWritten, s.Changed, s.New)
			}
			ls := docsLayers(t, st)
			if len(ls) != 2 || ls[0].Rows != 200 || ls[1].Kind != pillar.LayerDelta || ls[1].Rows != 30 {
				t.Fatalf("layers after the update: %+v; want the 200-row base and a 30-row delta", ls)
			}
			sn, err := st.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ti, err := sn.Table(ctx, pillar.TableDocs)
			sn.Release()
			if err != nil || ti.Rows != 210 {
				t.Fatalf("docs after the update: %d rows (%v), want 210", ti.Rows, err)
			}
			layered := storeDocs(t, st)

			// The same ingests with Rewrite: the same rows, no layer.
			full := open(t)
			if _, err := Run(ctx, full, Options{From: base, Now: fixedNow}); err != nil {
				t.Fatal(err)
			}
			s, err = Run(ctx, full, Options{From: update, Now: fixedNow, Rewrite: true})
			if err != nil {
				t.Fatal(err)
			}
			if s.Delta || s.RowsWritten != 210 {
				t.Fatalf("rewrite: delta %v, %d rows written; want 210", s.Delta, s.RowsWritten)
			}
			if !slices.Equal(layered, storeDocs(t, full)) {
				t.Fatal("the layered docs read differently from the rewritten docs")
			}
			if ls := docsLayers(t, full); len(ls) != 1 {
				t.Fatalf("layers after a rewrite: %+v, want the base only", ls)
			}

			// An unchanged re-run adds no layer.
			if s, err := Run(ctx, st, Options{From: update, Now: fixedNow}); err != nil || s.ChangedPages() != 0 {
				t.Fatalf("unchanged re-run: %+v %v", s, err)
			}
			if n := len(docsLayers(t, st)); n != 2 {
				t.Fatalf("an unchanged re-run left %d layers, want 2", n)
			}

			// Automatic compaction with MaxLayers 2: the third delta folds
			// all three into the base; the rows read the same as before.
			edit := t.TempDir()
			for i := 0; i < 2; i++ {
				write(t, edit, "d1/p001.txt", []byte("# Page 1\n\nedit "+string(rune('a'+i))))
				s, err := Run(ctx, st, Options{From: edit, Now: fixedNow, Compact: pillar.CompactOptions{MaxLayers: 2}})
				if err != nil {
					t.Fatal(err)
				}
				if want := 0; i == 0 && s.Compacted != want {
					t.Fatalf("edit %d: compacted %d layers, want %d", i, s.Compacted, want)
				}
				if i == 1 && (s.Compacted != 3 || s.RowsWritten != 1) {
					t.Fatalf("edit %d: %d rows written, compacted %d layers; want 1 row and 3 layers folded", i, s.RowsWritten, s.Compacted)
				}
			}
			if ls := docsLayers(t, st); len(ls) != 1 || ls[0].Rows != 210 {
				t.Fatalf("layers after the automatic compaction: %+v, want a 210-row base", ls)
			}
			got := storeDocs(t, st)
			if len(got) != 210 {
				t.Fatalf("docs after compaction: %d rows, want 210", len(got))
			}
		})
	}
}
