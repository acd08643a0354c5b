package cobbled

import (
	"context"
	"io"
	"time"

	"github.com/pillarkit/pillar/internal/batch"
)

// Control is what a node needs from the control plane. The control-plane
// client (package cobbled/control) satisfies it through FromControlClient; tests
// use an in-memory fake.
type Control interface {
	BatchLister
	ProgressReporter
	RoutingSource
	// RegisterNode announces the node (id, address, zone); idempotent.
	RegisterNode(ctx context.Context, id, addr, zone string) error
	// Heartbeat keeps the node marked up.
	Heartbeat(ctx context.Context, nodeID string) error
	// ReportFault records a replica's fault (or clears it: empty Reason).
	ReportFault(ctx context.Context, f Fault) error
}

// Fault is a replica's fault as the node reports it (see control.Fault).
type Fault struct {
	NodeID    string
	Partition int
	BatchID   string // the refused batch; "" for the replica's own data
	Reason    string // "" clears
	Serving   bool   // false: the replica does not serve the partition
}

// BatchLister lists a partition's registered batches in sequence order.
type BatchLister interface {
	// ListBatches returns up to limit batches of partition with Seq > afterSeq,
	// in order. With wait > 0 it long-polls until at least one exists or wait
	// elapses (then it returns none).
	ListBatches(ctx context.Context, partition int, afterSeq int64, limit int, wait time.Duration) ([]Batch, error)
}

// ProgressReporter records a replica's applied sequence number and the
// bytes of each publication's database on it (key "" = the legacy
// publication).
type ProgressReporter interface {
	ReportApplied(ctx context.Context, nodeID string, partition int, seq int64, publicationBytes map[string]int64) error
}

// RoutingSource returns the current partition → replicas assignment.
type RoutingSource interface {
	GetRouting(ctx context.Context) (*Routing, error)
}

// Batch is one registered batch: its partition sequence number and manifest.
type Batch struct {
	Seq      int64
	Manifest batch.Manifest
	// Retracted is non-empty (the reason) when the batch was retracted:
	// the replica skips it.
	Retracted string
}

// Routing is the assignment as the node sees it.
type Routing struct {
	Version    int64
	Partitions int
	// Replicas[p] lists partition p's replicas.
	Replicas [][]Replica
	// NewestSeq[p] is the newest registered sequence number of partition p.
	NewestSeq []int64
	// Publications are the publications the control plane keeps (none
	// from a control plane before publications: everything is then the
	// legacy "" publication); Live is the live one's id.
	Publications []Publication
	Live         string
}

// Publication roles (as in package cobbled/control).
const (
	RoleCandidate = "candidate"
	RoleLive      = "live"
	RolePrevious  = "previous"
	RoleRetired   = "retired"
)

// Publication is a publication as the node sees it in routing.
type Publication struct {
	ID   string
	Role string
}

// Replica is one replica of a partition.
type Replica struct {
	NodeID     string
	State      string // "up" or "down"
	AppliedSeq int64
}

// ObjectGetter fetches objects from the object store (objstore.Store
// satisfies it).
type ObjectGetter interface {
	Get(ctx context.Context, key string) (io.ReadCloser, error)
}
