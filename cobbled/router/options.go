package router

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"

	"github.com/pillarkit/pillar/internal/clock"
	"github.com/pillarkit/pillar/internal/servelimit"
)

// Options configure a Router. The zero value of every field means its
// default; Source is required.
type Options struct {
	// Source is the control plane (a *control.Client satisfies it, and its
	// WatchRouting makes the router see new versions at once). Required.
	Source RoutingSource
	// Zone is the caller's zone: replicas in it are preferred. The default
	// value is "" (no preference).
	Zone string
	// Partitions is the deployment's partition count P. The default value
	// is 0: take it from the first routing table. A routing table with a
	// different P is refused (the cached one stays in use).
	Partitions int

	// Version is the publication a request that names none reads: "" or
	// "live" (the live publication), "candidate", "previous", or a
	// publication id (pillar.EmbedVersionID). The default value is "":
	// live.
	Version string
	// CandidateFraction is the A/B split: this fraction of the requests
	// that name no version (and so read the live publication) read the
	// candidate instead, while the control plane lists a ready candidate;
	// with a caller id (ReadOptions.Caller), the fraction is of callers, by
	// a hash of the id. A request naming a version, also "live", is not
	// split. The default value is 0: none.
	CandidateFraction float64

	// Spread chooses each partition's replica on its own, so a request's
	// partitions spread over several nodes and travel in parallel. The
	// default value false puts them on as few nodes as their replicas allow
	// (with every node holding every partition, one): fewer sub-requests,
	// less per-request overhead and one tail to hedge instead of several;
	// load still spreads across requests by the power of two choices.
	Spread bool

	// MaxKeys is the largest BatchGet request, in keys. It also sizes the
	// gRPC server's receive limit (servelimit.RecvLimit; 23,558 bytes for
	// 1024 keys), and its requests' keys are counted, and their lengths
	// checked, before they are decoded (Server). The default value is 1024
	// (cobbled's default limit).
	MaxKeys int
	// MaxInFlight is the most BatchGet requests the gRPC server (Server)
	// answers at once, all connections together, and the most streams one
	// connection may open. A request past it is answered
	// RESOURCE_EXHAUSTED before its message is read. The default value is
	// 1024.
	MaxInFlight int
	// Timeout is the deadline of a BatchGet whose context has none. The
	// default value is 2s.
	Timeout time.Duration
	// InitTimeout bounds the first routing fetch in New. The default value
	// is 5s.
	InitTimeout time.Duration
	// RefreshInterval is how often the routing table is fetched again (also
	// without a version change, to see replicas' fresh applied sequence
	// numbers); with a RoutingWatcher it is also the long-poll wait. The
	// default value is 2s.
	RefreshInterval time.Duration
	// MinRefreshGap is the least time between two routing fetches triggered
	// by routing errors ("not my partition", unknown node). The default
	// value is 100ms.
	MinRefreshGap time.Duration
	// MaxLagBatches: a replica more than this many batches behind its
	// partition's newest is not chosen while a fresher replica is up; when
	// every up replica lags more, the least-lagging ones serve (stale beats
	// unavailable). The default value is 2; a negative value disables the
	// check.
	MaxLagBatches int64

	// DisableHedging turns hedged requests off. The default value is false.
	DisableHedging bool
	// HedgeQuantile is the quantile of a node's recent latencies, for
	// sub-requests of the same size class, after which an unanswered
	// sub-request counts as an outlier and is hedged. The default value is
	// 0.99: a healthy node's own tail asks for about 1% hedges, leaving most
	// of the HedgeBudget to a node that turns slow now and then.
	HedgeQuantile float64
	// HedgeQuantileFull is the hedge quantile while the hedge budget holds
	// at least half its bank (HedgeBurst / 2 tokens): with tokens to spare,
	// a lower bar hedges the outliers sooner, and as hedges draw the bank
	// down the bar goes back to HedgeQuantile, so spending stays within the
	// budget. A faulted request costs its hedge delay plus a second request,
	// and the delay is the node's own tail: at p99 a node slow on 3% of its
	// requests missed 1.5 × the healthy p99 in about half the quiet runs.
	// The default value is 0.985 (or HedgeQuantile if that is lower); it
	// must be in (0, HedgeQuantile]; HedgeQuantile itself means one bar.
	HedgeQuantileFull float64
	// HedgeOutlier: a sub-request is hedged only after waiting at least this
	// multiple of its node's median latency for its size class, so a node
	// whose latencies are tight does not spend the budget on ordinary
	// jitter. The default value is 2; it must be at least 1.
	HedgeOutlier float64
	// HedgeMinDelay is the floor of the hedge delay. The default value is
	// 500µs. (At 2 ms the floor, not the node's p99, set the delay on a quiet
	// machine: healthy p99 1.3 ms with 1 client, and a hedged outlier cost
	// 2 ms plus its second request, 2.1 × the healthy p99. At 1 ms it still
	// did on a machine twice as fast: `pillar bench read --clients 1` hedged
	// p99 1.52× healthy, the outliers waiting out the floor.)
	HedgeMinDelay time.Duration
	// HedgeMaxDelay caps the hedge delay. The default value is 200ms.
	HedgeMaxDelay time.Duration
	// HedgeInitialDelay is the hedge delay of a node with fewer than
	// MinSamples latencies. The default value is 20ms.
	HedgeInitialDelay time.Duration
	// HedgeBudget is the most hedges per primary sub-request, as a ratio
	// (a token bucket earns this many tokens per primary sub-request; a hedge
	// spends one). The default value is 0.045: with the HedgeBurst bank of
	// 20, hedges stay within 5% of the primaries over any stretch of 4,000
	// or more (at 0.05 the bank took one run to 5.07%).
	HedgeBudget float64
	// HedgeBurst is the token bucket's capacity (and initial fill): over
	// any stretch, hedges ≤ HedgeBudget × primaries + HedgeBurst. The
	// default value is 20: outliers come in clusters (a node stalls for a
	// moment), and with a bank of 5 a node slow on 3% of its requests, well
	// within a 5% budget, still had 61 of ~410 hedges denied in one
	// `pillar bench read --clients 1` run, which set its p99.9.
	HedgeBurst float64
	// StallRatio: a node whose recent share of primaries that crossed
	// their hedge delay (see NodeStats.StallRate) is above this ratio is
	// chosen after the other replicas, even in the caller's zone, as a node
	// slower across the board is. Hedging covers a node that stalls now
	// and then; one that stalls more often than the budget can hedge (a
	// link dropping packets: every lost last packet waits out TCP's 200 ms
	// retransmission timeout) needs its traffic moved. The default value is
	// the larger of HedgeBudget and 3 × (1 − HedgeQuantileFull), 0.045 with
	// the defaults (a healthy node sits near 1 − HedgeQuantileFull); a
	// negative value turns the steering off.
	StallRatio float64
	// LatencyWindow is how many recent latencies per node (and per size
	// class) the hedge delay is learned from. The default value is 512.
	LatencyWindow int
	// MinSamples is how many latencies a node needs before its own quantile
	// is used. The default value is 32.
	MinSamples int

	// EjectFor is how long a node that failed a sub-request with a transport
	// error (unreachable, reset) is avoided while other replicas exist. The
	// default value is 1s.
	EjectFor time.Duration
	// DialOptions are appended to the node connections' own
	// (servepb.DialOptions and plaintext). The default value is none.
	DialOptions []grpc.DialOption
	// NodeTLS, when set, reaches the nodes over TLS with this client
	// configuration, over gRPC and over the wire protocol alike (nodes
	// started with --tls-cert; with a client certificate in it, nodes
	// requiring mutual TLS identify the router by it). The default value
	// nil connects in plaintext.
	NodeTLS *tls.Config
	// Transport is how sub-requests reach the nodes: TransportGRPC (the
	// Serve API over gRPC) or TransportWire (cobbled's lean protocol,
	// package wire, served on the same port: length-prefixed frames over
	// TCP, pipelined on WireConns connections per node, same request and
	// response encoding, version included). The default value "" is gRPC.
	Transport string
	// WireConns is the connections per node with TransportWire. The
	// default value is 2.
	WireConns int

	// Clock is the time source of hedge timers, request timeouts, routing
	// refreshes, ejections and latency measurements. The default value is
	// the wall clock (clock.Real); tests pass a *clock.Fake.
	Clock clock.Clock

	// Logger receives routing changes and errors. The default value
	// discards.
	Logger *slog.Logger
	// Metrics receives measurements. The default value is a fresh,
	// unregistered set (the binary registers Metrics.Collectors()).
	Metrics *Metrics
	// ReadTrace, when set, is called at the end of every Read (and
	// BatchGet) with where its time went along its first answer's path
	// (ReadStages), on the caller's goroutine, so it must be quick and, with
	// concurrent callers, safe for concurrent use. It is for profiling the
	// router's own path (BenchmarkReadTail); a Read stamps the wall clock
	// six more times while it is set. The default value (nil) traces
	// nothing and stamps nothing.
	ReadTrace func(*ReadStages)
}

func (o *Options) ensureDefaults() {
	if o.MaxKeys == 0 {
		o.MaxKeys = 1024
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = servelimit.DefaultMaxInFlight
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Second
	}
	if o.InitTimeout == 0 {
		o.InitTimeout = 5 * time.Second
	}
	if o.RefreshInterval == 0 {
		o.RefreshInterval = 2 * time.Second
	}
	if o.MinRefreshGap == 0 {
		o.MinRefreshGap = 100 * time.Millisecond
	}
	if o.MaxLagBatches == 0 {
		o.MaxLagBatches = 2
	}
	if o.HedgeQuantile == 0 {
		o.HedgeQuantile = 0.99
	}
	if o.HedgeQuantileFull == 0 {
		o.HedgeQuantileFull = min(0.985, o.HedgeQuantile)
	}
	if o.HedgeOutlier == 0 {
		o.HedgeOutlier = 2
	}
	if o.HedgeMinDelay == 0 {
		o.HedgeMinDelay = 500 * time.Microsecond
	}
	if o.HedgeMaxDelay == 0 {
		o.HedgeMaxDelay = 200 * time.Millisecond
	}
	if o.HedgeInitialDelay == 0 {
		o.HedgeInitialDelay = 20 * time.Millisecond
	}
	if o.HedgeBudget == 0 {
		o.HedgeBudget = 0.045
	}
	if o.HedgeBurst == 0 {
		o.HedgeBurst = 20
	}
	if o.LatencyWindow == 0 {
		o.LatencyWindow = 512
	}
	if o.MinSamples == 0 {
		o.MinSamples = 32
	}
	if o.StallRatio == 0 {
		o.StallRatio = max(o.HedgeBudget, 3*(1-o.HedgeQuantileFull))
	}
	if o.EjectFor == 0 {
		o.EjectFor = time.Second
	}
	o.Clock = clock.Or(o.Clock)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
}

// Transports (Options.Transport).
const (
	TransportGRPC = "grpc"
	TransportWire = "wire"
)

// Validate checks the options, with defaults applied, against each other.
func (o Options) Validate() error {
	o.ensureDefaults()
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf("router: options: "+format, a...)) }
	if o.Source == nil {
		fail("Source (the control plane) is required")
	}
	if o.Partitions < 0 {
		fail("Partitions %d is negative", o.Partitions)
	}
	if o.MaxKeys < 1 {
		fail("MaxKeys %d must be positive", o.MaxKeys)
	}
	if o.MaxInFlight < 1 {
		fail("MaxInFlight %d must be positive", o.MaxInFlight)
	}
	if o.CandidateFraction < 0 || o.CandidateFraction > 1 {
		fail("CandidateFraction %v must be in [0,1]", o.CandidateFraction)
	}
	if o.CandidateFraction > 0 && o.Version != "" && o.Version != AliasLive {
		fail("CandidateFraction %v splits reads of the live publication; Version %q is not live", o.CandidateFraction, o.Version)
	}
	if o.Timeout < 0 || o.InitTimeout < 0 || o.RefreshInterval < 0 || o.MinRefreshGap < 0 || o.EjectFor < 0 {
		fail("durations must not be negative")
	}
	if o.HedgeQuantile <= 0 || o.HedgeQuantile >= 1 {
		fail("HedgeQuantile %v must be in (0,1)", o.HedgeQuantile)
	}
	if o.HedgeQuantileFull <= 0 || o.HedgeQuantileFull > o.HedgeQuantile {
		fail("HedgeQuantileFull %v must be in (0, HedgeQuantile %v]", o.HedgeQuantileFull, o.HedgeQuantile)
	}
	if o.HedgeOutlier < 1 {
		fail("HedgeOutlier %v must be at least 1", o.HedgeOutlier)
	}
	if o.HedgeMinDelay < 0 || o.HedgeMaxDelay < o.HedgeMinDelay {
		fail("HedgeMinDelay %v must be non-negative and at most HedgeMaxDelay %v", o.HedgeMinDelay, o.HedgeMaxDelay)
	}
	if o.HedgeInitialDelay < o.HedgeMinDelay || o.HedgeInitialDelay > o.HedgeMaxDelay {
		fail("HedgeInitialDelay %v must lie between HedgeMinDelay %v and HedgeMaxDelay %v", o.HedgeInitialDelay, o.HedgeMinDelay, o.HedgeMaxDelay)
	}
	if o.HedgeBudget < 0 || o.HedgeBudget > 1 {
		fail("HedgeBudget %v must be in [0,1]", o.HedgeBudget)
	}
	if o.StallRatio > 1 {
		fail("StallRatio %v must be at most 1 (negative: no steering)", o.StallRatio)
	}
	if o.HedgeBurst < 1 {
		fail("HedgeBurst %v must be at least 1", o.HedgeBurst)
	}
	if o.Transport != "" && o.Transport != TransportGRPC && o.Transport != TransportWire {
		fail("Transport %q: want %q or %q", o.Transport, TransportGRPC, TransportWire)
	}
	if o.WireConns < 0 {
		fail("WireConns %d is negative", o.WireConns)
	}
	if o.LatencyWindow < 16 || o.MinSamples < 1 || o.MinSamples > o.LatencyWindow {
		fail("LatencyWindow %d must be at least 16 and MinSamples %d in [1, LatencyWindow]", o.LatencyWindow, o.MinSamples)
	}
	return errors.Join(errs...)
}
