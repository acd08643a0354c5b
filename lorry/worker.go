package lorry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pillarkit/pillar/internal/clock"
	"github.com/pillarkit/pillar/pillar"
)

// errCrash marks an injected crash (tests): the loop that meets it returns
// at once, leaving state and leases as a killed process would.
var errCrash = errors.New("lorry: injected crash")

// Worker delivers the export queue of the partitions it holds. Create it with
// New, then call Run (until cancelled) or Drain (once) — not both, and each
// at most once.
type Worker struct {
	o       Options
	storeID string
	tmp     string // scratch directory under TempDir
	parts   []int  // eligible partitions
	sem     chan struct{}

	mu    sync.Mutex
	held  map[int]*part
	wg    sync.WaitGroup
	casCh chan casReq // group committer's requests (nil: commit directly)

	snapMu sync.Mutex
	snap   *sharedSnap // the snapshot partition loops share
	stats  Stats
	tr     *tracker
	// flights: the last bulk flights' times (noteFlight; under mu).
	flights  [8]time.Duration
	nflights int
	bufs     atomic.Int64 // bytes read ahead, all partitions
	peak     atomic.Int64
}

// part is one held partition's loop.
type part struct {
	id       int
	cancel   context.CancelFunc
	done     chan struct{}
	release  atomic.Bool // rebalancing asked the loop to give the lease back
	drainTo  int64       // Drain: deliver up to this offset, then stop (-1: run)
	buffered atomic.Int64
	lastErr  atomic.Pointer[string]
}

// Stats counts what a worker did.
type Stats struct {
	Batches      int64 // batches committed
	Records      int64 // records in them (before last-write-wins)
	Keys         int64 // keys written (puts + tombstones)
	Deletes      int64 // tombstones among Keys
	Bytes        int64 // SST bytes uploaded
	Retries      int64 // failed attempts that were retried
	FollowUps    int64 // batches recorded as pending by the previous batch's commit
	FreshBatches int64 // batches holding no bulk record
	BulkBatches  int64 // batches holding bulk records
	FreshRode    int64 // fresh records delivered at the head of a bulk batch (FreshRideWait)
	Demoted      int64 // bulk batches whose riders went back to the fresh lane (upload not done in time: see FlightTime)
	// FlightTime is the time a bulk batch's flight takes now from its
	// being planned to its end (a build slot, the build and upload, then,
	// once its pending record is committed, the manifest and the
	// registration): the median of the last 8, over every partition
	// (0: none yet; one hung flight moves it little). A
	// bulk batch carrying fresh records that takes more than twice this
	// (at least twice FreshRideWait, at most 8 times it) gives its riders
	// back to the fresh lane.
	FlightTime time.Duration
	// Scanned counts the record heads the head scans read; ScanTime is
	// the time those reads took (every partition's, added up); HeadScan
	// is the longest a partition's first head scan took, from its loop's
	// start to reaching the end of the queue it first saw (bulk delivery
	// starts then).
	Scanned      int64
	ScanTime     time.Duration
	HeadScan     time.Duration
	Acquired     int64 // leases taken
	Lost         int64 // leases lost to another worker
	Held         []int // partitions held now
	Buffered     int64 // bytes read ahead and not yet committed, now
	PeakBuffered int64 // the most Buffered has been
	LastError    string
	// Cumulative time spent in each delivery step (including retries):
	// reading the queue, recording the pending batch, building and
	// uploading, registering, committing the offset.
	ReadTime, PendingTime, UploadTime, RegisterTime, CommitTime time.Duration
}

// New validates the options and prepares a worker. It touches nothing yet.
func New(opts Options) (*Worker, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.ensureDefaults()
	w := &Worker{o: opts, sem: make(chan struct{}, opts.Parallelism), held: map[int]*part{}, tr: newTracker()}
	if len(opts.Partitions) > 0 {
		w.parts = append([]int(nil), opts.Partitions...)
		sort.Ints(w.parts)
	} else {
		for p := 0; p < opts.Store.Info().Partitions; p++ {
			w.parts = append(w.parts, p)
		}
	}
	return w, nil
}

// ID returns the worker's id.
func (w *Worker) ID() string { return w.o.ID }

// Stats returns a snapshot of the worker's counters.
func (w *Worker) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.stats
	for id := range w.held {
		s.Held = append(s.Held, id)
	}
	sort.Ints(s.Held)
	s.Buffered = w.bufs.Load()
	s.PeakBuffered = w.peak.Load()
	return s
}

func (w *Worker) count(fn func(s *Stats)) {
	w.mu.Lock()
	fn(&w.stats)
	w.mu.Unlock()
}

func (w *Worker) now() time.Time { return w.o.Now() }

// noteFlight adds one bulk batch's flight time (from being planned to the
// flight's end) to the last 8, and sets Stats.FlightTime to their (lower)
// median.
func (w *Worker) noteFlight(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.flights[w.nflights%len(w.flights)] = max(d, 1)
	w.nflights++
	n := min(w.nflights, len(w.flights))
	ds := append([]time.Duration(nil), w.flights[:n]...)
	slices.Sort(ds)
	w.stats.FlightTime = ds[(n-1)/2]
}

// flightTime returns Stats.FlightTime.
func (w *Worker) flightTime() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats.FlightTime
}

func (w *Worker) hook(point string, p int) error {
	if w.o.hook == nil {
		return nil
	}
	if err := w.o.hook(point, p); err != nil {
		return fmt.Errorf("lorry: partition %d: %s: %w: %w", p, point, errCrash, err)
	}
	return nil
}

func (w *Worker) init(ctx context.Context) error {
	var err error
	if w.storeID == "" {
		if w.storeID, err = storeID(ctx, w.o.Store); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(w.o.TempDir, 0o755); err != nil {
		return fmt.Errorf("lorry: temp dir: %w", err)
	}
	if w.tmp, err = os.MkdirTemp(w.o.TempDir, "lorry-"+w.o.ID+"-"); err != nil {
		return fmt.Errorf("lorry: temp dir: %w", err)
	}
	return nil
}

// Run holds a fair share of the partitions and delivers their queues until
// ctx ends; then it gives its leases back and returns. It returns an error
// only when it cannot start (the store is unreadable).
func (w *Worker) Run(ctx context.Context) error {
	if err := w.init(ctx); err != nil {
		return err
	}
	w.o.Logger.Info("lorry: worker started", "id", w.o.ID, "partitions", len(w.parts), "store_id", w.storeID)
	defer w.o.Logger.Info("lorry: worker stopped", "id", w.o.ID)
	defer os.RemoveAll(w.tmp)
	stopCommitter := w.startCommitter()
	pctx, cancelParts := context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		cancelParts()
		w.wg.Wait()
		stopCommitter()
		w.dropSnapshot()
		w.retire()
	}()
	go func() { // a cancelled Run stops the loops, which give their leases back
		<-ctx.Done()
		cancelParts()
	}()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.watchReplicas(pctx)
	}()
	if w.o.CleanupInterval > 0 {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.cleanupLoop(pctx)
		}()
	}
	every := w.o.LeaseTTL / 3
	for {
		if err := w.balance(pctx); err != nil && ctx.Err() == nil {
			w.o.Logger.Warn("lorry: balance", "err", err)
			w.setErr(err)
		}
		jitter := time.Duration(rand.Int64N(int64(every)/5 + 1))
		if !clock.Sleep(ctx, w.o.Clock, every-jitter) {
			return nil
		}
	}
}

// DrainResult says what Drain did.
type DrainResult struct {
	// Delivered lists the partitions drained; Skipped those whose lease
	// another live worker holds (they are that worker's to deliver).
	Delivered, Skipped []int
	Stats              Stats
}

// Drain delivers everything queued now in the partitions it can lease, then
// gives the leases back and returns. Records committed while it runs may or
// may not be delivered. It fails if a partition cannot be drained (ctx ends,
// or a lease is lost midway).
func (w *Worker) Drain(ctx context.Context) (DrainResult, error) {
	var res DrainResult
	if err := w.init(ctx); err != nil {
		return res, err
	}
	defer os.RemoveAll(w.tmp)
	stopCommitter := w.startCommitter()
	defer stopCommitter()
	defer w.dropSnapshot()
	got, skipped, err := w.acquire(ctx, w.parts)
	if err != nil {
		return res, err
	}
	res.Skipped = skipped
	sn, err := w.o.Store.Snapshot(ctx)
	if err != nil {
		return res, fmt.Errorf("lorry: drain: %w", err)
	}
	ends := map[int]int64{}
	for p := range got {
		end, err := sn.QueueEnd(ctx, p)
		if err != nil {
			sn.Release()
			return res, fmt.Errorf("lorry: drain: %w", err)
		}
		ends[p] = end
	}
	sn.Release()
	errs := make(chan error, len(got))
	var ids []int
	for p, st := range got {
		ids = append(ids, p)
		pt := &part{id: p, drainTo: ends[p]}
		w.start(ctx, pt, st, errs)
	}
	w.wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	sort.Ints(ids)
	res.Delivered = ids
	res.Stats = w.Stats()
	return res, errors.Join(all...)
}

// start runs a partition loop; errs, when not nil, receives its failure.
func (w *Worker) start(ctx context.Context, pt *part, st PartitionState, errs chan<- error) {
	pctx, cancel := context.WithCancel(ctx)
	pt.cancel, pt.done = cancel, make(chan struct{})
	w.mu.Lock()
	w.held[pt.id] = pt
	w.stats.Acquired++
	w.mu.Unlock()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer close(pt.done)
		defer cancel()
		err := w.runPartition(pctx, pt, st)
		w.bufs.Add(-pt.buffered.Swap(0))
		w.mu.Lock()
		delete(w.held, pt.id)
		w.mu.Unlock()
		switch {
		case err == nil:
		case errors.Is(err, ErrLeaseLost):
			w.count(func(s *Stats) { s.Lost++ })
			w.o.Logger.Warn("lorry: partition lost to another worker", "partition", pt.id, "err", err)
		default:
			w.setErr(err)
			if !errors.Is(err, errCrash) && ctx.Err() == nil {
				w.o.Logger.Error("lorry: partition loop stopped", "partition", pt.id, "err", err)
			}
		}
		if errs != nil && err != nil {
			errs <- err
		}
	}()
}

func (w *Worker) setErr(err error) {
	w.count(func(s *Stats) { s.LastError = err.Error() })
}

// balance heartbeats the worker, computes its fair share from the live
// workers, asks surplus partitions to give their leases back and takes free
// ones up to the share.
func (w *Worker) balance(ctx context.Context) error {
	if err := w.hook("balance", -1); err != nil {
		return err
	}
	now := w.now()
	if err := w.heartbeat(ctx, now); err != nil {
		return err
	}
	sn, err := w.o.Store.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("lorry: balance: %w", err)
	}
	attrs, err := sn.Attrs(ctx)
	sn.Release()
	if err != nil {
		return fmt.Errorf("lorry: balance: %w", err)
	}
	live := 0
	var dead []string
	for name, raw := range attrs {
		id, ok := strings.CutPrefix(name, AttrWorkerPrefix)
		if !ok {
			continue
		}
		var ws WorkerState
		if err := json.Unmarshal(raw, &ws); err != nil {
			continue
		}
		switch {
		case ws.ExpiresMS > now.UnixMilli():
			live++
		case id != w.o.ID && now.UnixMilli()-ws.ExpiresMS > 2*w.o.LeaseTTL.Milliseconds():
			dead = append(dead, name)
		}
	}
	live = max(live, 1)
	share := (len(w.parts) + live - 1) / live
	w.mu.Lock()
	var heldIDs []int
	for id, pt := range w.held {
		if !pt.release.Load() {
			heldIDs = append(heldIDs, id)
		}
	}
	w.mu.Unlock()
	sort.Ints(heldIDs)
	if surplus := len(heldIDs) - share; surplus > 0 {
		for _, id := range heldIDs[len(heldIDs)-surplus:] {
			w.mu.Lock()
			if pt := w.held[id]; pt != nil {
				pt.release.Store(true)
			}
			w.mu.Unlock()
		}
		w.o.Logger.Info("lorry: giving partitions back", "count", surplus, "share", share, "workers", live)
	} else if want := share - len(heldIDs); want > 0 {
		var cands []int
		w.mu.Lock()
		for _, p := range w.parts {
			if w.held[p] == nil {
				cands = append(cands, p)
			}
		}
		w.mu.Unlock()
		got, _, err := w.acquireUpTo(ctx, cands, want)
		if err != nil {
			return err
		}
		for p, st := range got {
			w.start(ctx, &part{id: p, drainTo: -1}, st, nil)
		}
		if len(got) > 0 {
			w.o.Logger.Info("lorry: partitions acquired", "count", len(got), "share", share, "workers", live)
		}
	}
	if len(dead) > 0 {
		w.forget(ctx, dead)
	}
	return nil
}

// heartbeat writes the worker's own attribute (nobody else writes it).
func (w *Worker) heartbeat(ctx context.Context, now time.Time) error {
	tx, err := w.o.Store.Begin(ctx)
	if err != nil {
		return fmt.Errorf("lorry: heartbeat: %w", err)
	}
	defer tx.Abort()
	var ws WorkerState
	name := AttrWorkerPrefix + w.o.ID
	if err := tx.Attr(ctx, name, &ws); err != nil || ws.StartedMS == 0 {
		ws.StartedMS = now.UnixMilli()
	}
	ws.ExpiresMS = now.Add(w.o.LeaseTTL).UnixMilli()
	w.mu.Lock()
	ws.Owned = len(w.held)
	w.mu.Unlock()
	ws.Lost, ws.Latency, ws.AtMS = w.Lost(), w.Latency(), now.UnixMilli()
	if err := tx.SetAttr(ctx, name, ws); err != nil {
		return fmt.Errorf("lorry: heartbeat: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("lorry: heartbeat: %w", err)
	}
	return nil
}

// retire removes the worker's heartbeat on a clean stop, so the others
// count it out at once.
func (w *Worker) retire() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w.forget(ctx, []string{AttrWorkerPrefix + w.o.ID})
}

func (w *Worker) forget(ctx context.Context, names []string) {
	tx, err := w.o.Store.Begin(ctx)
	if err != nil {
		return
	}
	defer tx.Abort()
	for _, n := range names {
		_ = tx.DeleteAttr(ctx, n)
	}
	if err := tx.Commit(ctx); err != nil && !errors.Is(err, pillar.ErrConflict) {
		w.o.Logger.Warn("lorry: remove worker heartbeats", "err", err)
	}
}

// leasable reports whether this worker may take a partition in state st.
func (w *Worker) leasable(st PartitionState, now time.Time) bool {
	return st.Owner == "" || st.Owner == w.o.ID || st.ExpiresMS <= now.UnixMilli()
}

// acquire takes every partition of ps that is free, expired or held under
// this worker's id; it returns the taken ones with their new state, and the
// ones another live worker holds.
func (w *Worker) acquire(ctx context.Context, ps []int) (map[int]PartitionState, []int, error) {
	return w.acquireUpTo(ctx, ps, len(ps))
}

func (w *Worker) acquireUpTo(ctx context.Context, ps []int, limit int) (map[int]PartitionState, []int, error) {
	got := map[int]PartitionState{}
	var skipped []int
	if limit <= 0 || len(ps) == 0 {
		return got, nil, nil
	}
	// One transaction for all of them; if someone raced us for any, fall
	// back to one transaction per partition.
	try := func(cands []int, limit int) (map[int]PartitionState, []int, error) {
		now := w.now()
		tx, err := w.o.Store.Begin(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("lorry: acquire: %w", err)
		}
		defer tx.Abort()
		out := map[int]PartitionState{}
		var busy []int
		for _, p := range cands {
			st, err := readPartition(ctx, tx, p)
			if err != nil {
				return nil, nil, err
			}
			if !w.leasable(st, now) {
				busy = append(busy, p)
				continue
			}
			if len(out) >= limit {
				continue
			}
			if st.Owner != "" && st.Owner != w.o.ID {
				w.o.Logger.Info("lorry: taking over an expired lease", "partition", p, "from", st.Owner,
					"expired_ago", now.Sub(time.UnixMilli(st.ExpiresMS)).Round(time.Millisecond))
			}
			st.Owner, st.Token, st.ExpiresMS, st.UpdatedMS = w.o.ID, st.Token+1, now.Add(w.o.LeaseTTL).UnixMilli(), now.UnixMilli()
			if err := tx.SetAttr(ctx, PartitionAttr(p), st); err != nil {
				return nil, nil, err
			}
			out[p] = st
		}
		if len(out) == 0 {
			return out, busy, nil
		}
		if err := tx.Commit(ctx); err != nil {
			return nil, nil, fmt.Errorf("lorry: acquire: %w", err)
		}
		return out, busy, nil
	}
	out, busy, err := try(ps, limit)
	if err == nil {
		return out, busy, nil
	}
	if !errors.Is(err, pillar.ErrConflict) {
		return nil, nil, err
	}
	for _, p := range ps {
		if len(got) >= limit {
			break
		}
		one, b, err := try([]int{p}, 1)
		if errors.Is(err, pillar.ErrConflict) {
			skipped = append(skipped, p)
			continue
		}
		if err != nil {
			return got, skipped, err
		}
		for k, v := range one {
			got[k] = v
		}
		skipped = append(skipped, b...)
	}
	return got, skipped, nil
}
