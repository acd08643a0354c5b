package grpclink

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// silentProxy forwards TCP connections to target until freeze; from then
// on the connections it holds stay open but carry nothing (a black-holed
// link: no RST, no FIN), while new connections are forwarded again.
type silentProxy struct {
	lis    net.Listener
	target string
	gen    atomic.Int64 // connections accepted before the current generation are frozen
	mu     sync.Mutex
	conns  []net.Conn
}

func newSilentProxy(t *testing.T, target string) *silentProxy {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &silentProxy{lis: lis, target: target}
	t.Cleanup(func() {
		lis.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	})
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			gen := p.gen.Load()
			go p.pipe(c, up, gen)
			go p.pipe(up, c, gen)
		}
	}()
	return p
}

// pipe copies src to dst while the connection's generation is current,
// then reads and drops everything.
func (p *silentProxy) pipe(dst, src net.Conn, gen int64) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		if p.gen.Load() != gen {
			continue
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

func (p *silentProxy) freeze() { p.gen.Add(1) }

// TestSilentLinkFailsAndRedials: a call sent into a connection that went
// silent fails with Unavailable once the keepalive ping goes unanswered
// (instead of waiting for TCP to give up), and the next call dials again
// and succeeds.
func TestSilentLinkFailsAndRedials(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(ServerOptions()...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	defer srv.Stop()
	px := newSilentProxy(t, lis.Addr().String())

	conn, err := grpc.NewClient(px.lis.Addr().String(), append(DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("call through the proxy: %v", err)
	}

	px.freeze()
	start := time.Now()
	// No deadline: only the keepalive can end this call.
	done := make(chan error, 1)
	go func() { _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); done <- err }()
	bound := ClientPingEvery + PingTimeout + 10*time.Second
	select {
	case err = <-done:
	case <-time.After(bound):
		t.Fatalf("a call into a silent link was still waiting after %s", bound)
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("call into a silent link: %v, want Unavailable", err)
	}
	t.Logf("silent link noticed after %s", time.Since(start).Round(time.Millisecond))

	cctx, cancel := context.WithTimeout(ctx, RedialMax+10*time.Second)
	defer cancel()
	if _, err := hc.Check(cctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("call after the link was dropped: %v", err)
	}
}
