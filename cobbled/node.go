package cobbled

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linxGnu/grocksdb"

	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/clock"
	"github.com/pillarkit/pillar/internal/rocks"
	"github.com/pillarkit/pillar/internal/sstverify"
)

// Sentinel errors callers may branch on.
var (
	// ErrNotServed: the node does not hold the partition.
	ErrNotServed = errors.New("partition not served by this node")
	// ErrChecksum: a downloaded file's size or SHA-256 differs from the manifest.
	ErrChecksum = errors.New("batch file does not match its manifest")
	// ErrCorruptSST: a downloaded file matches its manifest's size and
	// SHA-256 but fails RocksDB's block checksum verification (damaged
	// before it was hashed, or a lying manifest). Treated like ErrChecksum:
	// the batch is refused and the replica keeps its previous data.
	ErrCorruptSST = errors.New("batch file fails block checksum verification")
	// ErrForeignManifest: a batch whose manifest names another partition or
	// partition count than the replica it was listed for.
	ErrForeignManifest = errors.New("manifest is not for this replica")
	// ErrForeignKey: a downloaded file verifies but its first or last key
	// is not a key of its manifest's partition (checkKeyRange). Treated
	// like ErrCorruptSST: the batch is refused.
	ErrForeignKey = errors.New("batch file holds a key outside its manifest's partition")
	// ErrPartitions: the partition count differs from the one recorded.
	ErrPartitions = errors.New("partition count mismatch")
	// ErrClosed: the node is closed.
	ErrClosed = errors.New("node closed")
)

// Node is a serving node: one RocksDB per partition replica, an ingest loop
// (Run) and the read path (MultiGet, and BatchGet through NewGRPCServer).
type Node struct {
	opts Options
	p    int // partition count

	cache  *grocksdb.Cache
	dbOpts *grocksdb.Options
	ro     *grocksdb.ReadOptions

	partsMu sync.Mutex                   // serializes changes to parts
	parts   atomic.Pointer[[]*partition] // index = partition; nil = not held; copy-on-write

	sem       chan struct{} // bounds concurrent download+apply
	create    func(path string) (stagedFile, error)
	closed    atomic.Bool
	closeOnce sync.Once
	lifeMu    sync.RWMutex // Stats holds it shared; Close exclusively while freeing handles
	pacing                 // ingest pacing (pace.go)
	pubs                   // publications as the node last saw routing (publications.go)
	serving                // the gRPC server's request limits (server.go)
}

type stagedFile interface {
	io.Writer
	Sync() error
	Close() error
}

type nodeMeta struct {
	Partitions int `json:"partitions"`
}

// Open opens the node's data directory and every partition replica in it.
// The partition count comes from Options.Partitions, the directory's
// node.json, or the control plane, and all that are known must agree.
func Open(ctx context.Context, opts Options) (*Node, error) {
	opts.ensureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("cobbled: data dir: %w", err)
	}
	n := &Node{opts: opts, sem: make(chan struct{}, opts.IngestConcurrency)}
	n.create = func(path string) (stagedFile, error) { return os.Create(path) }
	if err := n.startPacing(); err != nil {
		return nil, err
	}
	if err := n.learnPartitions(ctx); err != nil {
		n.stopPacing()
		return nil, err
	}

	n.cache = grocksdb.NewLRUCache(uint64(opts.CacheBytes))
	dbOpts, err := TableOptions(opts.Table, n.cache)
	if err != nil {
		n.cache.Destroy()
		return nil, fmt.Errorf("cobbled: %w", err)
	}
	tuneForServing(dbOpts)
	opts.Background.Apply(dbOpts) // compaction rate limit and priority (internal/rocks)
	// Block-cache warming of deltas and compaction outputs, and the DB
	// mutex timing diagnostic (pace.go).
	if err := n.startWarming(dbOpts); err != nil {
		dbOpts.Destroy()
		n.cache.Destroy()
		n.stopPacing()
		return nil, fmt.Errorf("cobbled: %w", err)
	}
	dbOpts.SetUseDirectReads(opts.DirectReads)
	n.dbOpts = dbOpts
	n.ro = grocksdb.NewDefaultReadOptions()
	empty := make([]*partition, n.p)
	n.parts.Store(&empty)

	ents, err := os.ReadDir(opts.Dir)
	if err != nil {
		n.Close()
		return nil, fmt.Errorf("cobbled: data dir: %w", err)
	}
	for _, e := range ents {
		id, ok := parsePartDir(e.Name())
		if !ok || !e.IsDir() {
			continue
		}
		if id >= n.p {
			n.Close()
			return nil, fmt.Errorf("cobbled: %s: partition %d with %d partitions: %w", e.Name(), id, n.p, ErrPartitions)
		}
		if _, err := n.addPartition(id); err != nil {
			n.Close()
			return nil, err
		}
	}
	opts.Metrics.node.Store(n)
	return n, nil
}

// TableOptions returns the database options a node reads its partitions
// with for the table layout cfg and the block cache: cfg's
// (rocks.TableConfig.Options), except that index and filter blocks live in
// the table readers (every reader stays open: tuneForServing), not in the
// block cache. A key's read then makes one block-cache lookup (its data
// block), not three, each a shard mutex and an LRU unlink and relink;
// ingested files land below L0, where the cache's L0 pinning did not
// reach. In bench read (12 keys over ~11 partitions a request) the node
// processes spent ~15% less CPU per request. That memory is outside the
// cache's bound (~10 bits of filter and an index entry per data block:
// ~25–30 bytes a ~50 KB page, per publication held);
// cobbled_table_readers_memory_bytes and Stats.TableReadersBytes report
// it. The bench read floor (readbench's bare server) opens its databases
// with these options too. The caller destroys the options.
func TableOptions(cfg rocks.TableConfig, cache *grocksdb.Cache) (*grocksdb.Options, error) {
	o, err := cfg.Options(cache)
	if err != nil {
		return nil, err
	}
	bbto := cfg.BlockBasedTableOptions(cache)
	bbto.SetCacheIndexAndFilterBlocks(false)
	o.SetBlockBasedTableFactory(bbto)
	bbto.Destroy()
	return o, nil
}

// tuneForServing sets the database options for read-mostly, bulk-loaded
// data. The table options (bloom filters, block size, compression) come
// from internal/rocks, with index and filter blocks in the table readers
// (TableOptions).
func tuneForServing(o *grocksdb.Options) {
	o.SetCreateIfMissing(true)
	o.SetMaxOpenFiles(-1)     // keep every table reader (and its pinned index) open
	o.SetMaxBackgroundJobs(2) // compaction of ingested L0 deltas; do not starve reads
	o.SetLevelCompactionDynamicLevelBytes(true)
	o.SetSkipStatsUpdateOnDBOpen(true)
	o.SetAdviseRandomOnOpen(true)
	// A replica's fixed disk cost (TestPartitionFootprint): RocksDB
	// preallocates 4 MiB per MANIFEST by default, which on a node of many
	// small partitions is most of the disk. Ingest and swaps add a few
	// hundred bytes of MANIFEST each, so 16 KiB chunks and a 1 MiB roll-over
	// keep it small; the info LOG (warnings only) is capped likewise.
	o.SetManifestPreallocationSize(16 << 10)
	o.SetMaxManifestFileSize(1 << 20)
	o.SetKeepLogFileNum(1)
	o.SetMaxLogFileSize(256 << 10)
	o.SetRecycleLogFileNum(0)
	o.SetMaxTotalWalSize(1 << 20) // nothing is written through the WAL
	o.SetInfoLogLevel(grocksdb.WarnInfoLogLevel)
	o.EnableStatistics() // block cache hit ratio for /metrics
	// Many small deltas land in L0; let them accumulate before compaction
	// rather than stalling ingestion.
	o.SetLevel0FileNumCompactionTrigger(8)
	o.SetLevel0SlowdownWritesTrigger(40)
	o.SetLevel0StopWritesTrigger(64)
}

func (n *Node) learnPartitions(ctx context.Context) error {
	metaPath := filepath.Join(n.opts.Dir, "node.json")
	var disk nodeMeta
	if b, err := os.ReadFile(metaPath); err == nil {
		if err := json.Unmarshal(b, &disk); err != nil || disk.Partitions <= 0 {
			return fmt.Errorf("cobbled: %s: corrupt %q", metaPath, b)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cobbled: %w", err)
	}
	p := n.opts.Partitions
	if disk.Partitions != 0 {
		if p != 0 && p != disk.Partitions {
			return fmt.Errorf("cobbled: %s records %d partitions, options say %d: %w", metaPath, disk.Partitions, p, ErrPartitions)
		}
		p = disk.Partitions
	}
	if p == 0 && n.opts.Control != nil {
		// A first start needs the control plane; wait for it (a node may
		// come up before it) until ctx ends.
		backoff := n.opts.RetryBackoff
		for {
			r, err := n.opts.Control.GetRouting(ctx)
			if err == nil {
				p = r.Partitions
				break
			}
			n.opts.Logger.Warn("cobbled: waiting for the control plane to learn the partition count", "err", err)
			if !clock.Sleep(ctx, n.opts.Clock, backoff) {
				return fmt.Errorf("cobbled: learn partition count from control plane: %w", err)
			}
			backoff = min(2*backoff, n.opts.RetryBackoffMax)
		}
	}
	if p <= 0 {
		return fmt.Errorf("cobbled: partition count unknown: set Options.Partitions or a control plane")
	}
	n.p = p
	if disk.Partitions == 0 {
		b, _ := json.Marshal(nodeMeta{Partitions: p})
		if err := os.WriteFile(metaPath, b, 0o644); err != nil {
			return fmt.Errorf("cobbled: %w", err)
		}
	}
	return nil
}

// Partitions returns the deployment's partition count.
func (n *Node) Partitions() int { return n.p }

// Held returns the partitions this node holds, in order.
func (n *Node) Held() []int {
	var out []int
	for id, p := range *n.parts.Load() {
		if p != nil {
			out = append(out, id)
		}
	}
	return out
}

func (n *Node) part(id int) *partition {
	ps := *n.parts.Load()
	if id < 0 || id >= len(ps) {
		return nil
	}
	return ps[id]
}

// addPartition returns partition id, opening it if the node does not hold it.
func (n *Node) addPartition(id int) (*partition, error) {
	n.partsMu.Lock()
	defer n.partsMu.Unlock()
	if n.closed.Load() {
		return nil, ErrClosed
	}
	if p := n.part(id); p != nil {
		return p, nil
	}
	p, err := n.openPartition(id)
	if err != nil {
		return nil, err
	}
	ps := append([]*partition(nil), *n.parts.Load()...)
	ps[id] = p
	n.parts.Store(&ps)
	n.opts.Metrics.appliedSeq.WithLabelValues(strconv.Itoa(id)).Set(float64(p.applied.Load()))
	n.opts.Logger.Info("cobbled: partition opened", "partition", id, "seq", p.st.Seq, "batch", p.st.Batch, "publications", len(p.st.Pubs))
	return p, nil
}

// dropPartition stops the partition's ingest worker, closes its database once
// no reader uses it, and deletes its files.
func (n *Node) dropPartition(id int) {
	p := n.part(id)
	if p == nil {
		return
	}
	if p.cancel != nil {
		p.cancel()
		<-p.done
	}
	p.applyMu.Lock()
	p.dropping = true
	n.partsMu.Lock()
	ps := append([]*partition(nil), *n.parts.Load()...)
	ps[id] = nil
	n.parts.Store(&ps)
	n.partsMu.Unlock()
	p.closeAll()
	pubs := p.st.Pubs
	p.applyMu.Unlock()
	if err := os.RemoveAll(p.dir); err != nil {
		n.opts.Logger.Warn("cobbled: remove dropped partition", "partition", id, "err", err)
	}
	lbl := strconv.Itoa(id)
	n.opts.Metrics.appliedSeq.DeleteLabelValues(lbl)
	n.opts.Metrics.lag.DeleteLabelValues(lbl)
	for pub := range pubs {
		n.opts.Metrics.pubBytes.DeleteLabelValues(lbl, pub)
	}
	n.opts.Logger.Info("cobbled: partition dropped", "partition", id)
}

// Close stops ingest workers and closes every database, the options and the
// block cache, each exactly once. Call it after Run has returned; reads
// after Close answer ErrNotServed.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.stopPacing()
		n.lifeMu.Lock()
		defer n.lifeMu.Unlock()
		n.partsMu.Lock()
		n.closed.Store(true)
		n.partsMu.Unlock()
		if n.parts.Load() != nil {
			for _, p := range *n.parts.Load() {
				if p == nil {
					continue
				}
				if p.cancel != nil {
					p.cancel()
					<-p.done
				}
				p.applyMu.Lock()
				p.dropping = true
				p.closeAll()
				p.applyMu.Unlock()
			}
		}
		if n.ro != nil {
			n.ro.Destroy()
		}
		if n.dbOpts != nil {
			n.dbOpts.Destroy()
		}
		n.stopWarming()
		if n.cache != nil {
			n.cache.Destroy()
		}
	})
	return nil
}

// MultiGet reads keys of one partition from the live publication (as the
// node last saw routing; see MultiGetVersion).
func (n *Node) MultiGet(partition int, keys [][]byte, fn func(i int, value []byte, found bool)) error {
	return n.MultiGetVersion(partition, "", keys, fn)
}

// MultiGetVersion reads keys of one partition from publication version
// ("" = the live one as the node last saw routing) with a single RocksDB
// MultiGet and calls fn for each key in order; value is valid only during
// the call. It is safe for concurrent use, also with ingestion and
// snapshot swaps.
func (n *Node) MultiGetVersion(partition int, version string, keys [][]byte, fn func(i int, value []byte, found bool)) error {
	p := n.part(partition)
	if p == nil {
		return fmt.Errorf("cobbled: partition %d: %w", partition, ErrNotServed)
	}
	version = n.resolve(version)
	p.mu.RLock()
	defer p.mu.RUnlock()
	db, _ := p.db(version)
	if db == nil {
		return fmt.Errorf("cobbled: partition %d: publication %q: %w", partition, version, ErrNotServed)
	}
	vals, err := db.MultiGet(n.ro, keys...)
	if err != nil {
		if isCorruption(err) {
			n.markCorrupt(p, version, err)
		}
		return fmt.Errorf("cobbled: partition %d: publication %q: multiget: %w", partition, version, err)
	}
	defer vals.Destroy()
	for i, v := range vals {
		fn(i, v.Data(), v.Exists())
	}
	return nil
}

// Apply downloads, verifies and applies one batch to its partition (opening
// the replica if the node does not hold it), exactly as the ingest loop
// does. It is for nodes without a control plane (tools, tests, benchmarks);
// do not mix it with Run for the same partition.
func (n *Node) Apply(ctx context.Context, b Batch) error {
	if n.opts.Objects == nil {
		return fmt.Errorf("cobbled: apply batch %s: no object store", b.Manifest.ID)
	}
	if err := n.checkManifest(b.Manifest.Partition, &b.Manifest); err != nil {
		return err
	}
	p, err := n.addPartition(b.Manifest.Partition)
	if err != nil {
		return err
	}
	return n.fetchAndApply(ctx, p, &b)
}

func (n *Node) checkManifest(partition int, m *batch.Manifest) error {
	if err := m.Validate(); err != nil {
		return fmt.Errorf("cobbled: partition %d: %w: %w", partition, ErrForeignManifest, err)
	}
	if m.Partition != partition || m.Partitions != n.p {
		return fmt.Errorf("cobbled: partition %d: batch %s is for partition %d of %d, replica is partition %d of %d: %w",
			partition, m.ID, m.Partition, m.Partitions, partition, n.p, ErrForeignManifest)
	}
	return nil
}

// fetchAndApply applies b to p unless it is already applied; it is the one
// place a batch goes from the object store into a database.
func (n *Node) fetchAndApply(ctx context.Context, p *partition, b *Batch) error {
	ctx, release, err := n.paceBatch(ctx, &b.Manifest) // snapshot slot, pace class (pace.go)
	if err != nil {
		return err
	}
	defer release()
	if b.Manifest.Kind == batch.KindSnapshot && n.routingRetired(b.Manifest.Publication) && n.opts.Control != nil {
		// About to pass a snapshot of a retired publication: make sure it
		// was not registered again since the last routing the node saw.
		if r, err := n.opts.Control.GetRouting(ctx); err == nil {
			n.learnPublications(r)
		}
	}
	releaseSlot, err := n.ingestSlot(ctx, &b.Manifest) // an ordinary or a small-delta slot (pace.go)
	if err != nil {
		return err
	}
	defer releaseSlot()
	p.applyMu.Lock()
	defer p.applyMu.Unlock()
	if p.dropping {
		return fmt.Errorf("cobbled: partition %d: %w", p.id, ErrNotServed)
	}
	if b.Seq <= p.st.Seq {
		return nil // already applied
	}
	m := &b.Manifest
	if err := n.checkManifest(p.id, m); err != nil {
		return err
	}
	pub := m.Publication
	if ps, ok := p.st.Pubs[pub]; ok && b.Seq == p.st.Seq+1 && p.meta[pub] == m.ID && ps.Batch != m.ID {
		// Ingested before a crash (or a failed state write) but not recorded:
		// the meta key, ingested atomically with the data, proves it.
		st := p.st.clone()
		st.Seq, st.Batch = b.Seq, m.ID
		ps.Batch = m.ID
		st.Pubs[pub] = ps
		if err := writeState(p.dir, st); err != nil {
			return fmt.Errorf("cobbled: partition %d: record reconciled batch %s: %w", p.id, m.ID, err)
		}
		p.st = st
		p.setApplied(b.Seq)
		n.opts.Metrics.reconciled.Inc()
		n.opts.Logger.Info("cobbled: batch found applied, recorded", "partition", p.id, "seq", b.Seq, "batch", m.ID)
		return nil
	}
	if !nextInOrder(p.st.Seq, b) {
		return fmt.Errorf("cobbled: partition %d: batch %s seq %d, replica is at seq %d: %w", p.id, m.ID, b.Seq, p.st.Seq, ErrOutOfOrder)
	}
	if b.Retracted != "" {
		if b.Seq != p.st.Seq+1 {
			// Only the next batch can be skipped: past a gap, the
			// batches in it would be lost.
			return fmt.Errorf("cobbled: partition %d: retracted batch %s seq %d, replica is at seq %d: %w", p.id, m.ID, b.Seq, p.st.Seq, ErrOutOfOrder)
		}
		return p.skipRetracted(b)
	}
	if p.passes(m) {
		return p.pass(b)
	}
	paths, err := n.download(ctx, p, b)
	if err != nil {
		return err
	}
	crash("staged")
	return p.apply(b, paths)
}

// download stages b's files under p's staging directory, verifying size and
// SHA-256 of each against the manifest, and then every block checksum of
// each SST (sstverify); a file's fsync and verification overlap the next
// file's download. After a failure (a bad file, a full disk) the staging
// directory is removed, so nothing partial stays behind.
func (n *Node) download(ctx context.Context, p *partition, b *Batch) (_ []string, err error) {
	m := &b.Manifest
	staging := filepath.Join(p.dir, "staging")
	if err := os.RemoveAll(staging); err != nil {
		return nil, fmt.Errorf("cobbled: partition %d: clear staging: %w", p.id, err)
	}
	defer func() {
		if err != nil {
			if rerr := os.RemoveAll(staging); rerr != nil {
				n.opts.Logger.Warn("cobbled: clear staging after a failed download", "partition", p.id, "err", rerr)
			}
		}
	}()
	if err := os.MkdirAll(staging, 0o755); err != nil {
		return nil, fmt.Errorf("cobbled: partition %d: staging: %w", p.id, err)
	}
	start := time.Now()
	var total int64
	paths := make([]string, 0, len(m.Files))
	// Each file's fsync and verification run while the next one downloads
	// (stagePipeline, ingest.go). Every one has finished before download
	// returns: on an early return the deferred wait (its error moot: one is
	// already being returned) runs before staging is removed.
	var pipe stagePipeline
	defer pipe.wait()
	for _, f := range m.Files {
		key := batch.Prefix(m.Partition, m.ID) + f.Name
		path := filepath.Join(staging, f.Name)
		out, err := n.fetchFile(ctx, key, path, f)
		if err != nil {
			return nil, fileError(p.id, m.ID, key, err)
		}
		if err := pipe.wait(); err != nil { // the previous file's
			out.Close()
			return nil, err
		}
		pipe.start(func() error {
			return fileError(p.id, m.ID, key, n.finishStaged(ctx, out, path, f.Size, m)) // fsync, verify, key range, warm: ingest.go, pace.go
		})
		paths = append(paths, path)
		total += f.Size
	}
	if err := pipe.wait(); err != nil {
		return nil, err
	}
	if err := syncDir(staging); err != nil {
		return nil, fmt.Errorf("cobbled: partition %d: staging: %w", p.id, err)
	}
	n.opts.Metrics.downloadBytes.Add(float64(total))
	n.opts.Metrics.downloadDuration.Observe(time.Since(start).Seconds())
	return paths, nil
}

// fileError names the batch file an error came from (nil stays nil); a
// block that failed verification is also ErrCorruptSST.
func fileError(partition int, id, key string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sstverify.ErrCorrupt) {
		err = fmt.Errorf("%w: %w", ErrCorruptSST, err)
	}
	return fmt.Errorf("cobbled: partition %d: batch %s: %s: %w", partition, id, key, err)
}

// fetchFile downloads f's object into a staged file at path, checking its
// size and SHA-256 against the manifest, and returns the file still open
// and not yet synced (finishStaged syncs and closes it).
func (n *Node) fetchFile(ctx context.Context, key, path string, f batch.File) (stagedFile, error) {
	rc, err := n.opts.Objects.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("get: %w", err)
	}
	defer rc.Close()
	out, err := n.create(path)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	// Read one byte past the expected size to detect a longer object.
	got, err := hashingCopy(&writebackWriter{f: out}, io.LimitReader(rc, f.Size+1), h, n.ingestCPU(ctx)) // ingest.go, pace.go
	if err != nil {
		out.Close()
		return nil, fmt.Errorf("download: %w", err)
	}
	if got != f.Size {
		out.Close()
		return nil, fmt.Errorf("size %d, manifest says %d: %w", got, f.Size, ErrChecksum)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != f.SHA256 {
		out.Close()
		return nil, fmt.Errorf("sha256 %s, manifest says %s: %w", sum, f.SHA256, ErrChecksum)
	}
	return out, nil
}

// PartitionStats describes one replica.
type PartitionStats struct {
	Partition  int       `json:"partition"`
	AppliedSeq int64     `json:"applied_seq"`
	NewestSeq  int64     `json:"newest_seq"` // newest registered seq seen; 0 if unknown
	LastError  string    `json:"last_error,omitempty"`
	LastApply  time.Time `json:"last_apply,omitzero"`
	// Fault is the replica's current fault, "corrupt batch <id>: <reason>"
	// (refused; the previous data serves) or "corrupt replica: <reason>"
	// (not serving; rebuilding). Empty when healthy.
	Fault string `json:"fault,omitempty"`
	// Serving is false while the replica serves no publication because
	// every one it has is corrupt or being rebuilt (a replica with no
	// database yet serves empty answers); see Publications for each.
	Serving bool `json:"serving"`
	// Publications lists the replica's publication databases.
	Publications []PublicationStats `json:"publications"`
}

// PublicationStats is one publication's database on a replica.
type PublicationStats struct {
	ID         string `json:"id"` // "" = the legacy unnamed publication
	Generation string `json:"generation"`
	Bytes      int64  `json:"bytes"`
	Serving    bool   `json:"serving"` // false while its data is corrupt or being rebuilt
}

// Stats is a snapshot of the node.
type Stats struct {
	Partitions int `json:"partitions"`
	// Live is the live publication as the node last saw routing (what a
	// BatchGet without a version reads).
	Live          string           `json:"live"`
	Held          []PartitionStats `json:"held"`
	CacheUsage    uint64           `json:"cache_usage_bytes"`
	CacheCapacity uint64           `json:"cache_capacity_bytes"`
	CacheHits     uint64           `json:"cache_hits"`
	CacheMisses   uint64           `json:"cache_misses"`
	// TableReadersBytes is the memory the open table readers hold outside
	// the block cache, their index and filter blocks included
	// (TableOptions): RocksDB's estimate-table-readers-mem summed over
	// every publication's database.
	TableReadersBytes uint64 `json:"table_readers_bytes"`
}

// Stats returns a snapshot of the node's replicas and block cache.
func (n *Node) Stats() Stats {
	s := Stats{Partitions: n.p, Live: n.resolve("")}
	n.lifeMu.RLock()
	defer n.lifeMu.RUnlock()
	if n.closed.Load() {
		return s
	}
	for id, p := range *n.parts.Load() {
		if p == nil {
			continue
		}
		ps := PartitionStats{Partition: id, AppliedSeq: p.applied.Load(), NewestSeq: p.newest.Load()}
		if e := p.lastErr.Load(); e != nil {
			ps.LastError = *e
		}
		if f := p.fault.Load(); f != nil {
			ps.Fault = *f
		}
		p.mu.RLock()
		ps.Serving = len(p.dbs) == 0 && !p.rebuildReq.Load()
		for pub, d := range p.dbs {
			ps.Publications = append(ps.Publications, PublicationStats{ID: pub, Generation: d.gen, Bytes: d.bytes.Load(), Serving: d.serving.Load()})
			if v, err := strconv.ParseUint(d.db.GetProperty("rocksdb.estimate-table-readers-mem"), 10, 64); err == nil {
				s.TableReadersBytes += v
			}
			ps.Serving = ps.Serving || d.serving.Load()
		}
		p.mu.RUnlock()
		sort.Slice(ps.Publications, func(i, j int) bool { return ps.Publications[i].ID < ps.Publications[j].ID })
		if t := p.lastApply.Load(); t != 0 {
			ps.LastApply = time.Unix(0, t)
		}
		s.Held = append(s.Held, ps)
	}
	sort.Slice(s.Held, func(i, j int) bool { return s.Held[i].Partition < s.Held[j].Partition })
	s.CacheUsage = n.cache.GetUsage()
	s.CacheCapacity = n.cache.GetCapacity()
	stats := n.dbOpts.GetStatisticsString()
	s.CacheHits = ticker(stats, "rocksdb.block.cache.hit")
	s.CacheMisses = ticker(stats, "rocksdb.block.cache.miss")
	return s
}

// ticker reads "name COUNT : N" from a RocksDB statistics dump.
func ticker(stats, name string) uint64 {
	i := strings.Index(stats, name+" COUNT : ")
	if i < 0 {
		return 0
	}
	rest := stats[i+len(name)+len(" COUNT : "):]
	if j := strings.IndexByte(rest, '\n'); j >= 0 {
		rest = rest[:j]
	}
	v, _ := strconv.ParseUint(strings.TrimSpace(rest), 10, 64)
	return v
}
