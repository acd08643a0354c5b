package router

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/internal/clock"
)

// RoutingSource returns the current routing table (*control.Client
// satisfies it; tests inject tables through RoutingFunc).
type RoutingSource interface {
	GetRouting(ctx context.Context) (*control.Routing, error)
}

// RoutingWatcher is an optional RoutingSource extension: WatchRouting waits
// up to wait for a version newer than known and returns the table then (or
// the current one when wait passes). *control.Client satisfies it.
type RoutingWatcher interface {
	WatchRouting(ctx context.Context, known int64, wait time.Duration) (*control.Routing, error)
}

// RoutingFunc adapts a function to RoutingSource.
type RoutingFunc func(ctx context.Context) (*control.Routing, error)

// GetRouting calls f.
func (f RoutingFunc) GetRouting(ctx context.Context) (*control.Routing, error) { return f(ctx) }

// table is a compiled routing table: immutable once published.
type table struct {
	version    int64
	partitions int
	// reps[p] lists partition p's replicas in the control plane's order,
	// each with its node (shared across tables) and whether it may be used.
	reps    [][]replica
	nodes   []*node // every node of the table, once (hedge delays compare peers)
	fetched time.Time
	// Publications (versions.go): nil when the control plane lists none.
	pubs   map[string]*pubInfo
	byRole map[string]string // role → publication id
}

type replica struct {
	node     *node
	eligible bool   // up and not lagging (or the least-lagging when all lag)
	why      string // why not eligible, for errors
	up       bool
	lag      int64
	applied  int64 // the replica's applied seq (for the publications it holds)
}

// relaxLag makes the least-lagging up replicas eligible when no replica
// of the partition is.
func relaxLag(reps []replica) {
	best := int64(-1)
	for _, x := range reps {
		if x.eligible {
			return
		}
		if x.up && (best < 0 || x.lag < best) {
			best = x.lag
		}
	}
	if best < 0 {
		return // none up: nothing to relax
	}
	for i := range reps {
		if reps[i].up && reps[i].lag == best {
			reps[i].eligible, reps[i].why = true, ""
		}
	}
}

// install compiles rt and publishes it, creating connections to new nodes
// and retiring those no table names any more.
func (r *Router) install(rt *control.Routing) error {
	if rt == nil {
		return errors.New("router: routing: control plane returned no table")
	}
	if rt.Partitions <= 0 || len(rt.Replicas) != rt.Partitions {
		return fmt.Errorf("router: routing version %d: %d partitions with %d replica lists", rt.Version, rt.Partitions, len(rt.Replicas))
	}
	r.installMu.Lock()
	defer r.installMu.Unlock()
	cur := r.table.Load()
	if want := r.partitions(); want != 0 && rt.Partitions != want {
		return fmt.Errorf("router: routing version %d has %d partitions, this deployment has %d: %w", rt.Version, rt.Partitions, want, ErrPartitions)
	}
	if cur != nil && rt.Version < cur.version {
		return nil // an older answer overtaken by a newer one
	}
	t := &table{version: rt.Version, partitions: rt.Partitions, reps: make([][]replica, rt.Partitions), fetched: r.opts.Clock.Now()}
	t.pubs, t.byRole = compilePubs(rt)
	used := map[string]*node{}
	for p, reps := range rt.Replicas {
		newest := int64(0)
		if p < len(rt.NewestSeq) {
			newest = rt.NewestSeq[p]
		}
		for _, rep := range reps {
			key := rep.NodeID + "@" + rep.Addr
			n := used[key]
			if n == nil {
				n = r.nodes[key]
				if n == nil {
					var err error
					if n, err = r.newNode(rep.NodeID, rep.Addr, rep.Zone); err != nil {
						r.opts.Logger.Warn("router: node not usable", "node", rep.NodeID, "addr", rep.Addr, "err", err)
						continue
					}
					r.nodes[key] = n
				}
				n.zone.Store(&rep.Zone)
				used[key] = n
			}
			x := replica{node: n, eligible: true}
			lag := newest - rep.AppliedSeq
			switch {
			case rep.State != control.StateUp:
				x.eligible, x.why = false, fmt.Sprintf("node %s is %s", rep.NodeID, rep.State)
			case r.opts.MaxLagBatches >= 0 && lag > r.opts.MaxLagBatches:
				x.eligible, x.why = false, fmt.Sprintf("node %s lags %d batches (limit %d)", rep.NodeID, lag, r.opts.MaxLagBatches)
			}
			x.up, x.lag, x.applied = rep.State == control.StateUp, lag, rep.AppliedSeq
			t.reps[p] = append(t.reps[p], x)
		}
		// When every up replica lags past the limit (a burst of batches, a
		// slow object store), the least-lagging ones serve: slightly stale
		// beats unavailable, and they are still the freshest copies.
		relaxLag(t.reps[p])
	}
	for _, n := range used {
		t.nodes = append(t.nodes, n)
	}
	for key, n := range r.nodes {
		if used[key] == nil {
			delete(r.nodes, key)
			r.retire(n)
		}
	}
	r.p.CompareAndSwap(0, int64(rt.Partitions))
	r.table.Store(t)
	m := r.opts.Metrics
	m.routingVersion.Set(float64(t.version))
	if cur == nil || cur.version != t.version {
		r.opts.Logger.Info("router: routing installed", "version", t.version, "partitions", t.partitions, "nodes", len(r.nodes), "live", rt.Live, "publications", len(rt.Publications))
	}
	return nil
}

// retire closes a node's connection once requests that may still use it
// have had their deadline (or at Close, if that comes first). Called with
// installMu held.
func (r *Router) retire(n *node) {
	r.opts.Logger.Info("router: node left the routing table", "node", n.id, "addr", n.addr)
	r.retiring[n] = struct{}{}
	r.opts.Clock.AfterFunc(r.opts.Timeout+time.Second, func() {
		r.installMu.Lock()
		delete(r.retiring, n)
		r.installMu.Unlock()
		n.close()
	})
}

// fetch gets a table from the source and installs it.
func (r *Router) fetch(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.opts.InitTimeout)
	defer cancel()
	rt, err := r.opts.Source.GetRouting(ctx)
	r.lastFetch.Store(r.opts.Clock.Now().UnixNano())
	if err != nil {
		r.opts.Metrics.routingErrors.Inc()
		r.routingErrors.Add(1)
		return fmt.Errorf("router: get routing from control plane: %w", err)
	}
	if err := r.install(rt); err != nil {
		r.opts.Metrics.routingErrors.Inc()
		r.routingErrors.Add(1)
		return err
	}
	return nil
}

// kick asks the refresher for a fetch now (coalesced).
func (r *Router) kick() {
	select {
	case r.kickCh <- struct{}{}:
	default:
	}
}

// refreshLoop re-fetches the table every RefreshInterval and when kicked.
// A failing control plane leaves the cached table in use.
func (r *Router) refreshLoop(ctx context.Context) {
	defer r.wg.Done()
	clk := r.opts.Clock
	tick := clk.NewTicker(r.opts.RefreshInterval)
	defer tick.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-r.kickCh:
			r.opts.Metrics.routingKicks.Inc()
			if gap := time.Duration(clk.Now().UnixNano()-r.lastFetch.Load()) - r.opts.MinRefreshGap; gap < 0 {
				if !clock.Sleep(ctx, clk, -gap) {
					return
				}
			}
		}
		err := r.fetch(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			if !failing {
				r.opts.Logger.Warn("router: routing refresh failed; serving from the cached table", "version", r.table.Load().version, "err", err)
			}
			failing = true
		case err == nil && failing:
			r.opts.Logger.Info("router: routing refresh recovered", "version", r.table.Load().version)
			failing = false
		}
	}
}

// watchLoop long-polls a RoutingWatcher so a new version is installed as
// soon as the control plane has it.
func (r *Router) watchLoop(ctx context.Context, w RoutingWatcher) {
	defer r.wg.Done()
	for ctx.Err() == nil {
		rt, err := w.WatchRouting(ctx, r.table.Load().version, r.opts.RefreshInterval)
		if err == nil {
			err = r.install(rt)
		}
		if err != nil && ctx.Err() == nil {
			r.opts.Metrics.routingErrors.Inc()
			r.routingErrors.Add(1)
			// The refresh loop logs errors; back off here.
			clock.Sleep(ctx, r.opts.Clock, r.opts.RefreshInterval)
		}
	}
}
