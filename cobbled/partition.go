package cobbled

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linxGnu/grocksdb"

	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/rocks"
)

// A partition replica on disk:
//
//	<Dir>/p00007/state.json    {"db":"db-000003","seq":17,"batch":"<id of seq 17>"}
//	<Dir>/p00007/db-000003/    the live RocksDB (a new generation per snapshot)
//	<Dir>/p00007/staging/      downloads of the batch being applied
//
// state.json is replaced atomically (write, fsync, rename, fsync dir). It is
// the single commit point of a snapshot swap (it names the new generation)
// and records the sequence number after a delta. A delta's data and its
// batch id (batch.MetaKey) are ingested atomically, so after a crash between
// ingest and state write the database's meta key names batch seq+1 and the
// ingest loop records it without applying it again (reconcile).

const stateFile = "state.json"

type partState struct {
	DB    string `json:"db"`
	Seq   int64  `json:"seq"`
	Batch string `json:"batch"`
}

// partition is one replica. Readers hold mu.RLock while they use db; a
// snapshot swap or a drop takes mu.Lock to replace db, so a database is
// closed only when no reader uses it. applyMu serializes apply, swap and
// drop; the fields under "apply state" are owned by its holder.
type partition struct {
	n   *Node
	id  int
	dir string

	mu sync.RWMutex
	db *grocksdb.DB // nil after close

	applyMu sync.Mutex
	// apply state
	st           partState
	metaID       string // batch id read from the database at open
	dropping     bool
	rebuildUntil int64 // while rebuilding: the seq to reach before serving again

	applied   atomic.Int64
	newest    atomic.Int64 // newest registered seq seen (for lag)
	lastErr   atomic.Pointer[string]
	lastApply atomic.Int64 // unix nanos

	// Integrity (corrupt.go). serving is false while the replica's own data
	// is corrupt or being rebuilt: reads answer KEY_NOT_SERVED.
	serving    atomic.Bool
	rebuildReq atomic.Bool // a reader found corruption; the worker rebuilds
	rebuilding atomic.Bool // rebuilt from seq 0, not yet back at rebuildUntil
	fault      atomic.Pointer[string]
	pollMu     sync.Mutex
	pollCancel context.CancelFunc // cancels the worker's current long poll

	cancel context.CancelFunc // stops the ingest worker (node.go)
	done   chan struct{}      // closed when the worker exits
}

func partDirName(id int) string { return fmt.Sprintf("p%05d", id) }

func parsePartDir(name string) (int, bool) {
	if len(name) != 6 || name[0] != 'p' {
		return 0, false
	}
	v, err := strconv.Atoi(name[1:])
	return v, err == nil && v >= 0
}

// openPartition opens (creating if needed) partition id's replica under the
// node's directory, removing leftovers of an interrupted apply.
func (n *Node) openPartition(id int) (*partition, error) {
	p := &partition{n: n, id: id, dir: filepath.Join(n.opts.Dir, partDirName(id))}
	fail := func(err error) (*partition, error) {
		return nil, fmt.Errorf("cobbled: partition %d: open: %w", id, err)
	}
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		return fail(err)
	}
	b, err := os.ReadFile(filepath.Join(p.dir, stateFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		p.st = partState{DB: genName(1)}
		// A fresh replica: nothing of value can be here.
		if err := removeExcept(p.dir, ""); err != nil {
			return fail(err)
		}
		if err := writeState(p.dir, p.st); err != nil {
			return fail(err)
		}
	case err != nil:
		return fail(err)
	default:
		if err := json.Unmarshal(b, &p.st); err != nil || !strings.HasPrefix(p.st.DB, "db-") {
			return fail(fmt.Errorf("%s: corrupt state %q: %v", stateFile, b, err))
		}
		// Drop a half-built snapshot generation, an old generation whose
		// deletion was interrupted, and staged files.
		if err := removeExcept(p.dir, p.st.DB); err != nil {
			return fail(err)
		}
	}
	db, err := grocksdb.OpenDb(n.dbOpts, filepath.Join(p.dir, p.st.DB))
	if err != nil {
		return fail(err)
	}
	p.db = db
	id2, err := readMeta(db, n.ro)
	if err != nil {
		closeDB(db)
		return fail(err)
	}
	p.metaID = id2
	p.applied.Store(p.st.Seq)
	p.serving.Store(true)
	return p, nil
}

func genName(g int) string { return fmt.Sprintf("db-%06d", g) }

func nextGen(name string) string {
	g, _ := strconv.Atoi(strings.TrimPrefix(name, "db-"))
	return genName(g + 1)
}

// removeExcept removes every entry of dir except state.json and keep.
func removeExcept(dir, keep string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.Name() == stateFile || e.Name() == keep {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func readMeta(db *grocksdb.DB, ro *grocksdb.ReadOptions) (string, error) {
	s, err := db.Get(ro, batch.MetaKey)
	if err != nil {
		return "", fmt.Errorf("read batch meta key: %w", err)
	}
	defer s.Free()
	return string(s.Data()), nil
}

// writeState replaces dir/state.json atomically and durably.
func writeState(dir string, st partState) error {
	b, _ := json.Marshal(st)
	tmp := filepath.Join(dir, stateFile+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, stateFile)); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// ErrOutOfOrder is returned by Apply for a batch that is not the replica's
// next one (Seq != applied+1).
var ErrOutOfOrder = errors.New("batch out of order")

// nextInOrder reports whether b may be applied to a replica at seq: the
// next batch, or a snapshot further on (it replaces the contents, so the
// batches before it do not matter: a replica behind the garbage-collection
// floor, or rebuilding, is listed the oldest live snapshot first).
func nextInOrder(seq int64, b *Batch) bool {
	return b.Seq == seq+1 || (b.Manifest.Kind == batch.KindSnapshot && b.Seq > seq)
}

// apply applies batch b, whose verified files are staged at paths (moved
// into RocksDB on success). The caller holds applyMu.
func (p *partition) apply(b *Batch, paths []string) error {
	m := &b.Manifest
	if !nextInOrder(p.st.Seq, b) {
		return fmt.Errorf("cobbled: partition %d: batch %s seq %d, replica is at seq %d: %w", p.id, m.ID, b.Seq, p.st.Seq, ErrOutOfOrder)
	}
	if len(paths) == 0 { // grocksdb panics on an empty list
		return fmt.Errorf("cobbled: partition %d: batch %s: no files to ingest", p.id, m.ID)
	}
	start := time.Now()
	ing := rocks.IngestOptions(m.Kind == batch.KindSnapshot) // placement and flush rules: internal/rocks
	defer ing.Destroy()
	var err error
	switch m.Kind {
	case batch.KindDelta:
		err = p.applyDelta(b, paths, ing)
	case batch.KindSnapshot:
		err = p.applySnapshot(b, paths, ing)
	default:
		err = fmt.Errorf("kind %q", m.Kind)
	}
	if err != nil {
		return fmt.Errorf("cobbled: partition %d: apply %s batch %s (seq %d): %w", p.id, m.Kind, m.ID, b.Seq, err)
	}
	p.metaID = m.ID
	p.setApplied(b.Seq)
	p.lastApply.Store(time.Now().UnixNano())
	p.n.opts.Metrics.ingestDuration.WithLabelValues(m.Kind).Observe(time.Since(start).Seconds())
	p.n.opts.Metrics.batchesApplied.WithLabelValues(m.Kind).Inc()
	return nil
}

func (p *partition) applyDelta(b *Batch, paths []string, ing *grocksdb.IngestExternalFileOptions) error {
	crash("delta-before-ingest")
	if err := p.db.IngestExternalFile(paths, ing); err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	crash("delta-after-ingest")
	st := partState{DB: p.st.DB, Seq: b.Seq, Batch: b.Manifest.ID}
	if err := writeState(p.dir, st); err != nil {
		// The data is in; the next attempt reconciles through the meta key.
		p.metaID = b.Manifest.ID
		return fmt.Errorf("record applied seq: %w", err)
	}
	p.st = st
	return nil
}

func (p *partition) applySnapshot(b *Batch, paths []string, ing *grocksdb.IngestExternalFileOptions) error {
	name := nextGen(p.st.DB)
	path := filepath.Join(p.dir, name)
	if err := os.RemoveAll(path); err != nil {
		return err
	}
	db, err := grocksdb.OpenDb(p.n.dbOpts, path)
	if err != nil {
		return fmt.Errorf("create generation %s: %w", name, err)
	}
	if err := db.IngestExternalFile(paths, ing); err != nil {
		closeDB(db)
		os.RemoveAll(path)
		return fmt.Errorf("ingest into generation %s: %w", name, err)
	}
	crash("snapshot-built")
	st := partState{DB: name, Seq: b.Seq, Batch: b.Manifest.ID}
	if err := writeState(p.dir, st); err != nil {
		closeDB(db)
		os.RemoveAll(path)
		return fmt.Errorf("record generation %s: %w", name, err)
	}
	crash("snapshot-recorded")
	old, oldName := p.swap(db), p.st.DB
	p.st = st
	if old != nil {
		closeDB(old)
	}
	crash("snapshot-old-closed")
	if err := os.RemoveAll(filepath.Join(p.dir, oldName)); err != nil {
		// Harmless: the next open removes it.
		p.n.opts.Logger.Warn("cobbled: remove old generation", "partition", p.id, "dir", oldName, "err", err)
	}
	return nil
}

// skipRetracted records a retracted batch as passed without applying it.
// The database (and its meta key) is unchanged, so the state keeps naming
// the last batch actually applied. The caller holds applyMu.
func (p *partition) skipRetracted(b *Batch) error {
	st := partState{DB: p.st.DB, Seq: b.Seq, Batch: p.st.Batch}
	if err := writeState(p.dir, st); err != nil {
		return fmt.Errorf("cobbled: partition %d: record retracted batch %s as skipped: %w", p.id, b.Manifest.ID, err)
	}
	p.st = st
	p.setApplied(b.Seq)
	p.n.opts.Metrics.retracted.Inc()
	p.n.opts.Logger.Warn("cobbled: retracted batch skipped", "partition", p.id, "seq", b.Seq, "batch", b.Manifest.ID, "why", b.Retracted)
	return nil
}

// swap installs db for readers once no reader uses the old one, and returns
// the old one (the caller closes it).
func (p *partition) swap(db *grocksdb.DB) *grocksdb.DB {
	p.mu.Lock()
	old := p.db
	p.db = db
	p.mu.Unlock()
	return old
}

// close closes the database; readers then see the partition as not served.
func (p *partition) close() {
	if old := p.swap(nil); old != nil {
		closeDB(old)
	}
}

// setApplied publishes the applied seq (reads, Stats, metrics).
func (p *partition) setApplied(seq int64) {
	p.applied.Store(seq)
	lbl := strconv.Itoa(p.id)
	p.n.opts.Metrics.appliedSeq.WithLabelValues(lbl).Set(float64(seq))
	if nw := p.newest.Load(); nw > 0 {
		p.n.opts.Metrics.lag.WithLabelValues(lbl).Set(float64(max(0, nw-seq)))
	}
}

func (p *partition) setErr(err error) {
	if err == nil {
		p.lastErr.Store(nil)
		return
	}
	s := err.Error()
	p.lastErr.Store(&s)
}

// closeDB is the one place a database handle is freed. Built with
// -tags invariants it panics on a second close of the same handle.
func closeDB(db *grocksdb.DB) {
	invariantClosed(db)
	db.Close()
}

// crashHook, when set (by tests), is called at named points of an apply; a
// test child process SIGKILLs itself there.
var crashHook func(point string)

func crash(point string) {
	if crashHook != nil {
		crashHook(point)
	}
}
