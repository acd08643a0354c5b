package record

import (
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite testdata/page.golden")

// The wire bytes of a fixed record are pinned: serving nodes and old batches
// must keep decoding what this package wrote. A deliberate format change
// regenerates the file with -rewrite.
func TestWireGolden(t *testing.T) {
	p := &PreparedPage{Url: "https://example.com/a", ChunkerVersion: "recursive-1", ModelVersion: "m", ContentHash: "h", UpdatedAtMs: 1764460800000, Title: "T"}
	for i, enc := range []Encoding{Encoding_ENCODING_FLOAT32, Encoding_ENCODING_FLOAT16, Encoding_ENCODING_INT8} {
		c := &Chunk{ChunkNo: int32(i), Text: "chunk", Start: int32(i * 5), End: int32(i*5 + 5)}
		if err := c.SetVector([]float32{0.5, -1, 0.25, 3}, enc); err != nil {
			t.Fatal(err)
		}
		p.Chunks = append(p.Chunks, c)
	}
	b, err := Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	got := hex.EncodeToString(b) + "\n"
	path := filepath.Join("testdata", "page.golden")
	if *rewrite {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("wire bytes changed:\n got %s want %s", got, want)
	}
	raw, _ := hex.DecodeString(strings.TrimSpace(string(want)))
	q, err := Unmarshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	v, err := q.Chunks[2].Vector()
	if err != nil || len(v) != 4 || v[3] != 3 {
		t.Fatalf("int8 chunk decodes as %v (%v)", v, err)
	}
}
