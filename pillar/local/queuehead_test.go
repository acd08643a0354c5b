package local

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/pillarkit/pillar/pillar"
)

// TestQueueHeadsAndPriority: ReadQueueHeads returns ReadQueue's records
// without values, priorities survive a commit, and a segment written before
// records had a priority column reads back with Priority "".
func TestQueueHeadsAndPriority(t *testing.T) {
	dir := t.TempDir()
	s := mustCreate(t, dir)
	defer s.Close()
	key := func(p int) string {
		for i := 0; ; i++ {
			k := pillar.KeyOfNormalized(fmt.Sprintf("http://x/%d", i))
			if k.Partition(4) == p {
				return k.String()
			}
		}
	}
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	k := key(1)
	for i, pr := range []string{pillar.PriorityBulk, pillar.PriorityFresh, ""} {
		if err := tx.Enqueue(ctx, pillar.ExportRecord{Partition: 1, PageKey: k, Op: pillar.OpPut, Value: bytes.Repeat([]byte{byte(i)}, 100), Priority: pr}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Enqueue(ctx, pillar.ExportRecord{Partition: 1, PageKey: k, Op: pillar.OpPut, Priority: "urgent"}); err == nil {
		t.Fatal("priority \"urgent\" accepted")
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	sn, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	full, err := sn.ReadQueue(ctx, 1, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	heads, err := sn.(pillar.QueueHeadReader).ReadQueueHeads(ctx, 1, 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(full) != 3 || len(heads) != 2 {
		t.Fatalf("ReadQueue %d records, ReadQueueHeads from 1: %d", len(full), len(heads))
	}
	for i, h := range heads {
		f := full[i+1]
		if h.Value != nil || h.Offset != f.Offset || h.PageKey != f.PageKey || h.Op != f.Op || h.Priority != f.Priority || h.CommittedAt != f.CommittedAt || h.CommittedAt == 0 {
			t.Errorf("head %+v, record %+v", h, f)
		}
	}
	if full[0].Priority != pillar.PriorityBulk || full[1].Priority != pillar.PriorityFresh || full[2].Priority != "" || len(full[0].Value) != 100 {
		t.Errorf("priorities %q %q %q", full[0].Priority, full[1].Priority, full[2].Priority)
	}

	// A segment file of the format before priorities.
	type oldRecord struct {
		Partition   int32  `parquet:"partition"`
		Offset      int64  `parquet:"offset"`
		PageKey     string `parquet:"page_key"`
		Op          string `parquet:"op"`
		Value       []byte `parquet:"value"`
		Cause       string `parquet:"cause"`
		CommittedAt int64  `parquet:"committed_at"`
	}
	path := filepath.Join(dir, "data", "old.parquet")
	if err := parquet.WriteFile(path, []oldRecord{{Partition: 1, PageKey: k, Op: pillar.OpPut, Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	seg := segment{File: "old.parquet", Count: 1, Bytes: st.Size()} // and no checksum, as then
	old, err := readQueueSegment[pillar.ExportRecord](ctx, s, seg, 0, 10, false)
	if err != nil || len(old) != 1 || old[0].Priority != "" || string(old[0].Value) != "v" {
		t.Fatalf("old segment: %+v %v", old, err)
	}
	oh, err := readQueueSegment[queueHead](ctx, s, seg, 0, 10, true)
	if err != nil || len(oh) != 1 || oh[0].PageKey != k {
		t.Fatalf("old segment heads: %+v %v", oh, err)
	}
}
