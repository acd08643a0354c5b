package pqsnappy

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/snappy"
)

// Pages written with Codec are standard Snappy blocks (the reference
// decoder reads them) and Codec reads the reference encoder's blocks, for
// empty, incompressible and repetitive pages.
func TestCodecIsSnappy(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 300<<10)
	for i := range random {
		random[i] = byte(r.Uint32())
	}
	for name, page := range map[string][]byte{
		"empty": {}, "random": random, "text": bytes.Repeat([]byte("the page text repeats "), 10000),
	} {
		enc, err := Default.Encode(make([]byte, 0, 16), page)
		if err != nil {
			t.Fatal(err)
		}
		got, err := snappy.Decode(nil, enc)
		if err != nil || !bytes.Equal(got, page) {
			t.Fatalf("%s: the reference decoder read %d bytes of %d (%v)", name, len(got), len(page), err)
		}
		back, err := Default.Decode(make([]byte, 3), snappy.Encode(nil, page))
		if err != nil || !bytes.Equal(back, page) {
			t.Fatalf("%s: Decode of a reference block: %d bytes of %d (%v)", name, len(back), len(page), err)
		}
	}
	if _, err := Default.Decode(nil, []byte{0xff, 0xff, 0xff}); err == nil {
		t.Fatal("a corrupt block decoded")
	}
}
