package lorry

import (
	"context"
	"slices"
	"testing"
)

// UndeliveredBefore names the partitions with queue records below the
// given ends until a drain delivers them.
func TestUndeliveredBefore(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 3)
	var recs []rec
	for _, k := range append(keysIn(2, 0, 3), keysIn(1, 2, 3)...) {
		recs = append(recs, rec{key: k, val: "v"})
	}
	e.enqueue(recs...)
	sn, err := e.store.Snapshot(ctx)
	must(t, err)
	ends := make([]int64, 3)
	for p := range ends {
		ends[p], err = sn.QueueEnd(ctx, p)
		must(t, err)
	}
	sn.Release()
	got, err := UndeliveredBefore(ctx, e.store, ends)
	must(t, err)
	if !slices.Equal(got, []int{0, 2}) {
		t.Fatalf("before the drain: %v, want [0 2]", got)
	}
	_, err = e.worker(e.opts("w1")).Drain(ctx)
	must(t, err)
	if got, err = UndeliveredBefore(ctx, e.store, ends); err != nil || len(got) != 0 {
		t.Fatalf("after the drain: %v %v", got, err)
	}
}
