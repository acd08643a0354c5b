package control

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pillarkit/pillar/internal/batch"
)

// tcpProxy forwards 127.0.0.1:port to a target and can be cut (closing every
// connection and refusing new ones) and restored on the same port: a real
// network fault between the control plane and PostgreSQL.
type tcpProxy struct {
	target string
	addr   string
	mu     sync.Mutex
	lis    net.Listener
	conns  map[net.Conn]bool
	frozen atomic.Bool // hold every byte (a network that hangs rather than refuses)
}

// copyHeld copies like io.Copy but holds data while the proxy is frozen.
func (p *tcpProxy) copyHeld(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for p.frozen.Load() {
			time.Sleep(10 * time.Millisecond)
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	p := &tcpProxy{target: target, conns: map[net.Conn]bool{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = lis.Addr().String()
	p.serve(lis)
	t.Cleanup(p.cut)
	return p
}

func (p *tcpProxy) serve(lis net.Listener) {
	p.mu.Lock()
	p.lis = lis
	p.mu.Unlock()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go p.pipe(c)
		}
	}()
}

func (p *tcpProxy) pipe(c net.Conn) {
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[u] = true, true
	p.mu.Unlock()
	go func() { p.copyHeld(u, c); u.Close() }()
	p.copyHeld(c, u)
	c.Close()
}

func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lis != nil {
		p.lis.Close()
		p.lis = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

func (p *tcpProxy) restore(t *testing.T) {
	var lis net.Listener
	var err error
	for i := 0; i < 50; i++ { // the port may linger briefly
		if lis, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	p.serve(lis)
}

// TestPostgresOutage cuts the network to PostgreSQL while the server runs:
// calls fail with ErrUnavailable (gRPC Unavailable), the server keeps
// running, and once the database is reachable again calls succeed.
func TestPostgresOutage(t *testing.T) {
	var pg backend
	for _, b := range backends() {
		if b.name == BackendPostgres {
			pg = b
		}
	}
	dsn := pg.dsn(t) // skips when PostgreSQL is unavailable
	host := "127.0.0.1:5432"
	if i, j := strings.Index(dsn, "@"), strings.Index(dsn[strings.Index(dsn, "@")+1:], "/"); i >= 0 && j >= 0 {
		host = dsn[i+1 : i+1+j]
	}
	proxy := newTCPProxy(t, host)
	proxied := strings.Replace(dsn, host, proxy.addr, 1)
	e := startEnv(t, proxied+"&connect_timeout=2", 4, func(o *Options) { o.CallTimeout = time.Second })
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go e.srv.Run(ctx) // the background loops must ride out the outage too
	c := e.client
	if _, err := c.RegisterBatch(ctx, manifest("before", 0, 4, batch.KindDelta)); err != nil {
		t.Fatal(err)
	}

	proxy.cut()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.RegisterBatch(cctx, manifest("during", 0, 4, batch.KindDelta)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("register during outage: %v, want ErrUnavailable", err)
	} else {
		t.Log(err)
	}
	if _, err := c.ListBatches(cctx, 0, 0, 0, 0); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("list during outage: %v, want ErrUnavailable", err)
	}
	if _, err := c.GetRouting(cctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("routing during outage: %v, want ErrUnavailable", err)
	}

	rec := httptest.NewRecorder()
	e.srv.Healthz().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("healthz during outage: %d %s", rec.Code, rec.Body)
	}

	proxy.restore(t)
	var err error
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		var seq int64
		if seq, err = c.RegisterBatch(ctx, manifest("after", 0, 4, batch.KindDelta)); err == nil {
			if seq != 2 {
				t.Fatalf("after recovery: seq %d, want 2 (the failed call must not have taken a seq)", seq)
			}
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("no recovery after the database returned: %v", err)
	}
	rec = httptest.NewRecorder()
	e.srv.Healthz().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("healthz after recovery: %d %s", rec.Code, rec.Body)
	}
	// A database that hangs (packets held, no reset): calls give up after
	// CallTimeout with Unavailable instead of hanging with it.
	once, err := Dial(e.addr, &ClientOptions{Token: testToken, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer once.Close()
	proxy.frozen.Store(true)
	t0 := time.Now()
	if _, err := once.RegisterBatch(ctx, manifest("hung", 0, 4, batch.KindDelta)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("register while the database hangs: %v, want ErrUnavailable", err)
	} else if d := time.Since(t0); d > 5*time.Second {
		t.Fatalf("register while the database hangs took %v", d)
	} else {
		t.Logf("after %v: %v", d.Round(time.Millisecond), err)
	}
	proxy.frozen.Store(false)
	deadline = time.Now().Add(15 * time.Second)
	for {
		_, err = c.ListBatches(ctx, 0, 0, 0, 0)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	list, err := c.ListBatches(ctx, 0, 0, 0, 0)
	if err != nil || len(list) != 2 || list[0].Manifest.ID != "before" || list[1].Manifest.ID != "after" {
		t.Fatalf("log after recovery: %v %v", list, err)
	}
}
