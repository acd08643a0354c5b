package cobbled

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"

	"github.com/linxGnu/grocksdb"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/pace"
	"github.com/pillarkit/pillar/internal/rocks"
	"github.com/pillarkit/pillar/internal/sstverify"
)

// Ingest pacing: the hook around the download and ingest step. Every batch
// file is downloaded through the node's pace.Limiter (Options.Pace), as
// class Fresh for a delta and Bulk for a snapshot; BatchGet reports its
// handling time to the limiter's adaptive mode; at most
// Options.SnapshotConcurrency snapshots are in the download/apply step at
// once. The download is the step to pace: it is where a batch's bytes are
// read, hashed and written on this node (IngestExternalFile then links the
// staged files, see internal/rocks), and its rate bounds the compaction
// that deltas cause later. Compaction itself is paced by RocksDB
// (Options.Background).

// pacing is the node's pacing state (embedded in Node).
type pacing struct {
	pacer    *pace.Limiter
	snapSem  chan struct{}
	smallSem chan struct{} // Options.SmallDeltaSlots; nil when none
	smallUse atomic.Int64  // small deltas that took a small-delta slot
	stopPace context.CancelFunc
	warmer   *rocks.Warmer // nil with Background.NoWarm
}

type paceClassKey struct{}

// startPacing creates the limiter, starts its control loop and paces the
// node's object getter.
func (n *Node) startPacing() error {
	po := n.opts.Pace
	if po.Clock == nil {
		po.Clock = n.opts.Clock
	}
	l, err := pace.New(po)
	if err != nil {
		return fmt.Errorf("cobbled: %w", err)
	}
	n.pacer = l
	n.snapSem = make(chan struct{}, n.opts.SnapshotConcurrency)
	if n.opts.SmallDeltaSlots > 0 {
		n.smallSem = make(chan struct{}, n.opts.SmallDeltaSlots)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.stopPace = cancel
	go l.Run(ctx)
	if n.opts.Objects != nil {
		n.opts.Objects = pacedObjects{inner: n.opts.Objects, l: l}
	}
	return nil
}

func (n *Node) stopPacing() {
	if n.stopPace != nil {
		n.stopPace()
	}
}

// Pacer returns the node's ingest limiter, for its Stats and for changing
// the rate or the adaptive target while the node runs.
func (n *Node) Pacer() *pace.Limiter { return n.pacer }

// paceBatch starts the paced part of applying m: a snapshot waits for a
// snapshot slot; the returned context tells the paced getter the class.
// The caller calls release when the batch is applied or has failed.
func (n *Node) paceBatch(ctx context.Context, m *batch.Manifest) (_ context.Context, release func(), _ error) {
	class := pace.Fresh
	release = func() {}
	if m.Kind == batch.KindSnapshot {
		class = pace.Bulk
		select {
		case n.snapSem <- struct{}{}:
			release = func() { <-n.snapSem }
		case <-ctx.Done():
			return ctx, release, ctx.Err()
		}
	}
	return context.WithValue(ctx, paceClassKey{}, class), release, nil
}

// ingestSlot waits for an ingest slot for m's download and apply: one of
// Options.IngestConcurrency ordinary slots, or for a small delta
// (Options.SmallDeltaBytes) whichever comes first of an ordinary and a
// small-delta slot (Options.SmallDeltaSlots). The caller calls release
// when the batch is applied or has failed.
func (n *Node) ingestSlot(ctx context.Context, m *batch.Manifest) (release func(), _ error) {
	var small chan struct{} // nil: never ready in the select
	if m.Kind == batch.KindDelta && n.smallSem != nil && batchBytes(m) <= n.opts.SmallDeltaBytes {
		small = n.smallSem
	}
	select {
	case n.sem <- struct{}{}:
		return func() { <-n.sem }, nil
	default:
	}
	select {
	case n.sem <- struct{}{}:
		return func() { <-n.sem }, nil
	case small <- struct{}{}:
		n.smallUse.Add(1)
		return func() { <-small }, nil
	case <-ctx.Done():
		return func() {}, ctx.Err()
	}
}

// batchBytes is the size of m's files together.
func batchBytes(m *batch.Manifest) int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

// pacedObjects reads every object through the limiter, in the class the
// context names (Fresh when it names none).
type pacedObjects struct {
	inner ObjectGetter
	l     *pace.Limiter
}

func (p pacedObjects) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := p.inner.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	class, _ := ctx.Value(paceClassKey{}).(pace.Class)
	return struct {
		io.Reader
		io.Closer
	}{p.l.Reader(ctx, rc, class), rc}, nil
}

// startWarming adds the block-cache warmer (Options.Background; internal/rocks
// warm.go) to the database options, before any database opens, and with
// Background.TimeDBMutex has their statistics time DB mutex waits.
func (n *Node) startWarming(o *grocksdb.Options) (err error) {
	if n.opts.Background.TimeDBMutex {
		if err := rocks.TimeDBMutex(o); err != nil {
			return err
		}
	}
	n.warmer, err = n.opts.Background.NewWarmer(o, n.opts.CacheBytes)
	return err
}

// ingestCPU returns the CPU-slot taker (pace.Limiter.CPU) for the batch
// whose pace class ctx names.
func (n *Node) ingestCPU(ctx context.Context) func() (func(), error) {
	class, _ := ctx.Value(paceClassKey{}).(pace.Class)
	return func() (func(), error) { return n.pacer.CPU(ctx, class) }
}

// dropWarm erases from the block cache the warmed blocks of a database
// generation the node closed and is deleting (RocksDB reports the files it
// deletes itself, not these).
func (n *Node) dropWarm(dir string) {
	if n.warmer != nil {
		n.warmer.DropDir(dir)
	}
}

// stopWarming frees the warmer, once no download can use it.
func (n *Node) stopWarming() {
	if n.warmer != nil {
		n.warmer.Destroy()
		n.warmer = nil
	}
}

// prepareSST verifies every block checksum of the staged SST at path
// (internal/sstverify), returns its first and last keys past the batch's
// meta key (for checkKeyRange) and, for a delta, reads it into the block cache
// (rocks.Warmer): the keys it overwrites are being served, and the file's
// blocks keep their cache keys once it is ingested, so reads after the
// ingest hit the cache. Snapshots are not warmed: a new generation is as
// large as the partition, often more than the cache.
//
// A snapshot's verification under the adaptive mode
// (pace.Limiter.LowPriority) runs on a thread of its own at nice 19 and
// idle I/O class (pace.RunLow): it is one long C call that reads the whole
// file again, a burst of CPU and I/O the byte pacing of the download does
// not cover. Deltas and unpaced snapshots verify at normal priority.
func (n *Node) prepareSST(ctx context.Context, path string, size int64) (sstverify.Info, error) {
	class, _ := ctx.Value(paceClassKey{}).(pace.Class)
	var info sstverify.Info
	if err := n.pacer.RunClass(ctx, class, func() (err error) { info, err = sstverify.Check(path, batch.MetaKey); return err }); err != nil {
		return info, err
	}
	if class == pace.Fresh && n.warmer != nil && size <= n.warmer.MaxFile() {
		if _, err := n.warmer.WarmFile(path); err != nil {
			// Only the cache misses out; the file verified.
			n.opts.Logger.Warn("cobbled: warm the block cache", "err", err)
		}
	}
	return info, nil
}

// CompactionStats sums RocksDB's compaction backlog over held partitions.
type CompactionStats struct {
	// PendingBytes is rocksdb.estimate-pending-compaction-bytes, summed.
	PendingBytes uint64
	// L0Files is rocksdb.num-files-at-level0, summed.
	L0Files uint64
	// Running is rocksdb.num-running-compactions, summed.
	Running uint64
}

// CompactionStats returns the compaction backlog of the node's databases.
func (n *Node) CompactionStats() CompactionStats {
	var s CompactionStats
	n.lifeMu.RLock()
	defer n.lifeMu.RUnlock()
	if n.closed.Load() {
		return s
	}
	prop := func(d *pubDB, name string) uint64 {
		v, _ := strconv.ParseUint(d.db.GetProperty(name), 10, 64)
		return v
	}
	for _, p := range *n.parts.Load() {
		if p == nil {
			continue
		}
		p.mu.RLock()
		for _, d := range p.dbs {
			s.PendingBytes += prop(d, "rocksdb.estimate-pending-compaction-bytes")
			s.L0Files += prop(d, "rocksdb.num-files-at-level0")
			s.Running += prop(d, "rocksdb.num-running-compactions")
		}
		p.mu.RUnlock()
	}
	return s
}

// CacheStats are the node's block cache lookups by block kind, from
// RocksDB's statistics (reads only: warming is not counted), and what the
// warmer read into the cache.
type CacheStats struct {
	DataHits, DataMisses, IndexHits, IndexMisses, FilterHits, FilterMisses uint64
	// Warm is the warmer's counters (zero with Background.NoWarm).
	Warm rocks.WarmStats
	// DBMutexWaitMicros is the time spent waiting for the databases' DB
	// mutexes, by every thread (zero unless Background.TimeDBMutex).
	DBMutexWaitMicros uint64
}

// CacheStats returns the node's block cache statistics.
func (n *Node) CacheStats() CacheStats {
	var s CacheStats
	n.lifeMu.RLock()
	defer n.lifeMu.RUnlock()
	if n.closed.Load() {
		return s
	}
	st := n.dbOpts.GetStatisticsString()
	for name, v := range map[string]*uint64{"data.hit": &s.DataHits, "data.miss": &s.DataMisses, "index.hit": &s.IndexHits,
		"index.miss": &s.IndexMisses, "filter.hit": &s.FilterHits, "filter.miss": &s.FilterMisses} {
		*v = ticker(st, "rocksdb.block.cache."+name)
	}
	s.DBMutexWaitMicros = ticker(st, "rocksdb.db.mutex.wait.micros")
	if n.warmer != nil {
		s.Warm = n.warmer.Stats()
	}
	return s
}

// paceCollectors are the pacing and compaction metrics, read from the node
// at scrape time.
func (m *Metrics) paceCollectors() []prometheus.Collector {
	fromNode := func(f func(n *Node) float64) func() float64 {
		return func() float64 {
			n := m.node.Load()
			if n == nil || n.pacer == nil {
				return 0
			}
			return f(n)
		}
	}
	stat := func(f func(pace.Stats) float64) func() float64 {
		return fromNode(func(n *Node) float64 { return f(n.pacer.Stats()) })
	}
	var cs []prometheus.Collector
	for _, c := range []pace.Class{pace.Fresh, pace.Bulk} {
		kind := prometheus.Labels{"kind": map[pace.Class]string{pace.Fresh: "delta", pace.Bulk: "snapshot"}[c]}
		cs = append(cs,
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cobbled_ingest_bytes_total", ConstLabels: kind,
				Help: "Batch bytes downloaded for ingest (through the pacer), by kind."},
				stat(func(s pace.Stats) float64 { return float64(s.Class[c].Bytes) })),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cobbled_ingest_throttle_waits_total", ConstLabels: kind,
				Help: "Download reads that waited for the ingest rate limit, by kind."},
				stat(func(s pace.Stats) float64 { return float64(s.Class[c].Waits) })),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cobbled_ingest_throttle_wait_seconds_total", ConstLabels: kind,
				Help: "Time download reads were held back by the ingest rate limit, by kind."},
				stat(func(s pace.Stats) float64 { return s.Class[c].Waited.Seconds() })),
		)
	}
	warm := func(f func(rocks.WarmStats) uint64) func() float64 {
		return func() float64 {
			n := m.node.Load()
			if n == nil {
				return 0
			}
			// Close frees the warmer under lifeMu (a scrape may race it).
			n.lifeMu.RLock()
			defer n.lifeMu.RUnlock()
			if n.closed.Load() || n.warmer == nil {
				return 0
			}
			return float64(f(n.warmer.Stats()))
		}
	}
	for _, w := range []struct {
		kind, result string
		f            func(rocks.WarmStats) uint64
	}{
		{"delta", "warmed", func(s rocks.WarmStats) uint64 { return s.Files }},
		{"delta", "failed", func(s rocks.WarmStats) uint64 { return s.Failed }},
		{"compaction", "warmed", func(s rocks.WarmStats) uint64 { return s.CompactionFiles }},
		{"compaction", "skipped", func(s rocks.WarmStats) uint64 { return s.CompactionSkipped }},
		{"compaction", "failed", func(s rocks.WarmStats) uint64 { return s.CompactionFailed }},
	} {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cobbled_cache_warm_files_total",
			ConstLabels: prometheus.Labels{"kind": w.kind, "result": w.result},
			Help:        "New SST files read into the block cache before they serve (deltas before ingest, compaction outputs before install), or skipped (over the size limit) or failed."},
			warm(w.f)))
	}
	for kind, f := range map[string]func(rocks.WarmStats) uint64{
		"delta":      func(s rocks.WarmStats) uint64 { return s.Bytes },
		"compaction": func(s rocks.WarmStats) uint64 { return s.CompactionBytes },
	} {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cobbled_cache_warm_bytes_total",
			ConstLabels: prometheus.Labels{"kind": kind},
			Help:        "Bytes of new SST files read into the block cache before they serve, by kind."},
			warm(f)))
	}
	return append(cs,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cobbled_ingest_small_delta_slot_total",
			Help: "Small deltas that found every ordinary ingest slot taken and used a slot reserved for them (--small-delta-slots)."},
			fromNode(func(n *Node) float64 { return float64(n.smallUse.Load()) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cobbled_ingest_rate_limit_bytes", ConstLabels: prometheus.Labels{"limit": "cap"},
			Help: "Ingest rate limit in bytes/s: the hard cap (--ingest-rate) and the adaptive snapshot rate; 0 is unlimited."},
			stat(func(s pace.Stats) float64 { return float64(s.Rate) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cobbled_ingest_rate_limit_bytes", ConstLabels: prometheus.Labels{"limit": "adaptive"},
			Help: "Ingest rate limit in bytes/s: the hard cap (--ingest-rate) and the adaptive snapshot rate; 0 is unlimited."},
			stat(func(s pace.Stats) float64 { return float64(s.AdaptiveRate) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cobbled_ingest_pacer_read_p99_seconds",
			Help: "BatchGet handling-time p99 of the pacer's last control window (what the adaptive mode compares with its target)."},
			stat(func(s pace.Stats) float64 { return s.ReadP99.Seconds() })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cobbled_compaction_pending_bytes",
			Help: "RocksDB's estimate of bytes compaction must rewrite, summed over held partitions."},
			fromNode(func(n *Node) float64 { return float64(n.CompactionStats().PendingBytes) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cobbled_l0_files",
			Help: "SST files in level 0 (ingested deltas not yet compacted), summed over held partitions."},
			fromNode(func(n *Node) float64 { return float64(n.CompactionStats().L0Files) })),
	)
}
