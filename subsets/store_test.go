package subsets

import (
	"context"
	"slices"
	"testing"

	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/local"
)

// TestDiffOverStoreTables writes two generations of a subset to the embedded
// store (the real backend) and diffs them through ReadMembers and DiffSeq,
// the way a recompute does.
func TestDiffOverStoreTables(t *testing.T) {
	ctx := context.Background()
	st, err := local.Create(t.TempDir(), &local.Options{Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tx, err := st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, keys := range map[string][]string{
		"subsets/fresh@1": {"01", "02", "04"},
		"subsets/fresh@2": {"02", "03", "04", "05"},
	} {
		w, err := tx.WriteTable(ctx, name, pillar.SubsetMember{}, &pillar.WriteOptions{SortedBy: []string{"page_key"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range members(keys...) {
			if err := w.Write(m); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	snap, err := st.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	rOld, err := snap.ReadTable(ctx, "subsets/fresh@1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rOld.Close()
	rNew, err := snap.ReadTable(ctx, "subsets/fresh@2", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rNew.Close()
	oldSeq, oldErr := ReadMembers(rOld)
	newSeq, newErr := ReadMembers(rNew)
	var got []string
	byPage := map[string][]Change{}
	for c, err := range DiffSeq("fresh", oldSeq, newSeq) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, c.Kind.String()+" "+c.PageKey)
		byPage[c.PageKey] = append(byPage[c.PageKey], c)
	}
	if err := oldErr(); err != nil {
		t.Fatal(err)
	}
	if err := newErr(); err != nil {
		t.Fatal(err)
	}
	want := []string{"leave 01", "stay 02", "enter 03", "stay 04", "enter 05"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	exported := func(string) bool { return true }
	for key, op := range map[string]string{"01": pillar.OpDelete, "02": "", "03": pillar.OpPut, "05": pillar.OpPut} {
		if d := Decide(key, byPage[key], exported, exported, false); d.Op != op {
			t.Errorf("%s: %q, want %q (%s)", key, d.Op, op, d.Cause)
		}
	}
	if d := Decide("04", byPage["04"], exported, exported, true); d.Op != pillar.OpPut {
		t.Errorf("04 changed: %+v", d)
	}
}
