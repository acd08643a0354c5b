package router

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Sentinel errors callers may branch on (errors.Is).
var (
	// ErrEmpty: a BatchGet without keys.
	ErrEmpty = errors.New("empty request (no keys)")
	// ErrTooManyKeys: more keys than Options.MaxKeys.
	ErrTooManyKeys = errors.New("too many keys")
	// ErrBadKey: a key that is not 16 bytes.
	ErrBadKey = errors.New("malformed key")
	// ErrBadVersion: a request's version is malformed (too long).
	ErrBadVersion = errors.New("malformed version")
	// ErrNoRouting: New could not get a routing table from the control
	// plane.
	ErrNoRouting = errors.New("no routing table")
	// ErrPartitions: the routing table's partition count differs from the
	// deployment's.
	ErrPartitions = errors.New("partition count mismatch")
	// ErrNoReplica: a partition has no usable replica (none listed, or all
	// down or lagging).
	ErrNoReplica = errors.New("no usable replica")
	// ErrUnavailable: every usable replica of a partition failed.
	ErrUnavailable = errors.New("partition unavailable")
	// ErrNotServed: a replica answered that it does not hold the partition.
	ErrNotServed = errors.New("replica does not serve the partition")
	// ErrKeyError: a replica failed to read the partition.
	ErrKeyError = errors.New("replica read error")
	// ErrClosed: the router is closed.
	ErrClosed = errors.New("router closed")
)

// Router sends BatchGets to cobbled nodes: see the package documentation.
type Router struct {
	opts   Options
	budget *budget

	table     atomic.Pointer[table]
	installMu sync.Mutex         // serializes install; guards nodes
	nodes     map[string]*node   // key: id@addr
	retiring  map[*node]struct{} // left the table, connection not closed yet
	p         atomic.Int64       // partition count, once known

	kickCh    chan struct{}
	lastFetch atomic.Int64
	cancel    context.CancelFunc
	timers    *timers // precise hedge timers (nil: Options.Clock's; timers.go)
	wg        sync.WaitGroup
	closed    atomic.Bool

	// Stats counters.
	requests, keys, failedKeys             atomic.Int64
	primaries, hedges, won, failovers      atomic.Int64
	denied, cancelled, failedRequests      atomic.Int64
	routingErrors                          atomic.Int64
	hedgeWait, hedgeDelaySum, hedgeWonTime atomic.Int64 // nanos (Stats.HedgeWait, HedgeDelay, HedgeWonTime)
	hedgesDeferred                         atomic.Int64
	versions                               sync.Map // publication id → *versionCount
}

// New returns a router with the control plane's current routing table. A
// control plane that cannot be reached within Options.InitTimeout is an
// error wrapping ErrNoRouting; once running, the router keeps serving from
// its cached table while the control plane is away. Close it when done.
func New(ctx context.Context, opts Options) (*Router, error) {
	opts.ensureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	r := &Router{opts: opts, budget: newBudget(opts.HedgeBudget, opts.HedgeBurst), nodes: map[string]*node{}, retiring: map[*node]struct{}{}, kickCh: make(chan struct{}, 1)}
	r.p.Store(int64(opts.Partitions))
	if err := r.fetch(ctx); err != nil {
		return nil, fmt.Errorf("router: start: %w: %w", ErrNoRouting, err)
	}
	opts.Metrics.bind(r)
	r.timers = newTimers(opts.Clock)
	bg, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Add(1)
	go r.refreshLoop(bg)
	if w, ok := opts.Source.(RoutingWatcher); ok {
		r.wg.Add(1)
		go r.watchLoop(bg, w)
	}
	return r, nil
}

func (r *Router) partitions() int { return int(r.p.Load()) }

// Partitions returns the deployment's partition count.
func (r *Router) Partitions() int { return r.partitions() }

// RoutingVersion returns the version of the routing table in use.
func (r *Router) RoutingVersion() int64 { return r.table.Load().version }

// Refresh fetches the routing table now.
func (r *Router) Refresh(ctx context.Context) error { return r.fetch(ctx) }

// Close stops the refresh loops and closes every node connection. BatchGets
// after Close fail with ErrClosed; ones in flight fail as their connections
// close.
func (r *Router) Close() error {
	if !r.closed.CompareAndSwap(false, true) {
		return nil
	}
	r.cancel()
	r.wg.Wait()
	if r.timers != nil {
		r.timers.close()
	}
	r.installMu.Lock()
	defer r.installMu.Unlock()
	for key, n := range r.nodes {
		n.close()
		delete(r.nodes, key)
	}
	for n := range r.retiring {
		n.close()
		delete(r.retiring, n)
	}
	return nil
}

func (r *Router) account(g *gather, keys, failed int, d time.Duration) {
	m := r.opts.Metrics
	r.requests.Add(1)
	r.keys.Add(int64(keys))
	r.primaries.Add(int64(g.counts[kindPrimary]))
	r.hedges.Add(int64(g.counts[kindHedge]))
	r.failovers.Add(int64(g.counts[kindFailover]))
	r.won.Add(int64(g.won))
	r.hedgeWait.Add(int64(g.hedgeWait))
	r.hedgeDelaySum.Add(int64(g.hedgeDelay))
	r.hedgeWonTime.Add(int64(g.hedgeWonTime))
	r.hedgesDeferred.Add(int64(g.deferred))
	m.hedgesWon.Add(float64(g.won))
	id, role := g.c.id, g.c.role
	if g.c.err != nil {
		// Callers choose versions: keep the label set to served ones.
		id, role = notServedLabel, ""
	}
	m.duration.WithLabelValues(id, role).Observe(d.Seconds())
	m.keys.Add(float64(keys))
	result := "ok"
	switch {
	case failed == 0:
	case failed < keys:
		r.failedKeys.Add(int64(failed))
		r.failedRequests.Add(1)
		result = "partial"
	default:
		r.failedKeys.Add(int64(failed))
		r.failedRequests.Add(1)
		result = "failed"
	}
	if result == "ok" {
		m.okReqs.Inc()
	} else {
		m.requests.WithLabelValues(result).Inc()
	}
	m.versionRequests.WithLabelValues(id, role, result).Inc()
	r.countVersion(id, role, failed > 0)
}

// notServedLabel stands for every version a request named that the
// routing could not serve (unknown, retired, …) in metrics and Stats.
const notServedLabel = "(not served)"

// versionCount is one version's request counters (Stats.Versions).
type versionCount struct {
	role             atomic.Pointer[string]
	requests, failed atomic.Int64
}

func (r *Router) countVersion(id, role string, failed bool) {
	v, ok := r.versions.Load(id)
	if !ok {
		v, _ = r.versions.LoadOrStore(id, new(versionCount))
	}
	c := v.(*versionCount)
	if role != "" {
		if old := c.role.Load(); old == nil || *old != role {
			c.role.Store(&role)
		}
	}
	c.requests.Add(1)
	if failed {
		c.failed.Add(1)
	}
}

// Stats is a snapshot of the router's counters since New.
type Stats struct {
	RoutingVersion int64
	RoutingErrors  int64 // failed routing fetches (the cached table stayed in use)
	Requests       int64 // BatchGet calls that passed validation
	Keys           int64
	FailedRequests int64 // requests with at least one failed key
	FailedKeys     int64
	Primaries      int64 // first sub-requests, one per node per request
	Hedges         int64 // hedged sub-requests sent
	HedgesWon      int64 // hedges that answered a partition before its primary
	HedgesDenied   int64 // hedges the budget refused
	Failovers      int64 // sub-requests re-sent after an error or "not my partition"
	Cancelled      int64 // sub-requests cancelled (hedge losers, leftovers at the deadline)
	// HedgeWait is the time primaries had waited when their hedges were
	// sent, summed over Hedges; HedgeWonTime the latency of the hedges that
	// won, from their own send, summed over HedgesWon. A hedged request's
	// latency is about the two added up (where a hedged tail goes).
	// HedgeDelay is the hedge delay those primaries had been given, summed
	// over Hedges: HedgeWait - HedgeDelay is how late the hedges went out
	// (timers firing late, deferrals).
	HedgeWait, HedgeDelay, HedgeWonTime time.Duration
	// HedgesDeferred counts hedge timers that fired late (this process
	// stalled) and were put off once so a waiting answer could be read
	// first.
	HedgesDeferred int64
	// ExtraRatio is (Hedges + Failovers) / Primaries; HedgeRatio is
	// Hedges / Primaries, the figure the hedge budget bounds.
	ExtraRatio, HedgeRatio float64
	HedgeTokens            float64
	Nodes                  []NodeStats
	// Versions counts requests per publication read, by id.
	Versions []VersionStats
	// Live is the live publication in the routing table in use.
	Live string
}

// VersionStats is one publication's share of the requests.
type VersionStats struct {
	Version, Role  string // Role as last seen when a request read it
	Requests       int64
	FailedRequests int64
}

// NodeStats is one node's view.
type NodeStats struct {
	ID, Addr, Zone string
	Outstanding    int64
	RPCs, Errors   int64
	Ejected        bool
	// Recent latency of answered sub-requests (zero until measured) and the
	// current hedge delay.
	P50, P99, EWMA, HedgeDelay time.Duration
	// StallRate is the smoothed share of its recent primaries that crossed
	// their hedge delay (Options.StallRatio).
	StallRate float64
}

// Stats returns a snapshot of the counters.
func (r *Router) Stats() Stats {
	s := Stats{
		RoutingVersion: r.table.Load().version, RoutingErrors: r.routingErrors.Load(),
		Requests: r.requests.Load(), Keys: r.keys.Load(),
		FailedRequests: r.failedRequests.Load(), FailedKeys: r.failedKeys.Load(),
		Primaries: r.primaries.Load(), Hedges: r.hedges.Load(), HedgesWon: r.won.Load(),
		HedgesDenied: r.denied.Load(), Failovers: r.failovers.Load(), Cancelled: r.cancelled.Load(),
		HedgeTokens: r.budget.level(),
		HedgeWait:   time.Duration(r.hedgeWait.Load()), HedgeDelay: time.Duration(r.hedgeDelaySum.Load()),
		HedgeWonTime:   time.Duration(r.hedgeWonTime.Load()),
		HedgesDeferred: r.hedgesDeferred.Load(),
	}
	if s.Primaries > 0 {
		s.ExtraRatio = float64(s.Hedges+s.Failovers) / float64(s.Primaries)
		s.HedgeRatio = float64(s.Hedges) / float64(s.Primaries)
	}
	now := r.opts.Clock.Now().UnixNano()
	r.installMu.Lock()
	for _, n := range r.nodes {
		s.Nodes = append(s.Nodes, NodeStats{
			ID: n.id, Addr: n.addr, Zone: n.zoneName(), Outstanding: n.outstanding.Load(),
			RPCs: n.rpcs.Load(), Errors: n.errs.Load(), Ejected: n.ejected(now),
			P50: time.Duration(n.lat.p50.Load()), P99: time.Duration(n.lat.p99.Load()),
			EWMA: time.Duration(n.ewmaNanos.Load()), HedgeDelay: r.hedgeDelay(n, 0),
			StallRate: n.stallRate(now),
		})
	}
	r.installMu.Unlock()
	sort.Slice(s.Nodes, func(i, j int) bool { return s.Nodes[i].ID < s.Nodes[j].ID })
	r.versions.Range(func(k, v any) bool {
		c := v.(*versionCount)
		vs := VersionStats{Version: k.(string), Requests: c.requests.Load(), FailedRequests: c.failed.Load()}
		if role := c.role.Load(); role != nil {
			vs.Role = *role
		}
		s.Versions = append(s.Versions, vs)
		return true
	})
	sort.Slice(s.Versions, func(i, j int) bool { return s.Versions[i].Version < s.Versions[j].Version })
	if t := r.table.Load(); t.byRole != nil {
		s.Live = t.byRole["live"]
	}
	return s
}
