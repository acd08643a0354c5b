package demo

import (
	"fmt"
	"io"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/pillarkit/pillar/pillar/ingest"
)

// Latencies collects durations; safe for concurrent Add.
type Latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

// Add records one latency.
func (l *Latencies) Add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// N is the number of samples.
func (l *Latencies) N() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.d)
}

// Quantile returns the q-quantile (0 when empty), rounded for display.
func (l *Latencies) Quantile(q float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), l.d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(math.Ceil(q*float64(len(s)))) - 1
	i = max(0, min(i, len(s)-1))
	return s[i].Round(10 * time.Microsecond)
}

// Samples returns a copy of the samples.
func (l *Latencies) Samples() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Duration(nil), l.d...)
}

// copyTree copies the regular files of src (and those symbolic links point
// at) into dst (dst must not exist).
// With maxFiles > 0 it copies only the first maxFiles files ingest reads
// (in walk order), and nothing else. It returns the number of those files
// copied.
func copyTree(src, dst string, maxFiles int) (int, error) {
	if _, err := os.Stat(src); err != nil {
		return 0, err
	}
	n := 0
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if info.IsDir() {
			if maxFiles > 0 && n >= maxFiles {
				return filepath.SkipDir
			}
			return os.MkdirAll(target, 0o755)
		}
		if info.Mode()&os.ModeSymlink != 0 {
			// Debian docs folders link files in from other packages: copy
			// what a link to a regular file points at, as ingest reads it.
			if info, err = os.Stat(p); err != nil || !info.Mode().IsRegular() {
				return nil
			}
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		if ingest.Candidate(p) {
			if maxFiles > 0 && n >= maxFiles {
				return nil
			}
			n++
		} else if maxFiles > 0 {
			return nil
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		if err := out.Close(); err != nil {
			return err
		}
		// Keep the modification time: it is the page's fetched_at.
		return os.Chtimes(target, info.ModTime(), info.ModTime())
	})
	return n, err
}

var synthWords = strings.Fields(`the of and to in is for on that with as by this are be from or an at which it
index table query database transaction replica partition batch snapshot vector embedding chunk page
server client latency throughput storage write read commit log compaction cache bloom filter block
search ranking model version publish export subset policy fresh score host link document text`)

// writeSynthetic writes n HTML pages of realistic size (log-normal text
// length, median ~20 KB, a few up to ~100 KB) into dir, deterministically.
func writeSynthetic(dir string, n int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	rng := rand.New(rand.NewSource(42))
	now := time.Now()
	for i := 0; i < n; i++ {
		size := int(math.Min(math.Exp(rng.NormFloat64()*0.7+math.Log(20000)), 100000))
		var sb strings.Builder
		fmt.Fprintf(&sb, "<html lang=\"en\"><head><title>Synthetic page %d</title></head><body><h1>Synthetic page %d</h1>\n", i, i)
		for sb.Len() < size {
			sb.WriteString("<p>")
			words := 40 + rng.Intn(80)
			for w := 0; w < words; w++ {
				if w > 0 {
					sb.WriteByte(' ')
				}
				sb.WriteString(synthWords[rng.Intn(len(synthWords))])
				if rng.Intn(14) == 0 {
					sb.WriteString(".")
				}
			}
			sb.WriteString(".</p>\n")
			if rng.Intn(6) == 0 {
				fmt.Fprintf(&sb, "<p><a href=\"page-%05d.html\">see page %d</a></p>\n", rng.Intn(n), rng.Intn(n))
			}
		}
		sb.WriteString("</body></html>\n")
		p := filepath.Join(dir, fmt.Sprintf("page-%05d.html", i))
		if err := os.WriteFile(p, []byte(sb.String()), 0o644); err != nil {
			return err
		}
		mt := now.Add(-time.Duration(rng.Intn(60*24)) * time.Hour)
		if err := os.Chtimes(p, mt, mt); err != nil {
			return err
		}
	}
	return nil
}
