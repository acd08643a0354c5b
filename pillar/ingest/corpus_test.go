package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/local"
)

// realCorpus writes the inputs real documentation folders have: nested
// folders, file:// canonical links, pages in other encodings, a redirect
// stub, an empty body, a duplicate canonical URL, an oversize page.
func realCorpus(t *testing.T) string {
	in := t.TempDir()
	page := func(canon, body string) []byte {
		l := ""
		if canon != "" {
			l = `<link rel="canonical" href="` + canon + `">`
		}
		return []byte("<html><head><title>T</title>" + l + "</head><body><p>" + body + "</p></body></html>")
	}
	write(t, in, "index.html", page("file:///usr/share/doc/pkg/html/index.html", "The index of the manual."))
	write(t, in, "guide/intro.html", page("file:///usr/share/doc/pkg/html/guide/intro.html", "Introduction to the guide."))
	write(t, in, "guide/deep/more.html", page("", "A page two folders down."))
	write(t, in, "api/ref.html", page("https://pkg.example.org/api/ref.html", "The API reference."))
	write(t, in, "api/ref2.html", page("https://pkg.example.org/api/ref.html", "A second copy of the reference."))
	write(t, in, "latin1.html", []byte(`<html><head><meta http-equiv="Content-Type" content="text/html; charset=ISO-8859-1"><title>Caf`+"\xe9"+`</title></head><body><p>Cr`+"\xe8"+`me br`+"\xfb"+`l`+"\xe9"+`e</p></body></html>`))
	write(t, in, "declared-but-utf8.html", []byte(`<html><head><meta charset="iso-8859-1"></head><body><p>Déjà vu</p></body></html>`))
	utf16 := []byte{0xFF, 0xFE}
	for _, r := range "<html><body><p>Wide page</p></body></html>" {
		utf16 = append(utf16, byte(r), 0)
	}
	write(t, in, "wide.html", utf16)
	write(t, in, "bom.txt", append([]byte{0xEF, 0xBB, 0xBF}, "# BOM\n\ntext with a byte-order mark"...))
	write(t, in, "old.html", []byte(`<html><head><meta http-equiv="refresh" content="0; URL='index.html'"></head><body>Moved.</body></html>`))
	write(t, in, "blank.html", []byte(`<html><head><title>Blank</title></head><body></body></html>`))
	write(t, in, "huge.html", bytes.Repeat([]byte("<p>x</p>"), 4000))
	write(t, in, "drafts/wip.html", page("", "work in progress"))
	return in
}

func TestIngestRealCorpus(t *testing.T) {
	in := realCorpus(t)
	st, err := local.Create(filepath.Join(t.TempDir(), "store"), &local.Options{Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s, err := Run(context.Background(), st, Options{From: in, BaseURL: "https://pkg.example.org/doc", MaxPageBytes: 20000, Exclude: []string{"drafts"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(s.Summary())
	check := func(what string, got, want int) {
		t.Helper()
		if got != want {
			t.Errorf("%s: %d, want %d\n%s", what, got, want, s.Summary())
		}
	}
	check("files", s.Files, 13)
	check("pages", s.Pages, 9)
	check("canonical ignored", s.CanonicalIgnored, 2)
	check("transcoded", s.Transcoded, 2) // latin1 (meta), wide (BOM); declared-but-utf8 is UTF-8
	check("redirects", s.Redirects, 1)
	check("empty", s.Empty, 1)
	check("duplicates", s.Duplicates, 1)
	check("too large", s.TooLarge, 1)
	check("excluded", s.Excluded, 1)
	check("skipped", s.Skipped(), 4)
	docs := map[string]pillar.Doc{}
	sn, _ := st.Snapshot(context.Background())
	defer sn.Release()
	for _, d := range readDocs(t, sn) {
		docs[d.URL] = d
	}
	for u, text := range map[string]string{
		"https://pkg.example.org/doc/index.html":             "The index of the manual.",
		"https://pkg.example.org/doc/guide/intro.html":       "Introduction to the guide.",
		"https://pkg.example.org/doc/guide/deep/more.html":   "A page two folders down.",
		"https://pkg.example.org/api/ref.html":               "The API reference.",
		"https://pkg.example.org/doc/latin1.html":            "Crème brûlée",
		"https://pkg.example.org/doc/declared-but-utf8.html": "Déjà vu",
		"https://pkg.example.org/doc/wide.html":              "Wide page",
		"https://pkg.example.org/doc/bom.txt":                "# BOM\n\ntext with a byte-order mark",
		"https://pkg.example.org/doc/blank.html":             "",
	} {
		d, ok := docs[u]
		if !ok {
			t.Errorf("no page %s (have %d pages)", u, len(docs))
			continue
		}
		if d.Text != text {
			t.Errorf("%s: text %q, want %q", u, d.Text, text)
		}
	}
	if d := docs["https://pkg.example.org/doc/latin1.html"]; d.Title != "Café" {
		t.Errorf("latin1 title %q", d.Title)
	}
	// The summary says each thing once, with examples.
	sum := s.Summary()
	for _, want := range []string{"canonical_ignored", "index.html: file:///usr/share/doc/pkg/html/index.html", "transcoded", "latin1.html: windows-1252 (<meta charset>)",
		"wide.html: utf-16le (byte-order mark)", "redirect", "old.html: to index.html", "duplicate", "api/ref2.html: same URL as api/ref.html",
		"too_large", "huge.html", "excluded", "drafts/wip.html: matches --exclude drafts", "empty", "blank.html"} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary lacks %q:\n%s", want, sum)
		}
	}
	if n := strings.Count(sum, "canonical_ignored"); n != 1 {
		t.Errorf("canonical_ignored said %d times:\n%s", n, sum)
	}
	js, _ := json.Marshal(s)
	if !bytes.Contains(js, []byte(`"outcome":"canonical_ignored","files":2,"kept":true`)) {
		t.Errorf("JSON summary: %s", js)
	}
}

func TestCanonicalPolicies(t *testing.T) {
	in := realCorpus(t)
	for _, tc := range []struct {
		policy     string
		pages      int
		skippedNoC int
		ignored    int
	}{
		{CanonicalIgnore, 10, 0, 0}, // ref2 is no longer a duplicate of ref
		{CanonicalRequire, 1, 8, 0}, // only api/ref.html (and its duplicate) has an http(s) canonical
		{CanonicalPrefer, 9, 0, 2},
	} {
		st, err := local.Create(filepath.Join(t.TempDir(), "store"), &local.Options{Partitions: 4})
		if err != nil {
			t.Fatal(err)
		}
		s, err := Run(context.Background(), st, Options{From: in, MaxPageBytes: 20000, Canonical: tc.policy, Exclude: []string{"drafts/**"}})
		st.Close()
		if err != nil {
			t.Fatal(err)
		}
		if s.Pages != tc.pages || s.NoCanonical != tc.skippedNoC || s.CanonicalIgnored != tc.ignored {
			t.Errorf("--canonical %s: pages %d, no canonical %d, ignored %d; want %d, %d, %d\n%s", tc.policy, s.Pages, s.NoCanonical, s.CanonicalIgnored,
				tc.pages, tc.skippedNoC, tc.ignored, s.Summary())
		}
	}
	st, _ := local.Create(filepath.Join(t.TempDir(), "store"), &local.Options{Partitions: 4})
	defer st.Close()
	if _, err := Run(context.Background(), st, Options{From: in, Canonical: "sometimes"}); err == nil || !strings.Contains(err.Error(), `"sometimes"`) {
		t.Fatalf("bad --canonical: %v", err)
	}
	if _, err := Run(context.Background(), st, Options{From: in, Include: []string{"[a-"}}); err == nil || !strings.Contains(err.Error(), `"[a-"`) {
		t.Fatalf("bad glob: %v", err)
	}
}

func TestIncludeExclude(t *testing.T) {
	in := realCorpus(t)
	st, _ := local.Create(filepath.Join(t.TempDir(), "store"), &local.Options{Partitions: 4})
	defer st.Close()
	s, err := Run(context.Background(), st, Options{From: in, Include: []string{"guide/**/*.html", "*.txt"}, Exclude: []string{"intro.*"}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Pages != 2 || s.Excluded != 11 {
		t.Fatalf("include guide/**/*.html and *.txt, exclude intro.*: %d pages, %d excluded\n%s", s.Pages, s.Excluded, s.Summary())
	}
}

func TestMatchGlob(t *testing.T) {
	for _, tc := range []struct {
		pat, rel string
		want     bool
	}{
		{"*.html", "a/b/c.html", true},
		{"*.html", "a/b/c.txt", false},
		{"drafts", "x/drafts/y.html", true},
		{"api/**", "api/a/b.html", true},
		{"api/**", "apix/a.html", false},
		{"api/**/*.html", "api/b.html", true},
		{"api/**/*.html", "api/x/y/b.html", true},
		{"api/*.html", "api/x/b.html", false},
		{"./api/*.html", "api/b.html", true},
	} {
		if got := matchGlob(tc.pat, tc.rel); got != tc.want {
			t.Errorf("matchGlob(%q, %q) = %v, want %v", tc.pat, tc.rel, got, tc.want)
		}
	}
}

func TestReadFile(t *testing.T) {
	in := realCorpus(t)
	f := ReadFile(filepath.Join(in, "guide/intro.html"), Options{From: in, BaseURL: "https://b.example/"})
	if f.Outcome != "" || f.Doc.URL != "https://b.example/guide/intro.html" || len(f.Notes) != 1 || f.Notes[0] != OutcomeCanonicalIgnored {
		t.Fatalf("ReadFile: %+v", f)
	}
	if f := ReadFile(filepath.Join(in, "old.html"), Options{From: in}); f.Outcome != OutcomeRedirect {
		t.Fatalf("ReadFile of a redirect: %+v", f)
	}
}
