package local

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/pillarkit/pillar/internal/pqzstd"
	"github.com/pillarkit/pillar/pillar"
)

// The CRC32C arithmetic: the sum of any range from the running sums at
// its ends, and of a concatenation from its parts.
func TestCRCRangeAndCombine(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	run := func(x int) uint32 { return crc32.Checksum(data[:x], castagnoli) }
	for range 200 {
		a := rng.IntN(len(data))
		b := a + rng.IntN(len(data)-a+1)
		if rng.IntN(8) == 0 {
			b = a
		}
		want := crc32.Checksum(data[a:b], castagnoli)
		if got := crcRange(run(a), run(b), int64(b-a)); got != want {
			t.Fatalf("crcRange [%d,%d): %08x, want %08x", a, b, got, want)
		}
		if got := crcCombine(run(a), want, int64(b-a)); got != run(b) {
			t.Fatalf("crcCombine of [0,%d) and [%d,%d): %08x, want %08x", a, a, b, got, run(b))
		}
	}
}

// segmentRecords returns queue records of every kind a segment holds:
// deletes (no value), small values and incompressible ones of up to 200
// KiB.
func segmentRecords(n int, seed uint64) []pillar.ExportRecord {
	rng := rand.New(rand.NewPCG(seed, 1))
	fill := rand.NewChaCha8([32]byte{byte(seed)})
	out := make([]pillar.ExportRecord, n)
	for i := range out {
		r := pillar.ExportRecord{Partition: 2, PageKey: keyOfPartition(2, 4), Op: pillar.OpPut, Cause: "c" + strconv.Itoa(i)}
		switch i % 4 {
		case 0:
			r.Op = pillar.OpDelete
		case 1:
			r.Value = []byte(strings.Repeat("v", 1+i%100))
		default:
			r.Value = make([]byte, rng.IntN(200<<10))
			fill.Read(r.Value)
			r.Priority = pillar.PriorityBulk
		}
		out[i] = r
	}
	return out
}

// writeTestSegment writes recs into a segment file at path through a
// segFile over raw (nil: the file itself), a row group every group
// records, with the store's Parquet writer or (buffered) one that writes
// through a buffer of its own, whose writes do not follow the column
// chunks. It returns the segFile (closed) and its sums.
func writeTestSegment(t testing.TB, path string, raw func(File) File, recs []pillar.ExportRecord, group int, buffered bool) (f *segFile, heads, footer string, err error) {
	t.Helper()
	file, err := OSFS{}.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if raw != nil {
		file = raw(file)
	}
	f = newSegFile(file)
	w := newSegmentWriter(f)
	if buffered {
		w = parquet.NewGenericWriter[pillar.ExportRecord](f, parquet.Compression(pqzstd.Default))
	}
	for i := range recs {
		if _, err := w.Write(recs[i : i+1]); err != nil {
			t.Fatal(err)
		}
		if (i+1)%group == 0 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := closeSegmentWriter(w, f); err != nil {
		t.Fatal(err)
	}
	heads, footer, err = f.streamSums(ctx, w.File().Metadata(), func() (io.ReaderAt, func(), error) {
		if err := f.buf.Flush(); err != nil {
			return nil, nil, err
		}
		r, err := os.Open(path)
		if err != nil {
			return nil, nil, err
		}
		return r, func() { r.Close() }, nil
	})
	if cerr := f.Close(); cerr != nil {
		t.Fatal(cerr)
	}
	return f, heads, footer, err
}

// The sums from the write stream equal those of the file read back
// (segmentSums, how staging computed them before), with the store's
// writer (every column chunk boundary at a mark: the few KB around the
// footer's start read back, nothing else) and with a writer whose writes
// cut across the column chunks (the boundaries read back from between the
// marks around them).
func TestStreamSumsMatchReread(t *testing.T) {
	recs := segmentRecords(300, 1)
	for _, tc := range []struct {
		name     string
		group    int
		buffered bool
	}{{"store-writer", 17, false}, {"store-writer-one-group", 1000, false}, {"store-writer-row-groups-of-1", 1, false}, {"buffered-writer", 17, true}} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "q.parquet")
			f, heads, footer, err := writeTestSegment(t, path, nil, recs, tc.group, tc.buffered)
			if err != nil {
				t.Fatal(err)
			}
			r, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			wh, wf, err := segmentSums(ctx, r, f.n, f.sum())
			if err != nil {
				t.Fatal(err)
			}
			if heads != wh || footer != wf {
				t.Fatalf("stream sums heads %s footer %s, the file read back has heads %s footer %s", heads, footer, wh, wf)
			}
			t.Logf("%d bytes, %d marks, %d bytes read back", f.n, len(f.marks), f.readBack)
			if !tc.buffered && f.readBack > 2*markGap {
				t.Errorf("the store's writer: %d bytes read back, want at most %d (the footer's start; a column chunk boundary inside a write?)", f.readBack, 2*markGap)
			}
			if tc.buffered && (f.readBack == 0 || f.readBack > f.n/4) {
				t.Errorf("a writer with a buffer of its own: %d of %d bytes read back, want some (boundaries inside writes), not most", f.readBack, f.n)
			}
		})
	}
}

// flipFile writes every byte inverted: the file is not what was written.
type flipFile struct{ File }

func (f flipFile) Write(b []byte) (int, error) {
	c := bytes.Clone(b)
	for i := range c {
		c[i] ^= 0xff
	}
	return f.File.Write(c)
}

// Bytes read back for a boundary between marks are checked against the
// running sums at both marks: a file that is not what was written fails
// with ErrCorrupt, rather than its sums describing the damage.
func TestStreamSumsReadBackChecked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.parquet")
	_, _, _, err := writeTestSegment(t, path, func(f File) File { return flipFile{f} }, segmentRecords(40, 2), 7, true)
	if !errors.Is(err, pillar.ErrCorrupt) || !strings.Contains(err.Error(), "read back") {
		t.Fatalf("sums of a file damaged on its way to disk, read back between marks: %v, want ErrCorrupt saying the bytes read back differ", err)
	}
}

// readChars is the process's rchar (bytes read through read(2) and
// pread(2), from the page cache or not).
func readChars(t testing.TB) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Skipf("no /proc/self/io: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "rchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Skip("no rchar in /proc/self/io")
	return 0
}

// TestCommitReadsNoValues: a commit does not read its queue segments back
// to sum them (I/O proportional to the enqueued bytes: written once, not
// read): 40 MiB of values spooled in two partitions cost the commit under
// 1 MiB of reads, and the sums it records are those of the files.
// On the code before stream sums the commit read every staged segment
// back whole (segmentSums): 40 MiB.
func TestCommitReadsNoValues(t *testing.T) {
	dir := t.TempDir()
	s, err := Create(dir, &Options{Partitions: 2, spillBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.NewChaCha8([32]byte{7})
	var enqueued int64
	for i := range 160 {
		v := make([]byte, 256<<10)
		rng.Read(v)
		p := i % 2
		if err := tx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(p), PageKey: keyOfPartition(p, 2), Op: pillar.OpPut, Value: v}); err != nil {
			t.Fatal(err)
		}
		enqueued += int64(len(v))
	}
	r0 := readChars(t)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	read := readChars(t) - r0
	m, err := s.current()
	if err != nil {
		t.Fatal(err)
	}
	var segs int
	for p := range 2 {
		for _, sg := range allSegments(t, s, m, p) {
			segs++
			f, err := os.Open(filepath.Join(dir, "data", sg.File))
			if err != nil {
				t.Fatal(err)
			}
			wh, wf, err := segmentSums(ctx, f, sg.Bytes, sg.CRC32C)
			f.Close()
			if err != nil {
				t.Fatalf("segment %s: %v", sg.File, err)
			}
			if sg.HeadsCRC32C != wh || sg.FooterCRC32C != wf {
				t.Fatalf("segment %s: the manifest records heads %s footer %s, the file has %s %s", sg.File, sg.HeadsCRC32C, sg.FooterCRC32C, wh, wf)
			}
		}
	}
	t.Logf("commit of %d MiB enqueued in %d segments read %d KiB", enqueued>>20, segs, read>>10)
	if read > 1<<20 {
		t.Errorf("the commit read %d KiB for %d MiB enqueued: it reads the segments back", read>>10, enqueued>>20)
	}
	sn, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	for p := range 2 {
		heads, err := sn.(pillar.QueueHeadReader).ReadQueueHeads(ctx, p, 0, 1000)
		if err != nil || len(heads) != 80 {
			t.Fatalf("partition %d: %d heads, %v", p, len(heads), err)
		}
	}
	if rep, err := s.Verify(ctx, nil); err != nil || !rep.OK() {
		t.Fatalf("verify: %v %+v", err, rep)
	}
}

// BenchmarkQueueCommitSums: what a transaction costs that enqueues 256 MiB
// (4 partitions, 64 KiB incompressible values: 2 segments a partition, the
// first rolled, synced and summed during Enqueue, the last at Commit) and
// commits, with the heads and footer sums from the write stream (stream)
// and computed as before, by reading each staged segment back whole
// (reread). ns/op is the transaction (Enqueue calls and Commit; the values
// are made beforehand), commit-ms the Commit alone, read-MiB/op the
// transaction's reads (rchar).
//
//	go test -run '^$' -bench QueueCommitSums -benchtime 3x ./pillar/local/
func BenchmarkQueueCommitSums(b *testing.B) {
	const total, size = 256 << 20, 64 << 10
	rng := rand.NewChaCha8([32]byte{9})
	vals := make([][]byte, total/size)
	for i := range vals {
		vals[i] = make([]byte, size)
		rng.Read(vals[i])
	}
	for _, mode := range []string{"reread", "stream"} {
		b.Run("sums="+mode, func(b *testing.B) {
			s, err := Create(filepath.Join(b.TempDir(), "store"), &Options{Partitions: 4, rereadSums: mode == "reread", RetainManifests: 1})
			if err != nil {
				b.Fatal(err)
			}
			var read int64
			var commit time.Duration
			b.SetBytes(total)
			b.ResetTimer()
			for range b.N {
				r0 := readChars(b)
				tx, err := s.Begin(ctx)
				if err != nil {
					b.Fatal(err)
				}
				for i, v := range vals {
					p := i % 4
					if err := tx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(p), PageKey: keyOfPartition(p, 4), Op: pillar.OpPut, Value: v}); err != nil {
						b.Fatal(err)
					}
				}
				c0 := time.Now()
				if err := tx.Commit(ctx); err != nil {
					b.Fatal(err)
				}
				commit += time.Since(c0)
				read += readChars(b) - r0
			}
			b.ReportMetric(float64(read)/float64(b.N)/(1<<20), "read-MiB/op")
			b.ReportMetric(float64(commit.Milliseconds())/float64(b.N), "commit-ms")
		})
	}
}

// BenchmarkSegmentSums: the sums step alone, of one full segment (56 row
// groups of 1 MiB of incompressible values): from the write stream's
// marks, and by reading the file back whole (page cache).
func BenchmarkSegmentSums(b *testing.B) {
	path := filepath.Join(b.TempDir(), "q.parquet")
	file, err := OSFS{}.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	f := newSegFile(file)
	w := newSegmentWriter(f)
	rng := rand.NewChaCha8([32]byte{5})
	for g := range fullSegmentRecords {
		for range 16 {
			v := make([]byte, 64<<10)
			rng.Read(v)
			if _, err := w.Write([]pillar.ExportRecord{{Partition: 0, PageKey: keyOfPartition(0, 1), Op: pillar.OpPut, Value: v, Cause: fmt.Sprint(g)}}); err != nil {
				b.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	md := w.File().Metadata()
	open := func() (io.ReaderAt, func(), error) { r, err := os.Open(path); return r, func() { r.Close() }, err }
	b.Run("sums=reread", func(b *testing.B) {
		b.SetBytes(f.n)
		for range b.N {
			r, err := os.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			if _, _, err := segmentSums(ctx, r, f.n, f.sum()); err != nil {
				b.Fatal(err)
			}
			r.Close()
		}
	})
	b.Run("sums=stream", func(b *testing.B) {
		b.SetBytes(f.n)
		for range b.N {
			marks := f.marks
			if _, _, err := f.streamSums(ctx, md, open); err != nil {
				b.Fatal(err)
			}
			f.marks = marks
		}
	})
}
