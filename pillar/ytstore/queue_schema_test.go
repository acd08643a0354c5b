package ytstore

import (
	"context"
	"testing"
	"time"

	"go.ytsaurus.tech/yt/go/schema"

	"github.com/pillarkit/pillar/pillar"
)

// TestQueueMadeBeforePriority: a store whose queue tables were created
// before export records had a priority and a publication (a strict schema
// without those columns, with rows already in it) takes records that carry
// them: the commit adds the columns (alter_table), the old rows read as ""
// (fresh, the legacy publication) and the new ones as written.
func TestQueueMadeBeforePriority(t *testing.T) {
	ctx := context.Background()
	s, yc := newFakeStore(t)
	p := 0
	var old schema.Schema
	for _, c := range queueSchema().Columns {
		if c.Name != "priority" && c.Name != "publication" {
			old.Columns = append(old.Columns, c)
		}
	}
	if len(old.Columns) != len(queueSchema().Columns)-2 {
		t.Fatalf("queue schema %v: want priority and publication columns", queueSchema())
	}
	if err := yc.SetNode(ctx, queuePath(s.root, p).Attr("schema"), old, nil); err != nil {
		t.Fatal(err)
	}
	key := func(i int) pillar.Key {
		for j := 0; ; j++ {
			k := pillar.KeyOfNormalized("https://example.org/q/" + string(rune('a'+i)) + string(rune('a'+j%26)))
			if k.Partition(4) == p {
				return k
			}
		}
	}
	enqueue := func(r pillar.ExportRecord) error {
		s2, err := Open(ctx, yc, s.root, &Options{PollInterval: time.Millisecond}) // a process that has not checked yet
		if err != nil {
			return err
		}
		tx, err := s2.Begin(ctx)
		if err != nil {
			return err
		}
		if err := tx.Enqueue(ctx, r); err != nil {
			tx.Abort()
			return err
		}
		return tx.Commit(ctx)
	}
	// The old writer's row (no priority, no publication): the old schema
	// takes it, and the table is no longer empty.
	s.queueSchemaOK.Store(p, true) // as an old binary: no check
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(p), PageKey: key(0).String(), Op: pillar.OpPut, Value: []byte("old")}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := enqueue(pillar.ExportRecord{Partition: int32(p), PageKey: key(1).String(), Op: pillar.OpPut, Value: []byte("new"),
		Priority: pillar.PriorityBulk, Publication: "c2/hash-d8-bbbb"}); err != nil {
		t.Fatalf("enqueue a bulk record into a queue made before priorities: %v", err)
	}
	sn, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	recs, err := sn.ReadQueue(ctx, p, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Priority != "" || recs[0].IsBulk() || recs[1].Priority != pillar.PriorityBulk || recs[1].Publication != "c2/hash-d8-bbbb" {
		t.Fatalf("queue %+v: want the old record (no priority: fresh) and the bulk one", recs)
	}
}
