package pqzstd

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go"
)

type row struct {
	Key  string `parquet:"key"`
	Text string `parquet:"text"`
}

// Files written with Codec read back with parquet-go's own ZSTD codec (the
// registry's, chosen by the codec id in the file), row for row.
func TestRoundTripThroughParquet(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var rows []row
	for i := range 3000 {
		var b strings.Builder
		for b.Len() < 100+rng.IntN(20000) {
			fmt.Fprintf(&b, "word%d ", rng.IntN(500))
		}
		rows = append(rows, row{Key: fmt.Sprintf("k%06d", i), Text: b.String()})
	}
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[row](&buf, parquet.Compression(Default))
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r := parquet.NewGenericReader[row](bytes.NewReader(buf.Bytes()))
	got := make([]row, len(rows)+1)
	n, err := r.Read(got)
	if err != nil && err != io.EOF {
		t.Fatal(err)
	}
	if n != len(rows) {
		t.Fatalf("read %d rows, wrote %d", n, len(rows))
	}
	for i := range rows {
		if got[i] != rows[i] {
			t.Fatalf("row %d differs", i)
		}
	}
	if raw := len(rows) * 10000; buf.Len() > raw/2 {
		t.Fatalf("file of %d bytes for ~%d bytes of text: not compressed", buf.Len(), raw)
	}
}

// Encode and Decode are safe for concurrent use and round-trip inputs
// larger than the window.
func TestConcurrentAndLargerThanWindow(t *testing.T) {
	c := &Codec{Window: 1 << 10}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			src := bytes.Repeat([]byte(fmt.Sprintf("goroutine %d says hello; ", g)), 4000)
			for range 20 {
				enc, err := c.Encode(nil, src)
				if err != nil {
					errs <- err
					return
				}
				dec, err := c.Decode(nil, enc)
				if err != nil || !bytes.Equal(dec, src) {
					errs <- fmt.Errorf("round trip: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// The point of the package: an encoder's memory follows Window, not the
// library's 8 MiB default.
func TestEncoderMemory(t *testing.T) {
	src := bytes.Repeat([]byte("some page text "), 16<<10)
	// Two collections: sync.Pool keeps what earlier tests pooled in its
	// victim cache across the first one, and freeing it after "before"
	// would make the heap shrink across the measurement.
	heap := func() int64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	// The encoders are built and used directly, not through the pool: a
	// collection during the loop may empty the pool, and the test would
	// then measure nothing.
	hold := func(build func() (*zstd.Encoder, error)) int64 {
		before := heap()
		var keep []*zstd.Encoder
		for range 8 {
			e, err := build()
			if err != nil {
				t.Fatal(err)
			}
			e.EncodeAll(src, nil)
			keep = append(keep, e)
		}
		grown := heap() - before
		runtime.KeepAlive(keep)
		return grown
	}
	const bound = 8 * (4 << 20)
	grown := hold((&Codec{}).newEncoder)
	if grown > bound {
		t.Fatalf("8 encoders hold %d MB", grown>>20)
	}
	// The control: the library's default window (8 MiB) exceeds the bound,
	// so the check above can fail.
	library := hold(func() (*zstd.Encoder, error) {
		return zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	})
	if library <= bound {
		t.Fatalf("8 encoders with the library's default window hold only %d MB: the bound tells nothing", library>>20)
	}
	t.Logf("8 encoders with the library's default window hold %.1f MB", float64(library)/(1<<20))
	t.Logf("8 encoders hold %.1f MB", float64(grown)/(1<<20))
}
