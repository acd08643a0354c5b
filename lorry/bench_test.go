package lorry

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pillarkit/pillar/cobbled"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/sstbuilder"
)

// Benchmark knobs (environment variables, so `go test -bench` stays short by
// default):
//
//	LORRY_BENCH_RATE     updates/s offered by the producer   (default 1000)
//	LORRY_BENCH_SECONDS  how long the producer runs           (default 5)
//	LORRY_BENCH_VALUE    bytes per record value               (default 51200)
//	LORRY_BENCH_AGE      Lorry's MaxBatchAge                  (default 100ms)
//	LORRY_BENCH_RECORDS  records for the throughput benchmark (default 600)
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// randomValues returns a source of distinct, incompressible values: slices
// of one random buffer at varying offsets, stamped with an id.
type valueSource struct {
	buf  []byte
	size int
}

func newValueSource(size int) *valueSource {
	buf := make([]byte, size*4)
	for i := range buf {
		buf[i] = byte(rand.Uint32())
	}
	return &valueSource{buf: buf, size: size}
}

func (v *valueSource) value(id uint64) []byte {
	off := int(id*7919) % (len(v.buf) - v.size)
	out := append([]byte(nil), v.buf[off:off+v.size]...)
	binary.BigEndian.PutUint64(out, id)
	return out
}

// BenchmarkEndToEndLatency measures, with three cobbled replicas per
// partition ingesting from a real control plane, the delay from the store
// commit that enqueues an update to the update being applied on all three
// replicas, at a steady offered rate of updates. Reported: p50/p99/max
// latency in ms, the achieved update rate, and the ratio of p50 to the batch
// age (the floor Lorry adds on purpose).
//
//	go test -run XXX -bench EndToEndLatency -benchtime 1x ./lorry/
//	LORRY_BENCH_SECONDS=20 go test -run XXX -bench EndToEndLatency -benchtime 1x ./lorry/
func BenchmarkEndToEndLatency(b *testing.B) {
	rate := envInt("LORRY_BENCH_RATE", 1000)
	seconds := envInt("LORRY_BENCH_SECONDS", 5)
	size := envInt("LORRY_BENCH_VALUE", 50<<10)
	age := envDuration("LORRY_BENCH_AGE", 100*time.Millisecond)
	const parts = 8
	for i := 0; i < b.N; i++ {
		runLatency(b, parts, rate, seconds, size, age)
	}
}

type benchUpdate struct {
	p      int
	offset int64
	key    string
	at     time.Time
}

func runLatency(b *testing.B, parts, rate, seconds, size int, age time.Duration) {
	e := newEnvRetain(b, parts, time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Three serving nodes, in-process, each ingesting through the control
	// plane exactly as `pillar cobbled serve` does.
	var nodes []*cobbled.Node
	var nodeWG sync.WaitGroup
	for i := 0; i < 3; i++ {
		n, err := cobbled.Open(ctx, cobbled.Options{ID: fmt.Sprintf("n%d", i), Zone: fmt.Sprintf("z%d", i),
			Addr: fmt.Sprintf("127.0.0.1:%d", 1+i), Dir: filepath.Join(e.dir, fmt.Sprintf("n%d", i)),
			CacheBytes: 32 << 20, Control: cobbled.FromControlClient(e.ctl), Objects: e.objs.Store,
			LongPoll: 5 * time.Second, Heartbeat: 200 * time.Millisecond})
		must(b, err)
		nodes = append(nodes, n)
		nodeWG.Add(1)
		go func() { defer nodeWG.Done(); n.Run(ctx) }()
	}
	defer func() {
		cancel()
		nodeWG.Wait()
		for _, n := range nodes {
			n.Close()
		}
	}()
	go e.srv.Run(ctx)
	waitFor(b, "three replicas per partition", 30*time.Second, func() bool {
		r, err := e.ctl.GetRouting(ctx)
		if err != nil || len(r.Replicas) != parts {
			return false
		}
		for _, reps := range r.Replicas {
			if len(reps) != 3 {
				return false
			}
		}
		for _, n := range nodes {
			if len(n.Stats().Held) != parts {
				return false
			}
		}
		return true
	})

	o := e.opts("bench")
	o.MaxBatchAge, o.PollInterval, o.LeaseTTL = age, 5*time.Millisecond, 10*time.Second
	w := e.worker(o)
	stopWorker := runWorker(b, w)
	defer stopWorker()
	waitFor(b, "worker holds every partition", 10*time.Second, func() bool { return len(w.Stats().Held) == parts })

	// Sampler: when each node's applied seq of each partition moves.
	type nk struct{ node, p int }
	applied := map[nk]map[int64]time.Time{}
	last := map[nk]int64{}
	var smu sync.Mutex
	sampleDone := make(chan struct{})
	sctx, stopSample := context.WithCancel(ctx)
	go func() {
		defer close(sampleDone)
		for sctx.Err() == nil {
			now := time.Now()
			for ni, n := range nodes {
				for _, ps := range n.Stats().Held {
					k := nk{ni, ps.Partition}
					smu.Lock()
					if applied[k] == nil {
						applied[k] = map[int64]time.Time{}
					}
					for s := last[k] + 1; s <= ps.AppliedSeq; s++ {
						t := now
						if !ps.LastApply.IsZero() && ps.LastApply.Before(now) {
							t = ps.LastApply
						}
						applied[k][s] = t
					}
					last[k] = max(last[k], ps.AppliedSeq)
					smu.Unlock()
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	// Producer: commits, back to back, every update due by now at the
	// offered rate (at least 10ms apart), with keys drawn from a fixed
	// universe so later updates overwrite earlier ones. Latency counts from
	// the return of the commit.
	universe := make([][]string, parts)
	for p := range universe {
		universe[p] = keysIn(500, p, parts)
	}
	vals := newValueSource(size)
	var ups []benchUpdate
	offsets := make([]int64, parts)
	latest := map[string]uint64{}
	start := time.Now()
	var id uint64
	var commitTime time.Duration
	var commits int
	b.ResetTimer()
	for time.Since(start) < time.Duration(seconds)*time.Second {
		due := uint64(time.Since(start).Seconds()*float64(rate)) - id
		if due == 0 {
			time.Sleep(time.Millisecond)
			continue
		}
		due = min(due, uint64(rate)) // at most a second's worth per commit
		tx, err := e.store.Begin(ctx)
		must(b, err)
		batchUps := make([]benchUpdate, 0, due)
		for j := uint64(0); j < due; j++ {
			id++
			p := rand.IntN(parts)
			k := universe[p][rand.IntN(len(universe[p]))]
			must(b, tx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(p), PageKey: k, Op: pillar.OpPut, Value: vals.value(id), Cause: "bench"}))
			batchUps = append(batchUps, benchUpdate{p: p, offset: offsets[p], key: k})
			offsets[p]++
			latest[k] = id
		}
		cstart := time.Now()
		must(b, tx.Commit(ctx))
		now := time.Now()
		commitTime += now.Sub(cstart)
		commits++
		for _, u := range batchUps {
			u.at = now
			ups = append(ups, u)
		}
		time.Sleep(time.Until(now.Add(10 * time.Millisecond)))
	}
	produced := time.Since(start)

	// Drain: everything committed, registered and applied everywhere.
	newest := make([]int64, parts)
	waitFor(b, "every update delivered", 120*time.Second, func() bool {
		for p := 0; p < parts; p++ {
			if e.state(p).Offset != offsets[p] {
				return false
			}
		}
		return true
	})
	for p := 0; p < parts; p++ {
		bs := e.registered(p)
		if len(bs) > 0 {
			newest[p] = bs[len(bs)-1].Seq
		}
	}
	waitFor(b, "every replica caught up", 120*time.Second, func() bool {
		smu.Lock()
		defer smu.Unlock()
		for ni := range nodes {
			for p := 0; p < parts; p++ {
				if last[nk{ni, p}] < newest[p] {
					return false
				}
			}
		}
		return true
	})
	b.StopTimer()
	stopSample()
	<-sampleDone

	// Offsets → batch seq, then the time the last replica applied it.
	var lats, regLats []time.Duration
	for p := 0; p < parts; p++ {
		bs := e.registered(p)
		regAt := map[int64]time.Time{}
		for _, b := range bs {
			regAt[b.Seq] = b.RegisteredAt
		}
		seqOf := func(off int64) int64 {
			i := sort.Search(len(bs), func(i int) bool {
				var pp int
				var first, lastOff int64
				fmt.Sscanf(bs[i].Manifest.Source, "lorry:p%d:%d-%d", &pp, &first, &lastOff)
				return lastOff >= off
			})
			return bs[i].Seq
		}
		for _, u := range ups {
			if u.p != p {
				continue
			}
			s := seqOf(u.offset)
			var all time.Time
			for ni := range nodes {
				t, ok := applied[nk{ni, p}][s]
				if !ok {
					b.Fatalf("node %d partition %d: seq %d never seen applied", ni, p, s)
				}
				if t.After(all) {
					all = t
				}
			}
			lats = append(lats, max(0, all.Sub(u.at)))
			regLats = append(regLats, max(0, regAt[s].Sub(u.at)))
		}
	}
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	sort.Slice(regLats, func(i, j int) bool { return regLats[i] < regLats[j] })
	pct := func(q float64) time.Duration { return lats[min(len(lats)-1, int(q*float64(len(lats))))] }
	regPct := func(q float64) time.Duration { return regLats[min(len(regLats)-1, int(q*float64(len(regLats))))] }

	// The newest value of a sample of keys is readable on every replica.
	checked := 0
	for k, want := range latest {
		if checked == 200 {
			break
		}
		checked++
		raw, _ := hex.DecodeString(k)
		p := pillar.Partition(raw, parts)
		for ni, n := range nodes {
			must(b, n.MultiGet(p, [][]byte{raw}, func(_ int, v []byte, found bool) {
				if !found || len(v) != size || binary.BigEndian.Uint64(v) != want {
					b.Fatalf("node %d key %s: found %v, want update %d", ni, k, found, want)
				}
			}))
		}
	}
	st := w.Stats()
	b.ReportMetric(float64(pct(0.50).Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(pct(0.99).Microseconds())/1000, "p99_ms")
	b.ReportMetric(float64(lats[len(lats)-1].Microseconds())/1000, "max_ms")
	b.ReportMetric(float64(regPct(0.50).Microseconds())/1000, "registered_p50_ms")
	b.ReportMetric(float64(regPct(0.99).Microseconds())/1000, "registered_p99_ms")
	b.ReportMetric(float64(len(ups))/produced.Seconds(), "updates/s")
	b.ReportMetric(float64(pct(0.50))/float64(age), "p50/batch_age")
	b.ReportMetric(float64(st.Records)/float64(max(1, st.Batches)), "records/batch")
	b.Logf("producer: %d commits, %v each on average (the store's commit lock is held for most of it)", commits, commitTime/time.Duration(max(1, commits)))
	b.Logf("lorry time per batch: read %v, pending %v, build+upload %v, register %v, commit %v",
		st.ReadTime/time.Duration(max(1, st.Batches)), st.PendingTime/time.Duration(max(1, st.Batches)),
		st.UploadTime/time.Duration(max(1, st.Batches)), st.RegisterTime/time.Duration(max(1, st.Batches)),
		st.CommitTime/time.Duration(max(1, st.Batches)))
	b.Logf("offered %d updates/s of %d B for %ds: achieved %.0f/s, %d updates in %d batches; latency to all 3 replicas p50 %v p99 %v max %v (batch age %v); to registration p50 %v p99 %v",
		rate, size, seconds, float64(len(ups))/produced.Seconds(), len(ups), st.Batches, pct(0.5), pct(0.99), lats[len(lats)-1], age, regPct(0.5), regPct(0.99))
}

// BenchmarkDrainThroughput measures how many records/s one worker delivers
// from a pre-filled queue (read, build, upload, register, commit), against
// the floor of building and uploading the same rows directly with
// sstbuilder, two partitions at a time (no queue, leases or control plane).
// Run with -cpu 2 for the two-core figure.
//
//	go test -run XXX -bench DrainThroughput -cpu 2 ./lorry/
func BenchmarkDrainThroughput(b *testing.B) {
	n := envInt("LORRY_BENCH_RECORDS", 600)
	size := envInt("LORRY_BENCH_VALUE", 50<<10)
	const parts = 8
	vals := newValueSource(size)
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		e := newEnv(b, parts)
		keys := make([][]string, parts)
		for p := range keys {
			keys[p] = keysIn(n/parts+1, p, parts)
		}
		ctx := context.Background()
		var rows [parts][]sstbuilder.Row
		for c := 0; c < n; c += 100 { // commits of 100 records
			tx, err := e.store.Begin(ctx)
			must(b, err)
			for j := c; j < min(n, c+100); j++ {
				p := j % parts
				k := keys[p][j/parts]
				v := vals.value(uint64(j))
				must(b, tx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(p), PageKey: k, Op: pillar.OpPut, Value: v}))
				raw, _ := hex.DecodeString(k)
				rows[p] = append(rows[p], sstbuilder.Row{Key: raw, Seq: int64(j), Value: v})
			}
			must(b, tx.Commit(ctx))
		}
		o := e.opts("bench")
		o.Parallelism = 2
		w := e.worker(o)

		// Floor: the same rows, built and uploaded directly, two
		// partitions at a time like the worker (Parallelism 2).
		b.StartTimer()
		floorStart := time.Now()
		var fwg sync.WaitGroup
		sem := make(chan struct{}, 2)
		for p := 0; p < parts; p++ {
			fwg.Add(1)
			sem <- struct{}{}
			go func(p int) {
				defer fwg.Done()
				defer func() { <-sem }()
				r := rows[p]
				sort.Slice(r, func(i, j int) bool { return string(r[i].Key) < string(r[j].Key) })
				m, paths, err := sstbuilder.BuildPartition(ctx, sstbuilder.SliceRows(r), &sstbuilder.BuildOptions{
					Dir: filepath.Join(e.dir, "floor", strconv.Itoa(p)), Partition: p, Partitions: parts, Kind: batch.KindDelta,
					BatchID: fmt.Sprintf("floor-%d", p)})
				if err == nil {
					_, err = sstbuilder.Upload(ctx, e.objs, m, paths)
				}
				if err != nil {
					b.Error(err)
				}
			}(p)
		}
		fwg.Wait()
		floor := time.Since(floorStart)

		start := time.Now()
		res, err := w.Drain(ctx)
		must(b, err)
		took := time.Since(start)
		b.StopTimer()
		if res.Stats.Records != int64(n) {
			b.Fatalf("delivered %d of %d", res.Stats.Records, n)
		}
		b.ReportMetric(float64(n)/took.Seconds(), "records/s")
		b.ReportMetric(float64(n)*float64(size)/took.Seconds()/(1<<20), "MiB/s")
		b.ReportMetric(float64(n)/floor.Seconds(), "floor_records/s")
		b.ReportMetric(floor.Seconds()/took.Seconds(), "lorry/floor")
		st := res.Stats
		b.Logf("%d records of %d B in %d partitions: lorry %v (%d batches), floor (build+upload only) %v; lorry step totals: read %v, pending %v, build+upload %v, register %v, commit %v",
			n, size, parts, took, st.Batches, floor, st.ReadTime, st.PendingTime, st.UploadTime, st.RegisterTime, st.CommitTime)
	}
}
