package lorry

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// TestChaosWorkers runs several workers on one store while records keep
// arriving, and keeps killing (no lease given back), stopping and starting
// workers at random. In the end every partition's registered batches cover
// its queue exactly once, in order, and the replicas serve the newest value
// of every key.
func TestChaosWorkers(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("chaos test")
	}
	const parts = 4
	e := newEnv(t, parts)
	type running struct {
		w    *Worker
		dead *atomic.Bool
		stop func()
	}
	seq := 0
	start := func() *running {
		seq++
		o := e.opts(fmt.Sprintf("w%d", seq))
		o.MaxBatchAge = 20 * time.Millisecond
		o.MaxBatchBytes = 6 * 164
		dead := &atomic.Bool{}
		o.hook = func(string, int) error {
			if dead.Load() {
				return errors.New("killed")
			}
			return nil
		}
		w := e.worker(o)
		return &running{w: w, dead: dead, stop: runWorker(t, w)}
	}
	workers := []*running{start(), start()}
	var zombies []*running
	var universe []string
	want := map[string]string{}
	counts := make([]int64, parts)
	keys := make([][]string, parts)
	for p := range keys {
		keys[p] = keysIn(8, p, parts)
		universe = append(universe, keys[p]...)
	}
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("LORRY_CHAOS_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (rerun with LORRY_CHAOS_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	deadline := time.Now().Add(3 * time.Second)
	for round := 0; time.Now().Before(deadline); round++ {
		var rs []rec
		for i := 0; i < 6; i++ {
			p := rng.IntN(parts)
			k := keys[p][rng.IntN(len(keys[p]))]
			if rng.IntN(5) == 0 {
				rs = append(rs, rec{key: k, del: true})
				delete(want, k)
			} else {
				v := fmt.Sprintf("r%d-%d%s", round, i, "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789")
				rs = append(rs, rec{key: k, val: v})
				want[k] = v
			}
			counts[p]++
		}
		e.enqueue(rs...)
		if round%3 == 2 {
			i := rng.IntN(len(workers))
			switch rng.IntN(4) {
			case 0: // kill: it stops renewing and never gives its leases back
				workers[i].dead.Store(true)
				zombies = append(zombies, workers[i])
				workers = append(workers[:i], workers[i+1:]...)
			case 1, 2: // clean stop
				workers[i].stop()
				workers = append(workers[:i], workers[i+1:]...)
			}
			if len(workers) < 3 {
				workers = append(workers, start())
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	waitFor(t, "every partition delivered", 30*time.Second, func() bool {
		for p := 0; p < parts; p++ {
			if e.state(p).Offset != counts[p] {
				return false
			}
		}
		return true
	})
	for _, r := range append(workers, zombies...) {
		r.stop()
	}
	lost := int64(0)
	for p := 0; p < parts; p++ {
		e.checkChain(p, counts[p])
	}
	for _, r := range workers {
		lost += r.w.Stats().Lost
	}
	t.Logf("%d workers started, %d killed; records per partition %v; leases lost by survivors %d", seq, len(zombies), counts, lost)
	e.checkServed(want, universe)
}
