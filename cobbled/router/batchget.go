package router

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/cobbled/wire"
	"github.com/pillarkit/pillar/internal/clock"
	"github.com/pillarkit/pillar/internal/keyfmt"
	"github.com/pillarkit/pillar/internal/servelimit"
	"github.com/pillarkit/pillar/pillar"
)

// Result is one key's outcome. Found=false with Err=nil means the key's
// partition answered and the key is absent. Err is set only when every
// usable replica of the key's partition failed, or the deadline passed
// before one answered. Value may be shared by duplicate keys of a request:
// do not modify it.
type Result struct {
	Found bool
	Value []byte
	Err   error
}

// Attempt kinds.
const (
	kindPrimary = iota
	kindHedge
	kindFailover
)

var kindNames = [...]string{"primary", "hedge", "failover"}

// part is one partition's share of a request.
type part struct {
	p        int
	keys     [][]byte // distinct keys, in first-seen order (a slice of gather.flat)
	off      int      // keys' offset in gather.flat
	tried    []*node
	allow    []bool // per replica of the partition: may serve the request's version (nil: all)
	inflight int    // attempts in flight that cover it
	done     bool
	err      error // final error (the partition failed)
	lastErr  error
	res      []*servepb.Result
	redialed bool // had its round on replicas in reconnect backoff (gather.redial)
}

func (pt *part) open() bool { return !pt.done && pt.err == nil }

// attempt is one sub-request: a set of partitions sent to one node.
type attempt struct {
	n         *node
	parts     []*part
	kind      int
	cancel    context.CancelFunc // gRPC: ends its context
	call      *wire.Call         // wire: the call to cancel
	timer     stopFunc           // the hedge timer (primaries)
	over      bool               // answered, failed or cancelled
	cancelled bool               // cancelled by the router (it lost, or the request ended)
	won       bool
	keys      int // keys sent
	start     time.Time
	delay     time.Duration // the hedge delay it was given (primaries)
	deferred  bool          // its hedge was put off once (onHedgeTimer)
	// uncovered: its hedge timer fired and some of its partitions got no
	// hedge (the budget refused, or no other replica): its latency is
	// recorded for the hedge quantile as at most its delay (hedgeDelay).
	uncovered bool
	rescue    bool // a rescue is armed (armRescue)
	stalled   bool // its hedge delay passed unanswered (counted in node.stallRate)
}

type event struct {
	a      *attempt
	hedge  bool // the hedge timer fired
	rescue bool // the rescue timer fired (armRescue)
	resp   *servepb.BatchGetResponse
	err    error
	d      time.Duration
	at     time.Time // when the answer was read (Options.ReadTrace only)
}

// gather runs one BatchGet: the attempts, their events and every decision
// about them happen on the calling goroutine; the RPCs and hedge timers only
// send events to it, so the state below needs no lock.
type gather struct {
	r        *Router
	t        *table
	c        choice // the request's version (versions.go)
	ctx      context.Context
	ev       chan event
	quit     chan struct{}
	parts    []*part
	at       []keyAt  // per request position: its part and key
	flat     [][]byte // the distinct keys, partition by partition (parts' keys alias it)
	live     []*attempt
	open     int         // parts neither done nor failed
	assigned []nodeCount // primaries' partitions per node (pick's load term)
	counts   [3]int
	won      int
	// hedgeWait sums the time primaries had waited when hedged, hedgeDelay
	// the delays they had been given; hedgeWonTime the latencies of the
	// hedges that won (Stats).
	hedgeWait, hedgeDelay, hedgeWonTime time.Duration
	deferred                            int                         // hedges put off by a late timer (Stats.HedgesDeferred)
	held                                []*servepb.BatchGetResponse // answers some result aliases (Response.Release)
	tr                                  *ReadStages                 // Options.ReadTrace's record, else nil
}

// keyAt is where one request position's key is: its part and index there.
type keyAt struct {
	pt *part
	j  int
}

type nodeCount struct {
	n *node
	k int
}

// assignedTo is how many of this request's partitions went to n as primaries.
func (g *gather) assignedTo(n *node) int {
	for _, a := range g.assigned {
		if a.n == n {
			return a.k
		}
	}
	return 0
}

func (g *gather) assign(n *node) {
	for i := range g.assigned {
		if g.assigned[i].n == n {
			g.assigned[i].k++
			return
		}
	}
	g.assigned = append(g.assigned, nodeCount{n, 1})
}

// ReadStages is where one Read's time went along its first answer's path
// (Options.ReadTrace), in wall-clock stamps: Start; Split (keys grouped by
// partition); Picked (replicas chosen); Armed (the first primary's hedge
// timer set); Sent (its sub-request written, over wire, or handed to its
// goroutine, over gRPC); Answered (the first primary answer read off the
// connection); Received (the gather loop holding it); End. A stage a Read
// did not reach is zero. Attempts counts its sub-requests (primaries,
// hedges, retries).
type ReadStages struct {
	Start, Split, Picked, Armed, Sent, Answered, Received, End time.Time
	Attempts                                                   int
}

// BatchGet returns one Result per key, in request order, read from the
// default version (Options.Version, by default the live publication, with
// the A/B split): Read with no options.
func (r *Router) BatchGet(ctx context.Context, keys [][]byte) ([]Result, error) {
	resp, err := r.Read(ctx, keys, nil)
	if resp == nil {
		return nil, err
	}
	return resp.Results, err
}

// Response is one Read's answer: the results and the one version they
// were all read from.
type Response struct {
	Results []Result
	// Version is the concrete publication id read ("" = the unnamed
	// legacy one); Role its role in the routing table used.
	Version, Role string

	held []*servepb.BatchGetResponse
}

// Release gives the buffers the values alias (the nodes' answers, read into
// pooled buffers by the transport) back for reuse; no Result value may be
// used afterwards (Results is cleared). It saves a large allocation per
// request (~600 KB for 12 keys of ~50 KB: its zeroing, its fresh pages and
// the collection it brings on). Calling it is optional (an unreleased
// Response is left to the garbage collector) and safe more than once.
func (r *Response) Release() {
	for _, x := range r.held {
		servepb.Release(x)
	}
	r.held, r.Results = nil, nil
}

// Read returns one Result per key, in request order, all read from one
// version (see versions.go; ro nil = the defaults). Keys are raw 16-byte
// page keys; duplicates are answered per position. It returns an error
// wrapping ErrEmpty, ErrTooManyKeys or ErrBadKey for a bad request (and
// no response), and otherwise every result, with an error wrapping the
// first key's failure (ErrVersion, ErrUnavailable, ErrNoReplica,
// context.DeadlineExceeded, …) when some keys failed. Without a deadline
// in ctx, Options.Timeout applies. It is safe for concurrent use.
func (r *Router) Read(ctx context.Context, keys [][]byte, ro *ReadOptions) (*Response, error) {
	clk := r.opts.Clock
	start := clk.Now()
	m := r.opts.Metrics
	if err := r.check(keys, ro); err != nil {
		m.requests.WithLabelValues("invalid").Inc()
		return nil, err
	}
	if r.closed.Load() {
		return nil, ErrClosed
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = clk.WithTimeout(ctx, r.opts.Timeout)
		defer cancel()
	}
	if r.opts.Transport != TransportWire {
		// gRPC attempts run on contexts of their own under this one. Over
		// wire there are none: the gather loop cancels every call it
		// leaves in flight (run), with no context registration per call.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel() // every attempt still in flight (the losers) ends here
	}

	t := r.table.Load() // one table, so one version, for the whole request
	g := &gather{r: r, t: t, c: r.resolve(t, ro), ctx: ctx, ev: make(chan event, 4), quit: make(chan struct{})}
	if trace := r.opts.ReadTrace; trace != nil {
		g.tr = &ReadStages{Start: time.Now()}
		defer func() {
			g.tr.End = time.Now()
			g.tr.Attempts = g.counts[0] + g.counts[1] + g.counts[2]
			trace(g.tr)
		}()
	}
	defer close(g.quit)
	g.split(keys)
	if g.tr != nil {
		g.tr.Split = time.Now()
	}
	g.run()

	out := make([]Result, len(keys))
	var failed int
	for i, at := range g.at {
		if pt := at.pt; pt.done {
			out[i] = Result{Found: pt.res[at.j].Found, Value: pt.res[at.j].Value}
		} else {
			out[i].Err = pt.err
			failed++
		}
	}
	var first error // the first failed partition's (in partition order)
	for _, pt := range g.parts {
		if !pt.done {
			first = pt.err
			break
		}
	}
	r.account(g, len(keys), failed, clock.Since(clk, start))
	resp := &Response{Results: out, Version: g.c.id, Role: g.c.role, held: g.held}
	if failed > 0 {
		return resp, fmt.Errorf("router: %d of %d keys failed: %w", failed, len(keys), first)
	}
	return resp, nil
}

// maxVersionLen bounds a request's version (publication ids are short).
const maxVersionLen = servelimit.MaxFieldBytes

func (r *Router) check(keys [][]byte, ro *ReadOptions) error {
	if ro != nil && len(ro.Version) > maxVersionLen {
		return fmt.Errorf("router: BatchGet: version of %d bytes, over the limit of %d: %w", len(ro.Version), maxVersionLen, ErrBadVersion)
	}
	if len(keys) == 0 {
		return fmt.Errorf("router: BatchGet: %w", ErrEmpty)
	}
	if len(keys) > r.opts.MaxKeys {
		return fmt.Errorf("router: BatchGet: %d keys, over the limit of %d: %w", len(keys), r.opts.MaxKeys, ErrTooManyKeys)
	}
	for i, k := range keys {
		if len(k) != pillar.KeySize {
			return fmt.Errorf("router: BatchGet: key %d: %s, want %d: %w", i, keyfmt.Short(k), pillar.KeySize, ErrBadKey)
		}
	}
	return nil
}

// smallKeys: a request of at most this many keys is split without maps
// (folding duplicates by comparing keys, ~12 × 12 16-byte compares, is
// cheaper than hashing them into a map it allocates).
const smallKeys = 32

// split groups keys by partition (partitions in increasing order, keys in
// first-seen order, duplicates folded into one key with several positions).
// Every part's keys are one slice of g.flat, so a sub-request for
// neighbouring parts (a request that maps to one node: all of them) sends
// that slice as it is.
func (g *gather) split(keys [][]byte) {
	type dkey struct{ i, p int } // a distinct key: its first position, its partition
	ds := make([]dkey, 0, len(keys))
	dOf := make([]int, len(keys)) // position → distinct key
	if len(keys) <= smallKeys {
		for i, k := range keys {
			d := -1
			for x := range ds {
				if string(keys[ds[x].i]) == string(k) {
					d = x
					break
				}
			}
			if d < 0 {
				d = len(ds)
				ds = append(ds, dkey{i, pillar.Partition(k, g.t.partitions)})
			}
			dOf[i] = d
		}
	} else {
		seen := make(map[pillar.Key]int, len(keys))
		for i, k := range keys {
			d, ok := seen[pillar.Key(k)]
			if !ok {
				d = len(ds)
				ds = append(ds, dkey{i, pillar.Partition(k, g.t.partitions)})
				seen[pillar.Key(k)] = d
			}
			dOf[i] = d
		}
	}
	ord := make([]int, len(ds))
	for i := range ord {
		ord[i] = i
	}
	slices.SortStableFunc(ord, func(a, b int) int { return ds[a].p - ds[b].p })
	g.flat = make([][]byte, len(ds))
	ps := make([]part, 0, len(ds)) // never grows: the pointers below stay valid
	where := make([]keyAt, len(ds))
	for x, d := range ord {
		g.flat[x] = keys[ds[d].i]
		if len(ps) == 0 || ps[len(ps)-1].p != ds[d].p {
			ps = append(ps, part{p: ds[d].p, off: x})
		}
		pt := &ps[len(ps)-1]
		where[d] = keyAt{pt, x - pt.off}
	}
	g.parts = make([]*part, len(ps))
	for i := range ps {
		pt := &ps[i]
		end := len(g.flat)
		if i+1 < len(ps) {
			end = ps[i+1].off
		}
		pt.keys = g.flat[pt.off:end:end]
		g.parts[i] = pt
	}
	g.at = make([]keyAt, len(keys))
	for i, d := range dOf {
		g.at[i] = where[d]
	}
	g.open = len(g.parts)
}

// nodeParts is the partitions one sub-request sends to a node.
type nodeParts struct {
	n     *node
	parts []*part
}

// addTo puts pt in n's group (a new one at the end if n has none).
func addTo(gs []nodeParts, n *node, pt *part, room int) []nodeParts {
	for i := range gs {
		if gs[i].n == n {
			gs[i].parts = append(gs[i].parts, pt)
			return gs
		}
	}
	return append(gs, nodeParts{n, append(make([]*part, 0, room), pt)})
}

// nodesOf lists the groups' nodes, in order (pick's prefer).
func nodesOf(gs []nodeParts, buf []*node) []*node {
	buf = buf[:0]
	for _, x := range gs {
		buf = append(buf, x.n)
	}
	return buf
}

func (g *gather) run() {
	// Primaries: a replica per partition, grouped by node. Unless Spread,
	// a node already chosen for this request is preferred when it is among
	// a partition's best choices, so the request goes to as few nodes as
	// the replicas allow.
	var groups []nodeParts
	var order []*node
	for i, pt := range g.parts {
		if g.c.err != nil {
			g.fail(pt, g.c.err)
			continue
		}
		allow, err := g.versionFilter(pt.p)
		if err != nil {
			g.fail(pt, err)
			continue
		}
		pt.allow = allow
		var prefer []*node
		if !g.r.opts.Spread {
			prefer = order
		}
		n := g.pick(pt, prefer)
		if n == nil {
			g.fail(pt, g.noReplica(pt))
			continue
		}
		groups = addTo(groups, n, pt, len(g.parts)-i)
		order = nodesOf(groups, order)
		g.assign(n)
	}
	if g.tr != nil {
		g.tr.Picked = time.Now()
	}
	for _, x := range groups {
		g.launch(x.n, x.parts, kindPrimary)
	}
	for g.open > 0 {
		select {
		case e := <-g.ev:
			if g.tr != nil && !e.hedge && g.tr.Received.IsZero() {
				g.tr.Answered, g.tr.Received = e.at, time.Now()
			}
			if e.rescue {
				g.onRescue(e.a)
			} else if e.hedge {
				g.onHedgeTimer(e.a)
			} else {
				g.onAnswer(e)
			}
			g.cancelFinished()
		case <-g.ctx.Done():
			g.abort(g.ctx.Err())
		}
	}
	for _, a := range g.live {
		g.stop(a) // the request is over: cancel what is left
	}
}

// launch sends parts to n as one sub-request.
func (g *gather) launch(n *node, parts []*part, kind int) {
	r := g.r
	contiguous := true // parts' keys neighbours in g.flat: send that slice as it is
	nk := 0
	for i, pt := range parts {
		pt.tried = append(pt.tried, n)
		pt.inflight++
		if i > 0 && pt.off != parts[i-1].off+len(parts[i-1].keys) {
			contiguous = false
		}
		nk += len(pt.keys)
	}
	var keys [][]byte
	if contiguous {
		keys = g.flat[parts[0].off : parts[0].off+nk : parts[0].off+nk]
	} else {
		keys = make([][]byte, 0, nk)
		for _, pt := range parts {
			keys = append(keys, pt.keys...)
		}
	}
	a := &attempt{n: n, parts: parts, kind: kind, keys: nk}
	g.live = append(g.live, a)
	g.counts[kind]++
	r.opts.Metrics.rpcsBy[kind].Inc()
	n.rpcs.Add(1)
	n.outstanding.Add(1)
	if kind == kindPrimary {
		r.budget.earn()
		if !r.opts.DisableHedging {
			a.delay = r.hedgeDelay(n, len(keys))
			a.timer = r.afterFunc(a.delay, func() { g.send(event{a: a, hedge: true}) })
		}
	}
	if g.tr != nil && g.tr.Armed.IsZero() {
		g.tr.Armed = time.Now()
	}
	req := &servepb.BatchGetRequest{Keys: keys, Version: g.c.id}
	start := r.opts.Clock.Now()
	a.start = start
	var launched atomic.Bool
	done := func(resp *servepb.BatchGetResponse, err error) {
		n.outstanding.Add(-1)
		e := event{a: a, resp: resp, err: err, d: clock.Since(r.opts.Clock, start)}
		if g.tr != nil {
			e.at = time.Now()
		}
		if !launched.Load() {
			go g.send(e) // answered inside Go, on this goroutine: never block the loop on itself
			return
		}
		g.send(e)
	}
	if n.wire != nil && !n.wire.Ready() {
		// No live connection: Send would dial on this goroutine, and a node
		// gone silent would hold the dial, and with it this request's loop
		// (its hedge timers, every other answer), until the deadline. Send
		// from a goroutine with a context of its own instead, as over gRPC:
		// stop cancels the dial or the call.
		actx, cancel := context.WithCancel(g.ctx)
		a.cancel = cancel
		launched.Store(true)
		go n.wire.Send(actx, req, done)
		return
	}
	if n.wire != nil {
		// Pipelined on the node's connections; the answer is posted from
		// the connection's reader: no goroutine per sub-request, and no
		// context of its own: the request's gives the deadline, and stop
		// cancels the call.
		a.call = n.wire.Send(g.ctx, req, done)
		launched.Store(true)
		if g.tr != nil && g.tr.Sent.IsZero() {
			g.tr.Sent = time.Now()
		}
		return
	}
	woken := false // the parts' round on replicas in reconnect backoff (gather.redial)
	for _, pt := range parts {
		woken = woken || pt.redialed
	}
	actx, cancel := context.WithCancel(g.ctx)
	a.cancel = cancel
	launched.Store(true)
	go func() {
		if woken {
			n.awaitDial(actx)
		}
		done(n.client.BatchGet(actx, req, servepb.PooledCallOption()))
	}()
}

func (g *gather) send(e event) {
	select {
	case g.ev <- e:
	case <-g.quit:
		if e.resp != nil { // the request is over: nobody sees this answer
			servepb.Release(e.resp)
		}
	}
}

// stop ends an attempt that is no longer needed.
func (g *gather) stop(a *attempt) {
	if a.over {
		return
	}
	a.over, a.cancelled = true, true
	if a.call != nil {
		if a.call.Cancel() { // its done will not run
			a.n.outstanding.Add(-1)
		}
	} else if a.cancel != nil {
		a.cancel()
	}
	if a.timer != nil {
		a.timer()
	}
	for _, pt := range a.parts {
		pt.inflight--
	}
	g.r.opts.Metrics.cancelled.Inc()
	g.r.cancelled.Add(1)
}

func (g *gather) retireLive() {
	g.live = slices.DeleteFunc(g.live, func(a *attempt) bool { return a.over })
}

// cancelFinished cancels attempts all of whose partitions are settled: the
// losers of hedges and of failovers.
func (g *gather) cancelFinished() {
	for _, a := range g.live {
		if a.over {
			continue
		}
		if !slices.ContainsFunc(a.parts, (*part).open) {
			g.stop(a)
		}
	}
	g.retireLive()
}

func (g *gather) onAnswer(e event) {
	a := e.a
	used := false // some partition's results alias e.resp
	defer func() {
		if e.resp == nil {
			return
		}
		if used {
			g.held = append(g.held, e.resp)
		} else {
			servepb.Release(e.resp)
		}
	}()
	if a.over { // cancelled by us before the answer arrived
		return
	}
	a.over = true
	if a.cancel != nil {
		a.cancel()
	}
	if a.timer != nil {
		a.timer()
	}
	for _, pt := range a.parts {
		pt.inflight--
	}
	n, r := a.n, g.r
	err := e.err
	if err == nil {
		want := 0
		for _, pt := range a.parts {
			want += len(pt.keys)
		}
		if len(e.resp.Results) != want {
			err = fmt.Errorf("router: node %s answered %d results for %d keys", n.id, len(e.resp.Results), want)
		} else if v := e.resp.Version; v != g.c.id && (v != "" || g.c.pub != nil) {
			// Never a mix: a node that read another version (one from
			// before versions answers "" for the unnamed one) is an error.
			err = fmt.Errorf("router: node %s answered version %q, asked for %q: %w", n.id, v, g.c.id, ErrVersion)
		}
	}
	if err != nil {
		code := status.Code(err)
		if g.ctx.Err() != nil || (code == codes.DeadlineExceeded && g.nearDeadline()) {
			// The request's deadline passed (the node may notice it a little
			// before this process does): abort reports it.
			return
		}
		n.errs.Add(1)
		r.opts.Metrics.rpcErrors.WithLabelValues(n.id, code.String()).Inc()
		if code == codes.Unavailable || code == codes.DeadlineExceeded {
			n.fail(r.opts.EjectFor, r.opts.Clock.Now()) // unreachable, shutting down or stuck
			r.kick()                                    // the control plane may know already
		}
		werr := fmt.Errorf("node %s (%s): %w", n.id, n.addr, err)
		var again []*part
		for _, pt := range a.parts {
			if pt.open() {
				pt.lastErr = werr
				again = append(again, pt)
			}
		}
		g.failover(again)
		return
	}
	ring := e.d
	if a.uncovered {
		ring = min(ring, a.delay)
	}
	now := r.opts.Clock.Now()
	n.observe(e.d, ring, now, a.keys)
	if a.kind == kindPrimary && !a.stalled && !r.opts.DisableHedging {
		n.recordPrimary(false, now.UnixNano())
	}
	n.latencyMetric.Observe(e.d.Seconds())
	off := 0
	var again []*part
	for _, pt := range a.parts {
		rs := e.resp.Results[off : off+len(pt.keys)]
		off += len(pt.keys)
		if !pt.open() {
			continue
		}
		if perr := partStatus(rs); perr != nil {
			if errors.Is(perr, ErrNotServed) {
				r.kick() // the table is stale
				n.markNotServed(g.c.id, pt.p, r.opts.Clock.Now().Add(r.opts.EjectFor))
			}
			pt.lastErr = fmt.Errorf("node %s (%s): partition %d: %w", n.id, n.addr, pt.p, perr)
			again = append(again, pt)
			continue
		}
		pt.res, pt.done = rs, true
		used = true
		g.open--
		if a.kind == kindHedge && !a.won {
			a.won = true
			g.won++
			g.hedgeWonTime += e.d
		}
	}
	g.failover(again)
}

// partStatus is the error of a partition's results on one node, if any key
// was not served or failed there.
func partStatus(rs []*servepb.Result) error {
	for _, x := range rs {
		switch x.Status {
		case servepb.KeyStatus_KEY_OK:
		case servepb.KeyStatus_KEY_NOT_SERVED:
			return fmt.Errorf("%s: %w", x.Error, ErrNotServed)
		default:
			return fmt.Errorf("%s: %w", x.Error, ErrKeyError)
		}
	}
	return nil
}

// failover sends parts that failed on a node to other replicas; a part with
// another attempt still in flight waits for it, and a part with no replica
// left fails.
func (g *gather) failover(parts []*part) {
	var todo []*part
	for _, pt := range parts {
		if pt.open() && pt.inflight == 0 {
			todo = append(todo, pt)
		}
	}
	if len(todo) == 0 {
		return
	}
	groups, left := g.group(todo)
	if len(left) > 0 {
		again, rest := g.redial(left)
		more, still := g.group(again)
		groups, left = append(groups, more...), append(rest, still...)
	}
	for _, pt := range left {
		g.fail(pt, fmt.Errorf("router: partition %d: every replica failed (%d tried), last: %w: %w", pt.p, len(pt.tried), pt.lastErr, ErrUnavailable))
	}
	for _, x := range groups {
		g.r.opts.Metrics.failovers.Inc()
		g.launch(x.n, x.parts, kindFailover)
	}
}

// redial gives parts that have no replica left one more round on the
// replicas whose gRPC channel was in reconnect backoff (node.redial wakes
// it): a call on such a channel fails at once with the error of its last
// dial, so a node that came back a moment ago (a restart: gRPC retries
// after up to grpclink.RedialMax) would fail the read although it is up.
// It returns the parts to group again and the rest, which fail; a part
// gets the round once per request.
func (g *gather) redial(parts []*part) (again, rest []*part) {
	now := g.r.opts.Clock.Now().UnixNano()
	for _, pt := range parts {
		if pt.redialed {
			rest = append(rest, pt)
			continue
		}
		pt.redialed = true
		keep := pt.tried[:0:0]
		for _, n := range pt.tried {
			if !n.redial(now) {
				keep = append(keep, n)
			}
		}
		if len(keep) < len(pt.tried) {
			pt.tried = keep
			again = append(again, pt)
		} else {
			rest = append(rest, pt)
		}
	}
	return again, rest
}

// onHedgeTimer hedges the partitions of a primary that is still waiting,
// when the budget allows and another replica exists.
//
// A timer that comes late (by over half its delay, at least 1 ms) means
// this process, not only the node, was not running: the router's timers
// and its connections' readers stalled together, and the node's answer may
// be waiting unread. The hedge is then put off once, by a quarter of the
// delay (at least 500 µs), so the reader gets to deliver it first; a hedge
// sent then would spend the budget on the router's own stall, which no
// replica can cut, and leave none for the next outlier.
func (g *gather) onHedgeTimer(a *attempt) {
	if a.over {
		return
	}
	r := g.r
	if late := clock.Since(r.opts.Clock, a.start) - a.delay; !a.deferred && late > max(a.delay/2, time.Millisecond) {
		a.deferred = true
		g.deferred++
		a.timer = r.afterFunc(max(a.delay/4, 500*time.Microsecond), func() { g.send(event{a: a, hedge: true}) })
		return
	}
	var todo []*part
	for _, pt := range a.parts {
		if pt.open() && pt.inflight == 1 {
			todo = append(todo, pt)
		}
	}
	if len(todo) == 0 {
		return
	}
	a.stalled = true
	a.n.recordPrimary(true, r.opts.Clock.Now().UnixNano())
	groups, left := g.group(todo) // parts with no other replica just keep waiting
	a.uncovered = len(left) > 0
	m := g.r.opts.Metrics
	for _, x := range groups {
		if !g.r.budget.take() {
			m.hedgesDenied.Inc()
			g.r.denied.Add(1)
			a.uncovered = true
			g.armRescue(a)
			return
		}
		g.hedgeWait += clock.Since(g.r.opts.Clock, a.start)
		g.hedgeDelay += a.delay
		g.launch(x.n, x.parts, kindHedge)
	}
}

// armRescue arms a last resend of a primary whose hedge the budget refused,
// at half the time left to the request's deadline. A sub-request still
// unanswered then is most likely lost (a node or a link that went silent:
// packets dropped, no error to fail over on), and waiting longer fails the
// read at the deadline although another replica could answer. The resend
// goes outside the hedge budget, which caps tail trimming, not rescue of a
// read that would otherwise fail; it costs at most one sub-request per
// stalled primary. A request without a deadline, or with under 40 ms
// left, gets none.
func (g *gather) armRescue(a *attempt) {
	d, ok := g.ctx.Deadline()
	if !ok || a.rescue || a.over {
		return
	}
	left := time.Until(d) // a context deadline is on the wall clock (clock.Fake translates)
	if left < 40*time.Millisecond {
		return
	}
	a.rescue = true
	a.timer = g.r.afterFunc(left/2, func() { g.send(event{a: a, rescue: true}) })
}

// onRescue resends the open partitions of a stalled primary to replicas not
// tried yet, as a failover (see armRescue).
func (g *gather) onRescue(a *attempt) {
	if a.over {
		return
	}
	var todo []*part
	for _, pt := range a.parts {
		if pt.open() && pt.inflight == 1 {
			todo = append(todo, pt)
		}
	}
	if len(todo) == 0 {
		return
	}
	// Presumed lost: the node is avoided as after a transport error, until
	// it answers again.
	a.n.fail(g.r.opts.EjectFor, g.r.opts.Clock.Now())
	g.r.kick() // the control plane may know already
	groups, _ := g.group(todo)
	for _, x := range groups {
		g.r.opts.Metrics.failovers.Inc()
		g.launch(x.n, x.parts, kindFailover)
	}
}

// group picks a replica for each part (one not tried yet), putting parts on
// a node already chosen in this call when it is among their best choices, so
// a hedge or failover is one sub-request where the replicas allow. Parts
// without a replica come back in left.
func (g *gather) group(parts []*part) ([]nodeParts, []*part) {
	var groups []nodeParts
	var order []*node
	var left []*part
	for i, pt := range parts {
		n := g.pick(pt, order)
		if n == nil {
			left = append(left, pt)
			continue
		}
		groups = addTo(groups, n, pt, len(parts)-i)
		order = nodesOf(groups, order)
	}
	return groups, left
}

// pick chooses a replica of pt not tried yet: among the usable (up, not
// lagging) replicas, the caller's zone first, then other zones, then
// degraded nodes (latency level above 1.5 × the best candidate's + 1 ms,
// both with MinSamples answers: slower on every request, which replica
// choice, not hedging, must steer away from) and stalling ones (a share of
// primaries past their hedge delay above Options.StallRatio: more outliers
// than the hedge budget covers), and nodes that failed recently
// (or answered "not served" for this version and partition) last; within
// the first non-empty tier, a node in prefer if there is one, else the better of two
// random choices by latency × load.
func (g *gather) pick(pt *part, prefer []*node) *node {
	now := g.r.opts.Clock.Now().UnixNano()
	var tiers [4][]*node
	var cand [8]*node
	var lvls [8]float64
	c := cand[:0]
	lv := lvls[:0]
	best := math.Inf(1)
	minN := int64(g.r.opts.MinSamples)
	for i, rep := range g.t.reps[pt.p] {
		if !rep.eligible || slices.Contains(pt.tried, rep.node) || (pt.allow != nil && !pt.allow[i]) {
			continue
		}
		if rep.node.ejected(now) || rep.node.servesNot(g.c.id, pt.p, now) {
			tiers[3] = append(tiers[3], rep.node) // failed recently, or answered "not served" for this version here
			continue
		}
		l := math.NaN() // not measured enough to compare
		if rep.node.lat.count.Load() >= minN {
			l = rep.node.level(now)
			best = min(best, l)
		}
		c, lv = append(c, rep.node), append(lv, l)
	}
	for i, n := range c {
		tier := 1
		switch {
		case !math.IsNaN(lv[i]) && degradedAgainst(lv[i], best):
			tier = 2 // slower across the board than a peer: steer away
		case g.r.opts.StallRatio >= 0 && n.stallRate(now) > g.r.opts.StallRatio:
			tier = 2 // stalls more often than hedging can cover: steer away
		case g.r.opts.Zone != "" && n.zoneName() == g.r.opts.Zone:
			tier = 0
		}
		tiers[tier] = append(tiers[tier], n)
	}
	for _, c := range tiers {
		if len(c) == 0 {
			continue
		}
		for _, n := range prefer {
			if slices.Contains(c, n) {
				return n
			}
		}
		if len(c) == 1 {
			return c[0]
		}
		i := rand.IntN(len(c))
		j := rand.IntN(len(c) - 1)
		if j >= i {
			j++
		}
		if c[j].score(now, g.assignedTo(c[j])) < c[i].score(now, g.assignedTo(c[i])) {
			return c[j]
		}
		return c[i]
	}
	return nil
}

// noReplica explains why a partition has no usable replica.
func (g *gather) noReplica(pt *part) error {
	reps := g.t.reps[pt.p]
	if len(reps) == 0 {
		return fmt.Errorf("router: partition %d: no replicas in routing version %d: %w", pt.p, g.t.version, ErrNoReplica)
	}
	var why []string
	for i, rep := range reps {
		switch {
		case !rep.eligible:
			why = append(why, rep.why)
		case pt.allow != nil && !pt.allow[i]:
			why = append(why, fmt.Sprintf("node %s does not hold version %q", rep.node.id, g.c.id))
		}
	}
	ver := ""
	if g.c.pub != nil {
		ver = fmt.Sprintf(" version %q:", g.c.id)
	}
	return fmt.Errorf("router: partition %d:%s no usable replica (%s): %w", pt.p, ver, strings.Join(why, "; "), ErrNoReplica)
}

func (g *gather) fail(pt *part, err error) {
	if !pt.open() {
		return
	}
	pt.err = err
	g.open--
}

// nearDeadline reports whether the request's deadline is at most a few
// milliseconds away: a node's DEADLINE_EXCEEDED then means that deadline,
// not a stuck node, and is neither failed over nor held against the node.
func (g *gather) nearDeadline() bool {
	d, ok := g.ctx.Deadline()
	return ok && time.Until(d) < 20*time.Millisecond // a context deadline is on the wall clock (clock.Fake translates)
}

// abort ends the request at its deadline (or cancellation).
func (g *gather) abort(cause error) {
	for _, pt := range g.parts {
		if pt.open() {
			names := make([]string, len(pt.tried))
			for i, n := range pt.tried {
				names[i] = n.id
			}
			g.fail(pt, fmt.Errorf("router: partition %d: no answer before the deadline (tried %s): %w", pt.p, strings.Join(names, ", "), cause))
		}
	}
}
