package lorry

// Fresh records riding bulk batches are never held behind bulk work: a
// hanging riding upload, other partitions' bulk builds, and the loss
// counter seeing riders in flight.

import (
	"context"
	"io"
	"regexp"
	"strings"
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
	only    string // when set, only keys under this prefix are held
}

func (g *gateObjects) Put(ctx context.Context, key string, r io.Reader, size int64, opts *objstore.PutOptions) error {
	if batchPrefix.MatchString(key) && strings.HasPrefix(key, g.only) {
		g.blocked.Add(1)
		select {
		case <-g.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.Store.Put(ctx, key, r, size, opts)
}

// TestFreshNotHeldByHangingRidingBatch: fresh records must never be stuck
// behind bulk work. With the default FreshRideWait,
// fresh records ride the partition's next bulk batch; while that batch
// flies the whole fresh lane is held (nextFresh: lp.bfl.pl.fresh), so when
// the bulk batch's upload hangs (a slow or failing object store for large
// puts, the build semaphore that only bulk batches queue on), the riders
// AND every fresh record queued after them wait for it, far past
// FreshRideWait. TestFreshWhileBulkInFlight checks this guarantee with
// riding off. Here: riding on (the default),
// the riding batch's upload hangs, every fresh record is 10s old on the
// FAKE clock (ten times FreshRideWait): they must be delivered (the fresh
// position past them) while the bulk upload still hangs.
func TestFreshNotHeldByHangingRidingBatch(t *testing.T) {
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

// TestFreshNotHeldByOtherPartitionsBulk (the same hold without any fault
// in this partition): a batch holding bulk records builds and
// uploads only with a slot of the worker's build semaphore (Parallelism,
// default 4; uploadFiles), which a batch of fresh records only skips "so it
// does not queue behind them". A riding batch holds bulk records, so the
// riders, and every fresh record of the partition after them, queue behind
// the other partitions' bulk builds and uploads. Here Parallelism 1,
// partition 1's bulk upload hangs holding the slot; partition 0's fresh
// records, 10s old on the FAKE clock, must still be delivered. (With
// FreshRideWait -1 they are.)
func TestFreshNotHeldByOtherPartitionsBulk(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	k0, k1 := keysIn(12, 0, 2), keysIn(8, 1, 2)
	var rs []rec
	for i, k := range k1 {
		rs = append(rs, rec{key: k, val: val(i, 500), pri: pillar.PriorityBulk})
	}
	e.enqueue(rs...) // partition 1: bulk 0-7, its upload hangs
	g := &gateObjects{Store: e.objs, gate: make(chan struct{}), only: "batches/p00001/"}
	fc := clock.NewFake(time.Now())
	o := e.opts("w")
	o.Objects, o.Now = g, fc.Now
	o.LeaseTTL = time.Hour // the fake clock jumps; the lease must not lapse by it
	o.MaxBatchRecords, o.Parallelism = 4, 1
	runWorker(t, e.worker(o))
	waitFor(t, "partition 1's bulk upload hanging (holding the only build slot)", 20*time.Second, func() bool { return g.blocked.Load() > 0 })
	rs = nil
	for i, k := range k0[:8] {
		rs = append(rs, rec{key: k, val: val(i, 500), pri: pillar.PriorityBulk})
	}
	e.enqueue(rs...)                                                                // partition 0: bulk 0-7
	e.enqueue(rec{key: k0[8], val: val(80, 50)}, rec{key: k0[9], val: val(90, 50)}) // fresh 8, 9
	// The worker's shared queue snapshot is renewed by the (FAKE) clock:
	// step it until partition 0's first bulk batch, carrying fresh 8 and 9,
	// is recorded.
	for i := 0; ; i++ {
		if pd := e.state(0).Pending; pd != nil {
			if pd.Last != 3 || pd.FreshLast != 9 {
				t.Fatalf("partition 0's first batch %+v, want [0,3] with fresh 8 and 9 riding", pd)
			}
			break
		}
		if i == 500 {
			t.Fatalf("partition 0's first bulk batch not recorded: %+v", e.state(0))
		}
		fc.Advance(time.Millisecond)
		time.Sleep(10 * time.Millisecond)
	}
	e.enqueue(rec{key: k0[10], val: val(100, 50)}, rec{key: k0[11], val: val(110, 50)}) // fresh 10, 11
	fc.Advance(10 * time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for e.state(0).FreshOffset() < 12 {
		if time.Now().After(deadline) {
			close(g.gate)
			st := e.state(0)
			t.Fatalf("partition 0: fresh records 10s old (FreshRideWait 1s) undelivered while partition 1's bulk upload holds the build slot: fresh position %d, pending %+v, registered %v",
				st.FreshOffset(), st.Pending, e.sources(0))
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(g.gate)
	waitFor(t, "everything delivered", 20*time.Second, func() bool {
		s0, s1 := e.state(0), e.state(1)
		return s0.Offset == 12 && s0.Pending == nil && s0.FreshPending == nil && s1.Offset == 8 && s1.Pending == nil
	})
	e.laneChain(0, 12)
	got := e.checkOrder(0, k0)
	for i, want := range map[int]int{0: 0, 7: 7, 8: 80, 9: 90, 10: 100, 11: 110} {
		if counter(got[k0[i]]) != want {
			t.Fatalf("key %d: update %d, want %d; batches %v", i, counter(got[k0[i]]), want, e.sources(0))
		}
	}
}

// TestLossCounterSeesRiders: the loss counter (checkLoss) visits
// fresh records in registered batches, in fbuf and in the fresh heads, but
// not in the batch in flight; riders leave fbuf when a bulk batch takes
// them and then spend the bulk batch's whole build and upload in flight.
// Here the riding batch's upload hangs; the two riders are undelivered 10s
// after their commit with LossAfter 3s (FAKE clock): the alert must count
// them. (The backlog and oldest-age metrics, setBacklog, leave them out the
// same way.)
func TestLossCounterSeesRiders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	ks := keysIn(10, 0, 1)
	var rs []rec
	for i, k := range ks[:8] {
		rs = append(rs, rec{key: k, val: val(i, 500), pri: pillar.PriorityBulk})
	}
	e.enqueue(rs...)                                                                // bulk 0-7
	e.enqueue(rec{key: ks[8], val: val(80, 50)}, rec{key: ks[9], val: val(90, 50)}) // fresh 8, 9
	g := &gateObjects{Store: e.objs, gate: make(chan struct{})}
	defer close(g.gate)
	fc := clock.NewFake(time.Now())
	o := e.opts("w")
	o.Objects, o.Now = g, fc.Now
	o.LeaseTTL = time.Hour // the fake clock jumps; the lease must not lapse by it
	o.MaxBatchRecords, o.LossAfter = 4, 3*time.Second
	w := e.worker(o)
	runWorker(t, w)
	waitFor(t, "the riding batch [0,3]+fresh to 9 recorded, its upload hanging", 20*time.Second, func() bool {
		st := e.state(0)
		return st.Pending != nil && st.Pending.Last == 3 && st.Pending.FreshLast == 9 && g.blocked.Load() > 0
	})
	fc.Advance(10 * time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for w.Lost() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("loss counter %d, want 2: fresh records 8 and 9 (riding the hanging batch) are undelivered 10s after their commit, LossAfter 3s; fresh position %d",
				w.Lost(), e.state(0).FreshOffset())
		}
		fc.Advance(100 * time.Millisecond)
		time.Sleep(10 * time.Millisecond)
	}
}
