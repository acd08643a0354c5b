package ingest

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/local"
)

var rewrite = flag.Bool("rewrite", false, "rewrite golden files")

func TestCleanGolden(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.html")
	for _, f := range files {
		src, _ := os.ReadFile(f)
		c := CleanHTML(src)
		got := fmt.Sprintf("title: %s\ncanonical: %s\nlang: %s\noutlinks: %d\n----\n%s\n", c.Title, c.Canonical, c.Lang, c.OutLinks, c.Text)
		golden := strings.TrimSuffix(f, ".html") + ".golden"
		if *rewrite {
			os.WriteFile(golden, []byte(got), 0o644)
			continue
		}
		want, _ := os.ReadFile(golden)
		if got != string(want) {
			t.Errorf("%s:\n--- got\n%s\n--- want\n%s", f, got, want)
		}
	}
}

func write(t *testing.T, dir, name string, b []byte) {
	t.Helper()
	p := filepath.Join(dir, name)
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestIngestBadInputAndRerun(t *testing.T) {
	ctx := context.Background()
	in := t.TempDir()
	write(t, in, "a.html", []byte("<html><title>A</title><body><p>Alpha page with the text of a.</p></body></html>"))
	write(t, in, "sub/b.htm", []byte("<html><title>B</title><body><p>Beta.</p></body></html>"))
	write(t, in, "c.txt", []byte("# Gamma\n\nplain text page"))
	write(t, in, "empty.html", []byte("<html><body><script>x()</script></body></html>"))
	write(t, in, "bin.html", []byte("GIF89a\x00\x01\x02"))
	write(t, in, "latin1.html", []byte("<p>caf\xe9</p>"))
	write(t, in, "dup.html", []byte(`<html><head><link rel="canonical" href="a.html"></head><body>dup of a</body></html>`))
	write(t, in, "big.html", bytes.Repeat([]byte("<p>big</p>"), 2000))
	write(t, in, "image.png", []byte("\x89PNG"))
	st, err := local.Create(filepath.Join(t.TempDir(), "store"), &local.Options{Partitions: 8})
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{From: in, BaseURL: "https://docs.example.org/x", MaxPageBytes: 10000}
	s1, err := Run(ctx, st, opts)
	if err != nil {
		t.Fatal(err)
	}
	// latin1.html has no charset and is not UTF-8: decoded as windows-1252.
	want := Stats{Files: 8, Pages: 5, New: 5, Empty: 1, Binary: 1, TooLarge: 1, Duplicates: 1}
	if s1.Files != want.Files || s1.Pages != want.Pages || s1.New != want.New || s1.Empty != want.Empty ||
		s1.Binary != want.Binary || s1.TooLarge != want.TooLarge || s1.Duplicates != want.Duplicates {
		t.Fatalf("stats %+v, want %+v", s1, want)
	}
	if len(s1.Rejected) != 1 || !strings.HasSuffix(s1.Rejected[0], "big.html") {
		t.Fatalf("rejected %v", s1.Rejected)
	}
	sn, _ := st.Snapshot(ctx)
	docs := readDocs(t, sn)
	if len(docs) != 5 {
		t.Fatalf("%d docs", len(docs))
	}
	var urls []string
	for _, d := range docs {
		urls = append(urls, d.URL)
		k, _ := pillar.ParseKey(d.PageKey)
		if want, _, _ := pillar.KeyOfURL(d.URL); want != k {
			t.Fatalf("key of %s", d.URL)
		}
	}
	for _, u := range []string{"https://docs.example.org/x/a.html", "https://docs.example.org/x/sub/b.htm", "https://docs.example.org/x/c.txt"} {
		if !strings.Contains(strings.Join(urls, " "), u) {
			t.Fatalf("missing %s in %v", u, urls)
		}
	}
	// Second run: nothing changes, nothing is committed.
	gen := st.Info().Generation
	s2, err := Run(ctx, st, opts)
	if err != nil || s2.ChangedPages() != 0 || s2.Unchanged != 5 || st.Info().Generation != gen {
		t.Fatalf("rerun: %+v %v (generation %d → %d)", s2, err, gen, st.Info().Generation)
	}
	// A changed file is a new version of its row.
	time.Sleep(10 * time.Millisecond)
	write(t, in, "a.html", []byte("<html><title>A</title><body><p>Alpha, edited.</p></body></html>"))
	s3, err := Run(ctx, st, opts)
	if err != nil || s3.Changed != 1 || s3.New != 0 {
		t.Fatalf("after edit: %+v %v", s3, err)
	}
	sn, _ = st.Snapshot(ctx)
	for _, d := range readDocs(t, sn) {
		if strings.HasSuffix(d.URL, "/a.html") && (d.Version != 2 || d.Text != "Alpha, edited.") {
			t.Fatalf("edited doc %+v", d)
		}
	}
}

func TestLargePageUnderLimit(t *testing.T) {
	in := t.TempDir()
	big := bytes.Repeat([]byte("<p>twenty megabytes of words words words</p>\n"), 20<<20/45)
	write(t, in, "big.html", big)
	st, _ := local.Create(filepath.Join(t.TempDir(), "s"), &local.Options{Partitions: 4})
	s, err := Run(context.Background(), st, Options{From: in})
	if err != nil || s.Pages != 1 || s.TooLarge != 0 {
		t.Fatalf("20 MB page: %+v %v", s, err)
	}
}

func readDocs(t *testing.T, sn pillar.Snapshot) []pillar.Doc {
	rr, err := sn.ReadTable(context.Background(), pillar.TableDocs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	var out []pillar.Doc
	for rr.Next() {
		var d pillar.Doc
		if err := rr.Scan(&d); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

const pgDocs = "/usr/share/doc/postgresql-doc-15/html"

// BenchmarkIngestPostgresDocs ingests the PostgreSQL HTML docs into a fresh
// store; it reports pages/s and MB/s of HTML next to a bare loop that only
// reads the same files (the floor).
func BenchmarkIngestPostgresDocs(b *testing.B) {
	if _, err := os.Stat(pgDocs); err != nil {
		b.Skip("postgresql-doc-15 not installed (make deps)")
	}
	b.Run("read-only-floor", func(b *testing.B) {
		var bytes int64
		files, _ := filepath.Glob(pgDocs + "/*.html")
		for i := 0; i < b.N; i++ {
			for _, f := range files {
				d, _ := os.ReadFile(f)
				bytes += int64(len(d))
			}
		}
		b.ReportMetric(float64(len(files)*b.N)/b.Elapsed().Seconds(), "pages/s")
		b.ReportMetric(float64(bytes)/1e6/b.Elapsed().Seconds(), "MB/s")
	})
	b.Run("ingest", func(b *testing.B) {
		var pages int
		var bytes int64
		for i := 0; i < b.N; i++ {
			st, _ := local.Create(filepath.Join(b.TempDir(), "s"), &local.Options{Partitions: 64})
			s, err := Run(context.Background(), st, Options{From: pgDocs, BaseURL: "https://www.postgresql.org/docs/15/"})
			if err != nil {
				b.Fatal(err)
			}
			pages += s.Pages
			bytes += s.HTMLBytes
		}
		b.ReportMetric(float64(pages)/b.Elapsed().Seconds(), "pages/s")
		b.ReportMetric(float64(bytes)/1e6/b.Elapsed().Seconds(), "MB/s")
	})
}

// TestIngestSpillsAndMerges ingests pages far beyond the memory limit (so the
// cleaned pages spill to sorted runs), with duplicate URLs across runs, then
// re-ingests a folder of a few edited pages into the store: the docs table
// must be sorted, complete, hold the first file of each URL, and only the
// edited pages get a new version.
func TestIngestSpillsAndMerges(t *testing.T) {
	ctx := context.Background()
	in := t.TempDir()
	body := strings.Repeat("lorem ipsum dolor sit amet ", 80)
	for i := 0; i < 300; i++ {
		write(t, in, fmt.Sprintf("d%d/p%03d.txt", i%7, i), []byte(fmt.Sprintf("# Page %d\n\n%s %d", i, body, i)))
	}
	// Two files with one canonical URL: the first in walk order wins.
	write(t, in, "a-first.html", []byte(`<html><head><link rel="canonical" href="http://x.test/same"></head><body><p>first</p></body></html>`))
	write(t, in, "z-second.html", []byte(`<html><head><link rel="canonical" href="http://x.test/same"></head><body><p>second</p></body></html>`))
	st, err := local.Create(filepath.Join(t.TempDir(), "store"), &local.Options{Partitions: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s1, err := Run(ctx, st, Options{From: in, MemoryLimit: 1, Workers: 2, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if s1.Pages != 301 || s1.New != 301 || s1.Duplicates != 1 {
		t.Fatalf("first run: %+v", s1)
	}
	docs := storeDocs(t, st)
	if len(docs) != 301 {
		t.Fatalf("docs holds %d rows, want 301", len(docs))
	}
	for i := 1; i < len(docs); i++ {
		if docs[i-1].PageKey >= docs[i].PageKey {
			t.Fatalf("docs out of order at row %d: %s then %s", i, docs[i-1].PageKey, docs[i].PageKey)
		}
	}
	for _, d := range docs {
		if d.URL == "http://x.test/same" && d.Text != "first" {
			t.Fatalf("duplicate URL kept %q, want the first file", d.Text)
		}
	}
	// Re-ingest 3 edited pages (and one unchanged) from a folder of their own.
	edits := t.TempDir()
	for _, i := range []int{5, 77, 250} {
		write(t, edits, fmt.Sprintf("d%d/p%03d.txt", i%7, i), []byte(fmt.Sprintf("# Page %d\n\nedited %d", i, i)))
	}
	write(t, edits, "d1/p001.txt", []byte(fmt.Sprintf("# Page %d\n\n%s %d", 1, body, 1)))
	s2, err := Run(ctx, st, Options{From: edits, MemoryLimit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if s2.Changed != 3 || s2.Unchanged != 1 || s2.New != 0 {
		t.Fatalf("edit run: %+v", s2)
	}
	after := storeDocs(t, st)
	if len(after) != 301 {
		t.Fatalf("after the edit docs holds %d rows, want 301", len(after))
	}
	versions := map[int64]int{}
	for _, d := range after {
		versions[d.Version]++
	}
	if versions[2] != 3 || versions[1] != 298 {
		t.Fatalf("versions after the edit: %v", versions)
	}
	// Nothing changed: nothing is committed.
	gen := st.Info().Generation
	s3, err := Run(ctx, st, Options{From: edits})
	if err != nil || s3.ChangedPages() != 0 || st.Info().Generation != gen {
		t.Fatalf("unchanged re-run: %+v, %v, generation %d → %d", s3, err, gen, st.Info().Generation)
	}
}

func storeDocs(t *testing.T, st pillar.Store) []pillar.Doc {
	t.Helper()
	sn, err := st.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	return readDocs(t, sn)
}
