package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/pillarkit/pillar/pillar"
)

// blockStore commits a docs table of 400 rows of ~4 KB incompressible text
// in row groups of ~64 KB, so that its file spans many blocks, and returns
// the store directory and the table's file entry.
func blockStore(t *testing.T) (string, fileEntry) {
	t.Helper()
	dir := t.TempDir()
	s := mustCreate(t, dir)
	tx, _ := s.Begin(ctx)
	w, err := tx.WriteTable(ctx, "docs", pillar.Doc{}, &pillar.WriteOptions{SortedBy: []string{"page_key"}, RowGroupBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	buf := make([]byte, 2048)
	for i := 0; i < 400; i++ {
		rng.Read(buf)
		if err := w.Write(&pillar.Doc{PageKey: fmt.Sprintf("%08d", i), URL: "http://example.com/", Text: fmt.Sprintf("%x", buf)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := s.current()
	if err != nil {
		t.Fatal(err)
	}
	fe := m.Tables["docs"].Files[0]
	if fe.Blocks == nil || fe.Blocks.Size != tableBlockSize || numBlocks(fe.Bytes, fe.Blocks.Size) < 8 {
		t.Fatalf("table file %+v: want block sums over at least 8 blocks", fe)
	}
	return dir, fe
}

// textChunk returns the offset of the middle of the text column chunk of
// row group rg, and the table rows before that row group.
func textChunk(t *testing.T, path string, rg int) (off int64, firstRow int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	groups := pf.Metadata().RowGroups
	if rg < 0 {
		rg = len(groups) + rg
	}
	for i := 0; i < rg; i++ {
		firstRow += groups[i].NumRows
	}
	for i, col := range pf.Schema().Columns() {
		if len(col) == 1 && col[0] == "text" {
			cc := groups[rg].Columns[i].MetaData
			return cc.DataPageOffset + cc.TotalCompressedSize/2, firstRow
		}
	}
	t.Fatal("no text column")
	return 0, 0
}

func verifiedBlocks(s *Store, name string) (n int) {
	v, ok := s.blockVerified.Load(name)
	if !ok {
		return 0
	}
	for i := range v.([]atomic.Uint64) {
		n += bits.OnesCount64(v.([]atomic.Uint64)[i].Load())
	}
	return n
}

// A flipped byte in a block that a read touches fails that read with an
// error naming the file, the block and its offset, wrapping
// pillar.ErrCorrupt. The same flip in a block no read touches leaves a row
// read elsewhere working (having checked only some of the file's blocks),
// and Verify still finds it.
func TestBlockSumsVerifyWhatAReadTouches(t *testing.T) {
	dir, fe := blockStore(t)
	path := filepath.Join(dir, "data", fe.Name)
	lastOff, lastRow := textChunk(t, path, -1)
	// A row group in the middle: not in block 0 (the Parquet magic, read
	// on open) nor in the last row group's blocks or the footer's.
	firstOff, _ := textChunk(t, path, 3)
	if b := firstOff / tableBlockSize; b == 0 || b >= lastOff/tableBlockSize-1 {
		t.Fatalf("row group 3's text is in block %d of %d", b, numBlocks(fe.Bytes, tableBlockSize))
	}

	// Untouched block: a read of the last row group succeeds.
	flipAt(t, path, firstOff)
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	sn, _ := s.Snapshot(ctx)
	if err := readAll(sn, "docs", &pillar.Range{Start: lastRow, End: lastRow + 2}); err != nil {
		t.Fatalf("read of rows whose blocks are intact: %v", err)
	}
	sn.Release()
	total := int(numBlocks(fe.Bytes, tableBlockSize))
	if got := verifiedBlocks(s, fe.Name); got == 0 || got > total/2 {
		t.Fatalf("a 2-row read verified %d of %d blocks, want some but at most half", got, total)
	}
	rep, err := s.Verify(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("block %d at offset %d", firstOff/tableBlockSize, firstOff/tableBlockSize*tableBlockSize)
	if rep.OK() || len(rep.Problems) != 1 || !rep.Problems[0].Corrupt || !strings.Contains(rep.Problems[0].Error, want) || !strings.Contains(rep.Problems[0].Error, fe.Name) {
		t.Fatalf("verify of a file with a flipped untouched block: %+v, want one corrupt problem naming %s and %q", rep, fe.Name, want)
	}
	// A full scan reaches the block.
	sn, _ = s.Snapshot(ctx)
	err = readAll(sn, "docs", nil)
	sn.Release()
	if !errors.Is(err, pillar.ErrCorrupt) || !strings.Contains(err.Error(), fe.Name) || !strings.Contains(err.Error(), fmt.Sprintf("block %d (bytes %d to", firstOff/tableBlockSize, firstOff/tableBlockSize*tableBlockSize)) {
		t.Fatalf("full scan over the flipped block: %v", err)
	}

	// Touched block: flip the last row group's text (in a Store that has
	// not verified it) and read it.
	flipAt(t, path, firstOff) // restore
	flipAt(t, path, lastOff)
	s2, _ := Open(dir, nil)
	sn2, _ := s2.Snapshot(ctx)
	defer sn2.Release()
	err = readAll(sn2, "docs", &pillar.Range{Start: lastRow, End: lastRow + 2})
	b := lastOff / tableBlockSize
	if !errors.Is(err, pillar.ErrCorrupt) || !strings.Contains(err.Error(), fe.Name) || !strings.Contains(err.Error(), fmt.Sprintf("block %d (bytes %d to", b, b*tableBlockSize)) {
		t.Fatalf("read of a flipped block: %v, want ErrCorrupt naming %s block %d", err, fe.Name, b)
	}
	// The read that failed did not mark the block verified: it fails again.
	if err := readAll(sn2, "docs", &pillar.Range{Start: lastRow, End: lastRow + 2}); !errors.Is(err, pillar.ErrCorrupt) {
		t.Fatalf("second read of a flipped block: %v", err)
	}
}

// A damaged block-sums sidecar fails the read of its file (naming the
// sidecar) and Verify. A missing one (an older binary's sweep removes
// sidecars) is not damage: the file is checked whole against its CRC32C,
// so a flipped byte anywhere still fails the read, and Verify lists the
// file under NoBlockSums.
func TestBlockSidecarDamagedOrMissing(t *testing.T) {
	t.Run("flipped", func(t *testing.T) {
		dir, fe := blockStore(t)
		flipAt(t, filepath.Join(dir, "data", fe.Blocks.File), 5)
		s, _ := Open(dir, nil)
		sn, _ := s.Snapshot(ctx)
		defer sn.Release()
		err := readAll(sn, "docs", &pillar.Range{Start: 0, End: 1})
		if !errors.Is(err, pillar.ErrCorrupt) || !strings.Contains(err.Error(), fe.Blocks.File) || !strings.Contains(err.Error(), "checksum mismatch") {
			t.Fatalf("read with a flipped sidecar: %v", err)
		}
		rep, err := s.Verify(ctx, nil)
		if err != nil || len(rep.Problems) != 1 || !rep.Problems[0].Corrupt || !strings.Contains(rep.Problems[0].Error, fe.Blocks.File) {
			t.Fatalf("verify with a flipped sidecar: %+v %v", rep, err)
		}
	})
	t.Run("missing", func(t *testing.T) {
		dir, fe := blockStore(t)
		os.Remove(filepath.Join(dir, "data", fe.Blocks.File))
		s, _ := Open(dir, nil)
		sn, _ := s.Snapshot(ctx)
		if err := readAll(sn, "docs", &pillar.Range{Start: 0, End: 1}); err != nil {
			t.Fatalf("read with a missing sidecar: %v", err)
		}
		sn.Release()
		rep, err := s.Verify(ctx, nil)
		if err != nil || !rep.OK() || len(rep.NoBlockSums) != 1 || rep.NoBlockSums[0].File != fe.Name {
			t.Fatalf("verify with a missing sidecar: %+v %v, want OK listing %s without block sums", rep, err, fe.Name)
		}
		// Checked whole: a flip in a block the read does not touch fails it.
		off, _ := textChunk(t, filepath.Join(dir, "data", fe.Name), 3)
		_, lastRow := textChunk(t, filepath.Join(dir, "data", fe.Name), -1)
		flipAt(t, filepath.Join(dir, "data", fe.Name), off)
		s2, _ := Open(dir, nil)
		sn2, _ := s2.Snapshot(ctx)
		defer sn2.Release()
		if err := readAll(sn2, "docs", &pillar.Range{Start: lastRow, End: lastRow + 1}); !errors.Is(err, pillar.ErrCorrupt) || !strings.Contains(err.Error(), "the manifest records crc32c") {
			t.Fatalf("read of a flipped file without its sidecar: %v, want the whole-file mismatch", err)
		}
	})
	t.Run("removed-after-open", func(t *testing.T) {
		// The Store checked the sidecar, then it goes: the next block to
		// check makes the Store check the file whole instead.
		dir, fe := blockStore(t)
		_, lastRow := textChunk(t, filepath.Join(dir, "data", fe.Name), -1)
		s, _ := Open(dir, nil)
		sn, _ := s.Snapshot(ctx)
		defer sn.Release()
		if err := readAll(sn, "docs", &pillar.Range{Start: lastRow, End: lastRow + 1}); err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join(dir, "data", fe.Blocks.File))
		if err := readAll(sn, "docs", nil); err != nil {
			t.Fatalf("full scan after the sidecar went: %v", err)
		}
		if _, ok := s.verified.Load(fe.Name); !ok {
			t.Fatal("the file was not checked whole")
		}
	})
}

// rewriteManifest edits the current manifest on disk, as a store written
// by an older binary would have it.
func rewriteManifest(t testing.TB, dir string, edit func(*manifest)) {
	t.Helper()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.current()
	if err != nil {
		t.Fatal(err)
	}
	m = m.clone()
	edit(m)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifests", manifestName(m.Generation)), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A table file written before block sums (a checksum, no sidecar) is
// still verified whole on its first read: a flip in a block the read does
// not touch fails it.
func TestFileWithoutBlockSumsVerifiedWhole(t *testing.T) {
	dir, fe := blockStore(t)
	rewriteManifest(t, dir, func(m *manifest) { m.Tables["docs"].Files[0].Blocks = nil })
	path := filepath.Join(dir, "data", fe.Name)
	firstOff, _ := textChunk(t, path, 3)
	_, lastRow := textChunk(t, path, -1)
	flipAt(t, path, firstOff)
	s, _ := Open(dir, nil)
	sn, _ := s.Snapshot(ctx)
	defer sn.Release()
	err := readAll(sn, "docs", &pillar.Range{Start: lastRow, End: lastRow + 1})
	if !errors.Is(err, pillar.ErrCorrupt) || !strings.Contains(err.Error(), fe.Name) || !strings.Contains(err.Error(), "the manifest records crc32c") {
		t.Fatalf("read of a file without block sums, flipped elsewhere: %v, want the whole-file checksum mismatch", err)
	}
}

// Cleanup removes a replaced table file's sidecar with it, and keeps the
// current one's.
func TestCleanupRemovesSidecar(t *testing.T) {
	dir, old := blockStore(t)
	s, _ := Open(dir, &Options{RetainManifests: 1, RetainFor: time.Nanosecond})
	tx, _ := s.Begin(ctx)
	w, _ := tx.WriteTable(ctx, "docs", pillar.Doc{}, nil)
	w.Write(&pillar.Doc{PageKey: "a"})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	m, _ := s.current()
	cur := m.Tables["docs"].Files[0]
	for name, want := range map[string]bool{old.Name: false, old.Blocks.File: false, cur.Name: true, cur.Blocks.File: true} {
		if _, err := os.Stat(filepath.Join(dir, "data", name)); (err == nil) != want {
			t.Fatalf("after cleanup, %s exists: %v, want %v", name, err == nil, want)
		}
	}
}

// BenchmarkFirstReadOfFewRows: what a Store that has not seen a ~50 MB
// docs file (a new command) pays to read 2 rows of it, with block sums
// (checks the blocks the read touches) and without (the file as written
// before block sums: checked whole), side by side. The file is in the page
// cache; on a store larger than memory the whole-file check is a disk read
// of the file.
func BenchmarkFirstReadOfFewRows(b *testing.B) {
	dir := b.TempDir()
	s, _ := Create(dir, &Options{Partitions: 4})
	tx, _ := s.Begin(ctx)
	w, _ := tx.WriteTable(ctx, "docs", pillar.Doc{}, &pillar.WriteOptions{SortedBy: []string{"page_key"}})
	rng := rand.New(rand.NewSource(1))
	buf := make([]byte, 5000)
	for i := 0; i < 5000; i++ {
		rng.Read(buf)
		w.Write(&pillar.Doc{PageKey: fmt.Sprintf("%08d", i), Text: fmt.Sprintf("%x", buf)})
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		b.Fatal(err)
	}
	m, _ := s.current()
	fe := m.Tables["docs"].Files[0]
	read := func(b *testing.B, st *Store) {
		sn, _ := st.Snapshot(ctx)
		defer sn.Release()
		if err := readAll(sn, "docs", &pillar.Range{Start: 2500, End: 2502}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("block-sums", func(b *testing.B) {
		b.ReportMetric(float64(fe.Bytes)/1e6, "file-MB")
		st, _ := Open(dir, nil)
		for i := 0; i < b.N; i++ {
			st.blockVerified.Clear() // as a new process
			read(b, st)
		}
	})
	b.Run("whole-file", func(b *testing.B) {
		old := filepath.Join(b.TempDir(), "store")
		if err := os.CopyFS(old, os.DirFS(dir)); err != nil {
			b.Fatal(err)
		}
		rewriteManifest(b, old, func(m *manifest) { m.Tables["docs"].Files[0].Blocks = nil }) // as written before block sums
		st, _ := Open(old, nil)
		for i := 0; i < b.N; i++ {
			st.verified.Clear() // as a new process
			read(b, st)
		}
	})
}
