package demo

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pillarkit/pillar/jobs/pipeline"
	"github.com/pillarkit/pillar/pillar/ingest"
)

// An edit that cannot change what ingest sees (the page ends inside dropped
// navigation) is undone and not counted; when no exported page can be
// edited, step 6 fails instead of checking nothing.
func TestEditExportedFailsWhenNoEditChangesAPage(t *testing.T) {
	out := t.TempDir()
	corpus := filepath.Join(out, "corpus")
	orig := []byte(`<html><head><title>T</title></head><body><p>some text</p><nav>menu`)
	writeFile(t, corpus, "a.html", orig)
	d := &demo{o: Options{Out: out}, ctx: context.Background(), rep: &Report{}}
	f := ingest.ReadFile(filepath.Join(corpus, "a.html"), d.ingestOptions())
	exported := map[string]expected{f.Doc.PageKey: {url: f.Doc.URL, hash: f.Doc.ContentHash}}
	_, err := d.editExported(exported)
	if err == nil || !strings.Contains(err.Error(), "no exported page could be edited") {
		t.Fatalf("err %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(corpus, "a.html")); string(b) != string(orig) {
		t.Fatalf("the failed edit was not undone: %q", b)
	}
	// A page that can be edited is.
	writeFile(t, corpus, "b.html", []byte(`<html><body><p>b text</p></body></html>`))
	g := ingest.ReadFile(filepath.Join(corpus, "b.html"), d.ingestOptions())
	exported[g.Doc.PageKey] = expected{url: g.Doc.URL, hash: g.Doc.ContentHash}
	got, err := d.editExported(exported)
	if err != nil || len(got) != 1 || got[0].rel != "b.html" {
		t.Fatalf("edits %+v, %v; want b.html only (one page stays unedited only when two could be)", got, err)
	}
}

// No exported subset with two pages: the policy change would remove all of
// a subset or nothing, so step 6 fails.
func TestPolicyChangeNeedsTwoPages(t *testing.T) {
	d := &demo{rep: &Report{Subsets: []pipeline.SubsetSummary{{Name: "one", Exported: true, Size: 1}, {Name: "big", Exported: false, Size: 50}}}}
	if _, _, err := d.policyChange(nil); err == nil || !strings.Contains(err.Error(), `no exported subset has 2 pages or more (largest: "one", 1)`) {
		t.Fatalf("err %v", err)
	}
}
