package embedder

import (
	"context"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/pillarkit/pillar/jobs/chunker"
)

// pgDocsDir is the PostgreSQL manual as HTML (Debian package postgresql-doc-15).
const pgDocsDir = "/usr/share/doc/postgresql-doc-15/html"

var (
	chunksOnce sync.Once
	pgChunks   []string
	pgBytes    int64
	tagRE      = regexp.MustCompile(`<[^>]*>`)
)

// pgChunkTexts returns the PostgreSQL manual's text (tags stripped crudely)
// cut by recursive:size=256,overlap=32, or skips when it is not installed.
func pgChunkTexts(b *testing.B) ([]string, int64) {
	chunksOnce.Do(func() {
		c := chunker.MustParse("recursive:size=256,overlap=32")
		files, _ := filepath.Glob(filepath.Join(pgDocsDir, "*.html"))
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			text := html.UnescapeString(tagRE.ReplaceAllString(string(data), " "))
			for _, k := range c.Chunk(text) {
				pgChunks = append(pgChunks, k.Text)
				pgBytes += int64(len(k.Text))
			}
		}
	})
	if len(pgChunks) == 0 {
		b.Skipf("no PostgreSQL manual at %s (apt-get install postgresql-doc-15)", pgDocsDir)
	}
	return pgChunks, pgBytes
}

// BenchmarkHashEmbed embeds every chunk of the PostgreSQL manual in batches
// of 64; x_tokenize is the time relative to counting the chunks' tokens (the
// floor: the embedder tokenizes too).
func BenchmarkHashEmbed(b *testing.B) {
	texts, size := pgChunkTexts(b)
	floorTime := func() time.Duration {
		floor := time.Duration(1 << 62)
		for range 3 {
			start := time.Now()
			for _, t := range texts {
				chunker.CountTokens(t)
			}
			floor = min(floor, time.Since(start))
		}
		return floor
	}
	for _, dim := range []int{384, 1024} {
		h, err := NewHash(dim)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("dim=%d", dim), func(b *testing.B) {
			b.SetBytes(size)
			ctx := context.Background()
			for b.Loop() {
				for i := 0; i < len(texts); i += 64 {
					if _, err := h.Embed(ctx, texts[i:min(i+64, len(texts))]); err != nil {
						b.Fatal(err)
					}
				}
			}
			perOp := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(float64(len(texts))/perOp, "vectors/s")
			b.ReportMetric(perOp/floorTime().Seconds(), "x_tokenize") // measured under the same load
		})
	}
}

// BenchmarkOpenAILoopback embeds 4096 chunks through the HTTP client against
// a loopback server that embeds with the hash embedder: the client's own cost
// (JSON both ways, batching) over the in-process embedder is x_inprocess.
func BenchmarkOpenAILoopback(b *testing.B) {
	texts, _ := pgChunkTexts(b)
	texts = texts[:min(4096, len(texts))]
	var size int64
	for _, t := range texts {
		size += int64(len(t))
	}
	s := newAPIServer(b, 384)
	e, err := New("openai:url="+s.url()+",model=m,dim=384,batch=64,concurrency=4", Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.SetBytes(size)
	for b.Loop() {
		if _, err := e.Embed(ctx, texts); err != nil {
			b.Fatal(err)
		}
	}
	perOp := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(len(texts))/perOp, "vectors/s")
	inproc := time.Duration(1 << 62) // measured right after, under the same load
	for range 3 {
		start := time.Now()
		if _, err := s.hash.Embed(ctx, texts); err != nil {
			b.Fatal(err)
		}
		inproc = min(inproc, time.Since(start))
	}
	b.ReportMetric(perOp/inproc.Seconds(), "x_inprocess")
}
