package keyfmt

import (
	"strings"
	"testing"
)

func TestShort(t *testing.T) {
	for _, c := range []struct {
		key  []byte
		want string
	}{
		{nil, "empty key, 0 bytes"},
		{[]byte{0x00, 0xff}, "00ff, 2 bytes"},
		{[]byte("0123456789abcdef"), "30313233343536373839616263646566, 16 bytes"},
		{[]byte("0123456789abcdefX"), "30313233343536373839616263646566…, 17 bytes"},
	} {
		if got := Short(c.key); got != c.want {
			t.Errorf("Short(%q) = %q, want %q", c.key, got, c.want)
		}
	}
	// An 8 MiB key is quoted in a few dozen bytes.
	if got := Short(make([]byte, 8<<20)); len(got) > 64 || !strings.HasSuffix(got, "…, 8388608 bytes") {
		t.Errorf("Short(8 MiB) = %q (%d bytes)", got, len(got))
	}
}

func TestShortText(t *testing.T) {
	if got, want := ShortText("abc"), `"abc", 3 bytes`; got != want {
		t.Errorf("ShortText = %q, want %q", got, want)
	}
	long := strings.Repeat("é", 1<<20) // 2 MiB of a two-byte character
	got := ShortText(long)
	if len(got) > 80 || !strings.HasSuffix(got, "…, 2097152 bytes") || !strings.HasPrefix(got, `"éé`) {
		t.Errorf("ShortText(2 MiB) = %q (%d bytes)", got, len(got))
	}
}
