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
	at  int64 // commit time, unix ms
	key string
}

// plan is a batch about to be delivered: its range and lane, and the
// records it holds (nil: read them again from the queue).
type plan struct {
	pend  Pending
	recs  []pillar.ExportRecord
	fresh bool // taken from the fresh lane's buffer
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

	scan     int64 // next offset the head scan reads
	scanEnd  bool  // the last scan reached the queue's end (or drainTo)
	bulk     []head
	fresh    []head // undelivered fresh heads whose values are not in fbuf
	freshMax map[string]int64

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

	inflight  int64      // bytes of the batch being delivered
	refresh   bool       // the last contents call made a refresh
	lastFresh time.Time  // when the scan last found an undelivered fresh record
	share     [2]float64 // decayed delivery seconds: [fresh-only, with bulk]
	shareAt   time.Time
	planned   *plan // the follow-up the last commit recorded as pending
	pre       *prefetch

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
		return false, nil
	}
	hs, end, err := w.readHeads(ctx, p, lp.scan, lp.pt.drainTo, w.o.HeadChunk)
	if err != nil {
		return false, err
	}
	F := lp.F()
	for _, h := range hs {
		if h.Offset != lp.scan {
			return false, fmt.Errorf("lorry: partition %d: queue returned offset %d, want %d", p, h.Offset, lp.scan)
		}
		hd := head{off: h.Offset, at: h.CommittedAt, key: h.PageKey}
		switch {
		case h.IsBulk():
			lp.bulk = append(lp.bulk, hd)
		case h.Offset < F:
			lp.freshMax[h.PageKey] = max(lp.freshMax[h.PageKey], h.Offset)
		default:
			lp.fresh = append(lp.fresh, hd)
			lp.lastFresh = w.now()
		}
		lp.scan++
	}
	lp.scanEnd = lp.scan >= end
	return len(hs) > 0, nil
}

func (lp *loop) full(bytes int64, n int) bool {
	return bytes >= lp.w.o.MaxBatchBytes || n >= lp.w.o.MaxBatchRecords
}

// bulkFull reports whether the bulk lane's batch is complete: at
// MaxBatchBytes, or at FreshBulkBatchBytes while fresh records flow in the
// partition (a fresh record waits for the bulk batch in flight, so bulk
// batches are kept short then).
func (lp *loop) bulkFull() bool {
	limit := lp.w.o.MaxBatchBytes
	if lp.w.now().Sub(lp.lastFresh) < 2*time.Second {
		limit = lp.w.o.FreshBulkBatchBytes
	}
	return lp.bcut || lp.bbytes >= limit || len(lp.bbuf) >= lp.w.o.MaxBatchRecords
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
// record, or the end of what the scan classified.
func (lp *loop) bulkLimit() int64 {
	limit := lp.scan
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
			}
			lp.bnext++
		}
		got = true
		lp.setBuffered()
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
	return lp.full(lp.fbytes, len(lp.fbuf)) || lp.age(lp.fbuf[0].CommittedAt, time.Time{}) >= lp.w.o.MaxBatchAge ||
		(lp.drained() && !waiting)
}

// bulkDue reports whether the bulk lane has a batch to close now.
func (lp *loop) bulkDue() bool {
	if lp.bnext <= lp.O() {
		return false
	}
	if len(lp.bbuf) == 0 {
		return true // only delivered fresh records: a refresh
	}
	if lp.w.bulkPaused(lp.pt.id) {
		return false
	}
	caughtUp := lp.bnext >= lp.bulkLimit()
	return lp.bulkFull() || lp.drained() && caughtUp ||
		caughtUp && lp.age(lp.bbuf[0].CommittedAt, lp.bseen) >= lp.w.o.MaxBatchAge
}

// next names the batch to deliver now, if one is due. When both lanes
// have records ready, the waiting fresh records ride along with the bulk
// batch (one batch, one commit), taking at most 1-BulkMinShare of its
// bytes; fresh records alone go as soon as they are due.
func (lp *loop) next() *plan {
	fd, bd := lp.freshDue(), lp.bulkDue()
	switch {
	case fd && bd && len(lp.bbuf) > 0 && lp.w.o.FreshAlone && lp.bulkShare() >= lp.w.o.BulkMinShare:
		// FreshAlone: a small fresh batch goes ahead of the bulk one
		// while bulk keeps its share of the recent delivery time.
		return lp.freshPlan()
	case bd && len(lp.fbuf) > 0 && len(lp.bbuf) > 0:
		return lp.combinedPlan()
	case bd && len(lp.bbuf) == 0:
		return lp.bulkPlan() // a refresh of delivered records: at once
	case fd:
		return lp.freshPlan()
	case bd:
		return lp.bulkPlan()
	}
	return nil
}

// bulkShare is bulk's share of the partition's delivery time over the
// last ~10s (1 when nothing was delivered).
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

// combinedPlan is bulkPlan plus the waiting fresh records, as many as keep
// bulk at BulkMinShare of the batch's bytes or more.
func (lp *loop) combinedPlan() *plan {
	pl := lp.bulkPlan()
	var bulkBytes int64
	for _, r := range pl.recs {
		bulkBytes += int64(len(r.Value)) + 64
	}
	budget := int64(float64(bulkBytes) * (1 - lp.w.o.BulkMinShare) / lp.w.o.BulkMinShare)
	var used int64
	n := 0
	for n < len(lp.fbuf) {
		sz := int64(len(lp.fbuf[n].Value)) + 64
		if n > 0 && used+sz > budget || pl.recs != nil && lp.fbuf[n].Publication != pl.recs[0].Publication {
			break
		}
		used += sz
		n++
	}
	if pl.recs == nil || n == 0 {
		return pl
	}
	pl.recs = append(pl.recs, lp.fbuf[:n]...)
	pl.pend.FreshLast = lp.fbuf[n-1].Offset
	pl.pend.ID = CombinedBatchID(lp.w.storeID, lp.pt.id, pl.pend.First, pl.pend.Last, pl.pend.FreshLast)
	pl.fresh = true
	return pl
}

// freshPlan takes the fetched fresh records as a batch. When the partition
// has no bulk work before them (O = F and no bulk head in the range), it is
// an ordinary batch and moves both positions.
func (lp *loop) freshPlan() *plan {
	w := lp.w
	n := len(lp.fbuf)
	var bytes int64
	for i, r := range lp.fbuf {
		if i > 0 && (lp.full(bytes, i) || r.Publication != lp.fbuf[0].Publication) {
			n = i
			break
		}
		bytes += int64(len(r.Value)) + 64
	}
	recs := append([]pillar.ExportRecord(nil), lp.fbuf[:n]...)
	first, last := lp.F(), recs[len(recs)-1].Offset
	pend := Pending{ID: FreshBatchID(w.storeID, lp.pt.id, first, last), First: first, Last: last, Lane: LaneFresh}
	if lp.O() == first && (len(lp.bulk) == 0 || lp.bulk[0].off > last) {
		pend = Pending{ID: BatchID(w.storeID, lp.pt.id, first, last), First: first, Last: last}
	}
	return &plan{pend: pend, recs: recs, fresh: true}
}

// bulkPlan takes the bulk lane's range [O, bnext) as a batch, without the
// records a delivered fresh record of the same key supersedes. When nothing
// is left (the range holds only delivered fresh records and superseded bulk
// ones) the records are read again by contents (a refresh, see there).
func (lp *loop) bulkPlan() *plan {
	first, last := lp.O(), lp.bnext-1
	recs := lp.supersede(lp.bbuf)
	if len(recs) == 0 {
		recs = nil
	}
	return &plan{pend: Pending{ID: BatchID(lp.w.storeID, lp.pt.id, first, last), First: first, Last: last}, recs: recs}
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
			if off, ok := lp.freshMax[r.PageKey]; ok && off > r.Offset {
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
	lp.inflight = 0
	for _, r := range pl.recs {
		lp.inflight += int64(len(r.Value)) + 64
	}
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
				lp.freshMax[r.PageKey] = max(lp.freshMax[r.PageKey], r.Offset)
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
	}
	F := st.FreshOffset()
	for len(lp.fbuf) > 0 && lp.fbuf[0].Offset < F {
		lp.fbytes -= int64(len(lp.fbuf[0].Value)) + 64
		lp.fbuf = lp.fbuf[1:]
	}
	for len(lp.fresh) > 0 && lp.fresh[0].off < F {
		lp.fresh = lp.fresh[1:]
	}
	lp.inflight = 0
	lp.setBuffered()
}

// contents reads a pending batch's records again from the queue (after a
// crash or a takeover), by its lane's rule.
func (lp *loop) contents(ctx context.Context, pend Pending) ([]pillar.ExportRecord, error) {
	w, p := lp.w, lp.pt.id
	if pend.Lane == LaneReplay {
		return lp.replayContents(ctx, pend)
	}
	recs, err := w.readRange(ctx, p, pend.First, pend.Last)
	if err != nil {
		return nil, err
	}
	if pend.Lane == LaneFresh {
		out := recs[:0]
		for _, r := range recs {
			if !r.IsBulk() {
				out = append(out, r)
			}
		}
		return out, nil
	}
	out := lp.supersede(recs)
	if pend.FreshLast > 0 {
		// The fresh records riding along: those of [max(F, Last+1),
		// FreshLast] (below Last+1 none is waiting: the bulk lane stops
		// at the first undelivered fresh record).
		more, err := w.readRange(ctx, p, max(lp.F(), pend.Last+1), pend.FreshLast)
		if err != nil {
			return nil, err
		}
		for _, r := range more {
			if !r.IsBulk() {
				out = append(out, r)
			}
		}
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
		lp.fbuf, lp.bbuf, lp.fbytes, lp.bbytes, lp.inflight = nil, nil, 0, 0, 0
		lp.setBuffered()
		w.setBacklog(p, nil)
	}()
	if st.Pending != nil {
		w.o.Logger.Info("lorry: finishing a pending batch", "partition", p, "batch", st.Pending.ID)
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
		if pend := l.st.Pending; pend != nil {
			// Recorded before: by a previous holder, by a crashed run, or
			// by the last commit as the follow-up batch.
			pl := &plan{pend: *pend}
			if lp.planned != nil && lp.planned.pend == *pend {
				pl = lp.planned
			}
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
		if r := l.st.Replay; r != nil {
			pl := &plan{pend: Pending{ID: ReplayBatchID(w.storeID, p, r.From, r.To, r.N), First: r.From, Last: r.To, Lane: LaneReplay}}
			if err := w.deliver(ctx, lp, pl, nil); err != nil {
				return err
			}
			continue
		}
		if pt.release.Load() {
			w.o.Logger.Info("lorry: giving partition back", "partition", p)
			return nil
		}
		if pt.drainTo >= 0 && l.st.Offset >= pt.drainTo {
			return nil
		}
		read := lp.fill(ctx)
		w.setBacklog(p, lp)
		if pl := lp.next(); pl != nil {
			lp.take(pl)
			if err := w.deliver(ctx, lp, pl, nil); err != nil {
				return err
			}
			continue
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
		clock.Sleep(ctx, w.o.Clock, lp.wait())
	}
}

// wait is how long an idle loop sleeps: a poll interval, or less when a
// buffered batch comes of age sooner.
func (lp *loop) wait() time.Duration {
	d := lp.w.o.PollInterval
	if len(lp.fbuf) > 0 {
		d = min(d, max(time.Millisecond, lp.w.o.MaxBatchAge-lp.age(lp.fbuf[0].CommittedAt, time.Time{})))
	}
	if len(lp.bbuf) > 0 {
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
		if lp.full(lp.fbytes, len(lp.fbuf)) || lp.bulkFull() {
			break
		}
	}
	pl := lp.next()
	if pl == nil || pl.recs == nil {
		return nil
	}
	lp.take(pl)
	lp.planned = pl
	lp.pre = lp.w.startPrefetch(ctx, lp.pt.id, pl.pend, pl.recs)
	return &pl.pend
}
