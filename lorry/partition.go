package lorry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/clock"
	"github.com/pillarkit/pillar/internal/keyfmt"
	"github.com/pillarkit/pillar/internal/objstore"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/sstbuilder"
)

// errUnchanged, returned by a cas function, says the stored state already is
// what the caller wanted (an earlier attempt committed after all).
var errUnchanged = errors.New("unchanged")

// lease is a held partition's committed state as this worker last wrote it.
type lease struct {
	w         *Worker
	pt        *part
	st        PartitionState
	lastWrite time.Time
}

// cas changes the partition's state if it still names this worker and lease
// token; otherwise ErrLeaseLost. Every write renews the lease.
func (l *lease) cas(ctx context.Context, fn func(cur PartitionState) (PartitionState, error)) error {
	w := l.w
	var unchanged PartitionState
	next, err := w.cas(ctx, l.pt.id, func(cur PartitionState) (PartitionState, error) {
		if cur.Owner != w.o.ID || cur.Token != l.st.Token {
			return cur, fmt.Errorf("partition %d: now held by %q (token %d), this worker had token %d: %w",
				l.pt.id, cur.Owner, cur.Token, l.st.Token, ErrLeaseLost)
		}
		next, err := fn(cur)
		if err != nil {
			unchanged = cur
			return cur, err
		}
		now := w.now()
		next.ExpiresMS, next.UpdatedMS = now.Add(w.o.LeaseTTL).UnixMilli(), now.UnixMilli()
		return next, nil
	})
	if errors.Is(err, errUnchanged) {
		l.st = unchanged
		return nil
	}
	if err != nil {
		return err
	}
	l.st, l.lastWrite = next, w.now()
	return nil
}

// renewIfDue extends the lease when a third of it has passed since the last
// write.
func (l *lease) renewIfDue(ctx context.Context) error {
	if l.w.now().Sub(l.lastWrite) < l.w.o.LeaseTTL/3 {
		return nil
	}
	return l.cas(ctx, func(cur PartitionState) (PartitionState, error) { return cur, nil })
}

// release gives the lease back (a pending batch stays recorded for the next
// holder to finish).
func (l *lease) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := l.w.cas(ctx, l.pt.id, func(cur PartitionState) (PartitionState, error) {
		if cur.Owner != l.w.o.ID || cur.Token != l.st.Token {
			return cur, ErrLeaseLost
		}
		cur.Owner, cur.ExpiresMS, cur.UpdatedMS = "", 0, l.w.now().UnixMilli()
		return cur, nil
	})
	if err != nil && !errors.Is(err, ErrLeaseLost) {
		l.w.o.Logger.Warn("lorry: release lease (it lapses by itself)", "partition", l.pt.id, "err", err)
	}
}

// queueView takes a snapshot (see snapshot; fresh as there) and reads
// partition p's queue end in it, never beyond drainTo when that is set
// (>= 0). Unless it fails, the caller calls release when done with sn.
func (w *Worker) queueView(ctx context.Context, p int, drainTo int64, fresh bool) (sn pillar.Snapshot, release func(), end int64, err error) {
	sn, release, err = w.snapshot(ctx, fresh)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("lorry: partition %d: snapshot: %w", p, err)
	}
	end, err = sn.QueueEnd(ctx, p)
	if err != nil {
		release()
		return nil, nil, 0, fmt.Errorf("lorry: partition %d: queue end: %w", p, err)
	}
	if drainTo >= 0 {
		end = min(end, drainTo)
	}
	return sn, release, end, nil
}

// read returns up to limit records of partition p from offset from on (at
// most ReadChunk, never at or beyond drainTo when that is set), and the
// queue's end as the snapshot saw it. Unless fresh, the snapshot may be one
// the worker's partitions share (at most PollInterval/2 old).
func (w *Worker) read(ctx context.Context, p int, from, drainTo int64, limit int, fresh bool) ([]pillar.ExportRecord, int64, error) {
	sn, release, end, err := w.queueView(ctx, p, drainTo, fresh)
	if err != nil {
		return nil, from, err
	}
	defer release()
	n := min(int64(limit), int64(w.o.ReadChunk), end-from)
	if n <= 0 {
		return nil, end, nil
	}
	recs, err := sn.ReadQueue(ctx, p, from, int(n))
	if err != nil {
		return nil, end, fmt.Errorf("lorry: partition %d: read queue at %d: %w", p, from, err)
	}
	return recs, end, nil
}

// readRange reads queue offsets [first, last] of partition p (to rebuild a
// pending batch after a takeover or a crash).
func (w *Worker) readRange(ctx context.Context, p int, first, last int64) ([]pillar.ExportRecord, error) {
	var out []pillar.ExportRecord
	for next := first; next <= last; {
		recs, _, err := w.read(ctx, p, next, last+1, int(last+1-next), true)
		if err != nil {
			return nil, err
		}
		if len(recs) == 0 {
			return nil, fmt.Errorf("lorry: partition %d: queue ends before offset %d of pending batch [%d,%d]", p, next, first, last)
		}
		for _, r := range recs {
			if r.Offset != next {
				return nil, fmt.Errorf("lorry: partition %d: queue returned offset %d, want %d", p, r.Offset, next)
			}
			out = append(out, r)
			next++
		}
	}
	return out, nil
}

// readFresh reads the fresh records among queue offsets [first, last] of
// partition p (a fresh batch's or a bulk batch's riders, read again after
// a takeover or a crash): it scans the range's heads (no values) and reads
// only the fresh records, in runs (gaps of up to 4 bulk records are read
// and dropped), so a bulk backlog queued between them is never read.
func (w *Worker) readFresh(ctx context.Context, p int, first, last int64) ([]pillar.ExportRecord, error) {
	var offs []int64
	for next := first; next <= last; {
		hs, _, err := w.readHeads(ctx, p, next, last+1, w.o.HeadChunk)
		if err != nil {
			return nil, err
		}
		if len(hs) == 0 {
			return nil, fmt.Errorf("lorry: partition %d: queue ends before offset %d of pending batch [%d,%d]", p, next, first, last)
		}
		for _, h := range hs {
			if h.Offset != next {
				return nil, fmt.Errorf("lorry: partition %d: queue returned offset %d, want %d", p, h.Offset, next)
			}
			if !h.IsBulk() {
				offs = append(offs, h.Offset)
			}
			next++
		}
	}
	var out []pillar.ExportRecord
	for i := 0; i < len(offs); {
		j := i + 1
		for j < len(offs) && offs[j]-offs[j-1] <= 5 {
			j++
		}
		recs, err := w.readRange(ctx, p, offs[i], offs[j-1])
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			if !r.IsBulk() {
				out = append(out, r)
			}
		}
		i = j
	}
	return out, nil
}

// deliver takes one batch through the four steps, each retried until it
// succeeds: record it as pending (unless it is already), upload it (unless
// an earlier attempt did), register it, commit the new positions. pl.recs
// may be nil: the records are then read again from the queue by the lane's
// rule. pre, when not nil, is this batch's prefetched upload. Before the
// commit, the loop may name the next batch, which the commit then records
// as pending (and whose files it starts uploading meanwhile).
func (w *Worker) deliver(ctx context.Context, lp *loop, pl *plan, pre *prefetch) error {
	l := lp.l
	p := l.pt.id
	pend := pl.pend
	lp.refresh = false
	start := w.now()
	if !pl.start.IsZero() {
		start = pl.start // taken then (an ordinary batch uploads in the background)
	}
	mark := w.now()
	step := func(d *time.Duration) func(*Stats) {
		now := w.now()
		took := now.Sub(mark)
		mark = now
		return func(s *Stats) { *d += took }
	}
	if err := w.recordPending(ctx, lp, pend); err != nil {
		return err
	}
	w.count(func(s *Stats) { step(&s.PendingTime)(s) })
	if !pl.flown {
		if err := w.hook("pending", p); err != nil {
			return err
		}
	}
	var m *batch.Manifest
	err := w.retry(ctx, l, "upload", func() error {
		var err error
		m, err = w.upload(ctx, lp, pl, pre)
		return err
	})
	if err != nil {
		return err
	}
	if pl.recs == nil {
		// The manifest was there already (an earlier attempt uploaded
		// it): the records are still needed, for what the commit tells the
		// loop (the fresh keys that supersede bulk records) and for the
		// latency accounting.
		err := w.retry(ctx, l, "read pending batch", func() error {
			var err error
			pl.recs, err = lp.contents(ctx, pend)
			return err
		})
		if err != nil {
			return err
		}
	}
	w.count(func(s *Stats) { step(&s.UploadTime)(s) })
	if err := w.hook("uploaded", p); err != nil {
		return err
	}
	var seq int64
	if pre != nil && pre.register && pre.id == pend.ID && pre.seq > 0 && pre.m != nil && pre.m.ID == m.ID {
		seq = pre.seq // registered by the flight
	}
	err = w.retry(ctx, l, "register", func() error {
		if seq > 0 {
			return nil
		}
		var err error
		seq, err = w.o.Registry.RegisterBatch(ctx, m)
		if errors.Is(err, control.ErrConflict) {
			// The id — these very offsets — is registered already, with
			// another manifest: an earlier attempt registered it, crashed
			// before the commit, and the control plane's garbage collection
			// removed its objects before this retry rebuilt them. The
			// records are in the log; only the offset commit is missing.
			w.o.Logger.Warn("lorry: batch registered earlier with another manifest (collected since); committing", "partition", p, "batch", m.ID, "err", err)
			seq = 0
			return nil
		}
		if err != nil {
			return fmt.Errorf("lorry: partition %d: register batch %s: %w", p, m.ID, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	w.count(func(s *Stats) { step(&s.RegisterTime)(s) })
	// Replays and refreshes re-deliver old records: not latencies.
	again := pend.Lane == LaneReplay || lp.refresh
	w.tracked(p, seq, pl.recs, again)
	lp.refresh = false
	if err := w.hook("registered", p); err != nil {
		return err
	}
	n := int64(len(pl.recs))
	if again {
		n = 0 // re-deliveries: no queue record is delivered by them
	}
	after := applyCommit(l.st, pend, seq, n)
	after.Replay = l.st.Replay
	var next *Pending
	nextOrdinary := pend.Lane == LaneOrdinary
	switch pend.Lane {
	case LaneOrdinary:
		next = lp.followUp(ctx, pl, after)
	case LaneFresh:
		next, nextOrdinary = lp.freshFollowUp(ctx, pl, after)
	default:
		lp.committed(pl, after)
	}
	err = w.retry(ctx, l, "commit offset", func() error {
		return l.cas(ctx, func(cur PartitionState) (PartitionState, error) {
			slot := cur.slot(pend.Lane)
			if *slot == nil && cur.Batch == pend.ID || *slot != nil && next != nil && **slot == *next {
				return cur, errUnchanged // an earlier attempt committed after all
			}
			if *slot == nil || **slot != pend {
				return cur, fmt.Errorf("lorry: partition %d: pending batch changed under %s: %w", p, pend.ID, ErrLeaseLost)
			}
			cur = applyCommit(cur, pend, seq, n)
			if nextOrdinary {
				cur.Pending = next
			} else {
				cur.FreshPending = next
			}
			return cur, nil
		})
	})
	if err != nil {
		return err
	}
	w.count(func(s *Stats) { step(&s.CommitTime)(s) })
	if next != nil {
		w.count(func(s *Stats) { s.FollowUps++ })
		if f := lp.bfl; nextOrdinary && f != nil && f.pl.pend == *next {
			f.pre.markRecorded() // it may write its manifest and register now
		}
	}
	if err := w.hook("committed", p); err != nil {
		return err
	}
	var size int64
	for _, f := range m.Files {
		size += f.Size
	}
	bulk := pl.bulk()
	rode := int64(0)
	if pend.Lane == LaneOrdinary && pend.FreshLast > 0 && bulk {
		for _, r := range pl.recs {
			if !r.IsBulk() && r.Offset > pend.Last {
				rode++
			}
		}
	}
	w.count(func(s *Stats) {
		s.FreshRode += rode
		s.Batches++
		s.Records += n
		s.Keys += m.Keys
		s.Deletes += m.Deletes
		s.Bytes += size
		if bulk {
			s.BulkBatches++
		} else {
			s.FreshBatches++
		}
	})
	took := w.now().Sub(start)
	if pend.Lane != LaneReplay && !lp.refresh {
		lp.decay()
		if bulk {
			lp.share[1] += float64(pl.bytes())
		} else {
			lp.share[0] += float64(pl.bytes())
		}
	}
	var oldest time.Time
	if len(pl.recs) > 0 && pl.recs[0].CommittedAt > 0 {
		oldest = time.UnixMilli(pl.recs[0].CommittedAt)
	}
	w.o.Metrics.delivered(p, n, m.Keys, size, took, oldest, w.now())
	w.o.Logger.Debug("lorry: batch delivered", "partition", p, "batch", m.ID, "lane", pend.Lane, "seq", seq, "records", n, "keys", m.Keys, "bytes", size)
	return nil
}

// recordPending records pend in its lane's slot of the partition state
// (step 1), unless it is recorded already.
func (w *Worker) recordPending(ctx context.Context, lp *loop, pend Pending) error {
	l, p := lp.l, lp.pt.id
	if have := *l.st.slot(pend.Lane); have != nil {
		if *have != pend {
			return fmt.Errorf("lorry: partition %d: pending batch %s, asked to deliver %s", p, have.ID, pend.ID)
		}
		return nil
	}
	return w.retry(ctx, l, "record pending batch", func() error {
		return l.cas(ctx, func(cur PartitionState) (PartitionState, error) {
			slot := cur.slot(pend.Lane)
			if *slot != nil && **slot == pend {
				return cur, errUnchanged
			}
			if *slot != nil || pend.Lane == LaneOrdinary && cur.Offset != pend.First ||
				pend.Lane == LaneFresh && cur.FreshOffset() != pend.First ||
				pend.Lane == LaneReplay && (cur.Replay == nil || ReplayBatchID(w.storeID, p, cur.Replay.From, cur.Replay.To, cur.Replay.N) != pend.ID) {
				return cur, fmt.Errorf("lorry: partition %d: state moved (offset %d, fresh %d, pending %v, fresh pending %v) under batch %s: %w",
					p, cur.Offset, cur.FreshOffset(), cur.Pending, cur.FreshPending, pend.ID, ErrLeaseLost)
			}
			if pend.Lane == LaneReplay {
				cur.Replay = nil
			}
			*slot = &pend
			return cur, nil
		})
	})
}

// upload makes the batch's objects exist and returns its manifest as
// stored. A manifest already in the object store (a retry after a crash, or
// another worker's upload of the same batch) wins: that exact manifest is
// registered again, idempotently. Otherwise the SST is built and uploaded
// (or taken from pre, a prefetch of this batch) and manifest.json is written
// last, as a conditional create.
func (w *Worker) upload(ctx context.Context, lp *loop, pl *plan, pre *prefetch) (*batch.Manifest, error) {
	p, pend := lp.pt.id, pl.pend
	if pre != nil && pre.id == pend.ID && !pre.failed {
		// A failed prefetch was the first attempt: retried after the
		// backoff, as any failed upload (by building again).
		select {
		case <-pre.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if pre.err != nil && !errors.Is(pre.err, errCrash) {
			pre.failed = true
			return nil, fmt.Errorf("lorry: partition %d: batch %s: prefetched upload: %w", p, pend.ID, pre.err)
		}
	}
	m, err := sstbuilder.ReadManifest(ctx, w.o.Objects, p, pend.ID)
	if err == nil {
		return m, nil
	}
	if !errors.Is(err, objstore.ErrNotFound) {
		return nil, fmt.Errorf("lorry: partition %d: batch %s: %w", p, pend.ID, err)
	}
	var built *batch.Manifest
	if pre != nil && pre.id == pend.ID {
		select {
		case <-pre.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if errors.Is(pre.err, errCrash) {
			return nil, pre.err
		}
		built = pre.m
	}
	if built == nil {
		if pl.recs == nil {
			if pl.recs, err = lp.contents(ctx, pend); err != nil {
				return nil, err
			}
		}
		if built, err = w.uploadFiles(ctx, p, pend, pl.recs); err != nil {
			return nil, err
		}
	}
	return w.putManifest(ctx, built)
}

// uploadFiles builds the batch's SST and uploads its files (not the
// manifest). File names are unique by content; a file already there is
// accepted when its size and checksum match.
func (w *Worker) uploadFiles(ctx context.Context, p int, pend Pending, recs []pillar.ExportRecord) (*batch.Manifest, error) {
	// Parallelism bounds the builds of batches holding bulk records; a
	// batch of fresh records only does not queue behind them.
	bulk := false
	for i := range recs {
		if recs[i].IsBulk() {
			bulk = true
			break
		}
	}
	if bulk {
		select {
		case w.sem <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		defer func() { <-w.sem }()
	}
	// A batch belongs to one publication: the lanes cut batches where the
	// records' publication changes, so only a replay or refresh, which
	// re-delivers the newest delivered record of each key of a range, can
	// meet two; it keeps the newest record's publication (the others were
	// delivered in their own publication's batches already).
	pub := ""
	if len(recs) > 0 {
		pub = recs[len(recs)-1].Publication
		if mixed := slices.ContainsFunc(recs, func(r pillar.ExportRecord) bool { return r.Publication != pub }); mixed {
			w.o.Logger.Warn("lorry: batch range spans publications; delivering the newest one's records", "partition", p, "batch", pend.ID, "publication", pub)
			recs = slices.DeleteFunc(slices.Clone(recs), func(r pillar.ExportRecord) bool { return r.Publication != pub })
		}
	}
	rows, err := toRows(p, recs)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(w.tmp, fmt.Sprintf("%s-%d", pend.ID, rand.Uint32()))
	defer os.RemoveAll(dir)
	// The typed queue range says "every record of [First, Last] is
	// delivered": true of an ordinary batch only (the control plane orders
	// snapshots after it); fresh and replay batches leave it unset.
	var queueFirst, queueEnd int64
	if pend.Lane == LaneOrdinary {
		queueFirst, queueEnd = pend.First, pend.Last+1
	}
	built, paths, err := sstbuilder.BuildPartition(ctx, sstbuilder.SliceRows(rows), &sstbuilder.BuildOptions{
		Dir: dir, Partition: p, Partitions: w.o.Store.Info().Partitions, Kind: batch.KindDelta,
		BatchID: pend.ID, Source: batchSource(p, pend),
		QueueFirst: queueFirst, QueueEnd: queueEnd, Publication: pub,
		Table: w.o.Table, Now: w.o.Now, Logger: w.o.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("lorry: partition %d: build batch %s: %w", p, pend.ID, err)
	}
	if err := w.hook("built", p); err != nil {
		return nil, err
	}
	prefix := batch.Prefix(p, pend.ID)
	for i, path := range paths {
		f := built.Files[i]
		key := prefix + f.Name
		err := objstore.PutFile(ctx, w.o.Objects, key, path, &objstore.PutOptions{IfNotExists: true})
		if errors.Is(err, objstore.ErrExists) {
			err = w.sameObject(ctx, key, f)
		}
		if err != nil {
			return nil, fmt.Errorf("lorry: partition %d: upload batch %s: %w", p, pend.ID, err)
		}
	}
	return built, nil
}

// batchSource is a batch manifest's source: "lorry:p7:100-199" for an
// ordinary batch (every record of the range that was not delivered before),
// "lorry:p7:fresh:100-199" for the fresh records of the range and
// "lorry:p7:replay:100-199:<batch id>" for a replay of it.
func batchSource(p int, pend Pending) string {
	switch pend.Lane {
	case LaneFresh:
		return fmt.Sprintf("lorry:p%d:fresh:%d-%d", p, pend.First, pend.Last)
	case LaneReplay:
		return fmt.Sprintf("lorry:p%d:replay:%d-%d:%s", p, pend.First, pend.Last, pend.ID)
	}
	return fmt.Sprintf("lorry:p%d:%d-%d", p, pend.First, pend.Last)
}

// sameObject accepts an existing object equal to the file.
func (w *Worker) sameObject(ctx context.Context, key string, f batch.File) error {
	info, err := w.o.Objects.Stat(ctx, key)
	if err != nil {
		return err
	}
	if info.Size != f.Size {
		return fmt.Errorf("%s exists with %d bytes, want %d", key, info.Size, f.Size)
	}
	r, err := w.o.Objects.Get(ctx, key)
	if err != nil {
		return err
	}
	defer r.Close()
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != f.SHA256 {
		return fmt.Errorf("%s exists with sha256 %s, want %s", key, sum, f.SHA256)
	}
	return nil
}

// putManifest writes manifest.json last, as a conditional create; if another
// attempt got there first, its manifest (same batch, same source) wins.
func (w *Worker) putManifest(ctx context.Context, m *batch.Manifest) (*batch.Manifest, error) {
	raw, err := m.Encode()
	if err != nil {
		return nil, err
	}
	key := batch.ManifestKey(m.Partition, m.ID)
	err = w.o.Objects.Put(ctx, key, bytes.NewReader(raw), int64(len(raw)), &objstore.PutOptions{IfNotExists: true})
	if errors.Is(err, objstore.ErrExists) {
		have, rerr := sstbuilder.ReadManifest(ctx, w.o.Objects, m.Partition, m.ID)
		if rerr != nil {
			return nil, rerr
		}
		if have.Source != m.Source || have.Kind != m.Kind || have.Partitions != m.Partitions {
			return nil, fmt.Errorf("lorry: partition %d: batch %s exists from source %q, this one is %q", m.Partition, m.ID, have.Source, m.Source)
		}
		return have, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lorry: partition %d: batch %s: manifest: %w", m.Partition, m.ID, err)
	}
	return m, nil
}

// prefetch is the upload of a follow-up batch's SST files, started while the
// offset commit that records the batch as pending runs. Its manifest is
// written only after that commit, by upload; if the commit fails, the files
// are orphans for Cleanup.
type prefetch struct {
	id   string
	done chan struct{}
	m    *batch.Manifest
	err  error

	// A flight's prefetch (register) also writes the manifest and
	// registers the batch, once recorded is closed (its pending record
	// committed; abort instead: the loop ended first). seq is the batch's
	// sequence number when that registration succeeded (0: the loop
	// registers it, with retries).
	register         bool
	recorded, abort  chan struct{}
	recordOnce       sync.Once
	abortOnce        sync.Once
	registeredSignal chan struct{}
	seq              int64
	// claim: 0 open, 1 the flight writes its manifest and registers (it
	// can no longer be demoted), 2 demoted (the flight gives up before its
	// manifest); cancel ends the flight's upload.
	claim  atomic.Int32
	cancel context.CancelFunc

	// failed: upload returned err once already (the loop's goroutine
	// only, after done).
	failed bool
}

// markRecorded says the flight's pending record is committed.
func (pre *prefetch) markRecorded() {
	if pre != nil && pre.register {
		pre.recordOnce.Do(func() { close(pre.recorded) })
	}
}

// stop makes a flight's prefetch give up waiting for its record.
func (pre *prefetch) stop() {
	if pre != nil && pre.register {
		pre.abortOnce.Do(func() { close(pre.abort) })
	}
}

// demote takes the flight's batch back before its manifest is written:
// false when the flight already writes its manifest (it registers soon).
// The flight's upload is cancelled; its files become orphans (Cleanup).
func (pre *prefetch) demote() bool {
	if pre == nil || !pre.register || !pre.claim.CompareAndSwap(0, 2) {
		return false
	}
	pre.cancel()
	return true
}

// registered reports whether the background registration is done.
func (pre *prefetch) registered() bool {
	if pre == nil || !pre.register {
		return false
	}
	select {
	case <-pre.registeredSignal:
		return pre.seq > 0
	default:
		return false
	}
}

func (w *Worker) startPrefetch(ctx context.Context, p int, pend Pending, recs []pillar.ExportRecord) *prefetch {
	pre := &prefetch{id: pend.ID, done: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer close(pre.done)
		pre.m, pre.err = w.uploadFiles(ctx, p, pend, recs)
	}()
	return pre
}

// startFlight is startPrefetch for an ordinary batch flying beside the
// fresh lane: once its files are up and its pending record committed, it
// also writes the manifest and registers the batch (one attempt; the loop
// retries what failed). Registering it here is safe in any order against
// the fresh batches delivered meanwhile: they hold none of its keys.
func (w *Worker) startFlight(ctx context.Context, p int, pend Pending, recs []pillar.ExportRecord, recorded bool) *prefetch {
	return w.startFlightAfter(ctx, p, pend, recs, recorded, 0)
}

// backoff is the wait before attempt n+1 after n failed ones (RetryMin
// doubling up to RetryMax, with jitter), as retry waits.
func (w *Worker) backoff(n int) time.Duration {
	d := w.o.RetryMin
	for i := 1; i < n && d < w.o.RetryMax; i++ {
		d = min(2*d, w.o.RetryMax)
	}
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// startFlightAfter is startFlight, the upload starting after delay (a
// failed flight's retry).
func (w *Worker) startFlightAfter(ctx context.Context, p int, pend Pending, recs []pillar.ExportRecord, recorded bool, delay time.Duration) *prefetch {
	pre := &prefetch{id: pend.ID, done: make(chan struct{}), register: true, recorded: make(chan struct{}), abort: make(chan struct{}),
		registeredSignal: make(chan struct{})}
	if recorded {
		close(pre.recorded)
	}
	ctx, pre.cancel = context.WithCancel(ctx)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer pre.cancel()
		defer close(pre.done)
		defer close(pre.registeredSignal)
		if delay > 0 {
			t := w.o.Clock.NewTimer(delay)
			select {
			case <-t.C:
			case <-pre.abort:
				t.Stop()
				pre.err = errors.New("lorry: flight stopped before its retry")
				return
			case <-ctx.Done():
				t.Stop()
				pre.err = ctx.Err()
				return
			}
		}
		pre.m, pre.err = w.uploadFiles(ctx, p, pend, recs)
		if pre.err != nil {
			return
		}
		select {
		case <-pre.recorded:
		case <-pre.abort:
			return
		case <-ctx.Done():
			return
		}
		if !pre.claim.CompareAndSwap(0, 1) {
			return // demoted: the loop delivers the batch otherwise
		}
		m, err := w.putManifest(ctx, pre.m)
		if err != nil {
			return
		}
		pre.m = m
		if seq, err := w.o.Registry.RegisterBatch(ctx, m); err == nil {
			pre.seq = seq
		}
	}()
	return pre
}

// toRows turns queue records into builder rows sorted by (key, offset): the
// builder keeps the last row of each key, so the newest record wins, and a
// delete becomes a tombstone.
func toRows(p int, recs []pillar.ExportRecord) ([]sstbuilder.Row, error) {
	rows := make([]sstbuilder.Row, len(recs))
	for i, r := range recs {
		k, err := hex.DecodeString(r.PageKey)
		if err != nil || len(k) != pillar.KeySize {
			return nil, fmt.Errorf("lorry: partition %d: offset %d: page key %s is not 32 hex characters", p, r.Offset, keyfmt.ShortText(r.PageKey))
		}
		row := sstbuilder.Row{Key: k, Seq: r.Offset}
		switch r.Op {
		case pillar.OpPut:
			row.Value = r.Value
		case pillar.OpDelete:
			row.Delete = true
		default:
			return nil, fmt.Errorf("lorry: partition %d: offset %d: op %q is neither put nor delete", p, r.Offset, r.Op)
		}
		rows[i] = row
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if c := bytes.Compare(rows[i].Key, rows[j].Key); c != 0 {
			return c < 0
		}
		return rows[i].Seq < rows[j].Seq
	})
	return rows, nil
}

// retry runs fn until it succeeds, with exponential backoff and jitter
// between attempts, keeping the lease alive meanwhile. It gives up only when
// ctx ends, the lease is lost or a crash is injected.
func (w *Worker) retry(ctx context.Context, l *lease, step string, fn func() error) error {
	delay := w.o.RetryMin
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil {
			if attempt > 1 {
				w.o.Logger.Info("lorry: recovered", "partition", l.pt.id, "step", step, "attempts", attempt)
			}
			return nil
		}
		if errors.Is(err, ErrLeaseLost) || errors.Is(err, errCrash) {
			return err
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		msg := err.Error()
		l.pt.lastErr.Store(&msg)
		w.count(func(s *Stats) { s.Retries++; s.LastError = msg })
		w.o.Metrics.retried(step)
		if attempt == 1 || attempt%10 == 0 {
			w.o.Logger.Warn("lorry: retrying", "partition", l.pt.id, "step", step, "attempt", attempt, "next_in", delay, "err", err)
		}
		if err := l.renewIfDue(ctx); errors.Is(err, ErrLeaseLost) {
			return err
		}
		d := delay/2 + time.Duration(rand.Int64N(int64(delay/2)+1))
		if !clock.Sleep(ctx, w.o.Clock, d) {
			return ctx.Err()
		}
		delay = min(2*delay, w.o.RetryMax)
	}
}
