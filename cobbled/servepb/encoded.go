package servepb

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
)

// Encoded is a BatchGetResponse already in wire form, in a (pooled)
// buffer. A server built with EncodedCodec sends it as it is; gRPC frees
// the buffer once written.
type Encoded struct{ Buf mem.Buffer }

// EncodedCodec is a server-side gRPC codec (grpc.ForceServerCodecV2) that
// sends an *Encoded as is and everything else as protobuf. The node and the
// router both answer BatchGet with pre-encoded bytes through it.
type EncodedCodec struct{}

func (EncodedCodec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*Encoded); ok {
		return mem.BufferSlice{m.Buf}, nil
	}
	return protoCodec.Marshal(v)
}
func (EncodedCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return protoCodec.Unmarshal(data, v)
}
func (EncodedCodec) Name() string { return protoCodec.Name() }

// EncodedServiceDesc is Serve_ServiceDesc with a BatchGet handler that calls
// get, which may answer an *Encoded (with EncodedCodec) instead of a
// *BatchGetResponse. srv is what the service is registered with.
func EncodedServiceDesc(get func(srv any, ctx context.Context, req *BatchGetRequest) (any, error)) *grpc.ServiceDesc {
	handler := func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(BatchGetRequest)
		if err := dec(in); err != nil {
			return nil, err
		}
		if interceptor == nil {
			return get(srv, ctx, in)
		}
		info := &grpc.UnaryServerInfo{Server: srv, FullMethod: Serve_BatchGet_FullMethodName}
		return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
			return get(srv, ctx, req.(*BatchGetRequest))
		})
	}
	return &grpc.ServiceDesc{
		ServiceName: Serve_ServiceDesc.ServiceName,
		HandlerType: (*any)(nil),
		Methods:     []grpc.MethodDesc{{MethodName: "BatchGet", Handler: handler}},
		Metadata:    Serve_ServiceDesc.Metadata,
	}
}
