package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pillarkit/pillar/pillar"
)

// BenchmarkCommitOverQueueSegments: a commit of Lorry's kind while the
// export queue holds n segments (one per partition per enqueuing commit:
// 100 fresh updates a second in commits of 100 ms make 80 a second over 8
// partitions). op=attr is an attribute-only commit (Lorry's state
// changes), op=enqueue one that also queues a record (the fresh
// producer's). Each segment is a file of its own in data/ (hard links of
// one small segment), as in a real queue; the store starts from a manifest
// that names all of them itself (the format before the queue index), and
// one commit runs before the timer starts (the new code moves the long
// tail into an index file then). max-ms is the slowest commit (with
// op=enqueue a merge of index files lands in some).
//
//	go test -run '^$' -bench CommitOverQueueSegments ./pillar/local/
func BenchmarkCommitOverQueueSegments(b *testing.B) {
	for _, n := range []int{8, 2000, 8000, 32000} {
		for _, op := range []string{"attr", "enqueue"} {
			b.Run(fmt.Sprintf("segments=%d/op=%s", n, op), func(b *testing.B) {
				benchCommitOverSegments(b, n, op == "enqueue")
			})
		}
	}
}

func benchCommitOverSegments(b *testing.B, n int, enqueue bool) {
	ctx := context.Background()
	st, err := Create(filepath.Join(b.TempDir(), "store"), &Options{Partitions: 8, RetainFor: time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, 8)
	for p := 0; p < 8; p++ {
		for i := 0; ; i++ {
			k := pillar.KeyOfNormalized(fmt.Sprintf("https://bench.example/%d", i))
			if k.Partition(8) == p {
				keys[p] = k.String()
				break
			}
		}
	}
	tx, _ := st.Begin(ctx)
	for p := 0; p < 8; p++ {
		if err := tx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(p), PageKey: keys[p], Op: pillar.OpPut, Value: make([]byte, 1024)}); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		b.Fatal(err)
	}
	// n segments: n/8 per partition at consecutive offsets, each a hard
	// link of the partition's one segment file.
	m, err := st.current()
	if err != nil {
		b.Fatal(err)
	}
	nm := m.clone()
	data := filepath.Join(st.dir, "data")
	for p, q := range nm.Queue {
		seg := q.Segments[0]
		q.Segments = q.Segments[:0]
		for i := 0; i < n/8; i++ {
			s := seg
			s.First = int64(i)
			if i > 0 {
				s.File = fmt.Sprintf("%s-%06d.parquet", seg.File, i)
				if err := os.Link(filepath.Join(data, seg.File), filepath.Join(data, s.File)); err != nil {
					b.Fatal(err)
				}
			}
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
	commit := func(i int) {
		tx, err := st.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := tx.SetAttr(ctx, "lorry/partition/p00001", map[string]int{"offset": i}); err != nil {
			b.Fatal(err)
		}
		if enqueue {
			p := (i + 8) % 8
			if err := tx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(p), PageKey: keys[p], Op: pillar.OpPut, Value: make([]byte, 1024)}); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
	commit(-1)
	b.ResetTimer()
	var worst time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		commit(i)
		worst = max(worst, time.Since(t0))
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/commit")
	b.ReportMetric(float64(worst.Microseconds())/1000, "max-ms")
}
