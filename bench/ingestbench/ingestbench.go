package ingestbench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linxGnu/grocksdb"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pillarkit/pillar/cobbled"
	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/objstore"
	"github.com/pillarkit/pillar/internal/progress"
	"github.com/pillarkit/pillar/internal/rocks"
	"github.com/pillarkit/pillar/internal/testcluster"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/sstbuilder"
)

// Modes.
const (
	Unpaced = "unpaced"
	Paced   = "paced"
)

// Scenarios, in run order within a mode.
const (
	Idle     = "idle"
	Floor    = "floor" // bare IngestExternalFile loop (unpaced mode only)
	Snapshot = "a-snapshot"
	Deltas   = "b-deltas"
	Both     = "c-both"
)

// Options configure Run. The zero value of every field means its default.
type Options struct {
	// Out is the folder for results.md, results.json and
	// latency-timeline.png. The default value "" writes nothing.
	Out string
	// Dir holds the node's data, the object store and the floor's database.
	// The default value "" is a temporary folder, removed afterwards.
	Dir string
	// Partitions held by the node. The default value is 8.
	Partitions int
	// Keys in the read set. The default value is 4800 (≈240 MB).
	Keys int
	// MinValue and MaxValue bound value sizes (reads, snapshot, deltas).
	// The default values are 100 and 102400.
	MinValue, MaxValue int
	// CacheBytes is the node's block cache. The default value is 256 MiB.
	CacheBytes int64
	// ReadRate is the steady read load in 12-key BatchGets per second,
	// open loop. The default value is 200.
	ReadRate int
	// BatchKeys per request. The default value is 12.
	BatchKeys int
	// Phase is the length of each idle window and of the delta stream. The
	// default value is 10s.
	Phase time.Duration
	// Settle extends each "during" window past the ingest's end. The
	// default value is 2s.
	Settle time.Duration
	// SnapshotBytes is the fresh snapshot's size (values). The default
	// value is 1 GiB.
	SnapshotBytes int64
	// SnapshotPartition is the partition replaced. The default value is 0.
	SnapshotPartition int
	// DeltaPartitions is how many partitions (1, 2, …) receive deltas. The
	// default value is 4.
	DeltaPartitions int
	// UpdatesPerSec is the delta stream's rate. The default value is 1000.
	UpdatesPerSec int
	// DeltaInterval is the time between two batches of a partition (Lorry
	// closes a batch after MaxBatchAge or MaxBatchBytes). The default value
	// is 250ms.
	DeltaInterval time.Duration
	// Modes to run. The default value is Unpaced then Paced.
	Modes []string
	// TargetRatio sets the paced mode's target: this × the node's own
	// BatchGet p99 (its pacer's windows) in the paced mode's first idle
	// window. The default value is 1.2.
	TargetRatio float64
	// Target, when positive, is the paced mode's target instead. The
	// default value 0 derives it from TargetRatio.
	Target time.Duration
	// MinRate is the paced mode's adaptive floor, bytes/s. The default
	// value is 16 MB/s (a 1 GiB snapshot takes at most ~70 s; the node's
	// own default is 2 MiB/s).
	MinRate int64
	// AmbientMaxRate is the paced mode's cap on the adaptive rate while an
	// ambient p99 is in force (pace.Options.AmbientMaxRate), bytes/s. The
	// default value 0 is the pacer's (4 × MinRate); negative caps nothing.
	AmbientMaxRate int64
	// Background is the node's RocksDB background configuration (both
	// modes). The default value is cobbled's default.
	Background rocks.Background
	// IngestConcurrency is the node's cobbled.Options.IngestConcurrency;
	// its SnapshotConcurrency is 1, so the other slots stay with the
	// deltas. The default value is DeltaPartitions + 1: one slot per delta
	// partition and one for the snapshot (with the node's default of 2, a
	// snapshot leaves four delta partitions one slot).
	IngestConcurrency int
	// Deadline per read. The default value is 2s.
	Deadline time.Duration
	// Reference, when set, is the command line (argv) that starts the
	// reference node: a process that runs ServeReferenceIfAsked first (the
	// pillar CLI, or a test binary's TestMain). The reader then sends every
	// batch to both nodes in turn (reference.go). The default value nil
	// runs without one.
	Reference []string
	// ProfileDir, when set, gets a Go CPU profile of each window
	// (cpu-<n>-<mode>-<scenario>.pprof). The default value "" writes none.
	ProfileDir string
	// Logger receives progress. The default value discards.
	Logger *slog.Logger
	// Quiet hides progress bars. The default value shows them on a terminal.
	Quiet bool
}

func (o *Options) ensureDefaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Partitions, 8)
	def(&o.Keys, 4800)
	def(&o.MinValue, 100)
	def(&o.MaxValue, 100<<10)
	def(&o.ReadRate, 200)
	def(&o.BatchKeys, 12)
	def(&o.DeltaPartitions, 4)
	def(&o.UpdatesPerSec, 1000)
	def(&o.IngestConcurrency, o.DeltaPartitions+1)
	if o.CacheBytes == 0 {
		o.CacheBytes = 256 << 20
	}
	if o.Phase == 0 {
		o.Phase = 10 * time.Second
	}
	if o.Settle == 0 {
		o.Settle = 2 * time.Second
	}
	if o.SnapshotBytes == 0 {
		o.SnapshotBytes = 1 << 30
	}
	if o.DeltaInterval == 0 {
		o.DeltaInterval = 250 * time.Millisecond
	}
	if len(o.Modes) == 0 {
		o.Modes = []string{Unpaced, Paced}
	}
	if o.TargetRatio == 0 {
		o.TargetRatio = 1.2
	}
	if o.MinRate == 0 {
		o.MinRate = 16e6
	}
	if o.Deadline == 0 {
		o.Deadline = 2 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate checks the options, with defaults applied.
func (o Options) Validate() error {
	o.ensureDefaults()
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf("ingestbench: options: "+format, a...)) }
	for _, m := range o.Modes {
		if m != Unpaced && m != Paced {
			fail("mode %q: want %q or %q", m, Unpaced, Paced)
		}
	}
	if o.Partitions < 2 || o.DeltaPartitions < 1 || o.DeltaPartitions >= o.Partitions {
		fail("DeltaPartitions %d must be in [1, Partitions %d): partition 0..%d are the delta partitions' neighbours", o.DeltaPartitions, o.Partitions, o.Partitions-1)
	}
	if o.SnapshotPartition < 0 || o.SnapshotPartition >= o.Partitions || (o.SnapshotPartition >= 1 && o.SnapshotPartition <= o.DeltaPartitions) {
		fail("SnapshotPartition %d must be a held partition outside the delta partitions 1..%d", o.SnapshotPartition, o.DeltaPartitions)
	}
	if o.IngestConcurrency < 1 {
		fail("IngestConcurrency %d must be positive", o.IngestConcurrency)
	}
	if o.Keys < o.BatchKeys || o.BatchKeys < 1 || o.ReadRate < 1 || o.UpdatesPerSec < 1 {
		fail("Keys %d ≥ BatchKeys %d ≥ 1, ReadRate %d and UpdatesPerSec %d must be positive", o.Keys, o.BatchKeys, o.ReadRate, o.UpdatesPerSec)
	}
	if o.MinValue < 1 || o.MaxValue < o.MinValue {
		fail("value sizes [%d, %d]", o.MinValue, o.MaxValue)
	}
	if o.SnapshotBytes < 1<<20 || o.Phase <= 0 || o.DeltaInterval <= 0 || o.Settle < 0 {
		fail("SnapshotBytes %d (≥ 1 MiB), Phase %v, DeltaInterval %v must be positive", o.SnapshotBytes, o.Phase, o.DeltaInterval)
	}
	if o.TargetRatio < 1 || o.Target < 0 || o.MinRate < 0 {
		fail("TargetRatio %v must be ≥ 1, Target %v and MinRate %d non-negative", o.TargetRatio, o.Target, o.MinRate)
	}
	if o.AmbientMaxRate > 0 && o.AmbientMaxRate < o.MinRate {
		fail("AmbientMaxRate %d is below MinRate %d", o.AmbientMaxRate, o.MinRate)
	}
	if err := o.Background.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Result is one measured window.
type Result struct {
	Mode, Scenario string
	Start, End     time.Duration // offsets from the run's start
	Reads, Errors  int
	P50, P99, P999 time.Duration
	// Ref* are the reference node's reads in the same window (at the same
	// moments; zero without a reference).
	RefReads                int
	RefP50, RefP99, RefP999 time.Duration
	// Idle is the idle window before it (nil for idle windows).
	Idle *Result `json:"-"`
	// IngestBytes, IngestTime and MBps: for a snapshot or the floor, its
	// bytes and apply time; for deltas, bytes delivered over the stream.
	IngestBytes int64
	IngestTime  time.Duration
	MBps        float64
	// SnapshotVisible: from handing the snapshot to the node to a read
	// finding its data.
	SnapshotVisible time.Duration
	// Delta batches applied, updates, and visibility percentiles (from
	// handing a batch to the node to a read finding its marker). Offered
	// is the stream's rate (batch size × partitions / interval),
	// UpdatesPerSec the updates over the time until the last one was
	// visible; a node
	// that falls behind shows it in the visibility, which then grows.
	DeltaBatches, Updates              int
	OfferedPerSec, UpdatesPerSec       float64
	VisibleP50, VisibleP99, VisibleMax time.Duration
	// DownloadMean and DeltaApplyMean are the node's mean download
	// (verify, pacing waits included) and delta apply (IngestExternalFile
	// and state write) times per batch in the window, from its metrics.
	DownloadMean, DeltaApplyMean time.Duration
	// From the node's pacer and RocksDB over the window.
	ThrottleWaits               int64
	ThrottleWaited              time.Duration
	MinAdaptiveRate             int64 // lowest adaptive rate seen; 0 = never throttled
	MaxPendingCompaction, MaxL0 uint64
	Target                      time.Duration // the paced mode's target
	// CPU in cores over the window (cpu.go): the bench process (the node,
	// its RocksDB threads and the delta producer), its RocksDB background
	// threads alone, the whole machine (non-idle time of all CPUs) and the
	// machine's kernel threads (writeback, journal).
	CPU, RocksCPU, MachineCPU, KernelCPU float64
	// Pressure stalls over the window (/proc/pressure, fraction of the
	// window): some task waiting for a CPU, some / every task waiting
	// for I/O.
	CPUSome, IOSome, IOFull float64
	// CacheHitRatio is the node's block cache hits ÷ lookups in the window
	// (all block kinds; 0 with no lookup); DataHitRatio that of data blocks.
	CacheHitRatio, DataHitRatio float64
	// Warmed is what the node's warmer read into the block cache in the
	// window (delta files before ingest, compaction outputs before install).
	Warmed rocks.WarmStats
	// SchedP99 is the p99 of the time this process's goroutines (the
	// node's read handlers, its ingest, the delta producer) waited
	// runnable for a P in the window (Go's /sched/latencies:seconds).
	SchedP99 time.Duration
	// GCCycles, GCCores and GCMaxPause are this process's Go collector in
	// the window: cycles, cores busy with it (mark workers, assists,
	// pauses), and its longest stop-the-world pause.
	GCCycles   uint64
	GCCores    float64
	GCMaxPause time.Duration
	// DBMutexWait is the time the node's threads waited for its databases'
	// DB mutexes in the window (Background.TimeDBMutex; zero without).
	DBMutexWait  time.Duration
	lat          []time.Duration
	deltaVisible []time.Duration
	nodeP99      time.Duration // median of the node's own window p99s
}

// Report is the outcome of Run.
type Report struct {
	Options Options
	Started time.Time
	Elapsed time.Duration
	LoadAvg [2]string // uptime before and after
	// Reference: the run read a same-moment reference node.
	Reference bool
	Results   []*Result
	Checks    []Check
	Notes     []string
	Timeline  []Sample `json:"-"`
	// RefTimeline is the reference node's reads (empty without one).
	RefTimeline []Sample `json:"-"`
	Spans       []Span   `json:"-"`
	// PacerTrace is the node's pacer every 50 ms (pacer.csv).
	PacerTrace []PacerSample `json:"-"`
}

// Check is one target of the issue, evaluated.
type Check struct {
	Target, Value string
	Pass          bool
}

// Sample is one read on the timeline.
type Sample struct {
	At, Latency time.Duration
	Failed      bool
}

// PacerSample is the node's pacer at one moment (every 50 ms): its
// adaptive snapshot rate (bytes/s, 0 = unlimited), the p99 of its last
// control window, its target and the ambient p99 it judges by (0 = none).
type PacerSample struct {
	At                       time.Duration
	AdaptiveRate             int64
	ReadP99, Target, Ambient time.Duration
}

// Span marks an ingest on the timeline.
type Span struct {
	Label      string
	Start, End time.Duration
}

// Result returns the named result, or nil.
func (r *Report) Result(mode, scenario string) *Result {
	for _, x := range r.Results {
		if x.Mode == mode && x.Scenario == scenario {
			return x
		}
	}
	return nil
}

// bench is one run's state.
type bench struct {
	o       Options
	log     *slog.Logger
	c       *testcluster.Cluster
	node    *cobbled.Node
	cli     servepb.ServeClient
	reg     *prometheus.Registry // the node's metrics
	batches [][][]byte
	start   time.Time

	snap       *batch.Manifest
	snapProbe  []byte // a key only the fresh snapshot has
	deltaPools [][]deltaBatch
	perBatch   int // updates per delta batch

	ref *reference // nil without one

	loadReady     chan struct{} // closed at the first read recorded (or when the load ends)
	loadReadyOnce sync.Once

	mu          sync.Mutex
	timeline    []Sample
	refTimeline []Sample
	windows     int
	seq         map[int]int64 // next seq per partition
	readErr     error

	pacerMin atomic.Int64 // lowest adaptive rate seen while sampling
	// pacerTrace is the pacer's state every 50 ms (pollPacer; guarded by mu).
	pacerTrace []PacerSample
}

type deltaBatch struct {
	m       batch.Manifest
	marker  []byte
	updates int
}

// Run builds the data, starts the node and the read load, and measures.
func Run(ctx context.Context, opts Options) (*Report, error) {
	opts.ensureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	rep := &Report{Options: opts, Started: time.Now()}
	rep.LoadAvg[0] = loadAvg()
	dir := opts.Dir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "pillar-ingestbench-")
		if err != nil {
			return nil, fmt.Errorf("ingestbench: %w", err)
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	b := &bench{o: opts, log: opts.Logger, seq: map[int]int64{}, loadReady: make(chan struct{})}
	log := b.log
	log.Info("ingestbench: loading the node", "partitions", opts.Partitions, "keys", opts.Keys, "dir", dir)
	c, err := testcluster.Start(ctx, testcluster.Options{Dir: filepath.Join(dir, "cluster"), Nodes: 1, Replicas: 1, Partitions: opts.Partitions,
		Keys: opts.Keys, MinValue: opts.MinValue, MaxValue: opts.MaxValue, CacheBytes: opts.CacheBytes, Logger: log,
		Node: func(no *cobbled.Options) {
			no.Background, no.Pace.MinRate, no.Pace.AmbientMaxRate = opts.Background, opts.MinRate, opts.AmbientMaxRate
			no.IngestConcurrency, no.SnapshotConcurrency = opts.IngestConcurrency, 1
		}})
	if err != nil {
		return nil, fmt.Errorf("ingestbench: %w", err)
	}
	defer c.Close()
	b.c, b.node = c, c.Members()[0].Node()
	b.reg = prometheus.NewRegistry()
	for _, col := range c.Members()[0].Metrics.Collectors() {
		if err := b.reg.Register(col); err != nil {
			return nil, fmt.Errorf("ingestbench: metrics: %w", err)
		}
	}
	for p := range opts.Partitions {
		b.seq[p] = 2 // the cluster applied seq 1
	}
	b.batches = c.Batches(opts.BatchKeys)
	conn, err := grpc.NewClient(c.Members()[0].Addr, append(servepb.DialOptions(0), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		return nil, fmt.Errorf("ingestbench: %w", err)
	}
	defer conn.Close()
	b.cli = servepb.NewServeClient(conn)
	if len(opts.Reference) > 0 {
		log.Info("ingestbench: starting the reference node", "argv", opts.Reference)
		ref, err := startReference(ctx, opts.Reference, referenceConfig{Dir: referenceDir(dir), Partitions: opts.Partitions,
			Keys: opts.Keys, MinValue: opts.MinValue, MaxValue: opts.MaxValue, CacheBytes: opts.CacheBytes})
		if err != nil {
			return nil, err
		}
		defer ref.close()
		b.ref = ref
		rep.Reference = true
	}

	if err := b.buildSnapshot(ctx, filepath.Join(dir, "build")); err != nil {
		return nil, err
	}
	if err := b.buildDeltas(ctx, filepath.Join(dir, "build")); err != nil {
		return nil, err
	}
	if err := b.prewarm(ctx); err != nil {
		return nil, err
	}

	// The steady read load runs for the whole measurement.
	b.start = time.Now()
	if b.ref != nil {
		if err := b.ref.startReader(ctx, opts.Reference, readerConfig{Addrs: []string{c.Members()[0].Addr, b.ref.addr}, Keys: opts.Keys,
			BatchKeys: opts.BatchKeys, MinValue: opts.MinValue, MaxValue: opts.MaxValue, ReadRate: opts.ReadRate, Deadline: opts.Deadline,
			Start: b.start.UnixNano()}); err != nil {
			return nil, err
		}
	}
	lctx, stopLoad := context.WithCancel(ctx)
	var loadWG sync.WaitGroup
	loadWG.Add(1)
	go func() { defer loadWG.Done(); defer b.markLoadReady(); b.readLoad(lctx) }()
	// The measurement starts once reads arrive (a reader process takes a
	// moment to start).
	select {
	case <-b.loadReady:
	case <-ctx.Done():
	}
	pctx, stopPoll := context.WithCancel(ctx)
	go b.pollPacer(pctx)
	err = b.measure(ctx, rep, dir)
	stopPoll()
	stopLoad()
	loadWG.Wait()
	rep.Elapsed = time.Since(rep.Started)
	rep.LoadAvg[1] = loadAvg()
	b.mu.Lock()
	rep.Timeline = b.timeline
	rep.RefTimeline = b.refTimeline
	rep.PacerTrace = b.pacerTrace
	readErr := b.readErr
	b.mu.Unlock()
	if err != nil {
		return rep, err
	}
	if readErr != nil {
		rep.Notes = append(rep.Notes, fmt.Sprintf("first failed read: %v", readErr))
	}
	rep.evaluate()
	if opts.Out != "" {
		if err := rep.Write(opts.Out); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

func (b *bench) measure(ctx context.Context, rep *Report, dir string) error {
	for _, mode := range b.o.Modes {
		pacer := b.node.Pacer()
		pacer.SetTarget(0)
		pacer.SetRate(0)
		idle, err := b.window(ctx, mode, Idle, b.o.Phase, nil)
		if err != nil {
			return err
		}
		rep.Results = append(rep.Results, idle)
		var target time.Duration
		if mode == Paced {
			target = b.o.Target
			if target == 0 {
				target = time.Duration(b.o.TargetRatio * float64(idle.nodeP99))
			}
			pacer.SetTarget(target)
			b.log.Info("ingestbench: paced mode", "target_p99", target, "node_idle_p99", idle.nodeP99)
		}
		// The floor runs before and after the unpaced snapshot, so that
		// their mean sees the shared machine as the snapshot did.
		scen := []string{Snapshot, Deltas, Both}
		if mode == Unpaced {
			scen = []string{Floor, Snapshot, Floor, Deltas, Both}
		}
		for _, s := range scen {
			res, err := b.window(ctx, mode, s, 0, func(ctx context.Context, res *Result) error { return b.ingest(ctx, s, res, dir) })
			if err != nil {
				return fmt.Errorf("ingestbench: %s %s: %w", mode, s, err)
			}
			res.Target = target
			next, err := b.window(ctx, mode, Idle, b.o.Phase, nil)
			if err != nil {
				return err
			}
			// Idle reference: the idle windows right before and after.
			res.Idle = mergeIdle(idle, next)
			rep.Results = append(rep.Results, res, next)
			rep.Spans = append(rep.Spans, Span{Label: mode + " " + s, Start: res.Start, End: res.End})
			b.log.Info("ingestbench: window done", "mode", mode, "scenario", s, "p50", res.P50, "p99", res.P99, "p999", res.P999,
				"idle_p99", res.Idle.P99, "mbps", fmt.Sprintf("%.1f", res.MBps), "visible_p99", res.VisibleP99, "throttle_waits", res.ThrottleWaits)
			idle = next
		}
	}
	return nil
}

// mergeIdle pools two idle windows' reads.
func mergeIdle(a, b *Result) *Result {
	m := &Result{Mode: a.Mode, Scenario: Idle, Start: a.Start, End: b.End, Reads: a.Reads + b.Reads, Errors: a.Errors + b.Errors}
	m.lat = append(slices.Clone(a.lat), b.lat...)
	slices.Sort(m.lat)
	m.P50, m.P99, m.P999 = pct(m.lat, 0.5), pct(m.lat, 0.99), pct(m.lat, 0.999)
	return m
}

// window measures reads for d (idle), or while work runs plus Settle.
func (b *bench) window(ctx context.Context, mode, scenario string, d time.Duration, work func(context.Context, *Result) error) (*Result, error) {
	res := &Result{Mode: mode, Scenario: scenario, Start: time.Since(b.start)}
	before := b.node.Pacer().Stats()
	hBefore := b.histograms()
	b.pacerMin.Store(0)
	cpu0, cache0, cs0, sched0, gc0 := sampleCPU(), b.node.Stats(), b.node.CacheStats(), sampleSched(), sampleGC()
	var nodeP99s []time.Duration
	stopProfile, err := b.profile(mode, scenario)
	if err != nil {
		return nil, err
	}
	defer stopProfile()
	stopSample := b.sampleNode(ctx, res, &nodeP99s)
	if work == nil {
		select {
		case <-ctx.Done():
			stopSample()
			return nil, ctx.Err()
		case <-time.After(d):
		}
	} else {
		if err := work(ctx, res); err != nil {
			stopSample()
			return nil, err
		}
		select {
		case <-ctx.Done():
			stopSample()
			return nil, ctx.Err()
		case <-time.After(b.o.Settle):
		}
	}
	stopSample()
	res.End = time.Since(b.start)
	cpu1, cache1, cs1, sched1, gc1 := sampleCPU(), b.node.Stats(), b.node.CacheStats(), sampleSched(), sampleGC()
	res.SchedP99 = schedQuantile(sched0, sched1, 0.99)
	res.GCCycles, res.GCCores, res.GCMaxPause = gcWindow(gc0, gc1, cpu1.at.Sub(cpu0.at))
	res.DBMutexWait = time.Duration(cs1.DBMutexWaitMicros-cs0.DBMutexWaitMicros) * time.Microsecond
	if hits, lookups := cs1.DataHits-cs0.DataHits, cs1.DataHits+cs1.DataMisses-cs0.DataHits-cs0.DataMisses; lookups > 0 {
		res.DataHitRatio = float64(hits) / float64(lookups)
	}
	w0, w1 := cs0.Warm, cs1.Warm
	res.Warmed = rocks.WarmStats{Files: w1.Files - w0.Files, Bytes: w1.Bytes - w0.Bytes, Failed: w1.Failed - w0.Failed,
		CompactionFiles: w1.CompactionFiles - w0.CompactionFiles, CompactionBytes: w1.CompactionBytes - w0.CompactionBytes,
		CompactionSkipped: w1.CompactionSkipped - w0.CompactionSkipped, CompactionFailed: w1.CompactionFailed - w0.CompactionFailed}
	res.CPU = cores(cpu0, cpu1, func(s cpuSample) time.Duration { return s.proc })
	res.RocksCPU = cores(cpu0, cpu1, func(s cpuSample) time.Duration { return s.rocks })
	res.MachineCPU = cores(cpu0, cpu1, func(s cpuSample) time.Duration { return s.busy })
	res.KernelCPU = cores(cpu0, cpu1, func(s cpuSample) time.Duration { return s.kernel })
	res.CPUSome = cores(cpu0, cpu1, func(s cpuSample) time.Duration { return s.cpuSome })
	res.IOSome = cores(cpu0, cpu1, func(s cpuSample) time.Duration { return s.ioSome })
	res.IOFull = cores(cpu0, cpu1, func(s cpuSample) time.Duration { return s.ioFull })
	if hits, lookups := cache1.CacheHits-cache0.CacheHits, cache1.CacheHits+cache1.CacheMisses-cache0.CacheHits-cache0.CacheMisses; lookups > 0 {
		res.CacheHitRatio = float64(hits) / float64(lookups)
	}
	after := b.node.Pacer().Stats()
	for c := range after.Class {
		res.ThrottleWaits += after.Class[c].Waits - before.Class[c].Waits
		res.ThrottleWaited += after.Class[c].Waited - before.Class[c].Waited
	}
	res.MinAdaptiveRate = b.pacerMin.Load()
	hAfter := b.histograms()
	res.DownloadMean = hAfter.download.meanSince(hBefore.download)
	res.DeltaApplyMean = hAfter.deltaApply.meanSince(hBefore.deltaApply)
	b.mu.Lock()
	for _, s := range b.timeline {
		if s.At >= res.Start && s.At < res.End {
			res.lat = append(res.lat, s.Latency)
			res.Reads++
			if s.Failed {
				res.Errors++
			}
		}
	}
	var ref []time.Duration
	for _, s := range b.refTimeline {
		if s.At >= res.Start && s.At < res.End {
			ref = append(ref, s.Latency)
		}
	}
	b.mu.Unlock()
	slices.Sort(res.lat)
	res.P50, res.P99, res.P999 = pct(res.lat, 0.5), pct(res.lat, 0.99), pct(res.lat, 0.999)
	slices.Sort(ref)
	res.RefReads = len(ref)
	res.RefP50, res.RefP99, res.RefP999 = pct(ref, 0.5), pct(ref, 0.99), pct(ref, 0.999)
	if len(nodeP99s) > 0 {
		slices.Sort(nodeP99s)
		res.nodeP99 = nodeP99s[len(nodeP99s)/2]
	}
	return res, nil
}

// profile starts a CPU profile of the window when Options.ProfileDir is
// set; the returned function stops it.
func (b *bench) profile(mode, scenario string) (func(), error) {
	if b.o.ProfileDir == "" {
		return func() {}, nil
	}
	b.mu.Lock()
	b.windows++
	n := b.windows
	b.mu.Unlock()
	if err := os.MkdirAll(b.o.ProfileDir, 0o755); err != nil {
		return nil, fmt.Errorf("ingestbench: profile: %w", err)
	}
	f, err := os.Create(filepath.Join(b.o.ProfileDir, fmt.Sprintf("cpu-%02d-%s-%s.pprof", n, mode, scenario)))
	if err != nil {
		return nil, fmt.Errorf("ingestbench: profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("ingestbench: profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// sampleNode records, every 250 ms, the node's compaction backlog and its
// pacer's window p99 into res until the returned stop is called.
func (b *bench) sampleNode(ctx context.Context, res *Result, p99s *[]time.Duration) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		var last time.Duration
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			cs := b.node.CompactionStats()
			res.MaxPendingCompaction = max(res.MaxPendingCompaction, cs.PendingBytes)
			res.MaxL0 = max(res.MaxL0, cs.L0Files)
			if s := b.node.Pacer().Stats(); s.ReadP99 != last && s.ReadSamples > 0 {
				last = s.ReadP99
				*p99s = append(*p99s, s.ReadP99)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// hist is a histogram's sample count and sum (seconds).
type hist struct {
	count uint64
	sum   float64
}

func (h hist) meanSince(before hist) time.Duration {
	if h.count <= before.count {
		return 0
	}
	return time.Duration((h.sum - before.sum) / float64(h.count-before.count) * 1e9)
}

type nodeHists struct{ download, deltaApply hist }

// histograms reads the node's download and delta-apply histograms.
func (b *bench) histograms() nodeHists {
	var out nodeHists
	fams, err := b.reg.Gather()
	if err != nil {
		return out
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			h := m.GetHistogram()
			if h == nil {
				continue
			}
			v := hist{h.GetSampleCount(), h.GetSampleSum()}
			switch f.GetName() {
			case "cobbled_ingest_download_duration_seconds":
				out.download = v
			case "cobbled_ingest_apply_duration_seconds":
				for _, l := range m.GetLabel() {
					if l.GetName() == "kind" && l.GetValue() == batch.KindDelta {
						out.deltaApply = v
					}
				}
			}
		}
	}
	return out
}

// pollPacer tracks the lowest adaptive rate (Result.MinAdaptiveRate) and
// records the pacer's state every 50 ms (Report.PacerTrace).
func (b *bench) pollPacer(ctx context.Context) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st := b.node.Pacer().Stats()
		b.mu.Lock()
		b.pacerTrace = append(b.pacerTrace, PacerSample{At: time.Since(b.start), AdaptiveRate: st.AdaptiveRate, ReadP99: st.ReadP99,
			Target: st.Target, Ambient: st.Ambient})
		b.mu.Unlock()
		if r := st.AdaptiveRate; r > 0 {
			if cur := b.pacerMin.Load(); cur == 0 || r < cur {
				b.pacerMin.Store(r)
			}
		}
	}
}

func (b *bench) ingest(ctx context.Context, scenario string, res *Result, dir string) error {
	switch scenario {
	case Floor:
		return b.floor(ctx, res, filepath.Join(dir, "floor"))
	case Snapshot:
		return b.applySnapshot(ctx, res)
	case Deltas:
		return b.streamDeltas(ctx, res, b.o.Phase, nil)
	case Both:
		var snapErr error
		snapDone := make(chan struct{})
		go func() { defer close(snapDone); snapErr = b.applySnapshot(ctx, res) }()
		err := b.streamDeltas(ctx, res, b.o.Phase, snapDone)
		<-snapDone
		return errors.Join(snapErr, err)
	}
	return fmt.Errorf("unknown scenario %q", scenario)
}

func (b *bench) nextSeq(p int) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.seq[p]
	b.seq[p] = s + 1
	return s
}

func (b *bench) applySnapshot(ctx context.Context, res *Result) error {
	t0 := time.Now()
	if err := b.node.Apply(ctx, cobbled.Batch{Seq: b.nextSeq(b.o.SnapshotPartition), Manifest: *b.snap}); err != nil {
		return err
	}
	took := time.Since(t0)
	if err := b.waitVisible(ctx, b.snapProbe); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	res.SnapshotVisible = time.Since(t0)
	res.IngestBytes += manifestBytes(b.snap)
	res.IngestTime = took
	res.MBps = float64(manifestBytes(b.snap)) / 1e6 / took.Seconds()
	return nil
}

// streamDeltas hands each delta partition a batch every DeltaInterval for
// d, or until until is closed if that is later.
func (b *bench) streamDeltas(ctx context.Context, res *Result, d time.Duration, until <-chan struct{}) error {
	start := time.Now()
	var wg, checks sync.WaitGroup
	errs := make([]error, b.o.DeltaPartitions)
	var mu sync.Mutex
	var bytes int64
	for i := range b.o.DeltaPartitions {
		p := 1 + i
		pool := b.deltaPools[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Batch k is due at start + k×interval (staggered by partition);
			// if the previous one is still applying, it is late, and the
			// lateness counts in its visibility. A batch of the pool used
			// again (a stream longer than Phase, or the second mode) finds
			// its marker there already: its read only confirms that Apply,
			// which is synchronous, has returned.
			for k := 0; ; k++ {
				due := start.Add(time.Duration(k)*b.o.DeltaInterval + time.Duration(i)*b.o.DeltaInterval/time.Duration(b.o.DeltaPartitions))
				if due.Sub(start) >= d && !open(until) {
					return
				}
				if w := time.Until(due); w > 0 {
					select {
					case <-ctx.Done():
						mu.Lock()
						errs[i] = errors.Join(errs[i], ctx.Err())
						mu.Unlock()
						return
					case <-time.After(w):
					}
				}
				db := pool[k%len(pool)]
				if err := b.node.Apply(ctx, cobbled.Batch{Seq: b.nextSeq(p), Manifest: db.m}); err != nil {
					mu.Lock()
					errs[i] = errors.Join(errs[i], fmt.Errorf("delta partition %d: %w", p, err))
					mu.Unlock()
					return
				}
				// The reader that confirms the batch runs beside the
				// stream: a producer does not wait for readers, so the
				// confirming read's own latency must not delay the next
				// batch (it did before, and its queueing counted as lag).
				checks.Add(1)
				go func() {
					defer checks.Done()
					if err := b.waitVisible(ctx, db.marker); err != nil {
						mu.Lock()
						errs[i] = errors.Join(errs[i], fmt.Errorf("delta partition %d: %w", p, err))
						mu.Unlock()
						return
					}
					vis := time.Since(due)
					mu.Lock()
					res.deltaVisible = append(res.deltaVisible, vis)
					res.DeltaBatches++
					res.Updates += db.updates
					bytes += manifestBytes(&db.m)
					mu.Unlock()
				}()
			}
		}()
	}
	wg.Wait()
	checks.Wait()
	elapsed := time.Since(start)
	res.IngestBytes += bytes
	if res.IngestTime == 0 { // not also a snapshot (c)
		res.IngestTime = elapsed
		res.MBps = float64(bytes) / 1e6 / elapsed.Seconds()
	}
	res.UpdatesPerSec = float64(res.Updates) / elapsed.Seconds()
	res.OfferedPerSec = float64(b.perBatch*b.o.DeltaPartitions) / b.o.DeltaInterval.Seconds()
	slices.Sort(res.deltaVisible)
	res.VisibleP50, res.VisibleP99 = pct(res.deltaVisible, 0.5), pct(res.deltaVisible, 0.99)
	if n := len(res.deltaVisible); n > 0 {
		res.VisibleMax = res.deltaVisible[n-1]
	}
	return errors.Join(errs...)
}

// open reports whether ch is non-nil and not closed.
func open(ch <-chan struct{}) bool {
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return false
	default:
		return true
	}
}

// waitVisible reads key over gRPC until it is found (a freshly applied
// batch is readable at once; the loop is for safety, bounded at 10 s).
func (b *bench) waitVisible(ctx context.Context, key []byte) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		rctx, cancel := context.WithTimeout(ctx, b.o.Deadline)
		resp, err := b.cli.BatchGet(rctx, &servepb.BatchGetRequest{Keys: [][]byte{key}})
		cancel()
		if err == nil && len(resp.Results) == 1 && resp.Results[0].Found {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("key %x not visible after apply: %v", key, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// floor copies the snapshot's files from the object store into a fresh
// database with IngestExternalFile (RocksDB's own copy), one call per file.
func (b *bench) floor(ctx context.Context, res *Result, dir string) error {
	os.RemoveAll(dir)
	defer os.RemoveAll(dir)
	opts, err := rocks.TableConfig{}.Options(nil)
	if err != nil {
		return err
	}
	defer opts.Destroy()
	opts.SetCreateIfMissing(true)
	db, err := grocksdb.OpenDb(opts, dir)
	if err != nil {
		return err
	}
	defer db.Close()
	ing := grocksdb.NewDefaultIngestExternalFileOptions()
	defer ing.Destroy()
	root := b.c.ObjectsDir()
	t0 := time.Now()
	for _, f := range b.snap.Files {
		path := filepath.Join(root, filepath.FromSlash(batch.Prefix(b.snap.Partition, b.snap.ID)+f.Name))
		if err := db.IngestExternalFile([]string{path}, ing); err != nil {
			return fmt.Errorf("floor: %s: %w", path, err)
		}
	}
	res.IngestTime = time.Since(t0)
	res.IngestBytes = manifestBytes(b.snap)
	res.MBps = float64(res.IngestBytes) / 1e6 / res.IngestTime.Seconds()
	return ctx.Err()
}

// readLoad runs the steady read load until ctx ends: in this process
// against the node alone, or, with a reference, in a reader process of
// its own against both nodes (reference.go), whose samples it collects.
func (b *bench) readLoad(ctx context.Context) {
	if b.ref == nil {
		runLoad(ctx, []servepb.ServeClient{b.cli}, b.batches, b.o.ReadRate, b.o.Deadline, b.o.MinValue, b.o.MaxValue, b.start,
			func(_ int, at, lat time.Duration, err error) { b.record(&b.timeline, at, lat, err) })
		return
	}
	err := b.ref.readFrom(ctx, func(i int, at, lat time.Duration, err error) {
		tl := &b.timeline
		if i == 1 {
			tl = &b.refTimeline
		}
		b.record(tl, at, lat, err)
	})
	if err != nil && ctx.Err() == nil {
		b.mu.Lock()
		if b.readErr == nil {
			b.readErr = err
		}
		b.mu.Unlock()
	}
}

func (b *bench) markLoadReady() { b.loadReadyOnce.Do(func() { close(b.loadReady) }) }

func (b *bench) record(tl *[]Sample, at, lat time.Duration, err error) {
	defer b.markLoadReady()
	b.mu.Lock()
	*tl = append(*tl, Sample{At: at, Latency: lat, Failed: err != nil})
	if err != nil && b.readErr == nil {
		b.readErr = err
	}
	b.mu.Unlock()
}

// runLoad sends rate batches per second (open loop: each at its scheduled
// time, whatever the previous ones do, at most 64 in flight), each to
// every client in turn, the order rotating from one batch to the next;
// rec gets client index, start (since t0), latency and the verification
// error of every read.
func runLoad(ctx context.Context, clis []servepb.ServeClient, batches [][][]byte, rate int, deadline time.Duration, lo, hi int, t0 time.Time,
	rec func(i int, at, lat time.Duration, err error)) {
	interval := time.Second / time.Duration(rate)
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	defer wg.Wait()
	rng := rand.New(rand.NewPCG(7, uint64(t0.UnixNano())))
	next := time.Now()
	for k := 0; ctx.Err() == nil; k++ {
		next = next.Add(interval)
		if w := time.Until(next); w > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(w):
			}
		}
		keys := batches[rng.IntN(len(batches))]
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			for j := range clis {
				i := (k + j) % len(clis)
				rctx, cancel := context.WithTimeout(context.Background(), deadline)
				start := time.Now()
				// Pooled: the reader checks each answer and drops it, so
				// its receive buffer goes back to the pool instead of being
				// ~600 KB of garbage per request (GC pauses in the reader
				// delay both nodes' reads alike, which is noise).
				resp, err := clis[i].BatchGet(rctx, &servepb.BatchGetRequest{Keys: keys}, servepb.PooledCallOption())
				lat := time.Since(start)
				cancel()
				if err == nil {
					err = verifyResp(keys, resp, lo, hi)
					servepb.Release(resp)
				}
				rec(i, start.Sub(t0), lat, err)
			}
		}()
	}
}

func (b *bench) verify(keys [][]byte, resp *servepb.BatchGetResponse) error {
	return verifyResp(keys, resp, b.o.MinValue, b.o.MaxValue)
}

// verifyResp checks that every key was found with its value's length.
func verifyResp(keys [][]byte, resp *servepb.BatchGetResponse, lo, hi int) error {
	if len(resp.Results) != len(keys) {
		return fmt.Errorf("%d results for %d keys", len(resp.Results), len(keys))
	}
	for i, r := range resp.Results {
		if !r.Found {
			return fmt.Errorf("key %x not found (%s %s)", keys[i], r.Status, r.Error)
		}
		if want := testcluster.ValueLen(keys[i], lo, hi); len(r.Value) != want {
			return fmt.Errorf("key %x: %d bytes, want %d", keys[i], len(r.Value), want)
		}
	}
	return nil
}

// prewarm reads every batch once, so the first idle window is warm.
func (b *bench) prewarm(ctx context.Context) error {
	clis := []servepb.ServeClient{b.cli}
	if b.ref != nil {
		clis = append(clis, b.ref.cli)
	}
	for _, cli := range clis {
		for _, keys := range b.batches {
			resp, err := cli.BatchGet(ctx, &servepb.BatchGetRequest{Keys: keys})
			if err == nil {
				err = b.verify(keys, resp)
			}
			if err != nil {
				return fmt.Errorf("ingestbench: prewarm: %w", err)
			}
		}
	}
	return nil
}

// keysOf returns n keys of partition p from the key space seed, in order.
func keysOf(seed uint64, p, parts, n int) [][]byte {
	var out [][]byte
	for i := 0; len(out) < n; i++ {
		if k := testcluster.KeyOf(seed, i); pillar.Partition(k, parts) == p {
			out = append(out, k)
		}
	}
	return out
}

// readKeysOf returns the read set's keys of partition p.
func (b *bench) readKeysOf(p int) [][]byte {
	var out [][]byte
	for _, k := range b.c.Keys() {
		if pillar.Partition(k, b.o.Partitions) == p {
			out = append(out, k)
		}
	}
	return out
}

// buildSnapshot writes the fresh snapshot: the partition's read keys (same
// values) and new keys up to SnapshotBytes, built by the SST builder and
// uploaded to the node's object store.
func (b *bench) buildSnapshot(ctx context.Context, dir string) error {
	p := b.o.SnapshotPartition
	mean := int64(b.o.MinValue+b.o.MaxValue) / 2
	extra := keysOf(1001, p, b.o.Partitions, int(b.o.SnapshotBytes/mean)+1)
	keys := append(b.readKeysOf(p), extra...)
	slices.SortFunc(keys, bytes.Compare)
	b.snapProbe = extra[0]
	bar := progress.New(b.o.SnapshotBytes, "building the snapshot", &progress.Options{Bytes: true, Logger: b.log, Quiet: b.o.Quiet})
	defer bar.Done()
	rows := &valueRows{keys: keys, lo: b.o.MinValue, hi: b.o.MaxValue, bar: bar}
	m, err := b.build(ctx, dir, p, "ingestbench-snapshot", batch.KindSnapshot, rows)
	if err != nil {
		return err
	}
	b.snap = m
	b.log.Info("ingestbench: snapshot built", "partition", p, "keys", m.Keys, "bytes", manifestBytes(m), "files", len(m.Files))
	return nil
}

// buildDeltas writes a pool of Phase/DeltaInterval batches per delta
// partition, each overwriting UpdatesPerSec×DeltaInterval/DeltaPartitions
// read keys (same values) plus one new marker key.
func (b *bench) buildDeltas(ctx context.Context, dir string) error {
	n := max(1, int(b.o.Phase/b.o.DeltaInterval))
	per := max(1, int(math.Ceil(float64(b.o.UpdatesPerSec)*b.o.DeltaInterval.Seconds()/float64(b.o.DeltaPartitions))))
	b.perBatch = per
	bar := progress.New(int64(n*b.o.DeltaPartitions), "building delta batches", &progress.Options{Logger: b.log, Quiet: b.o.Quiet})
	defer bar.Done()
	for i := range b.o.DeltaPartitions {
		p := 1 + i
		read := b.readKeysOf(p)
		markers := keysOf(2002, p, b.o.Partitions, n)
		rng := rand.New(rand.NewPCG(uint64(p), 3))
		var pool []deltaBatch
		for j := range n {
			picked := map[string]bool{}
			keys := [][]byte{markers[j]}
			for len(keys) < per && len(picked) < len(read) {
				k := read[rng.IntN(len(read))]
				if !picked[string(k)] {
					picked[string(k)] = true
					keys = append(keys, k)
				}
			}
			slices.SortFunc(keys, bytes.Compare)
			m, err := b.build(ctx, dir, p, fmt.Sprintf("ingestbench-delta-p%d-%04d", p, j), batch.KindDelta,
				&valueRows{keys: keys, lo: b.o.MinValue, hi: b.o.MaxValue})
			if err != nil {
				return err
			}
			pool = append(pool, deltaBatch{m: *m, marker: markers[j], updates: len(keys)})
			bar.Add(1)
		}
		b.deltaPools = append(b.deltaPools, pool)
	}
	b.log.Info("ingestbench: delta batches built", "partitions", b.o.DeltaPartitions, "per_partition", n, "updates_per_batch", per)
	return nil
}

func (b *bench) build(ctx context.Context, dir string, p int, id, kind string, rows sstbuilder.Rows) (*batch.Manifest, error) {
	bdir := filepath.Join(dir, id)
	defer os.RemoveAll(bdir)
	m, paths, err := sstbuilder.BuildPartition(ctx, rows, &sstbuilder.BuildOptions{Dir: bdir, Partition: p, Partitions: b.o.Partitions,
		Kind: kind, BatchID: id, Source: "ingestbench synthetic"})
	if err != nil {
		return nil, fmt.Errorf("ingestbench: build %s: %w", id, err)
	}
	st, err := objstore.OpenLocal(b.c.ObjectsDir())
	if err != nil {
		return nil, err
	}
	up, err := sstbuilder.Upload(ctx, st, m, paths)
	if err != nil {
		return nil, fmt.Errorf("ingestbench: upload %s: %w", id, err)
	}
	return up, nil
}

// valueRows yields sorted keys with the data set's values.
type valueRows struct {
	keys   [][]byte
	lo, hi int
	i      int
	cur    sstbuilder.Row
	bar    *progress.Bar
}

func (r *valueRows) Next() bool {
	if r.i >= len(r.keys) {
		return false
	}
	k := r.keys[r.i]
	r.i++
	r.cur = sstbuilder.Row{Key: k, Value: testcluster.Value(k, r.lo, r.hi)}
	if r.bar != nil {
		r.bar.Add(int64(len(r.cur.Value)))
	}
	return true
}
func (r *valueRows) Row() sstbuilder.Row { return r.cur }
func (r *valueRows) Err() error          { return nil }

func manifestBytes(m *batch.Manifest) int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

func pct(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*q+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := bytes.Fields(b)
	if len(f) < 3 {
		return string(b)
	}
	return string(bytes.Join(f[:3], []byte(" ")))
}
