package readbench

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pillarkit/pillar/cobbled/router"
)

// A short run of every scenario with small data: the harness works end to
// end and its report is complete (the figures themselves are the
// benchmark's business).
func TestRunShort(t *testing.T) {
	out := t.TempDir()
	rep, err := Run(context.Background(), Options{Out: out, Dir: t.TempDir(), Duration: 600 * time.Millisecond, Warmup: 200 * time.Millisecond,
		Clients: 2, Keys: 240, Partitions: 8, MaxValue: 8 << 10, DownAfter: 200 * time.Millisecond, Interleave: true, SaturationClients: 4,
		Zone: "zone-c", // the killed node's zone: requests go to it until it dies
		// A loaded machine stalls requests for hundreds of ms: the harness is
		// checked here, not latency, so no request may fail by its deadline.
		Deadline: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range append(slices.DeleteFunc(slices.Clone(AllScenarios), func(s string) bool { return s == Saturation }),
		HealthyInterleaved, RedisInterleaved, DirectInterleaved, BareInterleaved, SaturationRouter, SaturationRedis) {
		x := rep.Result(name)
		if x == nil {
			if name != Healthy && name != SlowHedge && name != SlowNoHedge && name != Kill && name != Degraded && len(rep.Notes) > 0 {
				continue // Redis not running here
			}
			t.Fatalf("no result for %s", name)
		}
		if x.Requests == 0 || x.P50 <= 0 || x.P99 < x.P50 || x.Max < x.P999 || x.MBps <= 0 {
			t.Errorf("%s: implausible figures %+v", name, x)
		}
		if name != Kill && x.Errors != 0 {
			t.Errorf("%s: %d failed requests", name, x.Errors)
		}
	}
	// A failover needs a request in flight to the victim at the kill, or
	// sent to it before it is marked down 200 ms later; a stalled machine
	// may send none. Either way requests must have been served after the
	// kill (MaxAfterKill is the worst latency of those).
	if k := rep.Result(Kill); k.KilledAt <= 0 || (k.Failovers == 0 && k.MaxAfterKill <= 0) {
		t.Errorf("kill scenario: killed at %v, %d failovers, nothing served after the kill", k.KilledAt, k.Failovers)
	}
	md, err := os.ReadFile(filepath.Join(out, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	// zone-c: every request goes to node-2, so the slow node-0 gets none,
	// and the run is shorter than the degraded scenario's 2 s: both
	// targets must then read as not met.
	for _, c := range rep.Checks {
		if (strings.Contains(c.Target, "fault reaches") || strings.Contains(c.Target, "p50 after 2 s")) && c.Pass {
			t.Errorf("%s: met with %s", c.Target, c.Value)
		}
	}
	if n := rep.Result(SlowNoHedge).NodeRPCs["node-2"]; n == 0 {
		t.Error("no per-node sub-request counts")
	}
	for _, want := range []string{"block cache 1024 MiB per node", "| healthy |", "| slow-hedge |", "| kill |", "| degraded |", "p99 ≤ 1.5 × healthy p99", "p99.9 ≤ 2 × healthy p99.9", "fault reaches", "p50 after 2 s"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
	for _, f := range []string{"results.json", "latency.png"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options{
		{Scenarios: []string{"nope"}},
		{Replicas: 1},
		{SlowNode: 3},
		{Keys: 5},
		{CacheBytes: 512 << 10},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
	if err := (Options{}).Validate(); err != nil {
		t.Error(err)
	}
}

// BenchmarkRead runs a short version of `pillar bench read` (full-size
// values, 1 s per scenario; PILLAR_READBENCH_DURATION overrides) and reports
// the headline figures and the ratios to the targets and to Redis.
func BenchmarkRead(b *testing.B) {
	d := time.Second
	if s := os.Getenv("PILLAR_READBENCH_DURATION"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			b.Fatal(err)
		}
	}
	var rep *Report
	for b.Loop() {
		var err error
		rep, err = Run(context.Background(), Options{Dir: b.TempDir(), Duration: d, Warmup: d / 4, Keys: 1200, Partitions: 16, DownAfter: d / 3, GCPercent: 400, Interleave: true})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.Log("\n" + rep.Markdown())
	h := rep.Result(Healthy)
	b.ReportMetric(msf(h.P50), "healthy-p50-ms")
	b.ReportMetric(msf(h.P99), "healthy-p99-ms")
	b.ReportMetric(h.RPS, "healthy-req/s")
	if sh, sn := rep.Result(SlowHedge), rep.Result(SlowNoHedge); sh != nil && sn != nil {
		b.ReportMetric(msf(sn.P99), "slow-nohedge-p99-ms")
		b.ReportMetric(msf(sh.P99), "slow-hedge-p99-ms")
		b.ReportMetric(ratio(sh.P99, h.P99), "slow-hedge/healthy-p99")
		b.ReportMetric(100*sh.ExtraRatio, "slow-hedge-extra-%")
	}
	if k := rep.Result(Kill); k != nil {
		b.ReportMetric(float64(k.Errors-k.DeadlineErrors), "kill-failed-requests")
		b.ReportMetric(float64(k.DeadlineErrors), "kill-deadline-requests")
		b.ReportMetric(msf(k.Recovery), "kill-recovery-ms")
	}
	if rd := rep.Result(Redis); rd != nil {
		b.ReportMetric(ratio(h.P50, rd.P50), "router/redis-p50")
		b.ReportMetric(ratio(h.P99, rd.P99), "router/redis-p99")
	}
	if hi, ri := rep.Result(HealthyInterleaved), rep.Result(RedisInterleaved); hi != nil && ri != nil {
		b.ReportMetric(ratio(hi.P50, ri.P50), "interleaved-router/redis-p50")
		b.ReportMetric(ratio(hi.P99, ri.P99), "interleaved-router/redis-p99")
	}
}

// TestEvaluateEmptyScenarioMissed: scenarios that completed no request
// (zero latencies, which would pass every "≤" target) make the run miss.
func TestEvaluateEmptyScenarioMissed(t *testing.T) {
	r := &Report{Results: []*Result{{Scenario: Healthy}, {Scenario: SlowHedge}, {Scenario: HealthyInterleaved}, {Scenario: RedisInterleaved}}}
	r.evaluate()
	missed := 0
	for _, c := range r.Checks {
		if !c.Pass {
			missed++
		}
	}
	if missed < 4 {
		t.Fatalf("%d of %d checks missed, want at least one per empty scenario (4): %+v", missed, len(r.Checks), r.Checks)
	}
}

// TestNoHedge: --no-hedge (Options.NoHedge) turns hedging off in the
// healthy scenario and leaves it on in slow-hedge, the scenario that
// measures it. A 1 µs hedge delay hedges every sub-request the budget
// allows (its bank alone is 20), so a healthy scenario that still hedged
// shows it. (Before, bench read accepted --no-hedge and ignored it.)
func TestNoHedge(t *testing.T) {
	rep, err := Run(context.Background(), Options{Dir: t.TempDir(), Duration: 400 * time.Millisecond, Warmup: 100 * time.Millisecond,
		Clients: 1, Keys: 240, Partitions: 8, MaxValue: 8 << 10, Scenarios: []string{Healthy, SlowHedge}, RedisAddr: "-",
		Deadline: time.Minute, NoHedge: true,
		Router: func(o *router.Options) {
			o.HedgeMinDelay, o.HedgeMaxDelay, o.HedgeInitialDelay = time.Microsecond, time.Microsecond, time.Microsecond
		}})
	if err != nil {
		t.Fatal(err)
	}
	if h := rep.Result(Healthy); h == nil || h.Requests == 0 || h.Hedges != 0 {
		t.Errorf("healthy with NoHedge: %+v; want requests and no hedges", h)
	}
	if s := rep.Result(SlowHedge); s == nil || s.Hedges == 0 {
		t.Errorf("slow-hedge with NoHedge: %+v; want it hedged still", s)
	}
	if !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.Contains(n, "--no-hedge") }) {
		t.Errorf("no note says hedging was off: %q", rep.Notes)
	}
}
