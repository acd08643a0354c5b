package router

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/cobbled/wire"
	"github.com/pillarkit/pillar/internal/testcluster"
)

// BenchmarkReadTail measures the router's latency distribution with one
// closed-loop caller (the case the 1-client read target is about), request by
// request alternating with the floor, the same 12-key batch straight to a
// node over a bare wire.Client (no router), so both see the same moments. It
// reports p50, p99 and p99.9 of each and their ratios, and, for the router's
// slowest 1% of requests, where their time went (ReadStages: until the
// sub-request was written, until its answer was read off the connection,
// the hand-off to the gather loop, and the rest of Read), against the same
// stages over all requests. An op is one request on each path. Hedging is on,
// as in bench read's healthy phase.
//
// ROUTER_TAIL_GARBAGE=1 adds, each op, the garbage a go-redis MGET of the
// same batch leaves (a string per value): bench read's interleaved phase,
// where Redis's client sets this process's GC rate. ROUTER_TAIL_EXEC names
// a pillar binary: the nodes then run as processes of their own (pillar
// bench read-node), as in bench read.
//
//	go test -run '^$' -bench ReadTail -benchtime 20000x -benchmem ./cobbled/router/
func BenchmarkReadTail(b *testing.B) {
	var exec []string
	if bin := os.Getenv("ROUTER_TAIL_EXEC"); bin != "" {
		exec = []string{bin, "bench", "read-node"}
	}
	garbage := os.Getenv("ROUTER_TAIL_GARBAGE") != ""
	c := startClusterExec(b, exec, func(o *testcluster.Options) {
		o.Partitions, o.Keys, o.MaxValue, o.CacheBytes = 64, 1200, 100<<10, 256<<20
	})
	batches := c.Batches(12)
	ctx := context.Background()
	direct := wire.NewClient(c.Members()[0].Addr, wire.ClientOptions{})
	defer direct.Close()
	var stages []ReadStages
	r := newRouter(b, c, func(o *Options) {
		o.Transport = TransportWire
		o.ReadTrace = func(s *ReadStages) { stages = append(stages, *s) }
	})
	sink := make([]string, 12)
	rget := func(keys [][]byte) (time.Duration, int) {
		t0 := time.Now()
		resp, err := r.Read(ctx, keys, nil)
		if err != nil {
			b.Fatal(err)
		}
		var vb int
		for _, x := range resp.Results {
			vb += len(x.Value)
		}
		resp.Release()
		return time.Since(t0), vb
	}
	wget := func(keys [][]byte) time.Duration {
		t0 := time.Now()
		dr, err := direct.BatchGet(ctx, &servepb.BatchGetRequest{Keys: keys})
		if err != nil {
			b.Fatal(err)
		}
		servepb.Release(dr)
		return time.Since(t0)
	}
	// get runs batch i on both paths, the order swapping every op (neither
	// always first, or right after the other).
	get := func(i int) (rd, wd time.Duration) {
		keys := batches[i%len(batches)]
		var vb int
		if i%2 == 0 {
			rd, vb = rget(keys)
			wd = wget(keys)
		} else {
			wd = wget(keys)
			rd, vb = rget(keys)
		}
		if garbage {
			for j := range sink {
				sink[j] = string(make([]byte, vb/len(sink)))
			}
		}
		return rd, wd
	}
	for i := range 2 * len(batches) { // warm the caches and the latency windows
		get(i)
	}
	stages = stages[:0]
	var rl, dl []time.Duration
	gc0 := gcCycles()
	runtime.GC()
	n := 0
	for b.Loop() {
		x, y := get(n)
		rl, dl = append(rl, x), append(dl, y)
		n++
	}
	b.StopTimer()
	cycles := gcCycles() - gc0
	slices.Sort(rl)
	slices.Sort(dl)
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	q := func(s []time.Duration, f float64) time.Duration { return s[min(len(s)-1, int(f*float64(len(s))))] }
	b.ReportMetric(ms(q(rl, 0.5)), "router-p50-ms")
	b.ReportMetric(ms(q(rl, 0.99)), "router-p99-ms")
	b.ReportMetric(ms(q(rl, 0.999)), "router-p99.9-ms")
	b.ReportMetric(ms(q(dl, 0.5)), "wire-p50-ms")
	b.ReportMetric(ms(q(dl, 0.99)), "wire-p99-ms")
	b.ReportMetric(ms(q(dl, 0.999)), "wire-p99.9-ms")
	b.ReportMetric(float64(q(rl, 0.5))/float64(q(dl, 0.5)), "p50-router/wire")
	b.ReportMetric(float64(q(rl, 0.99))/float64(q(dl, 0.99)), "p99-router/wire")
	b.ReportMetric(float64(cycles)/float64(n), "gc/op")
	if len(stages) >= 100 {
		b.Log(stageReport(stages))
	}
}

// stageReport sums where the slowest 1% of Reads spent their time against
// every Read.
func stageReport(st []ReadStages) string {
	slices.SortFunc(st, func(a, b ReadStages) int { return int(a.End.Sub(a.Start) - b.End.Sub(b.Start)) })
	mean := func(s []ReadStages) string {
		var sp, pk, ar, w, a, h, f time.Duration
		multi := 0
		for _, x := range s {
			sp += x.Split.Sub(x.Start)
			pk += x.Picked.Sub(x.Split)
			ar += x.Armed.Sub(x.Picked)
			w += x.Sent.Sub(x.Armed)
			a += x.Answered.Sub(x.Sent)
			h += x.Received.Sub(x.Answered)
			f += x.End.Sub(x.Received)
			if x.Attempts > 1 {
				multi++
			}
		}
		n := time.Duration(len(s))
		return fmt.Sprintf("split %v, pick %v, arm %v, write %v, sent→answered %v, answered→loop %v, loop→end %v (%d of %d with >1 sub-request)",
			(sp / n).Round(time.Microsecond), (pk / n).Round(time.Microsecond), (ar / n).Round(time.Microsecond), (w / n).Round(time.Microsecond), (a / n).Round(time.Microsecond), (h / n).Round(time.Microsecond), (f / n).Round(time.Microsecond), multi, len(s))
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "all %d Reads: %s\n", len(st), mean(st))
	fmt.Fprintf(&sb, "slowest 1%%: %s", mean(st[len(st)-len(st)/100:]))
	return sb.String()
}

func gcCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// startClusterExec is startCluster with the nodes in processes of their own
// when exec is set.
func startClusterExec(t testing.TB, exec []string, mutate func(*testcluster.Options)) *testcluster.Cluster {
	if exec == nil {
		return startCluster(t, mutate)
	}
	t.Helper()
	o := testcluster.Options{Dir: t.TempDir(), Exec: exec}
	mutate(&o)
	c, err := testcluster.Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
