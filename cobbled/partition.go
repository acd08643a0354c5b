package cobbled

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linxGnu/grocksdb"

	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/rocks"
)

// A partition replica on disk (one RocksDB per publication):
//
//	<Dir>/p00007/state.json    {"seq":17,"batch":"<id of seq 17>",
//	                            "pubs":{"":{"db":"db-000003","batch":"…"},"cv2/m":{"db":"db-000005","batch":"…"}},
//	                            "retired":["cv0/m"]}
//	<Dir>/p00007/db-000003/    a publication's RocksDB (a new generation per snapshot of it)
//	<Dir>/p00007/staging/      downloads of the batch being applied
//
// The partition's batch log is one sequence space interleaving
// publications; seq is how far the replica is in it. Each publication
// ("" is the legacy unnamed one) has its own database generation, and
// "batch" per publication is the last batch ingested into it.
//
// state.json is replaced atomically (write, fsync, rename, fsync dir). It is
// the single commit point: it names each publication's generation (a
// snapshot swap of publication P records P's new generation and leaves the
// others as they are) and records the sequence number after a delta. A
// delta's data and its batch id (batch.MetaKey) are ingested atomically, so
// after a crash between ingest and state write the publication's database
// has meta key = batch seq+1 and the ingest loop records it without
// applying it again (reconcile). A state.json written before publications
// existed ({"db":…,"seq":…,"batch":…}) is read as the "" publication.

const stateFile = "state.json"

type partState struct {
	Seq   int64               `json:"seq"`
	Batch string              `json:"batch"` // the last batch applied (or passed) at or before Seq
	Pubs  map[string]pubState `json:"pubs"`
	// Retired lists publications whose database was dropped (their batches
	// are passed from then on).
	Retired []string `json:"retired,omitempty"`
	// DB is the format before publications: the "" publication's
	// generation. Read, then folded into Pubs; written for the ""
	// publication too, so an older binary still finds it.
	DB string `json:"db,omitempty"`
}

type pubState struct {
	DB    string `json:"db"`              // generation directory
	Batch string `json:"batch,omitempty"` // last batch ingested into it
	// RebuildUntil > 0: the database's own data was found corrupt and is
	// being rebuilt from the batch log up to this seq; not serving.
	RebuildUntil int64 `json:"rebuild_until,omitempty"`
}

func (st partState) clone() partState {
	c := st
	c.Pubs = make(map[string]pubState, len(st.Pubs))
	for k, v := range st.Pubs {
		c.Pubs[k] = v
	}
	c.Retired = append([]string(nil), st.Retired...)
	return c
}

func (st partState) retired(pub string) bool { return slices.Contains(st.Retired, pub) }

// nextGen is a generation name no publication of st uses (one more than
// the highest).
func (st partState) nextGen() string {
	hi := 0
	for _, ps := range st.Pubs {
		g, _ := strconv.Atoi(strings.TrimPrefix(ps.DB, "db-"))
		hi = max(hi, g)
	}
	return genName(hi + 1)
}

// pubDB is one publication's open database. Readers use it under the
// partition's mu.RLock; serving is false while its data is corrupt or
// being rebuilt.
type pubDB struct {
	db      *grocksdb.DB
	gen     string
	serving atomic.Bool
	bytes   atomic.Int64 // files of the generation, refreshed after each apply
}

// partition is one replica. Readers hold mu.RLock while they use a
// publication's database; a snapshot swap, a drop or a close takes mu.Lock
// to replace it, so a database is closed only when no reader uses it.
// applyMu serializes apply, swap, rebuild and drop; the fields under
// "apply state" are owned by its holder.
type partition struct {
	n   *Node
	id  int
	dir string

	mu  sync.RWMutex
	dbs map[string]*pubDB // nil after close; replaced (copy on write) under mu.Lock

	applyMu sync.Mutex
	// apply state
	st       partState
	meta     map[string]string // publication → batch id read from its database
	dropping bool

	applied   atomic.Int64
	newest    atomic.Int64 // newest registered seq seen (for lag)
	lastErr   atomic.Pointer[string]
	lastApply atomic.Int64 // unix nanos

	// Integrity (corrupt.go). rebuildReq is set while some publication's
	// own data was found corrupt (corrupt lists them) and the worker is to
	// rebuild it; that publication answers KEY_NOT_SERVED meanwhile.
	rebuildReq atomic.Bool
	corruptMu  sync.Mutex
	corrupt    map[string]string // publication → reason
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

// readState reads a partition's state.json, folding the format before
// publications into Pubs[""].
func readState(dir string) (partState, error) {
	var st partState
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%s: corrupt state %q: %v", stateFile, b, err)
	}
	if st.Pubs == nil {
		st.Pubs = map[string]pubState{}
	}
	if st.DB != "" {
		if _, ok := st.Pubs[""]; !ok {
			st.Pubs[""] = pubState{DB: st.DB, Batch: st.Batch}
		}
	}
	for pub, ps := range st.Pubs {
		if !strings.HasPrefix(ps.DB, "db-") {
			return st, fmt.Errorf("%s: corrupt state %q: publication %q has database %q", stateFile, b, pub, ps.DB)
		}
	}
	return st, nil
}

// openPartition opens (creating if needed) partition id's replica under the
// node's directory, removing leftovers of an interrupted apply.
func (n *Node) openPartition(id int) (*partition, error) {
	p := &partition{n: n, id: id, dir: filepath.Join(n.opts.Dir, partDirName(id)), meta: map[string]string{}, dbs: map[string]*pubDB{}}
	fail := func(err error) (*partition, error) {
		p.closeAll()
		return nil, fmt.Errorf("cobbled: partition %d: open: %w", id, err)
	}
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		return fail(err)
	}
	st, err := readState(p.dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		// A fresh replica: nothing of value can be here. Databases are
		// created by their publication's first snapshot (or, for the
		// legacy "" publication, its first delta).
		st = partState{Pubs: map[string]pubState{}}
		if err := removeExcept(p.dir, nil); err != nil {
			return fail(err)
		}
		if err := writeState(p.dir, st); err != nil {
			return fail(err)
		}
	case err != nil:
		return fail(err)
	default:
		// Drop a half-built snapshot generation, an old generation whose
		// deletion was interrupted, a dropped publication's leftovers, and
		// staged files.
		keep := map[string]bool{}
		for _, ps := range st.Pubs {
			keep[ps.DB] = true
		}
		if err := removeExcept(p.dir, keep); err != nil {
			return fail(err)
		}
	}
	p.st = st
	for pub, ps := range st.Pubs {
		db, err := grocksdb.OpenDb(n.dbOpts, filepath.Join(p.dir, ps.DB))
		if err != nil {
			return fail(fmt.Errorf("publication %q: %w", pub, err))
		}
		d := &pubDB{db: db, gen: ps.DB}
		p.dbs[pub] = d
		mid, err := readMeta(db, n.ro)
		if err != nil {
			return fail(fmt.Errorf("publication %q: %w", pub, err))
		}
		p.meta[pub] = mid
		d.bytes.Store(dirBytes(filepath.Join(p.dir, ps.DB)))
		if ps.RebuildUntil > 0 {
			// A rebuild was under way: start it again.
			p.requestRebuild(pub, "corrupt replica: rebuild interrupted by a restart")
		} else {
			d.serving.Store(true)
		}
	}
	p.applied.Store(st.Seq)
	return p, nil
}

func genName(g int) string { return fmt.Sprintf("db-%06d", g) }

// removeExcept removes every entry of dir except state.json and keep.
func removeExcept(dir string, keep map[string]bool) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.Name() == stateFile || keep[e.Name()] {
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
	st.DB = ""
	if ps, ok := st.Pubs[""]; ok {
		st.DB = ps.DB
	}
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

// passes reports whether batch m is recorded as passed without being
// downloaded or applied: its publication is retired in the routing the node
// last saw, or it is a delta of a publication this replica has no database
// of (its snapshot, which comes later in the log, supersedes it). The
// legacy "" publication's first delta instead creates its database, as
// before publications, unless "" was dropped here. A snapshot of a
// publication dropped here that the routing no longer lists as retired (it
// was registered again) is applied. The caller holds applyMu.
func (p *partition) passes(m *batch.Manifest) bool {
	pub := m.Publication
	if p.n.routingRetired(pub) {
		return true
	}
	return m.Kind == batch.KindDelta && p.dbs[pub] == nil && (pub != "" || p.st.retired(""))
}

// pass records b as passed. The caller holds applyMu.
func (p *partition) pass(b *Batch) error {
	st := p.st.clone()
	st.Seq, st.Batch = b.Seq, b.Manifest.ID
	if err := writeState(p.dir, st); err != nil {
		return fmt.Errorf("cobbled: partition %d: record batch %s of publication %q as passed: %w", p.id, b.Manifest.ID, b.Manifest.Publication, err)
	}
	p.st = st
	p.setApplied(b.Seq)
	p.n.opts.Metrics.passed.Inc()
	p.n.opts.Logger.Info("cobbled: batch passed (its publication is retired or has no database here)", "partition", p.id, "seq", b.Seq, "batch", b.Manifest.ID, "publication", b.Manifest.Publication)
	return nil
}

// apply applies batch b, whose verified files are staged at paths (moved
// into RocksDB on success), to its publication's database. The caller
// holds applyMu.
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
		return fmt.Errorf("cobbled: partition %d: apply %s batch %s (seq %d) of publication %q: %w", p.id, m.Kind, m.ID, b.Seq, m.Publication, err)
	}
	p.meta[m.Publication] = m.ID
	p.setApplied(b.Seq)
	p.refreshBytes(m.Publication)
	p.lastApply.Store(time.Now().UnixNano())
	p.n.opts.Metrics.ingestDuration.WithLabelValues(m.Kind).Observe(time.Since(start).Seconds())
	p.n.opts.Metrics.batchesApplied.WithLabelValues(m.Kind).Inc()
	return nil
}

func (p *partition) applyDelta(b *Batch, paths []string, ing *grocksdb.IngestExternalFileOptions) error {
	return p.ingestDelta(b, paths, ing, false)
}

// ingestReplay applies b to its (rebuilding) publication's database
// without moving the partition's seq (corrupt.go). The caller holds
// applyMu.
func (p *partition) ingestReplay(b *Batch, paths []string, ing *grocksdb.IngestExternalFileOptions) error {
	var err error
	if b.Manifest.Kind == batch.KindSnapshot {
		err = p.newGeneration(b, paths, ing, true)
	} else {
		err = p.ingestDelta(b, paths, ing, true)
	}
	if err == nil {
		p.meta[b.Manifest.Publication] = b.Manifest.ID
	}
	return err
}

func (p *partition) ingestDelta(b *Batch, paths []string, ing *grocksdb.IngestExternalFileOptions, replay bool) error {
	pub := b.Manifest.Publication
	d := p.dbs[pub]
	if d == nil {
		// The legacy publication's first delta (passes sends others
		// past): into an empty database, as before publications.
		return p.newGeneration(b, paths, ing, replay)
	}
	crash("delta-before-ingest")
	if err := d.db.IngestExternalFile(paths, ing); err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	crash("delta-after-ingest")
	st := p.st.clone()
	if !replay {
		st.Seq, st.Batch = b.Seq, b.Manifest.ID
	}
	ps := st.Pubs[pub]
	ps.Batch = b.Manifest.ID
	st.Pubs[pub] = ps
	if err := writeState(p.dir, st); err != nil {
		// The data is in; the next attempt reconciles through the meta key.
		p.meta[pub] = b.Manifest.ID
		return fmt.Errorf("record applied seq: %w", err)
	}
	p.st = st
	return nil
}

func (p *partition) applySnapshot(b *Batch, paths []string, ing *grocksdb.IngestExternalFileOptions) error {
	return p.newGeneration(b, paths, ing, false)
}

// newGeneration builds a new database generation for b's publication from
// b's files, records it (the commit point), swaps it in for readers and
// closes and deletes the publication's old generation. Other publications
// are untouched. With replay (a rebuild, corrupt.go) the partition's seq
// stays and the new generation does not serve yet. The caller holds
// applyMu.
func (p *partition) newGeneration(b *Batch, paths []string, ing *grocksdb.IngestExternalFileOptions, replay bool) error {
	pub := b.Manifest.Publication
	name := p.st.nextGen()
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
	st := p.st.clone()
	if !replay {
		st.Seq, st.Batch = b.Seq, b.Manifest.ID
	}
	st.Pubs[pub] = pubState{DB: name, Batch: b.Manifest.ID, RebuildUntil: st.Pubs[pub].RebuildUntil}
	st.Retired = slices.DeleteFunc(st.Retired, func(r string) bool { return r == pub }) // registered again
	if err := writeState(p.dir, st); err != nil {
		closeDB(db)
		os.RemoveAll(path)
		return fmt.Errorf("record generation %s: %w", name, err)
	}
	crash("snapshot-recorded")
	nd := &pubDB{db: db, gen: name}
	nd.serving.Store(!replay)
	old := p.install(pub, nd)
	p.st = st
	if old != nil {
		closeDB(old.db)
		crash("snapshot-old-closed")
		p.n.dropWarm(filepath.Join(p.dir, old.gen)) // its warmed blocks leave the cache (pace.go)
		if err := os.RemoveAll(filepath.Join(p.dir, old.gen)); err != nil {
			// Harmless: the next open removes it.
			p.n.opts.Logger.Warn("cobbled: remove old generation", "partition", p.id, "publication", pub, "dir", old.gen, "err", err)
		}
	}
	return nil
}

// skipRetracted records a retracted batch as passed without applying it.
// The databases (and their meta keys) are unchanged, so the state keeps
// naming the last batch actually applied. The caller holds applyMu.
func (p *partition) skipRetracted(b *Batch) error {
	st := p.st.clone()
	st.Seq = b.Seq
	if err := writeState(p.dir, st); err != nil {
		return fmt.Errorf("cobbled: partition %d: record retracted batch %s as skipped: %w", p.id, b.Manifest.ID, err)
	}
	p.st = st
	p.setApplied(b.Seq)
	p.n.opts.Metrics.retracted.Inc()
	p.n.opts.Logger.Warn("cobbled: retracted batch skipped", "partition", p.id, "seq", b.Seq, "batch", b.Manifest.ID, "why", b.Retracted)
	return nil
}

// dropPublication records publication pub as retired on this replica,
// closes its database once no reader uses it and deletes its files. The
// caller holds applyMu. It reports whether there was a database.
func (p *partition) dropPublication(pub string) (bool, error) {
	if _, ok := p.st.Pubs[pub]; !ok {
		return false, nil
	}
	st := p.st.clone()
	delete(st.Pubs, pub)
	if !st.retired(pub) {
		st.Retired = append(st.Retired, pub)
	}
	if err := writeState(p.dir, st); err != nil {
		return false, fmt.Errorf("cobbled: partition %d: record publication %q dropped: %w", p.id, pub, err)
	}
	p.st = st
	delete(p.meta, pub)
	if old := p.install(pub, nil); old != nil {
		closeDB(old.db)
		p.n.dropWarm(filepath.Join(p.dir, old.gen))
		if err := os.RemoveAll(filepath.Join(p.dir, old.gen)); err != nil {
			p.n.opts.Logger.Warn("cobbled: remove dropped publication", "partition", p.id, "publication", pub, "dir", old.gen, "err", err)
		}
	}
	p.n.opts.Metrics.pubBytes.DeleteLabelValues(strconv.Itoa(p.id), pub)
	return true, nil
}

// install makes d publication pub's database for readers (nil removes it)
// once no reader uses the old one, and returns the old one (the caller
// closes it). The caller holds applyMu.
func (p *partition) install(pub string, d *pubDB) *pubDB {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dbs == nil {
		if d != nil {
			closeDB(d.db) // closed meanwhile: nobody will read it
		}
		return nil
	}
	next := make(map[string]*pubDB, len(p.dbs)+1)
	for k, v := range p.dbs {
		next[k] = v
	}
	old := next[pub]
	if d == nil {
		delete(next, pub)
	} else {
		next[pub] = d
	}
	p.dbs = next
	return old
}

// closeAll closes every database; readers then see the partition as not
// served.
func (p *partition) closeAll() {
	p.mu.Lock()
	dbs := p.dbs
	p.dbs = nil
	p.mu.Unlock()
	for _, d := range dbs {
		closeDB(d.db)
	}
}

// db returns publication pub's database if it serves; the caller holds
// mu.RLock. corrupt is true when it exists but is being rebuilt.
func (p *partition) db(pub string) (db *grocksdb.DB, corrupt bool) {
	d := p.dbs[pub]
	if d == nil {
		return nil, false
	}
	if !d.serving.Load() {
		return nil, true
	}
	return d.db, false
}

// refreshBytes re-measures publication pub's generation on disk (Stats,
// metrics, the control plane's publication_bytes). The caller holds
// applyMu.
func (p *partition) refreshBytes(pub string) {
	d := p.dbs[pub]
	if d == nil {
		return
	}
	b := dirBytes(filepath.Join(p.dir, d.gen))
	d.bytes.Store(b)
	p.n.opts.Metrics.pubBytes.WithLabelValues(strconv.Itoa(p.id), pub).Set(float64(b))
}

// pubBytes returns the bytes of each publication's database.
func (p *partition) pubBytes() map[string]int64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	out := make(map[string]int64, len(p.dbs))
	for pub, d := range p.dbs {
		out[pub] = d.bytes.Load()
	}
	return out
}

// dirBytes is the size of the files under dir.
func dirBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
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
