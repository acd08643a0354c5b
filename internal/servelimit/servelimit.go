// Package servelimit bounds what one BatchGet request may cost a gRPC
// server (the node's and the router's) before any of it is decoded:
//
//   - The receive limit (grpc.MaxRecvMsgSize) is sized from the server's
//     key limit, RecvLimit: a message over it is refused by gRPC from its
//     5-byte header, before its bytes are kept.
//   - The request is read by Codec, which scans the protobuf encoding of a
//     BatchGetRequest, counting its keys and checking each key's length and
//     the other fields' lengths, and refuses a request over a limit
//     (codes.InvalidArgument naming the count and the limit, a bad key
//     quoted short) before proto.Unmarshal makes a slice per key. Other
//     messages go through the standard codec.
//   - At most MaxInFlight requests are answered at once; one past it is
//     answered codes.ResourceExhausted before its message is read. Each
//     connection may open at most as many streams (grpc.MaxConcurrentStreams).
//   - The server's receive windows are sized for requests (a few KiB each),
//     not for the large responses, which the client's windows govern: bytes
//     a client pushes ahead of a refused request stay bounded.
package servelimit

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/internal/keyfmt"
	"github.com/pillarkit/pillar/pillar"
)

const (
	// KeyOverhead is a key's encoding beyond its bytes in a
	// BatchGetRequest: the field tag (1 byte) and the length (1 byte for a
	// 16-byte key).
	KeyOverhead = 2
	// MaxFieldBytes bounds the request's version and caller id (publication
	// ids and caller ids are short). Nodes and routers refuse a longer
	// version with the same limit.
	MaxFieldBytes = 512
	// Slack is what RecvLimit allows beyond the largest request of valid
	// keys, version and caller id.
	Slack = 4 << 10
	// DefaultMaxInFlight is Limits.MaxInFlight's default.
	DefaultMaxInFlight = 1024
)

// RecvLimit is the receive limit of a server taking at most maxKeys keys per
// request: maxKeys × (pillar.KeySize + KeyOverhead) for the keys, plus
// 2 × (MaxFieldBytes + 3) for version and caller id (tag and a 2-byte
// length each), plus Slack. For the default 1024 keys: 23,558 bytes, where
// gRPC's default would be 4 MiB and a 16 MiB limit let one request of empty
// keys decode into 8 million slices.
func RecvLimit(maxKeys int) int {
	return maxKeys*(pillar.KeySize+KeyOverhead) + 2*(MaxFieldBytes+3) + Slack
}

// Limits configure a Guard.
type Limits struct {
	// Who prefixes errors: "cobbled" or "router".
	Who string
	// MaxKeys is the most keys a request may carry. Required.
	MaxKeys int
	// MaxInFlight is the most requests answered at once, all connections
	// together, and the most streams one connection may open. The default
	// value is DefaultMaxInFlight (1024).
	MaxInFlight int
	// Refused, when set, is called with every refusal the Guard answers
	// (over a limit, or too many in flight), for metrics.
	Refused func(error)
}

// Guard applies Limits to one gRPC server's BatchGet.
type Guard struct {
	lim      Limits
	inflight atomic.Int64
}

// New returns a Guard for l.
func New(l Limits) *Guard {
	if l.MaxInFlight <= 0 {
		l.MaxInFlight = DefaultMaxInFlight
	}
	if l.MaxKeys <= 0 {
		panic("servelimit: MaxKeys must be positive")
	}
	return &Guard{lim: l}
}

// RecvLimit is the guard's receive limit: RecvLimit(MaxKeys).
func (g *Guard) RecvLimit() int { return RecvLimit(g.lim.MaxKeys) }

// InFlight is how many requests are being answered.
func (g *Guard) InFlight() int { return int(g.inflight.Load()) }

// ServerOptions are the gRPC server options the guard needs: its codec, the
// receive limit, the per-connection stream cap and receive windows sized
// for requests.
func (g *Guard) ServerOptions() []grpc.ServerOption {
	window := max(64<<10, 2*g.RecvLimit()) // gRPC ignores windows under 64 KiB
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(Codec{Who: g.lim.Who, MaxKeys: g.lim.MaxKeys}),
		grpc.MaxRecvMsgSize(g.RecvLimit()),
		grpc.MaxConcurrentStreams(uint32(g.lim.MaxInFlight)),
		grpc.InitialWindowSize(int32(window)),
		grpc.InitialConnWindowSize(int32(16 * window)),
	}
}

// ServiceDesc is servepb.EncodedServiceDesc with the guard in front of
// get: a request past MaxInFlight is refused before its message is read,
// and the message is read by Codec, whose refusal is answered without
// decoding it. The server must use ServerOptions (its codec).
func (g *Guard) ServiceDesc(get func(srv any, ctx context.Context, req *servepb.BatchGetRequest) (any, error)) *grpc.ServiceDesc {
	d := servepb.EncodedServiceDesc(get)
	d.Methods[0].Handler = func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		if n := g.inflight.Add(1); n > int64(g.lim.MaxInFlight) {
			g.inflight.Add(-1)
			return nil, g.refuse(status.Errorf(codes.ResourceExhausted, "%s: BatchGet: %d requests in flight, the limit of this server; retry later", g.lim.Who, g.lim.MaxInFlight))
		}
		defer g.inflight.Add(-1)
		in := new(Request)
		if err := dec(in); err != nil {
			return nil, err
		}
		if in.Refusal != nil {
			return nil, g.refuse(in.Refusal)
		}
		if interceptor == nil {
			return get(srv, ctx, in.Req)
		}
		info := &grpc.UnaryServerInfo{Server: srv, FullMethod: servepb.Serve_BatchGet_FullMethodName}
		return interceptor(ctx, in.Req, info, func(ctx context.Context, req any) (any, error) {
			return get(srv, ctx, req.(*servepb.BatchGetRequest))
		})
	}
	return d
}

func (g *Guard) refuse(err error) error {
	if g.lim.Refused != nil {
		g.lim.Refused(err)
	}
	return err
}

// Request is what Codec decodes a BatchGetRequest into: the request, or
// the refusal of a request over a limit (then Req is nil: nothing was
// decoded).
type Request struct {
	Req     *servepb.BatchGetRequest
	Refusal error
}

// Codec is the server codec of ServerOptions: it sends an
// *servepb.Encoded as it is (servepb.EncodedCodec), reads a *Request by
// Check before decoding it, and everything else as the standard codec does.
type Codec struct {
	Who     string
	MaxKeys int
}

var encoded servepb.EncodedCodec

// Marshal implements encoding.CodecV2.
func (Codec) Marshal(v any) (mem.BufferSlice, error) { return encoded.Marshal(v) }

// Unmarshal implements encoding.CodecV2. A refusal goes into the *Request
// (gRPC would turn an error returned here into codes.Internal).
func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*Request)
	if !ok {
		return encoded.Unmarshal(data, v)
	}
	var b []byte
	if len(data) == 1 {
		b = data[0].ReadOnlyData()
	} else {
		b = data.Materialize() // at most the receive limit
	}
	if err := c.Check(b); err != nil {
		r.Req, r.Refusal = nil, err
		return nil
	}
	r.Req = new(servepb.BatchGetRequest)
	return proto.Unmarshal(b, r.Req)
}

// Name implements encoding.CodecV2: the wire format is plain protobuf.
func (Codec) Name() string { return encoded.Name() }

// Check scans the encoding of a BatchGetRequest without decoding it and
// returns a codes.InvalidArgument status for one over a limit: more than
// MaxKeys keys (naming how many), a key that is not pillar.KeySize bytes
// (its index, quoted short), or a version or caller id over MaxFieldBytes.
// Bytes that are not a protobuf encoding are left to proto.Unmarshal.
func (c Codec) Check(b []byte) error {
	keys, bad, badAt := 0, []byte(nil), -1
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			break
		}
		b = b[n:]
		if typ != protowire.BytesType {
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				break
			}
			b = b[m:]
			continue
		}
		v, m := protowire.ConsumeBytes(b)
		if m < 0 {
			break
		}
		b = b[m:]
		switch num {
		case 1:
			if len(v) != pillar.KeySize && badAt < 0 {
				bad, badAt = v, keys
			}
			keys++
		case 2:
			if len(v) > MaxFieldBytes {
				return status.Errorf(codes.InvalidArgument, "%s: BatchGet: version of %d bytes, over the limit of %d", c.Who, len(v), MaxFieldBytes)
			}
		case 3:
			if len(v) > MaxFieldBytes {
				return status.Errorf(codes.InvalidArgument, "%s: BatchGet: caller id of %d bytes, over the limit of %d", c.Who, len(v), MaxFieldBytes)
			}
		}
	}
	if keys > c.MaxKeys {
		return status.Errorf(codes.InvalidArgument, "%s: BatchGet: %d keys, over the limit of %d per request", c.Who, keys, c.MaxKeys)
	}
	if badAt >= 0 {
		return status.Errorf(codes.InvalidArgument, "%s: BatchGet: key %d: %s, want %d", c.Who, badAt, keyfmt.Short(bad), pillar.KeySize)
	}
	return nil
}
