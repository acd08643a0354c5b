package control

import (
	"fmt"
	"time"

	"github.com/pillarkit/pillar/internal/batch"
)

// Node states as reported in routing and node listings.
const (
	StateUp   = "up"   // heartbeating; routed to
	StateDown = "down" // missed heartbeats past DownAfter; still assigned, not routed to
	StateGone = "gone" // down past ReassignAfter; its partitions are reassigned
	// StateCorrupt is a replica (not a node) state in routing: the replica
	// found its own data corrupt and rebuilds it; it is not routed to.
	StateCorrupt = "corrupt"
)

// BatchEntry is one registered batch of a partition's log.
type BatchEntry struct {
	Seq          int64
	Manifest     batch.Manifest
	RegisteredAt time.Time
	// Retracted is non-empty when the batch was retracted (the reason):
	// replicas skip it.
	Retracted string
}

// Node is a serving node as it registers itself.
type Node struct {
	ID, Addr, Zone string
}

// Replica is one replica of a partition in a routing table.
type Replica struct {
	NodeID, Addr, Zone string
	State              string // StateUp, StateDown or StateCorrupt
	AppliedSeq         int64
	// Fault is the replica's last reported fault ("" when healthy), e.g.
	// "corrupt batch <id>: <reason>".
	Fault string
	// LagBatches is the partition's newest seq minus AppliedSeq.
	LagBatches int64
	// Lag is the age of the oldest batch the replica has not applied yet
	// (zero when it is caught up).
	Lag time.Duration
}

// Routing is the partition -> replicas table. Version changes whenever the
// assignment, a replica's address or zone, or a node's state changes, a
// publication is registered or changes role, a snapshot is registered, or a
// replica passes a snapshot of a retained publication (so it may hold one it
// did not); it does not change on other progress reports, so AppliedSeq and
// lag in a cached copy may be stale.
type Routing struct {
	Version    int64
	Partitions int
	Replicas   [][]Replica // index = partition; most preferred first
	NewestSeq  []int64     // index = partition
	// NewestAt is when each partition's newest batch was registered (zero
	// when it has none).
	NewestAt    []time.Time
	GeneratedAt time.Time
	// Publications are the registered publications that are not retired,
	// plus those retired in the last RetiredListed (so nodes see the
	// retirement and drop their databases; nothing holds a retired
	// publication). Live is the live one's id; "" is the legacy unnamed
	// publication, also when none is registered. A replica HOLDS
	// publication P on partition p iff P is not retired, P.BaseSeq[p] > 0
	// and the replica's AppliedSeq >= P.BaseSeq[p] (Publication.Holds);
	// routers use exactly this rule.
	Publications []Publication
	Live         string
}

// RetiredListed is how long a retired publication stays in the routing
// table after its retirement.
const RetiredListed = 7 * 24 * time.Hour

// Publication roles.
const (
	RoleCandidate = "candidate" // being built or compared; readable by name
	RoleLive      = "live"      // what a read without a version gets
	RolePrevious  = "previous"  // the one live before: `pillar rollback` returns to it
	RoleRetired   = "retired"   // no longer kept; its batches go after RetireGrace
)

// Publication is a (chunk version, model) pair made servable; ID is
// pillar.EmbedVersionID(chunk version, model) and "" the legacy unnamed
// publication (batches written before publications existed).
//
// A replica HOLDS publication P on partition p iff P is not retired,
// BaseSeq[p] > 0 and the replica's AppliedSeq >= BaseSeq[p] (Holds).
type Publication struct {
	ID   string
	Role string // RoleCandidate, RoleLive, RolePrevious or RoleRetired
	// BaseSeq, index = partition, is the seq of the publication's oldest
	// retained snapshot batch (0 = none yet). Garbage collection keeps, per
	// partition, every batch from the smallest BaseSeq of the publications
	// that are not retired on, and moves a publication's oldest retained
	// snapshot up to the newest one that every assigned replica applied; so
	// a replica that applied BaseSeq[p] has the publication's snapshot and
	// its later deltas, and one behind the GC floor is listed from the
	// smallest BaseSeq.
	BaseSeq []int64
	// NewestSnapshot, index = partition, is the seq of the publication's
	// newest snapshot batch (0 = none): a replica that applied it serves
	// the publication's newest export.
	NewestSnapshot []int64
	// Ready: every assigned replica of every partition holds it (and every
	// partition has a snapshot of it).
	Ready bool
	// PromoteWhenReady: a candidate that becomes live by itself once Ready.
	PromoteWhenReady  bool
	CreatedAt, RoleAt time.Time
}

// Holds reports whether a replica of partition p that applied the log
// through applied holds the publication.
func (pb *Publication) Holds(p int, applied int64) bool {
	return pb.Role != RoleRetired && p >= 0 && p < len(pb.BaseSeq) && pb.BaseSeq[p] > 0 && applied >= pb.BaseSeq[p]
}

// Publication returns the routing's publication id, or nil.
func (r *Routing) Publication(id string) *Publication {
	for i := range r.Publications {
		if r.Publications[i].ID == id {
			return &r.Publications[i]
		}
	}
	return nil
}

// ReplicaPublication is one replica (node, partition) seen from one
// publication.
type ReplicaPublication struct {
	NodeID     string
	Partition  int
	AppliedSeq int64
	Holding    bool
	Bytes      int64  // the publication's database on the replica, as last reported; 0 = unknown
	State      string // the replica's routing state (StateUp, ...)
}

// PublicationStatus is a publication with each assigned replica's view of it.
type PublicationStatus struct {
	Publication
	Replicas []ReplicaPublication // by partition, then routing preference
	Holding  int                  // replicas holding it
	Assigned int                  // replicas assigned, all partitions together
}

// Lagging returns the replicas that do not hold the publication yet, as
// "node/p<partition> (applied A, needs B)"; a partition without a snapshot
// of it is "p<partition> (no snapshot yet)".
func (ps *PublicationStatus) Lagging() []string {
	var out []string
	for p, base := range ps.BaseSeq {
		if base == 0 {
			out = append(out, fmt.Sprintf("p%d (no snapshot yet)", p))
		}
	}
	for _, r := range ps.Replicas {
		if !r.Holding && r.Partition < len(ps.BaseSeq) && ps.BaseSeq[r.Partition] > 0 {
			out = append(out, fmt.Sprintf("%s/p%d (applied %d, needs %d)", r.NodeID, r.Partition, r.AppliedSeq, ps.BaseSeq[r.Partition]))
		}
	}
	return out
}

// NodeStatus is a node as the control plane sees it.
type NodeStatus struct {
	Node
	State         string // StateUp, StateDown or StateGone
	LastHeartbeat time.Time
	RegisteredAt  time.Time
	Replicas      int // partitions assigned to it
}
