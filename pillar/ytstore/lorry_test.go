package ytstore

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/objstore"
	"github.com/pillarkit/pillar/lorry"
	"github.com/pillarkit/pillar/pillar"
)

// controlRegistry registers batches straight in a control-plane database
// (SQLite here): lorry.Registry without the gRPC hop.
type controlRegistry struct{ db *control.Store }

func (r controlRegistry) RegisterBatch(ctx context.Context, m *batch.Manifest) (int64, error) {
	seq, _, err := r.db.RegisterBatch(ctx, m, time.Now())
	return seq, err
}

// TestLorryDrainsTheQueue: Lorry delivers this store's export queue (over
// the FAKE cluster) as it does the embedded one's: every record in a
// registered batch, its partition positions kept in store attributes by
// compare-and-swap commits, and a second drain picks up where the first
// stopped.
func TestLorryDrainsTheQueue(t *testing.T) {
	ctx := context.Background()
	s, _ := newFakeStore(t)
	const parts = 4
	dir := t.TempDir()
	objs, err := objstore.OpenLocal(filepath.Join(dir, "objects"))
	if err != nil {
		t.Fatal(err)
	}
	db, err := control.OpenStore(ctx, "sqlite:"+filepath.Join(dir, "control.db"), &control.StoreOptions{Partitions: parts})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	enqueue := func(round, n int) {
		tx, err := s.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			k, _, _ := pillar.KeyOfURL(fmt.Sprintf("http://lorry.example/%d/%d", round, i))
			r := pillar.ExportRecord{Partition: int32(k.Partition(parts)), PageKey: k.String(), Op: pillar.OpPut, Value: []byte(fmt.Sprintf("value %d/%d", round, i)), Cause: "test"}
			if i%5 == 4 {
				r.Op, r.Value = pillar.OpDelete, nil
			}
			if err := tx.Enqueue(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	drain := func(id string) {
		w, err := lorry.New(lorry.Options{Store: s, Objects: objs, Registry: controlRegistry{db}, ID: id,
			MaxBatchAge: 10 * time.Millisecond, PollInterval: 5 * time.Millisecond, LeaseTTL: 5 * time.Second,
			RetryMin: 5 * time.Millisecond, RetryMax: 50 * time.Millisecond, TempDir: filepath.Join(dir, "tmp"), CleanupInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		dctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		res, err := w.Drain(dctx)
		if err != nil {
			t.Fatalf("drain: %v", err)
		}
		if len(res.Delivered) != parts {
			t.Fatalf("drain delivered partitions %v, skipped %v", res.Delivered, res.Skipped)
		}
	}
	check := func(want int64) {
		st, err := lorry.Status(ctx, s, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		var total int64
		for _, ps := range st {
			if ps.Committed != ps.QueueEnd || ps.Depth != 0 || ps.Owner != "" {
				t.Fatalf("partition %d after drain: %+v", ps.Partition, ps)
			}
			if ps.QueueEnd > 0 && ps.Seq == 0 {
				t.Fatalf("partition %d: records delivered but no batch registered: %+v", ps.Partition, ps)
			}
			total += ps.Delivered
		}
		if total != want {
			t.Fatalf("delivered %d records, want %d", total, want)
		}
	}
	enqueue(1, 40)
	enqueue(2, 25)
	drain("w1")
	check(65)
	enqueue(3, 30)
	drain("w2")
	check(95)
}
