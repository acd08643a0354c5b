package servepb

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"

	"github.com/pillarkit/pillar/internal/grpclink"
)

// transportPool backs the client transport's buffers (see DialOptions) and,
// through TransportPool, the node's server.
var transportPool = new(BufferPool)

// TransportPool is the non-zeroing pool DialOptions gives the client
// transport; servers may share it (experimental.BufferPool).
func TransportPool() *BufferPool { return transportPool }

// DialOptions tunes a client connection for BatchGet's large responses
// (~600 KB for 12 keys of ~50 KB): flow-control windows that cover several
// responses in flight and a receive limit of maxRecv bytes (0: 64 MiB, the
// node's default response limit, plus headroom), decoding responses with
// ClientCodec (values alias one receive buffer instead of being copied).
func DialOptions(maxRecv int) []grpc.DialOption {
	if maxRecv <= 0 {
		maxRecv = 65 << 20
	}
	return append(grpclink.DialOptions(),
		grpc.WithInitialWindowSize(16<<20),
		grpc.WithInitialConnWindowSize(64<<20),
		grpc.WithReadBufferSize(256<<10),
		grpc.WithWriteBufferSize(64<<10),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecv), CallOption()),
		// Frame buffers are filled by full reads; skip the default pool's
		// zeroing (600 KB of memclr per response).
		experimental.WithBufferPool(transportPool),
	)
}
