package readbench

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
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// evaluate checks the targets against the results at hand.
func (r *Report) evaluate() {
	o := r.Options
	h, rd, sn, sh, k := r.Result(Healthy), r.Result(Redis), r.Result(SlowNoHedge), r.Result(SlowHedge), r.Result(Kill)
	add := func(target, value string, pass bool) { r.Checks = append(r.Checks, Check{target, value, pass}) }
	// A scenario that completed no request has zero latencies, which would
	// pass every "≤" target it takes part in: it is a missed check of its own.
	for _, x := range r.Results {
		if x.Requests == 0 {
			add(fmt.Sprintf("scenario %s completed requests", x.Scenario), fmt.Sprintf("none (%d errors): it measured nothing", x.Errors), false)
		}
	}
	slowID := fmt.Sprintf("node-%d", o.SlowNode)
	if h != nil && sh != nil {
		add("slow node, hedging: p99 ≤ 1.5 × healthy p99", fmt.Sprintf("%s vs %s (%.2f×); hedges sent after a mean %s (delay given %s), won ones answered in %s; node-%d p50 %s, p99 %s as the router saw it", ms(sh.P99), ms(h.P99), ratio(sh.P99, h.P99), ms(sh.HedgeWait), ms(sh.HedgeDelay), ms(sh.HedgeWon), o.SlowNode, ms(sh.NodeP50[slowID]), ms(sh.NodeP99[slowID])), float64(sh.P99) <= 1.5*float64(h.P99))
	}
	if h != nil && sh != nil {
		add("slow node, hedging: p99.9 ≤ 2 × healthy p99.9", fmt.Sprintf("%s vs %s (%.2f×)", ms(sh.P999), ms(h.P999), ratio(sh.P999, h.P999)), float64(sh.P999) <= 2*float64(h.P999))
	}
	if sh != nil {
		add("slow node, hedging: extra requests ≤ 5%", fmt.Sprintf("%.2f%% (hedges %d, won %d, denied %d, deferred %d, failovers %d, primaries %d)", 100*sh.ExtraRatio, sh.Hedges, sh.HedgesWon, sh.HedgesDenied, sh.HedgesDeferred, sh.Failovers, sh.Primaries), sh.ExtraRatio <= 0.05)
	}
	if sn != nil {
		add("slow node: the fault reaches ≥ 2% of requests", fmt.Sprintf("%.2f%% (%.0f%% of node-%d's sub-requests; it got %d of %d requests' sub-requests)", 100*sn.FaultReach, 100*o.SlowFraction, o.SlowNode, sn.NodeRPCs[fmt.Sprintf("node-%d", o.SlowNode)], sn.Requests), sn.FaultReach >= 0.02)
		add(fmt.Sprintf("slow node, no hedging: p99 ≥ %v", o.SlowDelay), ms(sn.P99), sn.P99 >= o.SlowDelay)
	}
	if d := r.Result(Degraded); h != nil && d != nil && d.P50After == 0 {
		add(fmt.Sprintf("degraded node (+%v on every request): p50 after 2 s ≤ 1.2 × healthy p50", o.DegradedDelay), "not measured: no request completed 2 s after the start (warm-up + run too short)", false)
	} else if h != nil && d != nil {
		add(fmt.Sprintf("degraded node (+%v on every request): p50 after 2 s ≤ 1.2 × healthy p50", o.DegradedDelay), fmt.Sprintf("%s vs %s (%.2f×); node-%d got %d of %d sub-requests, %d hedges",
			ms(d.P50After), ms(h.P50), ratio(d.P50After, h.P50), o.DegradedNode, d.NodeRPCs[fmt.Sprintf("node-%d", o.DegradedNode)], d.Primaries+d.Hedges+d.Failovers, d.Hedges), float64(d.P50After) <= 1.2*float64(h.P50))
	}
	if d, ref := r.Result(Degraded), r.Result(DegradedReference); d != nil && ref != nil {
		target := "degraded node: p50 after 2 s ≤ 1.2 × a router that never sees it (interleaved)"
		if d.P50After == 0 || ref.P50After == 0 {
			add(target, "not measured: no request completed 2 s after the start (warm-up + run too short)", false)
		} else {
			add(target, fmt.Sprintf("%s vs %s (%.2f×)", ms(d.P50After), ms(ref.P50After), ratio(d.P50After, ref.P50After)), float64(d.P50After) <= 1.2*float64(ref.P50After))
		}
	}
	if sr, sd := r.Result(SaturationRouter), r.Result(SaturationRedis); sr != nil && sd != nil {
		add(fmt.Sprintf("saturation (%d clients): router throughput ≥ 0.8 × Redis (MB/s)", o.SaturationClients), fmt.Sprintf("%.0f vs %.0f MB/s (%.2f×)", sr.MBps, sd.MBps, sr.MBps/sd.MBps), sr.MBps >= 0.8*sd.MBps)
	}
	if di, bi := r.Result(DirectInterleaved), r.Result(BareInterleaved); di != nil && bi != nil {
		add("node BatchGet p50 ≤ 1.1 × bare gRPC (raw codec, same MultiGet; interleaved)", fmt.Sprintf("%s vs %s (%.2f×)", ms(di.P50), ms(bi.P50), ratio(di.P50, bi.P50)), float64(di.P50) <= 1.1*float64(bi.P50))
		add("node BatchGet p99 ≤ 1.1 × bare gRPC (interleaved)", fmt.Sprintf("%s vs %s (%.2f×)", ms(di.P99), ms(bi.P99), ratio(di.P99, bi.P99)), float64(di.P99) <= 1.1*float64(bi.P99))
	}
	if k != nil {
		add("node killed: no failed requests beyond the deadline", fmt.Sprintf("%d failed of %d (%d by the %v deadline); recovery %s, worst after kill %s",
			k.Errors, k.Requests, k.DeadlineErrors, o.Deadline, ms(k.Recovery), ms(k.MaxAfterKill)), k.Errors == k.DeadlineErrors)
	}
	if h != nil && rd != nil {
		// Not a target: the router-vs-Redis targets are on the
		// interleaved rows; these two ran at different moments of a shared
		// machine (one 100 ms stall in either moves a p99). Reported as is.
		r.Notes = append(r.Notes, fmt.Sprintf("Separate runs (context, not a target; the targets use the interleaved rows, which see the same moments): healthy router p50 %s vs Redis MGET %s (%.2f×), p99 %s vs %s (%.2f×).",
			ms(h.P50), ms(rd.P50), ratio(h.P50, rd.P50), ms(h.P99), ms(rd.P99), ratio(h.P99, rd.P99)))
	}
	if hi, ri := r.Result(HealthyInterleaved), r.Result(RedisInterleaved); hi != nil && ri != nil {
		add("healthy router p50 ≤ 1.5 × Redis MGET p50 (interleaved)", fmt.Sprintf("%s vs %s (%.2f×)", ms(hi.P50), ms(ri.P50), ratio(hi.P50, ri.P50)), float64(hi.P50) <= 1.5*float64(ri.P50))
		add("healthy router p99 ≤ Redis MGET p99 (interleaved)", fmt.Sprintf("%s vs %s (%.2f×)", ms(hi.P99), ms(ri.P99), ratio(hi.P99, ri.P99)), hi.P99 <= ri.P99)
		if di, wi := r.Result(DirectInterleaved), r.Result(WireInterleaved); di != nil && wi != nil {
			r.Notes = append(r.Notes, fmt.Sprintf("Lean protocol (interleaved with direct/interleaved): straight to a node over wire p50 %s / p99 %s, %.2f× / %.2f× the same node over gRPC; %.2f× / %.2f× Redis MGET of the phase before.",
				ms(wi.P50), ms(wi.P99), ratio(wi.P50, di.P50), ratio(wi.P99, di.P99), ratio(wi.P50, ri.P50), ratio(wi.P99, ri.P99)))
		}
		who := "nodes, router, clients and Redis's client"
		if len(o.NodeExec) > 0 {
			who = "router, clients and Redis's client; the nodes' processes not counted"
		}
		r.Notes = append(r.Notes, fmt.Sprintf("Go GC during the interleaved router/Redis phase (this process: %s): %d cycles, %s of GC CPU in %s.",
			who, hi.GC.Cycles, hi.GC.CPU.Round(time.Millisecond), hi.Elapsed.Round(time.Millisecond)))
		if di := r.Result(DirectInterleaved); di != nil {
			r.Notes = append(r.Notes, fmt.Sprintf("Attribution (adjacent interleaved phases, not the same moments): straight to a node over gRPC without the router p50 %s / p99 %s; the router (over its own transport) is %.2f× at p50 and %.2f× at p99 of that; that floor is %.2f× / %.2f× Redis MGET.",
				ms(di.P50), ms(di.P99), ratio(hi.P50, di.P50), ratio(hi.P99, di.P99), ratio(di.P50, ri.P50), ratio(di.P99, ri.P99)))
		}
	}
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return math.Inf(1)
	}
	return float64(a) / float64(b)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }

// Markdown returns the results table, the targets and the setup.
func (r *Report) Markdown() string {
	o := r.Options
	var b strings.Builder
	via := "library (in-process router)"
	if o.ViaServer {
		via = "router gRPC server on loopback"
	}
	tr := o.Transport
	if tr == "" {
		tr = "grpc"
	}
	via += ", router→node transport " + tr
	fmt.Fprintf(&b, "# pillar bench read\n\n")
	fmt.Fprintf(&b, "%d cobbled nodes on 127.0.0.1 (zones zone-a…), %d partitions × %d replicas, %d keys in %d-key batches, values %d B–%d KiB (mean ≈ %d KB), block cache %d MiB per node, %d closed-loop clients, %v per scenario after %v warm-up, request deadline %v, through the %s, router zone %q, %s, GOGC %s, GOMAXPROCS %d. %s\n\n",
		o.Nodes, o.Partitions, o.Replicas, o.Keys, o.BatchKeys, o.MinValue, o.MaxValue>>10, (o.MinValue+o.MaxValue)/2/1000, o.CacheBytes>>20, o.Clients, o.Duration, o.Warmup, o.Deadline, via, o.Zone, map[bool]string{false: "a request to as few nodes as possible", true: "partitions spread over nodes"}[o.Spread], gogc(o.GCPercent), runtime.GOMAXPROCS(0), r.Started.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "| scenario | requests | req/s | MB/s | p50 | p90 | p99 | p99.9 | max | failed (deadline) | hedges (won) | extra requests | failovers |\n")
	fmt.Fprintf(&b, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.Results {
		hedges, extra, fo := "–", "–", "–"
		if !slices.Contains([]string{Redis, RedisInterleaved, DirectInterleaved, BareInterleaved, WireInterleaved, SaturationRedis}, x.Scenario) {
			hedges = fmt.Sprintf("%d (%d)", x.Hedges, x.HedgesWon)
			extra = fmt.Sprintf("%.2f%%", 100*x.ExtraRatio)
			fo = fmt.Sprint(x.Failovers)
		}
		fmt.Fprintf(&b, "| %s | %d | %.0f | %.0f | %s | %s | %s | %s | %s | %d (%d) | %s | %s | %s |\n", x.Scenario, x.Requests, x.RPS, x.MBps,
			msn(x.P50), msn(x.P90), msn(x.P99), msn(x.P999), msn(x.Max), x.Errors, x.DeadlineErrors, hedges, extra, fo)
	}
	fmt.Fprintf(&b, "\nLatencies in ms. Extra requests = (hedges + failovers) / primary sub-requests.\n\n")
	for _, x := range r.Results {
		fmt.Fprintf(&b, "- **%s**: %s", x.Scenario, x.Description)
		if x.KilledAt > 0 {
			fmt.Fprintf(&b, "; killed at %s; **recovery %s** (from the kill to the router's last failover: no request reached the dead node after it; %d failovers); latency disrupted for %s (to the end of the last 100 ms window with a failed request or one slower than %s, 2× the pre-kill p99.9); worst latency after the kill %s",
				ms(x.KilledAt), ms(x.Recovery), x.Failovers, ms(x.Disrupted), ms(x.DisruptLimit), ms(x.MaxAfterKill))
		}
		b.WriteString("\n")
	}
	if len(r.Checks) > 0 {
		fmt.Fprintf(&b, "\n| target | measured | met |\n|---|---|---|\n")
		for _, c := range r.Checks {
			fmt.Fprintf(&b, "| %s | %s | %s |\n", c.Target, c.Value, map[bool]string{true: "yes", false: "**no**"}[c.Pass])
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\nNote: %s\n", n)
	}
	return b.String()
}

func gogc(p int) string {
	if p > 0 {
		return fmt.Sprint(p)
	}
	if v := os.Getenv("GOGC"); v != "" {
		return v
	}
	return "100"
}

func msn(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/1e6) }

// Write writes results.md, results.json and latency.png into dir.
func (r *Report) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("readbench: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(r.Markdown()), 0o644); err != nil {
		return fmt.Errorf("readbench: %w", err)
	}
	type jsonResult struct {
		*Result
		P50ms, P90ms, P99ms, P999ms, MaxMS float64
	}
	out := struct {
		Options any
		Results []jsonResult
		Checks  []Check
		Notes   []string
	}{Options: optionsJSON(r.Options), Checks: r.Checks, Notes: r.Notes}
	for _, x := range r.Results {
		out.Results = append(out.Results, jsonResult{x, msf(x.P50), msf(x.P90), msf(x.P99), msf(x.P999), msf(x.Max)})
	}
	js, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return fmt.Errorf("readbench: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), js, 0o644); err != nil {
		return fmt.Errorf("readbench: %w", err)
	}
	return r.Plot(filepath.Join(dir, "latency.png"))
}

func msf(d time.Duration) float64 { return float64(d) / 1e6 }

func optionsJSON(o Options) map[string]any {
	return map[string]any{"duration": o.Duration.String(), "warmup": o.Warmup.String(), "clients": o.Clients, "keys": o.Keys,
		"batch_keys": o.BatchKeys, "nodes": o.Nodes, "partitions": o.Partitions, "replicas": o.Replicas,
		"min_value": o.MinValue, "max_value": o.MaxValue, "zone": o.Zone, "slow_node": o.SlowNode, "slow_fraction": o.SlowFraction,
		"slow_delay": o.SlowDelay.String(), "degraded_node": o.DegradedNode, "degraded_delay": o.DegradedDelay.String(),
		"saturation_clients": o.SaturationClients, "gc_percent": o.GCPercent, "node_processes": len(o.NodeExec) > 0, "kill_node": o.KillNode, "down_after": o.DownAfter.String(), "deadline": o.Deadline.String(),
		"via_server": o.ViaServer, "transport": o.Transport, "interleave": o.Interleave, "spread": o.Spread, "redis": o.RedisAddr, "scenarios": o.Scenarios}
}

// palette gives each scenario its own colour (Redis lines are grey/black).
var palette = []color.Color{
	color.RGBA{0x1f, 0x77, 0xb4, 0xff}, color.RGBA{0x7f, 0x7f, 0x7f, 0xff}, color.RGBA{0x2c, 0xa0, 0x2c, 0xff},
	color.RGBA{0x7f, 0x7f, 0x7f, 0xff}, color.RGBA{0x94, 0x67, 0xbd, 0xff}, color.RGBA{0xd6, 0x27, 0x28, 0xff},
	color.RGBA{0xff, 0x7f, 0x0e, 0xff}, color.RGBA{0x8c, 0x56, 0x4b, 0xff}, color.RGBA{0x17, 0xbe, 0xcf, 0xff},
}

// nines maps a quantile q to -log10(1-q): 50% → 0.3, 90% → 1, 99% → 2, …
func nines(q float64) float64 { return -math.Log10(1 - q) }

type ninesTicks struct{}

func (ninesTicks) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for _, t := range []struct {
		q     float64
		label string
	}{{0, "0%"}, {0.5, "50%"}, {0.9, "90%"}, {0.99, "99%"}, {0.999, "99.9%"}, {0.9999, "99.99%"}} {
		if x := nines(t.q); x >= min && x <= max+1e-9 {
			ts = append(ts, plot.Tick{Value: x, Label: t.label})
		}
	}
	return ts
}

// Plot draws latency by percentile (log latency over a "nines" axis), one
// line per scenario.
func (r *Report) Plot(path string) error {
	p := plot.New()
	p.Title.Text = "BatchGet latency by percentile (12 keys, ~600 KB)"
	p.X.Label.Text = "percentile"
	p.Y.Label.Text = "latency (ms, log)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.X.Tick.Marker = ninesTicks{}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	maxX := 0.0
	for i, x := range r.Results {
		n := len(x.lat)
		if n == 0 {
			continue
		}
		var pts plotter.XYs
		for j := 0; j < n; j++ {
			q := float64(j) / float64(n)
			pts = append(pts, plotter.XY{X: nines(q), Y: math.Max(msf(x.lat[j]), 0.01)})
		}
		maxX = math.Max(maxX, nines(float64(n-1)/float64(n)))
		l, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("readbench: plot: %w", err)
		}
		l.Color = palette[i%len(palette)]
		l.Dashes = plotutil.Dashes(0)
		l.Width = vg.Points(1.5)
		switch x.Scenario {
		case Redis:
			l.Color = color.Black
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		case RedisInterleaved:
			l.Color = color.Gray{Y: 0x80}
			l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		}
		p.Add(l)
		p.Legend.Add(x.Scenario, l)
	}
	p.X.Min, p.X.Max = 0, math.Min(maxX, 4)+0.1
	if err := p.Save(9*vg.Inch, 5.5*vg.Inch, path); err != nil {
		return fmt.Errorf("readbench: plot %s: %w", path, err)
	}
	return nil
}
