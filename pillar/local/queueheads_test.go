package local

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/pillarkit/pillar/pillar"
)

// headsStore commits n records of 20 KB random values to partition 1 of a
// new store in dir and returns the store, reopened, and the segment.
func headsStore(t *testing.T, dir string, n int) (*Store, segment) {
	t.Helper()
	s := mustCreate(t, dir)
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
	rng := rand.New(rand.NewPCG(1, 2))
	for range n {
		v := make([]byte, 20<<10)
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		if err := tx.Enqueue(ctx, pillar.ExportRecord{Partition: 1, PageKey: k, Op: pillar.OpPut, Value: v, Priority: pillar.PriorityBulk}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return reopenHeads(t, s, dir)
}

// reopenHeads closes s and opens the store again: nothing is verified yet.
func reopenHeads(t *testing.T, s *Store, dir string) (*Store, segment) {
	t.Helper()
	s.Close()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	sn, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	q := sn.(*snapshot).m.Queue[1]
	if q == nil || len(q.Segments) != 1 {
		t.Fatalf("queue %+v, want one segment", q)
	}
	return s, q.Segments[0]
}

func readHeadsAndAll(s *Store) (heads, all error) {
	sn, err := s.Snapshot(ctx)
	if err != nil {
		return err, err
	}
	defer sn.Release()
	_, heads = sn.(pillar.QueueHeadReader).ReadQueueHeads(ctx, 1, 0, 100)
	_, all = sn.ReadQueue(ctx, 1, 0, 100)
	return heads, all
}

// flip inverts one byte of a data file.
func flip(t *testing.T, dir, name string, off int64) {
	t.Helper()
	path := filepath.Join(dir, "data", name)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0xff
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// segmentHeads reads a committed segment's footer: where the footer
// starts, the heads byte ranges (headsRanges) and their total size.
func segmentHeads(t *testing.T, dir string, seg segment) (footer int64, rs [][2]int64, heads int64) {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "data", seg.File))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	footer, err = parquetFooterStart(f, seg.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	rs, err = headsRanges(f, footer, seg.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		heads += r[1] - r[0]
	}
	return footer, rs, heads
}

// valueByte returns an offset inside the segment's value column chunks.
func valueByte(t *testing.T, dir string, seg segment) int64 {
	t.Helper()
	_, rs, heads := segmentHeads(t, dir, seg)
	// The values are most of the file.
	if heads*2 > seg.Bytes || len(rs) < 2 {
		t.Fatalf("heads ranges %v: %d of %d bytes", rs, heads, seg.Bytes)
	}
	return (rs[0][1] + rs[1][0]) / 2 // between the first two heads ranges: a value chunk
}

// TestQueueHeadsChecksum: a committed segment records a heads checksum; a
// heads read checks it (not the whole file: a damaged value byte passes a
// heads read and fails a full read), and a damaged head byte fails a heads
// read.
func TestQueueHeadsChecksum(t *testing.T) {
	dir := t.TempDir()
	s, seg := headsStore(t, dir, 100) // 2 row groups, 2 MB: ranges cross the read chunks
	if seg.HeadsCRC32C == "" || seg.FooterCRC32C == "" || seg.CRC32C == "" {
		t.Fatalf("segment %+v: want both checksums", seg)
	}
	if h, a := readHeadsAndAll(s); h != nil || a != nil {
		t.Fatalf("intact segment: heads read %v, full read %v", h, a)
	}

	// A value byte: the heads read does not look at it, a full read does.
	off := valueByte(t, dir, seg)
	flip(t, dir, seg.File, off)
	s, _ = reopenHeads(t, s, dir)
	h, a := readHeadsAndAll(s)
	if h != nil {
		t.Fatalf("value byte %d damaged: heads read %v, want it to pass (values are not read)", off, h)
	}
	if !errors.Is(a, pillar.ErrCorrupt) {
		t.Fatalf("value byte %d damaged: full read %v, want ErrCorrupt", off, a)
	}
	flip(t, dir, seg.File, off) // repaired

	// A head byte: a byte of every heads range in turn (the column chunks
	// of the other columns, the footer).
	f, err := os.Open(filepath.Join(dir, "data", seg.File))
	if err != nil {
		t.Fatal(err)
	}
	start, err := parquetFooterStart(f, seg.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := headsRanges(f, start, seg.Bytes)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		for _, off := range []int64{r[0], (r[0] + r[1]) / 2, r[1] - 1} {
			flip(t, dir, seg.File, off)
			s, _ = reopenHeads(t, s, dir)
			h, _ := readHeadsAndAll(s)
			if !errors.Is(h, pillar.ErrCorrupt) {
				t.Fatalf("head byte %d (range %v) damaged: heads read %v, want ErrCorrupt", off, r, h)
			}
			flip(t, dir, seg.File, off)
		}
	}
	s, _ = reopenHeads(t, s, dir)
	if h, a := readHeadsAndAll(s); h != nil || a != nil {
		t.Fatalf("repaired segment: heads read %v, full read %v", h, a)
	}
}

// TestQueueHeadsWithoutHeadsChecksum: a segment written before heads
// checksums (no heads_crc32c, or no footer_crc32c) is checked whole by a
// heads read too.
func TestQueueHeadsWithoutHeadsChecksum(t *testing.T) {
	dir := t.TempDir()
	s, seg := headsStore(t, dir, 10)
	old := seg
	old.HeadsCRC32C = ""
	if _, err := readQueueSegment[queueHead](ctx, s, old, 0, 100, true); err != nil {
		t.Fatalf("intact old segment: %v", err)
	}
	s, _ = reopenHeads(t, s, dir)
	flip(t, dir, seg.File, valueByte(t, dir, seg))
	if _, err := readQueueSegment[queueHead](ctx, s, old, 0, 100, true); !errors.Is(err, pillar.ErrCorrupt) {
		t.Fatalf("old segment with a damaged value byte: heads read %v, want ErrCorrupt (checked whole)", err)
	}
	// A segment with a heads checksum and no footer checksum: its
	// footer would be parsed unchecked, so it is checked whole too.
	noFooter := seg
	noFooter.FooterCRC32C = ""
	if _, err := readQueueSegment[queueHead](ctx, s, noFooter, 0, 100, true); !errors.Is(err, pillar.ErrCorrupt) {
		t.Fatalf("segment without a footer checksum, a damaged value byte: heads read %v, want ErrCorrupt (checked whole)", err)
	}
	// The same file with both sums: the heads read passes.
	if _, err := readQueueSegment[queueHead](ctx, s, seg, 0, 100, true); err != nil {
		t.Fatalf("segment with heads checksum and a damaged value byte: heads read %v", err)
	}
}
