package local

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/pillarkit/pillar/pillar"
)

// corruptStore commits docs (with text) and one queue segment, and returns
// the store directory and the current manifest.
func corruptStore(t *testing.T) (string, *manifest) {
	t.Helper()
	dir := t.TempDir()
	s := mustCreate(t, dir)
	tx, _ := s.Begin(ctx)
	w, err := tx.WriteTable(ctx, "docs", pillar.Doc{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		k, _, _ := pillar.KeyOfURL("http://example.com/" + string(rune('a'+i%26)) + strings.Repeat("x", i))
		w.Write(&pillar.Doc{PageKey: k.String(), URL: "http://example.com/", Text: strings.Repeat("the text column of page ", 40) + k.String()})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	k, _, _ := pillar.KeyOfURL("http://example.com/q")
	tx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(k.Partition(4)), PageKey: k.String(), Op: pillar.OpPut, Value: []byte(strings.Repeat("v", 500))})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := s.current()
	if err != nil {
		t.Fatal(err)
	}
	return dir, m
}

// flipTextByte flips one byte inside the data of the "text" column chunk
// of a Parquet file.
func flipTextByte(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	var off int64 = -1
	for i, col := range pf.Schema().Columns() {
		if len(col) == 1 && col[0] == "text" {
			cc := pf.Metadata().RowGroups[0].Columns[i].MetaData
			off = cc.DataPageOffset + cc.TotalCompressedSize/2
		}
	}
	f.Close()
	if off < 0 {
		t.Fatal("no text column")
	}
	flipAt(t, path, off)
}

func flipAt(t *testing.T, path string, off int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x20
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readAll(sn pillar.Snapshot, table string, r *pillar.Range) error {
	rr, err := sn.ReadTable(ctx, table, r)
	if err != nil {
		return err
	}
	defer rr.Close()
	for rr.Next() {
		var d pillar.Doc
		if err := rr.Scan(&d); err != nil {
			return err
		}
	}
	return rr.Err()
}

// A flipped byte in the text column of a table file, and in a queue
// segment, is refused by every read path (full scan, a row range, the
// queue) with an error naming the table (or partition) and the file, and
// wrapping pillar.ErrCorrupt; Verify lists both files.
func TestCorruptFileDetectedByEveryReadPath(t *testing.T) {
	dir, m := corruptStore(t)
	docFile := m.Tables["docs"].Files[0].Name
	flipTextByte(t, filepath.Join(dir, "data", docFile))
	var part int
	var seg segment
	for p, q := range m.Queue {
		part, seg = p, q.Segments[0]
	}
	flipAt(t, filepath.Join(dir, "data", seg.File), seg.Bytes/2)

	s, err := Open(dir, nil) // a new process's view: nothing verified yet
	if err != nil {
		t.Fatal(err)
	}
	sn, _ := s.Snapshot(ctx)
	defer sn.Release()
	check := func(what string, err error, names ...string) {
		t.Helper()
		if !errors.Is(err, pillar.ErrCorrupt) {
			t.Fatalf("%s of a corrupt file: %v, want ErrCorrupt", what, err)
		}
		for _, n := range names {
			if !strings.Contains(err.Error(), n) {
				t.Fatalf("%s: error %q does not name %s", what, err, n)
			}
		}
	}
	check("full scan", readAll(sn, "docs", nil), `"docs"`, docFile)
	check("row range", readAll(sn, "docs", &pillar.Range{Start: 10, End: 12}), `"docs"`, docFile)
	_, err = sn.ReadQueue(ctx, part, 0, 10)
	check("queue read", err, "partition", seg.File)

	rep, err := s.Verify(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || len(rep.Problems) != 2 || rep.Files != 2 {
		t.Fatalf("verify: %+v, want 2 files, both failed", rep)
	}
	if p := rep.Problems[0]; p.Table != "docs" || p.File != docFile || !p.Corrupt || !strings.Contains(p.Error, "checksum mismatch") {
		t.Fatalf("verify problem %+v", p)
	}
}

// A truncated file is refused by its size before anything is decoded.
func TestTruncatedFileDetected(t *testing.T) {
	dir, m := corruptStore(t)
	f := m.Tables["docs"].Files[0]
	if err := os.Truncate(filepath.Join(dir, "data", f.Name), f.Bytes-100); err != nil {
		t.Fatal(err)
	}
	s, _ := Open(dir, nil)
	sn, _ := s.Snapshot(ctx)
	defer sn.Release()
	err := readAll(sn, "docs", nil)
	if !errors.Is(err, pillar.ErrCorrupt) || !strings.Contains(err.Error(), "bytes, the manifest records") {
		t.Fatalf("truncated file: %v", err)
	}
}

// A store written before checksums (manifest entries without crc32c)
// stays readable; Verify lists its files as having no checksum, and the
// next commit, whatever it writes, records them.
func TestOldStoreGetsChecksumsOnNextCommit(t *testing.T) {
	dir, m := corruptStore(t)
	path := filepath.Join(dir, "manifests", manifestName(m.Generation))
	b, _ := os.ReadFile(path)
	old := strings.ReplaceAll(string(b), `"blocks"`, `"blocks_unused"`)
	old = strings.ReplaceAll(old, `"crc32c"`, `"crc32c_unused"`)
	if old == string(b) {
		t.Fatal("manifest has no crc32c fields")
	}
	os.WriteFile(path, []byte(old), 0o644)

	s, _ := Open(dir, nil)
	sn, _ := s.Snapshot(ctx)
	if err := readAll(sn, "docs", nil); err != nil {
		t.Fatalf("reading a store without checksums: %v", err)
	}
	sn.Release()
	rep, err := s.Verify(ctx, nil)
	if err != nil || !rep.OK() || len(rep.NoChecksum) != 2 {
		t.Fatalf("verify of an old store: %+v %v, want OK with 2 files without a checksum", rep, err)
	}
	tx, _ := s.Begin(ctx)
	tx.SetAttr(ctx, "touch", 1)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err = s.Verify(ctx, nil)
	if err != nil || !rep.OK() || len(rep.NoChecksum) != 0 || rep.Files != 2 {
		t.Fatalf("verify after the next commit: %+v %v, want every file with a checksum", rep, err)
	}
	// The recorded checksums are the files' own: a flip is now caught.
	m2, _ := s.current()
	flipTextByte(t, filepath.Join(dir, "data", m2.Tables["docs"].Files[0].Name))
	s2, _ := Open(dir, nil)
	sn2, _ := s2.Snapshot(ctx)
	defer sn2.Release()
	if err := readAll(sn2, "docs", nil); !errors.Is(err, pillar.ErrCorrupt) {
		t.Fatalf("flip after the checksums were added: %v", err)
	}
}

// BenchmarkScanVerify: a full scan of a ~20 MB docs table by a Store that
// has not seen its file (checksum first, as every new command does) next to
// one that verified it already, and the floor: CRC32C alone over the file.
func BenchmarkScanVerify(b *testing.B) {
	dir := b.TempDir()
	s, _ := Create(dir, &Options{Partitions: 4})
	tx, _ := s.Begin(ctx)
	w, _ := tx.WriteTable(ctx, "docs", pillar.Doc{}, nil)
	text := strings.Repeat("words of a page of the corpus ", 160) // ~4.8 KB
	for i := 0; i < 4000; i++ {
		k, _, _ := pillar.KeyOfURL("http://example.com/" + strings.Repeat("p", i%50) + string(rune('a'+i%26)) + fmt.Sprint(i))
		w.Write(&pillar.Doc{PageKey: k.String(), Text: text + k.String()})
	}
	w.Close()
	tx.Commit(ctx)
	m, _ := s.current()
	f := m.Tables["docs"].Files[0]
	b.SetBytes(f.Bytes)
	scan := func(b *testing.B, st *Store) {
		sn, _ := st.Snapshot(ctx)
		defer sn.Release()
		if err := readAll(sn, "docs", nil); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("scan-first-open", func(b *testing.B) {
		b.SetBytes(f.Bytes)
		st, _ := Open(dir, nil)
		for i := 0; i < b.N; i++ {
			st.verified.Clear() // as a new process: the file not checked yet
			st.blockVerified.Clear()
			scan(b, st)
		}
	})
	b.Run("scan-verified-before", func(b *testing.B) {
		b.SetBytes(f.Bytes)
		st, _ := Open(dir, nil)
		scan(b, st)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			scan(b, st)
		}
	})
	b.Run("floor-crc32c", func(b *testing.B) {
		b.SetBytes(f.Bytes)
		for i := 0; i < b.N; i++ {
			fh, _ := os.Open(filepath.Join(dir, "data", f.Name))
			if _, _, err := fileCRC(ctx, fh, nil); err != nil {
				b.Fatal(err)
			}
			fh.Close()
		}
	})
}
