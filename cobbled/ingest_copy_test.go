package cobbled

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"testing/iotest"
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
		n, err := hashingCopy(&out, in, h)
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
	if _, err := hashingCopy(io.Discard, iotest.TimeoutReader(bytes.NewReader(data)), sha256.New()); !errors.Is(err, iotest.ErrTimeout) {
		t.Fatalf("read error: got %v", err)
	}
	if _, err := hashingCopy(failWriter{boom}, bytes.NewReader(data), sha256.New()); !errors.Is(err, boom) {
		t.Fatalf("write error: got %v", err)
	}
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
					_, err = hashingCopy(f, bytes.NewReader(data), h)
				}
				if err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
		})
	}
}
