package scalebench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Options configure a run. The zero value runs N = 10k, 40k, 160k with pages
// of about 4 KB and 20 KB at --memory-limit 64MiB.
type Options struct {
	// Pillar is the pillar binary each step runs. The default value is this
	// process's executable.
	Pillar string
	// Data is the working folder (corpora, stores, exports; each N's is
	// removed after its round). The default value is a temporary folder.
	Data string
	// Ns are the corpus sizes. The default value is 10k, 40k, 160k.
	Ns []int
	// Sizes are the page sizes in bytes of HTML, one run per size. The
	// default value is 4096 and 20480.
	Sizes []int
	// MemoryLimit is every step's --memory-limit. The default value is
	// "64MiB".
	MemoryLimit string
	// EditFraction of the pages is edited for the incremental round. The
	// default value is 0.001.
	EditFraction float64
	// Chunker and Model are the versions built. The default values are
	// recursive:size=512,overlap=64 and hash:dim=384.
	Chunker, Model string
	// Partitions of the store. The default value is 16.
	Partitions int
	// Workers is every step's --workers. The default value (0) lets each
	// command use all CPUs.
	Workers int
	// Log receives a line per step. The default value discards.
	Log io.Writer
	// Seed makes the corpus deterministic. The default value is 1.
	Seed uint64
	// Keep leaves each round's corpus and store under Data. The default
	// value (false) removes them after the round.
	Keep bool
	// Profile, when set, is a folder that receives each step's heap
	// profile (ProfileEnv: in-use memory at the step's peak live heap),
	// named <size>-n<N>[-r<repeat>]-<round>-<step>.pprof. Writing profiles
	// slows the steps: for diagnosis, not for the figures. The default value
	// ("") writes none.
	Profile string
	// Floors, when set, runs after each step of the full round its floor
	// (`pillar bench scale floor`, package bench/scalefloor: the step's I/O
	// and transformation in a bare loop, on the step's input, into a
	// scratch folder) as a child process measured like the step, and fails
	// the run when the floor wrote no rows or another count than the step.
	// The default value (false) runs none.
	Floors bool
	// AfterRound, when set, is called with the report after each round
	// (its checks evaluated so far), e.g. to save partial results of a
	// long run. The default value is nil.
	AfterRound func(*Report)
}

func (o *Options) ensureDefaults() error {
	if o.Pillar == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		o.Pillar = exe
	}
	if len(o.Ns) == 0 {
		o.Ns = []int{10_000, 40_000, 160_000}
	}
	if len(o.Sizes) == 0 {
		o.Sizes = []int{4 << 10, 20 << 10}
	}
	if o.MemoryLimit == "" {
		o.MemoryLimit = "64MiB"
	}
	if o.EditFraction == 0 {
		o.EditFraction = 0.001
	}
	if o.Chunker == "" {
		o.Chunker = "recursive:size=512,overlap=64"
	}
	if o.Model == "" {
		o.Model = "hash:dim=384"
	}
	if o.Partitions == 0 {
		o.Partitions = 16
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	return nil
}

// Step is one measured command.
type Step struct {
	Size  int    `json:"size"`  // page size, bytes of HTML
	N     int    `json:"n"`     // pages in the corpus
	Round string `json:"round"` // "full" or "incremental"
	Name  string `json:"name"`
	Pages int    `json:"pages"` // pages the step handled
	// Seconds of wall time.
	Seconds float64 `json:"seconds"`
	// MaxRSS is the child's peak resident set, bytes.
	MaxRSS int64 `json:"max_rss"`
	// StoreBytes is the size of the files the step created or changed in
	// the store and the export folder.
	StoreBytes int64 `json:"store_bytes"`
	// IOBytes is what the child wrote to the file system (ru_oublock × 512),
	// spill files included.
	IOBytes int64 `json:"io_bytes"`
	// LiveHeap is the child's peak live Go heap (HeapPeaks.Live), GoMapped
	// its peak of memory mapped by the Go runtime (HeapPeaks.Mapped); 0 when
	// the child did not report them.
	LiveHeap int64 `json:"live_heap,omitempty"`
	GoMapped int64 `json:"go_mapped,omitempty"`
	// Repeat numbers the rounds of one size and N in a report: 0 for the
	// first, 1 for the next (`--n 10000,160000,10000` runs N=10000 again
	// after the big round, so both sides of a comparison are measured near
	// the same load), and so on. Merged reports (Load) number them in order.
	Repeat int `json:"repeat,omitempty"`
	// CPUSeconds is the child's user + system CPU time (rusage): what the
	// step cost, whatever else the shared machine ran meanwhile. 0 when
	// not recorded (results saved before it was).
	CPUSeconds float64 `json:"cpu_seconds,omitempty"`
	// LoadBefore and LoadAfter are the 1-minute load average when the step
	// started and when it ended.
	LoadBefore float64 `json:"load_before,omitempty"`
	LoadAfter  float64 `json:"load_after,omitempty"`
	// Floor is the step's floor, run right after it (Options.Floors); nil
	// when none ran.
	Floor *Floor `json:"floor,omitempty"`
}

// Floor is the measurement of a step's floor: the same pages, the same
// input, the same rows written, in a bare loop.
type Floor struct {
	Seconds    float64 `json:"seconds"`
	CPUSeconds float64 `json:"cpu_seconds"`
	MaxRSS     int64   `json:"max_rss"`
	// RowsIn is what the floor read; Rows what it wrote, StepRows what the
	// step wrote (they must be equal).
	RowsIn   int64 `json:"rows_in"`
	Rows     int64 `json:"rows"`
	StepRows int64 `json:"step_rows"`
	Workers  int   `json:"workers"`
}

// CPUUtil is the step's CPU seconds over its wall seconds: the cores it
// kept busy on average (at most GOMAXPROCS).
func (s Step) CPUUtil() float64 {
	if s.Seconds <= 0 {
		return 0
	}
	return s.CPUSeconds / s.Seconds
}

// FloorPagesPerCPUSec is the step's pages over its floor's CPU seconds; 0
// without a floor.
func (s Step) FloorPagesPerCPUSec() float64 {
	if s.Floor == nil || s.Floor.CPUSeconds <= 0 {
		return 0
	}
	return float64(s.Pages) / s.Floor.CPUSeconds
}

// FloorPagesPerSec is the step's pages over its floor's wall seconds.
func (s Step) FloorPagesPerSec() float64 {
	if s.Floor == nil || s.Floor.Seconds <= 0 {
		return 0
	}
	return float64(s.Pages) / s.Floor.Seconds
}

// FloorCPUUtil is the floor's CPU seconds over its wall seconds.
func (s Step) FloorCPUUtil() float64 {
	if s.Floor == nil || s.Floor.Seconds <= 0 {
		return 0
	}
	return s.Floor.CPUSeconds / s.Floor.Seconds
}

// PagesPerCPUSec is Pages over the child's CPU seconds; 0 when they were not
// recorded.
func (s Step) PagesPerCPUSec() float64 {
	if s.CPUSeconds <= 0 {
		return 0
	}
	return float64(s.Pages) / s.CPUSeconds
}

// PagesPerSec is Pages over the wall time.
func (s Step) PagesPerSec() float64 {
	if s.Seconds <= 0 {
		return 0
	}
	return float64(s.Pages) / s.Seconds
}

// Report is a whole run.
type Report struct {
	Options Options  `json:"-"`
	Steps   []Step   `json:"steps"`
	Load    []string `json:"load"` // uptime before each round
	Checks  []Check  `json:"checks"`
	Started time.Time
	// BigN is the N of a --big run appended to the report (compared with
	// nothing: its target is that it completes); 0 when none.
	BigN int `json:"big_n,omitempty"`
}

// Check is one target and whether it holds.
type Check struct {
	Target string `json:"target"`
	Value  string `json:"value"`
	Pass   bool   `json:"pass"`
}

// Run runs the benchmark. Each finished step is appended to the report as it
// completes, so a failed run still reports what it measured.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if err := opts.ensureDefaults(); err != nil {
		return nil, err
	}
	rep := &Report{Options: opts, Started: time.Now().UTC()}
	data := opts.Data
	if data == "" {
		d, err := os.MkdirTemp("", "pillar-bench-scale-")
		if err != nil {
			return rep, err
		}
		defer os.RemoveAll(d)
		data = d
	}
	for _, size := range opts.Sizes {
		for _, n := range opts.Ns {
			repeat := rep.rounds(size, n)
			dir := filepath.Join(data, fmt.Sprintf("s%d-n%d", size, n))
			label := fmt.Sprintf("%s, N=%d", sizeName(size), n)
			if repeat > 0 {
				dir += fmt.Sprintf("-r%d", repeat)
				label += fmt.Sprintf(" (repeat %d)", repeat)
			}
			rep.Load = append(rep.Load, fmt.Sprintf("%s: %s", label, uptime()))
			err := runRound(ctx, &opts, rep, dir, size, n, repeat)
			if !opts.Keep || opts.Data == "" {
				os.RemoveAll(dir)
			}
			if err != nil {
				return rep, fmt.Errorf("scalebench: %s pages, N=%d: %w", sizeName(size), n, err)
			}
			if opts.AfterRound != nil {
				rep.evaluate()
				opts.AfterRound(rep)
			}
		}
	}
	rep.evaluate()
	return rep, nil
}

func sizeName(size int) string { return fmt.Sprintf("%dKB", (size+512)>>10) }

// load1 is the 1-minute load average; 0 when unknown.
func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	fmt.Sscan(string(b), &l)
	return l
}

func uptime() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "load unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "load unknown"
	}
	return "load average " + strings.Join(f[:3], " ")
}

// round is the state of one (size, N) round.
type round struct {
	o      *Options
	rep    *Report
	size   int
	n      int
	repeat int
	store  string
	export string
}

func runRound(ctx context.Context, o *Options, rep *Report, dir string, size, n, repeat int) error {
	corpus, edits := filepath.Join(dir, "corpus"), filepath.Join(dir, "edits")
	fmt.Fprintf(o.Log, "scale bench: %s pages, N=%d: generating the corpus in %s\n", sizeName(size), n, corpus)
	edited, err := generate(corpus, edits, size, n, o.EditFraction, o.Seed)
	if err != nil {
		return err
	}
	policies := filepath.Join(dir, "policies.yaml")
	if err := os.WriteFile(policies, []byte(policyFile), 0o644); err != nil {
		return err
	}
	r := &round{o: o, rep: rep, size: size, n: n, repeat: repeat, store: filepath.Join(dir, "store"), export: filepath.Join(dir, "export")}
	asOf := time.Now().UTC().Format(time.RFC3339)
	var cv string
	full := []struct {
		name string
		args func() []string
		out  func([]byte) error
	}{
		{"ingest", func() []string {
			return []string{"ingest", "--store", r.store, "--from", corpus, "--base-url", "https://corpus.test/", "--partitions", fmt.Sprint(o.Partitions)}
		}, nil},
		{"rechunk", func() []string {
			return []string{"backfill", "rechunk", "--store", r.store, "--chunker", o.Chunker, "--json"}
		},
			func(b []byte) error { return jsonField(b, "version", &cv) }},
		{"embed", func() []string {
			return []string{"backfill", "embed", "--store", r.store, "--chunks", cv, "--model", o.Model, "--json"}
		}, nil},
		{"subsets recompute", func() []string {
			return []string{"subsets", "recompute", "--store", r.store, "--policies", policies, "--as-of", asOf}
		}, nil},
		{"publish", func() []string {
			return []string{"publish", "--store", r.store, "--chunks", cv, "--model", o.Model, "--json"}
		}, nil},
		{"export", func() []string { return []string{"export", "--store", r.store, "--out", r.export, "--id", "bench"} }, nil},
	}
	for _, s := range full {
		out, err := r.step(ctx, "full", s.name, n, s.args()...)
		if err != nil {
			return err
		}
		if s.out != nil {
			if err := s.out(out); err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
		}
		if o.Floors {
			fa := []string{"--step", s.name, "--store", r.store, "--policies", policies}
			switch s.name {
			case "ingest":
				fa = append(fa, "--from", corpus, "--base-url", "https://corpus.test/")
			case "rechunk":
				fa = append(fa, "--chunker", o.Chunker)
			case "embed":
				fa = append(fa, "--chunks", cv, "--model", o.Model)
			case "subsets recompute":
				fa = append(fa, "--as-of", asOf)
			}
			if err := r.floor(ctx, cv, out, filepath.Join(dir, "floor"), fa...); err != nil {
				return fmt.Errorf("full %s floor: %w", s.name, err)
			}
		}
	}
	if err := r.checkFull(ctx, cv); err != nil {
		return err
	}
	os.RemoveAll(r.export) // the SST build would consume it; not measured here
	incr := [][]string{
		{"ingest", "--store", r.store, "--from", edits, "--base-url", "https://corpus.test/"},
		{"backfill", "rechunk", "--store", r.store, "--chunker", o.Chunker},
		{"backfill", "embed", "--store", r.store, "--chunks", cv, "--model", o.Model},
		{"publish", "--store", r.store, "--chunks", cv, "--model", o.Model, "--json"},
	}
	names := []string{"ingest", "rechunk", "embed", "publish"}
	for i, args := range incr {
		out, err := r.step(ctx, "incremental", names[i], edited, args...)
		if err != nil {
			return err
		}
		if names[i] == "publish" {
			// The queue must now hold the edited pages for Lorry.
			var res struct {
				Export struct {
					Puts int  `json:"puts"`
					Bulk bool `json:"bulk"`
				} `json:"export"`
			}
			if err := json.Unmarshal(lastJSON(out), &res); err != nil {
				return fmt.Errorf("incremental publish: %w", err)
			}
			if res.Export.Bulk || res.Export.Puts < edited {
				return fmt.Errorf("incremental publish queued %d puts (bulk %v) for %d edited pages", res.Export.Puts, res.Export.Bulk, edited)
			}
		}
	}
	return nil
}

// checkFull fails the run when the full round's steps did not cover the
// corpus, so a step that did nothing cannot pass as a fast one: docs must
// hold every page, chunks/<cv> at least one chunk per page (every synthetic
// page has text), embeddings/<cv>/… one vector per chunk, and the export
// folder must hold files.
func (r *round) checkFull(ctx context.Context, cv string) error {
	out, err := exec.CommandContext(ctx, r.o.Pillar, "--log-level", "warn", "tables", "--store", r.store, "--json").Output()
	if err != nil {
		return fmt.Errorf("full round check: pillar tables: %w", err)
	}
	var sum struct {
		Tables []struct {
			Name string `json:"name"`
			Rows int64  `json:"rows"`
		} `json:"tables"`
	}
	if err := json.Unmarshal(out, &sum); err != nil {
		return fmt.Errorf("full round check: pillar tables --json: %w", err)
	}
	var docs, chunks, vectors int64 = -1, -1, -1
	for _, t := range sum.Tables {
		switch {
		case t.Name == "docs":
			docs = t.Rows
		case t.Name == "chunks/"+cv:
			chunks = t.Rows
		case strings.HasPrefix(t.Name, "embeddings/"+cv+"/"):
			vectors = t.Rows
		}
	}
	switch {
	case docs != int64(r.n):
		return fmt.Errorf("full round check: docs holds %d rows, want the %d generated pages", docs, r.n)
	case chunks < int64(r.n):
		return fmt.Errorf("full round check: chunks/%s holds %d rows for %d pages", cv, chunks, r.n)
	case vectors != chunks:
		return fmt.Errorf("full round check: %d vectors for %d chunks of chunks/%s", vectors, chunks, cv)
	}
	if files := len(listing(r.export)); files == 0 {
		return fmt.Errorf("full round check: the export wrote no files under %s", r.export)
	}
	return nil
}

// step runs one pillar command as a child process and records it.
func (r *round) step(ctx context.Context, roundName, name string, pages int, args ...string) ([]byte, error) {
	args = append(args, "--memory-limit", r.o.MemoryLimit)
	if r.o.Workers > 0 {
		args = append(args, "--workers", fmt.Sprint(r.o.Workers))
	}
	before := listing(r.store, r.export)
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, r.o.Pillar, append([]string{"--log-level", "warn"}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	heapFile := filepath.Join(filepath.Dir(r.store), "heap.json")
	os.Remove(heapFile)
	os.Remove(heapFile + ".pprof")
	cmd.Env = append(os.Environ(), HeapEnv+"="+heapFile)
	if r.o.Profile != "" {
		cmd.Env = append(cmd.Env, ProfileEnv+"=1")
	}
	loadBefore := load1()
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	loadAfter := load1()
	if err != nil {
		return nil, fmt.Errorf("%s %s: pillar %s: %w\n%s", roundName, name, strings.Join(args, " "), err, tail(stderr.String(), 2000))
	}
	ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	s := Step{Size: r.size, N: r.n, Round: roundName, Name: name, Pages: pages, Seconds: wall.Seconds(),
		Repeat: r.repeat, LoadBefore: loadBefore, LoadAfter: loadAfter}
	if ru != nil {
		s.MaxRSS = ru.Maxrss << 10 // kilobytes on Linux
		s.IOBytes = ru.Oublock * 512
	}
	s.CPUSeconds = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	if h, ok := readHeap(heapFile); ok {
		s.LiveHeap, s.GoMapped = h.Live, h.Mapped
	}
	s.StoreBytes = written(before, listing(r.store, r.export))
	if r.o.Profile != "" {
		if err := r.keepProfile(heapFile+".pprof", roundName, name); err != nil {
			return nil, err
		}
	}
	r.rep.Steps = append(r.rep.Steps, s)
	fmt.Fprintf(r.o.Log, "  %-11s %-17s %7d pages %8.1fs %8.0f pages/s  cpu %7.1fs %6.0f pages/cpu-s  load %.1f→%.1f  peak RSS %4d MB (live heap %3d MB)  store +%s  io %s\n",
		roundName, name, pages, s.Seconds, s.PagesPerSec(), s.CPUSeconds, s.PagesPerCPUSec(), loadBefore, loadAfter, s.MaxRSS>>20, s.LiveHeap>>20, human(s.StoreBytes), human(s.IOBytes))
	return stdout.Bytes(), nil
}

// keepProfile moves a step's heap profile into Options.Profile.
func (r *round) keepProfile(from, roundName, name string) error {
	if err := os.MkdirAll(r.o.Profile, 0o755); err != nil {
		return err
	}
	base := fmt.Sprintf("%s-n%d", sizeName(r.size), r.n)
	if r.repeat > 0 {
		base += fmt.Sprintf("-r%d", r.repeat)
	}
	to := filepath.Join(r.o.Profile, fmt.Sprintf("%s-%s-%s.pprof", base, roundName, strings.ReplaceAll(name, " ", "-")))
	b, err := os.ReadFile(from)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // the peak never grew past the first MiB
	}
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o644)
}

type fileState struct {
	size  int64
	mtime time.Time
}

// listing maps every file under the roots to its size and mtime (a map of
// files, not of pages: a store has a few hundred).
func listing(roots ...string) map[string]fileState {
	out := map[string]fileState{}
	for _, root := range roots {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			if fi, err := d.Info(); err == nil {
				out[p] = fileState{fi.Size(), fi.ModTime()}
			}
			return nil
		})
	}
	return out
}

// written sums the sizes of files new or changed in after.
func written(before, after map[string]fileState) int64 {
	var n int64
	for p, a := range after {
		if b, ok := before[p]; !ok || b != a {
			n += a.size
		}
	}
	return n
}

func jsonField(b []byte, field string, dst *string) error {
	var m map[string]any
	if err := json.Unmarshal(lastJSON(b), &m); err != nil {
		return fmt.Errorf("parse JSON output: %w", err)
	}
	v, ok := m[field].(string)
	if !ok || v == "" {
		return fmt.Errorf("no %q in the output", field)
	}
	*dst = v
	return nil
}

// lastJSON returns the last line of out that starts with '{'.
func lastJSON(out []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		if bytes.HasPrefix(bytes.TrimSpace(lines[i]), []byte("{")) {
			return lines[i]
		}
	}
	return out
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func human(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(b)/(1<<20))
	default:
		return fmt.Sprintf("%.0f KB", float64(b)/(1<<10))
	}
}

// policyFile is the benchmark's subset policies: an exported subset of every
// page, an exported top-K per host, and an unexported one.
const policyFile = `history: 2
policies:
  - name: all
    exported: true
    where: text_len >= 0
  - name: long-per-host
    exported: true
    where: text_len >= 1000
    top: {k: 50, per: host, by: text_len desc}
  - name: short
    exported: false
    where: text_len < 3000
`

var words = func() []string {
	rng := rand.New(rand.NewPCG(3, 3))
	out := make([]string, 2000)
	for i := range out {
		b := make([]byte, 3+rng.IntN(8))
		for j := range b {
			b[j] = byte('a' + rng.IntN(26))
		}
		out[i] = string(b)
	}
	return out
}()

// generate writes n pages of about size bytes of HTML under corpus (1,000
// per folder), and an edited copy of every 1/fraction-th page under edits
// (same relative path, so the same URL). It returns the number of edits.
func generate(corpus, edits string, size, n int, fraction float64, seed uint64) (int, error) {
	every := min(max(1, int(1/fraction)), n) // at least one edit
	edited := 0
	rng := rand.New(rand.NewPCG(seed, uint64(size)))
	var b strings.Builder
	for i := 0; i < n; i++ {
		rel := filepath.Join(fmt.Sprintf("d%04d", i/1000), fmt.Sprintf("p%07d.html", i))
		page := func(extra string) []byte {
			b.Reset()
			fmt.Fprintf(&b, "<html><head><title>Page %d</title><link rel=\"canonical\" href=\"https://h%02d.corpus.test/p/%d.html\"></head><body><h1>Page %d</h1>\n",
				i, i%40, i, i)
			for b.Len() < size-64 {
				b.WriteString("<p>")
				for j := 0; j < 40 && b.Len() < size-64; j++ {
					b.WriteString(words[rng.IntN(len(words))])
					b.WriteByte(' ')
				}
				b.WriteString("</p>\n")
			}
			b.WriteString(extra)
			b.WriteString("</body></html>\n")
			return []byte(b.String())
		}
		body := page("")
		if err := writeFile(filepath.Join(corpus, rel), body); err != nil {
			return 0, err
		}
		if i%every == every/2 {
			ed := append(bytes.TrimSuffix(body, []byte("</body></html>\n")), []byte(fmt.Sprintf("<p>edited %d</p></body></html>\n", i))...)
			if err := writeFile(filepath.Join(edits, rel), ed); err != nil {
				return 0, err
			}
			edited++
		}
	}
	return edited, nil
}

func writeFile(p string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, b, 0o644)
}
