package lorry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"time"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/clock"
	"github.com/pillarkit/pillar/internal/objstore"
	"github.com/pillarkit/pillar/internal/rocks"
	"github.com/pillarkit/pillar/pillar"
)

// Registry is the part of the control plane Lorry needs: registration of an
// uploaded batch, idempotent by batch id (the same id with the same manifest
// returns the original sequence number; the same id with another manifest
// is an error wrapping control.ErrConflict). *control.Client satisfies it.
type Registry interface {
	RegisterBatch(ctx context.Context, m *batch.Manifest) (seq int64, err error)
}

// ReplicaSource reports replica progress: for each partition, its replicas'
// applied sequence numbers and the newest registered one. *control.Client
// satisfies it.
type ReplicaSource interface {
	GetRouting(ctx context.Context) (*control.Routing, error)
}

// Options configure a Worker. Store, Objects and Registry are required; every
// other field's zero value means its default.
type Options struct {
	// Store is the Pillar store whose export queue is delivered. Required.
	Store pillar.Store
	// Objects receives the batches. Required.
	Objects objstore.Store
	// Registry is the control plane. Required.
	Registry Registry

	// ID names this worker in leases. A worker takes back at once the leases
	// held under its own id (a restart with a stable id); two live processes
	// must never share one. The default value is "<hostname>-<pid>-<random>".
	ID string
	// Partitions restricts the worker to these partitions. The default value
	// (nil) means every partition of the store.
	Partitions []int

	// MaxBatchBytes closes a batch once its records' values reach this many
	// bytes; it is also how much a partition reads ahead besides the batch
	// it is delivering. A bulk batch carrying fresh records (FreshRideWait)
	// takes up to this many bytes of them on top, so it can reach about
	// twice this (bounding the whole batch instead would keep fresh
	// records off every full bulk batch). The default value is 8 MiB.
	MaxBatchBytes int64
	// FreshBulkBatchBytes replaces MaxBatchBytes for bulk batches while
	// fresh records flow in the partition (seen in the last 2s): a fresh
	// batch registered after a bulk one is applied after it on every
	// replica, and a fresh record of a key the bulk batch in flight holds
	// waits for its registration, so shorter bulk batches bound fresh
	// latency, at some cost in bulk throughput (per-batch overheads). The
	// default value is MaxBatchBytes.
	FreshBulkBatchBytes int64
	// MaxBatchRecords closes a batch at this many records. The default value
	// is 100000.
	MaxBatchRecords int
	// MaxBufferedBytes bounds the record bytes all partitions of the worker
	// hold in memory (read ahead and in flight), beyond one record per
	// partition: when it is spent, partitions stop reading until batches
	// are delivered. The default value is 512 MiB.
	MaxBufferedBytes int64
	// MaxBatchAge closes a batch once its oldest record was committed this
	// long ago. The default value is 1s.
	MaxBatchAge time.Duration
	// FreshRideWait lets fresh records ride along with the partition's
	// next bulk batch instead of costing a batch of their own: while the
	// partition's bulk lane is delivering records of their publication (a
	// bulk batch in flight or buffered, paused by replica backpressure or
	// not), a fetched fresh record waits up to this long after its commit
	// (at least MaxBatchAge) for a bulk batch to carry it; a bulk batch
	// takes every fresh record fetched when it is planned. Older ones, a
	// full batch of them (MaxBatchBytes or MaxBatchRecords: no small batch
	// to save), and all of them when no bulk batch can take them, go in a
	// fresh batch as before; a complete bulk batch held back only by
	// MaxBulkUnapplied goes instead to carry fresh records whose wait ran
	// out. A bulk batch whose upload is not done within twice this long
	// after it took its riders (or, when bulk batches take longer to be
	// uploaded, twice their usual time, Stats.FlightTime; at most 8 times
	// this long) gives them back to the fresh lane (and restarts without
	// them), so a slow or hanging bulk upload never holds fresh records.
	// Each batch costs a build, an upload, a registration and an
	// apply on every replica, so fresh traffic then adds bytes to bulk
	// batches, not batches. Negative disables riding. The default value is
	// 1s.
	FreshRideWait time.Duration
	// PollInterval is how often an idle partition looks for new records.
	// The default value is 100ms.
	PollInterval time.Duration
	// ReadChunk is how many records one queue read returns at most. The
	// default value is 256.
	ReadChunk int
	// Parallelism bounds how many partitions build and upload a batch at the
	// same time. The default value is 4.
	Parallelism int

	// BulkMinShare is bulk's guaranteed share of the partition's delivered
	// record bytes (over the last ~10s) when replicas lag: bulk batches
	// wait while a replica lags more than MaxReplicaLag batches, but not
	// below this share, so bulk never starves. (Fresh batches have a slot
	// of their own and never wait for bulk ones; a bulk batch whose files
	// are uploaded is registered before the next fresh batch.) The default
	// value is 0.25; it must lie in (0, 1].
	BulkMinShare float64
	// MaxReplicaLag pauses a partition's bulk lane while one of its
	// replicas is more than this many batches behind the newest
	// (control-plane lag), down to BulkMinShare; fresh batches keep
	// flowing. Negative disables it. The default value is 8. It needs
	// Replicas.
	MaxReplicaLag int64
	// MaxBulkUnapplied pauses a partition's bulk lane, while fresh records
	// flow in it (seen in the last 2s), as long as this many of its bulk
	// batches are registered and not yet applied on every replica (read
	// every ReplicaPoll), down to BulkMinShare; fresh records keep flowing
	// (riding the next bulk batch, FreshRideWait, or alone). A replica
	// applies a partition's batches in order, so a fresh record registered
	// behind bulk batches waits for all of them on every replica: this
	// bounds that queue to what the replicas apply meanwhile, where
	// MaxReplicaLag (counted in batches of both lanes) lets it grow to
	// seconds. Without fresh traffic bulk is not held (there is nothing to
	// keep the queue short for), nor for a partition with no replicas
	// known. Negative disables it. The default value is 2. It needs
	// Replicas.
	MaxBulkUnapplied int
	// MaxBulkUnappliedTotal is MaxBulkUnapplied over all the worker's
	// partitions together: while fresh records flow in a partition, its
	// bulk lane also pauses as long as this many bulk batches of the
	// worker's partitions are registered and not applied on every replica,
	// down to BulkMinShare. A replica applies a few batches at a time
	// across all its partitions (cobbled's IngestConcurrency), so a fresh
	// record (alone, or riding a bulk batch) waits there behind other
	// partitions' bulk batches too, which the per-partition bound does not
	// count. 0 or negative: no such bound (the default). It needs Replicas.
	MaxBulkUnappliedTotal int
	// Replicas reports each partition's replica progress; it drives the
	// bulk backpressure, the enqueue → applied-on-all-replicas latency and
	// the loss counter. The default value is Registry when it implements
	// ReplicaSource (*control.Client does), else none.
	Replicas ReplicaSource
	// ReplicaPoll is how often replica progress is read. The default value
	// is 250ms.
	ReplicaPoll time.Duration
	// LossAfter and BulkLossAfter: a fresh (bulk) record not applied on
	// every replica this long after its commit counts once in the loss
	// counter (Stats.Lost, lorry_lost_records_total). The default values
	// are 5m and 1h.
	LossAfter, BulkLossAfter time.Duration
	// HeadChunk is how many record heads (no values) one scan read returns;
	// MaxScanAhead bounds how many undelivered heads a partition keeps (a
	// fresh record further behind a bulk backlog waits). The default values
	// are 4096 and 1<<20.
	HeadChunk, MaxScanAhead int

	// LeaseTTL is how long a partition lease lasts without renewal; a worker
	// that dies loses its partitions this long after its last renewal. Leases
	// are renewed every LeaseTTL/3. The default value is 15s.
	LeaseTTL time.Duration

	// RetryMin and RetryMax bound the exponential backoff (with jitter)
	// between attempts at a failed upload, registration or commit. A failing
	// step is retried forever (records are never dropped) until the worker
	// stops or loses the partition. The default values are 100ms and 10s.
	RetryMin, RetryMax time.Duration

	// OrphanGrace is how old an uploaded object no registered batch names
	// must be before cleanup removes it. The default value is 15m.
	OrphanGrace time.Duration
	// CleanupInterval is how often the worker cleans the prefixes of the
	// partitions it holds. Negative disables cleanup. The default value is
	// 10m.
	CleanupInterval time.Duration

	// TempDir is where the worker makes its own scratch directory for SST
	// files being built and uploaded (removed when Run or Drain returns). The
	// default value is os.TempDir().
	TempDir string
	// Table is the SST layout; it must equal the serving nodes'. The default
	// value is rocks.TableConfig{} (its defaults).
	Table rocks.TableConfig

	// Clock is what the worker reads the time from and waits on: batch
	// ages, polls, lease renewals, retry backoffs, replica polls, cleanup.
	// Tests pass a clock.Fake and move it. The default value is the wall
	// clock (clock.Real), reading Now when that is set.
	Clock clock.Clock
	// Now, when set and Clock is not, is the time of day (waits stay on
	// the wall clock). The default value is Clock.Now.
	Now func() time.Time
	// Logger receives lifecycle events and retries. The default value
	// discards.
	Logger *slog.Logger
	// Metrics, when set, records deliveries. The binary registers
	// Metrics.Collectors(). The default value nil records nothing.
	Metrics *Metrics

	// hook, when set, is called at each named step (tests); an error it
	// returns makes the partition's loop return at once, as a crash would.
	hook func(point string, p int) error
}

var workerIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)

func (o *Options) ensureDefaults() {
	if o.ID == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "lorry"
		}
		var b [3]byte
		_, _ = rand.Read(b[:])
		o.ID = fmt.Sprintf("%s-%d-%s", sanitize(host), os.Getpid(), hex.EncodeToString(b[:]))
	}
	if o.MaxBatchBytes == 0 {
		o.MaxBatchBytes = 8 << 20
	}
	if o.FreshBulkBatchBytes == 0 {
		o.FreshBulkBatchBytes = o.MaxBatchBytes
	}
	if o.MaxBatchRecords == 0 {
		o.MaxBatchRecords = 100000
	}
	if o.MaxBufferedBytes == 0 {
		o.MaxBufferedBytes = 512 << 20
	}
	if o.MaxBatchAge == 0 {
		o.MaxBatchAge = time.Second
	}
	if o.FreshRideWait == 0 {
		o.FreshRideWait = time.Second
	}
	if o.PollInterval == 0 {
		o.PollInterval = 100 * time.Millisecond
	}
	if o.ReadChunk == 0 {
		o.ReadChunk = 256
	}
	if o.Parallelism == 0 {
		o.Parallelism = 4
	}
	if o.BulkMinShare == 0 {
		o.BulkMinShare = 0.25
	}
	if o.MaxReplicaLag == 0 {
		o.MaxReplicaLag = 8
	}
	if o.MaxBulkUnapplied == 0 {
		o.MaxBulkUnapplied = 2
	}
	if o.Replicas == nil {
		if rs, ok := o.Registry.(ReplicaSource); ok {
			o.Replicas = rs
		}
	}
	if o.ReplicaPoll == 0 {
		o.ReplicaPoll = 250 * time.Millisecond
	}
	if o.LossAfter == 0 {
		o.LossAfter = 5 * time.Minute
	}
	if o.BulkLossAfter == 0 {
		o.BulkLossAfter = time.Hour
	}
	if o.HeadChunk == 0 {
		o.HeadChunk = 4096
	}
	if o.MaxScanAhead == 0 {
		o.MaxScanAhead = 1 << 20
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = 15 * time.Second
	}
	if o.RetryMin == 0 {
		o.RetryMin = 100 * time.Millisecond
	}
	if o.RetryMax == 0 {
		o.RetryMax = 10 * time.Second
	}
	if o.OrphanGrace == 0 {
		o.OrphanGrace = 15 * time.Minute
	}
	if o.CleanupInterval == 0 {
		o.CleanupInterval = 10 * time.Minute
	}
	if o.TempDir == "" {
		o.TempDir = os.TempDir()
	}
	switch {
	case o.Clock != nil:
		o.Now = o.Clock.Now
	case o.Now != nil:
		o.Clock = nowClock{clock.Real{}, o.Now}
	default:
		o.Clock = clock.Real{}
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// sanitize keeps the characters a worker id may hold.
func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			b[i] = '-'
		}
	}
	return string(b)
}

// Validate checks the options, with defaults applied, against each other.
func (o Options) Validate() error {
	o.ensureDefaults()
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf("lorry: options: "+format, a...)) }
	if o.Store == nil {
		fail("Store is required")
	}
	if o.Objects == nil {
		fail("Objects is required")
	}
	if o.Registry == nil {
		fail("Registry is required")
	}
	if !workerIDRE.MatchString(o.ID) {
		fail("ID %q: use letters, digits, '.', '_' and '-' (at most 100)", o.ID)
	}
	if o.MaxBatchBytes < 1 || o.MaxBatchRecords < 1 || o.ReadChunk < 1 || o.Parallelism < 1 {
		fail("MaxBatchBytes, MaxBatchRecords, ReadChunk and Parallelism must be positive")
	}
	if o.MaxBufferedBytes < o.MaxBatchBytes {
		fail("MaxBufferedBytes %d is below MaxBatchBytes %d: no batch could fill up", o.MaxBufferedBytes, o.MaxBatchBytes)
	}
	if o.MaxBatchAge <= 0 || o.PollInterval <= 0 {
		fail("MaxBatchAge %v and PollInterval %v must be positive", o.MaxBatchAge, o.PollInterval)
	}
	if o.FreshRideWait >= o.LossAfter {
		fail("FreshRideWait %v must be below LossAfter %v (a fresh record waiting to ride would count as lost)", o.FreshRideWait, o.LossAfter)
	}
	if o.BulkMinShare <= 0 || o.BulkMinShare > 1 {
		fail("BulkMinShare %v must lie in (0, 1]", o.BulkMinShare)
	}
	if o.ReplicaPoll <= 0 || o.LossAfter <= 0 || o.BulkLossAfter <= 0 {
		fail("ReplicaPoll %v, LossAfter %v and BulkLossAfter %v must be positive", o.ReplicaPoll, o.LossAfter, o.BulkLossAfter)
	}
	if o.HeadChunk < 1 || o.MaxScanAhead < o.HeadChunk {
		fail("HeadChunk %d must be positive and at most MaxScanAhead %d", o.HeadChunk, o.MaxScanAhead)
	}
	if o.LeaseTTL < 3*o.PollInterval {
		fail("LeaseTTL %v must be at least 3 × PollInterval (%v): leases are renewed between polls", o.LeaseTTL, o.PollInterval)
	}
	if o.RetryMin <= 0 || o.RetryMax < o.RetryMin {
		fail("RetryMin %v must be positive and at most RetryMax %v", o.RetryMin, o.RetryMax)
	}
	if o.OrphanGrace < time.Second {
		fail("OrphanGrace %v below 1s: an upload in progress could be removed", o.OrphanGrace)
	}
	if o.Store != nil {
		P := o.Store.Info().Partitions
		seen := map[int]bool{}
		for _, p := range o.Partitions {
			if p < 0 || p >= P {
				fail("partition %d out of range [0,%d)", p, P)
			}
			if seen[p] {
				fail("partition %d listed twice", p)
			}
			seen[p] = true
		}
	}
	if err := o.Table.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("lorry: options: %w", err))
	}
	return errors.Join(errs...)
}

// nowClock is the wall clock with another time of day (Options.Now
// without Options.Clock).
type nowClock struct {
	clock.Real
	now func() time.Time
}

func (c nowClock) Now() time.Time { return c.now() }
