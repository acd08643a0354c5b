package subsets

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// corpusDir is the demo corpus (Debian package postgresql-doc-15).
const corpusDir = "/usr/share/doc/postgresql-doc-15/html"

var benchAsOf = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

// corpusPages builds pages from the PostgreSQL HTML docs the way ingest
// shapes them (URL under https://www.postgresql.org/docs/15/, fetched_at from
// the file's mtime, lang en), with a crude tag-stripped text length and a
// deterministic quality score on some. Without the corpus it synthesises
// 1,200 pages with the same URL shapes.
func corpusPages(tb testing.TB) []Page {
	tb.Helper()
	r := rand.New(rand.NewPCG(7, 8))
	mk := func(name string, mtime time.Time, html []byte) Page {
		url := "https://www.postgresql.org/docs/15/" + name
		p := Page{Key: fmt.Sprintf("%032x", r.Uint64()), URL: url, Host: "www.postgresql.org", Lang: "en",
			FetchedAt: mtime.UnixMilli(), HTMLBytes: int64(len(html)), TextLen: textLen(html),
			OutLinks: int64(bytes.Count(html, []byte("<a href=\"")) - bytes.Count(html, []byte("<a href=\"#")))}
		if r.IntN(3) == 0 {
			p.Signals = map[string]SignalValue{"score": {Num: r.Float64(), IsNum: true}}
		}
		return p
	}
	var pages []Page
	if ents, err := os.ReadDir(corpusDir); err == nil {
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".html") {
				continue
			}
			html, err := os.ReadFile(filepath.Join(corpusDir, e.Name()))
			if err != nil {
				tb.Fatal(err)
			}
			info, err := e.Info()
			if err != nil {
				tb.Fatal(err)
			}
			pages = append(pages, mk(e.Name(), info.ModTime(), html))
		}
	}
	if len(pages) == 0 {
		kinds := []string{"sql-", "release-", "tutorial-", "functions-", "catalog-", "app-"}
		for i := 0; i < 1200; i++ {
			html := bytes.Repeat([]byte("<p>text <a href=\"x.html\">x</a></p>"), r.IntN(400))
			pages = append(pages, mk(fmt.Sprintf("%s%d.html", kinds[i%len(kinds)], i), benchAsOf.Add(-time.Duration(r.IntN(60*24))*time.Hour), html))
		}
	}
	return pages
}

func textLen(html []byte) int64 {
	n, in := int64(0), false
	for _, c := range html {
		switch {
		case c == '<':
			in = true
		case c == '>':
			in = false
		case !in:
			n++
		}
	}
	return n
}

func demoSet(tb testing.TB) *Set {
	s, err := ReadFile("../testdata/policies.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

var (
	reSQL     = regexp.MustCompile("/docs/15/sql-")
	reRelease = regexp.MustCompile("/release-")
	reTut     = regexp.MustCompile("/docs/15/tutorial")
)

// handwritten is the peer: the demo policies hard-coded in Go, producing the
// same matches (before top-K) as Set.Eval, with constant reasons.
func handwritten(dst []Match, p *Page, asOf time.Time) []Match {
	const day = 24 * 3600 * 1000
	as := asOf.UnixMilli()
	if reSQL.MatchString(p.URL) {
		dst = append(dst, Match{Subset: "sql-reference", PageKey: p.Key, Score: 1, Reason: "sql"})
	}
	if p.FetchedAt != 0 && as-p.FetchedAt < 30*day && p.Lang == "en" {
		dst = append(dst, Match{Subset: "fresh", PageKey: p.Key, Score: 1, Reason: "fresh"})
	}
	if p.TextLen >= 2000 && !reRelease.MatchString(p.URL) {
		dst = append(dst, Match{Subset: "long-pages", PageKey: p.Key, Group: p.Host, Score: float64(p.TextLen), Reason: "long"})
	}
	if v, ok := p.Signals["score"]; ok && v.IsNum && v.Num >= 0.8 {
		dst = append(dst, Match{Subset: "high-value", PageKey: p.Key, Score: 1, Reason: "hv"})
	}
	if reRelease.MatchString(p.URL) {
		dst = append(dst, Match{Subset: "release-notes", PageKey: p.Key, Score: 1, Reason: "rel"})
	}
	if reTut.MatchString(p.URL) && p.TextLen >= 500 {
		dst = append(dst, Match{Subset: "tutorial", PageKey: p.Key, Score: 1, Reason: "tut"})
	}
	dst = append(dst, Match{Subset: "link-hubs", PageKey: p.Key, Score: float64(p.OutLinks), Reason: "hub"})
	return dst
}

// TestDemoPoliciesOnCorpus cross-checks the compiled demo policies against
// the handwritten peer on every page of the corpus, at two as-of times, and
// checks the subset sizes against the file names.
func TestDemoPoliciesOnCorpus(t *testing.T) {
	set := demoSet(t)
	pages := corpusPages(t)
	for _, asOf := range []time.Time{benchAsOf, benchAsOf.Add(90 * 24 * time.Hour)} {
		var all []Match
		for i := range pages {
			got := set.Eval(&pages[i], asOf)
			want := handwritten(nil, &pages[i], asOf)
			if len(got) != len(want) {
				t.Fatalf("%s: %d matches, handwritten %d", pages[i].URL, len(got), len(want))
			}
			for j := range got {
				g, w := got[j], want[j]
				if g.Subset != w.Subset || g.Score != w.Score || g.Group != w.Group || g.PageKey != w.PageKey || g.Reason == "" {
					t.Fatalf("%s: match %d: %+v, handwritten %+v", pages[i].URL, j, g, w)
				}
			}
			all = append(all, got...)
		}
		sizes := map[string]int{}
		for _, name := range set.Names() {
			m, err := set.Members(name, all)
			if err != nil {
				t.Fatal(err)
			}
			sizes[name] = len(m)
		}
		want := map[string]int{}
		for _, p := range pages {
			base := filepath.Base(p.URL)
			if strings.HasPrefix(base, "sql-") {
				want["sql-reference"]++
			}
			if strings.HasPrefix(base, "release-") {
				want["release-notes"]++
			}
		}
		if sizes["sql-reference"] != want["sql-reference"] || sizes["release-notes"] != want["release-notes"] {
			t.Errorf("sizes %v, want sql-reference %d release-notes %d", sizes, want["sql-reference"], want["release-notes"])
		}
		if sizes["long-pages"] > 200 || sizes["link-hubs"] != min(50, len(pages)) {
			t.Errorf("top-K sizes %v", sizes)
		}
		names := make([]string, 0, len(sizes))
		for n := range sizes {
			names = append(names, n)
		}
		sort.Strings(names)
		var b strings.Builder
		for _, n := range names {
			fmt.Fprintf(&b, " %s=%d", n, sizes[n])
		}
		t.Logf("%d pages, as of %s:%s", len(pages), asOf.Format(time.DateOnly), b.String())
	}
}

// BenchmarkEvalDemo measures Set.Eval of the demo policies over the corpus
// pages (pages/s), and the ratio to the handwritten Go peer (x-handwritten:
// how many times slower the compiled policies are). The two alternate in
// rounds of 1,000 pages so that load from other processes hits both alike.
func BenchmarkEvalDemo(b *testing.B) {
	set := demoSet(b)
	pages := corpusPages(b)
	buf := make([]Match, 0, 16)
	const round = 1000
	var peer, compiled time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += round {
		n := min(round, b.N-done)
		b.StopTimer()
		t0 := time.Now()
		for i := done; i < done+n; i++ {
			buf = handwritten(buf[:0], &pages[i%len(pages)], benchAsOf)
		}
		peer += time.Since(t0)
		b.StartTimer()
		t0 = time.Now()
		for i := done; i < done+n; i++ {
			buf = set.AppendEval(buf[:0], &pages[i%len(pages)], benchAsOf)
		}
		compiled += time.Since(t0)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/compiled.Seconds(), "pages/s")
	b.ReportMetric(float64(b.N)/peer.Seconds(), "handwritten-pages/s")
	b.ReportMetric(compiled.Seconds()/peer.Seconds(), "x-handwritten")
}

// BenchmarkTopK measures TopK.Push for the top 1,000 of a million matches.
func BenchmarkTopK(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 10))
	ms := make([]Match, 1<<20)
	for i := range ms {
		ms[i] = Match{PageKey: fmt.Sprintf("%032x", r.Uint64()), Score: r.Float64()}
	}
	tk := NewTopK(1000, true, "by score desc")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tk.Push(ms[i%len(ms)])
		if i%len(ms) == len(ms)-1 {
			tk.Reset()
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "matches/s")
}

// TestConcurrentEval: a Set is shared by goroutines (run with -race).
func TestConcurrentEval(t *testing.T) {
	set := demoSet(t)
	pages := corpusPages(t)
	want := make([]int, len(pages))
	for i := range pages {
		want[i] = len(set.Eval(&pages[i], benchAsOf))
	}
	done := make(chan error, 4)
	for g := 0; g < 4; g++ {
		go func() {
			var buf []Match
			for i := range pages {
				buf = set.AppendEval(buf[:0], &pages[i], benchAsOf)
				if len(buf) != want[i] {
					done <- fmt.Errorf("page %d: %d matches, want %d", i, len(buf), want[i])
					return
				}
			}
			done <- nil
		}()
	}
	for g := 0; g < 4; g++ {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}
