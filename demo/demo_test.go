package demo

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// buildPillar builds the pillar binary once per test binary.
var pillarBin string

func buildPillar(t *testing.T) string {
	t.Helper()
	if pillarBin != "" {
		return pillarBin
	}
	dir, err := os.MkdirTemp("", "pillar-demo-bin-")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "pillar")
	build := exec.Command("go", "build", "-o", bin, "../cmd/pillar")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	pillarBin = bin
	return bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if pillarBin != "" {
		os.RemoveAll(filepath.Dir(pillarBin))
	}
	os.Exit(code)
}

// words makes n words of plain text, deterministic in seed.
func words(seed, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(synthWords[(seed*7+i*13)%len(synthWords)])
	}
	return b.String()
}

func writeFile(t *testing.T, dir, rel string, b []byte) {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// nestedFileCanonical is a docs folder as Debian installs one: nested
// folders, every page's canonical link a file:// URL of the installed
// folder, a few plain-text sources beside them.
func nestedFileCanonical(t *testing.T) string {
	dir := t.TempDir()
	for i := 0; i < 30; i++ {
		rel := fmt.Sprintf("part%d/chapter%d/page%02d.html", i%3, i%4, i)
		writeFile(t, dir, rel, []byte(fmt.Sprintf(`<!DOCTYPE html><html><head><title>Page %d</title>
<link rel="canonical" href="file:///usr/share/doc/pkg/html/%s"></head>
<body><div class="navheader"><a href="../index.html">Home</a></div><h1>Page %d</h1><p>%s</p><p>%s</p></body></html>`,
			i, rel, i, words(i, 200), words(i+1, 300))))
	}
	for i := 0; i < 4; i++ {
		writeFile(t, dir, fmt.Sprintf("src/notes%d.txt", i), []byte(fmt.Sprintf("Notes %d\n\n%s\n", i, words(i, 400))))
	}
	return dir
}

// nonUTF8 has pages in windows-1252 with a <meta charset>, in latin-1
// without one, and in UTF-16 with a byte-order mark.
func nonUTF8(t *testing.T) string {
	dir := t.TempDir()
	for i := 0; i < 24; i++ {
		text := words(i, 350) + " caf\xe9 cr\xe8me br\xfbl\xe9e"
		var b []byte
		switch i % 3 {
		case 0:
			b = []byte(`<html><head><meta http-equiv="Content-Type" content="text/html; charset=ISO-8859-1"><title>Caf` + "\xe9" + fmt.Sprintf(` %d</title></head><body><p>%s</p></body></html>`, i, text))
		case 1:
			b = []byte(fmt.Sprintf(`<html><head><title>Page %d</title></head><body><p>%s</p></body></html>`, i, text))
		case 2:
			b = []byte{0xFF, 0xFE}
			for _, r := range fmt.Sprintf(`<html><head><title>Wide %d</title></head><body><p>%s café</p></body></html>`, i, words(i, 350)) {
				b = append(b, byte(r), byte(r>>8))
			}
		}
		writeFile(t, dir, fmt.Sprintf("p%02d.html", i), b)
	}
	return dir
}

// duplicates has several files per canonical URL, redirect stubs and empty
// pages.
func duplicates(t *testing.T) string {
	dir := t.TempDir()
	for i := 0; i < 30; i++ {
		u := fmt.Sprintf("https://dup.example.org/doc/%d.html", i/2) // two files per URL
		writeFile(t, dir, fmt.Sprintf("copy%d/p%02d.html", i%2, i), []byte(fmt.Sprintf(`<html><head><title>P %d</title><link rel="canonical" href="%s"></head><body><p>%s</p></body></html>`,
			i, u, words(i, 400))))
	}
	writeFile(t, dir, "moved.html", []byte(`<html><head><meta http-equiv="refresh" content="0; url=copy0/p00.html"></head><body>moved</body></html>`))
	writeFile(t, dir, "blank.html", []byte(`<html><head><title>Blank</title></head><body></body></html>`))
	return dir
}

// TestDemoCorpora runs the whole demo, in short mode (a few dozen files, 4
// partitions), on each corpus of the matrix: three real cobbled child
// processes, a control plane, Lorry, every check the full demo makes. Each
// check must have found something to check (the demo fails otherwise), and
// each corpus's own trouble must show in the ingest summary.
func TestDemoCorpora(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the pillar binary and runs child processes")
	}
	bin := buildPillar(t)
	for _, tc := range []struct {
		name   string
		corpus func(*testing.T) string
		check  func(*testing.T, *Report)
	}{
		{"postgresql-docs", func(t *testing.T) string {
			if _, err := os.Stat(DefaultCorpus); err != nil {
				t.Skip("postgresql-doc-15 is not installed (make deps)")
			}
			return DefaultCorpus
		}, func(t *testing.T, r *Report) {}},
		{"nested-file-canonical", nestedFileCanonical, func(t *testing.T, r *Report) {
			if r.Ingest.CanonicalIgnored != 30 || r.Pages != 34 {
				t.Errorf("file:// canonical links ignored: %d of 30; pages %d of 34\n%s", r.Ingest.CanonicalIgnored, r.Pages, r.Ingest.Summary())
			}
		}},
		{"wget-warc", func(*testing.T) string {
			abs, _ := filepath.Abs("../pillar/ingest/testdata/crawl/site.warc.gz")
			return abs
		}, func(t *testing.T, r *Report) {
			if r.Pages != 4 || r.Ingest.Status4xx != 2 || r.Ingest.NonHTML != 2 || len(r.Incremental.Edited) == 0 {
				t.Errorf("a crawl: pages %d of 4, 4xx %d of 2, non-HTML %d of 2, re-crawled %d\n%s", r.Pages, r.Ingest.Status4xx, r.Ingest.NonHTML, len(r.Incremental.Edited), r.Ingest.Summary())
			}
		}},
		{"non-utf8", nonUTF8, func(t *testing.T, r *Report) {
			if r.Ingest.Transcoded != 24 || r.Pages != 24 {
				t.Errorf("transcoded %d of 24; pages %d\n%s", r.Ingest.Transcoded, r.Pages, r.Ingest.Summary())
			}
		}},
		{"duplicates", duplicates, func(t *testing.T, r *Report) {
			if r.Ingest.Duplicates != 15 || r.Ingest.Redirects != 1 || r.Ingest.Empty != 1 || r.Pages != 16 {
				t.Errorf("duplicates %d of 15, redirects %d, empty %d, pages %d of 16\n%s", r.Ingest.Duplicates, r.Ingest.Redirects, r.Ingest.Empty, r.Pages, r.Ingest.Summary())
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			corpus := tc.corpus(t)
			out := t.TempDir()
			var narrative bytes.Buffer
			rep, err := Run(context.Background(), Options{
				Pillar: bin, Out: out, Corpus: corpus, MaxFiles: 40, Partitions: 4, Stdout: &narrative,
			})
			t.Log(narrative.String())
			if err != nil {
				t.Fatal(err)
			}
			in := rep.Incremental
			if rep.Failure != "" || rep.Exported == 0 || len(in.Edited) == 0 || in.ChangedPages != len(in.Edited) ||
				in.Deletes < len(in.Removed) || len(in.Removed) == 0 || len(in.Removed) >= in.SubsetSize || in.Batches == 0 ||
				in.Gone != len(in.Removed) || in.EditedRead != len(in.Edited) {
				t.Fatalf("report %+v", rep)
			}
			tc.check(t, rep)
			md, err := os.ReadFile(filepath.Join(out, "demo-report.md"))
			if err != nil {
				t.Fatal(err)
			}
			// The report's numbers are the narrative's.
			for _, want := range []string{
				fmt.Sprintf("| delta batches Lorry delivered | %d |", in.Batches),
				fmt.Sprintf("| puts / deletes the policy change queued | %d / %d |", in.Puts, in.Deletes),
				fmt.Sprintf("| changed pages ingest counted | %d |", in.ChangedPages),
				"**Passed**",
			} {
				if !strings.Contains(string(md), want) {
					t.Errorf("report lacks %q:\n%s", want, md)
				}
			}
			for _, want := range []string{
				fmt.Sprintf("Lorry delivered %d delta batches", in.Batches),
				fmt.Sprintf("queued %d puts, %d deletes", in.Puts, in.Deletes),
				fmt.Sprintf("ingest: %d changed pages", in.ChangedPages),
			} {
				if !strings.Contains(narrative.String(), want) {
					t.Errorf("narrative lacks %q", want)
				}
			}
		})
	}
}

// TestDemoFailsWhenVacuous: a corpus that yields no page, and policies that
// export nothing, fail the demo before it starts any child process, with the
// reason in the error and in the report.
func TestDemoFailsWhenVacuous(t *testing.T) {
	stubs := t.TempDir()
	writeFile(t, stubs, "a.html", []byte(`<html><head><meta http-equiv="refresh" content="0; url=b.html"></head></html>`))
	writeFile(t, stubs, "img.html", []byte("GIF89a\x00\x00"))
	pages := nestedFileCanonical(t)
	none := filepath.Join(t.TempDir(), "none.yaml")
	writeFile(t, filepath.Dir(none), "none.yaml", []byte("policies:\n  - name: nothing\n    exported: true\n    where: text_len < 0\n"))
	for _, tc := range []struct {
		name, corpus, policies, want string
	}{
		{"no pages", stubs, "", "no page of " + stubs + " went into the store (2 files, 2 skipped): nothing to check"},
		{"nothing exported", pages, none, "the policies (" + none + ") put no page into an exported subset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var narrative bytes.Buffer
			// The binary is never started: the run fails before step 3.
			rep, err := Run(ctx, Options{Pillar: "/nonexistent/pillar", Out: out, Corpus: tc.corpus, Policies: tc.policies, Partitions: 4, Stdout: &narrative})
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "logs of the child processes") {
				t.Fatalf("err %v, want one with %q and no mention of child-process logs\n%s", err, tc.want, narrative.String())
			}
			md, _ := os.ReadFile(filepath.Join(out, "demo-report.md"))
			if rep == nil || !strings.Contains(rep.Failure, tc.want) || !strings.Contains(string(md), tc.want) {
				t.Fatalf("report does not say why:\n%s", md)
			}
		})
	}
}

// TestReducedDemo runs the whole demo end to end on 60 synthetic pages and 8
// partitions with the embedded policies.
func TestReducedDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the pillar binary and runs child processes")
	}
	bin := buildPillar(t)
	out := t.TempDir()
	var narrative bytes.Buffer
	rep, err := Run(context.Background(), Options{Pillar: bin, Out: out, Synthetic: 60, Partitions: 8, Stdout: &narrative})
	t.Log(narrative.String())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Pages != 60 || rep.Exported == 0 || rep.FailedDuring != 0 || rep.Incremental.ChangedPages != editCount || rep.Incremental.PublishPuts != editCount {
		t.Fatalf("report %+v", rep)
	}
	md, err := os.ReadFile(filepath.Join(out, "demo-report.md"))
	if err != nil || !strings.Contains(string(md), "Failed reads during the serving-versions cycle: **0**") || !strings.Contains(string(md), "## Serving versions (step 5)") {
		t.Fatalf("report file: %v\n%s", err, md)
	}
	// The serving-versions cycle: every switch measured, nothing exported by
	// the rollback, a slice of traffic from the candidate.
	v := rep.Versions2
	if v.Promote <= 0 || v.Rollback <= 0 || v.RollForward <= 0 || v.BatchesOnRollback != 0 || v.ABFromV2 == 0 ||
		v.CandidateVerified == 0 || v.FailedDuring != 0 || v.WrongVersionDuring != 0 || v.RollbackState != "saved" || v.V1 == v.V2 {
		t.Fatalf("serving versions %+v", v)
	}
	for _, png := range []string{"read-latency.png", "replica-lag.png", "stage-timings.png"} {
		if fi, err := os.Stat(filepath.Join(out, png)); err != nil || fi.Size() < 1000 {
			t.Fatalf("plot %s: %v", png, err)
		}
	}
}
