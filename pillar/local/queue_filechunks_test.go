package local

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/pillarkit/pillar/pillar"
)

// TestQueueSegmentBoundsFileChunks: the per-file metadata bound covers
// queue segments as well as table files. A transaction that
// enqueues more than spillBytes writes one segment file per partition
// (spool.go), a row group every 1 MiB, however many records: its writer
// keeps every row group's metadata until the commit, and every ReadQueue
// or ReadQueueHeads call of the segment decodes the whole footer and page
// index again (readQueueSegment opens it per call). A republish of 200k
// records of 50 KB (doc.go's own example) is ~10 GB in 16 partitions:
// ~600 row groups x 9 columns per segment. Here 1 partition and 40 MiB of
// records: one segment of 80 row groups (8 records each), 720 column chunks, more than
// maxFileChunks. A spool goes on in a new segment of its partition at the
// bound (the segments of one commit follow each other in the partition,
// offsets unchanged).
func TestQueueSegmentBoundsFileChunks(t *testing.T) {
	dir := t.TempDir()
	s, err := Create(dir, &Options{Partitions: 1, spillBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 640
	rng := rand.New(rand.NewPCG(1, 2))
	key := func(i int64) string { return pillar.KeyOfNormalized(fmt.Sprintf("https://q.example/%d", i)).String() }
	for i := range n {
		v := make([]byte, 64<<10) // incompressible
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		if err := tx.Enqueue(ctx, pillar.ExportRecord{Partition: 0, PageKey: key(int64(i)), Op: pillar.OpPut, Value: v}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := s.current()
	if err != nil {
		t.Fatal(err)
	}
	segs := m.Queue[0].Segments
	var count int64
	for _, sg := range segs {
		groups, chunks := fileChunks(t, filepath.Join(dir, "data", sg.File))
		t.Logf("segment %s: %d records, %d row groups, %d column chunks", sg.File, sg.Count, groups, chunks)
		if chunks > maxFileChunks {
			t.Errorf("queue segment %s holds %d column chunks (%d row groups), more than %d: its writer kept them all until the commit, and each read of it decodes them all", sg.File, chunks, groups, maxFileChunks)
		}
		count += sg.Count
	}
	if count != n {
		t.Fatalf("segments hold %d records, want %d", count, n)
	}
	// The records are all there, in order, from any offset.
	sn, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	for _, from := range []int64{0, 300, n - 3} {
		recs, err := sn.(*snapshot).ReadQueueHeads(ctx, 0, from, n)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(recs)) != n-from {
			t.Fatalf("from %d: %d heads, want %d", from, len(recs), n-from)
		}
		for i, r := range recs {
			if want := key(from + int64(i)); r.PageKey != want || r.Offset != from+int64(i) {
				t.Fatalf("from %d: head %d is %q at offset %d, want %q at %d", from, i, r.PageKey, r.Offset, want, from+int64(i))
			}
		}
	}
}
