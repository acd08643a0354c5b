package control

import (
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
// assignment, a replica's address or zone, or a node's state changes; it does
// not change when replicas report progress, so AppliedSeq and lag in a cached
// copy may be stale.
type Routing struct {
	Version    int64
	Partitions int
	Replicas   [][]Replica // index = partition; most preferred first
	NewestSeq  []int64     // index = partition
	// NewestAt is when each partition's newest batch was registered (zero
	// when it has none).
	NewestAt    []time.Time
	GeneratedAt time.Time
	// Publications lists the retained publications (and retired ones not
	// yet collected); Live is the live publication's id. A replica HOLDS
	// publication P on partition p iff P is not retired, P.BaseSeq[p] > 0
	// and the replica's AppliedSeq >= P.BaseSeq[p]; routers use exactly
	// this rule.
	Publications []Publication
	Live         string
}

// Publication roles.
const (
	RoleCandidate = "candidate"
	RoleLive      = "live"
	RolePrevious  = "previous"
	RoleRetired   = "retired"
)

// Publication is one (chunk version, model) pair made servable.
type Publication struct {
	ID      string  // pillar.EmbedVersionID(chunk version, model); "" = legacy
	Role    string  // RoleCandidate, RoleLive, RolePrevious or RoleRetired
	BaseSeq []int64 // index = partition: seq of its newest snapshot batch (0 = none yet)
	// Ready: every assigned replica of every partition has AppliedSeq >=
	// BaseSeq[p] (and BaseSeq[p] > 0).
	Ready             bool
	CreatedAt, RoleAt time.Time
}

// NodeStatus is a node as the control plane sees it.
type NodeStatus struct {
	Node
	State         string // StateUp, StateDown or StateGone
	LastHeartbeat time.Time
	RegisteredAt  time.Time
	Replicas      int // partitions assigned to it
}
