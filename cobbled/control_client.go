package cobbled

import (
	"context"
	"time"

	"github.com/pillarkit/pillar/cobbled/control"
)

// CallTimeout bounds every control-plane call a node makes (a long poll
// gets its wait on top): a call sent into a link that went silent fails
// and is retried instead of holding the heartbeat loop, or a partition's
// worker, until TCP gives up.
const CallTimeout = 10 * time.Second

// FromControlClient adapts the control-plane client to Control; every call
// has a deadline (CallTimeout).
func FromControlClient(c *control.Client) Control { return controlClient{c} }

type controlClient struct{ c *control.Client }

func bounded(ctx context.Context, extra time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, CallTimeout+extra)
}

func (a controlClient) ListBatches(ctx context.Context, partition int, afterSeq int64, limit int, wait time.Duration) ([]Batch, error) {
	ctx, cancel := bounded(ctx, wait)
	defer cancel()
	es, err := a.c.ListBatches(ctx, partition, afterSeq, limit, wait)
	if err != nil {
		return nil, err
	}
	out := make([]Batch, len(es))
	for i, e := range es {
		out[i] = Batch{Seq: e.Seq, Manifest: e.Manifest, Retracted: e.Retracted}
	}
	return out, nil
}

// bytesReporter is the control client's ReportApplied with the bytes of
// each publication's database (the control plane sizes publications and
// plans retirement from them). Found by assertion so that a client
// without it still works (it then reports the seq only).
type bytesReporter interface {
	ReportAppliedBytes(ctx context.Context, nodeID string, partition int, seq int64, publicationBytes map[string]int64) error
}

func (a controlClient) ReportApplied(ctx context.Context, nodeID string, partition int, seq int64, pubBytes map[string]int64) error {
	ctx, cancel := bounded(ctx, 0)
	defer cancel()
	if br, ok := any(a.c).(bytesReporter); ok {
		return br.ReportAppliedBytes(ctx, nodeID, partition, seq, pubBytes)
	}
	return a.c.ReportApplied(ctx, nodeID, partition, seq)
}

func (a controlClient) GetRouting(ctx context.Context) (*Routing, error) {
	ctx, cancel := bounded(ctx, 0)
	defer cancel()
	r, err := a.c.GetRouting(ctx)
	if err != nil {
		return nil, err
	}
	out := &Routing{Version: r.Version, Partitions: r.Partitions, NewestSeq: r.NewestSeq, Replicas: make([][]Replica, len(r.Replicas)), Live: r.Live}
	for _, pub := range r.Publications {
		out.Publications = append(out.Publications, Publication{ID: pub.ID, Role: pub.Role})
	}
	for p, reps := range r.Replicas {
		for _, rep := range reps {
			out.Replicas[p] = append(out.Replicas[p], Replica{NodeID: rep.NodeID, State: rep.State, AppliedSeq: rep.AppliedSeq})
		}
	}
	return out, nil
}

func (a controlClient) RegisterNode(ctx context.Context, id, addr, zone string) error {
	ctx, cancel := bounded(ctx, 0)
	defer cancel()
	return a.c.RegisterNode(ctx, control.Node{ID: id, Addr: addr, Zone: zone})
}

func (a controlClient) Heartbeat(ctx context.Context, nodeID string) error {
	ctx, cancel := bounded(ctx, 0)
	defer cancel()
	return a.c.Heartbeat(ctx, nodeID)
}

func (a controlClient) ReportFault(ctx context.Context, f Fault) error {
	ctx, cancel := bounded(ctx, 0)
	defer cancel()
	return a.c.ReportFault(ctx, control.Fault{Node: f.NodeID, Partition: f.Partition, BatchID: f.BatchID, Reason: f.Reason, Serving: f.Serving})
}
