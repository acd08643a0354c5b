package router

import (
	"context"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/cobbled/wire"
	"github.com/pillarkit/pillar/internal/testcluster"
)

// BenchmarkBatchGet measures a 12-key BatchGet (values 100 B–100 KiB)
// through the router against the floor, the same request sent straight to
// one node with the generated client, in one run; it reports the router's
// overhead as a ratio (an op is one request on each path). Hedging is off and the router is pinned to the
// node's zone, so both paths do the same work on the node.
func BenchmarkBatchGet(b *testing.B) {
	c := startCluster(b, func(o *testcluster.Options) { o.Keys = 1200; o.MaxValue = 100 << 10; o.CacheBytes = 256 << 20 })
	batches := c.Batches(12)
	ctx := context.Background()
	conn, err := grpc.NewClient(c.Members()[0].Addr, append(servepb.DialOptions(0), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	direct := servepb.NewServeClient(conn)
	r := newRouter(b, c, func(o *Options) { o.Zone = "zone-a"; o.DisableHedging = true })
	alternateDirectRouter(b, batches, func(keys [][]byte) error {
		_, err := direct.BatchGet(ctx, &servepb.BatchGetRequest{Keys: keys})
		return err
	}, r)
}

// BenchmarkBatchGetWire is BenchmarkBatchGet over the lean wire transport:
// the router (Transport wire) against a wire.Client straight to the node.
func BenchmarkBatchGetWire(b *testing.B) {
	c := startCluster(b, func(o *testcluster.Options) { o.Keys = 1200; o.MaxValue = 100 << 10; o.CacheBytes = 256 << 20 })
	batches := c.Batches(12)
	ctx := context.Background()
	direct := wire.NewClient(c.Members()[0].Addr, wire.ClientOptions{})
	defer direct.Close()
	r := newRouter(b, c, func(o *Options) { o.Zone = "zone-a"; o.DisableHedging = true; o.Transport = TransportWire })
	alternateDirectRouter(b, batches, func(keys [][]byte) error {
		_, err := direct.BatchGet(ctx, &servepb.BatchGetRequest{Keys: keys})
		return err
	}, r)
}

// BenchmarkReadWireCPU measures what one 12-key request costs the machine
// (process CPU, user + system, per request: the router, the nodes and the
// client all run in this process) through the router over the wire
// transport, with 4 parallel callers: the figure that bounds throughput on
// a small machine, steadier under other load than wall-clock latency.
// "release" gives the answers' buffers back (Response.Release); "norelease"
// leaves them to the garbage collector.
func BenchmarkReadWireCPU(b *testing.B) {
	c := startCluster(b, func(o *testcluster.Options) { o.Keys = 1200; o.MaxValue = 100 << 10; o.CacheBytes = 256 << 20 })
	batches := c.Batches(12)
	ctx := context.Background()
	r := newRouter(b, c, func(o *Options) { o.DisableHedging = true; o.Transport = TransportWire })
	for _, keys := range batches {
		if _, err := r.BatchGet(ctx, keys); err != nil {
			b.Fatal(err)
		}
	}
	for _, release := range []bool{true, false} {
		name := map[bool]string{true: "release", false: "norelease"}[release]
		b.Run(name, func(b *testing.B) {
			var next atomic.Int64
			cpu0 := processCPU()
			b.SetParallelism(2) // 2 × GOMAXPROCS callers
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					keys := batches[int(next.Add(1))%len(batches)]
					resp, err := r.Read(ctx, keys, nil)
					if err != nil {
						b.Error(err)
						return
					}
					if release {
						resp.Release()
					}
				}
			})
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// processCPU is this process's CPU time so far (user + system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// alternateDirectRouter warms the caches on both paths, then alternates a
// request straight to the node (direct) and one through r, request by
// request, so that noise from the rest of the machine falls on both alike,
// and reports the time per request of each and their ratio.
func alternateDirectRouter(b *testing.B, batches [][][]byte, direct func(keys [][]byte) error, r *Router) {
	ctx := context.Background()
	for _, keys := range batches {
		if err := direct(keys); err != nil {
			b.Fatal(err)
		}
	}
	var spent [2]time.Duration
	n := 0
	for b.Loop() {
		keys := batches[n%len(batches)]
		n++
		t0 := time.Now()
		if err := direct(keys); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := r.BatchGet(ctx, keys); err != nil {
			b.Fatal(err)
		}
		spent[0] += t1.Sub(t0)
		spent[1] += time.Since(t1)
	}
	b.ReportMetric(float64(spent[0].Microseconds())/float64(n), "direct-µs/req")
	b.ReportMetric(float64(spent[1].Microseconds())/float64(n), "router-µs/req")
	b.ReportMetric(float64(spent[1])/float64(spent[0]), "router/direct")
}
