package local

import (
	"math/rand/v2"
	"testing"

	"github.com/pillarkit/pillar/pillar"
)

// TestQueueSegmentNoValueBounds: a segment of incompressible 50 KB values
// is about the size of its values, and its heads (what a heads read reads
// and checks) a few KB a row group: the value column has no page bounds or
// statistics. With them, each data page header would carry the page's
// smallest and largest value (twice), and the column index and the footer
// once more each: 2,500 KB of values made a 5,109 KB segment whose heads
// were 407 KB (without them 2,506 KB and 5 KB).
func TestQueueSegmentNoValueBounds(t *testing.T) {
	dir := t.TempDir()
	s, err := Create(dir, &Options{Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.NewChaCha8([32]byte{11})
	var values int64
	for range 50 {
		v := make([]byte, 50<<10)
		rng.Read(v)
		values += int64(len(v))
		if err := tx.Enqueue(ctx, pillar.ExportRecord{Partition: 0, PageKey: keyOfPartition(0, 1), Op: pillar.OpPut, Value: v}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	m, _ := s.current()
	seg := m.Queue[0].Segments[0]
	start, _, heads := segmentHeads(t, dir, seg)
	t.Logf("%d KB of values: segment %d KB, heads %d KB, footer %d KB", values>>10, seg.Bytes>>10, heads>>10, (seg.Bytes-start)>>10)
	if seg.Bytes > values*11/10 {
		t.Errorf("segment of %d KB for %d KB of incompressible values (more than 1.1x): value bounds or statistics written", seg.Bytes>>10, values>>10)
	}
	if heads > 32<<10 {
		t.Errorf("heads of %d KB in a segment of 3 row groups: a heads read reads value bounds", heads>>10)
	}
}
