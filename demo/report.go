package demo

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// writeReport writes demo-report.md and its PNG plots into dir.
func writeReport(dir string, r *Report) (string, error) {
	// Plots of what was measured: a failed run may have measured nothing
	// for some of them, and it gets only the plots it has data for.
	var plots []string
	if r.Reads.N()+r.ReadsDuring.N() > 0 {
		p, err := latencyPlot(dir, r)
		if err != nil {
			return "", err
		}
		plots = append(plots, p)
	}
	if p, err := lagPlot(dir, r); err == nil && p != "" {
		plots = append(plots, p)
	}
	if len(r.Stages) > 0 {
		p, err := stagePlot(dir, r)
		if err != nil {
			return "", err
		}
		plots = append(plots, p)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Pillar demo report\n\n%s, on %s.\n\n", time.Now().UTC().Format(time.RFC3339), r.Corpus)
	if r.Failure != "" {
		fmt.Fprintf(&b, "## FAILED\n\n%s\n\nThe numbers below are what the run measured up to the failure.\n\n", r.Failure)
	} else {
		fmt.Fprintf(&b, "**Passed**: every check below found something to check, and it held.\n\n")
	}
	fmt.Fprintf(&b, "## Data\n\n| what | value |\n|---|---|\n")
	fmt.Fprintf(&b, "| files / pages ingested / skipped | %d / %d (%.1f MB of HTML) / %d |\n", r.Ingest.Files, r.Pages, float64(r.HTMLBytes)/1e6, r.Ingest.Skipped())
	fmt.Fprintf(&b, "| chunks, v1 `%s` | %d |\n", r.Versions[0], r.Chunks)
	fmt.Fprintf(&b, "| chunks, v2 `%s` | %d |\n", r.Versions[1], r.ChunksV2)
	fmt.Fprintf(&b, "| pages exported (in an exported subset) | %d |\n", r.Exported)
	fmt.Fprintf(&b, "| prepared records (float16 vectors) | %.1f MB |\n", float64(r.RecordBytes)/1e6)
	fmt.Fprintf(&b, "| SST files / bytes, last bulk export | %d / %.1f MB |\n", r.SSTFiles, float64(r.SSTBytes)/1e6)
	fmt.Fprintf(&b, "| batches registered (snapshots + Lorry deltas) | %d + %d |\n", r.Batches, r.LorryBatches)
	fmt.Fprintf(&b, "\n## Ingest summary\n\n| outcome | files | kept | reason | examples |\n|---|---|---|---|---|\n")
	for _, o := range r.Ingest.Outcomes {
		fmt.Fprintf(&b, "| %s | %d | %v | %s | %s |\n", o.Outcome, o.Files, o.Kept, mdCell(o.Reason), mdCell(strings.Join(o.Examples, "; ")))
	}
	fmt.Fprintf(&b, "\n## Subsets (step 2)\n\n| subset | exported | pages |\n|---|---|---|\n")
	for _, s := range r.Subsets {
		fmt.Fprintf(&b, "| %s | %v | %d |\n", s.Name, s.Exported, s.Size)
	}
	fmt.Fprintf(&b, "\n## Stage timings\n\n| stage | time |\n|---|---|\n")
	var total time.Duration
	for _, s := range r.Stages {
		fmt.Fprintf(&b, "| %s | %s |\n", s.Name, s.Dur.Round(time.Millisecond))
		total += s.Dur
	}
	fmt.Fprintf(&b, "| **total** | %s |\n", total.Round(time.Millisecond))
	fmt.Fprintf(&b, "\n## Reads (12-key batches through the router, zone a)\n\n| phase | batches | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|\n")
	for _, ph := range []struct {
		name string
		l    *Latencies
	}{{"read-back of every page (step 4)", &r.Reads}, {"during the serving-versions cycle (step 5)", &r.ReadsDuring}} {
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s |\n", ph.name, ph.l.N(), ph.l.Quantile(0.5), ph.l.Quantile(0.9), ph.l.Quantile(0.99), ph.l.Quantile(1))
	}
	fmt.Fprintf(&b, "\nFailed reads during the serving-versions cycle: **%d**. Hedges sent: %d (won %d), failovers: %d.\n", r.FailedDuring, r.Hedges, r.HedgesWon, r.Failovers)
	v := r.Versions2
	fmt.Fprintf(&b, "\n## Serving versions (step 5)\n\nv1 `%s`, v2 `%s`. A reader ran through the whole cycle. Switch times run from the command's start (a `pillar` process) until every router read returns the other publication.\n\n| what | value |\n|---|---|\n", v.V1, v.V2)
	fmt.Fprintf(&b, "| publish v2 as candidate (`pillar publish --serve --wait`: export, build, register, every replica holds it) | %s |\n", r.ConvergeBulk2.Round(time.Millisecond))
	fmt.Fprintf(&b, "| candidate read by name: pages verified (chunk version v2) | %d |\n", v.CandidateVerified)
	fmt.Fprintf(&b, "| A/B router, candidate fraction %.2f: requests answered by v2 | %d of %d |\n", v.ABFraction, v.ABFromV2, v.ABReads)
	fmt.Fprintf(&b, "| **promote** (`pillar promote`) → every read on v2 | **%s** |\n", v.Promote.Round(time.Millisecond))
	fmt.Fprintf(&b, "| **rollback** (`pillar rollback --store --control`) → every read on v1 | **%s** (whole command incl. the store: %s) |\n", v.Rollback.Round(time.Millisecond), v.RollbackCommand.Round(time.Millisecond))
	fmt.Fprintf(&b, "| store side of the rollback | against its %s export state, %d records queued, no bulk rebuild |\n", v.RollbackState, v.RollbackQueued)
	fmt.Fprintf(&b, "| **roll forward** (`pillar rollback` again) → every read on v2 | **%s** |\n", v.RollForward.Round(time.Millisecond))
	fmt.Fprintf(&b, "| batches registered by rollback + roll-forward (no export, no SST build) | %d |\n", v.BatchesOnRollback)
	fmt.Fprintf(&b, "| reads during the cycle / failed / from a publication not live | %d / **%d** / %d |\n", v.ReadsDuring, v.FailedDuring, v.WrongVersionDuring)
	if len(v.Bytes) > 0 {
		fmt.Fprintf(&b, "\nDisk per replica after the cycle (each retained publication's databases on each node, as the nodes report them):\n\n| publication | node | MB |\n|---|---|---|\n")
		ids := make([]string, 0, len(v.Bytes))
		for id := range v.Bytes {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			nodes := make([]string, 0, len(v.Bytes[id]))
			for n := range v.Bytes[id] {
				nodes = append(nodes, n)
			}
			sort.Strings(nodes)
			for _, n := range nodes {
				fmt.Fprintf(&b, "| `%s` | %s | %.2f |\n", id, n, float64(v.Bytes[id][n])/1e6)
			}
		}
	}
	if v.Status != "" {
		fmt.Fprintf(&b, "\n`pillar status` after the cycle:\n\n```\n%s\n```\n", v.Status)
	}
	fmt.Fprintf(&b, "\n## Convergence\n\n| event | every replica caught up after |\n|---|---|\n")
	fmt.Fprintf(&b, "| bulk export 1 registered | %s |\n| v2 published as candidate (publish --serve --wait) | %s |\n| Lorry drain started (incremental) | %s |\n",
		r.ConvergeBulk1.Round(time.Millisecond), r.ConvergeBulk2.Round(time.Millisecond), r.ConvergeLorry.Round(time.Millisecond))
	in := r.Incremental
	fmt.Fprintf(&b, "\n## Incremental path (step 6)\n\n| what | value |\n|---|---|\n")
	fmt.Fprintf(&b, "| files of exported pages edited | %d: %s |\n", len(in.Edited), mdCell(strings.Join(in.Edited, ", ")))
	fmt.Fprintf(&b, "| changed pages ingest counted | %d |\n| puts the re-publish queued | %d |\n", in.ChangedPages, in.PublishPuts)
	fmt.Fprintf(&b, "| policy change | %d of the %d pages of exported subset `%s` out of every exported subset: %s |\n",
		len(in.Removed), in.SubsetSize, in.PolicySubset, mdCell(strings.Join(in.Removed, ", ")))
	fmt.Fprintf(&b, "| puts / deletes the policy change queued | %d / %d |\n", in.Puts, in.Deletes)
	fmt.Fprintf(&b, "| delta batches Lorry delivered | %d |\n", in.Batches)
	fmt.Fprintf(&b, "| records verified afterwards (edited pages with their new hash) | %d (%d) |\n", in.Verified, in.EditedRead)
	fmt.Fprintf(&b, "| removed pages confirmed gone | %d |\n", in.Gone)
	fmt.Fprintf(&b, "\n## Plots\n\n")
	for _, p := range plots {
		fmt.Fprintf(&b, "![%s](%s)\n\n", strings.TrimSuffix(p, ".png"), p)
	}
	path := filepath.Join(dir, "demo-report.md")
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}

// mdCell makes s safe inside a Markdown table cell.
func mdCell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", "\\|"), "\n", " ")
}

func save(p *plot.Plot, dir, name string) (string, error) {
	if err := p.Save(7*vg.Inch, 4*vg.Inch, filepath.Join(dir, name)); err != nil {
		return "", err
	}
	return name, nil
}

func latencyPlot(dir string, r *Report) (string, error) {
	p := plot.New()
	p.Title.Text = "Read latency CDF, 12-key batches through the router"
	p.X.Label.Text = "latency (ms, log scale)"
	p.Y.Label.Text = "fraction of batches at or below"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = false
	p.Legend.Left = false
	for i, ph := range []struct {
		name string
		l    *Latencies
	}{{"read-back of every page", &r.Reads}, {"during the serving-versions cycle", &r.ReadsDuring}} {
		d := ph.l.Samples()
		if len(d) == 0 {
			continue
		}
		sort.Slice(d, func(a, b int) bool { return d[a] < d[b] })
		step := max(1, len(d)/2000)
		var pts plotter.XYs
		for j := 0; j < len(d); j += step {
			pts = append(pts, plotter.XY{X: math.Max(float64(d[j].Microseconds())/1000, 0.01), Y: float64(j+1) / float64(len(d))})
		}
		pts = append(pts, plotter.XY{X: math.Max(float64(d[len(d)-1].Microseconds())/1000, 0.01), Y: 1})
		l, err := plotter.NewLine(pts)
		if err != nil {
			return "", err
		}
		l.LineStyle.Width = vg.Points(1.5)
		l.LineStyle.Color = plotutil.Color(i)
		p.Add(l)
		p.Legend.Add(ph.name, l)
	}
	return save(p, dir, "read-latency.png")
}

func lagPlot(dir string, r *Report) (string, error) {
	if len(r.Lag) == 0 {
		return "", nil
	}
	pts := make(plotter.XYs, len(r.Lag))
	for i, s := range r.Lag {
		pts[i].X = s.At.Seconds()
		pts[i].Y = float64(s.Behind)
	}
	p := plot.New()
	p.Title.Text = "Replica lag: batches not yet applied, all replicas"
	p.X.Label.Text = "time since the serving side started (s)"
	p.Y.Label.Text = "batches behind"
	l, err := plotter.NewLine(pts)
	if err != nil {
		return "", err
	}
	p.Add(l)
	return save(p, dir, "replica-lag.png")
}

func stagePlot(dir string, r *Report) (string, error) {
	var v plotter.Values
	var names []string
	for _, s := range r.Stages {
		v = append(v, s.Dur.Seconds())
		names = append(names, strings.SplitN(s.Name, " ", 2)[0])
	}
	p := plot.New()
	p.Title.Text = "Stage timings"
	p.Y.Label.Text = "seconds"
	bars, err := plotter.NewBarChart(v, vg.Points(30))
	if err != nil {
		return "", err
	}
	p.Add(bars)
	p.NominalX(names...)
	p.X.Label.Text = "step (see demo-report.md)"
	return save(p, dir, "stage-timings.png")
}
