package ingest

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pillarkit/pillar/pillar"
)

// writeWARCIn writes recs as a gzipped WARC named name in dir.
func writeWARCIn(t *testing.T, dir, name string, recs ...warcRec) string {
	t.Helper()
	p, _ := writeWARC(t, name, true, recs...)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, name)
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// Older than the racy window: the index trusts its modification time.
	old := time.Now().Add(-time.Minute)
	os.Chtimes(dst, old, old)
	return dst
}

func resp(uri, date, text string) warcRec {
	return warcRec{typ: "response", uri: uri, date: date, http: httpOK(htmlPage(text, text))}
}

// pageSet is URL → (content hash, fetch time) of a store's docs.
func pageSet(t *testing.T, st pillar.Store) map[string][2]any {
	t.Helper()
	out := map[string][2]any{}
	for _, d := range storeDocs(t, st) {
		out[d.URL] = [2]any{d.ContentHash, d.FetchedAt}
	}
	return out
}

// A re-ingest of a crawl folder reads only the files that changed: the
// unchanged ones (same size and modification time, or the same digest
// after a copy) are not read, a newer record of a URL in a new file still
// replaces the stored page and an older one does not, and the store ends
// as a full read of the same files leaves it.
func TestCrawlReingestSkipsUnchangedFiles(t *testing.T) {
	const day3 = "2026-03-03T10:00:00Z"
	dir := t.TempDir()
	a := writeWARCIn(t, dir, "a.warc.gz", resp("https://ci.test/1", day1, "one"), resp("https://ci.test/2", day1, "two, old"))
	b := writeWARCIn(t, dir, "b.warc.gz", resp("https://ci.test/3", day1, "three"), resp("https://ci.test/2", day2, "two, new"))
	st := newStore(t)
	if s := ingestInto(t, st, Options{From: dir}); s.New != 3 || s.NotRead != 0 {
		t.Fatalf("first ingest: new %d, not read %d\n%s", s.New, s.NotRead, s.Summary())
	}
	// Unchanged: nothing read, nothing committed.
	if s := ingestInto(t, st, Options{From: dir}); s.NotRead != 2 || s.ChangedPages() != 0 || s.Generation != 0 || s.Unchanged != 3 {
		t.Fatalf("unchanged re-ingest: not read %d, changed %d, unchanged %d, generation %d\n%s", s.NotRead, s.ChangedPages(), s.Unchanged, s.Generation, s.Summary())
	}
	// A new file: a newer fetch of 1 replaces it, an older fetch of 2
	// loses to b's (not read) record.
	writeWARCIn(t, dir, "c.warc.gz", resp("https://ci.test/1", day3, "one, newer"), resp("https://ci.test/2", day1, "two, stale copy"))
	s := ingestInto(t, st, Options{From: dir})
	if s.NotRead != 2 || s.Changed != 1 || s.New != 0 {
		t.Fatalf("new file: not read %d, changed %d, new %d; want 2, 1, 0\n%s", s.NotRead, s.Changed, s.New, s.Summary())
	}
	// A copied file (new modification time, same bytes) is matched by its
	// digest.
	now := time.Now().Add(-30 * time.Second)
	os.Chtimes(a, now, now)
	if s := ingestInto(t, st, Options{From: dir}); s.NotRead != 3 || s.ChangedPages() != 0 {
		t.Fatalf("after touching a: not read %d, changed %d; want 3, 0\n%s", s.NotRead, s.ChangedPages(), s.Summary())
	}
	// A changed file is read.
	os.Remove(b)
	writeWARCIn(t, dir, "b.warc.gz", resp("https://ci.test/3", day2, "three, edited"), resp("https://ci.test/2", day2, "two, new"))
	if s := ingestInto(t, st, Options{From: dir}); s.NotRead != 2 || s.Changed != 1 {
		t.Fatalf("after rewriting b: not read %d, changed %d; want 2, 1\n%s", s.NotRead, s.Changed, s.Summary())
	}
	// --rehash reads them all, and finds nothing to change.
	if s := ingestInto(t, st, Options{From: dir, Rehash: true}); s.NotRead != 0 || s.ChangedPages() != 0 {
		t.Fatalf("rehash: not read %d, changed %d\n%s", s.NotRead, s.ChangedPages(), s.Summary())
	}
	// The same as a full read of the same files into a new store.
	fresh := newStore(t)
	ingestInto(t, fresh, Options{From: dir})
	got, want := pageSet(t, st), pageSet(t, fresh)
	if len(got) != 3 || len(got) != len(want) {
		t.Fatalf("pages %v, a full read gives %v", got, want)
	}
	for u, w := range want {
		if got[u] != w {
			t.Errorf("%s: %v, a full read gives %v", u, got[u], w)
		}
	}
}

// Datasets: a JSONL re-ingest with the same options reads nothing (files
// just written, inside the racy window, are matched by digest), one with
// other options (the columns) reads every file.
func TestDatasetReingestSkipsUnchangedFiles(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a.jsonl", []byte(`{"url": "https://dsi.test/1", "text": "one"}`+"\n"+`{"url": "https://dsi.test/2", "text": "two"}`+"\n"))
	write(t, dir, "b.jsonl", []byte(`{"url": "https://dsi.test/3", "text": "three", "body": "<p>three in html</p>"}`+"\n"))
	st := newStore(t)
	if s := ingestInto(t, st, Options{From: dir}); s.New != 3 {
		t.Fatalf("first: new %d\n%s", s.New, s.Summary())
	}
	if s := ingestInto(t, st, Options{From: dir}); s.NotRead != 2 || s.ChangedPages() != 0 || s.Generation != 0 {
		t.Fatalf("again: not read %d, changed %d, generation %d\n%s", s.NotRead, s.ChangedPages(), s.Generation, s.Summary())
	}
	cols, err := ParseColumns("html=body")
	if err != nil {
		t.Fatal(err)
	}
	if s := ingestInto(t, st, Options{From: dir, Columns: cols}); s.NotRead != 0 || s.Changed != 1 {
		t.Fatalf("other columns: not read %d, changed %d; want 0, 1\n%s", s.NotRead, s.Changed, s.Summary())
	}
}
