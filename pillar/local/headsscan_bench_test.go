package local

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/pillarkit/pillar/pillar"
)

// BenchmarkHeadsScanSmallSegments reads every head of a queue of the shape
// `pillar bench lorry` makes (its republish commits 128 records over 8
// partitions: segments of 16 records of 50 KB), as Lorry's first head scan
// does. The cost is per segment (open, footer, heads check, reader), not per
// head: 18.7 µs/head here on 2026-12-02 (about 300 µs per 16-record segment),
// which is why the 200k run's first head scan takes ~5 s.
//
//	go test -run '^$' -bench HeadsScanSmallSegments -benchtime 5x ./pillar/local/
func BenchmarkHeadsScanSmallSegments(b *testing.B) {
	ctx := context.Background()
	st, err := Create(filepath.Join(b.TempDir(), "store"), &Options{Partitions: 1})
	if err != nil {
		b.Fatal(err)
	}
	val := make([]byte, 50<<10)
	const commits = 300
	for c := 0; c < commits; c++ {
		tx, _ := st.Begin(ctx)
		for i := 0; i < 16; i++ {
			k := pillar.KeyOfNormalized(fmt.Sprintf("https://bench.example/%d/%d", c, i))
			val[0] = byte(i)
			if err := tx.Enqueue(ctx, pillar.ExportRecord{Partition: 0, PageKey: k.String(), Op: pillar.OpPut, Value: val, Priority: pillar.PriorityBulk}); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		sn, err := st.Snapshot(ctx)
		if err != nil {
			b.Fatal(err)
		}
		hr := sn.(pillar.QueueHeadReader)
		n := 0
		for from := int64(0); from < commits*16; {
			hs, err := hr.ReadQueueHeads(ctx, 0, from, 4096)
			if err != nil {
				b.Fatal(err)
			}
			from += int64(len(hs))
			n += len(hs)
		}
		if n != commits*16 {
			b.Fatal(n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*commits*16), "µs/head")
}
