// Package formatsbench measures ingest by input format: the same synthetic
// pages written as a folder of HTML files, as a gzipped WARC (one member
// per record, as crawlers write it) and as a Parquet dataset, each
// ingested by `pillar ingest` in a process of its own into a fresh store,
// rounds alternating the order. It reports pages/s, CPU seconds and peak
// RSS per format, and each format's pages/s over the folder's.
//
// Invariants: every run must ingest exactly the N pages generated (a run
// that ingested nothing fails the benchmark); the three inputs hold the
// same pages (same URLs and bodies); nothing is written outside Options.Dir.
package formatsbench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/pillarkit/pillar/pillar/ingest"
)

// Formats measured, the folder first (the reference).
var Formats = []string{"folder", "warc.gz", "parquet"}

// Options configure a run. The zero value of every field but Pillar and
// Dir is its default.
type Options struct {
	Pillar      string // the pillar binary. Required.
	Dir         string // corpus and stores go here. Required.
	N           int    // pages; default 20000
	Size        int    // bytes of HTML per page; default 4096
	MemoryLimit string // --memory-limit of each ingest; default "64MiB"
	Rounds      int    // rounds, each format once per round; default 3
	Log         io.Writer
}

// Run is one measurement of one format in one round.
type Run struct {
	Format     string  `json:"format"`
	Round      int     `json:"round"`
	Pages      int     `json:"pages"`
	Seconds    float64 `json:"seconds"`
	CPUSeconds float64 `json:"cpu_seconds"`
	MaxRSS     int64   `json:"max_rss_bytes"`
}

// Summary is a format's median over the rounds.
type Summary struct {
	Format       string  `json:"format"`
	PagesPerSec  float64 `json:"pages_per_s"`
	PagesPerCPU  float64 `json:"pages_per_cpu_s"`
	PeakRSS      int64   `json:"peak_rss_bytes"`
	VsFolder     float64 `json:"pages_per_s_vs_folder"`
	InputBytes   int64   `json:"input_bytes"`
	RunsMeasured int     `json:"runs"`
}

// Report is a whole run.
type Report struct {
	N           int       `json:"n"`
	Size        int       `json:"size"`
	MemoryLimit string    `json:"memory_limit"`
	Runs        []Run     `json:"runs"`
	Summaries   []Summary `json:"summaries"`
}

func (o *Options) defaults() {
	if o.N <= 0 {
		o.N = 20000
	}
	if o.Size <= 0 {
		o.Size = 4096
	}
	if o.MemoryLimit == "" {
		o.MemoryLimit = "64MiB"
	}
	if o.Rounds <= 0 {
		o.Rounds = 3
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
}

// Measure generates the inputs and runs the ingests.
func Measure(ctx context.Context, o Options) (*Report, error) {
	o.defaults()
	if o.Pillar == "" || o.Dir == "" {
		return nil, fmt.Errorf("formatsbench: Pillar and Dir are required")
	}
	inputs, sizes, err := Generate(filepath.Join(o.Dir, "corpus"), o.N, o.Size)
	if err != nil {
		return nil, err
	}
	rep := &Report{N: o.N, Size: o.Size, MemoryLimit: o.MemoryLimit}
	for round := 1; round <= o.Rounds; round++ {
		for i := range Formats {
			f := Formats[(i+round-1)%len(Formats)] // rotate the order
			r, err := ingestRun(ctx, o, inputs[f], f, round)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(o.Log, "round %d %-8s %6d pages in %6.2fs (%.0f pages/s, %.1f CPU s, peak RSS %d MB)\n",
				round, f, r.Pages, r.Seconds, float64(r.Pages)/r.Seconds, r.CPUSeconds, r.MaxRSS>>20)
			rep.Runs = append(rep.Runs, r)
		}
	}
	var folder float64
	for _, f := range Formats {
		var rate, perCPU []float64
		var peak int64
		for _, r := range rep.Runs {
			if r.Format == f {
				rate = append(rate, float64(r.Pages)/r.Seconds)
				perCPU = append(perCPU, float64(r.Pages)/r.CPUSeconds)
				peak = max(peak, r.MaxRSS)
			}
		}
		s := Summary{Format: f, PagesPerSec: median(rate), PagesPerCPU: median(perCPU), PeakRSS: peak, InputBytes: sizes[f], RunsMeasured: len(rate)}
		if f == "folder" {
			folder = s.PagesPerSec
		}
		s.VsFolder = s.PagesPerSec / folder
		rep.Summaries = append(rep.Summaries, s)
	}
	return rep, nil
}

func median(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// ingestRun runs `pillar ingest` of from into a fresh store.
func ingestRun(ctx context.Context, o Options, from, format string, round int) (Run, error) {
	store := filepath.Join(o.Dir, fmt.Sprintf("store-%s-%d", strings.ReplaceAll(format, ".", "-"), round))
	os.RemoveAll(store)
	defer os.RemoveAll(store)
	cmd := exec.CommandContext(ctx, o.Pillar, "--log-level", "warn", "ingest", "--store", store, "--from", from,
		"--memory-limit", o.MemoryLimit, "--partitions", "16", "--json")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return Run{}, fmt.Errorf("formatsbench: ingest of the %s input: %w", format, err)
	}
	hwm := make(chan int64, 1)
	done := make(chan struct{})
	go func() { hwm <- watchHWM(cmd.Process.Pid, done) }()
	err := cmd.Wait()
	wall := time.Since(start).Seconds()
	close(done)
	peak := <-hwm
	if err != nil {
		return Run{}, fmt.Errorf("formatsbench: ingest of the %s input: %w\n%s", format, err, errb.String())
	}
	var st struct {
		New int `json:"new"`
	}
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		return Run{}, fmt.Errorf("formatsbench: ingest of the %s input printed no JSON summary: %w", format, err)
	}
	if st.New != o.N {
		return Run{}, fmt.Errorf("formatsbench: ingest of the %s input made %d new pages, want %d: the inputs differ or the ingest skipped pages", format, st.New, o.N)
	}
	r := Run{Format: format, Round: round, Pages: st.New, Seconds: wall,
		CPUSeconds: (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()}
	r.MaxRSS = peak
	return r, nil
}

// watchHWM samples the peak resident set (VmHWM) of process pid every
// 20 ms until done, and returns the largest seen. Not the child's rusage
// maxrss: on Linux a child started by a process that shares its memory
// until exec (Go's os/exec) inherits the parent's high-water mark there,
// which is the benchmark's own (it generated the corpus).
func watchHWM(pid int, done <-chan struct{}) int64 {
	var peak int64
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
			for _, l := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
					var kb int64
					fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &kb)
					peak = max(peak, kb<<10)
				}
			}
		}
		select {
		case <-done:
			return peak
		case <-tick.C:
		}
	}
}

type row struct {
	URL       string `parquet:"url"`
	HTML      string `parquet:"html"`
	FetchedAt int64  `parquet:"fetched_at"`
}

// Generate writes n pages of about size bytes as a folder (dir/folder), a
// WARC (dir/crawl.warc.gz) and a Parquet file (dir/pages.parquet), and
// returns each input's path and size by format.
func Generate(dir string, n, size int) (map[string]string, map[string]int64, error) {
	paths := map[string]string{"folder": filepath.Join(dir, "folder"), "warc.gz": filepath.Join(dir, "crawl.warc.gz"), "parquet": filepath.Join(dir, "pages.parquet")}
	os.RemoveAll(dir)
	if err := os.MkdirAll(paths["folder"], 0o755); err != nil {
		return nil, nil, err
	}
	wf, err := os.Create(paths["warc.gz"])
	if err != nil {
		return nil, nil, err
	}
	defer wf.Close()
	pf, err := os.Create(paths["parquet"])
	if err != nil {
		return nil, nil, err
	}
	defer pf.Close()
	pw := parquet.NewGenericWriter[row](pf)
	rng := rand.New(rand.NewPCG(7, uint64(size)))
	words := make([]string, 2000)
	for i := range words {
		b := make([]byte, 3+rng.IntN(8))
		for j := range b {
			b[j] = byte('a' + rng.IntN(26))
		}
		words[i] = string(b)
	}
	date := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	var b strings.Builder
	var batch []row
	for i := 0; i < n; i++ {
		url := fmt.Sprintf("https://h%02d.corpus.test/p/%d.html", i%40, i)
		b.Reset()
		fmt.Fprintf(&b, "<html><head><title>Page %d</title><link rel=\"canonical\" href=\"%s\"></head><body><h1>Page %d</h1>\n", i, url, i)
		for b.Len() < size-32 {
			b.WriteString("<p>")
			for j := 0; j < 40 && b.Len() < size-32; j++ {
				b.WriteString(words[rng.IntN(len(words))])
				b.WriteByte(' ')
			}
			b.WriteString("</p>\n")
		}
		b.WriteString("</body></html>\n")
		body := b.String()
		p := filepath.Join(paths["folder"], fmt.Sprintf("d%04d", i/1000), fmt.Sprintf("p%07d.html", i))
		if i%1000 == 0 {
			os.MkdirAll(filepath.Dir(p), 0o755)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			return nil, nil, err
		}
		if err := ingest.WriteWARCResponse(wf, url, date, "text/html; charset=utf-8", body); err != nil {
			return nil, nil, err
		}
		batch = append(batch, row{URL: url, HTML: body, FetchedAt: date.UnixMilli()})
		if len(batch) == 1000 {
			if _, err := pw.Write(batch); err != nil {
				return nil, nil, err
			}
			batch = batch[:0]
		}
	}
	if _, err := pw.Write(batch); err != nil {
		return nil, nil, err
	}
	if err := pw.Close(); err != nil {
		return nil, nil, err
	}
	sizes := map[string]int64{}
	for f, p := range paths {
		filepath.Walk(p, func(_ string, fi os.FileInfo, err error) error {
			if err == nil && !fi.IsDir() {
				sizes[f] += fi.Size()
			}
			return nil
		})
	}
	return paths, sizes, nil
}

// Markdown is the report as a table.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d pages of %d B, --memory-limit %s, median of %d rounds\n\n", r.N, r.Size, r.MemoryLimit, len(r.Runs)/len(Formats))
	b.WriteString("| input | size | pages/s | ÷ folder | pages per CPU-second | peak RSS |\n|---|---|---|---|---|---|\n")
	for _, s := range r.Summaries {
		fmt.Fprintf(&b, "| %s | %.0f MB | %.0f | %.2f× | %.0f | %d MB |\n", s.Format, float64(s.InputBytes)/1e6, s.PagesPerSec, s.VsFolder, s.PagesPerCPU, s.PeakRSS>>20)
	}
	return b.String()
}
