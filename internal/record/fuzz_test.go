package record

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzUnmarshal feeds arbitrary bytes to the prepared-record decoder. A
// decode either fails with ErrCorrupt or yields a record that passes Check,
// whose chunk vectors all decode, and that re-encodes to a stable byte form
// (Marshal ∘ Unmarshal ∘ Marshal is a fixed point).
func FuzzUnmarshal(f *testing.F) {
	for _, enc := range []Encoding{Encoding_ENCODING_FLOAT32, Encoding_ENCODING_FLOAT16, Encoding_ENCODING_INT8} {
		b, err := Marshal(samplePage(enc, 8))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	noVec, _ := Marshal(&PreparedPage{Url: "https://example.com/", Chunks: []*Chunk{{ChunkNo: 1, Text: "x"}}})
	f.Add(noVec)
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x01, 'u'})
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Unmarshal(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Unmarshal error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		if err := Check(p); err != nil {
			t.Fatalf("decoded record fails Check: %v", err)
		}
		for _, c := range p.GetChunks() {
			v, err := c.Vector()
			if err != nil {
				t.Fatalf("decoded record's chunk vector: %v", err)
			}
			if len(v) != int(c.GetDims()) {
				t.Fatalf("chunk %d: %d elements, dims %d", c.GetChunkNo(), len(v), c.GetDims())
			}
		}
		b1, err := Marshal(p)
		if err != nil {
			t.Fatalf("re-marshal of a decoded record: %v", err)
		}
		p2, err := Unmarshal(b1)
		if err != nil {
			t.Fatalf("decode of a re-marshalled record: %v", err)
		}
		b2, err := Marshal(p2)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b1, b2) {
			t.Fatalf("re-encoding is not stable:\n%x\n%x", b1, b2)
		}
	})
}
