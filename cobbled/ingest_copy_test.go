package cobbled

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/pace"
)

func TestHashingCopy(t *testing.T) {
	data := make([]byte, 3<<20+12345) // several buffers and a short tail
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	want := sha256.Sum256(data)
	for name, src := range map[string]func() io.Reader{
		"whole":    func() io.Reader { return bytes.NewReader(data) },
		"one byte": func() io.Reader { return iotest.OneByteReader(bytes.NewReader(data[:70000])) },
		"data+EOF": func() io.Reader { return iotest.DataErrReader(bytes.NewReader(data)) },
	} {
		in := src()
		var out bytes.Buffer
		h := sha256.New()
		n, err := hashingCopy(&out, in, h, noCPU)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		exp := data
		if name == "one byte" {
			exp = data[:70000]
		}
		if n != int64(len(exp)) || !bytes.Equal(out.Bytes(), exp) {
			t.Fatalf("%s: copied %d bytes (want %d), equal %v", name, n, len(exp), bytes.Equal(out.Bytes(), exp))
		}
		if sum := sha256.Sum256(exp); !bytes.Equal(h.Sum(nil), sum[:]) {
			t.Fatalf("%s: hash differs from the bytes copied", name)
		}
		if name != "one byte" && !bytes.Equal(h.Sum(nil), want[:]) {
			t.Fatalf("%s: wrong hash", name)
		}
	}
	boom := errors.New("boom")
	if _, err := hashingCopy(io.Discard, iotest.TimeoutReader(bytes.NewReader(data)), sha256.New(), noCPU); !errors.Is(err, iotest.ErrTimeout) {
		t.Fatalf("read error: got %v", err)
	}
	if _, err := hashingCopy(failWriter{boom}, bytes.NewReader(data), sha256.New(), noCPU); !errors.Is(err, boom) {
		t.Fatalf("write error: got %v", err)
	}
}

// noCPU takes no CPU slot.
func noCPU() (func(), error) { return func() {}, nil }

// TestHashingCopyCPUSlots: with one CPU slot (pace.Limiter.CPU, adaptive
// mode on) the copy and the hash never compute at once, every chunk takes
// the slot, and a slot that cannot be had ends the copy with its error.
func TestHashingCopyCPUSlots(t *testing.T) {
	l, err := pace.New(pace.Options{TargetP99: time.Hour, CPUSlots: 1})
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 3<<20+17)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	var inSlot, overlaps atomic.Int32
	cpu := func() (func(), error) {
		release, err := l.CPU(context.Background(), pace.Bulk)
		if err != nil {
			return nil, err
		}
		if inSlot.Add(1) > 1 {
			overlaps.Add(1)
		}
		return func() { inSlot.Add(-1); release() }, nil
	}
	var out bytes.Buffer
	h := sha256.New()
	if n, err := hashingCopy(&out, bytes.NewReader(data), h, cpu); err != nil || n != int64(len(data)) {
		t.Fatalf("copied %d, %v", n, err)
	}
	if sum := sha256.Sum256(data); !bytes.Equal(h.Sum(nil), sum[:]) || !bytes.Equal(out.Bytes(), data) {
		t.Fatal("copy or hash differs")
	}
	// Two slot takes per 256 KiB chunk (the write and the hash).
	if s := l.Stats().CPU; s.Slots != 1 || s.Takes < 2*int64(len(data)/(256<<10)) || overlaps.Load() != 0 {
		t.Fatalf("CPU stats %+v, %d overlaps", s, overlaps.Load())
	}
	ctx, cancel := context.WithCancel(context.Background())
	hold, err := l.CPU(ctx, pace.Bulk) // every slot taken: the copy cannot compute
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := hashingCopy(io.Discard, bytes.NewReader(data), sha256.New(), func() (func(), error) { return l.CPU(ctx, pace.Bulk) }); !errors.Is(err, context.Canceled) {
		t.Fatalf("copy without a slot: %v, want context.Canceled", err)
	}
	hold()
}

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }

// BenchmarkHashingCopy compares the download's copy-and-hash with the
// sequential io.Copy through a MultiWriter it replaced (64 MiB into a
// staged file, source in memory).
func BenchmarkHashingCopy(b *testing.B) {
	data := make([]byte, 64<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	for _, mode := range []string{"sequential", "pipelined"} {
		b.Run(mode, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for range b.N {
				f, err := os.Create(filepath.Join(b.TempDir(), "staged.sst"))
				if err != nil {
					b.Fatal(err)
				}
				h := sha256.New()
				if mode == "sequential" {
					_, err = io.Copy(io.MultiWriter(f, h), bytes.NewReader(data))
				} else {
					_, err = hashingCopy(f, bytes.NewReader(data), h, noCPU)
				}
				if err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
		})
	}
}

// TestPipelinedStaging: a batch of several files applies with each file's
// fsync and verification overlapping the next file's download
// (stagePipeline), and a first file that fails verification (valid SHA-256,
// bad block) still fails the batch with ErrCorruptSST after the later
// files were fetched: staging is removed and the previous data serves.
func TestPipelinedStaging(t *testing.T) {
	const parts, p = 2, 1
	objects, dir := t.TempDir(), t.TempDir()
	steps, universe := testSteps(p, parts)
	first := writeBatch(t, objects, parts, p, "m-01", steps[0].kind, steps[0].ops, 0)
	multi := writeBatch(t, objects, parts, p, "m-02", batch.KindSnapshot, steps[3].ops, 1) // one row per file
	if len(multi.Files) < 3 {
		t.Fatalf("%d files, want several", len(multi.Files))
	}
	bad := writeBatch(t, objects, parts, p, "m-03", batch.KindSnapshot, steps[6].ops, 1)
	bad = corruptWithValidSHA(t, objects, bad) // its first file
	n := openTestNode(t, dir, objects, parts, nil)
	defer n.Close()
	ctx := context.Background()
	must(t, n.Apply(ctx, Batch{Seq: 1, Manifest: first}))
	must(t, n.Apply(ctx, Batch{Seq: 2, Manifest: multi}))
	want := model{}.apply(steps[0].kind, steps[0].ops).apply(batch.KindSnapshot, steps[3].ops)
	checkModel(t, n, p, universe, want)
	err := n.Apply(ctx, Batch{Seq: 3, Manifest: bad})
	if !errors.Is(err, ErrCorruptSST) || !strings.Contains(err.Error(), bad.Files[0].Name) {
		t.Fatalf("corrupt first file: %v, want ErrCorruptSST naming %s", err, bad.Files[0].Name)
	}
	if _, err := os.Stat(filepath.Join(dir, partDirName(p), "staging")); !os.IsNotExist(err) {
		t.Fatalf("staging left behind: %v", err)
	}
	checkModel(t, n, p, universe, want)
}

// TestWritebackWriter: writes pass through unchanged, writeback is asked
// for every writebackChunk bytes, and a staged file that is not an
// *os.File (a test's fake) is written without it.
func TestWritebackWriter(t *testing.T) {
	data := make([]byte, 2*writebackChunk+12345)
	r := rand.New(rand.NewPCG(5, 6))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "staged.sst"))
	must(t, err)
	w := &writebackWriter{f: f}
	for off := 0; off < len(data); off += 256 << 10 {
		if _, err := w.Write(data[off:min(off+256<<10, len(data))]); err != nil {
			t.Fatal(err)
		}
	}
	if w.off != int64(len(data)) || w.queued != 2*writebackChunk {
		t.Fatalf("written %d, writeback queued to %d; want %d, %d", w.off, w.queued, len(data), 2*writebackChunk)
	}
	must(t, f.Sync())
	must(t, f.Close())
	got, err := os.ReadFile(f.Name())
	must(t, err)
	if !bytes.Equal(got, data) {
		t.Fatal("file differs from the bytes written")
	}
	fake := &bufFile{}
	w = &writebackWriter{f: fake}
	if _, err := w.Write(data); err != nil || !bytes.Equal(fake.Bytes(), data) || w.queued != int64(len(data)) {
		t.Fatalf("fake file: %v, queued %d", err, w.queued)
	}
}

type bufFile struct{ bytes.Buffer }

func (*bufFile) Sync() error  { return nil }
func (*bufFile) Close() error { return nil }

// TestStagePipeline: wait returns nil with nothing running and the running
// step's error otherwise, once.
func TestStagePipeline(t *testing.T) {
	var s stagePipeline
	if err := s.wait(); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	s.start(func() error { time.Sleep(time.Millisecond); return boom })
	if err := s.wait(); !errors.Is(err, boom) {
		t.Fatalf("wait: %v", err)
	}
	if err := s.wait(); err != nil {
		t.Fatalf("second wait: %v", err)
	}
}
