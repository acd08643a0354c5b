package jobs_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pillarkit/pillar/jobs"
)

func TestLogProgress(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
	p := jobs.NewLogProgress(logger, time.Millisecond)
	p.Phase("map", 1000, 1<<20)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				p.Add(10, 10<<10)
				time.Sleep(100 * time.Microsecond)
			}
		}()
	}
	wg.Wait()
	p.Done()
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	for _, want := range []string{"phase started", "phase=map", "jobs: progress map: rows", "rows/s", "phase done map: rows 1000/1000, 1000.0 KiB/1.0 MiB"} {
		if !strings.Contains(out, want) {
			t.Fatalf("log lacks %q:\n%s", want, out)
		}
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// TestBarProgressDuringMap drives a bar from a real Map.
func TestBarProgressDuringMap(t *testing.T) {
	e := newEnv(t)
	writeTable(e, "docs", makeDocs(61, 2000))
	var buf bytes.Buffer
	var mu sync.Mutex
	op := &jobs.Op{Inputs: []string{"docs"}, Outputs: []jobs.Output{{Table: "wc"}}, Progress: jobs.NewBarProgress(&lockedWriter{w: &buf, mu: &mu})}
	if err := e.runner.Map(context.Background(), &jobs.WordCountMapper{}, op); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	if !strings.Contains(out, "map 2000/2000 rows") || !strings.Contains(out, "100%") {
		t.Fatalf("bar output lacks the final state:\n%q", out[max(0, len(out)-300):])
	}
}
