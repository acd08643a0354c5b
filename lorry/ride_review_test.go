package lorry

// Review of the riding change (issue #24: 3f919f4, 1aeae1d, cecb408) by
// rev2: each test here names one finding of /work/notes/rev2.md.

import (
	"context"
	"io"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pillarkit/pillar/internal/clock"
	"github.com/pillarkit/pillar/internal/objstore"
	"github.com/pillarkit/pillar/pillar"
)

// batchPrefix matches the object keys of every ordinary batch, riding ones
// ("-f<last>") included (faultObjects' ordinaryPrefix leaves those out).
var batchPrefix = regexp.MustCompile(`^batches/p\d{5}/lorry-[0-9a-f]+-p\d{5}-\d+-\d+(-f\d+)?/`)

// gateObjects holds every Put into an ordinary batch's prefix (riding
// batches included) until gate is closed.
type gateObjects struct {
	objstore.Store
	gate    chan struct{}
	blocked atomic.Int64
}

func (g *gateObjects) Put(ctx context.Context, key string, r io.Reader, size int64, opts *objstore.PutOptions) error {
	if batchPrefix.MatchString(key) {
		g.blocked.Add(1)
		select {
		case <-g.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.Store.Put(ctx, key, r, size, opts)
}

// TestReviewFreshNotHeldByHangingRidingBatch (R1): fresh records must never
// be stuck behind bulk work (issue #24). With the default FreshRideWait,
// fresh records ride the partition's next bulk batch; while that batch
// flies the whole fresh lane is held (nextFresh: lp.bfl.pl.fresh), so when
// the bulk batch's upload hangs (a slow or failing object store for large
// puts, the build semaphore that only bulk batches queue on), the riders
// AND every fresh record queued after them wait for it, far past
// FreshRideWait. TestFreshWhileBulkInFlight checks exactly this guarantee,
// but was changed to run with riding off. Here: riding on (the default),
// the riding batch's upload hangs, every fresh record is 10s old on the
// FAKE clock (ten times FreshRideWait): they must be delivered (the fresh
// position past them) while the bulk upload still hangs.
func TestReviewFreshNotHeldByHangingRidingBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	ks := keysIn(12, 0, 1)
	var rs []rec
	for i, k := range ks[:8] {
		rs = append(rs, rec{key: k, val: val(i, 500), pri: pillar.PriorityBulk})
	}
	e.enqueue(rs...)                                                                // bulk 0-7
	e.enqueue(rec{key: ks[8], val: val(80, 50)}, rec{key: ks[9], val: val(90, 50)}) // fresh 8, 9
	g := &gateObjects{Store: e.objs, gate: make(chan struct{})}
	fc := clock.NewFake(time.Now())
	o := e.opts("w")
	o.Objects, o.Now = g, fc.Now
	o.LeaseTTL = time.Hour // the fake clock jumps; the lease must not lapse by it
	o.MaxBatchRecords = 4  // FreshRideWait: the default (1s)
	runWorker(t, e.worker(o))
	waitFor(t, "the riding batch [0,3]+fresh to 9 recorded, its upload hanging", 20*time.Second, func() bool {
		st := e.state(0)
		return st.Pending != nil && st.Pending.First == 0 && st.Pending.Last == 3 && st.Pending.FreshLast == 9 && g.blocked.Load() > 0
	})
	e.enqueue(rec{key: ks[10], val: val(100, 50)}, rec{key: ks[11], val: val(110, 50)}) // fresh 10, 11
	fc.Advance(10 * time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for e.state(0).FreshOffset() < 12 {
		if time.Now().After(deadline) {
			close(g.gate)
			st := e.state(0)
			t.Fatalf("fresh records 10s old (FreshRideWait 1s) still undelivered while the riding bulk batch's upload hangs: fresh position %d, pending %+v, registered %v",
				st.FreshOffset(), st.Pending, e.sources(0))
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(g.gate)
	waitFor(t, "everything delivered", 20*time.Second, func() bool {
		st := e.state(0)
		return st.Offset == 12 && st.Pending == nil && st.FreshPending == nil
	})
	e.laneChain(0, 12)
	got := e.checkOrder(0, ks)
	for i, want := range map[int]int{0: 0, 7: 7, 8: 80, 9: 90, 10: 100, 11: 110} {
		if counter(got[ks[i]]) != want {
			t.Fatalf("key %d: update %d, want %d; batches %v", i, counter(got[ks[i]]), want, e.sources(0))
		}
	}
}
