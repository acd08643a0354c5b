package ingestbench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary be the reference node (Options.Reference).
func TestMain(m *testing.M) {
	if child, err := ServeReferenceIfAsked(); child {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// selfReference is the command line that starts this test binary as the
// reference node.
func selfReference(t testing.TB) []string {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return []string{exe, "-test.run=^$"}
}

// TestRunSmall runs every scenario at toy sizes and checks the report's
// shape (not its figures: this is not a benchmark).
func TestRunSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node and ingests ~20 MB")
	}
	out := t.TempDir()
	rep, err := Run(context.Background(), Options{Out: out, Dir: t.TempDir(), Partitions: 4, Keys: 240, MaxValue: 20 << 10,
		CacheBytes: 16 << 20, ReadRate: 50, Phase: 400 * time.Millisecond, Settle: 100 * time.Millisecond, SnapshotBytes: 8 << 20,
		DeltaPartitions: 2, UpdatesPerSec: 200, DeltaInterval: 100 * time.Millisecond, Quiet: true, Reference: selfReference(t),
		// A read must not fail: under -race at nice 19 on a machine at load
		// 26, reads' p50 reached 1.4 s and the default 2 s deadline failed 7.
		Deadline:   15 * time.Second,
		ProfileDir: filepath.Join(out, "profiles")})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{Unpaced, Paced} {
		for _, s := range []string{Snapshot, Deltas, Both} {
			x := rep.Result(mode, s)
			if x == nil || x.Reads == 0 || x.Errors != 0 || x.Idle == nil || x.P99 == 0 || x.RefReads == 0 || x.RefP99 == 0 {
				t.Fatalf("%s %s: %+v", mode, s, x)
			}
			if s != Deltas && (x.SnapshotVisible == 0 || x.MBps == 0) {
				t.Fatalf("%s %s: snapshot not measured: %+v", mode, s, x)
			}
			if s != Snapshot && (x.DeltaBatches == 0 || x.VisibleP99 == 0 || x.DeltaApplyMean == 0 || x.DownloadMean == 0) {
				t.Fatalf("%s %s: deltas not measured: %+v", mode, s, x)
			}
		}
	}
	if f := rep.Result(Unpaced, Floor); f == nil || f.MBps == 0 || rep.FloorMBps() == 0 {
		t.Fatalf("floor: %+v", f)
	}
	if profs, _ := filepath.Glob(filepath.Join(out, "profiles", "cpu-*.pprof")); len(profs) != len(rep.Results) {
		t.Fatalf("%d profiles for %d windows", len(profs), len(rep.Results))
	}
	if len(rep.Checks) != 11 {
		t.Fatalf("%d checks: %+v", len(rep.Checks), rep.Checks)
	}
	for _, f := range []string{"results.md", "results.json", "latency-timeline.png"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", f, err)
		}
	}
	if md := rep.Markdown(); !strings.Contains(md, "| paced | c-both |") {
		t.Fatalf("table lacks the paced c-both row:\n%s", md)
	}
	var gcs uint64
	for _, x := range rep.Results {
		gcs += x.GCCycles
	}
	if gcs == 0 {
		t.Fatal("no window counted a GC cycle (the reads and ingest allocate)")
	}
	// Every row of the window table has the header's columns.
	var cols int
	for _, line := range strings.Split(rep.Markdown(), "\n") {
		if strings.HasPrefix(line, "| mode | scenario |") {
			cols = strings.Count(line, "|")
		} else if cols > 0 && (strings.HasPrefix(line, "| unpaced |") || strings.HasPrefix(line, "| paced |")) && strings.Count(line, "|") != cols {
			t.Fatalf("row with %d bars, header %d: %s", strings.Count(line, "|"), cols, line)
		} else if line == "" && cols > 0 {
			break
		}
	}
}

func TestValidate(t *testing.T) {
	for _, o := range []Options{{Modes: []string{"fast"}}, {Partitions: 4, DeltaPartitions: 4}, {SnapshotPartition: 2}, {TargetRatio: 0.5}, {MinRate: 16e6, AmbientMaxRate: 1e6}} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// BenchmarkIngest runs the whole benchmark once per iteration and reports
// the ratios. Its sizes are `pillar bench ingest`'s defaults (a
// 1 GiB snapshot, 10 s phases), because the targets are judged there: at
// 128 MiB and 4 s phases the windows hold too few reads for a p99 and the
// floor loop reads its files from the page cache, and a quiet run that met
// every target at 1 GiB missed five at that size. INGESTBENCH_SNAPSHOT_MB
// and INGESTBENCH_PHASE (a duration) change them for a quick look, and
// INGESTBENCH_OUT names a folder for results.md, results.json and the plot
// (the log shows the table, which go test may cut short), e.g.
//
//	go test -run '^$' -bench Ingest -benchtime 1x -timeout 20m ./bench/ingestbench/
//	INGESTBENCH_SNAPSHOT_MB=128 INGESTBENCH_PHASE=4s go test -run '^$' -bench Ingest -benchtime 1x ./bench/ingestbench/
func BenchmarkIngest(b *testing.B) {
	o := Options{Quiet: true, Reference: selfReference(b)} // zero sizes: the command's defaults
	if v, err := strconv.Atoi(os.Getenv("INGESTBENCH_SNAPSHOT_MB")); err == nil && v > 0 {
		o.SnapshotBytes = int64(v) << 20
	}
	if d, err := time.ParseDuration(os.Getenv("INGESTBENCH_PHASE")); err == nil && d > 0 {
		o.Phase = d
	}
	o.Out = os.Getenv("INGESTBENCH_OUT")
	for range b.N {
		rep, err := Run(context.Background(), o)
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range []string{Snapshot, Deltas, Both} {
			for _, mode := range []string{Unpaced, Paced} {
				if x := rep.Result(mode, s); x != nil && x.Idle != nil {
					b.ReportMetric(ratio(x.P99, x.Idle.P99), mode+"-"+s+"-p99/idle")
					b.ReportMetric(ratio(x.P99, x.RefP99), mode+"-"+s+"-p99/ref")
				}
			}
		}
		if a, f := rep.Result(Unpaced, Snapshot), rep.FloorMBps(); a != nil && f > 0 {
			b.ReportMetric(a.MBps, "snapshot-MB/s")
			b.ReportMetric(a.MBps/f, "snapshot/floor")
		}
		if x := rep.Result(Paced, Deltas); x != nil {
			b.ReportMetric(x.VisibleP99.Seconds(), "paced-delta-visible-p99-s")
		}
		b.Log("\n" + rep.Markdown())
	}
}
