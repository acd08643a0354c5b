package control

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pillarkit/pillar/cobbled/controlpb"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/grpclink"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Server implements the controlpb.Control service over a Store.
type Server struct {
	controlpb.UnimplementedControlServer
	o       Options
	store   *Store
	started time.Time
	// storeFailedAt (unix nanos) is the last time a heartbeat or a
	// reconcile could not reach the store: heartbeats sent while it was
	// unreachable were lost, so node ages count from then at the earliest.
	storeFailedAt atomic.Int64
	notify        *notifier
	// stampWake asks the GC loop to stamp newly registered manifests.
	stampWake chan struct{}
	// reconcileMu keeps one reconcile at a time in this process (the store
	// serializes across processes anyway; this avoids useless contention).
	reconcileMu sync.Mutex
	authState   // auth.go: credentials and refusals
}

// NewServer returns a Server. It reconciles nothing until Run or Reconcile.
func NewServer(opts *Options) (*Server, error) {
	o := *opts
	o.ensureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	s := &Server{o: o, store: o.Store, started: o.Now(), notify: newNotifier(o.Store.Partitions()), stampWake: make(chan struct{}, 1)}
	if err := s.SetCredentials(o.Credentials); err != nil {
		return nil, err
	}
	return s, nil
}

// GRPCServer returns a grpc.Server with this service registered behind the
// auth, metrics and error-mapping interceptor.
func (s *Server) GRPCServer(extra ...grpc.ServerOption) *grpc.Server {
	opts := append(append(grpclink.ServerOptions(), grpc.ChainUnaryInterceptor(s.UnaryInterceptor())), extra...)
	g := grpc.NewServer(opts...)
	controlpb.RegisterControlServer(g, s)
	return g
}

// longPoll names the methods that may wait up to MaxWait.
var longPoll = map[string]bool{
	controlpb.Control_ListBatches_FullMethodName: true,
	controlpb.Control_GetRouting_FullMethodName:  true,
}

// UnaryInterceptor checks the bearer token on mutating calls, records
// metrics and maps errors to gRPC status codes.
func (s *Server) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		method := info.FullMethod[strings.LastIndex(info.FullMethod, "/")+1:]
		var resp any
		err := s.authorize(ctx, info.FullMethod, req) // auth.go
		if err == nil {
			limit := s.o.CallTimeout
			if longPoll[info.FullMethod] {
				limit += s.o.MaxWait
			}
			cctx, cancel := context.WithTimeout(ctx, limit)
			resp, err = handler(cctx, req)
			cancel()
		}
		if err != nil {
			err = toStatus(err)
			if status.Code(err) == codes.Internal || status.Code(err) == codes.Unavailable {
				s.o.Logger.Warn("control: call failed", "method", method, "err", err)
			}
		}
		s.o.Metrics.observeRPC(method, status.Code(err), time.Since(start))
		return resp, err
	}
}

// sentinelReasons names each sentinel on the wire (ErrorInfo.Reason), so
// the client restores the exact sentinel even where codes are shared.
var sentinelReasons = []struct {
	err    error
	code   codes.Code
	reason string
}{
	{ErrInvalid, codes.InvalidArgument, "INVALID"},
	{ErrConflict, codes.AlreadyExists, "CONFLICT"},
	{ErrUnknownNode, codes.NotFound, "UNKNOWN_NODE"},
	{ErrNotFound, codes.NotFound, "NOT_FOUND"},
	{ErrBackwards, codes.FailedPrecondition, "BACKWARDS"},
	{ErrPartitions, codes.FailedPrecondition, "PARTITIONS"},
	{ErrUnavailable, codes.Unavailable, "UNAVAILABLE"},
	{ErrUnauthenticated, codes.Unauthenticated, "UNAUTHENTICATED"},
	{ErrPermissionDenied, codes.PermissionDenied, "PERMISSION_DENIED"},
	{ErrNodeUp, codes.FailedPrecondition, "NODE_UP"},
	{ErrNotDelivered, codes.FailedPrecondition, "NOT_DELIVERED"},
	{ErrNotReady, codes.FailedPrecondition, "NOT_READY"},
	{ErrNoPrevious, codes.FailedPrecondition, "NO_PREVIOUS"},
}

const errorDomain = "control.pillar"

func toStatus(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	for _, r := range sentinelReasons {
		if errors.Is(err, r.err) {
			st, derr := status.New(r.code, err.Error()).WithDetails(&errdetails.ErrorInfo{Reason: r.reason, Domain: errorDomain})
			if derr != nil {
				return status.Error(r.code, err.Error())
			}
			return st.Err()
		}
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// Info answers the partition count, backend and routing version.
func (s *Server) Info(ctx context.Context, _ *controlpb.InfoRequest) (*controlpb.InfoResponse, error) {
	v, err := s.store.RoutingVersion(ctx)
	if err != nil {
		return nil, err
	}
	return &controlpb.InfoResponse{Partitions: int32(s.store.Partitions()), Backend: s.store.Backend(),
		RoutingVersion: v, SchemaVersion: int32(SchemaVersion)}, nil
}

// RegisterBatch validates and appends a batch, then wakes the partition's
// long pollers.
func (s *Server) RegisterBatch(ctx context.Context, req *controlpb.RegisterBatchRequest) (*controlpb.RegisterBatchResponse, error) {
	m, err := batch.Decode(req.ManifestJson)
	if err != nil {
		return nil, errf(ErrInvalid, "register batch: %v", err)
	}
	seq, existed, err := s.store.RegisterBatch(ctx, m, s.o.Now())
	if err != nil {
		return nil, err
	}
	if !existed {
		s.notify.batch(m.Partition)
		s.o.Metrics.batchRegistered()
		s.o.Logger.Debug("control: batch registered", "partition", m.Partition, "seq", seq, "id", m.ID, "kind", m.Kind)
		// The GC loop writes seq and parent into the stored manifest, off
		// the registration path and never concurrently with a deletion.
		select {
		case s.stampWake <- struct{}{}:
		default:
		}
	}
	return &controlpb.RegisterBatchResponse{Seq: seq, Existed: existed}, nil
}

// RetractBatch marks a batch bad; replicas skip it.
func (s *Server) RetractBatch(ctx context.Context, req *controlpb.RetractBatchRequest) (*controlpb.RetractBatchResponse, error) {
	r, err := s.store.RetractBatch(ctx, req.BatchId, req.Why)
	if err != nil {
		return nil, err
	}
	if !r.Already {
		// Recorded next to the batch too, so a log rebuilt from the object
		// store keeps the retraction.
		if w, ok := s.o.Objects.(objectWriter); ok {
			why := []byte(req.Why + "\n")
			if err := w.Put(ctx, batch.Prefix(r.Partition, req.BatchId)+RetractedObject, bytes.NewReader(why), int64(len(why)), nil); err != nil {
				s.o.Logger.Warn("control: record retraction in the object store", "id", req.BatchId, "err", err)
			}
		}
		s.notify.batch(r.Partition)
		s.o.Logger.Warn("control: batch retracted", "partition", r.Partition, "seq", r.Seq, "id", req.BatchId, "why", req.Why)
	}
	return &controlpb.RetractBatchResponse{Partition: int32(r.Partition), Seq: r.Seq, Already: r.Already}, nil
}

// ReportFault records a replica's fault; one that stops serving changes the
// routing at once.
func (s *Server) ReportFault(ctx context.Context, req *controlpb.ReportFaultRequest) (*controlpb.ReportFaultResponse, error) {
	f := Fault{Node: req.NodeId, Partition: int(req.Partition), BatchID: req.BatchId, Reason: req.Reason, Serving: req.Serving}
	changed, err := s.store.ReportFault(ctx, f, s.o.Now())
	if err != nil {
		return nil, err
	}
	if f.Reason != "" {
		s.o.Logger.Warn("control: replica fault", "node", f.Node, "partition", f.Partition, "batch", f.BatchID, "serving", f.Serving, "reason", f.Reason)
	}
	s.o.Metrics.replicaFault(f.Reason != "")
	if changed {
		s.notify.routing()
	}
	return &controlpb.ReportFaultResponse{}, nil
}

// ListBatches returns the batches after a seq, waiting up to wait_ms (capped
// at MaxWait) for one when there are none.
func (s *Server) ListBatches(ctx context.Context, req *controlpb.ListBatchesRequest) (*controlpb.ListBatchesResponse, error) {
	limit := int(req.Limit)
	switch {
	case limit < 0:
		return nil, errf(ErrInvalid, "list batches: limit %d is negative", limit)
	case limit == 0:
		limit = s.o.DefaultLimit
	case limit > s.o.MaxLimit:
		limit = s.o.MaxLimit
	}
	wait := min(time.Duration(req.WaitMs)*time.Millisecond, s.o.MaxWait)
	p := int(req.Partition)
	var timer *time.Timer
	for {
		// Take the wake-up channel before reading, so a batch registered
		// after the read closes the channel we wait on.
		woken := s.notify.batchChan(p)
		entries, head, err := s.store.listRaw(ctx, p, req.AfterSeq, limit)
		if err != nil {
			return nil, err
		}
		if len(entries) > 0 || wait <= 0 {
			return listResponse(entries, head)
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
			s.o.Metrics.waiters(1)
			defer s.o.Metrics.waiters(-1)
		}
		select {
		case <-woken:
		case <-timer.C:
			return listResponse(nil, head)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func listResponse(entries []rawEntry, head PartitionHead) (*controlpb.ListBatchesResponse, error) {
	resp := &controlpb.ListBatchesResponse{NewestSeq: head.NewestSeq, CollectedThrough: head.CollectedThrough,
		Batches: make([]*controlpb.BatchEntry, len(entries))}
	for i, e := range entries {
		resp.Batches[i] = &controlpb.BatchEntry{Seq: e.seq, ManifestJson: e.manifest, RegisteredAtMs: e.registeredAt.UnixMilli(), Retracted: e.retracted}
	}
	return resp, nil
}

// RegisterNode adds or updates a node (and counts as a heartbeat).
func (s *Server) RegisterNode(ctx context.Context, req *controlpb.RegisterNodeRequest) (*controlpb.RegisterNodeResponse, error) {
	if req.Node == nil {
		return nil, errf(ErrInvalid, "register node: no node")
	}
	n := Node{ID: req.Node.Id, Addr: req.Node.Addr, Zone: req.Node.Zone}
	changed, err := s.store.UpsertNode(ctx, n, s.o.Now())
	if err != nil {
		return nil, err
	}
	var v int64
	if changed {
		s.o.Logger.Info("control: node registered", "node", n.ID, "addr", n.Addr, "zone", n.Zone)
		v, err = s.Reconcile(ctx)
	} else {
		v, err = s.store.RoutingVersion(ctx)
	}
	if err != nil {
		return nil, err
	}
	return &controlpb.RegisterNodeResponse{RoutingVersion: v}, nil
}

// Heartbeat records a node's heartbeat; a node coming back up is routed to
// again at once.
func (s *Server) Heartbeat(ctx context.Context, req *controlpb.HeartbeatRequest) (*controlpb.HeartbeatResponse, error) {
	wasDown, err := s.store.Heartbeat(ctx, req.NodeId, s.o.Now())
	if err != nil {
		if !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrInvalid) {
			s.noteStoreFailure()
		}
		return nil, err
	}
	var v int64
	if wasDown {
		s.o.Logger.Info("control: node back up", "node", req.NodeId)
		v, err = s.Reconcile(ctx)
	} else {
		v, err = s.store.RoutingVersion(ctx)
	}
	if err != nil {
		return nil, err
	}
	return &controlpb.HeartbeatResponse{RoutingVersion: v}, nil
}

// RemoveNode decommissions a node and reassigns its partitions at once.
func (s *Server) RemoveNode(ctx context.Context, req *controlpb.RemoveNodeRequest) (*controlpb.RemoveNodeResponse, error) {
	if err := s.store.RemoveNode(ctx, req.NodeId, req.Force); err != nil {
		return nil, err
	}
	s.o.Logger.Info("control: node removed", "node", req.NodeId, "force", req.Force)
	v, err := s.Reconcile(ctx)
	if err != nil {
		return nil, err
	}
	return &controlpb.RemoveNodeResponse{RoutingVersion: v}, nil
}

// ReportApplied records a replica's progress.
func (s *Server) ReportApplied(ctx context.Context, req *controlpb.ReportAppliedRequest) (*controlpb.ReportAppliedResponse, error) {
	changed, err := s.store.ReportAppliedBytes(ctx, req.NodeId, int(req.Partition), req.Seq, req.PublicationBytes, s.o.Now())
	if err != nil {
		return nil, err
	}
	if changed {
		// The replica may hold a publication now: routers re-read, and a
		// candidate waiting to be promoted once ready may be.
		s.notify.routing()
		s.promoteReady(ctx)
	}
	return &controlpb.ReportAppliedResponse{}, nil
}

// GetRouting returns the routing table; with known_version and wait_ms it
// first waits (up to MaxWait) for a version newer than known_version.
func (s *Server) GetRouting(ctx context.Context, req *controlpb.GetRoutingRequest) (*controlpb.Routing, error) {
	if req.WaitMs > 0 && req.KnownVersion > 0 {
		timer := time.NewTimer(min(time.Duration(req.WaitMs)*time.Millisecond, s.o.MaxWait))
		defer timer.Stop()
	wait:
		for {
			woken := s.notify.routingChan()
			v, err := s.store.RoutingVersion(ctx)
			if err != nil {
				return nil, err
			}
			if v > req.KnownVersion {
				break
			}
			select {
			case <-woken:
			case <-timer.C:
				break wait
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	r, err := s.store.Routing(ctx, s.o.Now())
	if err != nil {
		return nil, err
	}
	return routingToPB(r), nil
}

func routingToPB(r *Routing) *controlpb.Routing {
	out := &controlpb.Routing{Version: r.Version, Partitions: int32(r.Partitions), GeneratedAtMs: r.GeneratedAt.UnixMilli()}
	for p, reps := range r.Replicas {
		pr := &controlpb.PartitionReplicas{NewestSeq: r.NewestSeq[p]}
		if !r.NewestAt[p].IsZero() {
			pr.NewestRegisteredAtMs = r.NewestAt[p].UnixMilli()
		}
		for _, rep := range reps {
			pr.Replicas = append(pr.Replicas, &controlpb.Replica{NodeId: rep.NodeID, Addr: rep.Addr, Zone: rep.Zone, State: rep.State,
				AppliedSeq: rep.AppliedSeq, LagBatches: rep.LagBatches, LagMs: rep.Lag.Milliseconds(), Fault: rep.Fault})
		}
		out.Partition = append(out.Partition, pr)
	}
	for i := range r.Publications {
		out.Publications = append(out.Publications, publicationToPB(&r.Publications[i]))
	}
	out.Live = r.Live
	return out
}

// ListNodes returns every node with its state and replica count.
func (s *Server) ListNodes(ctx context.Context, _ *controlpb.ListNodesRequest) (*controlpb.ListNodesResponse, error) {
	nodes, err := s.store.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	out := &controlpb.ListNodesResponse{}
	for _, n := range nodes {
		out.Nodes = append(out.Nodes, &controlpb.NodeStatus{Node: &controlpb.Node{Id: n.ID, Addr: n.Addr, Zone: n.Zone},
			State: n.State, LastHeartbeatMs: n.LastHeartbeat.UnixMilli(), RegisteredAtMs: n.RegisteredAt.UnixMilli(), Replicas: int32(n.Replicas)})
	}
	return out, nil
}

// noteStoreFailure records that the store could not be reached now.
func (s *Server) noteStoreFailure() { s.storeFailedAt.Store(s.o.Now().UnixNano()) }

// heartbeatFloor is the earliest time a heartbeat age counts from: the
// control plane's start, or the last time the store could not be reached
// (a PostgreSQL outage loses every heartbeat sent during it; counting them
// as missed would mark every node down, and every read fail, at once when
// it comes back).
func (s *Server) heartbeatFloor() time.Time {
	if f := s.storeFailedAt.Load(); f > s.started.UnixNano() {
		return time.Unix(0, f)
	}
	return s.started
}

// NodeState is the state of a node whose last heartbeat was at last, seen
// at now by a control plane that started at started: heartbeats older than
// the start count from the start, so a restarted control plane does not
// declare every node gone.
func NodeState(last, started, now time.Time, downAfter, reassignAfter time.Duration) string {
	if last.Before(started) {
		last = started
	}
	age := now.Sub(last)
	switch {
	case age < downAfter:
		return StateUp
	case age < reassignAfter:
		return StateDown
	}
	return StateGone
}

// Reconcile recomputes node states and the assignment now, writes them if
// they changed (bumping the routing version and waking GetRouting waiters)
// and returns the routing version.
func (s *Server) Reconcile(ctx context.Context) (int64, error) {
	s.reconcileMu.Lock()
	defer s.reconcileMu.Unlock()
	now := s.o.Now()
	floor := s.heartbeatFloor()
	var moved []string
	v, changed, err := s.store.Reconcile(ctx, func(nodes []NodeRecord, current [][]string) (map[string]string, [][]string) {
		states := make(map[string]string, len(nodes))
		var cands []Candidate
		for _, n := range nodes {
			st := NodeState(n.LastHeartbeat, floor, now, s.o.DownAfter, s.o.ReassignAfter)
			states[n.ID] = st
			if st != n.State {
				moved = append(moved, n.ID+":"+n.State+"->"+st)
			}
			if st != StateGone {
				cands = append(cands, Candidate{ID: n.ID, Zone: n.Zone})
			}
		}
		s.o.Metrics.nodeStates(states)
		return states, Assign(s.store.Partitions(), cands, s.o.Replicas)
	})
	if err != nil {
		if !errors.Is(ctx.Err(), context.Canceled) { // unreachable or timed out, not given up
			s.noteStoreFailure()
		}
		return 0, err
	}
	if changed {
		s.o.Logger.Info("control: routing changed", "version", v, "node_states", moved)
		s.notify.routing()
	}
	s.o.Metrics.routingVersion(v)
	return v, nil
}

// GCStats counts what one garbage-collection pass did.
type GCStats struct {
	Marked  int64 // batches newly marked collected
	Deleted int   // batches whose objects were deleted
	Objects int   // objects deleted
}

// CollectGarbage marks the batches every assigned replica has moved past
// (they precede a snapshot all of them applied) and deletes their objects.
// A batch's row stays, marked, so its id keeps its seq; a crash between the
// two steps is finished by the next pass.
func (s *Server) CollectGarbage(ctx context.Context) (GCStats, error) {
	var st GCStats
	if s.o.Objects == nil {
		return st, errf(ErrInvalid, "gc: no object store configured")
	}
	marked, err := s.store.MarkCollectable(ctx)
	if err != nil {
		return st, err
	}
	st.Marked = marked
	// Retired publications' batches, once their grace period is over.
	retired, err := s.store.MarkRetired(ctx, s.o.Now().Add(-s.o.RetireGrace))
	if err != nil {
		return st, err
	}
	if retired > 0 {
		s.notify.routing()
		for p := 0; p < s.store.Partitions(); p++ {
			s.notify.batch(p)
		}
	}
	st.Marked += retired
	for {
		pending, err := s.store.PendingCollections(ctx, 100)
		if err != nil {
			return st, err
		}
		if len(pending) == 0 {
			return st, nil
		}
		for _, c := range pending {
			prefix := batch.Prefix(c.Partition, c.ID)
			objs, err := s.o.Objects.List(ctx, prefix)
			if err != nil {
				return st, fmt.Errorf("control: gc: partition %d batch %q: list %s: %w", c.Partition, c.ID, prefix, err)
			}
			// The manifest goes last, so a crash midway leaves a batch
			// that still says what it was.
			sort.SliceStable(objs, func(i, j int) bool {
				return !strings.HasSuffix(objs[i].Key, "/manifest.json") && strings.HasSuffix(objs[j].Key, "/manifest.json")
			})
			for _, obj := range objs {
				if err := s.o.Objects.Delete(ctx, obj.Key); err != nil {
					return st, fmt.Errorf("control: gc: partition %d batch %q: delete %s: %w", c.Partition, c.ID, obj.Key, err)
				}
				st.Objects++
			}
			if err := s.store.FinishCollection(ctx, c.ID); err != nil {
				return st, err
			}
			st.Deleted++
			s.o.Metrics.batchCollected()
			s.o.Logger.Debug("control: gc: batch deleted", "partition", c.Partition, "seq", c.Seq, "id", c.ID, "objects", len(objs))
		}
	}
}

// Run reconciles every ReconcileInterval and, when Objects is set,
// collects garbage every GCInterval (in its own goroutine, so a long
// deletion never delays down detection), until ctx is done. Failures are
// logged and retried on the next tick, so a database outage does not stop
// it; each pass is bounded (CallTimeout for reconciling), so a hanging
// database does not wedge it either.
func (s *Server) Run(ctx context.Context) error {
	// On PostgreSQL, also wake long polls for changes other control-plane
	// processes make (see doc.go).
	go s.store.Listen(ctx, Listener{Batch: s.notify.batch, Routing: s.notify.routing, Resync: s.notify.all}, time.Second, s.o.Logger)
	if s.o.Objects != nil {
		go s.gcLoop(ctx)
	}
	t := time.NewTicker(s.o.ReconcileInterval)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, s.o.CallTimeout)
		if _, err := s.Reconcile(rctx); err != nil && ctx.Err() == nil {
			s.o.Logger.Warn("control: reconcile failed", "err", err)
		}
		s.promoteReady(rctx)
		cancel()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (s *Server) gcLoop(ctx context.Context) {
	t := time.NewTicker(s.o.GCInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.stampWake:
			sctx, cancel := context.WithTimeout(ctx, s.o.CallTimeout)
			for {
				n, err := s.StampManifests(sctx, -1, 0)
				if err != nil && ctx.Err() == nil {
					s.o.Logger.Warn("control: stamp manifests", "err", err, "stamped", n)
				}
				if err != nil || n < 100 {
					break
				}
			}
			cancel()
			continue
		case <-t.C:
		}
		gctx, cancel := context.WithTimeout(ctx, max(s.o.GCInterval, 5*time.Minute))
		if n, err := s.StampManifests(gctx, -1, 0); err != nil && ctx.Err() == nil {
			s.o.Logger.Warn("control: stamp manifests", "err", err, "stamped", n)
		}
		st, err := s.CollectGarbage(gctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			s.o.Logger.Warn("control: gc failed", "err", err, "deleted", st.Deleted)
		} else if st.Marked > 0 || st.Deleted > 0 {
			s.o.Logger.Info("control: gc", "marked", st.Marked, "deleted", st.Deleted, "objects", st.Objects)
		}
	}
}

// notifier wakes long pollers: one channel per partition (closed and
// replaced when a batch is registered) and one for routing changes. It only
// sees registrations made through this process: run one control-plane
// instance per database (see doc.go).
type notifier struct {
	mu      sync.Mutex
	batches []chan struct{}
	route   chan struct{}
}

func newNotifier(partitions int) *notifier {
	n := &notifier{batches: make([]chan struct{}, partitions), route: make(chan struct{})}
	for i := range n.batches {
		n.batches[i] = make(chan struct{})
	}
	return n
}

func (n *notifier) batchChan(p int) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if p < 0 || p >= len(n.batches) {
		return nil // the store refuses the partition before anyone waits
	}
	return n.batches[p]
}

func (n *notifier) batch(p int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	close(n.batches[p])
	n.batches[p] = make(chan struct{})
}

// all wakes every waiter (they re-read and wait again if nothing changed).
func (n *notifier) all() {
	for p := range n.batches {
		n.batch(p)
	}
	n.routing()
}

func (n *notifier) routingChan() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.route
}

func (n *notifier) routing() {
	n.mu.Lock()
	defer n.mu.Unlock()
	close(n.route)
	n.route = make(chan struct{})
}
