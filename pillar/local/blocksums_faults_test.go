package local

// Block sums of table files (<file>.blocks sidecars): cleanup, a sweep by
// a binary that does not know them, the cost of a small read, and
// concurrent block-checked reads.

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pillarkit/pillar/pillar"
)

// TestPeriodicCleanupRemovesSidecars: the cleanup every few commits (cleanupLocked without a listing)
// removes the table files of the manifests it drops and their sidecars
// too: in a Store that stays open (serve, Lorry's daemon) no replaced
// table file may leave its <file>.blocks behind until the next Open or
// explicit Cleanup sweeps data/.
func TestPeriodicCleanupRemovesSidecars(t *testing.T) {
	dir := t.TempDir()
	if _, err := Create(dir, &Options{Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, &Options{RetainManifests: 1, RetainFor: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	// 40 commits: the periodic cleanup (every 16 commits) runs at least twice.
	for i := 0; i < 40; i++ {
		tx, err := s.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		writeDocs(t, tx, "docs", pillar.Replace, fmt.Sprintf("k%d", i))
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var sidecars int
	ents, _ := os.ReadDir(filepath.Join(dir, "data"))
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".blocks") {
			sidecars++
		}
	}
	if left := unnamed(t, dir); len(left) > 0 {
		t.Fatalf("after 40 replacing commits of an open Store, %d files no manifest names remain (of %d sidecars in data/), e.g. %v", len(left), sidecars, left[:min(3, len(left))])
	}
}

// TestTableReadableAfterSidecarSweep: a binary that does not know block
// sums (same format number, so it opens these stores) sweeps data/ at Open
// and removes every file its manifest.files does not list: all the
// sidecars, the current manifest's and leased ones' too. The table files
// and their whole-file CRC32C are intact, so the table must stay readable
// (checked whole). The sweep is simulated exactly: data/ minus what such a
// binary's files() names (today's minus the sidecars).
func TestTableReadableAfterSidecarSweep(t *testing.T) {
	dir, fe := blockStore(t)
	oldSweep(t, dir)
	if _, err := os.Stat(filepath.Join(dir, "data", fe.Name)); err != nil {
		t.Fatalf("setup: the old sweep removed the table file: %v", err)
	}
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	sn, _ := s.Snapshot(ctx)
	defer sn.Release()
	rr, err := sn.ReadTable(ctx, "docs", &pillar.Range{Start: 10, End: 12})
	if err != nil {
		t.Fatalf("read after an old binary's Open: %v", err)
	}
	defer rr.Close()
	var got []string
	for rr.Next() {
		var d pillar.Doc
		if err := rr.Scan(&d); err != nil {
			t.Fatalf("read after an old binary's Open (its sweep removed the sidecar %s; the file and its crc32c are intact): %v", fe.Blocks.File, err)
		}
		got = append(got, d.PageKey)
	}
	if err := rr.Err(); err != nil || strings.Join(got, ",") != "00000010,00000011" {
		t.Fatalf("rows %v, err %v", got, err)
	}
}

// oldSweep removes what the cleanup sweep of a binary from before block
// sums removes: every file in data/ that no manifest names without its
// sidecars.
func oldSweep(t *testing.T, dir string) {
	t.Helper()
	keep := map[string]bool{}
	ms, _ := os.ReadDir(filepath.Join(dir, "manifests"))
	for _, e := range ms {
		b, err := os.ReadFile(filepath.Join(dir, "manifests", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m, err := decodeManifest(b, e.Name())
		if err != nil {
			t.Fatal(err)
		}
		sidecar := map[string]bool{}
		for _, tb := range m.Tables {
			for _, f := range tb.Files {
				if f.Blocks != nil {
					sidecar[f.Blocks.File] = true
				}
			}
		}
		for _, f := range namedFiles(t, dir, m) {
			if !sidecar[f] {
				keep[f] = true
			}
		}
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "data"))
	removed := 0
	for _, e := range ents {
		if !keep[e.Name()] {
			if err := os.Remove(filepath.Join(dir, "data", e.Name())); err != nil {
				t.Fatal(err)
			}
			removed++
		}
	}
	if removed == 0 {
		t.Fatal("setup: the old sweep removed nothing")
	}
}

// TestSmallReadCostIndependentOfFileSize: every open of a table file (rowReader.open: each ReadTable, so each
// probe of subsets' binary search findKey) reads, checksums and decodes
// the whole sidecar, 4 bytes per 128 KiB block: a one-row read of a 4 GiB
// file costs 256 KiB (the sidecar and its decoded sums) however few blocks
// it touches, and k lookups of log2(N) probes each pay it k*log2(N) times,
// unless the Store remembers a sidecar it checked, as it remembers data
// files (verified), and reads only the sums it needs: a small read costs
// O(blocks read). The file here is sparse (no disk used).
func TestSmallReadCostIndependentOfFileSize(t *testing.T) {
	dir := t.TempDir()
	s := mustCreate(t, dir)
	const size = 4<<30 + 1000
	fe := fileEntry{Name: "big.parquet", Bytes: size, CRC32C: "00000000"}
	f, err := os.Create(filepath.Join(dir, "data", fe.Name))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Skipf("no sparse file: %v", err)
	}
	f.Close()
	zero := crc32.Checksum(make([]byte, tableBlockSize), castagnoli)
	sums := make([]uint32, numBlocks(size, tableBlockSize))
	for i := range sums {
		sums[i] = zero
	}
	sums[len(sums)-1] = crc32.Checksum(make([]byte, size%tableBlockSize), castagnoli)
	raw := encodeSums(sums)
	fe.Blocks = &blockSums{File: blocksName(fe.Name), Size: tableBlockSize, CRC32C: crcString(crc32.Checksum(raw, castagnoli))}
	if err := os.WriteFile(filepath.Join(dir, "data", fe.Blocks.File), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	read := func() {
		bf, err := s.openTable(ctx, fe)
		if err != nil {
			t.Fatal(err)
		}
		defer bf.Close()
		p := make([]byte, 100)
		if _, err := bf.ReadAt(p, 3<<30); err != nil {
			t.Fatal(err)
		}
	}
	read() // the block is verified now
	const n = 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 0; i < n; i++ {
		read()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > 32<<10 {
		t.Fatalf("a 100-byte read of a verified block of a %d-block file allocates %d bytes per open (the sidecar is %d bytes), want at most 32 KiB", len(sums), per, len(raw))
	}
}

// TestBlockFileReadAtConcurrent: blockFile.ReadAt under concurrent readers (run with
// -race) returns exactly the file's bytes for reads that straddle blocks,
// end in the short last block or run past the end (io.EOF with the bytes
// there are); with one block damaged, every read that overlaps it fails
// with ErrCorrupt, even when the blocks around it were verified first and
// the damaged one is in the middle of the read, and every other read is
// exact.
func TestBlockFileReadAtConcurrent(t *testing.T) {
	dir, fe := blockStore(t)
	path := filepath.Join(dir, "data", fe.Name)
	nb := numBlocks(fe.Bytes, tableBlockSize)
	if fe.Bytes%tableBlockSize == 0 {
		t.Fatal("setup: want a short last block")
	}
	for _, bad := range []int64{-1, nb / 2, nb - 1} {
		t.Run(fmt.Sprintf("bad%d", bad), func(t *testing.T) {
			if bad >= 0 {
				// The middle of the block (the last one is short).
				at := bad*tableBlockSize + min(tableBlockSize, fe.Bytes-bad*tableBlockSize)/2
				flipAt(t, path, at)
				defer flipAt(t, path, at)
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			s, err := Open(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			f, err := s.openTable(ctx, fe)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if bad > 0 && bad < nb-1 {
				// The neighbours are verified first: the read across them
				// must still check the damaged block between.
				for _, i := range []int64{bad - 1, bad + 1} {
					if _, err := f.ReadAt(make([]byte, 10), i*tableBlockSize+5); err != nil {
						t.Fatalf("block %d: %v", i, err)
					}
				}
				_, err := f.ReadAt(make([]byte, 2*tableBlockSize), (bad-1)*tableBlockSize+tableBlockSize/2)
				if !errors.Is(err, pillar.ErrCorrupt) {
					t.Fatalf("read across verified blocks %d and %d and damaged %d: %v", bad-1, bad+1, bad, err)
				}
			}
			var wg sync.WaitGroup
			errc := make(chan error, 8)
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func(seed int64) {
					defer wg.Done()
					rng := rand.New(rand.NewSource(seed))
					for k := 0; k < 100; k++ {
						var off int64
						switch rng.Intn(3) {
						case 0: // at a block boundary
							off = rng.Int63n(nb)*tableBlockSize - int64(rng.Intn(3))
						case 1: // near the end
							off = fe.Bytes - int64(rng.Intn(2*tableBlockSize))
						default:
							off = rng.Int63n(fe.Bytes)
						}
						off = max(off, 0)
						p := make([]byte, 1+rng.Intn(3*tableBlockSize))
						n, err := f.ReadAt(p, off)
						end := min(off+int64(len(p)), fe.Bytes)
						overlaps := bad >= 0 && off < (bad+1)*tableBlockSize && end > bad*tableBlockSize
						switch {
						case overlaps:
							if !errors.Is(err, pillar.ErrCorrupt) {
								errc <- fmt.Errorf("read [%d,%d) over damaged block %d: n %d err %v", off, off+int64(len(p)), bad, n, err)
								return
							}
						case off+int64(len(p)) > fe.Bytes:
							if err != io.EOF || int64(n) != fe.Bytes-off || !bytes.Equal(p[:n], want[off:]) {
								errc <- fmt.Errorf("read [%d,%d) past the end (%d): n %d err %v", off, off+int64(len(p)), fe.Bytes, n, err)
								return
							}
						default:
							if err != nil || n != len(p) || !bytes.Equal(p, want[off:end]) {
								errc <- fmt.Errorf("read [%d,%d): n %d err %v, or bytes differ", off, end, n, err)
								return
							}
						}
					}
				}(int64(g))
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Error(err)
			}
		})
	}
}
