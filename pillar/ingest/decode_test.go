package ingest

import (
	"strings"
	"testing"
)

// TestDecodeDeclaredCharset: a <meta charset> other than windows-1252
// decides how a page that is not UTF-8 is read. (The corpus test declares
// ISO-8859-1, which the HTML standard reads as windows-1252, the fallback
// too: there only the summary's label tells whether the declaration was
// used.)
func TestDecodeDeclaredCharset(t *testing.T) {
	for _, c := range []struct {
		name, charset, body, want, how string
	}{
		{"koi8-r", "koi8-r", "\xf0\xd2\xc9\xd7\xc5\xd4, \xcd\xc9\xd2", "Привет, мир", "koi8-r (<meta charset>)"},
		{"shift_jis", "shift_jis", "\x93\xfa\x96{\x8c\xea\x82\xcc\x83y\x81[\x83W", "日本語のページ", "shift_jis (<meta charset>)"},
		{"http-equiv", "windows-1251", "\xcf\xf0\xe8\xe2\xe5\xf2", "Привет", "windows-1251 (<meta charset>)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			meta := `<meta charset="` + c.charset + `">`
			if c.name == "http-equiv" {
				meta = `<meta http-equiv="Content-Type" content="text/html; charset=` + c.charset + `">`
			}
			src := []byte("<html><head>" + meta + "</head><body><p>" + c.body + "</p></body></html>")
			out, how, err := decodeText(src, true)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(out), c.want) || how != c.how {
				t.Fatalf("decoded %q (%s), want it to hold %q (%s)", out, how, c.want, c.how)
			}
			// Not HTML: no <meta> prescan, the windows-1252 fallback.
			out, how, err = decodeText(src, false)
			if err != nil || strings.Contains(string(out), c.want) || !strings.HasPrefix(how, "windows-1252") {
				t.Fatalf("as plain text: %q (%s, %v), want the windows-1252 fallback", out, how, err)
			}
		})
	}
}
