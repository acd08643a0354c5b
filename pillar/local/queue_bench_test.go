package local

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/pillarkit/pillar/pillar"
)

// BenchmarkCommitOverQueueSegments: an attribute-only commit (what Lorry's
// state changes are) while the export queue holds n segments (one per
// partition per enqueuing commit: 100 fresh updates a second in commits of
// 100 ms make 80 a second over 8 partitions). Every commit writes the
// manifest, which names every segment, and every few commits cleanup reads
// the retained manifests.
//
//	go test -run XXX -bench CommitOverQueueSegments ./pillar/local/
func BenchmarkCommitOverQueueSegments(b *testing.B) {
	for _, n := range []int{8, 2000, 8000, 32000} {
		b.Run(fmt.Sprintf("segments=%d", n), func(b *testing.B) {
			ctx := context.Background()
			st, err := Create(filepath.Join(b.TempDir(), "store"), &Options{Partitions: 8, RetainFor: time.Millisecond})
			if err != nil {
				b.Fatal(err)
			}
			tx, _ := st.Begin(ctx)
			for p := 0; p < 8; p++ {
				for i := 0; ; i++ {
					k := pillar.KeyOfNormalized(fmt.Sprintf("https://bench.example/%d", i))
					if k.Partition(8) == p {
						if err := tx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(p), PageKey: k.String(), Op: pillar.OpPut, Value: make([]byte, 1024)}); err != nil {
							b.Fatal(err)
						}
						break
					}
				}
			}
			if err := tx.Commit(ctx); err != nil {
				b.Fatal(err)
			}
			// n segments: each partition's one segment file named n/8
			// times, at consecutive offsets (what matters is the
			// manifest's size, not the files').
			m, err := st.current()
			if err != nil {
				b.Fatal(err)
			}
			nm := m.clone()
			for p, q := range nm.Queue {
				seg := q.Segments[0]
				q.Segments = q.Segments[:0]
				for i := 0; i < n/8; i++ {
					s := seg
					s.First = int64(i)
					q.Segments = append(q.Segments, s)
				}
				nm.Queue[p] = q
			}
			nm.Generation++
			if err := writeJSONAtomic(st.opts.FS, filepath.Join(st.dir, "manifests", manifestName(nm.Generation)), nm); err != nil {
				b.Fatal(err)
			}
			if err := writeCurrent(st, manifestName(nm.Generation)); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				tx, err := st.Begin(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := tx.SetAttr(ctx, "lorry/partition/p00001", map[string]int{"offset": i}); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/commit")
		})
	}
}
