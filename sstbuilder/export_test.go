package sstbuilder

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/pillar"
)

// writeExport writes an export of n keys per partition (with some repeated
// versions and, for a delta, deletes) and returns the newest row per key.
func writeExport(t testing.TB, dir string, parts, n int, kind string, empty map[int]bool) (*ExportMeta, map[string]ExportRow) {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 7))
	w, err := NewExportWriter(dir, parts, kind, &ExportOptions{ID: "exp-test", Source: "test", Now: fixedNow, RowGroupRows: 16})
	if err != nil {
		t.Fatal(err)
	}
	if kind == batch.KindSnapshot {
		w.SetQueueEnds(make([]int64, parts))
	}
	newest := map[string]ExportRow{}
	for p := range parts {
		if empty[p] {
			continue
		}
		for i, k := range pageKeys(n, p, parts) {
			hk := hex.EncodeToString(k)
			for v := range 1 + i%2 {
				row := ExportRow{PageKey: hk, Seq: int64(v + 1), Op: pillar.OpPut, Value: pageValue(rng, "https://example.com/"+hk, 2, 200, 32)}
				if kind == batch.KindDelta && i%5 == 4 && v == 0 {
					row.Op, row.Value = pillar.OpDelete, nil
				}
				if err := w.Write(row); err != nil {
					t.Fatal(err)
				}
				newest[hk] = row
			}
		}
	}
	meta, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	return meta, newest
}

func TestExportRoundTrip(t *testing.T) {
	dir := t.TempDir()
	meta, newest := writeExport(t, dir, 3, 40, batch.KindDelta, map[int]bool{1: true})
	got, err := ReadExportMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != "exp-test" || got.Partitions != 3 || got.Kind != batch.KindDelta || len(got.Files) != 2 || got.Files[1].Partition != 2 {
		t.Fatalf("meta: %+v", got)
	}
	if _, ok := got.File(1); ok {
		t.Fatal("empty partition has a file entry")
	}
	var rows int64
	for p := range 3 {
		r, err := OpenPartition(dir, meta, p)
		if err != nil {
			t.Fatal(err)
		}
		var prev []byte
		seen := map[string]Row{}
		for r.Next() {
			row := r.Row()
			if pillar.Partition(row.Key, 3) != p || bytes.Compare(row.Key, prev) < 0 {
				t.Fatalf("partition %d: row %x out of place", p, row.Key)
			}
			prev = append(prev[:0], row.Key...)
			seen[hex.EncodeToString(row.Key)] = Row{Seq: row.Seq, Delete: row.Delete, Value: bytes.Clone(row.Value)}
			rows++
		}
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
		r.Close()
		for hk, row := range seen {
			want := newest[hk]
			if row.Seq != want.Seq || row.Delete != (want.Op == pillar.OpDelete) || !bytes.Equal(row.Value, want.Value) {
				t.Fatalf("key %s: newest row differs", hk)
			}
		}
		if p == 1 && len(seen) != 0 {
			t.Fatal("empty partition has rows")
		}
	}
	if rows != meta.Files[0].Rows+meta.Files[1].Rows {
		t.Fatalf("read %d rows", rows)
	}
	for _, f := range meta.Files {
		if err := VerifyExportFile(dir, f); err != nil {
			t.Fatal(err)
		}
	}
	// Corruption is caught by the checksum.
	path := filepath.Join(dir, meta.Files[0].Name)
	b, _ := os.ReadFile(path)
	b[len(b)/2] ^= 0xff
	os.WriteFile(path, b, 0o644)
	if err := VerifyExportFile(dir, meta.Files[0]); !errors.Is(err, ErrCorruptExport) {
		t.Fatalf("corrupt file: %v", err)
	}
	// An export directory cannot be written twice.
	if _, err := NewExportWriter(dir, 3, batch.KindDelta, nil); err == nil {
		t.Fatal("second export into the same directory accepted")
	}
}

func TestPartitionWriterRejects(t *testing.T) {
	keys := pageKeys(2, 0, 2)
	other := pageKeys(1, 1, 2)[0]
	hk := hex.EncodeToString
	for _, tc := range []struct {
		name string
		rows []ExportRow
		want error
	}{
		{"out of order", []ExportRow{{PageKey: hk(keys[1]), Op: "put"}, {PageKey: hk(keys[0]), Op: "put"}}, ErrOutOfOrder},
		{"seq not increasing", []ExportRow{{PageKey: hk(keys[0]), Seq: 2, Op: "put"}, {PageKey: hk(keys[0]), Seq: 2, Op: "put"}}, ErrOutOfOrder},
		{"wrong partition", []ExportRow{{PageKey: hk(other), Op: "put"}}, ErrWrongPartition},
		{"upper-case hex", []ExportRow{{PageKey: strings.ToUpper(hk(keys[0])), Op: "put"}}, ErrBadKey},
		{"short key", []ExportRow{{PageKey: "abcd", Op: "put"}}, ErrBadKey},
		{"bad op", []ExportRow{{PageKey: hk(keys[0]), Op: "upsert"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := NewPartitionWriter(t.TempDir(), 0, 2, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Abort()
			for _, r := range tc.rows {
				err = w.Write(r)
			}
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) || !strings.Contains(err.Error(), "partition 0") {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if _, err := w.Close(); err == nil {
				t.Fatal("Close after an error succeeded")
			}
		})
	}
}

func TestExportMetaValidate(t *testing.T) {
	good := ExportMeta{Format: 1, ID: "e1", Partitions: 4, Kind: "delta", Files: []ExportFile{{Partition: 2, Name: "p00002.parquet", Rows: 1, Bytes: 10, SHA256: strings.Repeat("a", 64)}}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*ExportMeta){
		"format":    func(m *ExportMeta) { m.Format = 2 },
		"id":        func(m *ExportMeta) { m.ID = "Bad" },
		"long id":   func(m *ExportMeta) { m.ID = strings.Repeat("a", 121) },
		"parts":     func(m *ExportMeta) { m.Partitions = 0 },
		"kind":      func(m *ExportMeta) { m.Kind = "full" },
		"range":     func(m *ExportMeta) { m.Files[0].Partition = 4 },
		"name":      func(m *ExportMeta) { m.Files[0].Name = "x.parquet" },
		"sha":       func(m *ExportMeta) { m.Files[0].SHA256 = "zz" },
		"duplicate": func(m *ExportMeta) { m.Files = append(m.Files, m.Files[0]) },
	} {
		m := good
		m.Files = append([]ExportFile(nil), good.Files...)
		mod(&m)
		if err := m.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := ReadExportMeta(t.TempDir()); err == nil || !strings.Contains(err.Error(), "export.json") {
		t.Fatalf("missing export.json: %v", err)
	}
}

// Closing a reader before the end stops its prefetcher (no hang, no leak).
func TestPartitionReaderEarlyClose(t *testing.T) {
	dir := t.TempDir()
	meta, _ := writeExport(t, dir, 1, 300, batch.KindSnapshot, nil)
	r, err := OpenPartition(dir, meta, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Next() {
		t.Fatal(r.Err())
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

// Row groups are cut by bytes, bounding the writer's memory per partition.
func TestPartitionWriterRowGroupBytes(t *testing.T) {
	dir := t.TempDir()
	w, err := NewPartitionWriter(dir, 0, 1, &PartitionWriterOptions{RowGroupBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	val := bytes.Repeat([]byte("v"), 10<<10)
	for _, k := range pageKeys(100, 0, 1) {
		if err := w.Write(ExportRow{PageKey: hex.EncodeToString(k), Op: "put", Value: val}); err != nil {
			t.Fatal(err)
		}
	}
	ef, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(filepath.Join(dir, ef.Name))
	defer f.Close()
	pf, err := parquet.OpenFile(f, ef.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(pf.RowGroups()); n < 10 {
		t.Fatalf("%d row groups for 1 MB at 64 KiB each", n)
	}
	if pf.NumRows() != 100 {
		t.Fatalf("%d rows", pf.NumRows())
	}
}

func TestExportCompressions(t *testing.T) {
	for _, c := range []string{"snappy", "zstd", "none"} {
		dir := t.TempDir()
		meta, err := SynthExport(dir, &SynthOptions{Partitions: 2, Pages: 20, Chunks: 2, TextBytes: 300, Dims: 8, Compression: c})
		if err != nil {
			t.Fatal(err)
		}
		for p := range 2 {
			r, err := OpenPartition(dir, meta, p)
			if err != nil {
				t.Fatal(err)
			}
			for r.Next() {
			}
			if r.Err() != nil || r.RowsRead() == 0 {
				t.Fatalf("%s: partition %d: %d rows, %v", c, p, r.RowsRead(), r.Err())
			}
			r.Close()
		}
	}
	if _, err := NewExportWriter(t.TempDir(), 1, "delta", &ExportOptions{Compression: "lz4"}); err == nil {
		t.Fatal("lz4 accepted")
	}
}

// An export's partition writers stay within an eighth of --memory-limit
// between them (each buffers a row group at once), within 128 KiB–4 MiB
// each; no limit keeps the default.
func TestExportRowGroupBytes(t *testing.T) {
	for _, c := range []struct {
		limit      int64
		partitions int
		want       int
	}{
		{0, 16, 0}, {64 << 20, 0, 0}, {64 << 20, 16, 512 << 10}, {64 << 20, 64, 128 << 10}, {64 << 20, 1024, 128 << 10}, {1 << 30, 16, 4 << 20},
	} {
		if got := ExportRowGroupBytes(c.limit, c.partitions); got != c.want {
			t.Errorf("ExportRowGroupBytes(%d, %d) = %d, want %d", c.limit, c.partitions, got, c.want)
		}
	}
}
