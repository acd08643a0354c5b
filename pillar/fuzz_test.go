package pillar

import "testing"

// FuzzKeys: ParseKey and NormalizeURL never panic; what ParseKey accepts
// round-trips; a normalized URL is a fixed point of NormalizeURL.
func FuzzKeys(f *testing.F) {
	for _, s := range []string{"HTTP://Example.COM:80/a#x", "https://[::1]:443/", "0123456789abcdef0123456789abcdef", "", "%zz", "http://a b/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if k, err := ParseKey(s); err == nil && k.String() != s {
			// Upper-case hex parses but prints lower-case.
			if back, err := ParseKey(k.String()); err != nil || back != k {
				t.Fatalf("ParseKey(%q) = %s does not round-trip", s, k)
			}
		}
		n, err := NormalizeURL(s)
		if err != nil {
			return
		}
		n2, err := NormalizeURL(n)
		if err != nil || n2 != n {
			t.Fatalf("NormalizeURL not idempotent: %q → %q → %q (%v)", s, n, n2, err)
		}
		k1, _, _ := KeyOfURL(s)
		if k1 != KeyOfNormalized(n) {
			t.Fatalf("KeyOfURL(%q) differs from the key of its normal form", s)
		}
		if p := k1.Partition(7); p < 0 || p >= 7 {
			t.Fatalf("partition %d", p)
		}
	})
}
