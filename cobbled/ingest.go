package cobbled

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/clock"
	"github.com/pillarkit/pillar/internal/keyfmt"
	"github.com/pillarkit/pillar/internal/sstverify"
	"github.com/pillarkit/pillar/pillar"
)

// Run registers the node with the control plane and runs until ctx ends:
// heartbeats, routing refreshes (opening newly assigned partitions, dropping
// unassigned ones once their new owners report caught up), and one ingest
// worker per held partition. It returns after every worker has stopped.
func (n *Node) Run(ctx context.Context) error {
	ctl := n.opts.Control
	if ctl == nil {
		return errors.New("cobbled: run: no control plane")
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer n.stopWorkers()
	backoff := n.opts.RetryBackoff
	for {
		err := ctl.RegisterNode(ctx, n.opts.ID, n.opts.Addr, n.opts.Zone)
		if err == nil {
			break
		}
		if errors.Is(err, control.ErrUnauthenticated) {
			// Retrying cannot help: the token is wrong or missing.
			return fmt.Errorf("cobbled: node %s: the control plane refused its token (check --token-file): %w", n.opts.ID, err)
		}
		n.opts.Logger.Warn("cobbled: register node", "err", err)
		if !clock.Sleep(ctx, n.opts.Clock, backoff) {
			return nil
		}
		backoff = min(2*backoff, n.opts.RetryBackoffMax)
	}
	// Serve (and keep ingesting) what is on disk while routing is unknown.
	for _, id := range n.Held() {
		n.startWorker(ctx, &wg, n.part(id))
	}
	t := time.NewTicker(n.opts.Heartbeat)
	defer t.Stop()
	for {
		if err := n.tick(ctx, &wg); err != nil {
			if errors.Is(err, ErrPartitions) || errors.Is(err, control.ErrUnauthenticated) {
				return err
			}
			if ctx.Err() == nil {
				n.opts.Logger.Warn("cobbled: control plane", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// tick heartbeats, refreshes routing and reconciles held partitions with it.
func (n *Node) tick(ctx context.Context, wg *sync.WaitGroup) error {
	ctl := n.opts.Control
	if err := ctl.Heartbeat(ctx, n.opts.ID); errors.Is(err, control.ErrUnknownNode) {
		// Forgotten (removed, or the control plane's log was rebuilt):
		// register again; progress is re-reported below.
		if err := ctl.RegisterNode(ctx, n.opts.ID, n.opts.Addr, n.opts.Zone); err != nil {
			return fmt.Errorf("register again: %w", err)
		}
		n.opts.Logger.Warn("cobbled: the control plane did not know this node; registered again")
	} else if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	r, err := ctl.GetRouting(ctx)
	if err != nil {
		return fmt.Errorf("routing: %w", err)
	}
	if r.Partitions != n.p {
		return fmt.Errorf("cobbled: control plane has %d partitions, node has %d: %w", r.Partitions, n.p, ErrPartitions)
	}
	// Drops wait for each partition's apply lock (a snapshot may be
	// downloading): in the background, so heartbeats go on.
	if due := n.learnPublications(r); len(due) > 0 && n.dropBusy.CompareAndSwap(false, true) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer n.dropBusy.Store(false)
			for _, pub := range due {
				n.dropEverywhere(ctx, pub)
			}
		}()
	}
	for id := 0; id < n.p && id < len(r.Replicas); id++ {
		mine, reported := false, int64(-1)
		for _, rep := range r.Replicas[id] {
			if rep.NodeID == n.opts.ID {
				mine, reported = true, rep.AppliedSeq
			}
		}
		p := n.part(id)
		if id < len(r.NewestSeq) && p != nil {
			p.newest.Store(max(p.newest.Load(), r.NewestSeq[id]))
			n.opts.Metrics.lag.WithLabelValues(strconv.Itoa(id)).Set(float64(max(0, p.newest.Load()-p.applied.Load())))
		}
		switch {
		case mine && p == nil:
			np, err := n.addPartition(id)
			if err != nil {
				n.opts.Logger.Error("cobbled: open assigned partition", "partition", id, "err", err)
				continue
			}
			n.startWorker(ctx, wg, np)
		case mine && reported < p.applied.Load():
			// A lost report (or a restart) left the control plane behind.
			if err := ctl.ReportApplied(ctx, n.opts.ID, id, p.applied.Load(), p.pubBytes()); err != nil {
				n.opts.Logger.Warn("cobbled: report applied", "partition", id, "err", err)
			}
		case !mine && p != nil && ownersCaughtUp(r, id):
			n.dropPartition(id)
		}
	}
	return nil
}

// ownersCaughtUp reports whether partition id's replicas in r (which do not
// include this node) have all applied its newest batch, with at least one up.
func ownersCaughtUp(r *Routing, id int) bool {
	if id >= len(r.NewestSeq) {
		return false
	}
	up := 0
	for _, rep := range r.Replicas[id] {
		if rep.State != "up" {
			continue
		}
		if rep.AppliedSeq < r.NewestSeq[id] {
			return false
		}
		up++
	}
	return up > 0
}

func (n *Node) startWorker(ctx context.Context, wg *sync.WaitGroup, p *partition) {
	if p == nil || p.cancel != nil {
		return
	}
	wctx, cancel := context.WithCancel(ctx)
	p.cancel, p.done = cancel, make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(p.done)
		n.worker(wctx, p)
	}()
}

func (n *Node) stopWorkers() {
	for _, id := range n.Held() {
		if p := n.part(id); p != nil && p.cancel != nil {
			p.cancel()
		}
	}
}

// worker long-polls the control plane for p's next batches and applies them
// in order. A batch that fails is retried (never skipped unless it is
// retracted): after DownloadAttempts failures the error is reported, and
// the replica keeps serving what it has and retries every RetryBackoffMax.
// When a reader found p's own data corrupt, the worker rebuilds p from
// the log (corrupt.go).
func (n *Node) worker(ctx context.Context, p *partition) {
	log := n.opts.Logger.With("partition", p.id)
	backoff := n.opts.RetryBackoff
	for ctx.Err() == nil {
		if p.rebuildReq.Load() && !n.rebuild(ctx, p) {
			continue
		}
		pctx, cancel := context.WithCancel(ctx)
		p.setPollCancel(cancel)
		bs, err := n.opts.Control.ListBatches(pctx, p.id, p.applied.Load(), n.opts.ListLimit, n.opts.LongPoll)
		p.setPollCancel(nil)
		cancel()
		if p.rebuildReq.Load() {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Warn("cobbled: list batches", "err", err)
			clock.Sleep(ctx, n.opts.Clock, backoff)
			backoff = min(2*backoff, n.opts.RetryBackoffMax)
			continue
		}
		backoff = n.opts.RetryBackoff
		for i := range bs {
			b := &bs[i]
			if b.Seq <= p.applied.Load() {
				continue
			}
			p.newest.Store(max(p.newest.Load(), bs[len(bs)-1].Seq))
			if !n.ingestRetrying(ctx, p, b) {
				return
			}
			if p.rebuildReq.Load() {
				break
			}
		}
	}
}

// ingestRetrying applies b, retrying until it succeeds, it is retracted
// (then skipped), a rebuild is requested, or ctx ends (false).
func (n *Node) ingestRetrying(ctx context.Context, p *partition, b *Batch) bool {
	log := n.opts.Logger.With("partition", p.id, "seq", b.Seq, "batch", b.Manifest.ID)
	backoff := n.opts.RetryBackoff
	for attempt := 1; ; attempt++ {
		err := n.fetchAndApply(ctx, p, b)
		if err == nil {
			p.setErr(nil)
			if b.Retracted == "" {
				log.Info("cobbled: batch applied", "kind", b.Manifest.Kind, "keys", b.Manifest.Keys)
			}
			n.afterApplied(ctx, p)
			if err := n.opts.Control.ReportApplied(ctx, n.opts.ID, p.id, p.applied.Load(), p.pubBytes()); err != nil && ctx.Err() == nil {
				// The next tick re-reports from the routing table.
				log.Warn("cobbled: report applied", "err", err)
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		n.opts.Metrics.ingestErrors.WithLabelValues(errReason(err)).Inc()
		if errors.Is(err, ErrChecksum) || errors.Is(err, ErrCorruptSST) || errors.Is(err, ErrForeignKey) {
			// The batch itself is bad: say so where operators look. It
			// stays refused until it is repaired or retracted.
			reason := fmt.Sprintf("corrupt batch %s: %v", b.Manifest.ID, err)
			if f := p.fault.Load(); f == nil || *f != reason {
				p.setFault(reason, "batch")
				n.reportFault(ctx, p, b.Manifest.ID, reason)
			}
		}
		if attempt >= n.opts.DownloadAttempts {
			p.setErr(err)
			log.Error("cobbled: batch failed; replica stays at the previous batch and retries", "attempt", attempt, "err", err)
		} else {
			log.Warn("cobbled: batch attempt failed", "attempt", attempt, "err", err)
		}
		if !clock.Sleep(ctx, n.opts.Clock, backoff) {
			return false
		}
		backoff = min(2*backoff, n.opts.RetryBackoffMax)
		if p.rebuildReq.Load() {
			return true
		}
		// It may have been retracted meanwhile (pillar control retract).
		if bs, err := n.opts.Control.ListBatches(ctx, p.id, b.Seq-1, 1, 0); err == nil && len(bs) == 1 && bs[0].Seq == b.Seq {
			*b = bs[0]
		}
	}
}

// afterApplied clears a batch fault once the replica moves on.
func (n *Node) afterApplied(ctx context.Context, p *partition) {
	if p.fault.Load() != nil && !p.rebuildReq.Load() {
		p.setFault("", "")
		n.reportFault(ctx, p, "", "")
	}
}

func errReason(err error) string {
	switch {
	case errors.Is(err, ErrChecksum):
		return "checksum"
	case errors.Is(err, ErrCorruptSST):
		return "corrupt_sst"
	case errors.Is(err, ErrForeignKey):
		return "foreign_key"
	case errors.Is(err, ErrForeignManifest):
		return "foreign_manifest"
	case errors.Is(err, ErrOutOfOrder):
		return "out_of_order"
	}
	return "other"
}

// copyBufs is a set of buffers for hashingCopy.
type copyBufs [4][]byte

var copyBufPool = sync.Pool{New: func() any {
	var b copyBufs
	for i := range b {
		b[i] = make([]byte, 256<<10) // pace's read chunk: one paced read per buffer
	}
	return &b
}}

// hashingCopy copies src to dst and writes the same bytes to h, which
// hashes them in a goroutine of its own: the copy (read and write system
// calls) and SHA-256 then use two cores instead of taking turns on one.
// Each chunk's write and hash hold a slot from cpu while they run
// (pace.Limiter.CPU: under the adaptive mode a snapshot leaves a P free
// for reads and deltas); the read from src does not, as it may wait on the
// network. After each chunk both goroutines yield their P
// (runtime.Gosched): a read handler made runnable meanwhile runs first
// instead of waiting for the copy or the hash to block, which with two Ps
// and a few partitions' deltas copying at once was up to several ms
// (`pillar bench ingest`'s Go sched wait column); with nothing waiting,
// Gosched returns at once. It returns the bytes copied and the first read,
// write or cpu error.
func hashingCopy(dst io.Writer, src io.Reader, h hash.Hash, cpu func() (release func(), err error)) (int64, error) {
	bufs := copyBufPool.Get().(*copyBufs)
	defer copyBufPool.Put(bufs)
	free := make(chan []byte, len(bufs))
	full := make(chan []byte, len(bufs))
	for _, b := range bufs {
		free <- b[:cap(b)]
	}
	hashed := make(chan struct{})
	var hashErr error
	go func() {
		defer close(hashed)
		for b := range full {
			if hashErr == nil {
				release, err := cpu()
				if err != nil {
					hashErr = err
				} else {
					h.Write(b) // a hash.Hash never fails
					release()
					runtime.Gosched() // reads waiting for a P go first (below)
				}
			}
			free <- b[:cap(b)]
		}
	}()
	var n int64
	var err error
	for {
		b := <-free
		m, rerr := src.Read(b)
		if m > 0 {
			release, cerr := cpu()
			if cerr != nil {
				err = cerr
				break
			}
			_, werr := dst.Write(b[:m])
			release()
			if werr != nil {
				err = werr
				break
			}
			n += int64(m)
			full <- b[:m]
			runtime.Gosched()
		} else {
			free <- b
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			err = rerr
			break
		}
	}
	close(full)
	<-hashed
	if err == nil {
		err = hashErr
	}
	return n, err
}

// stagePipeline runs one staged file's finishing step (finishStaged: its
// fsync and block verification) in the background while the caller
// downloads the next file, at most one at a time. Serially, a 1 GiB
// snapshot of four 256 MiB files spent 0.5 s in fsync and 0.3 s in
// verification, on top of 1.8 s copying and hashing, with the copy idle
// meanwhile (BenchmarkSnapshotApply, ./bench/ingestbench/, 19:28 UTC); the
// bare IngestExternalFile loop the issue compares with copies and syncs
// only. The zero value is ready; wait returns the pending step's error.
type stagePipeline struct {
	pending chan error // nil when no step is running
}

// start runs f in the background. The previous step must have been waited
// for.
func (s *stagePipeline) start(f func() error) {
	ch := make(chan error, 1)
	s.pending = ch
	go func() { ch <- f() }()
}

// wait waits for the running step, if any, and returns its error.
func (s *stagePipeline) wait() error {
	if s.pending == nil {
		return nil
	}
	err := <-s.pending
	s.pending = nil
	return err
}

// finishStaged makes a downloaded file of batch m durable and checks its
// blocks and its key range: the fsync and prepareSST (verification, and
// for a delta the cache warm; both read the file from the page cache) run
// at once, then checkKeyRange, then the file is closed. An fsync or close
// error comes first (the disk), then verification's.
func (n *Node) finishStaged(ctx context.Context, out stagedFile, path string, size int64, m *batch.Manifest) error {
	synced := make(chan error, 1)
	go func() { synced <- out.Sync() }()
	info, verr := n.prepareSST(ctx, path, size) // pace.go
	if verr == nil {
		verr = checkKeyRange(m, info)
	}
	serr := <-synced
	cerr := out.Close()
	return errors.Join(serr, cerr, verr)
}

// checkKeyRange checks that a batch file's first and last keys (info,
// past the batch's meta key) are page keys of the manifest's partition,
// before the file is ingested: a file of another partition's keys (a
// manifest that lies about its partition) would otherwise go into this
// partition's database, where no read would find them, or answer for keys
// that are not its own. The error wraps ErrForeignKey and names the key
// (short) and both partitions; fileError adds the file. Keys between the
// two are not read here (that is a pass over the whole file).
func checkKeyRange(m *batch.Manifest, info sstverify.Info) error {
	for _, k := range [...]struct {
		which string
		key   []byte
	}{{"first", info.First}, {"last", info.Last}} {
		if k.key == nil {
			continue
		}
		if len(k.key) != pillar.KeySize {
			return fmt.Errorf("%s key (%s) is not a %d-byte page key, in a batch of partition %d of %d: %w", k.which, keyfmt.Short(k.key), pillar.KeySize, m.Partition, m.Partitions, ErrForeignKey)
		}
		if q := pillar.Partition(k.key, m.Partitions); q != m.Partition {
			return fmt.Errorf("%s key (%s) is in partition %d of %d, the manifest's partition is %d: %w", k.which, keyfmt.Short(k.key), q, m.Partitions, m.Partition, ErrForeignKey)
		}
	}
	return nil
}

// writebackChunk is how far a staged file's writes get ahead of the
// kernel's writeback before writebackWriter starts it.
const writebackChunk = 8 << 20

// writebackWriter writes a staged file and, every writebackChunk bytes,
// asks the kernel to start writing the new bytes back to disk without
// waiting for it (sync_file_range SYNC_FILE_RANGE_WRITE on Linux, as
// RocksDB's bytes_per_sync does; nothing elsewhere, or for a file that is
// not an *os.File): the disk then writes while the copy goes on, instead
// of the whole file in the fsync after it, with nothing else to do.
type writebackWriter struct {
	f           stagedFile
	off, queued int64 // bytes written; bytes whose writeback was started
}

func (w *writebackWriter) Write(b []byte) (int, error) {
	n, err := w.f.Write(b)
	w.off += int64(n)
	if w.off-w.queued >= writebackChunk {
		startWriteback(w.f, w.queued, w.off-w.queued)
		w.queued = w.off
	}
	return n, err
}
