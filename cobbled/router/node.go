package router

import (
	"context"
	"math"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/cobbled/wire"
)

// node is one serving node as the router sees it: its connection, its
// outstanding sub-requests and its recent latencies. Nodes are shared by
// successive routing tables while their id and address stay the same.
type node struct {
	id, addr string
	zone     atomic.Pointer[string]
	conn     *grpc.ClientConn
	client   servepb.ServeClient
	wire     *wire.Client // with TransportWire: sub-requests go here

	latencyMetric prometheus.Observer // router_node_latency_seconds{node=id}
	stallMetric   prometheus.Gauge    // router_node_stall_ratio{node=id}

	outstanding atomic.Int64
	ewmaNanos   atomic.Int64 // smoothed latency of answered sub-requests
	lastObs     atomic.Int64 // unix nanos of the last answered sub-request
	ejectUntil  atomic.Int64 // unix nanos; avoided until then after a transport error
	redialAt    atomic.Int64 // unix nanos of the last ResetConnectBackoff (redial)
	failStreak  atomic.Int64

	// stalls is the smoothed share of the node's primaries that crossed
	// their hedge delay, as of stallAt (unix nanos); see stallRate.
	stallMu sync.Mutex
	stalls  float64
	stallAt int64

	lat     latencies              // every answered sub-request
	byClass [sizeClasses]latencies // by sizeClass of the sub-request's key count

	// counters for Stats
	rpcs, errs atomic.Int64

	// notServed remembers (version, partition) pairs the node answered
	// KEY_NOT_SERVED for, until a unix-nanos instant: while the table
	// still lists it as holding them (stale applied seqs, a publication
	// being rebuilt there), it is tried after the other replicas.
	notServed  sync.Map // notServedKey → int64
	notServedN atomic.Int64
}

type notServedKey struct {
	version string
	p       int
}

// markNotServed records that n does not serve (version, p) until until.
func (n *node) markNotServed(version string, p int, until time.Time) {
	if _, loaded := n.notServed.Swap(notServedKey{version, p}, until.UnixNano()); !loaded {
		n.notServedN.Add(1)
	}
}

// servesNot reports whether n recently answered that it does not serve
// (version, p).
func (n *node) servesNot(version string, p int, now int64) bool {
	if n.notServedN.Load() == 0 {
		return false
	}
	v, ok := n.notServed.Load(notServedKey{version, p})
	if !ok {
		return false
	}
	if now >= v.(int64) {
		if n.notServed.CompareAndDelete(notServedKey{version, p}, v) {
			n.notServedN.Add(-1)
		}
		return false
	}
	return true
}

func (r *Router) newNode(id, addr, zone string) (*node, error) {
	creds := insecure.NewCredentials()
	if r.opts.NodeTLS != nil {
		creds = credentials.NewTLS(r.opts.NodeTLS)
	}
	opts := append(servepb.DialOptions(0), grpc.WithTransportCredentials(creds))
	conn, err := grpc.NewClient(addr, append(opts, r.opts.DialOptions...)...)
	if err != nil {
		return nil, err
	}
	n := &node{id: id, addr: addr, conn: conn, client: servepb.NewServeClient(conn), latencyMetric: r.opts.Metrics.nodeLatency.WithLabelValues(id),
		stallMetric: r.opts.Metrics.nodeStalls.WithLabelValues(id)}
	if r.opts.Transport == TransportWire {
		n.wire = wire.NewClient(addr, wire.ClientOptions{Conns: r.opts.WireConns, TLS: r.opts.NodeTLS})
	}
	n.zone.Store(&zone)
	n.initLatencies(r.opts.LatencyWindow, r.opts.HedgeQuantile, r.opts.HedgeQuantileFull)
	return n, nil
}

// close closes the node's connections.
func (n *node) close() {
	n.conn.Close()
	if n.wire != nil {
		n.wire.Close()
	}
}

func (n *node) zoneName() string { return *n.zone.Load() }

// redial reports whether the node's gRPC channel is not connected (in
// reconnect backoff, idle, or connecting), and wakes it out of its backoff
// to dial now, at most once per redialEvery (a read that finds every
// replica failed calls it: see gather.redial). Over the wire transport it
// reports false: that client dials on each send, with no backoff to wake.
func (n *node) redial(now int64) bool {
	if n.wire != nil {
		return false
	}
	switch n.conn.GetState() {
	case connectivity.TransientFailure, connectivity.Idle:
		if last := n.redialAt.Load(); now-last >= int64(redialEvery) && n.redialAt.CompareAndSwap(last, now) {
			n.conn.ResetConnectBackoff()
		}
		return true
	case connectivity.Connecting:
		return true
	}
	return false
}

// awaitDial waits, at most redialWait, for the node's channel to leave
// TRANSIENT_FAILURE after redial woke it: the dial starts on gRPC's own
// goroutine, and a call made before it has failed with the error of the
// previous dial. A call made once the channel is connecting waits for the
// dial's outcome (answered if the node is up, failed at once if refused).
func (n *node) awaitDial(ctx context.Context) {
	if n.conn.GetState() != connectivity.TransientFailure {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, redialWait)
	defer cancel()
	n.conn.WaitForStateChange(ctx, connectivity.TransientFailure)
}

// redialWait bounds awaitDial: a node that is still down fails the read
// that long after its last replica failed, instead of at once.
const redialWait = 300 * time.Millisecond

// redialEvery bounds how often reads that find every replica failed make
// a node's channel dial outside its backoff: during a long outage a
// stream of such reads costs one dial per node per interval.
const redialEvery = 100 * time.Millisecond

// ejected reports whether the node failed recently.
func (n *node) ejected(now int64) bool { return now < n.ejectUntil.Load() }

// initLatencies sizes the windows; q is the hedge quantile, qFull the one
// while the budget is full (Options.HedgeQuantileFull; 0: q).
func (n *node) initLatencies(window int, q, qFull float64) {
	n.lat.init(window, q, qFull)
	for i := range n.byClass {
		n.byClass[i].init(window, q, qFull)
	}
}

// sizeClasses: sub-requests of 1, 2-3, 4-7, 8-15, 16-31 and 32 or more keys
// are timed apart (a 32-key read of 50 KB values takes longer than a 1-key
// one: one quantile for both would hedge every large read, or no small one).
const sizeClasses = 6

func sizeClass(keys int) int { return min(bits.Len(uint(max(keys, 1)))-1, sizeClasses-1) }

// observe records an answered sub-request of keys keys that took d: d
// for the EWMA, ring (≤ d: see hedgeDelay) for the quantile windows.
func (n *node) observe(d, ring time.Duration, now time.Time, keys int) {
	n.failStreak.Store(0)
	n.ejectUntil.Store(0)
	n.lat.add(ring)
	n.byClass[sizeClass(keys)].add(ring)
	n.lastObs.Store(now.UnixNano())
	// EWMA with weight 1/8, good enough for choosing between two nodes.
	for {
		old := n.ewmaNanos.Load()
		next := int64(d)
		if old != 0 {
			next = old + (int64(d)-old)/8
		}
		if n.ewmaNanos.CompareAndSwap(old, next) {
			return
		}
	}
}

// fail records a transport-level failure: the node is avoided for
// base × 2^(streak-1), at most 8 × base.
func (n *node) fail(base time.Duration, now time.Time) {
	streak := min(n.failStreak.Add(1), 4)
	n.ejectUntil.Store(now.Add(base << (streak - 1)).UnixNano())
}

// score orders nodes for power-of-two choices: lower is better. The
// latency estimate is the node's recent median (its EWMA until the window
// has a median): a node slow now and then, whose tail hedging covers, keeps
// its share of the load, while a node slower across the board loses it. A
// node without samples counts as fast (so it gets some, and is then
// measured). The estimate of a node that has not answered for a while
// halves every idleHalfLife: a node that was slow once and then lost every
// choice is tried again and re-measured instead of being starved on stale
// data. Until a node has scoreSamples answers its estimate is at most 1 ms:
// one unlucky first answer (a stall) would otherwise price it out, and with
// a one-second half-life it would get almost nothing for seconds.
func (n *node) score(now int64, extra int) float64 {
	est := float64(n.lat.p50.Load())
	if est == 0 {
		est = float64(n.ewmaNanos.Load())
	}
	return n.gate(now, est) * float64(n.outstanding.Load()+1+int64(extra))
}

// level is the node's latency level without load, for telling a degraded
// node (slower on every request: a failing disk) from its peers: the lower
// of its recent median and its EWMA, so one stall (EWMA up, median not) does
// not mark a node degraded and a healed node (EWMA down within ~8 answers,
// the median only after half a window) is trusted again soon. The same
// sample gate and idle decay as score apply, so a node steered away from is
// probed again about once per idleHalfLife and re-measured.
func (n *node) level(now int64) float64 {
	p50, ewma := float64(n.lat.p50.Load()), float64(n.ewmaNanos.Load())
	est := p50
	if est == 0 || (ewma != 0 && ewma < est) {
		est = ewma
	}
	return n.gate(now, est)
}

// gate applies the sample gate (at most 1 ms until scoreSamples answers; a
// node without samples counts as 1 ms) and the idle decay to an estimate.
func (n *node) gate(now int64, est float64) float64 {
	if est == 0 || (n.lat.count.Load() < scoreSamples && est > float64(time.Millisecond)) {
		est = float64(time.Millisecond)
	}
	if last := n.lastObs.Load(); last != 0 && now-last > int64(idleHalfLife/10) {
		est *= math.Exp2(-float64(now-last) / float64(idleHalfLife))
	}
	return est
}

// recordPrimary adds one primary sub-request's outcome to the stall rate:
// stalled when its hedge delay passed before it was answered.
func (n *node) recordPrimary(stalled bool, now int64) {
	x := 0.0
	if stalled {
		x = 1
	}
	n.stallMu.Lock()
	cur := n.decayedStalls(now)
	n.stalls = cur + (x-cur)/stallWindow
	n.stallAt = now
	v := n.stalls
	n.stallMu.Unlock()
	n.stallMetric.Set(v)
}

// stallRate is the smoothed share of the node's recent primaries that
// crossed their hedge delay: an EWMA over about stallWindow primaries,
// halving every stallHalfLife without one. A healthy node sits near
// 1 − HedgeQuantileFull by construction (its hedge delay is its own tail);
// a node that stalls on more of its primaries than the hedge budget can
// hedge (a lossy link: every lost tail packet waits out a 200 ms TCP
// retransmission timeout) is steered away from by pick, because hedging
// alone would run out of tokens and the stalls past the budget would set
// the p99. The decay is the probe: a node steered away from gets few
// primaries, and once its rate has halved below the bar it takes its
// zone's traffic again and is re-measured.
func (n *node) stallRate(now int64) float64 {
	n.stallMu.Lock()
	defer n.stallMu.Unlock()
	return n.decayedStalls(now)
}

func (n *node) decayedStalls(now int64) float64 {
	if n.stallAt == 0 || now <= n.stallAt {
		return n.stalls
	}
	return n.stalls * math.Exp2(-float64(now-n.stallAt)/float64(stallHalfLife))
}

// degradedAgainst reports whether a node at latency level lvl is degraded
// next to the best level among its peers: above degradedRatio × best +
// degradedMargin. Comparable nodes (a busy machine's ordinary spread) stay
// together, so the caller's zone keeps its preference among them.
func degradedAgainst(lvl, best float64) bool {
	return lvl > degradedRatio*best+float64(degradedMargin)
}

const (
	degradedRatio  = 1.5
	degradedMargin = time.Millisecond
)

const (
	// stallWindow is the EWMA weight's inverse: a healthy node at 1.5%
	// stalls stays under a 4.5% bar (its rate's spread is about 0.8%
	// over 128 primaries), and a node stalling on 30% crosses it within
	// about 15.
	stallWindow   = 128
	stallHalfLife = 2 * time.Second
)

const (
	idleHalfLife = time.Second
	scoreSamples = 8
)

// latencies is a ring of a node's recent answered sub-request latencies and
// the quantiles computed from it every few samples (sorting 512 durations
// per request would cost more than the request).
type latencies struct {
	mu     sync.Mutex
	ring   []time.Duration
	next   int
	filled bool
	since  int // samples since the last recomputation
	q      float64
	qFull  float64 // ≤ q

	hedgeQ, hedgeQFull, p50, p99 atomic.Int64 // nanos; 0 until enough samples
	count                        atomic.Int64
}

func (l *latencies) init(window int, q, qFull float64) {
	l.ring = make([]time.Duration, window)
	l.q = q
	l.qFull = min(q, qFull)
	if qFull <= 0 {
		l.qFull = q
	}
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ring[l.next] = d
	l.next++
	if l.next == len(l.ring) {
		l.next, l.filled = 0, true
	}
	l.count.Add(1)
	l.since++
	if l.since >= 16 || (!l.filled && l.next <= 64) {
		l.since = 0
		l.recompute()
	}
}

func (l *latencies) recompute() {
	n := l.next
	if l.filled {
		n = len(l.ring)
	}
	s := slices.Clone(l.ring[:n])
	slices.Sort(s)
	at := func(q float64) int64 {
		i := int(math.Ceil(q*float64(n))) - 1
		return int64(s[max(0, min(i, n-1))])
	}
	l.hedgeQ.Store(at(l.q))
	l.hedgeQFull.Store(at(l.qFull))
	l.p50.Store(at(0.50))
	l.p99.Store(at(0.99))
}

// hedgeDelay is how long a sub-request of keys keys to n may go unanswered
// before it is an outlier, and hedged: the HedgeQuantile of n's recent
// latencies for that size class (HedgeQuantileFull while the budget holds
// at least half its bank), and at least HedgeOutlier × that class's
// median, clamped to [HedgeMinDelay, HedgeMaxDelay]. A size class with
// fewer than MinSamples latencies uses the node's latencies of every size;
// a node with fewer, HedgeInitialDelay. keys ≤ 0 asks for the node's delay
// over every size (for Stats).
//
// So the budget goes to outliers only: with the default p99 a healthy node
// asks for about 1% hedges, and the rest of the budget waits for a node
// whose requests turn slow now and then, which is what hedging is for. (At
// p95 of everything, a healthy node's ordinary tail spent the budget.) The
// median floor keeps a node that is slower across the board (degraded)
// from being hedged wholesale: replica choice moves traffic off it instead.
//
// What the windows hold decides whether the bar stays where the outliers
// begin:
//   - A primary that lost to its hedge is cancelled and its latency never
//     recorded. Recording it (it is at least the hedge delay) would drag the
//     quantile up to the delay itself, and the slow tail the hedge exists
//     for would stop being hedged.
//   - A primary whose delay passed with no hedge sent for it (the budget
//     refused: a burst of stalls; or no other replica) is recorded as at
//     most the delay it had. Recorded in full, a burst of stalls over 1% of
//     the window would become the node's p99, hedges would then fire too
//     late to win, and more stalls would be recorded: the bar would climb
//     to the stall and stay there. Capped, the stalls hold the bar where it
//     was until they leave the window.
//   - A primary that answered before its hedge (the hedge lost) is recorded
//     in full: that is the node's own tail, and the way the bar rises when
//     the node slows down for real.
//
// The bar is the node's own, not its peers': an earlier version lowered it
// to a peer's quantile when that was lower (to break the stall loop above),
// but with the router in the slow node's zone the peers serve only hedges
// and are unloaded, so their p99 sat under the busy node's ordinary tail,
// which then crossed the bar on top of the stalls and spent the budget
// (clients4-wire-10: 236 hedges denied).
func (r *Router) hedgeDelay(n *node, keys int) time.Duration {
	minN := int64(r.opts.MinSamples)
	l := &n.lat
	if keys > 0 {
		if c := &n.byClass[sizeClass(keys)]; c.count.Load() >= minN {
			l = c
		}
	}
	if l.count.Load() < minN {
		return r.opts.HedgeInitialDelay
	}
	q := time.Duration(l.hedgeQ.Load())
	if r.budget != nil && r.budget.level() >= r.opts.HedgeBurst/2 {
		q = time.Duration(l.hedgeQFull.Load()) // tokens to spare: a lower bar
	}
	d := max(q, time.Duration(r.opts.HedgeOutlier*float64(l.p50.Load())))
	return min(max(d, r.opts.HedgeMinDelay), r.opts.HedgeMaxDelay)
}
