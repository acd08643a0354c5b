package lorry

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/pillarkit/pillar/internal/clock"
	"github.com/pillarkit/pillar/pillar"
)

// head is a queue record without its value, as the head scan sees it.
type head struct {
	off int64
	at  int64  // commit time, unix ms
	key string // ident: publication and page key
}

// ident names what per-key order is about: a page key in one publication
// (each publication is a database of its own on the replicas, so a fresh
// record of the live one supersedes nothing of a candidate's republish).
func ident(r *pillar.ExportRecord) string { return r.Publication + "\x00" + r.PageKey }

// plan is a batch about to be delivered: its range and lane, and the
// records it holds (nil: read them again from the queue).
type plan struct {
	pend  Pending
	recs  []pillar.ExportRecord
	fresh bool      // taken from the fresh lane's buffer
	start time.Time // when it was taken (its delivery time, for the shares)
	flown bool      // recorded as pending and uploaded in the background
	// demoted: the flight restarted without its riders (demote), at
	// flightStart (its sample of Stats.FlightTime is from then: the time
	// before counts the build thrown away).
	demoted     bool
	flightStart time.Time
	retries     int // failed uploads of the flight, retried in the background
}

// bytes is the plan's record bytes (as the read-ahead budget counts them).
func (pl *plan) bytes() int64 {
	var n int64
	for _, r := range pl.recs {
		n += int64(len(r.Value)) + 64
	}
	return n
}

// flight is the ordinary batch whose SST is built and uploaded in the
// background (pre) while the loop goes on delivering fresh batches; keys
// are the page keys it holds.
type flight struct {
	pl   *plan
	pre  *prefetch
	keys map[string]bool
}

func newFlight(pl *plan, pre *prefetch) *flight {
	f := &flight{pl: pl, pre: pre, keys: make(map[string]bool, len(pl.recs))}
	for _, r := range pl.recs {
		f.keys[ident(&r)] = true
	}
	return f
}

// uploaded reports whether the flight's files are uploaded (or failed).
func (f *flight) uploaded() bool {
	select {
	case <-f.pre.done:
		return true
	default:
		return false
	}
}

// bulk reports whether the batch is bulk work (for the lanes' shares).
func (pl *plan) bulk() bool {
	for _, r := range pl.recs {
		if r.IsBulk() {
			return true
		}
	}
	return false
}

// loop is one held partition's delivery state in memory. Only the
// partition's goroutine touches it.
//
// Let O be the committed Offset and F the fresh position (FreshOffset). The
// head scan reads record heads (no values) from O on and sorts them: bulk
// heads at or above O into bulk, fresh heads at or above F into fresh
// (undelivered), fresh heads in [O, F) into freshMax (delivered: the newest
// such offset per key, which supersedes older bulk records of the key).
// The fresh lane fetches the values of the fresh heads into fbuf; the bulk
// lane reads [bnext, limit) into bbuf, where limit is the first undelivered
// fresh record (so a bulk batch never holds one and never has to wait for
// one).
type loop struct {
	w  *Worker
	pt *part
	l  *lease

	scan    int64 // next offset the head scan reads
	scanEnd bool  // the last scan reached the queue's end (or drainTo)
	// scanGoal is the queue's end (or drainTo) as the partition's first
	// head scan saw it (-1: not read yet); scanDone: the scan reached it,
	// or stopped at MaxScanAhead. The bulk lane reads nothing before
	// (TestBulkWaitsForHeadScan): a bulk batch planned while the scan
	// still runs holds back the fresh records it finds later (they wait
	// on every replica behind it). Only the end first seen counts: under
	// steady fresh traffic the current end moves on forever.
	scanGoal  int64
	scanDone  bool
	scanStart time.Time
	bulk      []head
	fresh     []head // undelivered fresh heads whose values are not in fbuf
	freshMax  map[string]int64

	fbuf   []pillar.ExportRecord
	fbytes int64
	bbuf   []pillar.ExportRecord
	bbytes int64
	// bcut: bbuf ends where the next bulk record belongs to another
	// publication; the bulk batch is complete (a batch carries one
	// publication, see batch.Manifest.Publication).
	bcut  bool
	bnext int64
	bseen time.Time // when bbuf's range got its first record
	// bulkMean is the bulk records' mean size (value + 64) so far: reads
	// ask for about what the batch still takes.
	bulkMean int64

	inflight  int64      // bytes of the batches being delivered
	bfl       *flight    // the ordinary batch uploading in the background
	held      bool       // the fresh lane waits for bfl (a key in common, or bulk's share)
	refresh   bool       // the last contents call made a refresh
	lastFresh time.Time  // when the scan last found an undelivered fresh record
	share     [2]float64 // decayed record bytes delivered: [fresh-only, with bulk]
	shareAt   time.Time
	planned   *plan // the follow-up the last commit recorded as pending
	pre       *prefetch
	// fplanned is the fresh batch the last fresh commit recorded as
	// FreshPending (its files uploading in fpre).
	fplanned *plan
	fpre     *prefetch

	lossAt   time.Time
	progress bool // the last fill read something
}

func (lp *loop) O() int64 { return lp.l.st.Offset }
func (lp *loop) F() int64 { return lp.l.st.FreshOffset() }

// readHeads reads up to limit heads of partition p from offset from (never
// at or beyond drainTo when set), with the queue's end.
func (w *Worker) readHeads(ctx context.Context, p int, from, drainTo int64, limit int) ([]pillar.ExportRecord, int64, error) {
	sn, release, end, err := w.queueView(ctx, p, drainTo, false)
	if err != nil {
		return nil, from, err
	}
	defer release()
	n := min(int64(limit), end-from)
	if n <= 0 {
		return nil, end, nil
	}
	var recs []pillar.ExportRecord
	if hr, ok := sn.(pillar.QueueHeadReader); ok {
		recs, err = hr.ReadQueueHeads(ctx, p, from, int(n))
	} else {
		recs, err = sn.ReadQueue(ctx, p, from, int(n))
		for i := range recs {
			recs[i].Value = nil
		}
	}
	if err != nil {
		return nil, end, fmt.Errorf("lorry: partition %d: read queue heads at %d: %w", p, from, err)
	}
	return recs, end, nil
}

// init scans what was delivered out of order before: the heads of [O, F),
// so freshMax and the bulk heads there are known again.
func (lp *loop) init() {
	lp.scan, lp.bnext = lp.O(), lp.O()
	lp.scanGoal, lp.scanStart = -1, lp.w.now()
	lp.freshMax = map[string]int64{}
	lp.w.tr.mu.Lock()
	lp.w.tr.part(lp.pt.id) // the replica watcher reports its lag from now on
	lp.w.tr.mu.Unlock()
	lp.lossAt, lp.shareAt = lp.w.now(), lp.w.now()
}

// scanStep reads one chunk of heads. It reports whether it read any.
func (lp *loop) scanStep(ctx context.Context) (bool, error) {
	w, p := lp.w, lp.pt.id
	// Below F every head must be known (freshMax decides supersession);
	// beyond it the scan keeps at most MaxScanAhead.
	if lp.scan >= lp.F() && len(lp.bulk)+len(lp.fresh)+len(lp.fbuf) >= w.o.MaxScanAhead {
		lp.scanEnd = true
		lp.headScanDone("MaxScanAhead reached")
		return false, nil
	}
	start := w.now()
	hs, end, err := w.readHeads(ctx, p, lp.scan, lp.pt.drainTo, w.o.HeadChunk)
	if err != nil {
		return false, err
	}
	took := w.now().Sub(start)
	w.count(func(s *Stats) { s.Scanned += int64(len(hs)); s.ScanTime += took })
	if lp.scanGoal < 0 {
		lp.scanGoal = end
	}
	F := lp.F()
	for _, h := range hs {
		if h.Offset != lp.scan {
			return false, fmt.Errorf("lorry: partition %d: queue returned offset %d, want %d", p, h.Offset, lp.scan)
		}
		hd := head{off: h.Offset, at: h.CommittedAt, key: ident(&h)}
		switch {
		case h.IsBulk():
			lp.bulk = append(lp.bulk, hd)
		case h.Offset < F:
			lp.freshMax[hd.key] = max(lp.freshMax[hd.key], h.Offset)
		default:
			lp.fresh = append(lp.fresh, hd)
			lp.lastFresh = w.now()
		}
		lp.scan++
	}
	lp.scanEnd = lp.scan >= end
	if lp.scan >= lp.scanGoal {
		lp.headScanDone("")
	}
	return len(hs) > 0, nil
}

// headScanDone marks the first head scan done (see loop.scanGoal) and
// logs, once, what it read and how long it took.
func (lp *loop) headScanDone(why string) {
	if lp.scanDone {
		return
	}
	lp.scanDone = true
	took := lp.w.now().Sub(lp.scanStart)
	lp.w.count(func(s *Stats) { s.HeadScan = max(s.HeadScan, took) })
	args := []any{"partition", lp.pt.id, "heads", lp.scan - lp.O(), "fresh", len(lp.fresh) + len(lp.fbuf), "took", took.Round(time.Millisecond)}
	if why != "" {
		args = append(args, "stopped", why)
	}
	lp.w.o.Logger.Info("lorry: head scan done; bulk delivery starts", args...)
}

func (lp *loop) full(bytes int64, n int) bool {
	return bytes >= lp.w.o.MaxBatchBytes || n >= lp.w.o.MaxBatchRecords
}

// bulkFull reports whether the bulk lane's batch is complete: at
// MaxBatchBytes, or at FreshBulkBatchBytes while fresh records flow in the
// partition (a fresh record waits for the bulk batch in flight, so bulk
// batches are kept short then).
func (lp *loop) bulkFull() bool {
	return lp.bcut || lp.bbytes >= lp.bulkBytesLimit() || len(lp.bbuf) >= lp.w.o.MaxBatchRecords
}

// bulkBytesLimit is the bulk batch size now (see bulkFull).
func (lp *loop) bulkBytesLimit() int64 {
	if lp.w.now().Sub(lp.lastFresh) < 2*time.Second {
		return lp.w.o.FreshBulkBatchBytes
	}
	return lp.w.o.MaxBatchBytes
}

// budget reports whether the worker may buffer more bytes, added being
// what the caller read since it last published its buffer (a lane with
// nothing buffered may always take one record).
func (lp *loop) budget(have int, added int64) bool {
	return have == 0 || lp.w.bufs.Load()+added < lp.w.o.MaxBufferedBytes
}

// fetchFresh reads the values of undelivered fresh heads, in runs.
func (lp *loop) fetchFresh(ctx context.Context) (bool, error) {
	w, p := lp.w, lp.pt.id
	got := false
	for len(lp.fresh) > 0 && !lp.full(lp.fbytes, len(lp.fbuf)) && lp.budget(len(lp.fbuf), 0) {
		// A run of consecutive offsets (gaps of up to 4 bulk records are
		// read and dropped rather than paying another read).
		first, n := lp.fresh[0].off, 1
		for n < len(lp.fresh) && n < w.o.ReadChunk && lp.fresh[n].off-lp.fresh[n-1].off <= 5 {
			n++
		}
		last := lp.fresh[n-1].off
		recs, _, err := w.read(ctx, p, first, last+1, int(last+1-first), false)
		if err != nil {
			return got, err
		}
		if len(recs) == 0 {
			return got, fmt.Errorf("lorry: partition %d: queue ends before fresh record %d", p, first)
		}
		took, added := 0, int64(0)
		for _, r := range recs {
			if took == n || lp.fresh[took].off > r.Offset {
				continue
			}
			if !lp.budget(len(lp.fbuf), added) {
				break
			}
			if lp.fresh[took].off != r.Offset || r.IsBulk() {
				return got, fmt.Errorf("lorry: partition %d: offset %d: head and record disagree", p, r.Offset)
			}
			lp.fbuf = append(lp.fbuf, r)
			lp.fbytes += int64(len(r.Value)) + 64
			added += int64(len(r.Value)) + 64
			took++
			if lp.full(lp.fbytes, len(lp.fbuf)) {
				break
			}
		}
		if took == 0 {
			break // the budget is spent
		}
		lp.fresh = lp.fresh[took:]
		got = true
		lp.setBuffered()
	}
	return got, nil
}

// bulkLimit is where the bulk lane must stop: the first undelivered fresh
// record (the recorded FreshPending's range counts as undelivered), or the
// end of what the scan classified.
func (lp *loop) bulkLimit() int64 {
	limit := lp.scan
	if fp := lp.l.st.FreshPending; fp != nil {
		// A fresh batch recorded and not committed: its records count as
		// undelivered (they left the buffer).
		limit = min(limit, fp.First)
	}
	if len(lp.fbuf) > 0 {
		limit = min(limit, lp.fbuf[0].Offset)
	}
	if len(lp.fresh) > 0 {
		limit = min(limit, lp.fresh[0].off)
	}
	return limit
}

// fillBulk reads bulk records of [bnext, bulkLimit) into bbuf; fresh
// records there are delivered already and are skipped.
func (lp *loop) fillBulk(ctx context.Context) (bool, error) {
	w, p := lp.w, lp.pt.id
	got := false
	if !lp.scanDone {
		return false, nil // the head scan goes first (see loop.scanGoal)
	}
	readNow := int64(0)
	for !lp.bulkFull() && lp.budget(len(lp.bbuf), 0) {
		limit := lp.bulkLimit()
		// Skip to the next bulk head: what lies before it is fresh and
		// delivered.
		i := sort.Search(len(lp.bulk), func(i int) bool { return lp.bulk[i].off >= lp.bnext })
		if i == len(lp.bulk) || lp.bulk[i].off >= limit {
			if lp.bnext < limit {
				lp.bnext, got = limit, true
				if lp.bseen.IsZero() {
					lp.bseen = w.now()
				}
			}
			return got, nil
		}
		if lp.bnext < lp.bulk[i].off {
			lp.bnext = lp.bulk[i].off
		}
		want := min(int64(w.o.MaxBatchRecords-len(lp.bbuf)), limit-lp.bnext)
		// Read about what the batch still takes (by the records' mean
		// size so far), and while fresh records flow at most ~1 MiB a
		// call: the loop delivers fresh batches between bulk reads.
		room := lp.bulkBytesLimit() - lp.bbytes
		if flowing := w.now().Sub(lp.lastFresh) < 2*time.Second; flowing {
			room = min(room, 1<<20-readNow)
		}
		if lp.bulkMean > 0 {
			want = max(1, min(want, room/lp.bulkMean+1))
		}
		recs, _, err := w.read(ctx, p, lp.bnext, limit, int(want), false)
		if err != nil {
			return got, err
		}
		if len(recs) == 0 {
			return got, nil
		}
		added := int64(0)
		for _, r := range recs {
			if r.Offset != lp.bnext {
				return got, fmt.Errorf("lorry: partition %d: queue returned offset %d, want %d", p, r.Offset, lp.bnext)
			}
			if lp.bulkFull() || !lp.budget(len(lp.bbuf), added) {
				break
			}
			if lp.bseen.IsZero() {
				lp.bseen = w.now()
			}
			if r.IsBulk() && len(lp.bbuf) > 0 && r.Publication != lp.bbuf[0].Publication {
				lp.bcut = true
				break
			}
			if r.IsBulk() {
				lp.bbuf = append(lp.bbuf, r)
				lp.bbytes += int64(len(r.Value)) + 64
				added += int64(len(r.Value)) + 64
				lp.bulkMean = (7*lp.bulkMean + int64(len(r.Value)) + 64 + 7) / 8
			}
			lp.bnext++
		}
		readNow += added
		got = true
		lp.setBuffered()
		if w.now().Sub(lp.lastFresh) < 2*time.Second && readNow >= 1<<20 {
			return got, nil
		}
	}
	return got, nil
}

func (lp *loop) setBuffered() {
	w := lp.w
	n := lp.fbytes + lp.bbytes + lp.inflight
	w.bufs.Add(n - lp.pt.buffered.Swap(n))
	for {
		cur, peak := w.bufs.Load(), w.peak.Load()
		if cur <= peak || w.peak.CompareAndSwap(peak, cur) {
			break
		}
	}
}

// fill reads once from each source. It reports whether anything was read.
func (lp *loop) fill(ctx context.Context) bool {
	w := lp.w
	start := w.now()
	a, err1 := lp.scanStep(ctx)
	b, err2 := lp.fetchFresh(ctx)
	c, err3 := lp.fillBulk(ctx)
	if err := errors.Join(err1, err2, err3); err != nil {
		w.count(func(s *Stats) { s.Retries++ })
		w.o.Logger.Warn("lorry: read queue", "partition", lp.pt.id, "err", err)
		return false
	}
	if a || b || c {
		took := w.now().Sub(start)
		w.count(func(s *Stats) { s.ReadTime += took })
	}
	return a || b || c
}

func (lp *loop) age(at int64, seen time.Time) time.Duration {
	oldest := seen
	if at > 0 && (oldest.IsZero() || time.UnixMilli(at).Before(oldest)) {
		oldest = time.UnixMilli(at)
	}
	return lp.w.now().Sub(oldest)
}

// drained: Drain's target is reached by the scan and nothing of a lane
// waits for more.
func (lp *loop) drained() bool { return lp.pt.drainTo >= 0 && lp.scan >= lp.pt.drainTo }

// freshDue reports whether the fresh lane has a batch to close now.
func (lp *loop) freshDue() bool {
	if len(lp.fbuf) == 0 {
		return false
	}
	waiting := len(lp.fresh) > 0 && !lp.full(lp.fbytes, len(lp.fbuf))
	return lp.full(lp.fbytes, len(lp.fbuf)) || lp.age(lp.fbuf[0].CommittedAt, time.Time{}) >= lp.freshAge() ||
		(lp.drained() && !waiting && !lp.rideable())
}

// freshAge is the age at which the fetched fresh records close a batch of
// their own: MaxBatchAge, or, while a bulk batch may carry them
// (rideable), FreshRideWait (at least MaxBatchAge).
func (lp *loop) freshAge() time.Duration {
	if lp.rideable() {
		return lp.rideWait()
	}
	return lp.w.o.MaxBatchAge
}

// rideable reports whether the fetched fresh records may wait for the
// partition's next bulk batch to carry them (FreshRideWait): riding is on,
// no fresh batch is recorded (the fresh position must cover every fresh
// record before the riders), and the bulk lane is delivering: a riding
// batch in flight (the next one follows its commit), or a bulk batch in
// flight or buffered of the riders' publication. A bulk lane paused by
// replica backpressure counts too: the pause lasts until the replicas
// apply what they hold (MaxBulkUnapplied: a few hundred ms), and a fresh
// batch of its own would wait behind the same queue on every replica
// anyway; FreshRideWait bounds the wait.
func (lp *loop) rideable() bool {
	o := lp.w.o
	if o.FreshRideWait <= 0 || len(lp.fbuf) == 0 || lp.l.st.FreshPending != nil || lp.fplanned != nil {
		return false
	}
	if lp.bfl != nil && lp.bfl.pl.fresh && lp.bfl.pl.pend.FreshLast > 0 {
		return true
	}
	var pub string
	switch {
	case lp.bfl != nil && lp.bfl.pl.bulk():
		pub = lp.bfl.pl.recs[0].Publication
	case len(lp.bbuf) > 0:
		pub = lp.bbuf[0].Publication
	default:
		return false
	}
	return pub == lp.fbuf[0].Publication
}

// rideWait is how long fresh records wait for, and ride, a bulk batch.
func (lp *loop) rideWait() time.Duration { return max(lp.w.o.MaxBatchAge, lp.w.o.FreshRideWait) }

// flightDone adds a finished flight's time to Stats.FlightTime when it is a
// sample of what a bulk batch takes: not a batch of fresh records only (no
// build slot, small), not a failed upload. A demoted flight's time counts
// from its restart (skipping it, a machine where every flight
// takes longer than the bound never yields a sample, and every riding
// batch is demoted for ever).
func (lp *loop) flightDone(f *flight) {
	if f.pre.err != nil || !f.pl.bulk() {
		return
	}
	start := f.pl.start
	if f.pl.demoted {
		start = f.pl.flightStart
	}
	lp.w.noteFlight(lp.w.now().Sub(start))
}

// demoteAfter is how long a bulk batch carrying fresh records may fly
// before its riders go back to the fresh lane: twice the time a bulk
// batch's flight takes now (Stats.FlightTime: waiting for a build slot,
// building, uploading, registering), at
// least twice the ride wait and at most 8 times it. A flight that takes
// its usual time is no hang, and demoting it throws its build away: on a
// slow machine, where every flight takes longer than twice the ride wait,
// a fixed bound would demote nearly every riding batch (each then costs a
// second bulk build and a fresh batch of its own). The upper bound keeps a
// run of slow or hanging uploads, which the flight time includes, from
// holding riders for long.
func (lp *loop) demoteAfter() time.Duration {
	rw := lp.rideWait()
	return min(max(2*rw, 2*lp.w.flightTime()), 8*rw)
}

// demote takes the riders off the bulk batch in flight (bfl) when its
// upload is not done within twice the ride wait, so fresh records are never
// held behind bulk work for longer: the recorded Pending becomes the plain
// batch of the same range (FreshLast 0), the flight restarts without the
// riders, and they go back to the head of the fresh buffer, where the
// fresh lane delivers them past the flight (the bulk plan left out every
// key they hold, so the flight holds none of theirs). Nothing happens when
// the flight already writes its manifest (it registers soon). A crash
// after the state change delivers the plain batch: its range read again,
// without the riders.
func (lp *loop) demote(ctx context.Context) error {
	w, l, f := lp.w, lp.l, lp.bfl
	if !f.pre.demote() {
		return nil
	}
	old := f.pl.pend
	plain := Pending{ID: BatchID(w.storeID, lp.pt.id, old.First, old.Last), First: old.First, Last: old.Last}
	err := w.retry(ctx, l, "take the riders off a bulk batch", func() error {
		return l.cas(ctx, func(cur PartitionState) (PartitionState, error) {
			if cur.Pending != nil && *cur.Pending == plain {
				return cur, errUnchanged
			}
			if cur.Pending == nil || *cur.Pending != old {
				return cur, fmt.Errorf("lorry: partition %d: pending batch changed under %s: %w", lp.pt.id, old.ID, ErrLeaseLost)
			}
			cur.Pending = &plain
			return cur, nil
		})
	})
	if err != nil {
		return err
	}
	var bulk, riders []pillar.ExportRecord
	for _, r := range f.pl.recs {
		if !r.IsBulk() && r.Offset > old.Last {
			riders = append(riders, r)
		} else {
			bulk = append(bulk, r)
		}
	}
	var rb int64
	for _, r := range riders {
		rb += int64(len(r.Value)) + 64
	}
	lp.fbuf = append(riders, lp.fbuf...)
	lp.fbytes += rb
	lp.inflight = max(0, lp.inflight-rb)
	if len(riders) > 0 && lp.bnext > riders[0].Offset {
		// The bulk lane read on past the riders (they were to be delivered
		// first); undelivered again, they bound it (bulkLimit).
		n := sort.Search(len(lp.bbuf), func(i int) bool { return lp.bbuf[i].Offset >= riders[0].Offset })
		for _, r := range lp.bbuf[n:] {
			lp.bbytes -= int64(len(r.Value)) + 64
		}
		lp.bbuf, lp.bnext, lp.bcut = lp.bbuf[:n], riders[0].Offset, false
		if len(lp.bbuf) == 0 {
			lp.bseen = time.Time{}
		}
	}
	lp.setBuffered()
	pl := &plan{pend: plain, recs: bulk, start: f.pl.start, flown: true, demoted: true, flightStart: w.now()}
	lp.bfl = newFlight(pl, w.startFlight(ctx, lp.pt.id, plain, bulk, true))
	w.count(func(s *Stats) { s.Demoted++ })
	w.o.Logger.Info("lorry: fresh records taken off a slow bulk batch", "partition", lp.pt.id, "batch", old.ID, "riders", len(riders))
	return nil
}

// freshFlowing reports whether the scan found undelivered fresh records in
// the last 2s.
func (lp *loop) freshFlowing() bool { return lp.w.now().Sub(lp.lastFresh) < 2*time.Second }

// bulkPaused reports whether replica backpressure holds the bulk lane
// (Worker.bulkPaused; MaxBulkUnapplied only while fresh records flow).
func (lp *loop) bulkPaused() bool { return lp.w.bulkPaused(lp.pt.id, lp.freshFlowing()) }

// carryDue reports whether fetched fresh records waited out FreshRideWait
// while a complete bulk batch waits for the replicas only by
// MaxBulkUnapplied (not by MaxReplicaLag): that batch then goes and carries
// them, instead of a fresh batch of their own — one batch instead of two,
// and the replicas' queue of the partition grows by one bulk batch, at most
// once per FreshRideWait.
func (lp *loop) carryDue() bool {
	if len(lp.fbuf) == 0 || lp.bfl != nil || lp.l.st.Pending != nil || !lp.bulkFull() || !lp.rideable() ||
		lp.age(lp.fbuf[0].CommittedAt, time.Time{}) < lp.freshAge() {
		return false
	}
	lag, _ := lp.w.bulkHeld(lp.pt.id, lp.freshFlowing())
	return !lag
}

// bulkDue reports whether the bulk lane has a batch to close now.
func (lp *loop) bulkDue() bool {
	if lp.bnext <= lp.O() {
		return false
	}
	if len(lp.bbuf) == 0 {
		return true // only delivered fresh records: a refresh
	}
	if lp.bulkPaused() && lp.bulkShare() >= lp.w.o.BulkMinShare && !lp.carryDue() {
		return false // replicas lag: bulk waits, down to its minimum share
	}
	caughtUp := lp.bnext >= lp.bulkLimit()
	return lp.bulkFull() || lp.drained() && caughtUp ||
		caughtUp && lp.age(lp.bbuf[0].CommittedAt, lp.bseen) >= lp.w.o.MaxBatchAge
}

// nextFresh names the fresh lane's batch to deliver now, if one is due.
// While an ordinary batch is in flight (bfl), the fresh batch holds none of
// its keys: it ends before the first fresh record of a key bfl holds (that
// one waits for bfl's registration, so the key's records reach the batch
// log in queue order whichever registers first).
func (lp *loop) nextFresh() *plan {
	lp.held = false
	if !lp.freshDue() || lp.l.st.FreshPending != nil {
		return nil // a recorded fresh batch goes first (the loop delivers it)
	}
	if lp.carryDue() {
		return nil // the waiting bulk batch carries them (nextBulk)
	}
	free := lp.bfl == nil && lp.l.st.Pending == nil
	if lp.bfl != nil && lp.bfl.pl.fresh {
		// The batch in flight carries fresh records (an ordinary one: no
		// bulk work before them, or a bulk batch they ride): the fresh
		// position moves past them only with its commit, so the next
		// fresh batch follows it.
		lp.held = true
		return nil
	}
	pl := lp.freshPlan(free)
	if pl == nil {
		lp.held = true
	}
	return pl
}

// nextBulk names the ordinary lane's batch to deliver now, if one is due
// (the caller checks that the lane's slot is free).
func (lp *loop) nextBulk() *plan {
	if !lp.bulkDue() {
		return nil
	}
	return lp.bulkPlan()
}

// bulkShare is bulk's share of the record bytes the partition delivered
// over the last ~10s (1 when nothing was delivered).
func (lp *loop) bulkShare() float64 {
	lp.decay()
	if t := lp.share[0] + lp.share[1]; t > 0 {
		return lp.share[1] / t
	}
	return 1
}

// decay ages the lanes' delivery-time shares (10s time constant).
func (lp *loop) decay() {
	now := lp.w.now()
	f := math.Exp(-now.Sub(lp.shareAt).Seconds() / 10)
	lp.share[0] *= f
	lp.share[1] *= f
	lp.shareAt = now
}

// freshPlan takes the fetched fresh records as a batch (of one
// publication), up to the first one of a key the ordinary batch in flight
// holds (nil when that is the first). When the partition has no bulk work
// before them (O = F, no bulk head in the range) and the ordinary slot is
// free, it is an ordinary batch and moves both positions.
func (lp *loop) freshPlan(ordinaryFree bool) *plan {
	w := lp.w
	n := len(lp.fbuf)
	var bytes int64
	for i, r := range lp.fbuf {
		if i > 0 && (lp.full(bytes, i) || r.Publication != lp.fbuf[0].Publication) || lp.bfl != nil && !lp.bfl.pre.registered() && lp.bfl.keys[ident(&r)] {
			n = i
			break
		}
		bytes += int64(len(r.Value)) + 64
	}
	if n == 0 {
		return nil
	}
	recs := append([]pillar.ExportRecord(nil), lp.fbuf[:n]...)
	first, last := lp.F(), recs[len(recs)-1].Offset
	pend := Pending{ID: FreshBatchID(w.storeID, lp.pt.id, first, last), First: first, Last: last, Lane: LaneFresh}
	if ordinaryFree && lp.O() == first && (len(lp.bulk) == 0 || lp.bulk[0].off > last) {
		pend = Pending{ID: BatchID(w.storeID, lp.pt.id, first, last), First: first, Last: last}
	}
	return &plan{pend: pend, recs: recs, fresh: true}
}

// bulkPlan takes the bulk lane's range [O, bnext) as a batch, without the
// records a fresh record of the same key supersedes: a delivered one, or
// one queued and not delivered yet (all of those lie beyond the range, so
// they are newer; they will be delivered, and a bulk batch that carries
// none of their keys can register before or after them). When nothing is
// left (the range holds only delivered fresh records and superseded bulk
// ones) the records are read again by contents (a refresh, see there).
func (lp *loop) bulkPlan() *plan {
	first, last := lp.O(), lp.bnext-1
	recs := lp.supersede(lp.bbuf)
	if len(recs) > 0 && (len(lp.fbuf)+len(lp.fresh) > 0 || lp.fplanned != nil) {
		queued := make(map[string]bool, len(lp.fbuf)+len(lp.fresh))
		for _, r := range lp.fbuf {
			queued[ident(&r)] = true
		}
		if lp.fplanned != nil {
			for _, r := range lp.fplanned.recs {
				queued[ident(&r)] = true
			}
		}
		for _, h := range lp.fresh {
			queued[h.key] = true
		}
		out := recs[:0]
		for _, r := range recs {
			if !(r.IsBulk() && queued[ident(&r)]) {
				out = append(out, r)
			}
		}
		recs = out
	}
	if len(recs) == 0 {
		recs = nil
	}
	pl := &plan{pend: Pending{ID: BatchID(lp.w.storeID, lp.pt.id, first, last), First: first, Last: last}, recs: recs}
	lp.ride(pl)
	return pl
}

// ride lets the fetched fresh records ride along with bulk batch pl
// (FreshRideWait): its commit moves the fresh position past them
// (Pending.FreshLast), so they cost no batch of their own. They are a
// prefix of the undelivered fresh records (none is recorded as
// FreshPending), all beyond pl's range (the bulk lane stops at the first
// undelivered one) and so newer than every bulk record of their keys in
// it; nothing else in flight holds their keys (fresh batches wait while a
// batch carrying fresh records flies). Only records of the bulk batch's
// publication ride, up to MaxBatchBytes.
func (lp *loop) ride(pl *plan) {
	if lp.w.o.FreshRideWait <= 0 || len(pl.recs) == 0 || len(lp.fbuf) == 0 || lp.l.st.FreshPending != nil || lp.fplanned != nil {
		return
	}
	pub := pl.recs[0].Publication
	n := 0
	var bytes int64
	for n < len(lp.fbuf) && lp.fbuf[n].Publication == pub && !lp.full(bytes, n) {
		bytes += int64(len(lp.fbuf[n].Value)) + 64
		n++
	}
	if n == 0 {
		return
	}
	pl.recs = append(pl.recs, lp.fbuf[:n]...)
	pl.pend.FreshLast = lp.fbuf[n-1].Offset
	pl.pend.ID = CombinedBatchID(lp.w.storeID, lp.pt.id, pl.pend.First, pl.pend.Last, pl.pend.FreshLast)
	pl.fresh = true
}

// supersede drops the bulk records a delivered fresh record of the same
// key (at a later offset) supersedes, and fresh records below F.
func (lp *loop) supersede(recs []pillar.ExportRecord) []pillar.ExportRecord {
	F := lp.F()
	out := make([]pillar.ExportRecord, 0, len(recs))
	for _, r := range recs {
		if !r.IsBulk() && r.Offset < F {
			continue
		}
		if r.IsBulk() {
			if off, ok := lp.freshMax[ident(&r)]; ok && off > r.Offset {
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

// take removes a plan's records from the buffers (they are in flight now).
func (lp *loop) take(pl *plan) {
	if pl.fresh {
		last := max(pl.pend.Last, pl.pend.FreshLast)
		n := 0
		for n < len(lp.fbuf) && lp.fbuf[n].Offset <= last {
			lp.fbytes -= int64(len(lp.fbuf[n].Value)) + 64
			n++
		}
		lp.fbuf = lp.fbuf[n:]
	}
	if pl.pend.Lane == LaneOrdinary && (!pl.fresh || pl.pend.FreshLast > 0) {
		lp.bbuf, lp.bbytes, lp.bseen, lp.bcut = nil, 0, time.Time{}, false
	}
	lp.inflight += pl.bytes()
	pl.start = lp.w.now()
	lp.setBuffered()
}

// committed updates the in-memory state after pl's commit (called before
// the commit runs when a follow-up is named, which is safe: if the commit
// fails for good, the loop ends and this state is dropped).
func (lp *loop) committed(pl *plan, st PartitionState) {
	if pl.pend.Lane != LaneReplay {
		// Fresh records delivered above the new offset supersede older bulk
		// records of their keys.
		for _, r := range pl.recs {
			if !r.IsBulk() && r.Offset >= st.Offset {
				k := ident(&r)
				lp.freshMax[k] = max(lp.freshMax[k], r.Offset)
			}
		}
	}
	switch pl.pend.Lane {
	case LaneOrdinary:
		i := sort.Search(len(lp.bulk), func(i int) bool { return lp.bulk[i].off > pl.pend.Last })
		lp.bulk = lp.bulk[i:]
		for k, off := range lp.freshMax {
			if off < st.Offset {
				delete(lp.freshMax, k)
			}
		}
		lp.bnext = max(lp.bnext, st.Offset)
		lp.scan = max(lp.scan, st.Offset)
		// Bulk records read ahead that this batch covered (a recorded
		// batch delivered after the buffer was filled) are delivered.
		n := 0
		for n < len(lp.bbuf) && lp.bbuf[n].Offset < st.Offset {
			lp.bbytes -= int64(len(lp.bbuf[n].Value)) + 64
			n++
		}
		if n > 0 {
			lp.bbuf = lp.bbuf[n:]
			if len(lp.bbuf) == 0 {
				lp.bbuf, lp.bbytes, lp.bseen, lp.bcut = nil, 0, time.Time{}, false
			}
		}
	}
	F := st.FreshOffset()
	for len(lp.fbuf) > 0 && lp.fbuf[0].Offset < F {
		lp.fbytes -= int64(len(lp.fbuf[0].Value)) + 64
		lp.fbuf = lp.fbuf[1:]
	}
	for len(lp.fresh) > 0 && lp.fresh[0].off < F {
		lp.fresh = lp.fresh[1:]
	}
	lp.inflight = max(0, lp.inflight-pl.bytes())
	lp.setBuffered()
}

// contents reads a pending batch's records again from the queue (after a
// crash or a takeover), by its lane's rule.
func (lp *loop) contents(ctx context.Context, pend Pending) ([]pillar.ExportRecord, error) {
	w, p := lp.w, lp.pt.id
	if pend.Lane == LaneReplay {
		return lp.replayContents(ctx, pend)
	}
	if pend.Lane == LaneFresh {
		// Its range starts at the fresh position and may span a bulk
		// backlog: only the fresh records are read.
		return w.readFresh(ctx, p, pend.First, pend.Last)
	}
	recs, err := w.readRange(ctx, p, pend.First, pend.Last)
	if err != nil {
		return nil, err
	}
	out := lp.supersede(recs)
	if pend.FreshLast > 0 {
		// The fresh records riding along: those of [max(F, Last+1),
		// FreshLast] (below Last+1 none is waiting: the bulk lane stops
		// at the first undelivered fresh record). The bulk backlog
		// between the batch's range and them is not read.
		more, err := w.readFresh(ctx, p, max(lp.F(), pend.Last+1), pend.FreshLast)
		if err != nil {
			return nil, err
		}
		out = append(out, more...)
	}
	if len(out) > 0 {
		return out, nil
	}
	lp.refresh = true
	// A refresh: nothing of the range is left to deliver, but its offsets
	// must still be covered by a registered batch (the control plane's
	// delivered end). It re-delivers, for each key of the range, the newest
	// record delivered so far, which changes nothing a replica serves.
	return lp.replayContents(ctx, pend)
}

// replayContents returns, for every key with a delivered record in
// [First, Last], the newest delivered record of that key: replaying older
// values over newer ones would undo deliveries.
func (lp *loop) replayContents(ctx context.Context, pend Pending) ([]pillar.ExportRecord, error) {
	w, p := lp.w, lp.pt.id
	O, F := lp.O(), lp.F()
	// Below O everything is delivered, or superseded by a newer fresh
	// record of its key (which then is the newest); below F the fresh ones.
	delivered := func(h pillar.ExportRecord) bool { return h.Offset < O || h.Offset < F && !h.IsBulk() }
	newest := map[string]int64{}
	inRange := map[string]bool{}
	for next := pend.First; next < F; {
		hs, _, err := w.readHeads(ctx, p, next, F, w.o.HeadChunk)
		if err != nil {
			return nil, err
		}
		if len(hs) == 0 {
			break
		}
		for _, h := range hs {
			if h.Offset <= pend.Last {
				inRange[h.PageKey] = true // superseded: its key's newest is the fresh record
			}
			if !delivered(h) {
				continue
			}
			newest[h.PageKey] = max(newest[h.PageKey], h.Offset)
		}
		next = hs[len(hs)-1].Offset + 1
	}
	var offs []int64
	for k := range inRange {
		if off, ok := newest[k]; ok {
			offs = append(offs, off)
		}
	}
	sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
	out := make([]pillar.ExportRecord, 0, len(offs))
	for _, off := range offs {
		recs, err := w.readRange(ctx, p, off, off)
		if err != nil {
			return nil, err
		}
		out = append(out, recs...)
	}
	return out, nil
}

// runPartition delivers one held partition until it is told to stop, the
// context ends, a Drain target is reached or the lease is lost.
func (w *Worker) runPartition(ctx context.Context, pt *part, st PartitionState) (err error) {
	p := pt.id
	l := &lease{w: w, pt: pt, st: st, lastWrite: w.now()}
	defer func() {
		if errors.Is(err, ErrLeaseLost) || errors.Is(err, errCrash) {
			return // a crash leaves everything as it was; a lost lease is not ours
		}
		l.release()
	}()
	lp := &loop{w: w, pt: pt, l: l}
	lp.init()
	defer func() {
		if lp.pre != nil {
			<-lp.pre.done
		}
		if lp.bfl != nil {
			lp.bfl.pre.stop()
			<-lp.bfl.pre.done // the batch stays recorded: the next holder finishes it
		}
		if lp.fpre != nil {
			<-lp.fpre.done
		}
		lp.fbuf, lp.bbuf, lp.fbytes, lp.bbytes, lp.inflight = nil, nil, 0, 0, 0
		lp.setBuffered()
		w.setBacklog(p, nil)
	}()
	if st.Pending != nil || st.FreshPending != nil {
		w.o.Logger.Info("lorry: finishing pending batches", "partition", p, "batch", st.Pending, "fresh_batch", st.FreshPending)
	}
	if pd := l.st.Pending; pd != nil && pd.Lane == LaneFresh && l.st.FreshPending == nil {
		// Recorded by a version without the fresh slot: move it there.
		err := w.retry(ctx, l, "move fresh batch to its slot", func() error {
			return l.cas(ctx, func(cur PartitionState) (PartitionState, error) {
				if cur.Pending == nil || cur.Pending.Lane != LaneFresh || cur.FreshPending != nil {
					return cur, errUnchanged
				}
				cur.FreshPending, cur.Pending = cur.Pending, nil
				return cur, nil
			})
		})
		if err != nil {
			return err
		}
	}
	// Learn what was delivered out of order: scan up to F first.
	for lp.scan < lp.F() {
		if err := ctx.Err(); err != nil {
			return err
		}
		got, err := lp.scanStep(ctx)
		if err != nil {
			w.o.Logger.Warn("lorry: scan delivered heads", "partition", p, "err", err)
			clock.Sleep(ctx, w.o.Clock, w.o.PollInterval)
		} else if !got {
			break // MaxScanAhead reached (the fill continues later)
		}
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := w.hook("poll", p); err != nil {
			return err
		}
		lp.checkLoss()
		if f := lp.bfl; f != nil && !f.uploaded() && f.pl.pend.FreshLast > 0 && w.now().Sub(f.pl.start) >= lp.demoteAfter() {
			// A bulk batch carrying fresh records is not up within twice
			// the ride wait, or twice the time a bulk batch takes to be
			// up (a slow upload, the build slots busy with other
			// partitions' bulk work): the riders go back to the fresh
			// lane (see demoteAfter).
			if err := lp.demote(ctx); err != nil {
				return err
			}
		}
		if f := lp.bfl; f != nil && f.uploaded() && f.pre.err != nil && f.pre.register && ctx.Err() == nil &&
			!errors.Is(f.pre.err, errCrash) && !errors.Is(f.pre.err, ErrLeaseLost) {
			// The flight's upload failed: retried in the
			// background, as a flight, so neither its riders nor the
			// fresh lane wait through the retries (delivered by the loop
			// itself, they would): a batch carrying fresh records gives
			// them back to the fresh lane and restarts without them at
			// once; any other restarts after the backoff.
			if f.pl.pend.FreshLast > 0 {
				if err := lp.demote(ctx); err != nil {
					return err
				}
				if lp.bfl != f {
					continue
				}
			}
			msg := f.pre.err.Error()
			f.pl.retries++
			w.count(func(s *Stats) { s.Retries++; s.LastError = msg })
			w.o.Metrics.retried("upload")
			if f.pl.retries == 1 || f.pl.retries%10 == 0 {
				w.o.Logger.Warn("lorry: retrying a batch's upload in the background", "partition", p, "batch", f.pl.pend.ID, "attempt", f.pl.retries, "err", f.pre.err)
			}
			lp.bfl = newFlight(f.pl, w.startFlightAfter(ctx, p, f.pl.pend, f.pl.recs, true, w.backoff(f.pl.retries)))
			continue
		}
		if f := lp.bfl; f != nil && f.uploaded() {
			// The ordinary batch's files are up: manifest, register, commit
			// (bulk goes before any further fresh batch).
			lp.bfl = nil
			lp.flightDone(f)
			if err := w.deliver(ctx, lp, f.pl, f.pre); err != nil {
				return err
			}
			continue
		}
		if pend := l.st.FreshPending; pend != nil {
			// The follow-up the last fresh commit recorded, or one recorded
			// by a previous holder or a crashed run: delivered before the
			// ordinary batch recorded with it, whose contents, when they
			// are read again, then leave out the keys it supersedes (see
			// doc.go).
			pl, pre := &plan{pend: *pend}, lp.fpre
			if lp.fplanned != nil && lp.fplanned.pend == *pend {
				pl = lp.fplanned
			}
			lp.fplanned, lp.fpre = nil, nil
			err := w.deliver(ctx, lp, pl, pre)
			if pre != nil {
				<-pre.done
			}
			if err != nil {
				return err
			}
			continue
		}
		if pend := l.st.Pending; pend != nil && lp.bfl == nil {
			// Recorded before: by a previous holder, by a crashed run, or
			// by the last commit as the follow-up batch, whose files are
			// uploading (it flies while the fresh lane goes on).
			if pl := lp.planned; pl != nil && pl.pend == *pend && lp.pre != nil {
				lp.bfl = newFlight(pl, lp.pre)
				lp.planned, lp.pre = nil, nil
				continue
			}
			pl := &plan{pend: *pend}
			lp.planned = nil
			pre := lp.pre
			lp.pre = nil
			err := w.deliver(ctx, lp, pl, pre)
			if pre != nil {
				<-pre.done
			}
			if err != nil {
				return err
			}
			continue
		}
		if r := l.st.Replay; r != nil && lp.bfl == nil {
			pl := &plan{pend: Pending{ID: ReplayBatchID(w.storeID, p, r.From, r.To, r.N), First: r.From, Last: r.To, Lane: LaneReplay}}
			if err := w.deliver(ctx, lp, pl, nil); err != nil {
				return err
			}
			continue
		}
		if pt.release.Load() && lp.bfl == nil {
			w.o.Logger.Info("lorry: giving partition back", "partition", p)
			return nil
		}
		if pt.drainTo >= 0 && l.st.Offset >= pt.drainTo && lp.bfl == nil {
			return nil
		}
		read := lp.fill(ctx)
		w.setBacklog(p, lp)
		if pl := lp.nextFresh(); pl != nil {
			lp.take(pl)
			// Its files build and upload while its pending record is
			// committed (the manifest only after, in deliver).
			pre := w.startPrefetch(ctx, p, pl.pend, pl.recs)
			err := w.deliver(ctx, lp, pl, pre)
			<-pre.done
			if err != nil {
				return err
			}
			continue
		}
		if lp.bfl == nil && l.st.Pending == nil && !pt.release.Load() {
			if pl := lp.nextBulk(); pl != nil {
				lp.take(pl)
				if pl.recs == nil {
					// A refresh: its records are read again by delivery.
					if err := w.deliver(ctx, lp, pl, nil); err != nil {
						return err
					}
					continue
				}
				// It flies from now on: its files build and upload while
				// its pending record is committed; the flight writes the
				// manifest and registers only once that commit is done.
				// (The fresh lane keeps clear of its keys from now on.)
				pl.flown = true
				lp.bfl = newFlight(pl, w.startFlight(ctx, p, pl.pend, pl.recs, false))
				if err := w.recordPending(ctx, lp, pl.pend); err != nil {
					return err
				}
				if err := w.hook("pending", p); err != nil {
					return err
				}
				lp.bfl.pre.markRecorded()
				continue
			}
		}
		if read {
			continue
		}
		if err := l.renewIfDue(ctx); err != nil {
			if errors.Is(err, ErrLeaseLost) {
				return err
			}
			w.o.Logger.Warn("lorry: renew lease", "partition", p, "err", err)
		}
		var uploaded <-chan struct{}
		if lp.bfl != nil {
			uploaded = lp.bfl.pre.done
		}
		t := w.o.Clock.NewTimer(lp.wait())
		select {
		case <-ctx.Done():
		case <-uploaded:
		case <-t.C:
		}
		t.Stop()
	}
}

// wait is how long an idle loop sleeps: a poll interval, or less when a
// buffered batch comes of age sooner.
func (lp *loop) wait() time.Duration {
	d := lp.w.o.PollInterval
	if len(lp.fbuf) > 0 && !lp.held {
		d = min(d, max(time.Millisecond, lp.freshAge()-lp.age(lp.fbuf[0].CommittedAt, time.Time{})))
	}
	if len(lp.bbuf) > 0 && lp.bfl == nil && lp.l.st.Pending == nil && (!lp.bulkPaused() || lp.bulkShare() < lp.w.o.BulkMinShare) {
		d = min(d, max(time.Millisecond, lp.w.o.MaxBatchAge-lp.age(lp.bbuf[0].CommittedAt, lp.bseen)))
	}
	return d
}

// followUp is called once before a batch's commit: it reads what arrived
// meanwhile and, if that makes a batch already, names it (as the state
// after the commit will see it), so the same commit records it as pending:
// one store commit per batch while the queue is busy, instead of two.
func (lp *loop) followUp(ctx context.Context, cur *plan, after PartitionState) *Pending {
	saved := lp.l.st
	lp.l.st = after
	defer func() { lp.l.st = saved }()
	lp.committed(cur, after)
	if after.Replay != nil {
		return nil
	}
	for lp.fill(ctx) {
		if lp.full(lp.fbytes, len(lp.fbuf)) || lp.bulkFull() || !lp.scanDone {
			// Full, or the head scan runs (the bulk lane reads nothing
			// yet): the loop goes on with it after this commit, not
			// before.
			break
		}
	}
	pl := lp.nextBulk()
	if pl == nil && after.FreshPending == nil && lp.freshDue() {
		// No bulk work: fresh records that make an ordinary batch (O = F,
		// no bulk head among them) follow up as well — unless a fresh
		// batch is recorded: the fresh position does not count its
		// records yet, so a batch from it would cover them again, and
		// could land before them with newer records of their keys.
		if fp := lp.freshPlan(true); fp != nil && fp.pend.Lane == LaneOrdinary {
			pl = fp
		}
	}
	if pl == nil || pl.recs == nil {
		return nil
	}
	lp.take(pl)
	// It flies from now on (the fresh lane keeps clear of its keys), though
	// the commit that records it runs yet.
	lp.bfl = newFlight(pl, lp.w.startFlight(ctx, lp.pt.id, pl.pend, pl.recs, false))
	return &pl.pend
}

// freshFollowUp is followUp for a fresh batch: before its commit, it reads
// once and, if a fresh batch is due, names it (as the state after the
// commit will see it) so the same commit records it as FreshPending while
// its files are uploaded: one store commit per fresh batch while fresh
// records flow. With no bulk work before them and the ordinary slot free,
// the batch is an ordinary one (ordinary reports it), recorded as Pending
// and flying like a bulk batch.
func (lp *loop) freshFollowUp(ctx context.Context, cur *plan, after PartitionState) (next *Pending, ordinary bool) {
	saved := lp.l.st
	lp.l.st = after
	defer func() { lp.l.st = saved }()
	lp.committed(cur, after)
	if after.Pending != nil && lp.bfl == nil {
		// A recorded ordinary batch (a previous holder's, or a crashed
		// run's) waits for this fresh one: it goes next, or steady fresh
		// traffic would chain follow-ups ahead of it for ever.
		return nil, false
	}
	lp.fill(ctx)
	if !lp.freshDue() || lp.carryDue() {
		return nil, false // none due, or the waiting bulk batch carries them
	}
	free := lp.bfl == nil && after.Pending == nil
	pl := lp.freshPlan(free)
	if pl == nil || pl.pend.Lane == LaneOrdinary && !free {
		return nil, false
	}
	lp.take(pl)
	if pl.pend.Lane == LaneOrdinary {
		lp.bfl = newFlight(pl, lp.w.startFlight(ctx, lp.pt.id, pl.pend, pl.recs, false))
		return &pl.pend, true
	}
	pre := lp.w.startPrefetch(ctx, lp.pt.id, pl.pend, pl.recs)
	lp.fplanned, lp.fpre = pl, pre
	return &pl.pend, false
}
