package local

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/pillarkit/pillar/pillar"
)

// readHeadsNoPanic is a heads read of partition 1 that reports a panic as
// an error (a panic in ReadQueueHeads takes the whole Lorry process down).
func readHeadsNoPanic(s *Store) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	sn, err := s.Snapshot(ctx)
	if err != nil {
		return err
	}
	defer sn.Release()
	_, err = sn.(pillar.QueueHeadReader).ReadQueueHeads(ctx, 1, 0, 100)
	return err
}

// footerStart returns the offset of a segment file's Parquet footer.
func footerStart(t *testing.T, dir string, seg segment) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "data", seg.File))
	if err != nil {
		t.Fatal(err)
	}
	return int64(len(b)) - 8 - int64(binary.LittleEndian.Uint32(b[len(b)-8:]))
}

func wantCorruptNamingFile(t *testing.T, what string, err error, seg segment) {
	t.Helper()
	if !errors.Is(err, pillar.ErrCorrupt) || !strings.Contains(err.Error(), seg.File) {
		t.Fatalf("%s: heads read %v, want an error wrapping ErrCorrupt that names %s", what, err, seg.File)
	}
}

// TestQueueHeadsDamagedFooterNoPanic: a heads read parses
// the footer of a segment before anything checked it (headsRanges runs
// before the heads checksum is compared). One flipped bit in the footer (the schema root's
// num_children: 9 -> -10) makes parquet-go panic ("slice bounds out of
// range"): Lorry's head scan crashes the process, again after each
// restart, instead of failing with ErrCorrupt naming the file.
func TestQueueHeadsDamagedFooterNoPanic(t *testing.T) {
	dir := t.TempDir()
	s, seg := headsStore(t, dir, 3)
	// Footer: 15 04 (version 2), 19 ac (schema: a list of 10 structs),
	// 48 0c "ExportRecord" (name), 15 12 (num_children 9, zigzag 0x12).
	off := footerStart(t, dir, seg) + 19
	flip1(t, dir, seg.File, off, 0x01)
	s, _ = reopenHeads(t, s, dir)
	wantCorruptNamingFile(t, "footer's num_children damaged", readHeadsNoPanic(s), seg)
}

// TestQueueHeadsFooterLengthNoHugeAlloc: the footer length
// (the 4 bytes before the closing magic) is used before anything checked
// it: one damaged byte there makes a heads read allocate gigabytes before
// it fails (a Lorry worker is OOM-killed on a machine with less).
func TestQueueHeadsFooterLengthNoHugeAlloc(t *testing.T) {
	dir := t.TempDir()
	s, seg := headsStore(t, dir, 3)
	flip1(t, dir, seg.File, seg.Bytes-5, 0x7f) // the footer length's high byte
	s, _ = reopenHeads(t, s, dir)
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	err := readHeadsNoPanic(s)
	runtime.ReadMemStats(&m1)
	if got := m1.TotalAlloc - m0.TotalAlloc; got > 256<<20 {
		t.Errorf("footer length damaged: the heads read allocated %d MiB for a %d-byte file", got>>20, seg.Bytes)
	}
	wantCorruptNamingFile(t, "footer length damaged", err, seg)
}

// flip1 XORs one byte of a data file with x.
func flip1(t *testing.T, dir, name string, off int64, x byte) {
	t.Helper()
	path := filepath.Join(dir, "data", name)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= x
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// damageFS writes queue segment files with one byte changed on the way to
// the disk (a bit flipped in the page cache, a misdirected or torn write):
// the bytes the store's crcFile sums are not the bytes in the file.
type damageFS struct {
	OSFS
	at int64
}

func (d *damageFS) Create(name string) (File, error) {
	f, err := d.OSFS.Create(name)
	if err != nil || !strings.HasPrefix(filepath.Base(name), "q") || filepath.Ext(name) != ".parquet" {
		return f, err
	}
	return &damageFile{File: f, at: d.at}, nil
}

type damageFile struct {
	File
	at, n int64
}

func (f *damageFile) Write(b []byte) (int, error) {
	if f.at >= f.n && f.at < f.n+int64(len(b)) {
		c := append([]byte(nil), b...)
		c[f.at-f.n] ^= 0xff
		b = c
	}
	n, err := f.File.Write(b)
	f.n += int64(n)
	return n, err
}

// TestQueueHeadsChecksumOfWrittenBytes: the segment's
// crc32c is the CRC32C of the bytes written (crcFile), but heads_crc32c is
// computed from the staged file read back from disk (stagedHeadsCRC), and
// nothing compares that read against what was written. A head byte damaged
// between the write and that read (offset 10: the partition column's
// chunk) is recorded in heads_crc32c as if it were right: a heads read
// passes the check and decodes the damaged bytes, while a full read and
// Verify report the file corrupt. Staging must refuse the file, or a
// heads read report ErrCorrupt.
func TestQueueHeadsChecksumOfWrittenBytes(t *testing.T) {
	dir := t.TempDir()
	s, err := Create(dir, &Options{Partitions: 4, FS: &damageFS{at: 10}})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	k := ""
	for i := 0; k == ""; i++ {
		if kk := pillar.KeyOfNormalized("http://x/" + string(rune('a'+i))); kk.Partition(4) == 1 {
			k = kk.String()
		}
	}
	for i := range 3 {
		v := []byte(strings.Repeat(string(rune('a'+i)), 10<<10))
		if err := tx.Enqueue(ctx, pillar.ExportRecord{Partition: 1, PageKey: k, Op: pillar.OpPut, Value: v, Priority: pillar.PriorityBulk}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		// A fix may catch it at staging (the read-back compared with
		// the written bytes' sums): a clear error, the commit refused.
		if errors.Is(err, pillar.ErrCorrupt) || strings.Contains(err.Error(), "checksum") {
			t.Logf("commit refused: %v", err)
			return
		}
		t.Fatal(err)
	}
	s, seg := reopenHeads(t, s, dir)
	if seg.HeadsCRC32C == "" {
		t.Fatalf("segment %+v: no heads checksum", seg)
	}
	sn, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, all := sn.ReadQueue(ctx, 1, 0, 100)
	sn.Release()
	if !errors.Is(all, pillar.ErrCorrupt) {
		t.Fatalf("setup: full read %v, want ErrCorrupt (the file is not what was written)", all)
	}
	s, _ = reopenHeads(t, s, dir)
	wantCorruptNamingFile(t, "head byte 10 damaged on its way to disk", readHeadsNoPanic(s), seg)
}
