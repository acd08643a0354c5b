package control

import (
	"context"
	"time"

	"github.com/pillarkit/pillar/cobbled/controlpb"
)

// RegisterPublication registers a publication as the candidate (or, with
// promote_when_ready, one that becomes live once ready).
func (s *Server) RegisterPublication(ctx context.Context, req *controlpb.RegisterPublicationRequest) (*controlpb.PublicationResponse, error) {
	ch, err := s.store.RegisterPublication(ctx, req.Id, req.PromoteWhenReady, s.o.Now())
	if err != nil {
		return nil, err
	}
	if !ch.Unchanged {
		s.o.Metrics.publicationChange("register")
		s.o.Logger.Info("control: publication registered", "publication", req.Id, "role", ch.Publication.Role, "promote_when_ready", req.PromoteWhenReady)
		s.notify.routing()
		s.promoteReady(ctx) // already ready (a retained one registered again)
	}
	return s.changeResponse(ctx, ch)
}

// Promote makes a publication (the candidate by default) live.
func (s *Server) Promote(ctx context.Context, req *controlpb.PromoteRequest) (*controlpb.PublicationResponse, error) {
	ch, err := s.store.Promote(ctx, req.Id, req.Force, s.o.Now())
	if err != nil {
		return nil, err
	}
	if !ch.Unchanged {
		s.o.Metrics.publicationChange("promote")
		s.o.Logger.Info("control: publication promoted", "publication", ch.Publication.ID, "was_live", ch.WasLive, "force", req.Force)
		s.notify.routing()
	}
	return s.changeResponse(ctx, ch)
}

// Rollback makes the previous publication live again (twice: forward).
func (s *Server) Rollback(ctx context.Context, req *controlpb.RollbackRequest) (*controlpb.PublicationResponse, error) {
	ch, err := s.store.RollbackPublication(ctx, req.Force, s.o.Now())
	if err != nil {
		return nil, err
	}
	s.o.Metrics.publicationChange("rollback")
	s.o.Logger.Info("control: rolled back", "publication", ch.Publication.ID, "was_live", ch.WasLive)
	s.notify.routing()
	return s.changeResponse(ctx, ch)
}

// Retire retires a publication that is not live.
func (s *Server) Retire(ctx context.Context, req *controlpb.RetireRequest) (*controlpb.PublicationResponse, error) {
	ch, err := s.store.Retire(ctx, req.Id, s.o.Now())
	if err != nil {
		return nil, err
	}
	if !ch.Unchanged {
		s.o.Metrics.publicationChange("retire")
		s.o.Logger.Info("control: publication retired", "publication", req.Id)
		s.notify.routing()
	}
	return s.changeResponse(ctx, ch)
}

// ListPublications lists every publication with each replica's view.
func (s *Server) ListPublications(ctx context.Context, _ *controlpb.ListPublicationsRequest) (*controlpb.ListPublicationsResponse, error) {
	pubs, live, err := s.store.Publications(ctx)
	if err != nil {
		return nil, err
	}
	out := &controlpb.ListPublicationsResponse{Live: live}
	for i := range pubs {
		out.Publications = append(out.Publications, statusToPB(&pubs[i]))
	}
	return out, nil
}

// promoteReady promotes a candidate waiting to be promoted once ready, if
// it is ready now. Failures are logged: the next report or the reconcile
// tick tries again.
func (s *Server) promoteReady(ctx context.Context) {
	ch, err := s.store.PromoteReady(ctx, s.o.Now())
	if err != nil {
		s.o.Logger.Warn("control: promote when ready", "err", err)
		return
	}
	if ch != nil {
		s.o.Metrics.publicationChange("auto_promote")
		s.o.Logger.Info("control: publication ready and promoted", "publication", ch.Publication.ID, "was_live", ch.WasLive)
		s.notify.routing()
	}
}

func (s *Server) changeResponse(_ context.Context, ch PublicationChange) (*controlpb.PublicationResponse, error) {
	return &controlpb.PublicationResponse{Publication: publicationToPB(&ch.Publication.Publication), RoutingVersion: ch.RoutingVersion,
		WasLive: ch.WasLive, Unchanged: ch.Unchanged}, nil
}

func publicationToPB(p *Publication) *controlpb.Publication {
	out := &controlpb.Publication{Id: p.ID, Role: p.Role, BaseSeq: p.BaseSeq, NewestSnapshot: p.NewestSnapshot, Ready: p.Ready,
		PromoteWhenReady: p.PromoteWhenReady}
	if !p.CreatedAt.IsZero() {
		out.CreatedAtMs = p.CreatedAt.UnixMilli()
	}
	if !p.RoleAt.IsZero() {
		out.RoleAtMs = p.RoleAt.UnixMilli()
	}
	return out
}

func publicationFromPB(p *controlpb.Publication) Publication {
	if p == nil {
		return Publication{}
	}
	out := Publication{ID: p.Id, Role: p.Role, BaseSeq: p.BaseSeq, NewestSnapshot: p.NewestSnapshot, Ready: p.Ready, PromoteWhenReady: p.PromoteWhenReady}
	if p.CreatedAtMs > 0 {
		out.CreatedAt = time.UnixMilli(p.CreatedAtMs)
	}
	if p.RoleAtMs > 0 {
		out.RoleAt = time.UnixMilli(p.RoleAtMs)
	}
	return out
}

func statusToPB(ps *PublicationStatus) *controlpb.PublicationStatus {
	out := &controlpb.PublicationStatus{Publication: publicationToPB(&ps.Publication), Holding: int32(ps.Holding), Assigned: int32(ps.Assigned)}
	for _, r := range ps.Replicas {
		out.Replicas = append(out.Replicas, &controlpb.ReplicaPublication{NodeId: r.NodeID, Partition: int32(r.Partition), AppliedSeq: r.AppliedSeq,
			Holding: r.Holding, Bytes: r.Bytes, State: r.State})
	}
	return out
}

func statusFromPB(p *controlpb.PublicationStatus) PublicationStatus {
	out := PublicationStatus{Publication: publicationFromPB(p.Publication), Holding: int(p.Holding), Assigned: int(p.Assigned)}
	for _, r := range p.Replicas {
		out.Replicas = append(out.Replicas, ReplicaPublication{NodeID: r.NodeId, Partition: int(r.Partition), AppliedSeq: r.AppliedSeq,
			Holding: r.Holding, Bytes: r.Bytes, State: r.State})
	}
	return out
}
