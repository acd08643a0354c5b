package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/pillarkit/pillar/pillar"
)

func init() {
	cases = append(cases,
		struct {
			name string
			f    func(t *testing.T, st pillar.Store)
		}{"LayeredTable", testLayeredTable},
		struct {
			name string
			f    func(t *testing.T, st pillar.Store)
		}{"LayeredReplaceAndConflicts", testLayeredReplace},
		struct {
			name string
			f    func(t *testing.T, st pillar.Store)
		}{"CompactKeepsSnapshots", testCompactKeepsSnapshots},
	)
}

// writeDelta writes one delta of docs: puts (tagged) and deletes, both
// sorted.
func writeDelta(t *testing.T, tx pillar.Tx, table, tag string, rows int64, puts, dels []string) pillar.Delta {
	t.Helper()
	w, err := pillar.WriteDelta(ctx, tx, table, pillar.Doc{}, rows)
	if err != nil {
		t.Fatalf("WriteDelta %q: %v", table, err)
	}
	for _, k := range puts {
		if err := w.Put(&pillar.Doc{PageKey: k, URL: "http://storetest.example/" + k, Title: tag}); err != nil {
			t.Fatalf("Put: %v", err)
		}
	}
	for _, k := range dels {
		if err := w.Delete(ctx, k); err != nil {
			t.Fatalf("Delete: %v", err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatalf("close delta: %v", err)
	}
	return w.Delta()
}

func testLayeredTable(t *testing.T, st pillar.Store) {
	ks := sortedKeys(10)
	// The first delta of a table that does not exist is its base.
	tx := begin(t, st)
	d := writeDelta(t, tx, "docs", "b", 8, ks[:8], nil)
	if !d.Base || d.Rows != "docs" {
		t.Fatalf("first delta of a new table: %+v, want its base", d)
	}
	commit(t, tx)
	sn0 := snap(t, st)

	// Delta 1: change k1, add k8, delete k2 and k9 (absent).
	tx = begin(t, st)
	d = writeDelta(t, tx, "docs", "d1", 8, []string{ks[1], ks[8]}, []string{ks[2], ks[9]})
	if d.Base || d.Seq != 1 || d.Rows != pillar.DeltaTable("docs", 1) || d.Deletes != pillar.DeletesTable("docs", 1) {
		t.Fatalf("delta 1: %+v", d)
	}
	commit(t, tx)
	// Delta 2: put k2 back, delete k1, change k3; rows unknown (-1): counted.
	tx = begin(t, st)
	writeDelta(t, tx, "docs", "d2", -1, []string{ks[2], ks[3]}, []string{ks[1]})
	commit(t, tx)

	sn := snap(t, st)
	got := readDocs(t, sn, "docs", nil)
	want := []string{ks[0], ks[2], ks[3], ks[4], ks[5], ks[6], ks[7], ks[8]}
	wantKeys(t, "merged docs", docKeys(got), want)
	if tags := docTags(got); tags != "b,d2,d2,b,b,b,b,d1" {
		t.Errorf("merged docs' layers: %s, want b,d2,d2,b,b,b,b,d1", tags)
	}
	ti, err := sn.Table(ctx, "docs")
	if err != nil {
		t.Fatal(err)
	}
	if ti.Rows != int64(len(want)) || !slices.Equal(ti.SortedBy, []string{"page_key"}) {
		t.Errorf("merged table info: rows %d sorted by %v, want %d rows by page_key", ti.Rows, ti.SortedBy, len(want))
	}
	// Ranges select merged rows.
	wantKeys(t, "merged rows [2,5)", docKeys(readDocs(t, sn, "docs", &pillar.Range{Start: 2, End: 5})), want[2:5])
	// The layers, oldest first; LayerInputs gives them as runner inputs.
	names, ls, err := pillar.LayerInputs(ctx, sn, "docs")
	if err != nil {
		t.Fatal(err)
	}
	wantNames := []string{"docs", pillar.DeletesTable("docs", 1), pillar.DeltaTable("docs", 1), pillar.DeletesTable("docs", 2), pillar.DeltaTable("docs", 2)}
	if !slices.Equal(names, wantNames) || ls[0].Kind != pillar.LayerBase || ls[1].Kind != pillar.LayerDeletes || ls[2].Kind != pillar.LayerDelta {
		t.Errorf("layer inputs: %v %+v, want %v", names, ls, wantNames)
	}
	// The older snapshot still reads the base alone.
	wantKeys(t, "snapshot before the deltas", docKeys(readDocs(t, sn0, "docs", nil)), ks[:8])
	// A table that is not layered has one layer; an unknown one is named.
	if _, err := pillar.Layers(ctx, sn, "nosuch"); !errors.Is(err, pillar.ErrNotFound) {
		t.Errorf("Layers of an unknown table: %v, want ErrNotFound", err)
	}
	// A nested table name (subsets/<name>) layers the same way.
	tx = begin(t, st)
	writeDelta(t, tx, "subsets/x", "b", 3, ks[:3], nil)
	commit(t, tx)
	tx = begin(t, st)
	writeDelta(t, tx, "subsets/x", "d", 3, []string{ks[4]}, []string{ks[1]})
	commit(t, tx)
	sn2 := snap(t, st)
	wantKeys(t, "merged subsets/x", docKeys(readDocs(t, sn2, "subsets/x", nil)), []string{ks[0], ks[2], ks[4]})
	if lt, err := pillar.LayeredTables(ctx, sn2); err != nil || !slices.Equal(lt, []string{"docs", "subsets/x"}) {
		t.Errorf("layered tables: %v %v, want docs and subsets/x", lt, err)
	}
	// Rows out of order are refused.
	tx = begin(t, st)
	defer tx.Abort()
	w, err := pillar.WriteDelta(ctx, tx, "docs", pillar.Doc{}, -1)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Put(&pillar.Doc{PageKey: ks[5]}); err != nil {
		t.Fatal(err)
	}
	if err := w.Put(&pillar.Doc{PageKey: ks[4]}); err == nil {
		t.Error("a delta row out of page_key order was accepted")
	}
	w.Close()
}

func testLayeredReplace(t *testing.T, st pillar.Store) {
	ks := sortedKeys(6)
	tx := begin(t, st)
	writeDocs(t, tx, "docs", &pillar.WriteOptions{SortedBy: []string{"page_key"}}, "b", ks[:4]...)
	commit(t, tx)
	tx = begin(t, st)
	writeDelta(t, tx, "docs", "d1", 5, []string{ks[4]}, nil)
	commit(t, tx)

	// Append onto a layered table is refused, naming it.
	tx = begin(t, st)
	if _, err := tx.WriteTable(ctx, "docs", pillar.Doc{}, &pillar.WriteOptions{Mode: pillar.Append}); err == nil {
		t.Error("append onto a layered table was accepted")
	}
	tx.Abort()

	// Two deltas begun from one state: the second committer conflicts.
	a, b := begin(t, st), begin(t, st)
	writeDelta(t, a, "docs", "a", -1, []string{ks[5]}, nil)
	writeDelta(t, b, "docs", "b2", -1, []string{ks[0]}, nil)
	commit(t, a)
	if err := b.Commit(ctx); !errors.Is(err, pillar.ErrConflict) {
		t.Errorf("second delta from the same state: %v, want ErrConflict", err)
	}

	// A Replace begun before a delta committed conflicts with it.
	r := begin(t, st)
	d := begin(t, st)
	writeDelta(t, d, "docs", "d3", -1, []string{ks[1]}, nil)
	commit(t, d)
	writeDocs(t, r, "docs", &pillar.WriteOptions{SortedBy: []string{"page_key"}}, "r", ks[:2]...)
	if err := r.Commit(ctx); !errors.Is(err, pillar.ErrConflict) {
		t.Errorf("replace racing a delta: %v, want ErrConflict", err)
	}

	// A Replace drops every layer: the table is exactly its rows.
	tx = begin(t, st)
	writeDocs(t, tx, "docs", &pillar.WriteOptions{SortedBy: []string{"page_key"}}, "r", ks[:2]...)
	commit(t, tx)
	sn := snap(t, st)
	wantKeys(t, "replaced docs", docKeys(readDocs(t, sn, "docs", nil)), ks[:2])
	if ls, _ := pillar.Layers(ctx, sn, "docs"); len(ls) != 1 {
		t.Errorf("layers after a replace: %+v, want the base only", ls)
	}
	// Deltas go on after it with new seqs.
	tx = begin(t, st)
	if d := writeDelta(t, tx, "docs", "d4", 3, []string{ks[3]}, nil); d.Seq <= 3 {
		t.Errorf("delta after a replace got seq %d, want after 3", d.Seq)
	}
	commit(t, tx)
	// Drop drops the layers too.
	tx = begin(t, st)
	if err := tx.DropTable(ctx, "docs"); err != nil {
		t.Fatal(err)
	}
	commit(t, tx)
	sn = snap(t, st)
	tabs, err := sn.Tables(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range tabs {
		if ti.Name == "docs" || len(ti.Name) > len(pillar.LayerDir) && ti.Name[:len(pillar.LayerDir)] == pillar.LayerDir {
			t.Errorf("after dropping docs, table %s remains", ti.Name)
		}
	}
}

// testCompactKeepsSnapshots: Compact folds the deltas into a new base that
// reads the same; a snapshot opened before keeps reading its layers after
// the compaction and more commits; an unknown table is named; a table with
// no delta is left alone; AutoCompact waits for more than MaxLayers.
func testCompactKeepsSnapshots(t *testing.T, st pillar.Store) {
	ks := sortedKeys(12)
	tx := begin(t, st)
	writeDelta(t, tx, "docs", "b", 10, ks[:10], nil)
	commit(t, tx)
	for i := 0; i < 3; i++ {
		tx = begin(t, st)
		writeDelta(t, tx, "docs", fmt.Sprintf("d%d", i), -1, []string{ks[i], ks[10+i%2]}, []string{ks[5+i]})
		commit(t, tx)
	}
	// AutoCompact with MaxLayers 3 does nothing: 3 deltas.
	if cs, err := pillar.AutoCompact(ctx, st, "docs", &pillar.CompactOptions{MaxLayers: 3}); err != nil || cs != nil {
		t.Fatalf("AutoCompact at 3 deltas, max 3: %+v %v", cs, err)
	}
	old := snap(t, st)
	want := readDocs(t, old, "docs", nil)
	var progress int64
	cs, err := pillar.Compact(ctx, st, "docs", &pillar.CompactOptions{Progress: func(done, _ int64) { progress = done }})
	if err != nil {
		t.Fatal(err)
	}
	if cs.Layers != 3 || cs.Rows != int64(len(want)) || progress != cs.Rows {
		t.Errorf("compaction: %+v (progress %d), want 3 deltas folded into %d rows", cs, progress, len(want))
	}
	sn := snap(t, st)
	got := readDocs(t, sn, "docs", nil)
	if !slices.Equal(got, want) {
		t.Errorf("after compaction docs reads %s, before %s", docTags(got), docTags(want))
	}
	if ls, _ := pillar.Layers(ctx, sn, "docs"); len(ls) != 1 {
		t.Errorf("layers after compaction: %+v, want the base only", ls)
	}
	// More commits (and whatever cleanup they trigger) later, the old
	// snapshot still reads its layers.
	for i := 0; i < 6; i++ {
		tx = begin(t, st)
		writeDocs(t, tx, fmt.Sprintf("churn%d", i), nil, "c", ks[0])
		commit(t, tx)
	}
	if _, err := pillar.Compact(ctx, st, "docs", nil); err != nil {
		t.Fatal(err)
	}
	if got := readDocs(t, old, "docs", nil); !slices.Equal(got, want) {
		t.Errorf("the snapshot opened before the compaction reads %s, want %s", docTags(got), docTags(want))
	}
	if _, err := pillar.Compact(ctx, st, "nosuch", nil); !errors.Is(err, pillar.ErrNotFound) || !strings.Contains(err.Error(), `"nosuch"`) {
		t.Errorf("compacting an unknown table: %v, want ErrNotFound naming it", err)
	}

	// A delta committed while a compaction writes is not lost: the
	// compaction conflicts, starts over and folds it too; with no retry it
	// fails with ErrConflict and the store keeps every delta.
	race := func(retries int) error {
		tx := begin(t, st)
		writeDelta(t, tx, "docs", "pre", -1, []string{ks[8]}, nil)
		commit(t, tx)
		raced := false
		_, err := pillar.Compact(ctx, st, "docs", &pillar.CompactOptions{Retries: retries, Point: func(p string) {
			if p == "written" && !raced {
				raced = true
				tx := begin(t, st)
				writeDelta(t, tx, "docs", "raced", -1, []string{ks[9]}, nil)
				commit(t, tx)
			}
		}})
		return err
	}
	if err := race(0); err != nil {
		t.Fatalf("compaction racing a delta: %v", err)
	}
	sn = snap(t, st)
	if ls, _ := pillar.Layers(ctx, sn, "docs"); len(ls) != 1 {
		t.Errorf("after a compaction that raced a delta: layers %+v, want the base only", ls)
	}
	if got := docTags(readDocs(t, sn, "docs", nil)); !strings.Contains(got, "raced") || !strings.Contains(got, "pre") {
		t.Errorf("after a compaction that raced a delta, docs reads %s: a delta was lost", got)
	}
	if err := race(-1); !errors.Is(err, pillar.ErrConflict) {
		t.Errorf("compaction racing a delta without retries: %v, want ErrConflict", err)
	}
	if ls, _ := pillar.Layers(ctx, snap(t, st), "docs"); pillar.Deltas(ls) != 2 {
		t.Errorf("after a failed compaction: %d deltas, want the 2 written", pillar.Deltas(ls))
	}
}
