package router

import (
	"context"
	"fmt"
	"sort"

	"github.com/pillarkit/pillar/internal/health"
)

// HealthDetail is the "detail" of the router's /healthz and /readyz.
type HealthDetail struct {
	RoutingVersion int64 `json:"routing_version"`
	// RoutingAgeMS is the time since the routing table in use was fetched.
	RoutingAgeMS  int64 `json:"routing_age_ms"`
	RoutingErrors int64 `json:"routing_errors"` // failed fetches since start (the cached table stayed in use)
	Partitions    int   `json:"partitions"`
	// Uncovered counts partitions with no eligible replica (down, or
	// routing lists none).
	Uncovered    int `json:"uncovered_partitions"`
	Nodes        int `json:"nodes"`
	EjectedNodes int `json:"ejected_nodes"`
	// Live is the live publication in the table in use; Publications
	// lists the table's publications (none from a control plane without
	// them).
	Live         string              `json:"live"`
	Publications []HealthPublication `json:"publications,omitempty"`
}

// HealthPublication is one publication in the router's table.
type HealthPublication struct {
	ID    string `json:"id"`
	Role  string `json:"role"`
	Ready bool   `json:"ready"`
}

// maxWaitingOn caps the partitions a health report lists one by one.
const maxWaitingOn = 8

// Health reports the router's health (internal/health): Starting until it
// has a routing table, and while no partition has an eligible replica;
// Degraded while some partition has none (its keys fail) or every node is
// ejected; OK otherwise.
func (r *Router) Health(ctx context.Context) health.Status {
	t := r.table.Load()
	if t == nil || t.version == 0 {
		return health.Status{Status: health.Starting, WaitingOn: []string{"routing from the control plane"}}
	}
	st := r.Stats()
	d := HealthDetail{RoutingVersion: t.version, RoutingErrors: st.RoutingErrors, Partitions: t.partitions, Nodes: len(st.Nodes), Live: st.Live}
	for id, p := range t.pubs {
		d.Publications = append(d.Publications, HealthPublication{ID: id, Role: p.role, Ready: p.ready})
	}
	sort.Slice(d.Publications, func(i, j int) bool { return d.Publications[i].ID < d.Publications[j].ID })
	if !t.fetched.IsZero() {
		d.RoutingAgeMS = max(0, r.opts.Clock.Now().Sub(t.fetched).Milliseconds())
	}
	for _, n := range st.Nodes {
		if n.Ejected {
			d.EjectedNodes++
		}
	}
	var waiting []string
	for p, reps := range t.reps {
		ok := false
		for _, x := range reps {
			ok = ok || x.eligible
		}
		if ok {
			continue
		}
		d.Uncovered++
		if len(waiting) < maxWaitingOn {
			waiting = append(waiting, fmt.Sprintf("partition %d: no eligible replica", p))
		}
	}
	if d.Uncovered > len(waiting) {
		waiting = append(waiting, fmt.Sprintf("and %d more partitions", d.Uncovered-len(waiting)))
	}
	s := health.Status{Status: health.OK, WaitingOn: waiting, Detail: d}
	switch {
	case d.Partitions > 0 && d.Uncovered == d.Partitions:
		s.Status = health.Starting
	case d.Uncovered > 0 || (d.Nodes > 0 && d.EjectedNodes == d.Nodes):
		s.Status = health.Degraded
	}
	if d.Nodes > 0 && d.EjectedNodes == d.Nodes {
		s.WaitingOn = append(s.WaitingOn, "every node is ejected (recent errors)")
	}
	return s
}

// HealthHandler serves /healthz and /readyz (mount it with Register, or as
// one http.Handler). Its uptime counts from this call.
func (r *Router) HealthHandler() *health.Handler {
	return health.New(health.Options{Component: "router", Clock: r.opts.Clock}, r.Health)
}
