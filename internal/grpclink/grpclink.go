package grpclink

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/keepalive"
)

const (
	// ClientPingEvery is how long a client connection may be silent before
	// the client pings it (gRPC's floor is 10 s).
	ClientPingEvery = 10 * time.Second
	// PingTimeout is how long a ping may go unanswered before the
	// connection is closed.
	PingTimeout = 5 * time.Second
	// RedialMax caps the delay between dial attempts.
	RedialMax = 5 * time.Second
	// ServerMinPing is the shortest interval between a client's pings that
	// a server accepts.
	ServerMinPing = 5 * time.Second
	// ServerPingEvery is how long a server connection may be silent before
	// the server pings the client.
	ServerPingEvery = 30 * time.Second
)

// DialOptions are a client's keepalive and redial settings.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: ClientPingEvery, Timeout: PingTimeout, PermitWithoutStream: true}),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 250 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: RedialMax},
			MinConnectTimeout: 5 * time.Second,
		}),
	}
}

// ServerOptions are a server's keepalive settings: the pings it accepts
// and the ones it sends.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: ServerMinPing, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: ServerPingEvery, Timeout: PingTimeout}),
	}
}
