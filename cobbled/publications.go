package cobbled

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Publications on a node.
//
// A publication is a (chunk version, model) pair made servable; "" is the
// legacy unnamed one. Each replica keeps one database per publication
// (partition.go). The node learns the publications and which one is live
// from the routing table (Routing.Publications, Routing.Live) on every
// heartbeat tick:
//
//   - a BatchGet without a version reads the live publication as last
//     seen, so a direct reader of a node follows a promote or rollback
//     within one Options.Heartbeat (routers always name a concrete id and
//     switch as soon as their watch sees the new routing);
//   - a publication the routing lists as retired stops receiving batches
//     (they are recorded as passed), and its databases are dropped once it
//     has been retired for Options.RetireGrace, so a router still reading
//     it from an older table finishes first. Nothing else is ever dropped:
//     not the live, previous or candidate publication, and not one the
//     routing does not mention (an older control plane lists none).

// pubs is the node's view of the routing's publications.
type pubs struct {
	live      atomic.Pointer[string]
	dropBusy  atomic.Bool // a background drop (Run's tick) is under way
	pubMu     sync.Mutex
	retiredAt map[string]time.Time // retired in routing → when the node first saw it so
}

// resolve maps "" to the live publication as last seen.
func (n *Node) resolve(version string) string {
	if version != "" {
		return version
	}
	if l := n.live.Load(); l != nil {
		return *l
	}
	return ""
}

// routingRetired reports whether the routing the node last saw lists pub
// as retired.
func (n *Node) routingRetired(pub string) bool {
	n.pubMu.Lock()
	defer n.pubMu.Unlock()
	_, ok := n.retiredAt[pub]
	return ok
}

// observePublications records r's publications (live, retired) and drops
// the databases of publications retired for at least RetireGrace. It
// returns the publications dropped. It takes partitions' applyMu: never
// call it holding one.
func (n *Node) observePublications(ctx context.Context, r *Routing) []string {
	var dropped []string
	for _, pub := range n.learnPublications(r) {
		if n.dropEverywhere(ctx, pub) {
			dropped = append(dropped, pub)
		}
	}
	return dropped
}

// learnPublications records r's live publication and retired ones, and
// returns those retired for at least RetireGrace.
func (n *Node) learnPublications(r *Routing) []string {
	live := r.Live
	n.live.Store(&live)
	now := n.opts.Clock.Now()
	var due []string
	n.pubMu.Lock()
	if n.retiredAt == nil {
		n.retiredAt = map[string]time.Time{}
	}
	seen := map[string]bool{}
	for _, pub := range r.Publications {
		if pub.Role != RoleRetired || pub.ID == live {
			continue
		}
		seen[pub.ID] = true
		at, ok := n.retiredAt[pub.ID]
		if !ok {
			n.retiredAt[pub.ID] = now
			at = now
		}
		if now.Sub(at) >= n.opts.RetireGrace {
			due = append(due, pub.ID)
		}
	}
	for pub := range n.retiredAt {
		if !seen[pub] {
			// No longer listed as retired (collected, or the control plane
			// changed its mind): keep what is on disk.
			delete(n.retiredAt, pub)
		}
	}
	n.pubMu.Unlock()
	return due
}

// dropEverywhere drops publication pub's database on every held partition
// and reports whether there was one.
func (n *Node) dropEverywhere(ctx context.Context, pub string) bool {
	any := false
	for _, id := range n.Held() {
		p := n.part(id)
		if p == nil {
			continue
		}
		p.mu.RLock()
		_, has := p.dbs[pub] // dbs mirrors the recorded publications
		p.mu.RUnlock()
		if !has {
			continue // dropped already: do not wait for the apply lock every tick
		}
		p.applyMu.Lock()
		ok := false
		var err error
		if !p.dropping {
			ok, err = p.dropPublication(pub)
		}
		p.applyMu.Unlock()
		if err != nil {
			n.opts.Logger.Warn("cobbled: drop retired publication", "partition", id, "publication", pub, "err", err)
			continue
		}
		if ok {
			any = true
			if n.opts.Control != nil {
				if err := n.opts.Control.ReportApplied(ctx, n.opts.ID, id, p.applied.Load(), p.pubBytes()); err != nil && ctx.Err() == nil {
					n.opts.Logger.Warn("cobbled: report applied after a drop", "partition", id, "err", err)
				}
			}
			n.opts.Metrics.pubsDropped.Inc()
			n.opts.Logger.Info("cobbled: retired publication dropped", "partition", id, "publication", pub)
		}
	}
	return any
}
