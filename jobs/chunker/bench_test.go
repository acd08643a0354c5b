package chunker

import (
	"html"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// pgDocsDir is the PostgreSQL manual as HTML (Debian package postgresql-doc-15).
const pgDocsDir = "/usr/share/doc/postgresql-doc-15/html"

var (
	corpusOnce sync.Once
	corpus     []string
	corpusSize int64
)

var (
	blockTagRE = regexp.MustCompile(`(?i)<(/?(p|div|h[1-6]|li|pre|tr|table|dt|dd|blockquote|ul|ol)|br)\b[^>]*>`)
	tagRE      = regexp.MustCompile(`<[^>]*>`)
	blankRE    = regexp.MustCompile(`\n[ \t]*\n[\s]*`)
)

// stripTags is a crude HTML-to-text conversion: block tags become blank
// lines, other tags vanish, entities are decoded.
func stripTags(s string) string {
	if i := strings.Index(s, "<body"); i >= 0 {
		s = s[i:]
	}
	s = blockTagRE.ReplaceAllString(s, "\n\n")
	s = tagRE.ReplaceAllString(s, "")
	s = html.UnescapeString(s)
	return strings.TrimSpace(blankRE.ReplaceAllString(s, "\n\n"))
}

// pgCorpus returns the text of every page of the PostgreSQL manual, or skips
// the benchmark when the manual is not installed.
func pgCorpus(b *testing.B) ([]string, int64) {
	corpusOnce.Do(func() {
		files, _ := filepath.Glob(filepath.Join(pgDocsDir, "*.html"))
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			t := stripTags(string(data))
			corpus = append(corpus, t)
			corpusSize += int64(len(t))
		}
	})
	if len(corpus) == 0 {
		b.Skipf("no PostgreSQL manual at %s (apt-get install postgresql-doc-15)", pgDocsDir)
	}
	return corpus, corpusSize
}

// floorTime is the time to count the corpus' tokens: the floor every
// chunker pays (best of three).
func floorTime(docs []string) time.Duration {
	best := time.Duration(1 << 62)
	for range 3 {
		start := time.Now()
		n := 0
		for _, d := range docs {
			n += CountTokens(d)
		}
		best = min(best, time.Since(start))
	}
	return best
}

// BenchmarkTokenize is the floor: counting tokens, no chunking.
func BenchmarkTokenize(b *testing.B) {
	docs, size := pgCorpus(b)
	b.SetBytes(size)
	tokens := 0
	for b.Loop() {
		tokens = 0
		for _, d := range docs {
			tokens += CountTokens(d)
		}
	}
	b.ReportMetric(float64(tokens)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric(float64(tokens), "tokens")
}

// BenchmarkChunkers chunks the whole PostgreSQL manual; x_tokenize is the
// time relative to counting its tokens (the floor).
func BenchmarkChunkers(b *testing.B) {
	docs, size := pgCorpus(b)
	for _, spec := range []string{"tokens:size=256,overlap=32", "recursive:size=512,overlap=64", "recursive:size=256,overlap=32", "recursive:size=128,overlap=16"} {
		c := MustParse(spec)
		b.Run(spec, func(b *testing.B) {
			b.SetBytes(size)
			chunks := 0
			for b.Loop() {
				chunks = 0
				for _, d := range docs {
					chunks += len(c.Chunk(d))
				}
			}
			perOp := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(float64(chunks)/perOp, "chunks/s")
			// The floor is measured right after, so that both see the same
			// machine load.
			b.ReportMetric(perOp/floorTime(docs).Seconds(), "x_tokenize")
		})
	}
}

func TestStripTags(t *testing.T) {
	got := stripTags(`<html><body><h1>Title</h1><p>One &amp; <b>two</b>.</p><ul><li>a</li><li>b</li></ul></body></html>`)
	want := "Title\n\nOne & two.\n\na\n\nb"
	if got != want {
		t.Fatalf("stripTags = %q, want %q", got, want)
	}
}
