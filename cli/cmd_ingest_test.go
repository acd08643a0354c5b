package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pillarkit/pillar/pillar/ingest"
)

// pillar ingest on a folder as Debian installs one: a file:// canonical link
// is replaced by --base-url + the path and said once in the summary; --json
// gives the same summary; a bad --canonical names itself.
func TestIngestCLISummary(t *testing.T) {
	dir := t.TempDir()
	for rel, body := range map[string]string{
		"a/index.html": `<html><head><link rel="canonical" href="file:///usr/share/doc/x/a/index.html"></head><body><p>index</p></body></html>`,
		"a/b/c.html":   `<html><head><link rel="canonical" href="file:///usr/share/doc/x/a/b/c.html"></head><body><p>c</p></body></html>`,
		"old.html":     `<html><head><meta http-equiv="refresh" content="0;url=a/index.html"></head></html>`,
		"notes.txt":    "Notes\n\nplain text",
	} {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		// Written an hour ago: a file modified within 2 s of an ingest is
		// read again by the next one (the listing's racy-mtime rule).
		old := time.Now().Add(-time.Hour)
		os.Chtimes(p, old, old)
	}
	store := filepath.Join(t.TempDir(), "store")
	out, _, err := runSubsets(t, "ingest", "--store", store, "--from", dir, "--base-url", "https://x.example/doc/", "--partitions", "4", "--exclude", "*.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"4 files: 2 pages in the store (2 new, 0 changed, 0 unchanged), 2 skipped", "canonical_ignored", "a/b/c.html: file:///usr/share/doc/x/a/b/c.html",
		"redirect", "old.html: to a/index.html", "excluded", "notes.txt: matches --exclude *.txt"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "canonical_ignored") != 1 || strings.Contains(out, "WARN") {
		t.Errorf("want one canonical_ignored line and no WARN per file:\n%s", out)
	}
	// --rehash reads every file again (the notes come from reading them).
	out, _, err = runSubsets(t, "ingest", "--store", store, "--from", dir, "--base-url", "https://x.example/doc/", "--json", "--exclude", "*.txt", "--rehash")
	if err != nil {
		t.Fatal(err)
	}
	var st ingest.Stats
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if st.Unchanged != 2 || st.CanonicalIgnored != 2 || st.Redirects != 1 || st.Excluded != 1 || len(st.Outcomes) != 4 || st.Outcomes[0].Outcome != ingest.OutcomeUnchanged {
		t.Fatalf("JSON summary %+v", st)
	}
	out, _, err = runSubsets(t, "ingest", "--store", store, "--from", dir, "--base-url", "https://x.example/doc/", "--json", "--exclude", "*.txt")
	if err != nil {
		t.Fatal(err)
	}
	st = ingest.Stats{}
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.NotRead != 2 || st.Unchanged != 2 {
		t.Fatalf("a plain re-run reads the unchanged pages again: %v %+v", err, st)
	}
	if _, _, err := runSubsets(t, "ingest", "--store", store, "--from", dir, "--canonical", "always"); err == nil || !strings.Contains(err.Error(), `--canonical "always"`) {
		t.Fatalf("bad --canonical: %v", err)
	}
}
