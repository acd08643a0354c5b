package ingest

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pillarkit/pillar/pillar"
)

// pagesText is the docs table as URL, title and text lines, sorted.
func pagesText(t *testing.T, st pillar.Store) string {
	var out []string
	for _, d := range storeDocs(t, st) {
		out = append(out, d.URL+"|"+d.Title+"|"+d.Text)
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// TestReingestReadsOnlyTheChange: a re-ingest of an unchanged folder
// reads no file and commits nothing; after edits it reads the edited
// files only, and the store equals a full ingest's of the same folder.
// The first file of a URL still wins when it is the unchanged one.
func TestReingestReadsOnlyTheChange(t *testing.T) {
	in := t.TempDir()
	for i := 0; i < 60; i++ {
		write(t, in, fmt.Sprintf("d%d/p%02d.html", i%3, i), []byte(fmt.Sprintf("<html><title>P%d</title><p>Page %d of the folder.</p></html>", i, i)))
	}
	canon := `<html><head><link rel="canonical" href="https://dup.test/x"></head><title>%s</title><p>%s</p></html>`
	write(t, in, "a-first.html", []byte(fmt.Sprintf(canon, "First", "The first file of the URL.")))
	write(t, in, "z-second.html", []byte(fmt.Sprintf(canon, "Second", "A later file of the same URL.")))
	// Files written an hour ago: one modified within 2 s of an ingest is
	// read again by the next (TestRacyMTimeReread).
	old := time.Now().Add(-time.Hour)
	filepath.WalkDir(in, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			os.Chtimes(p, old, old)
		}
		return nil
	})
	st := newStore(t)
	o := Options{From: in, BaseURL: "https://folder.test/"}
	if s := ingestInto(t, st, o); s.New != 61 || s.NotRead != 0 {
		t.Fatalf("first ingest: %d new, %d not read", s.New, s.NotRead)
	}
	s := ingestInto(t, st, o)
	if s.NotRead != 61 || s.Unchanged != 61 || s.Generation != 0 {
		t.Fatalf("unchanged re-ingest: %d not read, %d unchanged, generation %d; want 61, 61 and no commit\n%s", s.NotRead, s.Unchanged, s.Generation, s.Summary())
	}

	later := time.Now().Add(-time.Minute)
	edit := func(rel, body string) {
		write(t, in, rel, []byte(body))
		os.Chtimes(filepath.Join(in, rel), later, later)
	}
	edit("d0/p00.html", "<html><title>P0</title><p>Page 0, edited.</p></html>")
	edit("d1/p01.html", "<html><title>P1</title><p>Page 1, edited.</p></html>")
	edit("z-second.html", fmt.Sprintf(canon, "Second", "The later file, edited: still not the URL's page."))
	os.Chtimes(filepath.Join(in, "d2/p02.html"), later, later) // touched, not changed
	s = ingestInto(t, st, o)
	if s.Changed != 2 || s.NotRead != 58 || s.Duplicates != 1 {
		t.Errorf("after 2 edits, a touch and an edited duplicate: changed %d, not read %d, duplicates %d; want 2, 58, 1\n%s", s.Changed, s.NotRead, s.Duplicates, s.Summary())
	}
	full := newStore(t)
	ingestInto(t, full, Options{From: in, BaseURL: "https://folder.test/"})
	if got, want := pagesText(t, st), pagesText(t, full); got != want {
		t.Errorf("the re-ingested store differs from a full ingest of the folder:\n%s\n---\n%s", got, want)
	}
	if !strings.Contains(pagesText(t, st), "https://dup.test/x|First|") {
		t.Error("the URL's page is not the first file's")
	}

	if s := ingestInto(t, st, Options{From: in, BaseURL: "https://folder.test/", Rehash: true}); s.NotRead != 0 || s.Unchanged != 61 {
		t.Errorf("--rehash: %d not read, %d unchanged; want 0 and 61", s.NotRead, s.Unchanged)
	}
	if s := ingestInto(t, st, Options{From: in, BaseURL: "https://other.test/"}); s.NotRead != 0 {
		t.Errorf("another --base-url used the listing: %d not read", s.NotRead)
	}
	// A crawl changes pages behind the folder's back: the listing goes.
	ingestInto(t, st, o) // a listing for o again
	p, _ := writeWARC(t, "c.warc.gz", true, warcRec{typ: "response", uri: "https://folder.test/d0/p03.html", date: day2,
		http: httpOK(htmlPage("P3", "Page 3 as the crawler saw it."))})
	ingestInto(t, st, Options{From: p})
	s = ingestInto(t, st, o)
	if s.NotRead != 0 || s.Changed != 1 {
		t.Errorf("after a crawl: %d not read, %d changed; want the folder read whole and page 3 back\n%s", s.NotRead, s.Changed, s.Summary())
	}
}

// A file modified just before an ingest (within the modification-time
// tick a same-size rewrite could hide in) is read again by the next ingest
// even when its size and mtime did not change.
func TestRacyMTimeReread(t *testing.T) {
	in := t.TempDir()
	write(t, in, "p.txt", []byte("Page\n\ntext 1"))
	st := newStore(t)
	o := Options{From: in, BaseURL: "https://racy.test/"}
	ingestInto(t, st, o)
	fi, err := os.Stat(filepath.Join(in, "p.txt"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, in, "p.txt", []byte("Page\n\ntext 2")) // same size
	os.Chtimes(filepath.Join(in, "p.txt"), fi.ModTime(), fi.ModTime())
	if s := ingestInto(t, st, o); s.Changed != 1 || s.NotRead != 0 {
		t.Fatalf("a same-size rewrite in the same mtime: changed %d, not read %d, want 1 and 0\n%s", s.Changed, s.NotRead, s.Summary())
	}
}
