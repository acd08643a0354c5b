package lorrybench

import (
	"context"
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Markdown renders the result as a report.
func (r *Result) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Lorry priority lanes\n\n")
	fmt.Fprintf(&b, "Options: %v\n\nLoad: %s\n\n", optionsLine(r.Options), r.LoadAvg)
	fmt.Fprintf(&b, "| phase | bulk records | bulk s (applied on 3) | bulk records/s | bulk MB/s | fresh updates | fresh p50 / p90 / p99 / max (ms) | fresh → registered p99 (ms) | batches (fresh / bulk) | fresh records riding bulk batches | riding batches demoted | bulk batch flight (ms) | retries | lost |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, ph := range []*Phase{r.Baseline, r.Mixed, r.InOrder} {
		if ph == nil {
			continue
		}
		fmt.Fprintf(&b, "| %s | %d | %.1f | %.0f | %.1f | %d | %.0f / %.0f / %.0f / %.0f | %.0f | %d (%d / %d) | %d | %d | %.0f | %d | %d |\n",
			ph.Name, ph.BulkRecords, ph.BulkSeconds, ph.BulkPerSecond, ph.BulkMBPerSec, ph.FreshUpdates,
			ph.FreshP50MS, ph.FreshP90MS, ph.FreshP99MS, ph.FreshMaxMS, ph.FreshRegP99MS, ph.Batches, ph.FreshBatches, ph.BulkBatches, ph.FreshRode,
			ph.Demoted, ph.FlightMS, ph.Retries, ph.Lost)
	}
	if m := r.Mixed; m != nil {
		if l, ok := m.LorryLatency["fresh"]; ok {
			fmt.Fprintf(&b, "\nLorry's own view of the mixed phase (its last %d fresh records): registered p99 %d ms, applied on every replica p50 %d / p99 %d ms.\n",
				l.Samples, l.RegisteredP99, l.AppliedP50, l.AppliedP99)
		}
	}
	writeTargets(&b, r.Targets)
	fmt.Fprintf(&b, "\n![latency by priority over time](latency.png)\n")
	return b.String()
}

func optionsLine(o map[string]any) string {
	var ks []string
	for k := range o {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var parts []string
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%s=%v", k, o[k]))
	}
	return strings.Join(parts, ", ")
}

// Write puts results.md, results.json and latency.png into dir.
func (r *Result) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(r.Markdown()), 0o644); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(raw, '\n'), 0o644); err != nil {
		return err
	}
	return r.Plot(filepath.Join(dir, "latency.png"))
}

// Plot draws, for the mixed phase, each record's latency (commit → applied
// on all three replicas) at the time it was applied, by priority.
func (r *Result) Plot(path string) error {
	p := plot.New()
	p.Title.Text = "Lorry: latency to all 3 replicas by priority, while the bulk backlog drains"
	p.X.Label.Text = "time since Lorry started (s)"
	p.Y.Label.Text = "enqueue → applied on all replicas (s, log)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	if r.Mixed == nil {
		return fmt.Errorf("lorrybench: plot: no mixed phase")
	}
	series := []struct {
		name  string
		fresh bool
		col   color.Color
		shape draw.GlyphDrawer
	}{
		{"bulk (republish backlog)", false, color.RGBA{R: 0x99, G: 0x99, B: 0x99, A: 0xff}, draw.CircleGlyph{}},
		{"fresh (crawl updates)", true, color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, draw.CrossGlyph{}},
	}
	for _, s := range series {
		var pts plotter.XYs
		for _, pt := range r.Mixed.points {
			if pt.fresh == s.fresh {
				pts = append(pts, plotter.XY{X: pt.at, Y: math.Max(pt.lat, 0.01)})
			}
		}
		if len(pts) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return fmt.Errorf("lorrybench: plot: %w", err)
		}
		sc.GlyphStyle.Color, sc.GlyphStyle.Shape, sc.GlyphStyle.Radius = s.col, s.shape, vg.Points(1.5)
		p.Add(sc)
		p.Legend.Add(s.name, sc)
	}
	target, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 5}, {X: r.Mixed.BulkSeconds, Y: 5}})
	if err == nil {
		target.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		p.Add(target)
		p.Legend.Add("fresh p99 target (5 s)", target)
	}
	if err := p.Save(9*vg.Inch, 5.5*vg.Inch, path); err != nil {
		return fmt.Errorf("lorrybench: plot %s: %w", path, err)
	}
	return nil
}

// Series is repeated runs of one setup: every run is reported (not the
// best), and a target is met only if every run met it.
type Series struct {
	Runs    []*Result `json:"runs"`
	Targets []Target  `json:"targets"`
}

// RunSeries runs the benchmark n times, each on a cluster of its own
// (under Dir/run-<i> when Dir is set).
func RunSeries(ctx context.Context, o Options, n int) (*Series, error) {
	if n < 1 {
		return nil, fmt.Errorf("lorrybench: runs %d must be at least 1", n)
	}
	s := &Series{}
	for i := 1; i <= n; i++ {
		oi := o
		if o.Dir != "" && n > 1 {
			oi.Dir = filepath.Join(o.Dir, fmt.Sprintf("run-%d", i))
			if err := os.MkdirAll(oi.Dir, 0o755); err != nil {
				return nil, err
			}
		}
		if n > 1 && o.Progress != nil {
			fmt.Fprintf(o.Progress, "lorry bench: run %d of %d\n", i, n)
		}
		r, err := Run(ctx, oi)
		if err != nil {
			return nil, fmt.Errorf("lorrybench: run %d of %d: %w", i, n, err)
		}
		if o.Dir != "" && n > 1 {
			os.RemoveAll(oi.Dir) // each run's data is large; the results stay
		}
		s.Runs = append(s.Runs, r)
	}
	s.evaluate()
	return s, nil
}

func (s *Series) evaluate() {
	s.Targets = nil
	for i, t := range s.Runs[0].Targets {
		all := Target{What: t.What, Want: t.Want, Met: true}
		var got []string
		for j, r := range s.Runs {
			if i >= len(r.Targets) {
				continue
			}
			rt := r.Targets[i]
			all.Met = all.Met && rt.Met
			if len(s.Runs) > 1 {
				got = append(got, fmt.Sprintf("run %d: %s", j+1, rt.Got))
			} else {
				got = append(got, rt.Got)
			}
		}
		all.Got = strings.Join(got, "; ")
		s.Targets = append(s.Targets, all)
	}
}

// Missed returns the targets some run did not meet.
func (s *Series) Missed() []Target {
	var out []Target
	for _, t := range s.Targets {
		if !t.Met {
			out = append(out, t)
		}
	}
	return out
}

// Markdown renders every run and the targets over all of them.
func (s *Series) Markdown() string {
	if len(s.Runs) == 1 {
		return s.Runs[0].Markdown()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Lorry priority lanes: %d runs\n\n", len(s.Runs))
	fmt.Fprintf(&b, "Options: %v\n\n", optionsLine(s.Runs[0].Options))
	fmt.Fprintf(&b, "| run | load (before → after) | bulk records/s alone / with fresh | ratio | fresh p50 / p99 / max (ms) | fresh → registered p99 (ms) | mixed: batches fresh / bulk (riders, demoted) | lost | targets met |\n|---|---|---|---|---|---|---|---|---|\n")
	for i, r := range s.Runs {
		m := r.Mixed
		base := 0.0
		if r.Baseline != nil {
			base = r.Baseline.BulkPerSecond
		}
		lost := m.Lost
		if r.Baseline != nil {
			lost += r.Baseline.Lost
		}
		fmt.Fprintf(&b, "| %d | %s | %.0f / %.0f | %.2f | %.0f / %.0f / %.0f | %.0f | %d / %d (%d, %d) | %d | %d of %d |\n", i+1, r.LoadAvg, base, m.BulkPerSecond, r.Ratio,
			m.FreshP50MS, m.FreshP99MS, m.FreshMaxMS, m.FreshRegP99MS, m.FreshBatches, m.BulkBatches, m.FreshRode, m.Demoted, lost, len(r.Targets)-len(r.Missed()), len(r.Targets))
	}
	fmt.Fprintf(&b, "\nEach run's report and plot: run-<n>/results.md, run-<n>/latency.png.\n")
	writeTargets(&b, s.Targets)
	return b.String()
}

// Write puts results.md and results.json into dir, and each run's report
// and plot into dir/run-<n> (directly into dir for a single run).
func (s *Series) Write(dir string) error {
	if len(s.Runs) == 1 {
		return s.Runs[0].Write(dir)
	}
	for i, r := range s.Runs {
		if err := r.Write(filepath.Join(dir, fmt.Sprintf("run-%d", i+1))); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(s.Markdown()), 0o644); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.json"), append(raw, '\n'), 0o644)
}

func writeTargets(b *strings.Builder, ts []Target) {
	fmt.Fprintf(b, "\n| target | want | got | met |\n|---|---|---|---|\n")
	for _, t := range ts {
		met := "met"
		if !t.Met {
			met = "**missed**"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", t.What, t.Want, t.Got, met)
	}
}
