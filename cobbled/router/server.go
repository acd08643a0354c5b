package router

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/pillarkit/pillar/cobbled/servepb"
)

// Server answers the cobbled Serve API (servepb BatchGet) through a Router,
// for callers in other languages: the same request, the same per-key
// statuses. A key whose partition failed on every replica answers
// KEY_NOT_SERVED (no replica holds it, or its version is not served: the
// error names the version) or KEY_ERROR with the router's error
// text; a bad request fails with INVALID_ARGUMENT as on a node.
type Server struct {
	servepb.UnimplementedServeServer
	r *Router
}

// NewServer returns a Server backed by r.
func NewServer(r *Router) *Server { return &Server{r: r} }

// GRPCServer returns a gRPC server with the Serve service registered, tuned
// like a node's for large responses.
func (s *Server) GRPCServer(extra ...grpc.ServerOption) *grpc.Server {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(16 << 20),
		grpc.MaxSendMsgSize(65 << 20),
		grpc.InitialWindowSize(16 << 20),
		grpc.InitialConnWindowSize(64 << 20),
		grpc.WriteBufferSize(256 << 10),
	}
	g := grpc.NewServer(append(opts, extra...)...)
	servepb.RegisterServeServer(g, s)
	return g
}

// CallerHeader is the gRPC metadata key a caller may send its id in
// (instead of BatchGetRequest.caller_id) for the A/B split by caller.
const CallerHeader = "x-pillar-caller"

// BatchGet implements servepb.ServeServer. The request's version (""
// = the router's default) is resolved once; the response names the
// concrete version read.
func (s *Server) BatchGet(ctx context.Context, req *servepb.BatchGetRequest) (*servepb.BatchGetResponse, error) {
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
			return nil, status.Error(codes.InvalidArgument, err.Error())
		case errors.Is(err, ErrClosed):
			return nil, status.Error(codes.Unavailable, err.Error())
		}
		return nil, status.Error(codes.Internal, err.Error())
	}
	if ctx.Err() != nil {
		return nil, status.FromContextError(ctx.Err()).Err()
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
	return out, nil
}
