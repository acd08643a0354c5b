package control

import (
	"context"
	"fmt"
	"strconv"

	"github.com/pillarkit/pillar/cobbled/controlpb"
)

// ReportAppliedBytes is ReportApplied that also reports the bytes of each
// publication's database of the partition on the node (shown by `pillar
// status` and `pillar versions`).
func (c *Client) ReportAppliedBytes(ctx context.Context, nodeID string, partition int, seq int64, publicationBytes map[string]int64) error {
	_, err := c.rpc.ReportApplied(ctx, &controlpb.ReportAppliedRequest{NodeId: nodeID, Partition: int32(partition), Seq: seq, PublicationBytes: publicationBytes})
	if err != nil {
		return fromStatus(fmt.Sprintf("report applied %s p%d seq %d", nodeID, partition, seq), err)
	}
	return nil
}

// RegisterPublication registers id as the candidate publication; with
// promoteWhenReady it becomes live by itself once every replica holds it
// (at once when nothing is live). A registered id is returned unchanged.
func (c *Client) RegisterPublication(ctx context.Context, id string, promoteWhenReady bool) (PublicationChange, error) {
	r, err := c.rpc.RegisterPublication(ctx, &controlpb.RegisterPublicationRequest{Id: id, PromoteWhenReady: promoteWhenReady})
	if err != nil {
		return PublicationChange{}, fromStatus("register publication "+strconv.Quote(id), err)
	}
	return changeFromPB(r), nil
}

// Promote makes id (the candidate when "") live; ErrNotReady names the
// lagging replicas unless force.
func (c *Client) Promote(ctx context.Context, id string, force bool) (PublicationChange, error) {
	r, err := c.rpc.Promote(ctx, &controlpb.PromoteRequest{Id: id, Force: force})
	if err != nil {
		return PublicationChange{}, fromStatus("promote", err)
	}
	return changeFromPB(r), nil
}

// Rollback makes the previous publication live again (and the live one
// previous); ErrNoPrevious lists what is retained, ErrNotReady names the
// replicas that no longer hold the previous one (unless force).
func (c *Client) Rollback(ctx context.Context, force bool) (PublicationChange, error) {
	r, err := c.rpc.Rollback(ctx, &controlpb.RollbackRequest{Force: force})
	if err != nil {
		return PublicationChange{}, fromStatus("rollback", err)
	}
	return changeFromPB(r), nil
}

// Retire retires a publication that is not live.
func (c *Client) Retire(ctx context.Context, id string) (PublicationChange, error) {
	r, err := c.rpc.Retire(ctx, &controlpb.RetireRequest{Id: id})
	if err != nil {
		return PublicationChange{}, fromStatus("retire "+strconv.Quote(id), err)
	}
	return changeFromPB(r), nil
}

// ListPublications returns every publication (live first, retired last)
// with each assigned replica's view, and the live one's id.
func (c *Client) ListPublications(ctx context.Context) ([]PublicationStatus, string, error) {
	r, err := c.rpc.ListPublications(ctx, &controlpb.ListPublicationsRequest{})
	if err != nil {
		return nil, "", fromStatus("list publications", err)
	}
	out := make([]PublicationStatus, 0, len(r.Publications))
	for _, p := range r.Publications {
		out = append(out, statusFromPB(p))
	}
	return out, r.Live, nil
}

func changeFromPB(r *controlpb.PublicationResponse) PublicationChange {
	return PublicationChange{Publication: PublicationStatus{Publication: publicationFromPB(r.Publication)}, RoutingVersion: r.RoutingVersion,
		WasLive: r.WasLive, Unchanged: r.Unchanged}
}
