package netns

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/pillar"
)

// Scenario names.
const (
	ScenarioZoneCut       = "zone-cut"
	ScenarioRouterZoneCut = "router-zone-cut"
	ScenarioNoObjectStore = "no-object-store"
	ScenarioControlDown   = "control-down"
	ScenarioPostgresKill  = "postgres-kill"
	ScenarioPacketLoss    = "packet-loss"
	ScenarioNodeVanishes  = "node-vanishes"
)

// CatchUpBound is how long a zone cut off during a publication may take to
// catch up after the heal.
const CatchUpBound = 60 * time.Second

// Scenario is one seeded, bounded fault with its own promise, checked in
// CheckScenario besides the global checks.
type Scenario struct {
	Name    string
	Summary string
	run     func(ctx context.Context, r *run, res *ScenarioResult) (note string, err error)
}

// Scenarios are every scenario, in the order a run takes them.
var Scenarios = []*Scenario{
	{ScenarioZoneCut, "zone c cut off from the control plane and the object store while a new snapshot is published and promoted", zoneCut},
	{ScenarioRouterZoneCut, "the router cut off from zone a, its own zone", routerZoneCut},
	{ScenarioNoObjectStore, "a node reaches the control plane but not the object store", noObjectStore},
	{ScenarioControlDown, "the control plane down (killed), then restarted", controlDown},
	{ScenarioPostgresKill, "PostgreSQL killed (SIGKILL) during a burst of batch registrations, then restarted", postgresKill},
	{ScenarioPacketLoss, "5% random packet drop on a zone-a node's link", packetLoss},
	{ScenarioNodeVanishes, "a node's namespace deleted outright; a new node takes its assignments", nodeVanishes},
}

// ScenarioNames lists the scenario names.
func ScenarioNames() []string {
	var s []string
	for _, x := range Scenarios {
		s = append(s, x.Name)
	}
	return s
}

func scenarioByName(n string) *Scenario {
	for _, s := range Scenarios {
		if s.Name == n {
			return s
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// zoneCut: zone c loses the control plane and the object store while the
// next publication is published and promoted. Zones a and b serve it; zone
// c keeps serving its last complete publication (direct reads of it must
// succeed and be right) and the router never reads the new one there; after
// the heal it catches up within CatchUpBound.
func zoneCut(ctx context.Context, r *run, res *ScenarioResult) (string, error) {
	cut := r.d(30*time.Second, 12*time.Second)
	zc := r.zoneNodes("c")
	if len(zc) == 0 {
		return "", fmt.Errorf("no node in zone c")
	}
	old := r.live
	for _, n := range zc {
		if err := n.h.cut(r.c.ctlHost.ip, r.c.s3Host.ip); err != nil {
			return "", err
		}
	}
	start := time.Now()
	stopDirect := make(chan struct{})
	directDone := make(chan int)
	go func() { directDone <- r.readDirect(ctx, zc[0], old, res.Window, stopDirect) }()
	if err := sleep(ctx, cut/4); err != nil {
		return "", err
	}
	if err := r.publishNext(ctx); err != nil {
		return "", err
	}
	pub := fmt.Sprintf("netns/v%d", r.pubN)
	// Zones a and b apply it; then the operator promotes it by force (zone c
	// cannot hold it).
	if err := r.waitHeld(ctx, pub, func(n string) bool { return r.nodeByID(n).zone != "c" }, time.Minute); err != nil {
		return "", err
	}
	if err := r.promote(ctx, pub); err != nil {
		return "", err
	}
	promoted := time.Since(start)
	if rest := cut - time.Since(start); rest > 0 {
		if err := sleep(ctx, rest); err != nil {
			return "", err
		}
	}
	if err := sleep(ctx, 3*time.Second); err != nil { // reads of the new version while c is still cut
		return "", err
	}
	// While cut, zone c never held the new publication.
	if held, err := r.holds(ctx, pub, zc[0].id); err != nil {
		return "", err
	} else if held {
		r.h.Violate(CheckScenario, "%s: %s holds %s while cut off from the object store", res.Window, zc[0].id, pub)
	}
	close(stopDirect)
	direct := <-directDone
	for _, n := range zc {
		if err := n.h.heal(); err != nil {
			return "", err
		}
	}
	healed := time.Now()
	if err := r.waitHeld(ctx, pub, func(string) bool { return true }, CatchUpBound); err != nil {
		r.h.Violate(CheckScenario, "%s: zone c did not catch up within %s of the heal: %v", res.Window, CatchUpBound, err)
	}
	catchUp := time.Since(healed)
	res.Metrics = map[string]string{"cut": cut.String(), "promoted after": promoted.Round(time.Millisecond).String(),
		"zone c catch-up": catchUp.Round(time.Millisecond).String(), "direct reads of " + old + " on " + zc[0].id: strconv.Itoa(direct)}
	if direct == 0 {
		r.h.Violate(CheckScenario, "%s: no direct read of %s reached %s during the cut (the check exercised nothing)", res.Window, old, zc[0].id)
	}
	return fmt.Sprintf("%s published and promoted %s into a %s cut; %s served %s to %d direct reads; caught up %s after the heal (bound %s)",
		pub, promoted.Round(time.Millisecond), cut, zc[0].id, old, direct, catchUp.Round(time.Millisecond), CatchUpBound), nil
}

// readDirect reads publication pub from node n (from the client's host)
// until stop; every read must succeed and be right. It returns the reads.
func (r *run) readDirect(ctx context.Context, n *node, pub, win string, stop <-chan struct{}) int {
	cl, closeFn, err := r.c.dialServe(n.addr())
	if err != nil {
		r.h.Violate(CheckScenario, "%s: dial %s: %v", win, n.id, err)
		return 0
	}
	defer closeFn()
	reads := 0
	for i := 0; ; i++ {
		select {
		case <-stop:
			return reads
		case <-time.After(100 * time.Millisecond):
		}
		var keys [][]byte
		var idx []int
		for j := 0; j < 12; j++ {
			k := (i*12 + j*7) % len(r.ks.keys)
			idx, keys = append(idx, k), append(keys, r.ks.keys[k][:])
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := cl.BatchGet(cctx, &servepb.BatchGetRequest{Keys: keys, Version: pub})
		cancel()
		if err != nil {
			r.h.Violate(CheckScenario, "%s: direct read of %s on %s: %v", win, pub, n.id, err)
			continue
		}
		reads++
		for j, x := range resp.Results {
			if x.Status != servepb.KeyStatus_KEY_OK {
				// A key of a partition the node does not hold is not its to serve.
				continue
			}
			r.h.observe(n.id, pub, idx[j], x.Found, x.Value)
		}
	}
}

// holds reports whether node id holds pub on every partition assigned to it.
func (r *run) holds(ctx context.Context, pub, id string) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pubs, _, err := r.c.admin.ListPublications(cctx)
	if err != nil {
		return false, err
	}
	for _, ps := range pubs {
		if ps.ID != pub {
			continue
		}
		any := false
		for _, rep := range ps.Replicas {
			if rep.NodeID == id {
				any = true
				if !rep.Holding {
					return false, nil
				}
			}
		}
		return any, nil
	}
	return false, nil
}

// waitHeld waits until every assigned replica on a node that want accepts
// holds pub.
func (r *run) waitHeld(ctx context.Context, pub string, want func(node string) bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	why := ""
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		pubs, _, err := r.c.admin.ListPublications(cctx)
		cancel()
		why = fmt.Sprintf("%s not registered", pub)
		if err != nil {
			why = err.Error()
		}
		for _, ps := range pubs {
			if ps.ID != pub {
				continue
			}
			why = ""
			for _, rep := range ps.Replicas {
				if r.nodeByID(rep.NodeID) != nil && want(rep.NodeID) && !rep.Holding {
					why = fmt.Sprintf("%s partition %d at seq %d does not hold %s", rep.NodeID, rep.Partition, rep.AppliedSeq, pub)
					break
				}
			}
		}
		if why == "" {
			return nil
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("%s: %s", timeout, why)
}

var (
	nodeCount   = regexp.MustCompile(`(?m)^router_node_latency_seconds_count\{[^}]*node="([^"]+)"[^}]*\} ([0-9.e+]+)$`)
	deniedCount = regexp.MustCompile(`(?m)^router_hedges_denied_total ([0-9.e+]+)$`)
)

// deniedKey is routerNodeCounts' entry for the router's hedges denied.
const deniedKey = "hedges denied"

// routerNodeCounts scrapes the router's answered sub-requests per node,
// and its hedges denied under deniedKey.
func (r *run) routerNodeCounts(ctx context.Context) (map[string]float64, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	body, err := scrape(cctx, "http://"+r.c.rtHost.ip+":"+routeHTTP+"/metrics")
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, m := range nodeCount.FindAllStringSubmatch(body, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		out[m[1]] += v
	}
	if m := deniedCount.FindStringSubmatch(body); m != nil {
		out[deniedKey], _ = strconv.ParseFloat(m[1], 64)
	}
	return out, nil
}

// routerZoneCut: the router loses zone a (its own). Reads fail over to b and
// c with no failed read; after the heal the router reads from zone a again.
func routerZoneCut(ctx context.Context, r *run, res *ScenarioResult) (string, error) {
	cut := r.d(30*time.Second, 8*time.Second)
	za := r.zoneNodes("a")
	var ips []string
	for _, n := range za {
		ips = append(ips, n.h.ip)
	}
	if err := r.c.rtHost.cut(ips...); err != nil {
		return "", err
	}
	if err := sleep(ctx, 2*time.Second); err != nil { // connections to zone a time out
		return "", err
	}
	c0, err := r.routerNodeCounts(ctx)
	if err != nil {
		return "", err
	}
	if err := sleep(ctx, cut-2*time.Second); err != nil {
		return "", err
	}
	c1, err := r.routerNodeCounts(ctx)
	if err != nil {
		return "", err
	}
	if err := r.c.rtHost.heal(); err != nil {
		return "", err
	}
	during := 0.0
	for _, n := range za {
		during += c1[n.id] - c0[n.id]
	}
	if during > 0 {
		r.h.Violate(CheckScenario, "%s: the router had %.0f answers from zone a while cut off from it", res.Window, during)
	}
	// Back to zone a within 15 s.
	back := time.Duration(-1)
	healed := time.Now()
	for time.Since(healed) < 15*time.Second {
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return "", err
		}
		c2, err := r.routerNodeCounts(ctx)
		if err != nil {
			continue
		}
		got := 0.0
		for _, n := range za {
			got += c2[n.id] - c1[n.id]
		}
		if got > 20 {
			back = time.Since(healed)
			break
		}
	}
	if back < 0 {
		r.h.Violate(CheckScenario, "%s: the router did not return to zone a within 15 s of the heal", res.Window)
	}
	failed, first := r.h.failed(res.Window)
	if failed > 0 {
		r.h.Violate(CheckScenario, "%s: %d reads failed while the router was cut off from zone a (first: %s)", res.Window, failed, first)
	}
	res.Metrics = map[string]string{"cut": cut.String(), "back to zone a after": back.Round(time.Millisecond).String()}
	return fmt.Sprintf("%s cut: %d failed reads, 0 answers from zone a during it; back to zone a %s after the heal", cut, failed, back.Round(time.Millisecond)), nil
}

// noObjectStore: a node reaches the control plane but not the object store.
// It reports itself behind and never records as applied a batch registered
// after the cut began (it cannot have fetched it).
func noObjectStore(ctx context.Context, r *run, res *ScenarioResult) (string, error) {
	cut := r.d(30*time.Second, 8*time.Second)
	n := r.zoneNodes("b")[0]
	rt0, err := r.c.admin.GetRouting(ctx)
	if err != nil {
		return "", err
	}
	if err := n.h.cut(r.c.s3Host.ip); err != nil {
		return "", err
	}
	end := time.Now().Add(cut)
	maxBehind := int64(0)
	for time.Now().Before(end) {
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return "", err
		}
		rt, err := r.c.admin.GetRouting(ctx)
		if err != nil {
			continue
		}
		for p, reps := range rt.Replicas {
			for _, rep := range reps {
				if rep.NodeID != n.id {
					continue
				}
				if rep.AppliedSeq > rt0.NewestSeq[p] {
					r.h.Violate(CheckScenario, "%s: %s reports partition %d applied at seq %d, registered after it lost the object store (newest then %d)", res.Window, n.id, p, rep.AppliedSeq, rt0.NewestSeq[p])
				}
				maxBehind = max(maxBehind, rt.NewestSeq[p]-rep.AppliedSeq)
			}
		}
	}
	if err := n.h.heal(); err != nil {
		return "", err
	}
	if maxBehind == 0 {
		r.h.Violate(CheckScenario, "%s: %s was never behind during the cut (no batch was registered: the scenario exercised nothing)", res.Window, n.id)
	}
	res.Metrics = map[string]string{"cut": cut.String(), "most batches behind": strconv.FormatInt(maxBehind, 10)}
	return fmt.Sprintf("%s cut from the object store for %s: reported up to %d batches behind, applied nothing it could not fetch", n.id, cut, maxBehind), nil
}

// controlDown: the control plane is killed and stays down; reads are
// unaffected, Lorry backs off and loses nothing (check 4), nodes resume.
func controlDown(ctx context.Context, r *run, res *ScenarioResult) (string, error) {
	down := r.d(60*time.Second, 15*time.Second)
	c0 := r.w.commits.Load()
	r.c.control.hold(true)
	r.c.control.kill()
	if err := sleep(ctx, down); err != nil {
		return "", err
	}
	commits := r.w.commits.Load() - c0
	r.c.control.hold(false)
	if err := r.c.control.start(); err != nil {
		return "", err
	}
	if err := r.c.control.waitListening(60 * time.Second); err != nil {
		return "", err
	}
	failed, first := r.h.failed(res.Window)
	if failed > 0 {
		r.h.Violate(CheckScenario, "%s: %d reads failed while the control plane was down (first: %s)", res.Window, failed, first)
	}
	if commits == 0 {
		r.h.Violate(CheckScenario, "%s: nothing was committed while the control plane was down (the scenario exercised nothing)", res.Window)
	}
	res.Metrics = map[string]string{"down": down.String(), "commits while down": strconv.FormatInt(commits, 10)}
	return fmt.Sprintf("control plane down %s: %d failed reads, %d commits queued meanwhile", down, failed, commits), nil
}

// postgresKill: a burst of commits makes Lorry register batches quickly;
// PostgreSQL is killed with SIGKILL in the middle and restarted. Check 4
// then proves no batch lost, none twice, order kept.
func postgresKill(ctx context.Context, r *run, res *ScenarioResult) (string, error) {
	down := r.d(10*time.Second, 3*time.Second)
	b0, err := r.batchCount(ctx)
	if err != nil {
		return "", err
	}
	burstDone := make(chan int)
	go func() {
		n := 0
		end := time.Now().Add(r.d(20*time.Second, 8*time.Second))
		for time.Now().Before(end) && ctx.Err() == nil {
			if err := r.w.commit(ctx, 1+n%3, pillar.PriorityFresh); err == nil {
				n++
			}
			time.Sleep(20 * time.Millisecond)
		}
		burstDone <- n
	}()
	if err := sleep(ctx, 2*time.Second); err != nil {
		return "", err
	}
	b1, _ := r.batchCount(ctx)
	r.c.pg.hold(true)
	r.c.pg.signal(syscall.SIGKILL)
	if err := sleep(ctx, down); err != nil {
		return "", err
	}
	r.c.pg.hold(false)
	if err := r.c.pg.start(); err != nil {
		return "", err
	}
	if err := r.c.pg.waitListening(60 * time.Second); err != nil {
		return "", err
	}
	commits := <-burstDone
	b2, err := r.batchCount(ctx)
	if err != nil {
		return "", err
	}
	if b1 <= b0 {
		r.h.Violate(CheckScenario, "%s: no batch was registered in the burst before PostgreSQL was killed (the scenario exercised nothing)", res.Window)
	}
	// Reads never wait on the control plane's database: routers keep their
	// table, nodes keep serving, and heartbeats lost in the outage do not
	// mark the nodes down when it ends.
	if err := sleep(ctx, 5*time.Second); err != nil {
		return "", err
	}
	failed, first := r.h.failed(res.Window)
	if failed > 0 {
		r.h.Violate(CheckScenario, "%s: %d reads failed around the PostgreSQL outage (first: %s)", res.Window, failed, first)
	}
	res.Metrics = map[string]string{"postgres down": down.String(), "burst commits": strconv.Itoa(commits),
		"batches registered": strconv.Itoa(b2 - b0), "of them before the kill": strconv.Itoa(b1 - b0)}
	return fmt.Sprintf("PostgreSQL killed %d batch registrations into a burst of %d commits, down %s; %d batches registered by the end of the burst; %d failed reads",
		b1-b0, commits, down, b2-b0, failed), nil
}

// batchCount is the number of batches registered over all partitions.
func (r *run) batchCount(ctx context.Context) (int, error) {
	var last time.Time
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		rt, err := r.c.admin.GetRouting(cctx)
		cancel()
		if err == nil {
			n := int64(0)
			for _, s := range rt.NewestSeq {
				n += s
			}
			return int(n), nil
		}
		if last.IsZero() {
			last = time.Now()
		} else if time.Since(last) > time.Minute {
			return 0, err
		}
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

// packetLoss: 5% of the packets in and out of a zone-a node are dropped.
// Hedging keeps the router's p99 within 1.5× the healthy p99 measured just
// before, and no read fails.
func packetLoss(ctx context.Context, r *run, res *ScenarioResult) (string, error) {
	d := r.d(60*time.Second, 12*time.Second)
	n := r.zoneNodes("a")[0]
	base := res.Window + " healthy"
	r.setWindow(base)
	if err := sleep(ctx, d); err != nil {
		return "", err
	}
	r.setWindow(res.Window)
	c0, err := r.routerNodeCounts(ctx)
	if err != nil {
		return "", err
	}
	if err := n.h.lossy(0.05); err != nil {
		return "", err
	}
	if err := sleep(ctx, d); err != nil {
		return "", err
	}
	c1, err := r.routerNodeCounts(ctx)
	if err != nil {
		return "", err
	}
	if err := n.h.heal(); err != nil {
		return "", err
	}
	// Where the router read from under loss: a node stalling more often
	// than the hedge budget covers is read after the other zones'.
	var all float64
	for id := range c1 {
		if id != deniedKey {
			all += c1[id] - c0[id]
		}
	}
	share := (c1[n.id] - c0[n.id]) / max(all, 1)
	denied := c1[deniedKey] - c0[deniedKey]
	p0, n0 := r.p99(base)
	p1, n1 := r.p99(res.Window)
	failed, first := r.h.failed(res.Window)
	if f0, _ := r.h.failed(base); f0 > 0 {
		failed += f0
	}
	if failed > 0 {
		r.h.Violate(CheckScenario, "%s: %d reads failed under 5%% packet loss (first: %s)", res.Window, failed, first)
	}
	ratio := float64(p1) / float64(max(p0, time.Microsecond))
	if n0 < 100 || n1 < 100 {
		r.h.Violate(CheckScenario, "%s: too few reads to measure a p99 (%d healthy, %d lossy)", res.Window, n0, n1)
	} else if ratio > 1.5 {
		r.h.Violate(CheckScenario, "%s: router p99 %s under 5%% loss on %s, %.2f× the healthy %s (bound 1.5×)", res.Window, p1, n.id, ratio, p0)
	}
	res.Metrics = map[string]string{"healthy p99": p0.String(), "lossy p99": p1.String(), "ratio": fmt.Sprintf("%.2f", ratio),
		"reads": fmt.Sprintf("%d+%d", n0, n1), "lossy node's share": fmt.Sprintf("%.2f", share), "hedges denied": fmt.Sprintf("%.0f", denied)}
	return fmt.Sprintf("5%% loss on %s for %s: router p99 %s vs %s healthy (%.2f×, %d and %d reads), %d failed; %s answered %.0f%% of the sub-requests under loss, %.0f hedges denied",
		n.id, d, p1.Round(10*time.Microsecond), p0.Round(10*time.Microsecond), ratio, n1, n0, failed, n.id, 100*share, denied), nil
}

// nodeVanishes: a zone-c node's processes die and its namespace is
// deleted; a new node (fresh disk) joins zone c, the operator removes the
// old one, and the new node converges from the object store.
func nodeVanishes(ctx context.Context, r *run, res *ScenarioResult) (string, error) {
	if r.c.spare == nil {
		return "", fmt.Errorf("no spare host left")
	}
	old := r.zoneNodes("c")[0]
	old.p.hold(true)
	old.p.kill()
	if err := r.c.net.remove(old.h); err != nil {
		return "", err
	}
	for i, n := range r.c.nodes {
		if n == old {
			r.c.nodes = append(r.c.nodes[:i:i], r.c.nodes[i+1:]...)
			break
		}
	}
	t0 := time.Now()
	nn, err := r.c.addNode(r.c.spare, "n4", "c")
	if err != nil {
		return "", err
	}
	r.c.spare = nil
	// The operator removes the old node once the control plane sees it down
	// (heartbeats missed for --down-after).
	if err := r.waitNodeState(ctx, old.id, control.StateDown, 30*time.Second); err != nil {
		return "", err
	}
	if _, err := r.c.run(ctx, time.Minute, append([]string{"control", "remove-node", "--node", old.id}, r.c.adminFlags()...)...); err != nil {
		return "", err
	}
	took, err := r.waitConverged(ctx, 3*time.Minute)
	if err != nil {
		r.h.Violate(CheckScenario, "%s: %s did not converge: %v", res.Window, nn.id, err)
	}
	held := 0
	if rt, err := r.c.admin.GetRouting(ctx); err == nil {
		for _, reps := range rt.Replicas {
			for _, rep := range reps {
				if rep.NodeID == nn.id {
					held++
				}
				if rep.NodeID == old.id {
					r.h.Violate(CheckScenario, "%s: %s still assigned after remove-node", res.Window, old.id)
				}
			}
		}
	}
	if held == 0 {
		r.h.Violate(CheckScenario, "%s: %s took no assignment", res.Window, nn.id)
	}
	res.Metrics = map[string]string{"replicas on the new node": strconv.Itoa(held), "converged after": (time.Since(t0)).Round(time.Millisecond).String()}
	_ = took
	return fmt.Sprintf("%s's host deleted; %s (zone c, empty disk) took %d replicas and converged %s after it started",
		old.id, nn.id, held, time.Since(t0).Round(time.Millisecond)), nil
}

// waitNodeState waits until the control plane lists node id in state (or a
// later one: gone counts as down).
func (r *run) waitNodeState(ctx context.Context, id, state string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ns, err := r.c.admin.ListNodes(cctx)
		cancel()
		if err == nil {
			for _, n := range ns {
				if n.ID == id {
					last = n.State
					if n.State == state || (state == control.StateDown && n.State == control.StateGone) {
						return nil
					}
				}
			}
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("node %s is %q after %s, want %s", id, last, timeout, state)
}

var _ = strings.Join
