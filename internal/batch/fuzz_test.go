package batch

import (
	"strings"
	"testing"
)

// FuzzDecode: Decode never panics, and whatever it accepts validates and
// survives an encode/decode round trip unchanged.
func FuzzDecode(f *testing.F) {
	good := `{"format":1,"id":"exp1-p00007","partition":7,"partitions":64,"kind":"snapshot",
"files":[{"name":"000001.sst","size":10,"sha256":"` + strings.Repeat("ab", 32) + `","keys":2}],
"keys":2,"deletes":0,"smallest":"00","largest":"ff","source":"test","created_at_ms":1}`
	f.Add([]byte(good))
	f.Add([]byte(`{"format":1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("Decode accepted an invalid manifest: %v", err)
		}
		enc, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		m2, err := Decode(enc)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		e2, _ := m2.Encode()
		if string(e2) != string(enc) {
			t.Fatal("round trip changed the manifest")
		}
	})
}
