package router

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"

	"github.com/pillarkit/pillar/cobbled/control"
)

// Versions (publications).
//
// A publication is a (chunk version, model) pair made servable; the
// control plane's routing lists them (Routing.Publications, with each
// one's role and, per partition, BaseSeq: the seq of its newest snapshot)
// and names the live one. A replica HOLDS publication P on partition p iff
// P is not retired, BaseSeq[p] > 0 and the replica's AppliedSeq >=
// BaseSeq[p].
//
// Every request reads exactly one publication: the router resolves the
// version once per request, against the table it uses for the whole
// request, to a concrete id, sends that id to every node, and checks that
// each node answered for it (a node names the version it read). Aliases:
// "" (Options.Version, then live), "live", "candidate", "previous". With
// Options.CandidateFraction F, a request that names no version (while
// Options.Version is live) reads the candidate, while one is ready, with
// probability F, or,
// when the request carries a caller id, when a hash of the caller id falls
// in the first F of the hash space (so a caller always sees the same
// side).
//
// Replicas are chosen among those that hold the version by the rule above;
// failover and hedges stay among them. Applied seqs in a cached table can
// be stale (they are refreshed every RefreshInterval, and the control
// plane bumps the table's version on every change of publications); when
// no replica of a partition holds the version by the table, the up
// replicas are tried anyway (a node answers KEY_NOT_SERVED, naming the
// version, when it has no database of it, and the router fails over). A
// node that answered KEY_NOT_SERVED for (version, partition) is tried
// after the other replicas for EjectFor (the table may still say it holds
// it: applied seqs are stale, or the node rebuilds that publication). A
// retired or unknown version, or one with no snapshot on a partition yet,
// fails each key with an error naming the version (ErrVersion). Retired
// versions are never sent to a node: nodes drop a retired version's data
// only after their RetireGrace.

// ErrVersion: the requested version is not served (unknown, retired, no
// candidate/previous, or no data on a partition yet).
var ErrVersion = errors.New("version not served")

// Version aliases a request may name.
const (
	AliasLive      = "live"
	AliasCandidate = "candidate"
	AliasPrevious  = "previous"
)

// ReadOptions are one read's choices. The zero value reads Options.Version
// (by default the live publication), with the A/B split.
type ReadOptions struct {
	// Version is the publication to read: "" (the router's default),
	// "live", "candidate", "previous" or a publication id.
	Version string
	// Caller identifies the caller for the A/B split by caller: with it,
	// the candidate fraction is of callers (by a hash of this id), not of
	// requests.
	Caller string
}

// pubInfo is one publication in a compiled table.
type pubInfo struct {
	id, role string
	ready    bool
	base     []int64 // index = partition
}

// compilePubs indexes rt's publications.
func compilePubs(rt *control.Routing) (map[string]*pubInfo, map[string]string) {
	if len(rt.Publications) == 0 {
		return nil, nil
	}
	pubs := map[string]*pubInfo{}
	byRole := map[string]string{}
	roleAt := map[string]int64{}
	for _, p := range rt.Publications {
		pi := &pubInfo{id: p.ID, role: p.Role, ready: p.Ready, base: p.BaseSeq}
		pubs[p.ID] = pi
		// Several in one role (should not happen): the newest wins.
		if _, seen := byRole[p.Role]; !seen || p.RoleAt.UnixNano() > roleAt[p.Role] {
			byRole[p.Role], roleAt[p.Role] = p.ID, p.RoleAt.UnixNano()
		}
	}
	if rt.Live != "" || pubs[""] != nil {
		byRole[control.RoleLive] = rt.Live
	}
	return pubs, byRole
}

// choice is a request's resolved version.
type choice struct {
	id, role string
	pub      *pubInfo // nil: no publications in the table (legacy: every replica serves "")
	err      error    // not servable: every key fails with it
}

// resolve picks the request's version in t.
func (r *Router) resolve(t *table, ro *ReadOptions) choice {
	v := ""
	caller := ""
	if ro != nil {
		v, caller = ro.Version, ro.Caller
	}
	named := v != "" // a request that names a version (also "live") is not split
	if v == "" {
		v = r.opts.Version
	}
	if !named && (v == "" || v == AliasLive) && r.opts.CandidateFraction > 0 {
		if id := t.byRole[control.RoleCandidate]; id != "" && t.pubs[id].ready && r.pickCandidate(caller) {
			v = id
		}
	}
	if t.pubs == nil {
		if v == "" || v == AliasLive {
			return choice{id: "", role: control.RoleLive}
		}
		return choice{id: v, err: fmt.Errorf("router: version %q: the control plane lists no publications (only the unnamed one is served): %w", v, ErrVersion)}
	}
	switch v {
	case "", AliasLive:
		v = t.byRole[control.RoleLive]
	case AliasCandidate, AliasPrevious:
		role := map[string]string{AliasCandidate: control.RoleCandidate, AliasPrevious: control.RolePrevious}[v]
		id, ok := t.byRole[role]
		if !ok {
			return choice{id: v, err: fmt.Errorf("router: version %q: no %s publication (publications: %s): %w", v, role, t.pubList(), ErrVersion)}
		}
		v = id
	}
	pi := t.pubs[v]
	switch {
	case pi == nil && v == "":
		// The unnamed publication while the control plane lists others
		// but not it: served as before publications.
		return choice{id: "", role: control.RoleLive}
	case pi == nil:
		return choice{id: v, err: fmt.Errorf("router: version %q is not a publication of this deployment (publications: %s): %w", v, t.pubList(), ErrVersion)}
	case pi.role == control.RoleRetired:
		return choice{id: v, role: pi.role, err: fmt.Errorf("router: version %q is retired (publications: %s): %w", v, t.pubList(), ErrVersion)}
	}
	return choice{id: v, role: pi.role, pub: pi}
}

// pickCandidate decides the A/B split for one request.
func (r *Router) pickCandidate(caller string) bool {
	f := r.opts.CandidateFraction
	if caller == "" {
		return rand.Float64() < f
	}
	h := fnv.New64a()
	h.Write([]byte(caller))
	return float64(h.Sum64()>>11)/float64(1<<53) < f
}

// pubList describes the table's publications for errors.
func (t *table) pubList() string {
	if len(t.pubs) == 0 {
		return "none"
	}
	var s []string
	for id, p := range t.pubs {
		s = append(s, fmt.Sprintf("%q %s", id, p.role))
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}

// holds reports whether rep holds publication pi on partition p (the
// contract rule).
func holds(pi *pubInfo, p int, rep replica) bool {
	return pi.role != control.RoleRetired && p < len(pi.base) && pi.base[p] > 0 && rep.applied >= pi.base[p]
}

// versionFilter returns, for partition p, which replicas a request for c
// may use (nil: all), or an error when none can serve the version there.
func (g *gather) versionFilter(p int) ([]bool, error) {
	pi := g.c.pub
	if pi == nil {
		return nil, nil
	}
	if (p >= len(pi.base) || pi.base[p] == 0) && pi.id == "" {
		// The legacy unnamed publication may be deltas only (its first
		// delta starts a database on the node): no snapshot is no reason
		// to refuse it, as before publications.
		return nil, nil
	}
	if p >= len(pi.base) || pi.base[p] == 0 {
		return nil, fmt.Errorf("router: partition %d: version %q has no data yet (no snapshot registered): %w", p, pi.id, ErrVersion)
	}
	reps := g.t.reps[p]
	ok := make([]bool, len(reps))
	any := false
	for i, rep := range reps {
		ok[i] = rep.eligible && holds(pi, p, rep)
		any = any || ok[i]
	}
	if !any {
		// The table's applied seqs may be stale: let the nodes say.
		return nil, nil
	}
	return ok, nil
}

// holders lists the ids of partition p's replicas holding version id in
// the table in use, for Explain and tests.
func (r *Router) holders(id string, p int) []string {
	t := r.table.Load()
	pi := t.pubs[id]
	if pi == nil || p >= len(t.reps) {
		return nil
	}
	var out []string
	for _, rep := range t.reps[p] {
		if holds(pi, p, rep) {
			out = append(out, rep.node.id)
		}
	}
	slices.Sort(out)
	return out
}
