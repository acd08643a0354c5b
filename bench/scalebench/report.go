package scalebench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// The targets of the corpus-scale issue.
const (
	maxRSS         = 300 << 20 // every step, every N
	rssGrowth      = 1.2       // peak at the largest N over the smallest
	rateKeep       = 0.8       // pages/s at the largest N over the smallest
	incrTimeShare  = 0.05      // incremental round over the full round, time
	incrBytesShare = 0.02      // and bytes written
	floorShare     = 0.6       // pages per CPU-second of a step over its floor's
	coresShare     = 1.6       // wall pages/s over the single-core rate, where the floor reaches it
)

// find is the step of the first round at size and N (repeat 0).
func (r *Report) find(size, n int, round, name string) *Step {
	for i := range r.Steps {
		s := &r.Steps[i]
		if s.Size == size && s.N == n && s.Round == round && s.Name == name && s.Repeat == 0 {
			return s
		}
	}
	return nil
}

// findAll is the step in every round at size and N, in repeat order.
func (r *Report) findAll(size, n int, round, name string) []*Step {
	var out []*Step
	for i := range r.Steps {
		s := &r.Steps[i]
		if s.Size == size && s.N == n && s.Round == round && s.Name == name {
			out = append(out, s)
		}
	}
	slices.SortStableFunc(out, func(a, b *Step) int { return a.Repeat - b.Repeat })
	return out
}

// rounds is how many rounds at size and N the report holds (the next
// round's Repeat).
func (r *Report) rounds(size, n int) int {
	k := 0
	for _, s := range r.Steps {
		if s.Size == size && s.N == n {
			k = max(k, s.Repeat+1)
		}
	}
	return k
}

// roundName names a step's round in the table and in the checks: "N=10000",
// or "N=10000 (repeat 1)".
func roundName(n, repeat int) string {
	if repeat == 0 {
		return fmt.Sprintf("N=%d", n)
	}
	return fmt.Sprintf("N=%d (repeat %d)", n, repeat)
}

// compare checks the big round's step against every round of the small N
// (the target must hold against each, so a repeat of the small round cannot
// be picked to pass it): peak RSS growth and the pages/s kept, each value
// with the pages per CPU-second and the load beside it, so a rate measured at
// another load reads as such.
func compare(los, his []*Step) (rss, rate string, rssOK, rateOK bool) {
	rssOK, rateOK = true, true
	var rv, pv []string
	for _, b := range his {
		for _, a := range los {
			which := ""
			if len(los) > 1 || len(his) > 1 {
				which = fmt.Sprintf("%s vs %s: ", roundName(b.N, b.Repeat), roundName(a.N, a.Repeat))
			}
			g := float64(b.MaxRSS) / float64(max(a.MaxRSS, 1))
			rssOK = rssOK && g <= rssGrowth
			rv = append(rv, fmt.Sprintf("%s%d vs %d MB (%.2f×)", which, b.MaxRSS>>20, a.MaxRSS>>20, g))
			k := b.PagesPerSec() / max(a.PagesPerSec(), 1e-9)
			rateOK = rateOK && k >= rateKeep
			v := fmt.Sprintf("%s%.0f vs %.0f (%.2f×)", which, b.PagesPerSec(), a.PagesPerSec(), k)
			if a.CPUSeconds > 0 && b.CPUSeconds > 0 {
				v += fmt.Sprintf("; per CPU-second %.0f vs %.0f (%.2f×)", b.PagesPerCPUSec(), a.PagesPerCPUSec(), b.PagesPerCPUSec()/a.PagesPerCPUSec())
			}
			if a.LoadBefore > 0 || b.LoadBefore > 0 {
				v += fmt.Sprintf("; load %.1f–%.1f vs %.1f–%.1f", b.LoadBefore, b.LoadAfter, a.LoadBefore, a.LoadAfter)
			}
			pv = append(pv, v)
		}
	}
	return strings.Join(rv, " · "), strings.Join(pv, " · "), rssOK, rateOK
}

// roundTotals sums a round's seconds and store bytes.
func (r *Report) roundTotals(size, n int, round string) (secs float64, bytes int64, ok bool) {
	for _, s := range r.Steps {
		if s.Size == size && s.N == n && s.Round == round {
			secs += s.Seconds
			bytes += s.StoreBytes
			ok = true
		}
	}
	return
}

func (r *Report) ns(size int) []int {
	var out []int
	for _, s := range r.Steps {
		if s.Size == size && !slices.Contains(out, s.N) {
			out = append(out, s.N)
		}
	}
	slices.Sort(out)
	return out
}

func (r *Report) stepNames(round string) []string {
	var out []string
	for _, s := range r.Steps {
		if s.Round == round && !slices.Contains(out, s.Name) {
			out = append(out, s.Name)
		}
	}
	return out
}

// fullSteps and incrementalSteps are the steps a round must measure.
var (
	fullSteps        = []string{"ingest", "rechunk", "embed", "subsets recompute", "publish", "export"}
	incrementalSteps = []string{"ingest", "rechunk", "embed", "publish"}
)

// evaluate checks the targets. A target whose measurements are missing (a
// step that did not run at some N, a single N, a --big run that did not
// finish) is reported as missed, never skipped: a run that measured
// nothing cannot pass.
func (r *Report) evaluate() {
	r.Checks = nil
	add := func(target, value string, pass bool) { r.Checks = append(r.Checks, Check{target, value, pass}) }
	if len(r.Steps) == 0 {
		add("the benchmark measured something", "no step ran", false)
	}
	for _, size := range r.Options.Sizes {
		var ns []int
		for _, n := range r.ns(size) {
			if n != r.BigN {
				ns = append(ns, n)
			}
		}
		sz := sizeName(size)
		if len(ns) == 0 {
			if r.BigN == 0 || size != r.Options.Sizes[0] {
				add(fmt.Sprintf("%s: the rounds ran", sz), "no step measured", false)
			}
			continue
		}
		worst, where := int64(0), ""
		for _, s := range r.Steps {
			if s.Size == size && s.MaxRSS > worst {
				worst, where = s.MaxRSS, fmt.Sprintf("%s %s at N=%d", s.Round, s.Name, s.N)
			}
		}
		add(fmt.Sprintf("%s: peak RSS of every step ≤ 300 MB at every N", sz), fmt.Sprintf("worst %d MB (%s)", worst>>20, where), worst <= maxRSS)
		lo, hi := ns[0], ns[len(ns)-1]
		if lo == hi {
			add(fmt.Sprintf("%s: peak RSS and pages/s compared between two N", sz), fmt.Sprintf("only N=%d ran", lo), false)
		} else {
			for _, name := range fullSteps {
				los, his := r.findAll(size, lo, "full", name), r.findAll(size, hi, "full", name)
				if len(los) == 0 || len(his) == 0 {
					add(fmt.Sprintf("%s %s: measured at N=%d and N=%d", sz, name, lo, hi), "missing", false)
					continue
				}
				rss, rate, rssOK, rateOK := compare(los, his)
				add(fmt.Sprintf("%s %s: peak RSS at N=%d ≤ 1.2 × at N=%d", sz, name, hi, lo), rss, rssOK)
				add(fmt.Sprintf("%s %s: pages/s at N=%d ≥ 0.8 × at N=%d", sz, name, hi, lo), rate, rateOK)
			}
		}
		missing := 0
		for _, name := range incrementalSteps {
			if r.find(size, hi, "incremental", name) == nil {
				missing++
			}
		}
		fs, fb, ok1 := r.roundTotals(size, hi, "full")
		is, ib, ok2 := r.roundTotals(size, hi, "incremental")
		if !ok1 || !ok2 || missing > 0 {
			add(fmt.Sprintf("%s N=%d: incremental round measured against the full round", sz, hi), fmt.Sprintf("%d of %d incremental steps missing", missing, len(incrementalSteps)), false)
			continue
		}
		add(fmt.Sprintf("%s N=%d: incremental round time ≤ 5%% of the full round", sz, hi), fmt.Sprintf("%.1f s of %.1f s (%.1f%%)", is, fs, 100*is/fs), is <= incrTimeShare*fs)
		add(fmt.Sprintf("%s N=%d: incremental round bytes written ≤ 2%% of the full round", sz, hi), fmt.Sprintf("%s of %s (%.1f%%)", human(ib), human(fb), 100*float64(ib)/float64(max(fb, 1))), float64(ib) <= incrBytesShare*float64(fb))
	}
	r.evaluateFloors(add)
	if r.BigN > 0 && len(r.Options.Sizes) > 0 {
		size := r.Options.Sizes[0]
		done, worst := 0, int64(0)
		for _, s := range r.Steps {
			if s.Size == size && s.N == r.BigN {
				done++
				worst = max(worst, s.MaxRSS)
			}
		}
		want := len(fullSteps) + len(incrementalSteps)
		add(fmt.Sprintf("%s N=%d: the run completes (every step ≤ 300 MB)", sizeName(size), r.BigN), fmt.Sprintf("%d of %d steps, worst %d MB", done, want, worst>>20), done == want && worst <= maxRSS)
	}
}

// evaluateFloors checks each step measured with its floor: its pages per
// CPU-second against the floor's, and its use of the cores. The
// single-core rate of a step is its pages per CPU-second (what one core
// doing the same CPU work would reach), so wall pages/s over it is the CPU
// utilisation; the target applies where the floor itself reaches it.
func (r *Report) evaluateFloors(add func(target, value string, pass bool)) {
	for _, s := range r.Steps {
		if s.Floor == nil {
			continue
		}
		where := fmt.Sprintf("%s %s %s %s", sizeName(s.Size), roundName(s.N, s.Repeat), s.Round, s.Name)
		f := s.Floor
		rowsOK := checkFloorRows(s.Name, f) == nil
		add(where+": the floor wrote the step's rows", fmt.Sprintf("%d rows, the step %d (read %d)", f.Rows, f.StepRows, f.RowsIn), rowsOK)
		k := s.PagesPerCPUSec() / max(s.FloorPagesPerCPUSec(), 1e-9)
		add(fmt.Sprintf("%s: pages per CPU-second ≥ %.1f × its floor's", where, floorShare),
			fmt.Sprintf("%.0f vs %.0f (%.2f×)", s.PagesPerCPUSec(), s.FloorPagesPerCPUSec(), k), rowsOK && k >= floorShare)
		if fu := s.FloorCPUUtil(); fu < coresShare {
			add(fmt.Sprintf("%s: pages/s ≥ %.1f × its single-core rate (CPU utilisation), where the floor scales so", where, coresShare),
				fmt.Sprintf("not applicable: the floor itself keeps %.2f cores busy (the step %.2f)", fu, s.CPUUtil()), true)
			continue
		}
		add(fmt.Sprintf("%s: pages/s ≥ %.1f × its single-core rate (CPU utilisation), where the floor scales so", where, coresShare),
			fmt.Sprintf("%.2f cores (the floor %.2f)", s.CPUUtil(), s.FloorCPUUtil()), s.CPUUtil() >= coresShare)
	}
}

// floorTable renders the steps measured with their floors.
func (r *Report) floorTable(b *strings.Builder) {
	var any bool
	for _, s := range r.Steps {
		any = any || s.Floor != nil
	}
	if !any {
		return
	}
	b.WriteString("\nSteps against their floors (`--floors`): the floor is the step's I/O and transformation in a bare loop on the step's input, run right after it; pages per CPU-second of each and the ratio, and CPU utilisation (CPU-seconds over wall seconds: the cores kept busy).\n\n")
	b.WriteString("| pages | N | step | pages/CPU-s | floor pages/CPU-s | step ÷ floor | CPU util | floor CPU util | pages/s | floor pages/s | rows (step = floor) | floor peak RSS MB |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range r.Steps {
		if s.Floor == nil {
			continue
		}
		n := fmt.Sprint(s.N)
		if s.Repeat > 0 {
			n += fmt.Sprintf(" (repeat %d)", s.Repeat)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %.0f | %.0f | %.2f× | %.2f | %.2f | %.0f | %.0f | %d = %d | %d |\n", sizeName(s.Size), n, s.Name,
			s.PagesPerCPUSec(), s.FloorPagesPerCPUSec(), s.PagesPerCPUSec()/max(s.FloorPagesPerCPUSec(), 1e-9),
			s.CPUUtil(), s.FloorCPUUtil(), s.PagesPerSec(), s.FloorPagesPerSec(), s.Floor.StepRows, s.Floor.Rows, s.Floor.MaxRSS>>20)
	}
}

// Markdown renders the table and the targets.
func (r *Report) Markdown() string {
	var b strings.Builder
	o := r.Options
	fmt.Fprintf(&b, "# pillar bench scale\n\nEvery step a child process at `--memory-limit %s`; chunker `%s`, model `%s`, %d partitions, %.1f%% of the pages edited in the incremental round. Started %s.\n\n",
		o.MemoryLimit, o.Chunker, o.Model, o.Partitions, 100*o.EditFraction, r.Started.Format("2006-01-02 15:04 UTC"))
	b.WriteString("Machine load before each round: " + strings.Join(r.Load, "; ") + ".\n\n")
	b.WriteString("Per step: wall seconds and pages/s (the targets), the child's CPU seconds (user + system) and pages per CPU-second, and the 1-minute load average at its start and end.\n\n")
	b.WriteString("| pages | N | round | step | pages | seconds | pages/s | CPU s | pages/CPU-s | load | peak RSS MB | peak live heap MB | store bytes written | I/O written |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range r.Steps {
		live, cpu, perCPU, load := "–", "–", "–", "–"
		if s.LiveHeap > 0 {
			live = fmt.Sprint(s.LiveHeap >> 20)
		}
		if s.CPUSeconds > 0 {
			cpu, perCPU = fmt.Sprintf("%.1f", s.CPUSeconds), fmt.Sprintf("%.0f", s.PagesPerCPUSec())
		}
		if s.LoadBefore > 0 || s.LoadAfter > 0 {
			load = fmt.Sprintf("%.1f→%.1f", s.LoadBefore, s.LoadAfter)
		}
		n := fmt.Sprint(s.N)
		if s.Repeat > 0 {
			n += fmt.Sprintf(" (repeat %d)", s.Repeat)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %d | %.1f | %.0f | %s | %s | %s | %d | %s | %s | %s |\n", sizeName(s.Size), n, s.Round, s.Name, s.Pages, s.Seconds, s.PagesPerSec(), cpu, perCPU, load, s.MaxRSS>>20, live, human(s.StoreBytes), human(s.IOBytes))
	}
	r.floorTable(&b)
	b.WriteString("\n| target | measured | holds |\n|---|---|---|\n")
	for _, c := range r.Checks {
		mark := "yes"
		if !c.Pass {
			mark = "**no**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", c.Target, c.Value, mark)
	}
	return b.String()
}

// Write saves results.md, results.json and the plots (rss-<size>.png,
// rate-<size>.png, cpurate-<size>.png, bytes-<size>.png) under dir; the
// plots show the first round of each N.
func (r *Report) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("scalebench: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(r.Markdown()), 0o644); err != nil {
		return fmt.Errorf("scalebench: %w", err)
	}
	js, err := json.MarshalIndent(savedReport{r.Options.MemoryLimit, r.Options.Chunker, r.Options.Model, r.Options.Partitions,
		r.Options.EditFraction, r.Started, r.Steps, r.Load, r.Checks, r.BigN}, "", "  ")
	if err != nil {
		return fmt.Errorf("scalebench: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), js, 0o644); err != nil {
		return fmt.Errorf("scalebench: %w", err)
	}
	for _, size := range r.Options.Sizes {
		if len(r.ns(size)) == 0 {
			continue
		}
		for _, m := range []struct {
			file, title, y string
			val            func(Step) float64
		}{
			{"rss", "peak RSS per step", "MB", func(s Step) float64 { return float64(s.MaxRSS) / (1 << 20) }},
			{"rate", "pages per second per step", "pages/s", Step.PagesPerSec},
			{"cpurate", "pages per CPU-second per step", "pages per CPU-second", Step.PagesPerCPUSec},
			{"bytes", "store bytes written per step", "MB", func(s Step) float64 { return float64(s.StoreBytes) / (1 << 20) }},
		} {
			if err := r.plot(filepath.Join(dir, fmt.Sprintf("%s-%s.png", m.file, sizeName(size))), size, m.title, m.y, m.val); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *Report) plot(path string, size int, title, ylabel string, val func(Step) float64) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s (%s pages, --memory-limit %s)", title, sizeName(size), r.Options.MemoryLimit)
	p.X.Label.Text = "N (pages in the corpus)"
	p.Y.Label.Text = ylabel
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min = 0 // a flat line must look flat
	p.Legend.Top = false
	i := 0
	for _, round := range []string{"full", "incremental"} {
		for _, name := range r.stepNames(round) {
			var pts plotter.XYs
			for _, n := range r.ns(size) {
				if s := r.find(size, n, round, name); s != nil {
					pts = append(pts, plotter.XY{X: float64(n), Y: val(*s)})
				}
			}
			if len(pts) == 0 {
				continue
			}
			l, sc, err := plotter.NewLinePoints(pts)
			if err != nil {
				return fmt.Errorf("scalebench: plot: %w", err)
			}
			l.Color, sc.Color = plotutil.Color(i), plotutil.Color(i)
			if round == "incremental" {
				l.Dashes = plotutil.Dashes(1)
			}
			p.Add(l, sc)
			p.Legend.Add(round+" "+name, l, sc)
			i++
		}
	}
	if err := p.Save(9*vg.Inch, 5.5*vg.Inch, path); err != nil {
		return fmt.Errorf("scalebench: plot %s: %w", path, err)
	}
	return nil
}

// Reevaluate recomputes the checks after steps were added (e.g. a --big run
// appended to the report).
func (r *Report) Reevaluate() { r.evaluate() }

// savedReport is results.json.
type savedReport struct {
	MemoryLimit  string
	Chunker      string
	Model        string
	Partitions   int
	EditFraction float64
	Started      time.Time
	Steps        []Step
	Load         []string
	Checks       []Check
	BigN         int `json:",omitempty"`
}

// Load reads results.json files written by Write (to redraw them, e.g.
// after a change of the plots, or to merge a --big-only run with the main
// one, or runs of one N each: steps and loads are appended in order, and a
// size and N that an earlier file holds counts as a repeat of its round);
// the checks are evaluated again.
func Load(paths ...string) (*Report, error) {
	var r *Report
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("scalebench: %w", err)
		}
		var sr savedReport
		if err := json.Unmarshal(b, &sr); err != nil {
			return nil, fmt.Errorf("scalebench: %s: %w", path, err)
		}
		if r == nil {
			r = &Report{Started: sr.Started, Options: Options{MemoryLimit: sr.MemoryLimit,
				Chunker: sr.Chunker, Model: sr.Model, Partitions: sr.Partitions, EditFraction: sr.EditFraction}}
		} else if sr.MemoryLimit != r.Options.MemoryLimit || sr.Chunker != r.Options.Chunker || sr.Model != r.Options.Model ||
			sr.Partitions != r.Options.Partitions || sr.EditFraction != r.Options.EditFraction {
			return nil, fmt.Errorf("scalebench: %s: ran with other settings than %s (memory limit, chunker, model, partitions or edit fraction): not merged", path, paths[0])
		}
		// A size and N that an earlier file already holds is a repeat
		// of that round: number its rounds after the ones merged so far.
		offset := map[[2]int]int{}
		for _, s := range sr.Steps {
			k := [2]int{s.Size, s.N}
			if _, ok := offset[k]; !ok {
				offset[k] = r.rounds(s.Size, s.N)
			}
		}
		for _, s := range sr.Steps {
			s.Repeat += offset[[2]int{s.Size, s.N}]
			r.Steps = append(r.Steps, s)
		}
		for _, l := range sr.Load {
			for k, off := range offset {
				if prefix := fmt.Sprintf("%s, N=%d: ", sizeName(k[0]), k[1]); off > 0 && strings.HasPrefix(l, prefix) {
					l = fmt.Sprintf("%s, N=%d (repeat %d): %s", sizeName(k[0]), k[1], off, l[len(prefix):])
				}
			}
			r.Load = append(r.Load, l)
		}
		r.BigN = max(r.BigN, sr.BigN)
		for _, s := range sr.Steps {
			if !slices.Contains(r.Options.Sizes, s.Size) {
				r.Options.Sizes = append(r.Options.Sizes, s.Size)
			}
		}
	}
	if r == nil {
		return nil, fmt.Errorf("scalebench: no results.json to load")
	}
	r.evaluate()
	return r, nil
}
