package cobbled

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/pillarkit/pillar/cobbled/wire"
	"github.com/pillarkit/pillar/internal/clock"
	"github.com/pillarkit/pillar/internal/pace"
	"github.com/pillarkit/pillar/internal/rocks"
	"github.com/pillarkit/pillar/internal/servelimit"
)

// Options configure a Node. The zero value of every field means its default.
type Options struct {
	// ID is this node's id in the control plane. Required when Control is set.
	ID string
	// Zone is the node's zone (failure domain), reported to the control plane.
	// The default value is "".
	Zone string
	// Addr is the address readers dial (host:port of the gRPC server), as
	// registered with the control plane. Required when Control is set.
	Addr string
	// Dir is the node's data directory: one subdirectory per partition
	// replica. Required.
	Dir string
	// Partitions is the deployment's partition count P. The default value is
	// 0: learn it from the control plane (Control.GetRouting) or from the
	// data directory. A node refuses a P that differs from the one recorded in
	// Dir or reported by the control plane.
	Partitions int

	// CacheBytes is the size of the LRU block cache shared by all partition
	// databases. The default value is 1 GiB.
	CacheBytes int64
	// DirectReads reads SST files with O_DIRECT, bypassing the OS page
	// cache, so the block cache is the only cache (memory accounting is
	// exact, and a "cold" benchmark is really cold). The default value is
	// false: block cache misses are usually served from the page cache.
	DirectReads bool
	// Table is the SST table layout; it must equal the SST builder's. The
	// default value is rocks.TableConfig{} (its defaults).
	Table rocks.TableConfig

	// Control is the control plane. The default value is nil: no ingest loop;
	// batches are applied only through Node.Apply (tests, benchmarks, tools).
	Control Control
	// Objects fetches batch files. Required when Control is set.
	Objects ObjectGetter

	// IngestConcurrency bounds how many partitions download and apply a batch
	// at the same time. The default value is 2.
	IngestConcurrency int
	// SnapshotConcurrency bounds how many of those are snapshots; below
	// IngestConcurrency it keeps a slot for deltas while large snapshots
	// download. The default value is IngestConcurrency (no separate bound:
	// a node bootstrapping many partitions loads them in parallel).
	SnapshotConcurrency int
	// SmallDeltaSlots are ingest slots beyond IngestConcurrency that only a
	// small delta (files of at most SmallDeltaBytes together) may take, so
	// a fresh delta of a few KB does not queue behind other partitions'
	// bulk deltas of several MB when those hold every ordinary slot (a small
	// delta takes an ordinary slot when one is free). The default value 0
	// is 1; a negative value reserves none.
	SmallDeltaSlots int
	// SmallDeltaBytes is the size up to which a delta is small
	// (SmallDeltaSlots). The default value is 1 MiB.
	SmallDeltaBytes int64
	// Pace paces batch downloads (pace.go, internal/pace): Pace.Rate caps
	// the node's ingest bytes per second (--ingest-rate), Pace.TargetP99
	// turns on the adaptive mode, which slows snapshot downloads while the
	// node's own BatchGet p99 exceeds it; Pace.Clock defaults to Clock. The
	// default value pace.Options{} is unlimited and not adaptive.
	Pace pace.Options
	// Background configures RocksDB compaction (rate limit, thread
	// priority; internal/rocks). The default value rocks.Background{}
	// lowers compaction threads' priority and does not limit their rate.
	Background rocks.Background
	// LongPoll is how long one ListBatches call waits for a new batch. The
	// default value is 20s.
	LongPoll time.Duration
	// ListLimit is how many batches one ListBatches call asks for. The default
	// value is 16.
	ListLimit int
	// DownloadAttempts is how many times a batch is downloaded and verified
	// before the failure is reported (logged, counted, shown in Stats); the
	// replica then keeps retrying the same batch every RetryBackoffMax and
	// never skips it. The default value is 3.
	DownloadAttempts int
	// RetryBackoff is the first delay between attempts; it doubles up to
	// RetryBackoffMax. The default values are 200ms and 10s (a replica
	// that fell behind during a partition is back within about 10 s of the
	// heal; a retry costs one control-plane call or one GET).
	RetryBackoff    time.Duration
	RetryBackoffMax time.Duration
	// Heartbeat is the interval of heartbeats and routing refreshes. The
	// default value is 2s.
	Heartbeat time.Duration
	// RetireGrace is how long a publication stays on disk after the node
	// first sees it retired in routing, so that routers still reading it
	// from an older table finish; then its databases are dropped (never a
	// live, previous or candidate publication's). The default value is 10
	// minutes (the zero value means it); a negative value is refused.
	RetireGrace time.Duration

	// MaxKeys is the largest BatchGet request, in keys. It also sizes the
	// gRPC receive limit (servelimit.RecvLimit: MaxKeys × (16-byte key + 2
	// bytes of framing) + 2 × 515 bytes for version and caller id + 4 KiB;
	// 23,558 bytes for 1024 keys), and a request's keys are counted, and
	// their lengths checked, before it is decoded. Keys are exactly
	// pillar.KeySize bytes, so no separate key length limit applies. The
	// default value is 1024.
	MaxKeys int
	// MaxInFlight is the most gRPC BatchGet requests the node answers at
	// once, all connections together, and the most streams one connection
	// may open (grpc.MaxConcurrentStreams). A request past it is answered
	// RESOURCE_EXHAUSTED before its message is read. The wire protocol has
	// limits of its own (package wire). The default value is 1024.
	MaxInFlight int
	// Wire bounds the lean wire protocol's side of the listener
	// (connections per listener, requests in flight per connection and
	// per server, buffered bytes, deadlines; see wire.ServerOptions). Its
	// MaxKeys and Logger are the node's. The zero value takes package
	// wire's defaults.
	Wire wire.ServerOptions
	// MaxResponseBytes bounds the encoded BatchGet response; a request whose
	// values would exceed it fails with RESOURCE_EXHAUSTED. The default value
	// is 64 MiB.
	MaxResponseBytes int
	// FaultDelay, when Fraction > 0, delays that fraction of BatchGet
	// requests by Delay (a test-only fault for hedging benchmarks). The
	// default value is no fault.
	FaultDelay FaultDelay

	// Clock is the time source of the read path's waits (FaultDelay), the
	// ingest, rebuild and discovery retry backoffs, and measurements. The default value is the wall clock (clock.Real); tests
	// pass a *clock.Fake.
	Clock clock.Clock

	// Logger receives ingest and lifecycle events. The default value discards.
	Logger *slog.Logger
	// Metrics receives the node's measurements. The default value is a fresh,
	// unregistered set (the binary registers Metrics.Collectors()).
	Metrics *Metrics
}

// FaultDelay delays a random Fraction of BatchGet requests by Delay.
type FaultDelay struct {
	Fraction float64
	Delay    time.Duration
}

func (o *Options) ensureDefaults() {
	if o.CacheBytes == 0 {
		o.CacheBytes = 1 << 30
	}
	if o.IngestConcurrency == 0 {
		o.IngestConcurrency = 2
	}
	if o.SnapshotConcurrency == 0 {
		o.SnapshotConcurrency = o.IngestConcurrency
	}
	if o.SmallDeltaSlots == 0 {
		o.SmallDeltaSlots = 1
	}
	if o.SmallDeltaBytes == 0 {
		o.SmallDeltaBytes = 1 << 20
	}
	if o.LongPoll == 0 {
		o.LongPoll = 20 * time.Second
	}
	if o.ListLimit == 0 {
		o.ListLimit = 16
	}
	if o.DownloadAttempts == 0 {
		o.DownloadAttempts = 3
	}
	if o.RetryBackoff == 0 {
		o.RetryBackoff = 200 * time.Millisecond
	}
	if o.RetryBackoffMax == 0 {
		o.RetryBackoffMax = 10 * time.Second
	}
	if o.Heartbeat == 0 {
		o.Heartbeat = 2 * time.Second
	}
	if o.RetireGrace == 0 {
		o.RetireGrace = 10 * time.Minute
	}
	if o.MaxKeys == 0 {
		o.MaxKeys = 1024
	}
	if o.MaxResponseBytes == 0 {
		o.MaxResponseBytes = 64 << 20
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = servelimit.DefaultMaxInFlight
	}
	o.Clock = clock.Or(o.Clock)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
}

// Validate checks the options, with defaults applied, against each other.
func (o Options) Validate() error {
	o.ensureDefaults()
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf("cobbled: options: "+format, a...)) }
	if o.Dir == "" {
		fail("Dir is required")
	}
	if o.Control != nil {
		if o.ID == "" || o.Addr == "" {
			fail("ID and Addr are required with a control plane")
		}
		if o.Objects == nil {
			fail("Objects is required with a control plane")
		}
	}
	if o.Partitions < 0 {
		fail("Partitions %d is negative", o.Partitions)
	}
	if o.CacheBytes < 1<<20 {
		fail("CacheBytes %d is under 1 MiB", o.CacheBytes)
	}
	if o.IngestConcurrency < 1 || o.ListLimit < 1 || o.DownloadAttempts < 1 {
		fail("IngestConcurrency, ListLimit and DownloadAttempts must be positive")
	}
	if o.RetryBackoff <= 0 || o.RetryBackoffMax < o.RetryBackoff {
		fail("RetryBackoff %v must be positive and at most RetryBackoffMax %v", o.RetryBackoff, o.RetryBackoffMax)
	}
	if o.MaxKeys < 1 || o.MaxResponseBytes < 1 || o.MaxInFlight < 1 {
		fail("MaxKeys, MaxResponseBytes and MaxInFlight must be positive")
	}
	if o.FaultDelay.Fraction < 0 || o.FaultDelay.Fraction > 1 || o.FaultDelay.Delay < 0 {
		fail("FaultDelay %+v: fraction must be in [0,1] and delay non-negative", o.FaultDelay)
	}
	if o.RetireGrace < 0 {
		fail("RetireGrace %v is negative", o.RetireGrace)
	}
	if o.SnapshotConcurrency < 1 {
		fail("SnapshotConcurrency %d must be positive", o.SnapshotConcurrency)
	}
	if o.SmallDeltaBytes < 0 {
		fail("SmallDeltaBytes %d is negative", o.SmallDeltaBytes)
	}
	if err := o.Pace.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("cobbled: options: %w", err))
	}
	if err := o.Background.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("cobbled: options: %w", err))
	}
	if err := o.Table.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("cobbled: options: %w", err))
	}
	return errors.Join(errs...)
}
