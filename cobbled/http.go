package cobbled

import (
	"context"
	"fmt"

	"github.com/pillarkit/pillar/internal/health"
)

// HealthDetail is the "detail" of a node's /healthz and /readyz.
type HealthDetail struct {
	ID         string `json:"id"`
	Partitions int    `json:"partitions"` // the deployment's partition count
	Held       int    `json:"held"`       // replicas this node holds
	Serving    int    `json:"serving"`    // of them, serving (not rebuilding, not waiting for a first batch)
	// Faults lists the replica faults, "partition 7: corrupt batch …".
	Faults             []string `json:"faults,omitempty"`
	CacheUsageBytes    uint64   `json:"cache_usage_bytes"`
	CacheCapacityBytes uint64   `json:"cache_capacity_bytes"`
	// Live is the live publication as the node last saw routing;
	// PublicationBytes the bytes of each publication's databases on this
	// node, all partitions together ("" = the legacy one).
	Live             string           `json:"live"`
	PublicationBytes map[string]int64 `json:"publication_bytes,omitempty"`
}

// maxWaitingOn caps the partitions a health report lists one by one.
const maxWaitingOn = 8

// Health reports the node's health (internal/health): Closing once it is
// closing; Starting while it holds replicas and none serves yet (each waits
// on its first batch, registered but not applied, or on a rebuild; a
// partition with no batch registered at all serves its empty answer);
// Degraded with a replica fault (a
// corrupt batch refused, or corrupt own data being rebuilt): the node still
// serves what it has, other replicas serve the rest; OK otherwise. A
// replica whose last batch failed is still healthy (its error is in Stats).
func (n *Node) Health(ctx context.Context) health.Status {
	if n.closed.Load() {
		return health.Status{Status: health.Closing}
	}
	st := n.Stats()
	d := HealthDetail{ID: n.opts.ID, Partitions: st.Partitions, Held: len(st.Held),
		CacheUsageBytes: st.CacheUsage, CacheCapacityBytes: st.CacheCapacity, Live: st.Live}
	for _, h := range st.Held {
		for _, pb := range h.Publications {
			if d.PublicationBytes == nil {
				d.PublicationBytes = map[string]int64{}
			}
			d.PublicationBytes[pb.ID] += pb.Bytes
		}
	}
	var waiting []string
	pending := 0 // replicas without data to serve
	for _, h := range st.Held {
		if h.Fault != "" {
			d.Faults = append(d.Faults, fmt.Sprintf("partition %d: %s", h.Partition, h.Fault))
		}
		var what string
		switch {
		case !h.Serving:
			what = "rebuild"
		case h.AppliedSeq == 0 && h.NewestSeq > 0:
			what = fmt.Sprintf("first batch (seq %d registered)", h.NewestSeq)
		default:
			d.Serving++
			continue
		}
		pending++
		if len(waiting) < maxWaitingOn {
			waiting = append(waiting, fmt.Sprintf("partition %d: %s", h.Partition, what))
		}
	}
	if pending > len(waiting) {
		waiting = append(waiting, fmt.Sprintf("and %d more partitions", pending-len(waiting)))
	}
	s := health.Status{Status: health.OK, WaitingOn: waiting, Detail: d}
	switch {
	case d.Held > 0 && d.Serving == 0:
		s.Status = health.Starting
	case len(d.Faults) > 0:
		s.Status = health.Degraded
	}
	return s
}

// HealthHandler serves /healthz and /readyz (mount it with Register, or as
// one http.Handler): 200 on /healthz until the node is closing, then 503;
// /readyz 200 once a replica serves. Its uptime counts from this call.
func (n *Node) HealthHandler() *health.Handler {
	return health.New(health.Options{Component: "cobbled", Clock: n.opts.Clock}, n.Health)
}
