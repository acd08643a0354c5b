package lorrybench

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkPriorityLanes runs the priority-lanes benchmark: a bulk backlog
// (LORRY_BENCH_RECORDS, default 2000; the full size is 200000)
// of LORRY_BENCH_VALUE bytes (default 50 KiB) delivered to 3 replicas, first
// alone, then with LORRY_BENCH_FRESH fresh updates/s (default 100). It
// reports the fresh p99 to all 3 replicas, the bulk throughput ratio and
// the loss counter; LORRY_BENCH_OUT, when set, receives the report and plot.
//
//	go test -run XXX -bench PriorityLanes -benchtime 1x ./lorry/lorrybench/
//	LORRY_BENCH_RECORDS=200000 LORRY_BENCH_OUT=bench-out/lorry go test -run XXX -bench PriorityLanes -benchtime 1x -timeout 0 ./lorry/lorrybench/
func BenchmarkPriorityLanes(b *testing.B) {
	for i := 0; i < b.N; i++ {
		o := Options{Dir: b.TempDir(), Records: envInt("LORRY_BENCH_RECORDS", 2000), ValueSize: envInt("LORRY_BENCH_VALUE", 50<<10),
			FreshRate: envInt("LORRY_BENCH_FRESH", 100), Progress: os.Stderr}
		res, err := Run(context.Background(), o)
		if err != nil {
			b.Fatal(err)
		}
		if out := os.Getenv("LORRY_BENCH_OUT"); out != "" {
			if err := res.Write(out); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(res.Mixed.FreshP99MS, "fresh_p99_ms")
		b.ReportMetric(res.Mixed.FreshP50MS, "fresh_p50_ms")
		b.ReportMetric(res.Ratio, "bulk_ratio")
		b.ReportMetric(res.Mixed.BulkPerSecond, "bulk_records/s")
		b.ReportMetric(float64(res.Mixed.Lost), "lost")
		b.Log("\n" + res.Markdown())
	}
}

// TestSmallRun runs the harness at a tiny size: it completes, every
// checked key holds its newest value on every replica, and the report and
// plot are written.
func TestSmallRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{Dir: t.TempDir(), Records: 150, ValueSize: 4 << 10, FreshRate: 50, Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	if res.Baseline == nil || res.Mixed.FreshUpdates == 0 || res.Mixed.Checked != 150 || res.Mixed.Lost != 0 {
		t.Fatalf("result %+v / %+v", res.Baseline, res.Mixed)
	}
	out := t.TempDir()
	if err := res.Write(out); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"results.md", "results.json", "latency.png"} {
		if st, err := os.Stat(out + "/" + f); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", f, err)
		}
	}
}
