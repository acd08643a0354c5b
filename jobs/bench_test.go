package jobs_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"runtime"
	"testing"
	"time"

	"go.ytsaurus.tech/yt/go/mapreduce"

	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/pillar"
)

// hashRow is the output of the CPU-bound benchmark job.
type hashRow struct {
	PageKey string `yson:"page_key" parquet:"page_key"`
	Digest  string `yson:"digest" parquet:"digest"`
}

// cpuWork is the per-row work of the benchmark: Rounds chained SHA-256 of
// the page text (about 10 µs a row).
func cpuWork(d *pillar.Doc, rounds int) hashRow {
	sum := sha256.Sum256([]byte(d.Text))
	buf := make([]byte, 0, len(d.Text)+32)
	for i := 1; i < rounds; i++ {
		buf = append(append(buf[:0], sum[:]...), d.Text...)
		sum = sha256.Sum256(buf)
	}
	return hashRow{PageKey: d.PageKey, Digest: hex.EncodeToString(sum[:8])}
}

type cpuMapper struct{ Rounds int }

func (*cpuMapper) InputTypes() []any  { return []any{&pillar.Doc{}} }
func (*cpuMapper) OutputTypes() []any { return []any{&hashRow{}} }
func (m *cpuMapper) Do(ctx mapreduce.JobContext, in mapreduce.Reader, out []mapreduce.Writer) error {
	var d pillar.Doc
	for in.Next() {
		d = pillar.Doc{}
		if err := in.Scan(&d); err != nil {
			return err
		}
		r := cpuWork(&d, m.Rounds)
		if err := out[0].Write(&r); err != nil {
			return err
		}
	}
	return nil
}

func init() { mapreduce.Register(&cpuMapper{}) }

const benchRounds = 40

// BenchmarkMapVsLoop compares the runner's Map with a plain Go loop doing
// the same work over the same rows: the loop reads the table from a
// snapshot in one goroutine and keeps the outputs in a slice; the runner
// runs cpuMapper with GOMAXPROCS workers and writes the outputs to a store
// table. Reports both rates and their ratio (runner/loop). Run with -cpu 2
// for the 2-core figure.
func BenchmarkMapVsLoop(b *testing.B) {
	e := newEnv(b)
	docs := makeDocs(51, 20000)
	writeTable(e, "docs", docs)
	ctx := context.Background()
	var loopDur, runDur time.Duration
	b.ResetTimer()
	loop := func() {
		start := time.Now()
		sn, err := e.store.Snapshot(ctx)
		if err != nil {
			b.Fatal(err)
		}
		rr, err := sn.ReadTable(ctx, "docs", nil)
		if err != nil {
			b.Fatal(err)
		}
		var outs []hashRow
		for rr.Next() {
			var d pillar.Doc
			if err := rr.Scan(&d); err != nil {
				b.Fatal(err)
			}
			outs = append(outs, cpuWork(&d, benchRounds))
		}
		rr.Close()
		sn.Release()
		loopDur += time.Since(start)
		if len(outs) != len(docs) {
			b.Fatal("loop lost rows")
		}
	}
	runner := func() {
		start := time.Now()
		op := &jobs.Op{Inputs: []string{"docs"}, Outputs: []jobs.Output{{Table: "hashes"}}}
		if err := e.runner.Map(ctx, &cpuMapper{Rounds: benchRounds}, op); err != nil {
			b.Fatal(err)
		}
		runDur += time.Since(start)
	}
	for i := 0; i < b.N; i++ {
		// Alternate the order so that drift in the machine's load (it is
		// shared) hits both alike.
		if i%2 == 0 {
			loop()
			runner()
		} else {
			runner()
			loop()
		}
	}
	rows := float64(len(docs) * b.N)
	loopRate, runRate := rows/loopDur.Seconds(), rows/runDur.Seconds()
	b.ReportMetric(loopRate, "loop_rows/s")
	b.ReportMetric(runRate, "runner_rows/s")
	b.ReportMetric(runRate/loopRate, "ratio")
	b.Logf("GOMAXPROCS=%d: loop %.0f rows/s, runner %.0f rows/s, ratio %.2f", runtime.GOMAXPROCS(0), loopRate, runRate, runRate/loopRate)
}

// BenchmarkSort sorts 40k docs by text with a memory limit above the data
// (no spill) and with one an eighth of it (spill and merge), reporting
// MB/s of keyed rows sorted (read, sort, write included).
func BenchmarkSort(b *testing.B) {
	e := newEnv(b)
	writeTable(e, "docs", makeDocs(52, 40000))
	for _, tc := range []struct {
		name  string
		limit int64
	}{{"in-memory", 1 << 30}, {"spill", 2 << 20}} {
		b.Run(tc.name, func(b *testing.B) {
			var bytes int64
			var dur time.Duration
			runs := 0
			for i := 0; i < b.N; i++ {
				var st jobs.Stats
				op := &jobs.Op{Inputs: []string{"docs"}, Outputs: []jobs.Output{{Table: "sorted", RowType: pillar.Doc{}}},
					SortBy: []string{"text"}, MemoryLimit: tc.limit, Stats: &st}
				if err := e.runner.Sort(context.Background(), op); err != nil {
					b.Fatal(err)
				}
				bytes += st.SortedBytes
				dur += st.Elapsed
				runs += st.SpillRuns
			}
			b.ReportMetric(float64(bytes)/1e6/dur.Seconds(), "MB/s")
			b.ReportMetric(float64(runs)/float64(b.N), "spill_runs")
			b.Logf("%s: %.1f MB sorted per run, %.1f MB/s, %d spill runs per run", tc.name, float64(bytes)/1e6/float64(b.N), float64(bytes)/1e6/dur.Seconds(), runs/b.N)
		})
	}
}
