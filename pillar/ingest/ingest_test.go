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
	want := Stats{Files: 8, Pages: 4, New: 4, Empty: 1, Binary: 2, TooLarge: 1, Duplicates: 1}
	if s1.Files != want.Files || s1.Pages != want.Pages || s1.New != want.New || s1.Empty != want.Empty ||
		s1.Binary != want.Binary || s1.TooLarge != want.TooLarge || s1.Duplicates != want.Duplicates {
		t.Fatalf("stats %+v, want %+v", s1, want)
	}
	if len(s1.Rejected) != 1 || !strings.HasSuffix(s1.Rejected[0], "big.html") {
		t.Fatalf("rejected %v", s1.Rejected)
	}
	sn, _ := st.Snapshot(ctx)
	docs := readDocs(t, sn)
	if len(docs) != 4 {
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
	if err != nil || s2.ChangedPages() != 0 || s2.Unchanged != 4 || st.Info().Generation != gen {
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
