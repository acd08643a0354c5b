package sstverify

import (
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/linxGnu/grocksdb"

	"github.com/pillarkit/pillar/internal/rocks"
)

// BenchmarkVerify measures Verify on a 64 MiB SST written with the toolkit's
// table options (lz4, 16 KiB blocks, ~50 KB values of random bytes), against
// the floor of reading the same file, and the SHA-256 the node already
// computes while downloading.
//
//	go test -run '^$' -bench . -benchtime 10x ./internal/sstverify/
func BenchmarkVerify(b *testing.B) {
	path := filepath.Join(b.TempDir(), "big.sst")
	opts, err := rocks.TableConfig{}.Options(nil)
	if err != nil {
		b.Fatal(err)
	}
	defer opts.Destroy()
	env := grocksdb.NewDefaultEnvOptions()
	defer env.Destroy()
	w := grocksdb.NewSSTFileWriter(env, opts)
	if err := w.Open(path); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	val := make([]byte, 50<<10)
	for i := 0; i < 64<<20/len(val); i++ {
		for j := range val {
			val[j] = byte(rng.Uint32())
		}
		if err := w.Put([]byte(fmt.Sprintf("%016x", i)), val); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Finish(); err != nil {
		b.Fatal(err)
	}
	w.Destroy()
	fi, _ := os.Stat(path)
	b.Run("verify", func(b *testing.B) {
		b.SetBytes(fi.Size())
		for i := 0; i < b.N; i++ {
			if _, err := Verify(path); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("read-floor", func(b *testing.B) {
		b.SetBytes(fi.Size())
		buf := make([]byte, 1<<20)
		for i := 0; i < b.N; i++ {
			f, _ := os.Open(path)
			io.CopyBuffer(io.Discard, f, buf)
			f.Close()
		}
	})
	b.Run("sha256", func(b *testing.B) {
		b.SetBytes(fi.Size())
		buf := make([]byte, 1<<20)
		for i := 0; i < b.N; i++ {
			f, _ := os.Open(path)
			io.CopyBuffer(sha256.New(), f, buf)
			f.Close()
		}
	})
}
