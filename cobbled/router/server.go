package router

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/internal/grpclink"
	"github.com/pillarkit/pillar/internal/servelimit"
)

// Server answers the cobbled Serve API (servepb BatchGet) through a Router,
// for callers in other languages: the same request, the same per-key
// statuses. A key whose partition failed on every replica answers
// KEY_NOT_SERVED (no replica holds it, or its version is not served: the
// error names the version) or KEY_ERROR with the router's error
// text; a bad request fails with INVALID_ARGUMENT as on a node.
type Server struct {
	servepb.UnimplementedServeServer
	r     *Router
	guard *servelimit.Guard
}

// NewServer returns a Server backed by r. Its gRPC server (GRPCServer)
// bounds requests as a node's does (servelimit): the receive limit is
// servelimit.RecvLimit(Options.MaxKeys), a request's keys are counted and
// their lengths checked before it is decoded, and at most
// Options.MaxInFlight requests are answered at once.
func NewServer(r *Router) *Server {
	m := r.opts.Metrics
	g := servelimit.New(servelimit.Limits{
		Who:         "router",
		MaxKeys:     r.opts.MaxKeys,
		MaxInFlight: r.opts.MaxInFlight,
		Refused: func(err error) {
			if status.Code(err) == codes.ResourceExhausted {
				m.requests.WithLabelValues("busy").Inc()
			} else {
				m.requests.WithLabelValues("invalid").Inc()
			}
		},
	})
	return &Server{r: r, guard: g}
}

// GRPCServer returns a gRPC server with the Serve service registered, tuned
// like a node's for large responses. Its BatchGet encodes each answer into
// a pooled buffer before returning, so the nodes' answers the values alias
// go back to their pool at once (Response.Release) and gRPC sends the
// encoded bytes as they are. Requests are bounded as NewServer says.
func (s *Server) GRPCServer(extra ...grpc.ServerOption) *grpc.Server {
	opts := append(append(s.guard.ServerOptions(), grpclink.ServerOptions()...),
		grpc.MaxSendMsgSize(65<<20),
		grpc.WriteBufferSize(256<<10),
	)
	g := grpc.NewServer(append(opts, extra...)...)
	g.RegisterService(s.guard.ServiceDesc(serveGet), s)
	return g
}

// serveGet answers BatchGet with the router's answer pre-encoded.
func serveGet(srv any, ctx context.Context, req *servepb.BatchGetRequest) (any, error) {
	return srv.(*Server).batchGetEncoded(ctx, req)
}

var encodePool = new(servepb.BufferPool)

// batchGetEncoded is BatchGet encoded into a pooled buffer, the router's
// answer released right after.
func (s *Server) batchGetEncoded(ctx context.Context, req *servepb.BatchGetRequest) (any, error) {
	out, resp, err := s.batchGet(ctx, req)
	if resp != nil {
		defer resp.Release()
	}
	if err != nil {
		return nil, err
	}
	n := proto.Size(out)
	bufp := encodePool.Get(n)
	b, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend((*bufp)[:0], out)
	if err != nil || len(b) != n || cap(b) != cap(*bufp) {
		encodePool.Put(bufp)
		return nil, status.Errorf(codes.Internal, "router: encode BatchGetResponse: %d of %d bytes: %v", len(b), n, err)
	}
	*bufp = b
	return &servepb.Encoded{Buf: mem.NewBuffer(bufp, encodePool)}, nil
}

// CallerHeader is the gRPC metadata key a caller may send its id in
// (instead of BatchGetRequest.caller_id) for the A/B split by caller.
const CallerHeader = "x-pillar-caller"

// BatchGet implements servepb.ServeServer. The request's version (""
// = the router's default) is resolved once; the response names the
// concrete version read.
func (s *Server) BatchGet(ctx context.Context, req *servepb.BatchGetRequest) (*servepb.BatchGetResponse, error) {
	out, _, err := s.batchGet(ctx, req) // values alias the nodes' answers, left to the GC
	return out, err
}

// batchGet is BatchGet, also returning the router's response the values
// alias (to release once they are encoded).
func (s *Server) batchGet(ctx context.Context, req *servepb.BatchGetRequest) (*servepb.BatchGetResponse, *Response, error) {
	ro := &ReadOptions{Version: req.Version, Caller: req.CallerId}
	if ro.Caller == "" {
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if v := md.Get(CallerHeader); len(v) > 0 {
				ro.Caller = v[0]
			}
		}
	}
	resp, err := s.r.Read(ctx, req.Keys, ro)
	if resp == nil {
		switch {
		case errors.Is(err, ErrEmpty), errors.Is(err, ErrTooManyKeys), errors.Is(err, ErrBadKey), errors.Is(err, ErrBadVersion):
			return nil, nil, status.Error(codes.InvalidArgument, err.Error())
		case errors.Is(err, ErrClosed):
			return nil, nil, status.Error(codes.Unavailable, err.Error())
		}
		return nil, nil, status.Error(codes.Internal, err.Error())
	}
	if ctx.Err() != nil {
		return nil, resp, status.FromContextError(ctx.Err()).Err()
	}
	res := resp.Results
	out := &servepb.BatchGetResponse{Results: make([]*servepb.Result, len(res)), Version: resp.Version}
	for i, x := range res {
		switch {
		case x.Err == nil:
			out.Results[i] = &servepb.Result{Found: x.Found, Value: x.Value}
		case errors.Is(x.Err, ErrNotServed), errors.Is(x.Err, ErrVersion):
			out.Results[i] = &servepb.Result{Status: servepb.KeyStatus_KEY_NOT_SERVED, Error: x.Err.Error()}
		default:
			out.Results[i] = &servepb.Result{Status: servepb.KeyStatus_KEY_ERROR, Error: x.Err.Error()}
		}
	}
	return out, resp, nil
}
