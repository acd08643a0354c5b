package record

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"
)

func samplePage(enc Encoding, dims int) *PreparedPage {
	rng := rand.New(rand.NewPCG(1, 2))
	p := &PreparedPage{
		Url: "https://example.com/a", ChunkerVersion: "recursive-1a2b", ModelVersion: "minilm",
		ContentHash: "abc123", UpdatedAtMs: 1700000000000, Title: "Example",
	}
	for i := range 3 {
		c := &Chunk{ChunkNo: int32(i), Text: "chunk text", Start: int32(10 * i), End: int32(10*i + 9)}
		v := make([]float32, dims)
		for j := range v {
			v[j] = float32(rng.NormFloat64())
		}
		if err := c.SetVector(v, enc); err != nil {
			panic(err)
		}
		p.Chunks = append(p.Chunks, c)
	}
	return p
}

func TestRecordRoundTrip(t *testing.T) {
	for _, enc := range []Encoding{Encoding_ENCODING_FLOAT32, Encoding_ENCODING_FLOAT16, Encoding_ENCODING_INT8} {
		p := samplePage(enc, 384)
		b, err := Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		b2, _ := Marshal(p)
		if string(b) != string(b2) {
			t.Fatalf("%v: marshal is not deterministic", enc)
		}
		q, err := Unmarshal(b)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(p, q) {
			t.Fatalf("%v: round trip differs", enc)
		}
		if want := 384 * ElemSize(enc); len(q.Chunks[0].Embedding) != want {
			t.Fatalf("%v: embedding %d bytes, want %d", enc, len(q.Chunks[0].Embedding), want)
		}
	}
}

func TestVectorErrorBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	v := make([]float32, 4096)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * 3)
	}
	v[0], v[1], v[2] = 0, 1e-6, -65504
	for _, tc := range []struct {
		enc Encoding
		ok  func(x, y, scale float64) bool
	}{
		{Encoding_ENCODING_FLOAT32, func(x, y, _ float64) bool { return x == y }},
		{Encoding_ENCODING_FLOAT16, func(x, y, _ float64) bool {
			if math.Abs(x) < 1.0/(1<<14) {
				return math.Abs(x-y) <= 1.0/(1<<25)
			}
			return math.Abs(x-y) <= math.Abs(x)/(1<<11)
		}},
		{Encoding_ENCODING_INT8, func(x, y, s float64) bool { return math.Abs(x-y) <= s/2*(1+1e-6) }},
	} {
		data, scale, err := EncodeVector(v, tc.enc)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeVector(data, len(v), tc.enc, scale)
		if err != nil {
			t.Fatal(err)
		}
		for i := range v {
			if !tc.ok(float64(v[i]), float64(got[i]), float64(scale)) {
				t.Fatalf("%v: element %d: %v decoded as %v (scale %v)", tc.enc, i, v[i], got[i], scale)
			}
		}
	}
}

// Every finite binary16 value survives float16 → float32 → float16 exactly,
// and a float32 halfway between two halves rounds to the even one.
func TestFloat16Exhaustive(t *testing.T) {
	for h := range 1 << 16 {
		f := Float16From(uint16(h))
		if math.IsNaN(float64(f)) {
			if back := Float16Bits(f); back&0x7c00 != 0x7c00 || back&0x3ff == 0 {
				t.Fatalf("NaN %#04x came back as %#04x", h, back)
			}
			continue
		}
		if back := Float16Bits(f); back != uint16(h) {
			t.Fatalf("%#04x → %v → %#04x", h, f, back)
		}
	}
	// 1 + 2^-11 is halfway between 1 (0x3c00, even) and 1+2^-10 (0x3c01).
	if got := Float16Bits(1 + 1.0/(1<<11)); got != 0x3c00 {
		t.Fatalf("tie rounds to %#04x, want 0x3c00", got)
	}
	if got := Float16Bits(1 + 3.0/(1<<11)); got != 0x3c02 {
		t.Fatalf("tie rounds to %#04x, want 0x3c02", got)
	}
	for _, tc := range []struct {
		in   float32
		want uint16
	}{{65504, 0x7bff}, {65520, 0x7c00}, {1e9, 0x7c00}, {-1e9, 0xfc00}, {1.0 / (1 << 24), 0x0001}, {1.0 / (1 << 26), 0}, {float32(math.Inf(1)), 0x7c00}} {
		if got := Float16Bits(tc.in); got != tc.want {
			t.Errorf("Float16Bits(%v) = %#04x, want %#04x", tc.in, got, tc.want)
		}
	}
}

func TestUnmarshalGarbage(t *testing.T) {
	for _, b := range [][]byte{
		{0xff, 0xff, 0xff},                   // bad tag / truncated varint
		[]byte("hello, world"),               // not protobuf
		{0x0a, 0x05, 'a'},                    // truncated url
		{},                                   // empty: no url
		{0x3a, 0x04, 0x08, 0x01, 0x30, 0x03}, // chunk with dims 3, no url
	} {
		if _, err := Unmarshal(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Unmarshal(%x) = %v, want ErrCorrupt", b, err)
		}
	}
	// A chunk whose embedding does not match dims.
	p := samplePage(Encoding_ENCODING_FLOAT16, 8)
	p.Chunks[1].Dims = 9
	b, _ := proto.Marshal(p)
	if _, err := Unmarshal(b); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("mismatched dims: %v", err)
	}
	if _, err := Marshal(p); err == nil {
		t.Fatal("Marshal accepted mismatched dims")
	}
	if _, _, err := EncodeVector([]float32{1, float32(math.NaN())}, Encoding_ENCODING_INT8); err == nil {
		t.Fatal("int8 accepted NaN")
	}
	if _, err := ParseEncoding("bf16"); err == nil {
		t.Fatal("ParseEncoding accepted bf16")
	}
}

func BenchmarkMarshal(b *testing.B) {
	p := samplePage(Encoding_ENCODING_FLOAT16, 384)
	for b.Loop() {
		if _, err := Marshal(p); err != nil {
			b.Fatal(err)
		}
	}
}
