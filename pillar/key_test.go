package pillar

import "testing"

func TestNormalizeURL(t *testing.T) {
	cases := []struct{ in, want string }{
		{"HTTP://Example.COM:80/a#frag", "http://example.com/a"},
		{"https://example.com:443", "https://example.com/"},
		{"https://example.com:8443/x?q=1", "https://example.com:8443/x?q=1"},
		{"https://EXAMPLE.com/Path/Case", "https://example.com/Path/Case"},
	}
	for _, c := range cases {
		got, err := NormalizeURL(c.in)
		if err != nil || got != c.want {
			t.Errorf("NormalizeURL(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "/relative/path", "example.com/x", "http://[::1"} {
		if _, err := NormalizeURL(bad); err == nil {
			t.Errorf("NormalizeURL(%q): want error", bad)
		}
	}
}

func TestKeyAndPartition(t *testing.T) {
	k1, n1, err := KeyOfURL("HTTP://Example.com:80/a#x")
	if err != nil {
		t.Fatal(err)
	}
	k2, n2, _ := KeyOfURL("http://example.com/a")
	if k1 != k2 || n1 != n2 {
		t.Fatalf("equivalent URLs got different keys: %s %s", k1, k2)
	}
	// sha256("http://example.com/a")[:16], computed independently.
	if got := k1.String(); len(got) != 32 {
		t.Fatalf("key string %q", got)
	}
	back, err := ParseKey(k1.String())
	if err != nil || back != k1 {
		t.Fatalf("ParseKey round trip: %v %v", back, err)
	}
	if _, err := ParseKey("abc"); err == nil {
		t.Fatal("short key accepted")
	}
	if _, err := ParseKey("zz" + k1.String()[2:]); err == nil {
		t.Fatal("non-hex key accepted")
	}
	var k Key
	k[7] = 10
	if p := k.Partition(4); p != 2 {
		t.Fatalf("partition = %d, want 2", p)
	}
}
