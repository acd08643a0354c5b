package control

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pillarkit/pillar/cobbled/controlpb"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/grpclink"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// ClientOptions configure Dial.
type ClientOptions struct {
	// Token is sent as "authorization: Bearer <token>" on every call
	// (mutating calls need it). The default value is "" (read-only use).
	Token string
	// TLS, when set, makes the connection use TLS. The default value nil
	// means plaintext (the server listens on loopback unless told otherwise).
	TLS *tls.Config
	// MaxAttempts is how many times a call that failed with Unavailable
	// (server unreachable or its database down) is tried in all, with
	// backoff; every call is safe to repeat (registration is idempotent by
	// batch id, progress by seq). 1 disables retries. The default value is 3.
	MaxAttempts int
	// DialOptions are appended to the client's own. The default value is
	// none.
	DialOptions []grpc.DialOption
}

// Client is a control-plane client. It is safe for concurrent use; errors
// wrap the package's sentinels (errors.Is(err, ErrUnavailable), …).
type Client struct {
	conn *grpc.ClientConn
	rpc  controlpb.ControlClient
}

// Dial connects to a control plane at addr ("host:port"). It does not wait
// for the connection; the first call does.
func Dial(addr string, opts *ClientOptions) (*Client, error) {
	var o ClientOptions
	if opts != nil {
		o = *opts
	}
	creds := insecure.NewCredentials()
	if o.TLS != nil {
		creds = credentials.NewTLS(o.TLS)
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 3
	}
	dopts := append(grpclink.DialOptions(), grpc.WithTransportCredentials(creds))
	if o.MaxAttempts > 1 {
		dopts = append(dopts, grpc.WithDefaultServiceConfig(fmt.Sprintf(`{"methodConfig": [{
			"name": [{"service": "pillar.control.v1.Control"}],
			"retryPolicy": {"maxAttempts": %d, "initialBackoff": "0.1s", "maxBackoff": "1s",
				"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`, min(o.MaxAttempts, 5))))
	}
	if o.Token != "" {
		dopts = append(dopts, grpc.WithPerRPCCredentials(bearer{token: o.Token}))
	}
	dopts = append(dopts, o.DialOptions...)
	conn, err := grpc.NewClient(addr, dopts...)
	if err != nil {
		return nil, fmt.Errorf("control: dial %s: %w", addr, err)
	}
	return &Client{conn: conn, rpc: controlpb.NewControlClient(conn)}, nil
}

type bearer struct{ token string }

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity is false so the token also travels over
// plaintext loopback connections.
func (b bearer) RequireTransportSecurity() bool { return false }

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// fromStatus turns a gRPC error back into an error wrapping the sentinel the
// server named.
func fromStatus(method string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("control: %s: %w", method, err)
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == errorDomain {
			for _, r := range sentinelReasons {
				if r.reason == info.Reason {
					return &remoteError{method: method, msg: st.Message(), sentinel: r.err}
				}
			}
		}
	}
	switch st.Code() {
	case codes.Unavailable:
		return &remoteError{method: method, msg: st.Message(), sentinel: ErrUnavailable}
	case codes.Unauthenticated:
		return &remoteError{method: method, msg: st.Message(), sentinel: ErrUnauthenticated}
	case codes.PermissionDenied:
		return &remoteError{method: method, msg: st.Message(), sentinel: ErrPermissionDenied}
	case codes.InvalidArgument:
		return &remoteError{method: method, msg: st.Message(), sentinel: ErrInvalid}
	case codes.DeadlineExceeded:
		return fmt.Errorf("control: %s: %w", method, context.DeadlineExceeded)
	case codes.Canceled:
		return fmt.Errorf("control: %s: %w", method, context.Canceled)
	}
	return fmt.Errorf("control: %s: %w", method, err)
}

type remoteError struct {
	method, msg string
	sentinel    error
}

func (e *remoteError) Error() string {
	return fmt.Sprintf("control: %s: %s", e.method, strings.TrimPrefix(e.msg, "control: "))
}
func (e *remoteError) Unwrap() error { return e.sentinel }

// Info is what Info returns.
type Info struct {
	Partitions     int
	Backend        string
	RoutingVersion int64
	SchemaVersion  int
}

// Info returns the partition count, backend and routing version.
func (c *Client) Info(ctx context.Context) (*Info, error) {
	r, err := c.rpc.Info(ctx, &controlpb.InfoRequest{})
	if err != nil {
		return nil, fromStatus("info", err)
	}
	return &Info{Partitions: int(r.Partitions), Backend: r.Backend, RoutingVersion: r.RoutingVersion, SchemaVersion: int(r.SchemaVersion)}, nil
}

// Partitions returns the deployment's partition count P.
func (c *Client) Partitions(ctx context.Context) (int, error) {
	i, err := c.Info(ctx)
	if err != nil {
		return 0, err
	}
	return i.Partitions, nil
}

// RegisterBatch registers a batch whose objects all exist and returns its
// sequence number in its partition. Registering the same manifest again
// returns the same seq; the same id with another manifest fails with
// ErrConflict.
func (c *Client) RegisterBatch(ctx context.Context, m *batch.Manifest) (int64, error) {
	raw, err := m.Encode()
	if err != nil {
		return 0, fmt.Errorf("control: register batch %q: %w", m.ID, err)
	}
	r, err := c.rpc.RegisterBatch(ctx, &controlpb.RegisterBatchRequest{ManifestJson: raw})
	if err != nil {
		return 0, fromStatus("register batch "+m.ID, err)
	}
	return r.Seq, nil
}

// ListBatches returns up to limit (0: the server's default) batches of
// partition after afterSeq, in order. With wait > 0 it long-polls: it
// returns as soon as one exists, or empty after wait. A replica behind the
// garbage-collection floor gets a snapshot first.
func (c *Client) ListBatches(ctx context.Context, partition int, afterSeq int64, limit int, wait time.Duration) ([]BatchEntry, error) {
	r, err := c.rpc.ListBatches(ctx, &controlpb.ListBatchesRequest{Partition: int32(partition), AfterSeq: afterSeq,
		Limit: int32(limit), WaitMs: wait.Milliseconds()})
	if err != nil {
		return nil, fromStatus(fmt.Sprintf("list batches of partition %d", partition), err)
	}
	out := make([]BatchEntry, 0, len(r.Batches))
	for _, b := range r.Batches {
		m, err := batch.Decode(b.ManifestJson)
		if err != nil {
			return nil, fmt.Errorf("control: partition %d seq %d: %w", partition, b.Seq, err)
		}
		out = append(out, BatchEntry{Seq: b.Seq, Manifest: *m, RegisteredAt: time.UnixMilli(b.RegisteredAtMs), Retracted: b.Retracted})
	}
	return out, nil
}

// RegisterNode registers (or updates) a node; it counts as a heartbeat.
func (c *Client) RegisterNode(ctx context.Context, n Node) error {
	_, err := c.rpc.RegisterNode(ctx, &controlpb.RegisterNodeRequest{Node: &controlpb.Node{Id: n.ID, Addr: n.Addr, Zone: n.Zone}})
	if err != nil {
		return fromStatus("register node "+n.ID, err)
	}
	return nil
}

// Heartbeat tells the control plane nodeID is alive. An unregistered node
// gets ErrUnknownNode (register again).
func (c *Client) Heartbeat(ctx context.Context, nodeID string) error {
	_, err := c.HeartbeatVersion(ctx, nodeID)
	return err
}

// HeartbeatVersion is Heartbeat that also returns the routing version, so a
// node learns cheaply when to refresh its routing.
func (c *Client) HeartbeatVersion(ctx context.Context, nodeID string) (int64, error) {
	r, err := c.rpc.Heartbeat(ctx, &controlpb.HeartbeatRequest{NodeId: nodeID})
	if err != nil {
		return 0, fromStatus("heartbeat "+nodeID, err)
	}
	return r.RoutingVersion, nil
}

// ReportApplied records that nodeID applied partition's batches through seq.
func (c *Client) ReportApplied(ctx context.Context, nodeID string, partition int, seq int64) error {
	_, err := c.rpc.ReportApplied(ctx, &controlpb.ReportAppliedRequest{NodeId: nodeID, Partition: int32(partition), Seq: seq})
	if err != nil {
		return fromStatus(fmt.Sprintf("report applied %s p%d seq %d", nodeID, partition, seq), err)
	}
	return nil
}

// RemoveNode decommissions a node: it is forgotten with its progress and
// its partitions are reassigned. A node that is up is refused (ErrNodeUp)
// unless force; a removed node that heartbeats gets ErrUnknownNode.
func (c *Client) RemoveNode(ctx context.Context, nodeID string, force bool) error {
	_, err := c.rpc.RemoveNode(ctx, &controlpb.RemoveNodeRequest{NodeId: nodeID, Force: force})
	if err != nil {
		return fromStatus("remove node "+nodeID, err)
	}
	return nil
}

// RetractBatch marks a registered batch bad for the reason why: replicas
// skip it and the partition moves on with the batches registered after it
// (register a replacement: a new snapshot, or a re-built delta). Unknown ids
// fail with ErrNotFound.
func (c *Client) RetractBatch(ctx context.Context, id, why string) (Retraction, error) {
	r, err := c.rpc.RetractBatch(ctx, &controlpb.RetractBatchRequest{BatchId: id, Why: why})
	if err != nil {
		return Retraction{}, fromStatus("retract batch "+id, err)
	}
	return Retraction{Partition: int(r.Partition), Seq: r.Seq, Already: r.Already}, nil
}

// ReportFault records a replica's fault, or clears it (empty Reason).
func (c *Client) ReportFault(ctx context.Context, f Fault) error {
	_, err := c.rpc.ReportFault(ctx, &controlpb.ReportFaultRequest{NodeId: f.Node, Partition: int32(f.Partition), BatchId: f.BatchID, Reason: f.Reason, Serving: f.Serving})
	if err != nil {
		return fromStatus(fmt.Sprintf("report fault %s p%d", f.Node, f.Partition), err)
	}
	return nil
}

// GetRouting returns the current routing table.
func (c *Client) GetRouting(ctx context.Context) (*Routing, error) {
	return c.WatchRouting(ctx, 0, 0)
}

// WatchRouting waits up to wait for a routing version newer than known and
// returns the routing then (or the current one when wait passes).
func (c *Client) WatchRouting(ctx context.Context, known int64, wait time.Duration) (*Routing, error) {
	r, err := c.rpc.GetRouting(ctx, &controlpb.GetRoutingRequest{KnownVersion: known, WaitMs: wait.Milliseconds()})
	if err != nil {
		return nil, fromStatus("get routing", err)
	}
	out := &Routing{Version: r.Version, Partitions: int(r.Partitions), GeneratedAt: time.UnixMilli(r.GeneratedAtMs),
		Replicas: make([][]Replica, len(r.Partition)), NewestSeq: make([]int64, len(r.Partition)), NewestAt: make([]time.Time, len(r.Partition))}
	if len(r.Partition) != out.Partitions {
		return nil, errors.New("control: get routing: partition list length differs from the partition count")
	}
	for p, pr := range r.Partition {
		out.NewestSeq[p] = pr.NewestSeq
		if pr.NewestRegisteredAtMs > 0 {
			out.NewestAt[p] = time.UnixMilli(pr.NewestRegisteredAtMs)
		}
		for _, rep := range pr.Replicas {
			out.Replicas[p] = append(out.Replicas[p], Replica{NodeID: rep.NodeId, Addr: rep.Addr, Zone: rep.Zone, State: rep.State,
				AppliedSeq: rep.AppliedSeq, LagBatches: rep.LagBatches, Lag: time.Duration(rep.LagMs) * time.Millisecond, Fault: rep.Fault})
		}
	}
	for _, p := range r.Publications {
		out.Publications = append(out.Publications, publicationFromPB(p))
	}
	out.Live = r.Live
	return out, nil
}

// ListNodes returns every registered node with its state.
func (c *Client) ListNodes(ctx context.Context) ([]NodeStatus, error) {
	r, err := c.rpc.ListNodes(ctx, &controlpb.ListNodesRequest{})
	if err != nil {
		return nil, fromStatus("list nodes", err)
	}
	out := make([]NodeStatus, 0, len(r.Nodes))
	for _, n := range r.Nodes {
		ns := NodeStatus{State: n.State, LastHeartbeat: time.UnixMilli(n.LastHeartbeatMs), RegisteredAt: time.UnixMilli(n.RegisteredAtMs), Replicas: int(n.Replicas)}
		if n.Node != nil {
			ns.Node = Node{ID: n.Node.Id, Addr: n.Node.Addr, Zone: n.Node.Zone}
		}
		out = append(out, ns)
	}
	return out, nil
}
