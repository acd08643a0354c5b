package cobbled

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/objstore"
	"github.com/pillarkit/pillar/pillar"
)

// BenchmarkBatchGet measures 12-key requests (values uniform in 100 B–100 KiB,
// mean ≈ 50 KB) on one node, for the floor (in-process MultiGet on the same
// databases, one call per partition, values copied out) and for BatchGet over
// gRPC on 127.0.0.1, with the block cache warm and cold (data 5× the cache;
// "cold" misses are served from the OS page cache, "cold-direct" reads SSTs
// with O_DIRECT so misses go to the disk).
// Each sub-benchmark reports p50/p90/p99 latency and requests/s; the grpc
// ones also report their p50 as a ratio of the floor's (p50-x-floor).
//
//	go test -run '^$' -bench BatchGet -benchtime 3000x ./cobbled/
//
// COBBLED_BENCH_KEYS sets the number of stored keys (default 4000, ≈200 MB).
func BenchmarkBatchGet(b *testing.B) {
	const parts, perReq = 8, 12
	nkeys := 4000
	if v, err := strconv.Atoi(os.Getenv("COBBLED_BENCH_KEYS")); err == nil && v > 0 {
		nkeys = v
	}
	tmp := b.TempDir()
	objects, dir := filepath.Join(tmp, "objects"), filepath.Join(tmp, "node")
	rng := rand.New(rand.NewPCG(1, 2))
	var all []string
	var dataBytes int64
	for p := range parts {
		keys := keysIn(nkeys/parts, p, parts)
		ops := make([]op, len(keys))
		for i, k := range keys {
			v := make([]byte, 100+rng.IntN(100<<10-100+1))
			for j := 0; j < len(v); j += 8 {
				x := rng.Uint64()
				for o := 0; o < 8 && j+o < len(v); o++ {
					v[j+o] = byte(x >> (8 * o))
				}
			}
			ops[i] = op{key: k, val: string(v)}
			dataBytes += int64(len(v))
		}
		m := writeBatch(b, objects, parts, p, fmt.Sprintf("bench-%d", p), batch.KindSnapshot, ops, 0)
		func() {
			n := openBenchNode(b, dir, objects, parts, 1<<30, false)
			defer n.Close()
			must(b, n.Apply(context.Background(), Batch{Seq: 1, Manifest: m}))
		}()
		all = append(all, keys...)
	}
	must(b, os.RemoveAll(objects))
	reqs := make([][][]byte, 4096)
	for i := range reqs {
		for range perReq {
			reqs[i] = append(reqs[i], []byte(all[rng.IntN(len(all))]))
		}
	}
	absent := make([][][]byte, 256)
	for i := range absent {
		for _, k := range keysIn(perReq, i%parts, parts) {
			absent[i] = append(absent[i], []byte(k))
		}
	}
	b.Logf("%d keys, %.0f MB of values, mean value %.1f KB", len(all), float64(dataBytes)/1e6, float64(dataBytes)/float64(len(all))/1e3)

	for _, mode := range []struct {
		name   string
		cache  int64
		direct bool
	}{{"warm", 2 * dataBytes, false}, {"cold", dataBytes / 5, false}, {"cold-direct", dataBytes / 5, true}} {
		n := openBenchNode(b, dir, objects, parts, mode.cache, mode.direct)
		if mode.name == "warm" {
			for _, r := range reqs {
				floorGet(n, r, nil)
			}
		}
		cli, stop := benchServer(b, n)
		ctx := context.Background()
		grpcGet := func(buf []byte, r [][]byte) ([]byte, error) {
			resp, err := cli.BatchGet(ctx, &servepb.BatchGetRequest{Keys: r}, servepb.PooledCallOption())
			if err == nil && len(resp.Results) != len(r) {
				err = fmt.Errorf("%d results", len(resp.Results))
			}
			if err == nil {
				servepb.Release(resp)
			}
			return buf, err
		}
		var floor50, fixed50 float64
		for _, par := range []int{1, 8} {
			suffix := ""
			if par > 1 {
				suffix = fmt.Sprintf("-par%d", par)
			}
			b.Run(mode.name+"/floor"+suffix, func(b *testing.B) {
				p50 := runLatency(b, par, reqs, func(buf []byte, r [][]byte) ([]byte, error) { return floorGet(n, r, buf), nil })
				if par == 1 {
					floor50 = p50
				}
			})
			if par == 1 {
				// The fixed cost: the same RPC path for 12 absent keys (bloom
				// filters answer them), i.e. a round trip with no values.
				b.Run(mode.name+"/grpc-absent", func(b *testing.B) {
					fixed50 = runLatency(b, 1, absent, grpcGet)
				})
			}
			b.Run(mode.name+"/grpc"+suffix, func(b *testing.B) {
				p50 := runLatency(b, par, reqs, grpcGet)
				if par == 1 && floor50 > 0 {
					b.ReportMetric(p50/floor50, "p50-x-floor")
					// The target: p50 <= 2 × floor p50 + the fixed cost.
					b.ReportMetric((p50-fixed50)/floor50, "(p50-fixed)-x-floor")
				}
			})
		}
		var dm dto.Metric
		n.opts.Metrics.requestDuration.Write(&dm)
		if h := dm.GetHistogram(); h.GetSampleCount() > 0 {
			b.Logf("%s: server handler mean %.1f µs over %d BatchGets (decode to encoded response)", mode.name, h.GetSampleSum()/float64(h.GetSampleCount())*1e6, h.GetSampleCount())
		}
		st := n.Stats()
		b.Logf("%s: cache %d MB of %d MB, hit ratio %.3f", mode.name, st.CacheUsage>>20, st.CacheCapacity>>20,
			float64(st.CacheHits)/float64(max(1, st.CacheHits+st.CacheMisses)))
		stop()
		n.Close()
	}
}

func openBenchNode(b testing.TB, dir, objects string, parts int, cache int64, direct bool) *Node {
	st, err := objstore.OpenLocal(objects)
	must(b, err)
	n, err := Open(context.Background(), Options{ID: "bench", Dir: dir, Partitions: parts, CacheBytes: cache, Objects: st, DirectReads: direct})
	must(b, err)
	return n
}

// floorGet is the floor: group by partition, one MultiGet per partition,
// copy each value out once.
func floorGet(n *Node, keys [][]byte, buf []byte) []byte {
	buf = buf[:0]
	var byPart [16][][]byte
	for _, k := range keys {
		p := pillar.Partition(k, n.p)
		byPart[p] = append(byPart[p], k)
	}
	for p, ks := range byPart[:n.p] {
		if len(ks) == 0 {
			continue
		}
		if err := n.MultiGet(p, ks, func(i int, v []byte, found bool) { buf = append(buf, v...) }); err != nil {
			panic(err)
		}
	}
	return buf
}

func benchServer(b testing.TB, n *Node) (servepb.ServeClient, func()) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(b, err)
	srv := n.NewGRPCServer()
	go srv.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), append(servepb.DialOptions(0), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	must(b, err)
	return servepb.NewServeClient(conn), func() { conn.Close(); srv.GracefulStop() }
}

// runLatency runs b.N requests from par goroutines, reports p50/p90/p99 (µs)
// and requests/s, and returns p50.
func runLatency(b *testing.B, par int, reqs [][][]byte, do func(buf []byte, r [][]byte) ([]byte, error)) float64 {
	lat := make([][]time.Duration, par)
	var wg sync.WaitGroup
	var next int64
	var mu sync.Mutex
	take := func() int {
		mu.Lock()
		defer mu.Unlock()
		if next >= int64(b.N) {
			return -1
		}
		next++
		return int(next - 1)
	}
	b.ResetTimer()
	cpu0 := cpuTime()
	start := time.Now()
	for g := range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for i := take(); i >= 0; i = take() {
				t := time.Now()
				var err error
				if buf, err = do(buf, reqs[i%len(reqs)]); err != nil {
					b.Error(err)
					return
				}
				lat[g] = append(lat[g], time.Since(t))
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	cpu := cpuTime() - cpu0
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	q := func(f float64) float64 { return float64(all[int(f*float64(len(all)-1))].Nanoseconds()) / 1e3 }
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.90), "p90-µs")
	b.ReportMetric(q(0.99), "p99-µs")
	b.ReportMetric(float64(len(all))/el.Seconds(), "req/s")
	// CPU time of the whole process (client, server, GC, RocksDB threads)
	// per request: robust to other load on the machine; 2 cores /
	// cpu-µs/op bounds the requests/s two cores can sustain.
	b.ReportMetric(float64(cpu.Microseconds())/float64(len(all)), "cpu-µs/op")
	return q(0.50)
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
