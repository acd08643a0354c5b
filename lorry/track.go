package lorry

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/pillarkit/pillar/internal/clock"
	"github.com/pillarkit/pillar/pillar"
)

// Lanes of the latency and loss accounting (by record priority).
const (
	prFresh = 0
	prBulk  = 1
)

var prNames = [2]string{pillar.PriorityFresh, pillar.PriorityBulk}

func prOf(r *pillar.ExportRecord) int {
	if r.IsBulk() {
		return prBulk
	}
	return prFresh
}

// trackedRec is a delivered record waiting to be applied on every replica.
type trackedRec struct {
	off, at int64 // offset, commit time (unix ms)
	pr      int
}

type trackedBatch struct {
	seq  int64
	recs []trackedRec
	bulk bool // it holds bulk records
}

// partTrack is what the worker knows of one partition's replicas.
type partTrack struct {
	batches  []*trackedBatch // registered, not applied everywhere yet, by seq
	lag      int64           // the slowest replica's distance to the newest seq
	known    bool            // lag was read at least once
	lossMark [2]int64        // records below this offset were counted if overdue
}

// tracker follows registered batches until every replica of their
// partition applied them, and keeps recent latencies.
type tracker struct {
	mu    sync.Mutex
	parts map[int]*partTrack
	lat   [2][2]*window // [priority][registered, applied]
	lost  int64
}

func newTracker() *tracker {
	t := &tracker{parts: map[int]*partTrack{}}
	for i := range t.lat {
		for j := range t.lat[i] {
			t.lat[i][j] = &window{}
		}
	}
	return t
}

func (t *tracker) part(p int) *partTrack {
	pt := t.parts[p]
	if pt == nil {
		pt = &partTrack{}
		t.parts[p] = pt
	}
	return pt
}

// window keeps the last 4096 latency samples.
type window struct {
	buf  [4096]time.Duration
	n    int // samples kept (≤ len(buf))
	next int
}

func (w *window) add(d time.Duration) {
	w.buf[w.next] = d
	w.next = (w.next + 1) % len(w.buf)
	w.n = min(w.n+1, len(w.buf))
}

// quantiles returns the given quantiles of the kept samples (zeros when
// there are none).
func (w *window) quantiles(qs ...float64) []time.Duration {
	out := make([]time.Duration, len(qs))
	if w.n == 0 {
		return out
	}
	s := append([]time.Duration(nil), w.buf[:w.n]...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	for i, q := range qs {
		out[i] = s[min(len(s)-1, int(q*float64(len(s))))]
	}
	return out
}

// tracked records a registered batch: its enqueue → registered latencies
// now, and (with Replicas) the batch until every replica applied it.
func (w *Worker) tracked(p int, seq int64, recs []pillar.ExportRecord, replay bool) {
	if replay {
		return
	}
	now := w.now()
	tb := &trackedBatch{seq: seq, recs: make([]trackedRec, 0, len(recs))}
	w.tr.mu.Lock()
	defer w.tr.mu.Unlock()
	for i := range recs {
		r := &recs[i]
		pr := prOf(r)
		if r.CommittedAt > 0 {
			d := max(0, now.Sub(time.UnixMilli(r.CommittedAt)))
			w.tr.lat[pr][0].add(d)
			w.o.Metrics.latency(prNames[pr], "registered", d)
		}
		tb.recs = append(tb.recs, trackedRec{off: r.Offset, at: r.CommittedAt, pr: pr})
		tb.bulk = tb.bulk || pr == prBulk
	}
	if seq > 0 && w.o.Replicas != nil {
		pt := w.tr.part(p)
		pt.batches = append(pt.batches, tb)
	}
}

// bulkPaused reports whether partition p's replicas lag too far for more
// bulk batches: more than MaxReplicaLag batches behind, or (while fresh
// records flow in the partition, and its replicas are known) MaxBulkUnapplied
// bulk batches not applied everywhere yet.
func (w *Worker) bulkPaused(p int, fresh bool) bool {
	lag, unapplied := w.bulkHeld(p, fresh)
	return lag || unapplied
}

// bulkHeld is bulkPaused by cause: lag (MaxReplicaLag), unapplied
// (MaxBulkUnapplied, MaxBulkUnappliedTotal).
func (w *Worker) bulkHeld(p int, fresh bool) (lag, unapplied bool) {
	if w.o.Replicas == nil {
		return false, false
	}
	w.tr.mu.Lock()
	defer w.tr.mu.Unlock()
	pt := w.tr.parts[p]
	if pt == nil || !pt.known {
		return false, false
	}
	lag = w.o.MaxReplicaLag >= 0 && pt.lag > w.o.MaxReplicaLag
	unapplied = fresh && w.o.MaxBulkUnapplied > 0 && pt.bulkUnapplied() >= w.o.MaxBulkUnapplied
	if fresh && !unapplied && w.o.MaxBulkUnappliedTotal > 0 {
		n := 0
		for _, q := range w.tr.parts {
			n += q.bulkUnapplied()
		}
		unapplied = n >= w.o.MaxBulkUnappliedTotal
	}
	return lag, unapplied
}

// bulkUnapplied counts the partition's registered batches with bulk
// records that some replica has not applied yet.
func (pt *partTrack) bulkUnapplied() int {
	n := 0
	for _, b := range pt.batches {
		if b.bulk {
			n++
		}
	}
	return n
}

// watchReplicas reads replica progress every ReplicaPoll until ctx ends:
// it retires tracked batches every replica applied (observing their
// enqueue → applied latencies) and records each partition's lag.
func (w *Worker) watchReplicas(ctx context.Context) {
	if w.o.Replicas == nil {
		return
	}
	for {
		if !clock.Sleep(ctx, w.o.Clock, w.o.ReplicaPoll) {
			return
		}
		rt, err := w.o.Replicas.GetRouting(ctx)
		if err != nil {
			if ctx.Err() == nil {
				w.o.Logger.Debug("lorry: read replica progress", "err", err)
			}
			continue
		}
		now := w.now()
		w.tr.mu.Lock()
		for p := range rt.Replicas {
			reps := rt.Replicas[p]
			if len(reps) == 0 || p >= len(rt.NewestSeq) {
				continue
			}
			low := reps[0].AppliedSeq
			for _, r := range reps[1:] {
				low = min(low, r.AppliedSeq)
			}
			pt := w.tr.parts[p]
			if pt == nil {
				continue
			}
			pt.lag, pt.known = rt.NewestSeq[p]-low, true
			w.o.Metrics.replicaLag(p, pt.lag)
			n := 0
			for n < len(pt.batches) && pt.batches[n].seq <= low {
				for _, r := range pt.batches[n].recs {
					if r.at > 0 {
						d := max(0, now.Sub(time.UnixMilli(r.at)))
						w.tr.lat[r.pr][1].add(d)
						w.o.Metrics.latency(prNames[r.pr], "applied", d)
					}
				}
				n++
			}
			pt.batches = pt.batches[n:]
		}
		w.tr.mu.Unlock()
	}
}

// checkLoss counts, at most once a second, the records of the partition
// that are not applied on every replica LossAfter (BulkLossAfter) after
// their commit, each once. Per priority, such records are a prefix in
// offset order of what is not applied yet (commit times grow with
// offsets), so a mark per priority remembers how far counting got.
func (lp *loop) checkLoss() {
	w := lp.w
	now := w.now()
	if now.Sub(lp.lossAt) < time.Second {
		return
	}
	lp.lossAt = now
	cut := [2]int64{now.Add(-w.o.LossAfter).UnixMilli(), now.Add(-w.o.BulkLossAfter).UnixMilli()}
	w.tr.mu.Lock()
	defer w.tr.mu.Unlock()
	pt := w.tr.part(lp.pt.id)
	var lost int64
	for pr := 0; pr < 2; pr++ {
		mark := &pt.lossMark[pr]
		visit := func(off, at int64) bool {
			if off < *mark {
				return true
			}
			if at <= 0 || at >= cut[pr] {
				return false
			}
			lost++
			*mark = off + 1
			return true
		}
		more := true
		for _, b := range pt.batches {
			for _, r := range b.recs {
				if r.pr == pr && !visit(r.off, r.at) {
					more = false
					break
				}
			}
			if !more {
				break
			}
		}
		if !more {
			continue
		}
		if pr == prBulk {
			for _, h := range lp.bulk {
				if !visit(h.off, h.at) {
					break
				}
			}
			continue
		}
		for _, r := range lp.freshInFlight() {
			if !visit(r.Offset, r.CommittedAt) {
				more = false
				break
			}
		}
		if !more {
			continue
		}
		for _, r := range lp.fbuf {
			if !visit(r.Offset, r.CommittedAt) {
				more = false
				break
			}
		}
		if more {
			for _, h := range lp.fresh {
				if !visit(h.off, h.at) {
					break
				}
			}
		}
	}
	if lost > 0 {
		w.tr.lost += lost
		w.o.Metrics.lostRecords(lost)
		w.o.Logger.Error("lorry: records not applied on every replica in time", "partition", lp.pt.id, "records", lost)
	}
}

// freshInFlight returns, in offset order, the fresh records that left the
// fresh buffer and are not registered yet: those of the ordinary batch in
// flight (riders of a bulk batch, or a batch of fresh records only) and of
// the fresh batch the last fresh commit recorded (fplanned). They are older
// than every record of fbuf and the fresh heads, and newer than those of
// the registered batches (the tracker's), so the loss counter and the
// backlog gauge visit them between the two (riders spend a bulk
// batch's build and upload there).
func (lp *loop) freshInFlight() []pillar.ExportRecord {
	var out []pillar.ExportRecord
	if lp.bfl != nil && lp.bfl.pl.fresh {
		for _, r := range lp.bfl.pl.recs {
			if !r.IsBulk() {
				out = append(out, r)
			}
		}
	}
	if lp.fplanned != nil {
		out = append(out, lp.fplanned.recs...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Offset < out[j].Offset })
	return out
}

// setBacklog publishes a partition's undelivered records by priority (nil:
// the partition is no longer held).
func (w *Worker) setBacklog(p int, lp *loop) {
	if w.o.Metrics == nil {
		return
	}
	if lp == nil {
		w.o.Metrics.backlog(p, nil)
		return
	}
	var b backlogSample
	// The fresh records in flight (freshInFlight, counted here without a
	// copy: this runs after every fill).
	var n, oldest int64
	count := func(recs []pillar.ExportRecord) {
		for _, r := range recs {
			if !r.IsBulk() {
				n++
				if oldest == 0 || r.CommittedAt < oldest {
					oldest = r.CommittedAt
				}
			}
		}
	}
	if lp.bfl != nil && lp.bfl.pl.fresh {
		count(lp.bfl.pl.recs)
	}
	if lp.fplanned != nil {
		count(lp.fplanned.recs)
	}
	b.records[prFresh] = n + int64(len(lp.fbuf)+len(lp.fresh))
	b.records[prBulk] = int64(len(lp.bulk))
	switch {
	case n > 0:
		b.oldest[prFresh] = oldest
	case len(lp.fbuf) > 0:
		b.oldest[prFresh] = lp.fbuf[0].CommittedAt
	case len(lp.fresh) > 0:
		b.oldest[prFresh] = lp.fresh[0].at
	}
	if len(lp.bulk) > 0 {
		b.oldest[prBulk] = lp.bulk[0].at
	}
	b.now = w.now()
	w.o.Metrics.backlog(p, &b)
}

type backlogSample struct {
	records [2]int64
	oldest  [2]int64 // unix ms, 0: none
	now     time.Time
}

// LatencySummary is a priority's recent delivery latencies (the last 4096
// records), from the commit to the queue to the batch's registration and
// to its application on every replica.
type LatencySummary struct {
	Samples        int   `json:"samples"`
	RegisteredP50  int64 `json:"registered_p50_ms"`
	RegisteredP90  int64 `json:"registered_p90_ms"`
	RegisteredP99  int64 `json:"registered_p99_ms"`
	RegisteredMax  int64 `json:"registered_max_ms"`
	AppliedSamples int   `json:"applied_samples"`
	AppliedP50     int64 `json:"applied_p50_ms"`
	AppliedP90     int64 `json:"applied_p90_ms"`
	AppliedP99     int64 `json:"applied_p99_ms"`
	AppliedMax     int64 `json:"applied_max_ms"`
}

// Latency returns the recent latencies by priority ("fresh", "bulk").
func (w *Worker) Latency() map[string]LatencySummary {
	w.tr.mu.Lock()
	defer w.tr.mu.Unlock()
	out := map[string]LatencySummary{}
	for pr, name := range prNames {
		r := w.tr.lat[pr][0].quantiles(0.5, 0.9, 0.99, 1)
		a := w.tr.lat[pr][1].quantiles(0.5, 0.9, 0.99, 1)
		out[name] = LatencySummary{
			Samples: w.tr.lat[pr][0].n, AppliedSamples: w.tr.lat[pr][1].n,
			RegisteredP50: r[0].Milliseconds(), RegisteredP90: r[1].Milliseconds(), RegisteredP99: r[2].Milliseconds(), RegisteredMax: r[3].Milliseconds(),
			AppliedP50: a[0].Milliseconds(), AppliedP90: a[1].Milliseconds(), AppliedP99: a[2].Milliseconds(), AppliedMax: a[3].Milliseconds(),
		}
	}
	return out
}

// Lost returns the loss counter: records not applied on every replica in
// LossAfter (BulkLossAfter), counted once each by this worker.
func (w *Worker) Lost() int64 {
	w.tr.mu.Lock()
	defer w.tr.mu.Unlock()
	return w.tr.lost
}

// Unapplied returns how many delivered records wait to be applied on every
// replica (tracked with Replicas only).
func (w *Worker) Unapplied() int {
	w.tr.mu.Lock()
	defer w.tr.mu.Unlock()
	n := 0
	for _, pt := range w.tr.parts {
		for _, b := range pt.batches {
			n += len(b.recs)
		}
	}
	return n
}
