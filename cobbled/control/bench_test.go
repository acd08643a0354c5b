package control

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pillarkit/pillar/internal/batch"
)

// Benchmarks (run with -bench; they are not part of the default test run):
//
//	go test ./cobbled/control -run '^$' -bench . -benchtime 2000x
//
// BenchmarkRegisterBatch measures RegisterBatch/s through gRPC with 8
// concurrent writers spread over 16 partitions, next to the floor: the same
// number of bare single-row INSERTs (autocommit, no gRPC) into the same
// database, and reports control/floor. BenchmarkListBatches measures
// ListBatches latency (100 entries of a 2000-batch partition). Each runs on
// both backends, so one run compares SQLite and PostgreSQL.

const benchWriters = 8

func BenchmarkRegisterBatch(b *testing.B) {
	for _, be := range backends() {
		b.Run(be.name, func(b *testing.B) {
			const P = 16
			e := startEnv(b, be.dsn(b), P, nil)
			ctx := context.Background()
			var next atomic.Int64
			run := func(fn func(i int64) error) time.Duration {
				next.Store(0)
				var wg sync.WaitGroup
				start := time.Now()
				for w := 0; w < benchWriters; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							i := next.Add(1)
							if i > int64(b.N) {
								return
							}
							if err := fn(i); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				return time.Since(start)
			}
			if _, err := e.store.db.Exec(`CREATE TABLE bench_floor (id TEXT PRIMARY KEY, body TEXT NOT NULL)`); err != nil {
				b.Fatal(err)
			}
			body := manifest("floor", 0, P, batch.KindDelta)
			raw, _ := body.Encode()
			b.ResetTimer()
			took := run(func(i int64) error {
				_, err := e.client.RegisterBatch(ctx, manifest(fmt.Sprintf("bench-%d", i), int(i%P), P, batch.KindDelta))
				return err
			})
			b.StopTimer()
			floor := run(func(i int64) error {
				_, err := e.store.db.Exec(e.store.q(`INSERT INTO bench_floor (id, body) VALUES (?, ?)`), fmt.Sprintf("f-%d", i), string(raw))
				return err
			})
			perSec := float64(b.N) / took.Seconds()
			floorPerSec := float64(b.N) / floor.Seconds()
			b.ReportMetric(perSec, "batches/s")
			b.ReportMetric(floorPerSec, "floor-inserts/s")
			b.ReportMetric(perSec/floorPerSec, "ratio-vs-floor")
			// Sanity: every partition's log is gapless.
			r, err := e.client.GetRouting(ctx)
			if err != nil {
				b.Fatal(err)
			}
			var total int64
			for _, n := range r.NewestSeq {
				total += n
			}
			if total != int64(b.N) {
				b.Fatalf("%d batches registered, want %d", total, b.N)
			}
		})
	}
}

func BenchmarkListBatches(b *testing.B) {
	for _, be := range backends() {
		b.Run(be.name, func(b *testing.B) {
			const P, N = 4, 2000
			e := startEnv(b, be.dsn(b), P, nil)
			ctx := context.Background()
			for i := 0; i < N; i++ {
				if _, _, err := e.store.RegisterBatch(ctx, manifest(fmt.Sprintf("l-%d", i), 0, P, batch.KindDelta), time.Now()); err != nil {
					b.Fatal(err)
				}
			}
			rng := rand.New(rand.NewSource(1))
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				after := rng.Int63n(N - 100)
				t0 := time.Now()
				list, err := e.client.ListBatches(ctx, 0, after, 100, 0)
				lat = append(lat, time.Since(t0))
				if err != nil || len(list) != 100 {
					b.Fatalf("list after %d: %d entries, %v", after, len(list), err)
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// BenchmarkGetRouting measures GetRouting (what routers and nodes read
// after every routing change) on 64 partitions × 3 replicas with a log of
// 20 batches per partition, once with the legacy publication only and once
// with three publications (live, previous, candidate) interleaved in the
// log, which adds the derived base seqs and readiness to every read; it
// reports publications/legacy.
//
//	go test ./cobbled/control -run '^$' -bench GetRouting -benchtime 200x
func BenchmarkGetRouting(b *testing.B) {
	for _, be := range backends() {
		b.Run(be.name, func(b *testing.B) {
			const P = 64
			per := map[string]time.Duration{}
			for _, pubs := range [][]string{{""}, {"c1/m", "c2/m", "c3/m"}} {
				name := "legacy"
				if len(pubs) > 1 {
					name = "publications"
				}
				e := startEnv(b, be.dsn(b), P, nil)
				ctx := context.Background()
				for i := 0; i < 4; i++ {
					if err := e.client.RegisterNode(ctx, Node{fmt.Sprintf("bn%d", i), fmt.Sprintf("h:%d", i), string(rune('a' + i%3))}); err != nil {
						b.Fatal(err)
					}
				}
				for p := 0; p < P; p++ {
					for i := 0; i < 20; i++ {
						kind := batch.KindDelta
						if i%5 == 0 {
							kind = batch.KindSnapshot
						}
						m := manifest(fmt.Sprintf("%s-p%d-%d", name, p, i), p, P, kind)
						m.Publication = pubs[i/5%len(pubs)]
						if _, err := e.client.RegisterBatch(ctx, m); err != nil {
							b.Fatal(err)
						}
					}
				}
				start := time.Now()
				for i := 0; i < b.N; i++ {
					r, err := e.client.GetRouting(ctx)
					if err != nil || len(r.Publications) != len(pubs) {
						b.Fatalf("routing: %v, %d publications", err, len(r.Publications))
					}
				}
				per[name] = time.Since(start) / time.Duration(b.N)
				b.ReportMetric(float64(per[name].Microseconds())/1000, name+"_ms/op")
			}
			b.ReportMetric(float64(per["publications"])/float64(per["legacy"]), "publications/legacy")
		})
	}
}
