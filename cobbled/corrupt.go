package cobbled

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/linxGnu/grocksdb"

	"github.com/pillarkit/pillar/internal/clock"
)

// Corruption handling.
//
// A batch whose files fail verification (size, SHA-256, or RocksDB's block
// checksums, checked before ingest) is refused: the replica keeps serving
// its previous data, retries, and reports "corrupt batch <id>: <reason>" in
// Stats (/healthz), the cobbled_partition_fault metric and to the control
// plane (pillar status). A retracted batch is skipped.
//
// A read that finds corruption in the replica's own database (RocksDB
// answers "Corruption: ...", e.g. a block checksum mismatch on a damaged
// disk) answers the keys that read fine and a per-key error for those that
// do not, then takes the partition out of service on this node: reads get
// KEY_NOT_SERVED (the router fails over), the control plane marks the
// replica "corrupt" (routers stop sending to it) and resets its progress,
// and the ingest worker rebuilds the partition into a fresh database
// generation from the batch log (from seq 0: the control plane lists from
// the oldest live batch, a snapshot after garbage collection). The replica
// serves again once it is back at the seq it had when the corruption was
// found.

// isCorruption reports whether a RocksDB error says the data is corrupt.
func isCorruption(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Corruption")
}

// shortKey renders at most the first 8 bytes of a key in hex, so that an
// error about a huge malformed key stays small.
func shortKey(k []byte) string {
	if len(k) <= 8 {
		return hex.EncodeToString(k)
	}
	return hex.EncodeToString(k[:8]) + "…"
}

// markCorrupt takes p out of service and asks its worker to rebuild it.
// Safe to call from readers (it does not take p's locks) and more than once.
func (n *Node) markCorrupt(p *partition, cause error) {
	if !p.rebuildReq.CompareAndSwap(false, true) {
		return
	}
	p.serving.Store(false)
	reason := fmt.Sprintf("corrupt replica: %v", cause)
	p.setFault(reason, "replica")
	p.setErr(errors.New(reason))
	n.opts.Metrics.corruptReads.Inc()
	n.opts.Logger.Error("cobbled: replica data corrupt; not serving the partition, rebuilding it from the object store", "partition", p.id, "err", cause)
	p.cancelPoll()
}

// rebuild replaces p's database with an empty new generation at seq 0 and
// tells the control plane (which resets the replica's progress and stops
// routing to it). The worker then applies the log from the start. It
// returns false when ctx ends first.
func (n *Node) rebuild(ctx context.Context, p *partition) bool {
	reason := "corrupt replica"
	if f := p.fault.Load(); f != nil {
		reason = *f
	}
	// The control plane must hear of it before the replica reports lower
	// seqs again (it refuses progress going backwards otherwise).
	backoff := n.opts.RetryBackoff
	for {
		err := n.opts.Control.ReportFault(ctx, Fault{NodeID: n.opts.ID, Partition: p.id, Reason: reason, Serving: false})
		if err == nil {
			break
		}
		n.opts.Logger.Warn("cobbled: report corrupt replica", "partition", p.id, "err", err)
		if !clock.Sleep(ctx, n.opts.Clock, backoff) {
			return false
		}
		backoff = min(2*backoff, n.opts.RetryBackoffMax)
	}
	p.applyMu.Lock()
	defer p.applyMu.Unlock()
	if p.dropping {
		return false
	}
	until := max(p.st.Seq, p.rebuildUntil)
	name := nextGen(p.st.DB)
	path := filepath.Join(p.dir, name)
	if err := os.RemoveAll(path); err != nil {
		n.opts.Logger.Error("cobbled: rebuild", "partition", p.id, "err", err)
		return clock.Sleep(ctx, n.opts.Clock, n.opts.RetryBackoffMax)
	}
	db, err := grocksdb.OpenDb(n.dbOpts, path)
	if err != nil {
		n.opts.Logger.Error("cobbled: rebuild: create generation", "partition", p.id, "dir", name, "err", err)
		return clock.Sleep(ctx, n.opts.Clock, n.opts.RetryBackoffMax)
	}
	st := partState{DB: name}
	if err := writeState(p.dir, st); err != nil {
		closeDB(db)
		os.RemoveAll(path)
		n.opts.Logger.Error("cobbled: rebuild: record generation", "partition", p.id, "err", err)
		return clock.Sleep(ctx, n.opts.Clock, n.opts.RetryBackoffMax)
	}
	old, oldName := p.swap(db), p.st.DB
	if old != nil {
		closeDB(old)
	}
	if err := os.RemoveAll(filepath.Join(p.dir, oldName)); err != nil {
		n.opts.Logger.Warn("cobbled: remove corrupt generation", "partition", p.id, "dir", oldName, "err", err)
	}
	p.st, p.metaID, p.rebuildUntil = st, "", until
	p.rebuilding.Store(true)
	p.setApplied(0)
	p.rebuildReq.Store(false)
	n.opts.Metrics.rebuilds.Inc()
	n.opts.Logger.Warn("cobbled: partition rebuilding from the batch log", "partition", p.id, "until_seq", until)
	return true
}

// rebuiltEnough reports whether a rebuilding replica is back at the seq it
// had when its corruption was found (then it serves again). The caller
// holds applyMu.
func (n *Node) rebuiltEnough(p *partition) bool {
	return p.rebuilding.Load() && p.st.Seq >= p.rebuildUntil
}

// reportFault sends p's fault to the control plane (best effort; the next
// failure or success reports again).
func (n *Node) reportFault(ctx context.Context, p *partition, batchID, reason string) {
	if n.opts.Control == nil {
		return
	}
	err := n.opts.Control.ReportFault(ctx, Fault{NodeID: n.opts.ID, Partition: p.id, BatchID: batchID, Reason: reason, Serving: p.serving.Load()})
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
