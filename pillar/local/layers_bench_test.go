package local

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pillarkit/pillar/pillar"
)

// benchLayered makes docs of n ~4 KB rows as a base plus one delta of n/1000
// changed rows; layered false leaves the base alone.
func benchLayered(b *testing.B, n int, layered bool) *Store {
	b.Helper()
	st, err := Create(filepath.Join(b.TempDir(), "store"), &Options{Partitions: 4})
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, n)
	for i := range keys {
		k, _, _ := pillar.KeyOfURL(fmt.Sprintf("http://bench.example/%d", i))
		keys[i] = k.String()
	}
	slices.Sort(keys)
	text := strings.Repeat("lorem ipsum dolor sit amet, consectetur adipiscing elit ", 70)
	write := func(ks []string, tag string) {
		tx, _ := st.Begin(context.Background())
		w, err := pillar.WriteDelta(context.Background(), tx, "docs", pillar.Doc{}, int64(n))
		if err != nil {
			b.Fatal(err)
		}
		for i, k := range ks {
			if err := w.Put(&pillar.Doc{PageKey: k, Title: tag, Text: fmt.Sprint(i, text)}); err != nil {
				b.Fatal(err)
			}
		}
		w.Close()
		if err := tx.Commit(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	write(keys, "base")
	if layered {
		var ch []string
		for i := 0; i < n; i += 1000 {
			ch = append(ch, keys[i])
		}
		write(ch, "delta")
	}
	return st
}

type docHead struct {
	PageKey     string `parquet:"page_key"`
	ContentHash string `parquet:"content_hash"`
	Version     int64  `parquet:"version"`
}

func benchHeads(b *testing.B, st *Store) {
	ctx := context.Background()
	sn, _ := st.Snapshot(ctx)
	defer sn.Release()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rr, err := sn.ReadTable(ctx, "docs", nil)
		if err != nil {
			b.Fatal(err)
		}
		rows := 0
		for rr.Next() {
			var d docHead
			if err := rr.Scan(&d); err != nil {
				b.Fatal(err)
			}
			rows++
		}
		rr.Close()
		b.ReportMetric(float64(rows), "rows/op")
	}
}

func benchRead(b *testing.B, st *Store, r *pillar.Range, keysOnly bool) {
	ctx := context.Background()
	sn, _ := st.Snapshot(ctx)
	defer sn.Release()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var rr pillar.RowReader
		var err error
		if keysOnly {
			rr, err = sn.(*snapshot).RawReadKeys(ctx, "docs", r)
		} else {
			rr, err = sn.ReadTable(ctx, "docs", r)
		}
		if err != nil {
			b.Fatal(err)
		}
		rows := 0
		for rr.Next() {
			if keysOnly {
				var k pillar.DeletedKey
				rr.Scan(&k)
			} else {
				var d pillar.Doc
				rr.Scan(&d)
			}
			rows++
		}
		if err := rr.Err(); err != nil {
			b.Fatal(err)
		}
		rr.Close()
		b.ReportMetric(float64(rows), "rows/op")
	}
}

// BenchmarkLayeredRead: docs of 20k ~4 KB rows read whole as a plain table
// (base), through the merge of base + a 0.1% delta (layered), the page_key
// column alone (keys), and the last quarter of the merged rows (a range).
func BenchmarkLayeredRead(b *testing.B) {
	const n = 20000
	plain, layered := benchLayered(b, n, false), benchLayered(b, n, true)
	b.Run("base", func(b *testing.B) { benchRead(b, plain, nil, false) })
	b.Run("layered", func(b *testing.B) { benchRead(b, layered, nil, false) })
	b.Run("keys", func(b *testing.B) { benchRead(b, plain, nil, true) })
	b.Run("layered-heads", func(b *testing.B) { benchHeads(b, layered) })
	b.Run("base-last-quarter", func(b *testing.B) { benchRead(b, plain, &pillar.Range{Start: 3 * n / 4, End: n}, false) })
	b.Run("layered-last-quarter", func(b *testing.B) { benchRead(b, layered, &pillar.Range{Start: 3 * n / 4, End: n}, false) })
}
