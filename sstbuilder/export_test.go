package sstbuilder

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

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

// Row groups are cut by rows (RowGroupRows), not by the memory share
// (RowGroupBytes): 100 rows of 10 KB at a 64 KiB share and 30 rows per group
// make four row groups (not 16 of 64 KiB), and no page file is left behind.
func TestPartitionWriterRowGroupRows(t *testing.T) {
	dir := t.TempDir()
	w, err := NewPartitionWriter(dir, 0, 1, &PartitionWriterOptions{RowGroupBytes: 64 << 10, RowGroupRows: 30})
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
	var sizes []int64
	for _, rg := range pf.RowGroups() {
		sizes = append(sizes, rg.NumRows())
	}
	if !slices.Equal(sizes, []int64{30, 30, 30, 10}) {
		t.Fatalf("row groups of %v rows, want [30 30 30 10]", sizes)
	}
	if pf.NumRows() != 100 {
		t.Fatalf("%d rows", pf.NumRows())
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != ef.Name {
		t.Fatalf("export dir holds %v, want only %s", ents, ef.Name)
	}
}

// An aborted writer leaves nothing behind: neither its file nor the pages of
// its open row group.
func TestPartitionWriterAbortRemovesPages(t *testing.T) {
	dir := t.TempDir()
	w, err := NewPartitionWriter(dir, 0, 1, &PartitionWriterOptions{RowGroupBytes: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	val := bytes.Repeat([]byte("v"), 10<<10)
	for _, k := range pageKeys(50, 0, 1) {
		if err := w.Write(ExportRow{PageKey: hex.EncodeToString(k), Op: "put", Value: val}); err != nil {
			t.Fatal(err)
		}
	}
	w.Abort()
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("export dir holds %v after Abort", ents)
	}
}

// A partition file is about the size of its records: the data pages' headers
// carry no statistics for the value column (each would hold the page's
// smallest and largest record twice over, uncompressed). 64 incompressible
// records of 32 KiB in pages of about 4 make a file under 1.05 × their
// bytes; with the statistics it was about 2×.
func TestPartitionFileHasNoValueStatistics(t *testing.T) {
	dir := t.TempDir()
	w, err := NewPartitionWriter(dir, 0, 1, &PartitionWriterOptions{RowGroupBytes: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(16, 16))
	var raw int64
	for _, k := range pageKeys(64, 0, 1) {
		val := make([]byte, 32<<10)
		for i := range val {
			val[i] = byte(rng.Uint32())
		}
		raw += int64(len(val))
		if err := w.Write(ExportRow{PageKey: hex.EncodeToString(k), Op: "put", Value: val}); err != nil {
			t.Fatal(err)
		}
	}
	ef, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if float64(ef.Bytes) > 1.05*float64(raw) {
		t.Fatalf("a file of %d bytes for %d bytes of records (%.2f×)", ef.Bytes, raw, float64(ef.Bytes)/float64(raw))
	}
}

// liveHeap is the live heap after a full collection.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// An export's writers hold memory that does not grow with its rows: a
// Parquet writer keeps every written row group's metadata (about 4 KB) until
// Close, so row groups cut at the memory share (32 KiB here, 8 records of
// 4 KB) grew the heap by about 0.5 KB a row: about 7 MB more for 16,000 more
// rows over 16 partitions. Cut by rows (256), the growth is about 15 bytes a
// row.
func TestExportWriterHeapIndependentOfRows(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 80 MB")
	}
	const parts = 16
	val := bytes.Repeat([]byte("0123456789abcdef"), 256) // 4 KiB
	write := func(n int) (grew int64) {
		dir := t.TempDir()
		w, err := NewExportWriter(dir, parts, batch.KindSnapshot, &ExportOptions{ID: "heap", RowGroupBytes: 32 << 10})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Abort()
		var keys []string
		for p := range parts {
			for _, k := range pageKeys(n/parts, p, parts) {
				keys = append(keys, hex.EncodeToString(k))
			}
		}
		slices.Sort(keys)
		base := liveHeap()
		for _, k := range keys {
			if err := w.WriteRecord(k, pillar.OpPut, val); err != nil {
				t.Fatal(err)
			}
		}
		return liveHeap() - base
	}
	small, large := write(2000), write(18000)
	t.Logf("live heap with the writers open: %.1f MB at 2,000 rows, %.1f MB at 18,000", float64(small)/1e6, float64(large)/1e6)
	if d := large - small; d > 1<<20 {
		t.Fatalf("the writers' live heap grew by %.1f MB for 16,000 more rows (%.0f bytes a row); want under 1 MiB",
			float64(d)/1e6, float64(d)/16000)
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

// Reading a partition file does not hold a whole row group: halfway through
// a file of one 2,048-row row group of incompressible 4 KiB records (8 MiB)
// the reader holds under 5 MiB (its prefetch holds at most 6 batches of 64
// rows, 1.5 MiB), as it does for 16-row groups of the same rows.
func TestPartitionReaderHeapIndependentOfRowGroup(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	keys := pageKeys(2048, 0, 1)
	vals := make([][]byte, len(keys))
	for i := range vals {
		vals[i] = make([]byte, 4<<10)
		for j := range vals[i] {
			vals[i][j] = byte(rng.Uint32())
		}
	}
	read := func(groupRows int) int64 {
		dir := t.TempDir()
		w, err := NewExportWriter(dir, 1, batch.KindSnapshot, &ExportOptions{ID: "read", RowGroupRows: groupRows, RowGroupBytes: 128 << 10})
		if err != nil {
			t.Fatal(err)
		}
		for i, k := range keys {
			if err := w.WriteRecord(hex.EncodeToString(k), pillar.OpPut, vals[i]); err != nil {
				t.Fatal(err)
			}
		}
		meta, err := w.Close()
		if err != nil {
			t.Fatal(err)
		}
		base := liveHeap()
		r, err := OpenPartition(dir, meta, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		// The least of five samples through the file: a reader that holds a
		// whole row group (or more as it goes) is high at every one, while a
		// moment's garbage of the prefetch goroutine or of the test process
		// (one CI run under -race on a loaded machine read 5.6 MB at a single
		// sample where quiet runs read 2-3 MB) is not high at all of them.
		mid := int64(math.MaxInt64)
		for n := 0; r.Next(); n++ {
			if n%256 == 0 && n >= 512 && n <= 1536 {
				mid = min(mid, liveHeap()-base)
			}
		}
		if r.Err() != nil || r.RowsRead() != 2048 {
			t.Fatalf("%d rows, %v", r.RowsRead(), r.Err())
		}
		runtime.KeepAlive(vals)
		return mid
	}
	small, whole := read(16), read(2048)
	t.Logf("the reader's live heap (least of 5 samples from row 512 to 1,536): %.1f MB with 16-row groups, %.1f MB with one 2,048-row group", float64(small)/1e6, float64(whole)/1e6)
	for _, h := range []int64{small, whole} {
		if h > 5<<20 {
			t.Fatalf("the reader holds %.1f MB halfway through (16-row groups: %.1f MB, one 8 MiB group: %.1f MB); want under 5 MiB",
				float64(h)/1e6, float64(small)/1e6, float64(whole)/1e6)
		}
	}
}

// Partition files encoded by workers are the files one goroutine writes
// (same bytes, same export.json entries); a row out of order still fails
// the export, at a later Write or at Close.
func TestExportWriterWorkers(t *testing.T) {
	const parts = 7
	var keys []string
	for p := range parts {
		for _, k := range pageKeys(300, p, parts) {
			keys = append(keys, hex.EncodeToString(k))
		}
	}
	slices.Sort(keys)
	fixed := func() time.Time { return time.UnixMilli(1_700_000_000_000) }
	write := func(workers int) *ExportMeta {
		w, err := NewExportWriter(t.TempDir(), parts, batch.KindSnapshot, &ExportOptions{ID: "w", Workers: workers, Now: fixed, RowGroupRows: 50})
		if err != nil {
			t.Fatal(err)
		}
		for i, k := range keys {
			if err := w.WriteRecord(k, pillar.OpPut, bytes.Repeat([]byte{byte(i)}, 100+i%900)); err != nil {
				t.Fatal(err)
			}
		}
		m, err := w.Close()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	one, three := write(0), write(3)
	sort.Slice(one.Files, func(i, j int) bool { return one.Files[i].Partition < one.Files[j].Partition })
	sort.Slice(three.Files, func(i, j int) bool { return three.Files[i].Partition < three.Files[j].Partition })
	if len(one.Files) != parts || fmt.Sprint(one.Files) != fmt.Sprint(three.Files) {
		t.Fatalf("files with 3 workers:\n%v\none goroutine:\n%v", three.Files, one.Files)
	}

	w, err := NewExportWriter(t.TempDir(), parts, batch.KindSnapshot, &ExportOptions{ID: "w", Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	var werr error
	for _, k := range append([]string{keys[10]}, keys...) { // keys[10] then keys[0]: out of order in its partition, or another's
		if werr = w.WriteRecord(k, pillar.OpPut, []byte("v")); werr != nil {
			break
		}
	}
	_, cerr := w.Close()
	if err := errors.Join(werr, cerr); !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("out-of-order rows through workers: Write %v, Close %v; want ErrOutOfOrder", werr, cerr)
	}
}
