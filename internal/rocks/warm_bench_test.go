package rocks

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"
)

// BenchmarkMultiGetDuringIngest: one database of 600 keys (values 100 B–100
// KiB, ~30 MB, like one partition of `pillar bench ingest`), 12-key
// MultiGets every 5 ms while 16 delta files a second of 62 overwrites each
// are ingested (1,000 updates/s, compacted at 8 L0 files), in alternating 1 s
// phases with and without ingest, so both see the same machine; with the
// Warmer ("warm": each delta read into the cache before its ingest,
// compaction outputs before install) and without ("cold"). Reports the
// MultiGet p50/p99/p99.9 during ingest over those without.
//
//	go test -run '^$' -bench MultiGetDuringIngest -benchtime 1x ./internal/rocks/
func BenchmarkMultiGetDuringIngest(b *testing.B) {
	for _, warm := range []bool{true, false} {
		name := map[bool]string{true: "warm", false: "cold"}[warm]
		b.Run(name, func(b *testing.B) {
			for range b.N {
				multiGetDuringIngest(b, warm)
			}
		})
	}
}

func multiGetDuringIngest(b *testing.B, warm bool) {
	dir := b.TempDir()
	cache := grocksdb.NewLRUCache(256 << 20)
	defer cache.Destroy()
	o, err := TableConfig{}.Options(cache)
	if err != nil {
		b.Fatal(err)
	}
	defer o.Destroy()
	o.SetCreateIfMissing(true)
	o.SetMaxOpenFiles(-1)
	o.SetLevelCompactionDynamicLevelBytes(true)
	o.SetLevel0FileNumCompactionTrigger(8)
	o.SetMaxBackgroundJobs(2)
	Background{}.Apply(o)
	var w *Warmer
	if warm {
		if w, err = NewWarmer(o, true, 64<<20); err != nil {
			b.Fatal(err)
		}
		defer w.Destroy()
	}
	db, err := grocksdb.OpenDb(o, filepath.Join(dir, "db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	const n = 600
	val := func(k, v int) []byte {
		r := rand.New(rand.NewPCG(uint64(k), uint64(v)))
		out := make([]byte, 100+r.IntN(100<<10))
		for i := range out {
			out[i] = byte(r.Uint32())
		}
		return out
	}
	write := func(name string, keys []int, v int) string {
		p := filepath.Join(dir, name)
		writeRows(b, p, len(keys), func(i int) ([]byte, []byte) { return key(keys[i]), val(keys[i], v) })
		return p
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	snap, delta := IngestOptions(true), IngestOptions(false)
	defer snap.Destroy()
	defer delta.Destroy()
	if err := db.IngestExternalFile([]string{write("base.sst", all, 0)}, snap); err != nil {
		b.Fatal(err)
	}
	const phases, phase = 10, time.Second
	var deltas []string
	for j := range phases / 2 * 16 {
		ks := rand.Perm(n)[:62]
		slices.Sort(ks)
		deltas = append(deltas, write(fmt.Sprintf("d%03d.sst", j), ks, 1))
	}
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	for k := range n { // warm the base, as a serving node's reads would
		if _, err := db.GetBytes(ro, key(k)); err != nil {
			b.Fatal(err)
		}
	}
	var ingesting atomic.Bool
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for j := 0; ; {
			select {
			case <-stop:
				return
			case <-time.After(time.Second / 16):
			}
			if !ingesting.Load() || j >= len(deltas) {
				continue
			}
			if w != nil {
				if _, err := w.WarmFile(deltas[j]); err != nil {
					b.Error(err)
				}
			}
			if err := db.IngestExternalFile([]string{deltas[j]}, delta); err != nil {
				b.Error(err)
			}
			j++
		}
	}()
	b.ResetTimer()
	var lat [2][]time.Duration // without, with ingest
	keys := make([][]byte, 12)
	for p := range phases {
		on := p%2 == 1
		ingesting.Store(on)
		for end := time.Now().Add(phase); time.Now().Before(end); {
			for i := range keys {
				keys[i] = key(rand.IntN(n))
			}
			t0 := time.Now()
			vs, err := db.MultiGet(ro, keys...)
			d := time.Since(t0)
			if err != nil {
				b.Fatal(err)
			}
			vs.Destroy()
			lat[map[bool]int{false: 0, true: 1}[on]] = append(lat[map[bool]int{false: 0, true: 1}[on]], d)
			time.Sleep(5 * time.Millisecond)
		}
	}
	b.StopTimer()
	close(stop)
	<-done
	q := func(l []time.Duration, f float64) time.Duration { return l[int(f*float64(len(l)-1))] }
	for i := range lat {
		slices.Sort(lat[i])
	}
	for _, x := range []struct {
		name string
		f    float64
	}{{"p50", 0.5}, {"p99", 0.99}, {"p99.9", 0.999}} {
		b.ReportMetric(float64(q(lat[1], x.f))/float64(q(lat[0], x.f)), x.name+"-ingest/idle")
		b.ReportMetric(float64(q(lat[1], x.f).Microseconds()), x.name+"-ingest-µs")
	}
	if w != nil {
		b.ReportMetric(float64(w.Stats().CompactionFiles), "compactions-warmed")
	}
}
