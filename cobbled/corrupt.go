package cobbled

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/linxGnu/grocksdb"

	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/clock"
	"github.com/pillarkit/pillar/internal/keyfmt"
	"github.com/pillarkit/pillar/internal/rocks"
)

// Corruption handling.
//
// A batch whose files fail verification (size, SHA-256, or RocksDB's block
// checksums, checked before ingest) is refused: the replica keeps serving
// its previous data, retries, and reports "corrupt batch <id>: <reason>" in
// Stats (/healthz), the cobbled_partition_fault metric and to the control
// plane (pillar status). A retracted batch is skipped.
//
// A read that finds corruption in one publication's database (RocksDB
// answers "Corruption: ...", e.g. a block checksum mismatch on a damaged
// disk) answers the keys that read fine and a per-key error for those that
// do not, then takes that publication out of service on this replica:
// reads of it get KEY_NOT_SERVED (the router fails over) while the
// partition's other publications keep serving. The fault is reported to the
// control plane; only when no other publication of the partition serves
// here is it reported as not serving (the control plane then marks the
// replica "corrupt" so routers skip it). The ingest worker rebuilds the
// publication into a fresh generation by replaying the partition's batch
// log from the start (the control plane lists from the oldest retained
// batch; a publication's newest snapshot and the deltas after it are always
// retained) up to the seq the replica is at, applying only that
// publication's batches, and serves it again. The partition's seq does not
// move back; the partition's next batches (of any publication) wait until
// the replay is done. state.json records the rebuild (rebuild_until), so a restart
// during it starts it again.

// isCorruption reports whether a RocksDB error says the data is corrupt.
func isCorruption(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Corruption")
}

// shortKey quotes a key by its first bytes and its length (keyfmt.Short),
// so that an error about a huge malformed key stays small.
func shortKey(k []byte) string { return keyfmt.Short(k) }

// markCorrupt takes publication pub of p out of service and asks p's
// worker to rebuild it. Readers call it holding p.mu.RLock (it takes no
// other lock of p but corruptMu); it is safe to call more than once.
func (n *Node) markCorrupt(p *partition, pub string, cause error) {
	if p.requestRebuild(pub, fmt.Sprintf("corrupt replica: publication %q: %v", pub, cause)) {
		n.opts.Metrics.corruptReads.Inc()
		n.opts.Logger.Error("cobbled: replica data corrupt; not serving the publication, rebuilding it from the object store", "partition", p.id, "publication", pub, "err", cause)
		p.cancelPoll()
	}
}

// requestRebuild marks pub's database not serving and queues its rebuild;
// false when it was queued already. The caller holds p.mu (either mode) or
// is the only user of p (open).
func (p *partition) requestRebuild(pub, reason string) bool {
	p.corruptMu.Lock()
	if p.corrupt == nil {
		p.corrupt = map[string]string{}
	}
	if _, ok := p.corrupt[pub]; ok {
		p.corruptMu.Unlock()
		return false
	}
	p.corrupt[pub] = reason
	p.corruptMu.Unlock()
	if d := p.dbs[pub]; d != nil {
		d.serving.Store(false)
	}
	p.rebuildReq.Store(true)
	p.setFault(reason, "replica")
	p.setErr(errors.New(reason))
	return true
}

// nextCorrupt returns a publication queued for a rebuild.
func (p *partition) nextCorrupt() (pub, reason string, ok bool) {
	p.corruptMu.Lock()
	defer p.corruptMu.Unlock()
	for pub, reason := range p.corrupt {
		return pub, reason, true
	}
	return "", "", false
}

// noPublication is no publication's id (ids never hold a NUL byte).
const noPublication = "\x00"

// othersServing reports whether a publication other than pub serves on p.
func (p *partition) othersServing(pub string) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for k, d := range p.dbs {
		if k != pub && d.serving.Load() {
			return true
		}
	}
	return false
}

// rebuild rebuilds one publication queued by markCorrupt (see the top of
// this file). It returns false when ctx ends or the rebuild must be
// retried (the worker calls it again).
func (n *Node) rebuild(ctx context.Context, p *partition) bool {
	pub, reason, ok := p.nextCorrupt()
	if !ok {
		p.rebuildReq.Store(false)
		return true
	}
	f := Fault{NodeID: n.opts.ID, Partition: p.id, Reason: reason, Serving: p.othersServing(pub)}
	backoff := n.opts.RetryBackoff
	for {
		err := n.opts.Control.ReportFault(ctx, f)
		if err == nil {
			break
		}
		n.opts.Logger.Warn("cobbled: report corrupt replica", "partition", p.id, "err", err)
		if !clock.Sleep(ctx, n.opts.Clock, backoff) {
			return false
		}
		backoff = min(2*backoff, n.opts.RetryBackoffMax)
	}
	until, err := p.startRebuild(pub)
	if err != nil {
		n.opts.Logger.Error("cobbled: rebuild", "partition", p.id, "publication", pub, "err", err)
		return clock.Sleep(ctx, n.opts.Clock, n.opts.RetryBackoffMax) && false
	}
	n.opts.Metrics.rebuilds.Inc()
	n.opts.Logger.Warn("cobbled: publication rebuilding from the batch log", "partition", p.id, "publication", pub, "until_seq", until)
	if err := n.replay(ctx, p, pub, until); err != nil {
		if ctx.Err() == nil {
			n.opts.Logger.Error("cobbled: rebuild replay; retrying", "partition", p.id, "publication", pub, "err", err, "in", n.opts.RetryBackoffMax)
			clock.Sleep(ctx, n.opts.Clock, n.opts.RetryBackoffMax)
		}
		return false // started again from a fresh generation next time
	}
	p.applyMu.Lock()
	err = p.finishRebuild(pub)
	p.applyMu.Unlock()
	if err != nil {
		n.opts.Logger.Error("cobbled: rebuild: record", "partition", p.id, "publication", pub, "err", err)
		return false
	}
	p.corruptMu.Lock()
	delete(p.corrupt, pub)
	left := len(p.corrupt)
	p.corruptMu.Unlock()
	if left == 0 {
		p.rebuildReq.Store(false)
		p.setFault("", "")
		p.setErr(nil)
		n.reportFault(ctx, p, "", "")
	}
	n.opts.Logger.Warn("cobbled: publication rebuilt; serving again", "partition", p.id, "publication", pub, "seq", p.applied.Load())
	return true
}

// startRebuild replaces pub's database with an empty generation marked
// rebuild_until = the replica's seq, and returns that seq.
func (p *partition) startRebuild(pub string) (int64, error) {
	p.applyMu.Lock()
	defer p.applyMu.Unlock()
	if p.dropping {
		return 0, ErrNotServed
	}
	until := max(p.st.Seq, p.st.Pubs[pub].RebuildUntil)
	name := p.st.nextGen()
	path := filepath.Join(p.dir, name)
	if err := os.RemoveAll(path); err != nil {
		return 0, err
	}
	db, err := grocksdb.OpenDb(p.n.dbOpts, path)
	if err != nil {
		return 0, fmt.Errorf("create generation %s: %w", name, err)
	}
	st := p.st.clone()
	st.Pubs[pub] = pubState{DB: name, RebuildUntil: until}
	if err := writeState(p.dir, st); err != nil {
		closeDB(db)
		os.RemoveAll(path)
		return 0, fmt.Errorf("record generation %s: %w", name, err)
	}
	p.st = st
	p.meta[pub] = ""
	if old := p.install(pub, &pubDB{db: db, gen: name}); old != nil { // not serving until rebuilt
		closeDB(old.db)
		if err := os.RemoveAll(filepath.Join(p.dir, old.gen)); err != nil {
			p.n.opts.Logger.Warn("cobbled: remove corrupt generation", "partition", p.id, "publication", pub, "dir", old.gen, "err", err)
		}
	}
	return until, nil
}

// replay applies the log's batches of publication pub with seq <= until to
// its (rebuilding) database, without moving the partition's seq: from its
// first snapshot on (the legacy "" publication: from the start).
func (n *Node) replay(ctx context.Context, p *partition, pub string, until int64) error {
	started := pub == ""
	for after := int64(0); after < until; {
		bs, err := n.opts.Control.ListBatches(ctx, p.id, after, n.opts.ListLimit, 0)
		if err != nil {
			return fmt.Errorf("list batches after %d: %w", after, err)
		}
		if len(bs) == 0 {
			return nil
		}
		for i := range bs {
			b := &bs[i]
			if b.Seq > until {
				return nil
			}
			after = b.Seq
			m := &b.Manifest
			if m.Publication != pub || b.Retracted != "" {
				continue
			}
			if m.Kind == batch.KindSnapshot {
				started = true
			}
			if !started {
				continue
			}
			if err := n.replayOne(ctx, p, b); err != nil {
				return err
			}
		}
	}
	return nil
}

func (n *Node) replayOne(ctx context.Context, p *partition, b *Batch) error {
	if err := n.checkManifest(p.id, &b.Manifest); err != nil {
		return err
	}
	select {
	case n.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-n.sem }()
	p.applyMu.Lock()
	defer p.applyMu.Unlock()
	if p.dropping {
		return ErrNotServed
	}
	paths, err := n.download(ctx, p, b)
	if err != nil {
		return err
	}
	if len(paths) == 0 {
		return fmt.Errorf("batch %s: no files to ingest", b.Manifest.ID)
	}
	ing := rocks.IngestOptions(b.Manifest.Kind == batch.KindSnapshot)
	defer ing.Destroy()
	if err := p.ingestReplay(b, paths, ing); err != nil {
		return fmt.Errorf("cobbled: partition %d: rebuild publication %q: batch %s (seq %d): %w", p.id, b.Manifest.Publication, b.Manifest.ID, b.Seq, err)
	}
	return nil
}

// finishRebuild records pub's rebuilt database as serving. The caller
// holds applyMu.
func (p *partition) finishRebuild(pub string) error {
	st := p.st.clone()
	ps := st.Pubs[pub]
	ps.RebuildUntil = 0
	st.Pubs[pub] = ps
	if err := writeState(p.dir, st); err != nil {
		return err
	}
	p.st = st
	p.refreshBytes(pub)
	p.mu.RLock()
	if d := p.dbs[pub]; d != nil {
		d.serving.Store(true)
	}
	p.mu.RUnlock()
	return nil
}

// reportFault sends p's fault to the control plane (best effort; the next
// failure or success reports again).
func (n *Node) reportFault(ctx context.Context, p *partition, batchID, reason string) {
	if n.opts.Control == nil {
		return
	}
	err := n.opts.Control.ReportFault(ctx, Fault{NodeID: n.opts.ID, Partition: p.id, BatchID: batchID, Reason: reason, Serving: !p.rebuildReq.Load() || p.othersServing(noPublication)})
	if err != nil && ctx.Err() == nil {
		n.opts.Logger.Warn("cobbled: report fault", "partition", p.id, "err", err)
	}
}

// setFault records the fault text shown in Stats and the fault metric
// (kind "batch" or "replica"; "" clears).
func (p *partition) setFault(reason, kind string) {
	lbl := fmt.Sprint(p.id)
	if reason == "" {
		p.fault.Store(nil)
		p.n.opts.Metrics.fault.DeleteLabelValues(lbl, "batch")
		p.n.opts.Metrics.fault.DeleteLabelValues(lbl, "replica")
		return
	}
	p.fault.Store(&reason)
	p.n.opts.Metrics.fault.WithLabelValues(lbl, kind).Set(1)
}

// cancelPoll interrupts the worker's long poll (so it sees a rebuild
// request at once).
func (p *partition) cancelPoll() {
	p.pollMu.Lock()
	if p.pollCancel != nil {
		p.pollCancel()
	}
	p.pollMu.Unlock()
}

func (p *partition) setPollCancel(c context.CancelFunc) {
	p.pollMu.Lock()
	p.pollCancel = c
	p.pollMu.Unlock()
}
