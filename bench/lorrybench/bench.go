// Package lorrybench is the priority-lanes benchmark of Lorry (`pillar bench
// lorry`, and BenchmarkPriorityLanes): a backlog of bulk records of about
// 50 KB is delivered to three cobbled replicas per partition (real RocksDB
// nodes ingesting through a real control plane, from a local object store)
// while fresh updates arrive at a steady rate. It measures the fresh
// updates' latency from the store commit that enqueues them to their being
// readable on all three replicas, the bulk throughput against a run of the
// same backlog without fresh traffic, and Lorry's loss counter; it plots
// latency by priority over time.
//
// It is a harness: it links the components, they never link it.
package lorrybench

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pillarkit/pillar/cobbled"
	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/internal/objstore"
	"github.com/pillarkit/pillar/lorry"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/local"
)

// Options configure a run. The zero value of every field means its default.
type Options struct {
	// Dir holds the store, object store, control plane and nodes (each
	// phase's in a folder of its own, removed after the phase). The
	// default value is a temporary directory, removed afterwards.
	Dir string
	// Records is the bulk backlog. The default value is 200000 (≈ 10 GB at
	// the default ValueSize: more than a small shared machine holds; run a
	// scaled-down size there).
	Records int
	// ValueSize is the bulk records' size. The default value is 50 KiB.
	ValueSize int
	// FreshRate is the fresh updates per second during the mixed phase;
	// FreshSize their size. The default values are 100 and ValueSize.
	FreshRate, FreshSize int
	// FreshCommitEvery is how often the fresh producer commits what is due
	// (crawl-update publishes come in small transactions, not one per
	// page). The default value is 100ms.
	FreshCommitEvery time.Duration
	// Partitions is the store's and control plane's P. The default value
	// is 8.
	Partitions int
	// MaxBatchAge is Lorry's batch age; BulkMinShare its bulk share. The
	// default values are Lorry's defaults (1s, 0.25). (Until fresh records
	// rode bulk batches the bench used 200ms: every fresh record then went
	// in a fresh batch of its own, and a shorter age bounded its wait. Now
	// the age only times fresh batches where no bulk batch can carry them,
	// and each one costs the replicas an apply; FreshRideWait times the
	// riders.)
	MaxBatchAge  time.Duration
	BulkMinShare float64
	// SkipBaseline skips the bulk-only phase (no throughput ratio).
	SkipBaseline bool
	// InOrder adds a third phase, the peer: the same backlog and fresh
	// traffic with every record at one priority, so Lorry delivers the
	// queue in order (as it did before priorities).
	InOrder bool
	// MaxBatchBytes and FreshBulkBatchBytes are Lorry's. The default values
	// are Lorry's defaults.
	MaxBatchBytes, FreshBulkBatchBytes int64
	// MaxBulkUnapplied and ReplicaPoll are Lorry's. The default values are
	// Lorry's defaults.
	MaxBulkUnapplied int
	// MaxBulkUnappliedTotal is Lorry's (0: its default, no such bound).
	MaxBulkUnappliedTotal int
	ReplicaPoll           time.Duration
	// FreshRideWait is Lorry's (fresh records ride along with bulk
	// batches). The default value is Lorry's default; negative disables it.
	FreshRideWait time.Duration
	// NodeIngestConcurrency is the cobbled nodes' IngestConcurrency (how
	// many partitions a node downloads and applies at once). The default
	// value is cobbled's default.
	NodeIngestConcurrency int
	// Progress receives one line per phase step. The default value
	// discards.
	Progress io.Writer
	// Logger receives the components' logs. The default value discards.
	Logger *slog.Logger
}

func (o *Options) ensureDefaults() {
	if o.Records == 0 {
		o.Records = 200000
	}
	if o.ValueSize == 0 {
		o.ValueSize = 50 << 10
	}
	if o.FreshRate == 0 {
		o.FreshRate = 100
	}
	if o.FreshSize == 0 {
		o.FreshSize = o.ValueSize
	}
	if o.Partitions == 0 {
		o.Partitions = 8
	}
	if o.FreshCommitEvery == 0 {
		o.FreshCommitEvery = 100 * time.Millisecond
	}
	if o.MaxBatchAge == 0 {
		o.MaxBatchAge = time.Second
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate checks the options.
func (o Options) Validate() error {
	o.ensureDefaults()
	if o.Records < 1 || o.ValueSize < 16 || o.FreshSize < 16 || o.FreshRate < 1 || o.Partitions < 1 {
		return fmt.Errorf("lorrybench: Records %d, ValueSize %d, FreshSize %d, FreshRate %d and Partitions %d must be positive (sizes at least 16)",
			o.Records, o.ValueSize, o.FreshSize, o.FreshRate, o.Partitions)
	}
	return nil
}

// Phase is one drain of the backlog.
type Phase struct {
	Name string `json:"name"`
	// BulkRecords delivered in BulkSeconds: from the worker's start to the
	// last bulk record applied on every replica.
	BulkRecords    int     `json:"bulk_records"`
	BulkSeconds    float64 `json:"bulk_seconds"`
	BulkPerSecond  float64 `json:"bulk_records_per_second"`
	BulkMBPerSec   float64 `json:"bulk_mb_per_second"`
	RegisteredSecs float64 `json:"bulk_registered_seconds"` // to the last bulk batch's registration
	// Fresh updates enqueued while the backlog drained, and their latency
	// from the commit that enqueued them to being applied on all three
	// replicas (measured by the harness from the nodes' applied seqs).
	FreshUpdates  int     `json:"fresh_updates"`
	FreshRate     float64 `json:"fresh_updates_per_second"`
	FreshP50MS    float64 `json:"fresh_p50_ms"`
	FreshP90MS    float64 `json:"fresh_p90_ms"`
	FreshP99MS    float64 `json:"fresh_p99_ms"`
	FreshMaxMS    float64 `json:"fresh_max_ms"`
	FreshRegP99MS float64 `json:"fresh_registered_p99_ms"`
	// Lorry's own view: its loss counter and latency summaries.
	Lost         int64                           `json:"lost"`
	LorryLatency map[string]lorry.LatencySummary `json:"lorry_latency"`
	Stats        lorry.Stats                     `json:"-"`
	Batches      int64                           `json:"batches"`
	FreshBatches int64                           `json:"fresh_batches"`
	BulkBatches  int64                           `json:"bulk_batches"`
	// FreshRode counts the fresh records that rode along with bulk batches.
	FreshRode int64 `json:"fresh_rode"`
	// Demoted counts the bulk batches whose riders went back to the fresh
	// lane (their upload took longer than Lorry's demotion bound);
	// FlightMS is Lorry's Stats.FlightTime at the phase's end (what a bulk
	// batch takes from being planned to its files uploaded); Retries and
	// FollowUps are Lorry's counters.
	Demoted  int64   `json:"demoted"`
	FlightMS float64 `json:"flight_ms"`
	// HeadScanMS is Lorry's Stats.HeadScan (the longest first head scan
	// of a partition: bulk delivery starts after it); Scanned the heads
	// its scans read.
	HeadScanMS float64 `json:"head_scan_ms"`
	Scanned    int64   `json:"scanned_heads"`
	Retries    int64   `json:"retries"`
	FollowUps  int64   `json:"follow_ups"`
	// Checked keys read back from every replica with their newest value.
	Checked int `json:"checked_keys"`
	// Enqueued records (bulk and fresh) and those seen applied on all
	// three replicas (in a batch every replica reached).
	Enqueued int `json:"enqueued"`
	Applied  int `json:"applied_everywhere"`

	points []point
}

// setStats records the worker's counters in the phase.
func (ph *Phase) setStats(st lorry.Stats) {
	ph.Stats = st
	ph.Batches, ph.FreshBatches, ph.BulkBatches = st.Batches, st.FreshBatches, st.BulkBatches
	ph.FreshRode, ph.Demoted, ph.Retries, ph.FollowUps = st.FreshRode, st.Demoted, st.Retries, st.FollowUps
	ph.FlightMS = msf(st.FlightTime)
	ph.HeadScanMS, ph.Scanned = msf(st.HeadScan), st.Scanned
}

// point is one record's latency, for the plot.
type point struct {
	fresh bool
	at    float64 // seconds since the phase began, when it was applied everywhere
	lat   float64 // seconds
}

// Result is a run.
type Result struct {
	Options  map[string]any `json:"options"`
	LoadAvg  string         `json:"load_avg"` // uptime before and after
	Baseline *Phase         `json:"baseline,omitempty"`
	InOrder  *Phase         `json:"in_order,omitempty"`
	Mixed    *Phase         `json:"mixed"`
	// Ratio is the mixed phase's bulk throughput over the baseline's.
	Ratio   float64  `json:"bulk_throughput_ratio"`
	Targets []Target `json:"targets"`
}

// Target is one of the targets and whether this run met it.
type Target struct {
	What string `json:"what"`
	Want string `json:"want"`
	Got  string `json:"got"`
	Met  bool   `json:"met"`
}

// cluster is the serving side: control plane, object store, three nodes.
type cluster struct {
	o     Options
	dir   string
	store *local.Store
	objs  objstore.Store
	db    *control.Store
	ctl   *control.Client
	gsrv  interface{ Stop() }
	nodes []*cobbled.Node
	wg    sync.WaitGroup
	stop  context.CancelFunc

	mu      sync.Mutex
	applied map[nodePart]map[int64]time.Time // seq → when the node applied it
	last    map[nodePart]int64
}

type nodePart struct{ node, p int }

func startCluster(ctx context.Context, o Options, dir string) (*cluster, error) {
	c := &cluster{o: o, dir: dir, applied: map[nodePart]map[int64]time.Time{}, last: map[nodePart]int64{}}
	var err error
	if c.store, err = local.Create(filepath.Join(dir, "store"), &local.Options{Partitions: o.Partitions, RetainFor: time.Millisecond}); err != nil {
		return nil, err
	}
	if c.objs, err = objstore.OpenLocal(filepath.Join(dir, "objects")); err != nil {
		return nil, err
	}
	if c.db, err = control.OpenStore(ctx, "sqlite:"+filepath.Join(dir, "control.db"), &control.StoreOptions{Partitions: o.Partitions}); err != nil {
		return nil, err
	}
	srv, err := control.NewServer(&control.Options{Store: c.db, NoAuth: true, ReconcileInterval: 200 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g := srv.GRPCServer()
	go g.Serve(lis)
	c.gsrv = g
	if c.ctl, err = control.Dial(lis.Addr().String(), nil); err != nil {
		return nil, err
	}
	nctx, cancel := context.WithCancel(ctx)
	c.stop = cancel
	go srv.Run(nctx)
	for i := 0; i < 3; i++ {
		n, err := cobbled.Open(nctx, cobbled.Options{ID: fmt.Sprintf("n%d", i), Zone: fmt.Sprintf("z%d", i),
			Addr: fmt.Sprintf("127.0.0.1:%d", 1+i), Dir: filepath.Join(dir, fmt.Sprintf("n%d", i)),
			CacheBytes: 32 << 20, Control: cobbled.FromControlClient(c.ctl), Objects: c.objs,
			LongPoll: 5 * time.Second, Heartbeat: 200 * time.Millisecond, IngestConcurrency: o.NodeIngestConcurrency, Logger: o.Logger})
		if err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, n)
		c.wg.Add(1)
		go func() { defer c.wg.Done(); n.Run(nctx) }()
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if c.ready(ctx) {
			break
		}
		if time.Now().After(deadline) {
			return nil, errors.New("lorrybench: three replicas per partition not ready after 60s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.wg.Add(1)
	go func() { defer c.wg.Done(); c.sample(nctx) }()
	return c, nil
}

func (c *cluster) ready(ctx context.Context) bool {
	r, err := c.ctl.GetRouting(ctx)
	if err != nil || len(r.Replicas) != c.o.Partitions {
		return false
	}
	for _, reps := range r.Replicas {
		if len(reps) != 3 {
			return false
		}
	}
	for _, n := range c.nodes {
		if len(n.Stats().Held) != c.o.Partitions {
			return false
		}
	}
	return true
}

// sample records when each node's applied seq of each partition moves.
func (c *cluster) sample(ctx context.Context) {
	for ctx.Err() == nil {
		now := time.Now()
		for ni, n := range c.nodes {
			for _, ps := range n.Stats().Held {
				k := nodePart{ni, ps.Partition}
				c.mu.Lock()
				if c.applied[k] == nil {
					c.applied[k] = map[int64]time.Time{}
				}
				for s := c.last[k] + 1; s <= ps.AppliedSeq; s++ {
					t := now
					if !ps.LastApply.IsZero() && ps.LastApply.Before(now) {
						t = ps.LastApply
					}
					c.applied[k][s] = t
				}
				c.last[k] = max(c.last[k], ps.AppliedSeq)
				c.mu.Unlock()
			}
		}
		// Node.Stats also reads RocksDB's statistics dump: every 5 ms on
		// three nodes that was 11% of the run's CPU (a 2-core machine).
		// A seq seen late gets the node's last apply time, so a slower
		// sampler only overstates latency, by at most its period.
		time.Sleep(20 * time.Millisecond)
	}
}

// appliedAll returns when every node applied seq s of partition p.
func (c *cluster) appliedAll(p int, s int64) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var all time.Time
	for ni := range c.nodes {
		t, ok := c.applied[nodePart{ni, p}][s]
		if !ok {
			return time.Time{}, false
		}
		if t.After(all) {
			all = t
		}
	}
	return all, true
}

func (c *cluster) caughtUp(p int, seq int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for ni := range c.nodes {
		if c.last[nodePart{ni, p}] < seq {
			return false
		}
	}
	return true
}

func (c *cluster) close() {
	c.stop()
	c.wg.Wait()
	for _, n := range c.nodes {
		n.Close()
	}
	if c.ctl != nil {
		c.ctl.Close()
	}
	if c.gsrv != nil {
		c.gsrv.Stop()
	}
	if c.db != nil {
		c.db.Close()
	}
	if c.store != nil {
		c.store.Close()
	}
}

// registered returns partition p's batches in seq order.
func (c *cluster) registered(ctx context.Context, p int) ([]control.BatchEntry, error) {
	var out []control.BatchEntry
	after := int64(0)
	for {
		bs, err := c.ctl.ListBatches(ctx, p, after, 1000, 0)
		if err != nil {
			return nil, err
		}
		if len(bs) == 0 {
			return out, nil
		}
		out = append(out, bs...)
		after = bs[len(bs)-1].Seq
	}
}

// values makes distinct incompressible values stamped with an update id.
type values struct{ buf []byte }

func newValues(size int) *values {
	buf := make([]byte, 4*size+64)
	for i := range buf {
		buf[i] = byte(rand.Uint32())
	}
	return &values{buf: buf}
}

func (v *values) make(id uint64, size int) []byte {
	off := int(id*7919) % (len(v.buf) - size)
	out := append([]byte(nil), v.buf[off:off+size]...)
	binary.BigEndian.PutUint64(out, id)
	return out
}

// update is one enqueued record the harness follows.
type update struct {
	p      int
	off    int64
	key    string
	id     uint64
	fresh  bool
	commit time.Time
}

// run state shared by the phases.
type bench struct {
	o      Options
	c      *cluster
	keys   []pillar.Key
	vals   *values
	nextID uint64
	newest map[string]uint64 // key → id of its newest update
	ends   []int64           // queue end per partition
	// inOrder queues the backlog at the fresh priority (the peer phase).
	inOrder bool
}

// Run runs the benchmark.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o.ensureDefaults()
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "lorrybench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	res := &Result{LoadAvg: uptime(), Options: map[string]any{
		"records": o.Records, "value_size": o.ValueSize, "fresh_rate": o.FreshRate, "fresh_size": o.FreshSize, "fresh_commit_every": o.FreshCommitEvery.String(),
		"partitions": o.Partitions, "max_batch_age": o.MaxBatchAge.String(), "bulk_min_share": o.BulkMinShare, "replicas": 3,
		"object_store": "local directory", "control_plane": "SQLite over gRPC (loopback)",
		"max_batch_bytes": o.MaxBatchBytes, "fresh_bulk_batch_bytes": o.FreshBulkBatchBytes,
		"max_bulk_unapplied": o.MaxBulkUnapplied, "max_bulk_unapplied_total": o.MaxBulkUnappliedTotal, "replica_poll": o.ReplicaPoll.String(), "fresh_ride_wait": o.FreshRideWait.String(), "node_ingest_concurrency": o.NodeIngestConcurrency,
	}}
	b := &bench{o: o, vals: newValues(max(o.ValueSize, o.FreshSize)), newest: map[string]uint64{}, ends: make([]int64, o.Partitions)}
	for i := 0; i < o.Records; i++ {
		b.keys = append(b.keys, pillar.KeyOfNormalized(fmt.Sprintf("https://bench.example/page/%d", i)))
	}
	fmt.Fprintf(o.Progress, "lorry bench: %d bulk records of %d B (%.1f MB), %d fresh updates/s, %d partitions × 3 replicas, in %s\n",
		o.Records, o.ValueSize, float64(o.Records)*float64(o.ValueSize)/1e6, o.FreshRate, o.Partitions, dir)
	// Each phase runs on a cluster of its own, started empty: a phase
	// that followed another would ingest into replicas already holding
	// the other's backlog (larger databases, more compaction), which
	// slowed the second phase's bulk delivery by a third on its own.
	k := 0
	onCluster := func(name string, fresh bool) (*Phase, error) {
		k++
		pdir := filepath.Join(dir, fmt.Sprintf("phase-%d", k))
		c, err := startCluster(ctx, o, pdir)
		if err != nil {
			return nil, err
		}
		defer func() {
			c.close()
			_ = os.RemoveAll(pdir) // the next phase's disk
		}()
		b.c, b.ends, b.newest = c, make([]int64, o.Partitions), map[string]uint64{}
		return b.phase(ctx, name, fresh)
	}
	var err error
	if !o.SkipBaseline {
		if res.Baseline, err = onCluster("bulk only", false); err != nil {
			return nil, err
		}
	}
	if res.Mixed, err = onCluster("bulk + fresh", true); err != nil {
		return nil, err
	}
	if o.InOrder {
		b.inOrder = true
		if res.InOrder, err = onCluster("in order (one priority)", true); err != nil {
			return nil, err
		}
	}
	res.LoadAvg += " → " + uptime()
	res.evaluate()
	return res, nil
}

func (b *bench) bulkPriority() string {
	if b.inOrder {
		return pillar.PriorityFresh
	}
	return pillar.PriorityBulk
}

// enqueueBulk queues one bulk record per key (a republish), in commits of
// 128 records.
func (b *bench) enqueueBulk(ctx context.Context) ([]update, error) {
	var ups []update
	for start := 0; start < len(b.keys); start += 128 {
		tx, err := b.c.store.Begin(ctx)
		if err != nil {
			return nil, err
		}
		var batch []update
		for _, k := range b.keys[start:min(start+128, len(b.keys))] {
			b.nextID++
			p := k.Partition(b.o.Partitions)
			ks := k.String()
			if err := tx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(p), PageKey: ks, Op: pillar.OpPut,
				Value: b.vals.make(b.nextID, b.o.ValueSize), Cause: "bench republish", Priority: b.bulkPriority()}); err != nil {
				tx.Abort()
				return nil, err
			}
			batch = append(batch, update{p: p, off: b.ends[p], key: ks, id: b.nextID})
			b.ends[p]++
			b.newest[ks] = b.nextID
		}
		if err := tx.Commit(ctx); err != nil {
			return nil, err
		}
		now := time.Now()
		for _, u := range batch {
			u.commit = now
			ups = append(ups, u)
		}
	}
	return ups, nil
}

// phase queues the backlog with Lorry stopped, then starts a worker (and,
// when fresh, the fresh producer) and waits for everything to be applied
// on every replica.
func (b *bench) phase(ctx context.Context, name string, fresh bool) (*Phase, error) {
	o := b.o
	fmt.Fprintf(o.Progress, "lorry bench: %s: queueing %d bulk records…\n", name, len(b.keys))
	bulkUps, err := b.enqueueBulk(ctx)
	if err != nil {
		return nil, err
	}
	bulkEnd := append([]int64(nil), b.ends...)
	w, err := lorry.New(lorry.Options{Store: b.c.store, Objects: b.c.objs, Registry: b.c.ctl, ID: "bench",
		MaxBatchAge: o.MaxBatchAge, PollInterval: 20 * time.Millisecond, LeaseTTL: 10 * time.Second,
		MaxBatchBytes: o.MaxBatchBytes, FreshBulkBatchBytes: o.FreshBulkBatchBytes,
		BulkMinShare: o.BulkMinShare, MaxBulkUnapplied: o.MaxBulkUnapplied, MaxBulkUnappliedTotal: o.MaxBulkUnappliedTotal, ReplicaPoll: o.ReplicaPoll,
		LossAfter: 30 * time.Second, BulkLossAfter: 30 * time.Minute, FreshRideWait: o.FreshRideWait,
		TempDir: filepath.Join(b.c.dir, "tmp"), CleanupInterval: -1, Logger: o.Logger})
	if err != nil {
		return nil, err
	}
	wctx, stopWorker := context.WithCancel(ctx)
	wdone := make(chan error, 1)
	start := time.Now()
	go func() { wdone <- w.Run(wctx) }()
	defer func() {
		stopWorker()
		<-wdone
	}()

	// The fresh producer: updates of keys of the backlog (crawl updates of
	// pages being republished), FreshRate a second, until the backlog is
	// delivered.
	var freshUps []update
	var fmu sync.Mutex
	pctx, stopProducer := context.WithCancel(ctx)
	pdone := make(chan error, 1)
	if fresh {
		go func() { pdone <- b.produce(pctx, &fmu, &freshUps) }()
	} else {
		pdone <- nil
	}
	fmt.Fprintf(o.Progress, "lorry bench: %s: draining…\n", name)
	var regDone time.Time
	lastReport := time.Now()
	for {
		if err := ctx.Err(); err != nil {
			stopProducer()
			return nil, err
		}
		ss, err := lorry.Positions(ctx, b.c.store)
		if err != nil {
			stopProducer()
			return nil, err
		}
		done := true
		committed := int64(0)
		for p, s := range ss {
			committed += min(s.Committed, bulkEnd[p])
			if s.Committed < bulkEnd[p] {
				done = false
			}
		}
		if done {
			regDone = time.Now()
			break
		}
		if time.Since(lastReport) > 5*time.Second {
			lastReport = time.Now()
			fmt.Fprintf(o.Progress, "lorry bench: %s: %.0fs, %d of the bulk backlog's offsets delivered\n", name, time.Since(start).Seconds(), committed)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The bulk records are applied everywhere once every partition's
	// replicas reach the seq of the batch that covered the backlog's end.
	bulkSeq := make([]int64, o.Partitions)
	for p := range bulkSeq {
		bs, err := b.c.registered(ctx, p)
		if err != nil {
			stopProducer()
			return nil, err
		}
		for _, e := range bs {
			if e.Manifest.QueueEnd >= bulkEnd[p] && bulkEnd[p] > 0 {
				bulkSeq[p] = e.Seq
				break
			}
		}
	}
	if err := waitUntil(ctx, 10*time.Minute, func() bool {
		for p, s := range bulkSeq {
			if !b.c.caughtUp(p, s) {
				return false
			}
		}
		return true
	}); err != nil {
		stopProducer()
		return nil, fmt.Errorf("lorrybench: %s: bulk not applied on every replica: %w", name, err)
	}
	bulkApplied := start
	for p, s := range bulkSeq {
		if t, ok := b.c.appliedAll(p, s); ok && s > 0 {
			bulkApplied = maxTime(bulkApplied, t)
		}
	}
	stopProducer()
	if err := <-pdone; err != nil && !errors.Is(err, context.Canceled) {
		return nil, err
	}
	produced := time.Since(start)

	// Drain the rest (fresh updates queued at the end) and wait for every
	// replica to catch up with the newest seq.
	if err := waitUntil(ctx, 5*time.Minute, func() bool {
		ss, err := lorry.Positions(ctx, b.c.store)
		if err != nil {
			return false
		}
		for _, s := range ss {
			if s.Committed != s.QueueEnd || s.Pending != nil {
				return false
			}
		}
		return true
	}); err != nil {
		return nil, fmt.Errorf("lorrybench: %s: queue not drained: %w", name, err)
	}
	newest := make([]int64, o.Partitions)
	entries := make([][]control.BatchEntry, o.Partitions)
	for p := range newest {
		if entries[p], err = b.c.registered(ctx, p); err != nil {
			return nil, err
		}
		if n := len(entries[p]); n > 0 {
			newest[p] = entries[p][n-1].Seq
		}
	}
	if err := waitUntil(ctx, 5*time.Minute, func() bool {
		for p, s := range newest {
			if !b.c.caughtUp(p, s) {
				return false
			}
		}
		return true
	}); err != nil {
		return nil, fmt.Errorf("lorrybench: %s: replicas not caught up: %w", name, err)
	}
	time.Sleep(2 * o.MaxBatchAge) // the worker's last replica poll
	ph := &Phase{Name: name, BulkRecords: len(bulkUps), Lost: w.Lost(), LorryLatency: w.Latency()}
	ph.setStats(w.Stats())
	ph.BulkSeconds = bulkApplied.Sub(start).Seconds()
	ph.RegisteredSecs = regDone.Sub(start).Seconds()
	ph.BulkPerSecond = float64(len(bulkUps)) / ph.BulkSeconds
	ph.BulkMBPerSec = ph.BulkPerSecond * float64(o.ValueSize) / 1e6

	// Latencies: each record's batch is the first (by seq) that carries
	// it: an ordinary batch of its range (bulk, with the fresh records
	// riding along up to the id's -f<last>), or a fresh-lane batch.
	type ref struct {
		seq int64
		reg time.Time
	}
	freshAt := make([]map[int64]bool, o.Partitions)
	for p := range freshAt {
		freshAt[p] = map[int64]bool{}
	}
	for _, u := range freshUps {
		freshAt[u.p][u.off] = true
	}
	carried := make([]map[int64]ref, o.Partitions)
	for p := range carried {
		m := map[int64]ref{}
		claim := func(a, b int64, freshOnly bool, r ref) {
			for off := a; off <= b; off++ {
				if _, ok := m[off]; !ok && (!freshOnly || freshAt[p][off]) {
					m[off] = r
				}
			}
		}
		for _, e := range entries[p] {
			mf, r := e.Manifest, ref{e.Seq, e.RegisteredAt}
			var pp int
			var first, last int64
			switch {
			case strings.Contains(mf.Source, ":fresh:"):
				if _, err := fmt.Sscanf(mf.Source, "lorry:p%d:fresh:%d-%d", &pp, &first, &last); err == nil {
					claim(first, last, true, r)
				}
			case strings.Contains(mf.Source, ":replay:"):
			case mf.QueueEnd > 0:
				claim(mf.QueueFirst, mf.QueueEnd-1, false, r)
				if i := strings.LastIndex(mf.ID, "-f"); i > 0 {
					if fl, err := strconv.ParseInt(mf.ID[i+2:], 10, 64); err == nil {
						claim(mf.QueueEnd, fl, true, r)
					}
				}
			}
		}
		carried[p] = m
	}
	seqOf := func(u update) (int64, time.Time, bool) {
		r, ok := carried[u.p][u.off]
		return r.seq, r.reg, ok
	}
	var flat, freg []time.Duration
	ph.Enqueued = len(bulkUps) + len(freshUps)
	for _, u := range append(bulkUps, freshUps...) {
		s, reg, ok := seqOf(u)
		if !ok {
			return nil, fmt.Errorf("lorrybench: %s: partition %d offset %d (key %s) in no registered batch", name, u.p, u.off, u.key)
		}
		at, ok := b.c.appliedAll(u.p, s)
		if !ok {
			return nil, fmt.Errorf("lorrybench: %s: partition %d seq %d never seen applied on every node", name, u.p, s)
		}
		ph.Applied++
		lat := max(0, at.Sub(u.commit))
		ph.points = append(ph.points, point{fresh: u.fresh, at: at.Sub(start).Seconds(), lat: lat.Seconds()})
		if u.fresh {
			flat = append(flat, lat)
			freg = append(freg, max(0, reg.Sub(u.commit)))
		}
	}
	if len(flat) > 0 {
		q := quantiles(flat, 0.5, 0.9, 0.99, 1)
		ph.FreshUpdates, ph.FreshRate = len(flat), float64(len(flat))/produced.Seconds()
		ph.FreshP50MS, ph.FreshP90MS, ph.FreshP99MS, ph.FreshMaxMS = msf(q[0]), msf(q[1]), msf(q[2]), msf(q[3])
		ph.FreshRegP99MS = msf(quantiles(freg, 0.99)[0])
	}
	n, err := b.check(ctx)
	if err != nil {
		return nil, fmt.Errorf("lorrybench: %s: %w", name, err)
	}
	ph.Checked = n
	fmt.Fprintf(o.Progress, "lorry bench: %s: bulk %.0f records/s (%.1f MB/s) over %.1fs; fresh %d updates, p50 %.0f ms, p99 %.0f ms to all 3 replicas; lost %d\n",
		name, ph.BulkPerSecond, ph.BulkMBPerSec, ph.BulkSeconds, ph.FreshUpdates, ph.FreshP50MS, ph.FreshP99MS, ph.Lost)
	st := ph.Stats
	fmt.Fprintf(o.Progress, "lorry bench: %s: lorry step totals: read %v, pending %v, upload %v, register %v, commit %v; %d batches (%d fresh), %d fresh records rode bulk batches, %d riding batches demoted (bulk batch flight time %v), %d follow-ups, %d retries\n",
		name, st.ReadTime.Round(time.Millisecond), st.PendingTime.Round(time.Millisecond), st.UploadTime.Round(time.Millisecond),
		st.RegisterTime.Round(time.Millisecond), st.CommitTime.Round(time.Millisecond), st.Batches, st.FreshBatches, st.FreshRode,
		st.Demoted, st.FlightTime.Round(time.Millisecond), st.FollowUps, st.Retries)
	fmt.Fprintf(o.Progress, "lorry bench: %s: head scan: the longest partition's first scan %v (bulk delivery starts after it); %d heads read in %v\n",
		name, st.HeadScan.Round(time.Millisecond), st.Scanned, st.ScanTime.Round(time.Millisecond))
	cs := b.c.store.CommitStats()
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	fmt.Fprintf(o.Progress, "lorry bench: %s: store commits so far (every writer): %d transactions in %d group commits; per transaction staging %v, queued %v; per group lock wait %v, locked %v (dir sync %v, manifest %v, CURRENT %v, index %v, cleanup %v)\n",
		name, cs.Commits, cs.Groups, r(cs.Staging), r(cs.Queued), r(cs.LockWait), r(cs.Locked), r(cs.Sync), r(cs.Manifest), r(cs.Current), r(cs.Index), r(cs.Cleanup))
	return ph, nil
}

// produce enqueues fresh updates at FreshRate (one commit per
// FreshCommitEvery at most), of random keys of the backlog.
func (b *bench) produce(ctx context.Context, mu *sync.Mutex, out *[]update) error {
	o := b.o
	start := time.Now()
	sent := 0
	for ctx.Err() == nil {
		due := int(time.Since(start).Seconds()*float64(o.FreshRate)) - sent
		if due <= 0 {
			time.Sleep(2 * time.Millisecond)
			continue
		}
		due = min(due, o.FreshRate)
		tx, err := b.c.store.Begin(ctx)
		if err != nil {
			return err
		}
		var batch []update
		mu.Lock()
		for i := 0; i < due; i++ {
			k := b.keys[rand.IntN(len(b.keys))]
			b.nextID++
			p := k.Partition(o.Partitions)
			ks := k.String()
			if err := tx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(p), PageKey: ks, Op: pillar.OpPut,
				Value: b.vals.make(b.nextID, o.FreshSize), Cause: "bench crawl update", Priority: pillar.PriorityFresh}); err != nil {
				mu.Unlock()
				tx.Abort()
				return err
			}
			batch = append(batch, update{p: p, off: b.ends[p], key: ks, id: b.nextID, fresh: true})
			b.ends[p]++
			b.newest[ks] = b.nextID
		}
		mu.Unlock()
		if err := tx.Commit(context.WithoutCancel(ctx)); err != nil {
			return err
		}
		now := time.Now()
		mu.Lock()
		for _, u := range batch {
			u.commit = now
			*out = append(*out, u)
		}
		mu.Unlock()
		sent += due
		time.Sleep(time.Until(now.Add(o.FreshCommitEvery)))
	}
	return nil
}

// check reads up to 1000 keys (all, when fewer) from every node and
// compares them with the newest update of each: nothing lost, no key
// behind.
func (b *bench) check(ctx context.Context) (int, error) {
	keys := b.keys
	if len(keys) > 1000 {
		keys = make([]pillar.Key, 1000)
		for i := range keys {
			keys[i] = b.keys[rand.IntN(len(b.keys))]
		}
	}
	for _, k := range keys {
		p := k.Partition(b.o.Partitions)
		want := b.newest[k.String()]
		for ni, n := range b.c.nodes {
			var got uint64
			found := false
			if err := n.MultiGet(p, [][]byte{k[:]}, func(_ int, v []byte, f bool) {
				if f && len(v) >= 8 {
					got, found = binary.BigEndian.Uint64(v), true
				}
			}); err != nil {
				return 0, err
			}
			if !found || got != want {
				return 0, fmt.Errorf("node %d key %s: update %d (found %v), want %d", ni, hex.EncodeToString(k[:]), got, found, want)
			}
		}
	}
	return len(keys), nil
}

func (r *Result) evaluate() {
	m := r.Mixed
	r.Targets = append(r.Targets, Target{What: "fresh p99, enqueue → readable on all 3 replicas, while the backlog drains",
		Want: "≤ 5000 ms", Got: fmt.Sprintf("%.0f ms (p50 %.0f, max %.0f; %d updates)", m.FreshP99MS, m.FreshP50MS, m.FreshMaxMS, m.FreshUpdates),
		Met: m.FreshUpdates > 0 && m.FreshP99MS <= 5000})
	if r.Baseline != nil {
		r.Ratio = m.BulkPerSecond / r.Baseline.BulkPerSecond
		r.Targets = append(r.Targets, Target{What: "bulk throughput with fresh traffic / without",
			Want: "≥ 0.80", Got: fmt.Sprintf("%.2f (%.0f vs %.0f records/s)", r.Ratio, m.BulkPerSecond, r.Baseline.BulkPerSecond), Met: r.Ratio >= 0.8})
	}
	lost := m.Lost
	if r.Baseline != nil {
		lost += r.Baseline.Lost
	}
	r.Targets = append(r.Targets, Target{What: "loss counter", Want: "0", Got: fmt.Sprint(lost), Met: lost == 0})
	if r.InOrder != nil {
		r.Targets = append(r.Targets, Target{What: "fresh p99 with lanes / in order (the peer: one priority)", Want: "< 1",
			Got: fmt.Sprintf("%.2f (%.0f vs %.0f ms)", m.FreshP99MS/math.Max(r.InOrder.FreshP99MS, 1), m.FreshP99MS, r.InOrder.FreshP99MS),
			Met: m.FreshP99MS < r.InOrder.FreshP99MS})
	}
	r.Targets = append(r.Targets, Target{What: "keys read back from every replica with their newest value", Want: "all (up to 1000)",
		Got: fmt.Sprint(m.Checked), Met: m.Checked > 0 && m.Checked == min(1000, m.BulkRecords)})
	for _, ph := range []*Phase{r.Baseline, m, r.InOrder} {
		if ph == nil {
			continue
		}
		// A run that delivered nothing must fail, whatever its latencies
		// (none) say.
		r.Targets = append(r.Targets, Target{What: ph.Name + ": records applied on all 3 replicas", Want: fmt.Sprintf("all %d (and > 0)", ph.Enqueued),
			Got: fmt.Sprint(ph.Applied), Met: ph.Applied > 0 && ph.Applied == ph.Enqueued && ph.BulkPerSecond > 0})
	}
}

// Missed returns the targets the run did not meet.
func (r *Result) Missed() []Target {
	var out []Target
	for _, t := range r.Targets {
		if !t.Met {
			out = append(out, t)
		}
	}
	return out
}

func waitUntil(ctx context.Context, d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not after %v", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

func quantiles(ds []time.Duration, qs ...float64) []time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	out := make([]time.Duration, len(qs))
	for i, q := range qs {
		if len(s) > 0 {
			out[i] = s[min(len(s)-1, int(q*float64(len(s))))]
		}
	}
	return out
}

func msf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func uptime() string {
	out, err := exec.Command("uptime").Output()
	if err != nil {
		return "?"
	}
	s := strings.TrimSpace(string(out))
	if i := strings.Index(s, "load average"); i >= 0 {
		return s[i:]
	}
	return s
}
