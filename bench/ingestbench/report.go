package ingestbench

import (
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// evaluate checks the targets against the results. A target of a
// mode that ran but whose measurement is missing (a scenario with no reads,
// no idle windows, no reference reads, no floor run, no delta batch) is
// missed, never skipped: a run that exercised nothing cannot pass.
func (r *Report) evaluate() {
	add := func(target, value string, pass bool) { r.Checks = append(r.Checks, Check{target, value, pass}) }
	ran := func(mode string) bool { return slices.Contains(r.Options.Modes, mode) }
	if ran(Paced) {
		for _, s := range []string{Snapshot, Deltas, Both} {
			target := fmt.Sprintf("paced (adaptive) %s: read p99 ≤ 1.25 × idle p99 (idle windows before and after)", s)
			if x := r.Result(Paced, s); x != nil && x.Idle != nil {
				add(target, fmt.Sprintf("%s vs %s (%.2f×)", ms(x.P99), ms(x.Idle.P99), ratio(x.P99, x.Idle.P99)), float64(x.P99) <= 1.25*float64(x.Idle.P99))
			} else {
				add(target, "not measured: no result or no idle windows", false)
			}
		}
		if r.Reference {
			for _, s := range []string{Snapshot, Deltas, Both} {
				target := fmt.Sprintf("paced (adaptive) %s: read p99 ≤ 1.25 × the idle reference node's p99 (same moments)", s)
				if x := r.Result(Paced, s); x != nil && x.RefReads > 0 {
					add(target, fmt.Sprintf("%s vs %s (%.2f×)", ms(x.P99), ms(x.RefP99), ratio(x.P99, x.RefP99)), float64(x.P99) <= 1.25*float64(x.RefP99))
				} else {
					add(target, "not measured: no reads of the reference node", false)
				}
			}
		}
	}
	if ran(Unpaced) {
		target := "snapshot ingest, pacing off: MB/s ≥ 0.8 × bare IngestExternalFile loop (mean of the runs before and after)"
		if a, f := r.Result(Unpaced, Snapshot), r.FloorMBps(); a != nil && f > 0 {
			add(target, fmt.Sprintf("%.1f vs %.1f MB/s (%.2f×)", a.MBps, f, a.MBps/f), a.MBps >= 0.8*f)
		} else {
			add(target, "not measured: no snapshot result or no floor run", false)
		}
	}
	for _, mode := range []string{Unpaced, Paced} {
		if !ran(mode) {
			continue
		}
		for _, s := range []string{Deltas, Both} {
			target := fmt.Sprintf("%s %s: deltas visible ≤ 1 s (p99) at ≥ 1,000 updates/s offered", mode, s)
			x := r.Result(mode, s)
			if x == nil || x.DeltaBatches == 0 {
				add(target, "not measured: no delta batch applied", false)
				continue
			}
			add(target, fmt.Sprintf("p99 %s, max %s; %.0f updates/s offered, %.0f delivered", ms(x.VisibleP99), ms(x.VisibleMax), x.OfferedPerSec, x.UpdatesPerSec),
				x.VisibleP99 <= time.Second && x.OfferedPerSec >= 1000)
		}
	}
}

// FloorMBps is the mean MB/s of the floor runs (0 when none ran).
func (r *Report) FloorMBps() float64 {
	var sum float64
	var n int
	for _, x := range r.Results {
		if x.Scenario == Floor {
			sum += x.MBps
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return math.Inf(1)
	}
	return float64(a) / float64(b)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }

func msn(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/1e6) }

func rate(r int64) string {
	if r == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", float64(r)/1e6)
}

// Markdown returns the setup, the table and the targets.
func (r *Report) Markdown() string {
	o := r.Options
	var b strings.Builder
	fmt.Fprintf(&b, "# pillar bench ingest\n\n")
	fmt.Fprintf(&b, "One cobbled node on 127.0.0.1, %d partitions, %d read keys (values %d B–%d KiB), %d MiB block cache; steady read load %d × %d-key BatchGet/s over gRPC (open loop, every value checked). "+
		"(a) a %.2f GiB snapshot for partition %d; (b) %d updates/s as one delta batch per partition every %v on partitions 1–%d, for %v; (c) both. Idle windows %v; each \"during\" window runs to %v after the ingest ends. "+
		"Node: IngestConcurrency %d, SnapshotConcurrency 1. Paced mode: the node's adaptive pacer with target %s × its own idle p99 (floor %.0f MB/s, %s while judged by an ambient p99); compaction: %s. GOMAXPROCS %d, load average %s before, %s after; run took %s, started %s.\n\n",
		o.Partitions, o.Keys, o.MinValue, o.MaxValue>>10, o.CacheBytes>>20, o.ReadRate, o.BatchKeys,
		float64(o.SnapshotBytes)/(1<<30), o.SnapshotPartition, o.UpdatesPerSec, o.DeltaInterval, o.DeltaPartitions, o.Phase, o.Phase, o.Settle,
		o.IngestConcurrency, targetDesc(o), float64(o.MinRate)/1e6, ambientDesc(o), bgDesc(o), runtime.GOMAXPROCS(0), r.LoadAvg[0], r.LoadAvg[1], r.Elapsed.Round(time.Second), r.Started.UTC().Format(time.RFC3339))
	if r.Reference {
		fmt.Fprintf(&b, "A reference node in its own process holds the same data and ingests nothing; every batch is also sent to it (the order alternates), so its latencies are taken at the same moments as the measured node's; \"ref\" columns are its reads in the same window.\n\n")
	}
	fmt.Fprintf(&b, "| mode | scenario | reads | p50 | p99 | p99.9 | idle before+after p50 / p99 / p99.9 | p99 ratio | ref p50 / p99 (same moments) | p99 / ref p99 | ingest MB/s | visible | updates/s offered / delivered | download / delta apply mean (ms) | throttle waits (time) | lowest adaptive MB/s | max pending compaction MB | max L0 files | block cache hits: all / data | warmed MB: deltas / compactions | CPU cores: process (RocksDB threads) / machine (kernel threads) | stalled: CPU some / I/O some / full | Go sched wait p99 (ms) | Go GC: cycles / cores / max pause (ms) | DB mutex wait (ms) |\n")
	fmt.Fprintf(&b, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.Results {
		if x.Scenario == Idle && x.RefReads == 0 {
			continue
		}
		idle, ratioS := "–", "–"
		if x.Idle != nil {
			idle = fmt.Sprintf("%s / %s / %s", msn(x.Idle.P50), msn(x.Idle.P99), msn(x.Idle.P999))
			ratioS = fmt.Sprintf("%.2f×", ratio(x.P99, x.Idle.P99))
		}
		var vis []string
		if x.SnapshotVisible > 0 {
			vis = append(vis, fmt.Sprintf("snapshot %.2f s", x.SnapshotVisible.Seconds()))
		}
		if x.DeltaBatches > 0 {
			vis = append(vis, fmt.Sprintf("deltas p50 %s / p99 %s / max %s", msn(x.VisibleP50), msn(x.VisibleP99), msn(x.VisibleMax)))
		}
		if len(vis) == 0 {
			vis = []string{"–"}
		}
		ups := "–"
		if x.DeltaBatches > 0 {
			ups = fmt.Sprintf("%.0f / %.0f", x.OfferedPerSec, x.UpdatesPerSec)
		}
		errs := ""
		if x.Errors > 0 {
			errs = fmt.Sprintf(" (%d failed)", x.Errors)
		}
		refS, refRatio := "–", "–"
		if x.RefReads > 0 {
			refS = fmt.Sprintf("%s / %s", msn(x.RefP50), msn(x.RefP99))
			refRatio = fmt.Sprintf("%.2f×", ratio(x.P99, x.RefP99))
		}
		fmt.Fprintf(&b, "| %s | %s | %d%s | %s | %s | %s | %s | %s | %s | %s | %.1f | %s | %s | %s / %s | %d (%.1f s) | %s | %.0f | %d | %.1f%% / %.1f%% | %.0f / %.0f | %.2f (%.2f) / %.2f (%.2f) | %.0f%% / %.0f%% / %.0f%% | %s | %d / %.2f / %s | %s |\n", x.Mode, x.Scenario, x.Reads, errs,
			msn(x.P50), msn(x.P99), msn(x.P999), idle, ratioS, refS, refRatio, x.MBps, strings.Join(vis, "; "), ups, msn(x.DownloadMean), msn(x.DeltaApplyMean),
			x.ThrottleWaits, x.ThrottleWaited.Seconds(), rate(x.MinAdaptiveRate), float64(x.MaxPendingCompaction)/1e6, x.MaxL0,
			100*x.CacheHitRatio, 100*x.DataHitRatio, float64(x.Warmed.Bytes)/1e6, float64(x.Warmed.CompactionBytes)/1e6, x.CPU, x.RocksCPU, x.MachineCPU, x.KernelCPU, 100*x.CPUSome, 100*x.IOSome, 100*x.IOFull, msn(x.SchedP99), x.GCCycles, x.GCCores, msn(x.GCMaxPause), dbMutex(o, x.DBMutexWait))
	}
	fmt.Fprintf(&b, "\nLatencies in ms, client-side (gRPC round trip). Visible: from handing the batch to the node (Node.Apply) to a BatchGet finding its data, so download, pacing and queueing behind the partition's previous batch count. "+
		"The floor is a bare IngestExternalFile loop copying the same snapshot files from the object store into a fresh database, under the same read load. "+
		"In (c) ingest MB/s is the snapshot's; the deltas' rate is the updates/s column. "+
		"Block cache hits: the node's hits ÷ lookups in the window. CPU: cores busy over the window in this process (the node, its RocksDB threads, the delta producer; "+
		"the reader and the reference node are processes of their own), in its RocksDB background threads alone, and on the whole machine (%d CPUs), of which in kernel threads (writeback, journal, kworkers). Stalled: the machine's pressure-stall time over the window (/proc/pressure): some task waiting for a CPU; some, and every, task waiting for I/O. Go sched wait: p99 of the time this process's goroutines waited runnable for a P (runtime/metrics /sched/latencies:seconds). Go GC: this process's collector in the window: cycles, cores busy with it (mark workers, assists, pauses), longest stop-the-world pause (runtime/metrics). DB mutex wait: the time the node's threads (readers, ingest, compaction) waited for its databases' DB mutexes in the window (--time-db-mutex; – without).\n", runtime.NumCPU())
	if len(r.Checks) > 0 {
		fmt.Fprintf(&b, "\n| target | measured | met |\n|---|---|---|\n")
		for _, c := range r.Checks {
			fmt.Fprintf(&b, "| %s | %s | %s |\n", c.Target, c.Value, map[bool]string{true: "yes", false: "**no**"}[c.Pass])
		}
	}
	if n := r.IdleNoise(); n != "" {
		fmt.Fprintf(&b, "\n%s\n", n)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\nNote: %s\n", n)
	}
	return b.String()
}

// IdleNoise describes the measurement's own spread in this run: in the
// idle windows neither node ingests, so the node's p99 over the
// reference's p99 there is what the "same moments" ratio reads with no
// ingest at all, and the idle windows' p99s are what the "idle windows"
// ratio is taken against. A target's 1.25× is only as sharp as these
// (2026-12-04: 3 of 80 idle windows read over 1.25× the reference). ""
// without idle windows.
func (r *Report) IdleNoise() string {
	var p99s []time.Duration
	var refRatios []float64
	for _, x := range r.Results {
		if x.Scenario != Idle || x.Reads == 0 {
			continue
		}
		p99s = append(p99s, x.P99)
		if x.RefReads > 0 && x.RefP99 > 0 {
			refRatios = append(refRatios, ratio(x.P99, x.RefP99))
		}
	}
	if len(p99s) == 0 {
		return ""
	}
	slices.Sort(p99s)
	s := fmt.Sprintf("Measurement noise in this run: the %d idle windows' own p99 ranged %s–%s ms (median %s)", len(p99s), msn(p99s[0]), msn(p99s[len(p99s)-1]), msn(pct(p99s, 0.5)))
	if len(refRatios) > 0 {
		slices.Sort(refRatios)
		over := 0
		for _, v := range refRatios {
			if v > 1.25 {
				over++
			}
		}
		s += fmt.Sprintf("; in them, with neither node ingesting, the node's p99 ÷ the reference's ranged %.2f–%.2f× (median %.2f×), %d of %d over 1.25×", refRatios[0], refRatios[len(refRatios)-1], refRatios[len(refRatios)/2], over, len(refRatios))
	}
	return s + "."
}

func dbMutex(o Options, d time.Duration) string {
	if !o.Background.TimeDBMutex {
		return "–"
	}
	return msn(d)
}

func targetDesc(o Options) string {
	if o.Target > 0 {
		return o.Target.String() + " (fixed)"
	}
	return fmt.Sprintf("%.2f", o.TargetRatio)
}

func bgDesc(o Options) string {
	s := "threads at nice 19 / idle I/O class"
	if o.Background.NormalPriority {
		s = "threads at normal priority"
	}
	if o.Background.L0CompactionTrigger > 0 {
		s += fmt.Sprintf(", L0 compaction trigger %d files", o.Background.L0CompactionTrigger)
	}
	if o.Background.CompactionRate > 0 {
		s += fmt.Sprintf(", rate-limited to %.0f MB/s", float64(o.Background.CompactionRate)/1e6)
	} else {
		s += ", no rate limit"
	}
	if o.Background.NoWarm {
		return s + "; new delta files and compaction outputs left cold in the block cache"
	}
	return s + "; delta files and compaction outputs read into the block cache before they serve"
}

// Write writes results.md, results.json and latency-timeline.png into dir.
func (r *Report) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("ingestbench: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(r.Markdown()), 0o644); err != nil {
		return fmt.Errorf("ingestbench: %w", err)
	}
	type jsonResult struct {
		*Result
		IdleP99ms, P50ms, P99ms, P999ms, RefP99ms float64
	}
	out := struct {
		Options  map[string]any
		LoadAvg  [2]string
		Elapsed  string
		Results  []jsonResult
		Checks   []Check
		Notes    []string
		Timeline []Span
	}{Options: optionsJSON(r.Options), LoadAvg: r.LoadAvg, Elapsed: r.Elapsed.String(), Checks: r.Checks, Notes: r.Notes, Timeline: r.Spans}
	for _, x := range r.Results {
		j := jsonResult{Result: x, P50ms: msf(x.P50), P99ms: msf(x.P99), P999ms: msf(x.P999), RefP99ms: msf(x.RefP99)}
		if x.Idle != nil {
			j.IdleP99ms = msf(x.Idle.P99)
		}
		out.Results = append(out.Results, j)
	}
	js, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return fmt.Errorf("ingestbench: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), js, 0o644); err != nil {
		return fmt.Errorf("ingestbench: %w", err)
	}
	if err := r.writeCSV(dir); err != nil {
		return err
	}
	return r.Plot(filepath.Join(dir, "latency-timeline.png"))
}

// writeCSV writes every read (reads.csv: start since the load began, node
// "node" or "ref", latency, failed) and the pacer's trace (pacer.csv), for
// looking at what the plot and the table summarise.
func (r *Report) writeCSV(dir string) error {
	var b strings.Builder
	b.WriteString("at_ms,node,latency_ms,failed\n")
	for i, tl := range [][]Sample{r.Timeline, r.RefTimeline} {
		name := [2]string{"node", "ref"}[i]
		for _, s := range tl {
			fmt.Fprintf(&b, "%.3f,%s,%.3f,%t\n", msf(s.At), name, msf(s.Latency), s.Failed)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "reads.csv"), []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("ingestbench: %w", err)
	}
	b.Reset()
	b.WriteString("at_ms,adaptive_mbps,window_p99_ms,target_ms,ambient_ms\n")
	for _, s := range r.PacerTrace {
		fmt.Fprintf(&b, "%.0f,%.1f,%.3f,%.3f,%.3f\n", msf(s.At), float64(s.AdaptiveRate)/1e6, msf(s.ReadP99), msf(s.Target), msf(s.Ambient))
	}
	if err := os.WriteFile(filepath.Join(dir, "pacer.csv"), []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("ingestbench: %w", err)
	}
	return nil
}

func msf(d time.Duration) float64 { return float64(d) / 1e6 }

func optionsJSON(o Options) map[string]any {
	return map[string]any{"partitions": o.Partitions, "keys": o.Keys, "min_value": o.MinValue, "max_value": o.MaxValue,
		"cache_bytes": o.CacheBytes, "read_rate": o.ReadRate, "batch_keys": o.BatchKeys, "phase": o.Phase.String(), "settle": o.Settle.String(),
		"snapshot_bytes": o.SnapshotBytes, "snapshot_partition": o.SnapshotPartition, "delta_partitions": o.DeltaPartitions,
		"updates_per_sec": o.UpdatesPerSec, "delta_interval": o.DeltaInterval.String(), "modes": o.Modes, "target_ratio": o.TargetRatio,
		"target": o.Target.String(), "min_rate": o.MinRate, "reference": len(o.Reference) > 0, "ingest_concurrency": o.IngestConcurrency, "compaction_rate": o.Background.CompactionRate, "compaction_normal_priority": o.Background.NormalPriority, "l0_compaction_trigger": o.Background.L0CompactionTrigger}
}

// Plot draws read latency over the run: p50 and p99 per 500 ms, every
// read as a faint dot, and the ingest windows shaded and labelled.
func (r *Report) Plot(path string) error {
	p := plot.New()
	p.Title.Text = "BatchGet latency over time (12 keys); shaded: ingest windows"
	p.X.Label.Text = "seconds since the read load started"
	p.Y.Label.Text = "latency (ms, log)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())
	const bucket = 500 * time.Millisecond
	var end time.Duration
	for _, s := range r.Timeline {
		end = max(end, s.At)
	}
	nb := int(end/bucket) + 1
	per := make([][]time.Duration, nb)
	var dots plotter.XYs
	lo, hi := math.Inf(1), 0.0
	for i, s := range r.Timeline {
		per[int(s.At/bucket)] = append(per[int(s.At/bucket)], s.Latency)
		y := math.Max(msf(s.Latency), 0.01)
		lo, hi = math.Min(lo, y), math.Max(hi, y)
		if i%4 == 0 { // a quarter of the reads is enough to show the spread
			dots = append(dots, plotter.XY{X: s.At.Seconds(), Y: y})
		}
	}
	if len(r.Timeline) == 0 {
		lo, hi = 0.1, 10
	}
	for _, sp := range r.Spans {
		poly, err := plotter.NewPolygon(plotter.XYs{{X: sp.Start.Seconds(), Y: lo}, {X: sp.End.Seconds(), Y: lo}, {X: sp.End.Seconds(), Y: hi}, {X: sp.Start.Seconds(), Y: hi}})
		if err != nil {
			return fmt.Errorf("ingestbench: plot: %w", err)
		}
		poly.Color = spanColor(sp.Label)
		poly.LineStyle.Color = poly.Color
		poly.LineStyle.Width = 0
		p.Add(poly)
		lbl, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: sp.Start.Seconds(), Y: lo}}, Labels: []string{shortLabel(sp.Label)}})
		if err == nil {
			lbl.TextStyle[0].Rotation = math.Pi / 2
			lbl.TextStyle[0].XAlign = draw.XLeft
			lbl.TextStyle[0].Font.Size = vg.Points(7)
			p.Add(lbl)
		}
	}
	sc, err := plotter.NewScatter(dots)
	if err != nil {
		return fmt.Errorf("ingestbench: plot: %w", err)
	}
	sc.GlyphStyle.Radius = vg.Points(0.6)
	sc.GlyphStyle.Color = color.NRGBA{0x60, 0x60, 0x60, 0x70}
	p.Add(sc)
	refPer := make([][]time.Duration, nb)
	for _, s := range r.RefTimeline {
		if i := int(s.At / bucket); i < nb {
			refPer[i] = append(refPer[i], s.Latency)
		}
	}
	for _, q := range []struct {
		q   float64
		c   color.Color
		lbl string
		per [][]time.Duration
	}{{0.5, color.RGBA{0x1f, 0x77, 0xb4, 0xff}, "p50 per 500 ms", per}, {0.99, color.RGBA{0xd6, 0x27, 0x28, 0xff}, "p99 per 500 ms", per},
		{0.99, color.RGBA{0x40, 0x40, 0x40, 0xc0}, "reference node p99 per 500 ms (same moments)", refPer}} {
		var pts plotter.XYs
		for i, l := range q.per {
			if len(l) == 0 {
				continue
			}
			sorted := slices.Clone(l)
			slices.Sort(sorted)
			pts = append(pts, plotter.XY{X: (time.Duration(i)*bucket + bucket/2).Seconds(), Y: math.Max(msf(pct(sorted, q.q)), 0.01)})
		}
		if len(pts) == 0 {
			continue
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("ingestbench: plot: %w", err)
		}
		line.Color = q.c
		line.Width = vg.Points(1.2)
		p.Add(line)
		p.Legend.Add(q.lbl, line)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	if err := p.Save(14*vg.Inch, 6*vg.Inch, path); err != nil {
		return fmt.Errorf("ingestbench: plot %s: %w", path, err)
	}
	return nil
}

func spanColor(label string) color.Color {
	switch {
	case strings.HasPrefix(label, Paced):
		return color.NRGBA{0x2c, 0xa0, 0x2c, 0x38}
	case strings.HasSuffix(label, Floor):
		return color.NRGBA{0x80, 0x80, 0x80, 0x38}
	}
	return color.NRGBA{0xff, 0x7f, 0x0e, 0x38}
}

func shortLabel(l string) string {
	return strings.NewReplacer("unpaced ", "unpaced: ", "paced ", "paced: ").Replace(l)
}

// ambientDesc describes the paced mode's cap under an ambient p99.
func ambientDesc(o Options) string {
	switch {
	case o.AmbientMaxRate < 0:
		return "no cap"
	case o.AmbientMaxRate == 0:
		return fmt.Sprintf("at most %.0f MB/s", 4*float64(o.MinRate)/1e6)
	}
	return fmt.Sprintf("at most %.0f MB/s", float64(o.AmbientMaxRate)/1e6)
}
