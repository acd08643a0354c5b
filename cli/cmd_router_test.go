package cli

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/internal/testcluster"
)

func runRouterCLI(t *testing.T, ctx context.Context, args ...string) (string, error) {
	t.Helper()
	app := newApp()
	var out, errb bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errb
	app.Before = nil
	err := app.RunContext(ctx, append([]string{"pillar"}, args...))
	return out.String(), err
}

func routerFreeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// `pillar router serve` against a real control plane (SQLite) whose nodes
// are real cobbled nodes on loopback: BatchGet through it, /metrics, clean
// shutdown; and a clear error when the control plane is down.
func TestRouterServeCLI(t *testing.T) {
	ctx := context.Background()
	dead := routerFreeAddr(t)
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	_, err := runRouterCLI(t, dctx, "router", "serve", "--control", dead, "--listen", routerFreeAddr(t), "--http", routerFreeAddr(t))
	cancel()
	if err == nil || !strings.Contains(err.Error(), "no routing table") || !strings.Contains(err.Error(), dead) {
		t.Fatalf("control plane down: %v", err)
	}

	c, err := testcluster.Start(ctx, testcluster.Options{Dir: t.TempDir(), Partitions: 8, Keys: 120, MaxValue: 4 << 10, CacheBytes: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	store, err := control.OpenStore(ctx, "sqlite:"+filepath.Join(t.TempDir(), "control.db"), &control.StoreOptions{Partitions: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cp, err := control.NewServer(&control.Options{Store: store, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	cpLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := cp.GRPCServer()
	go gs.Serve(cpLis)
	defer gs.Stop()
	cc, err := control.Dial(cpLis.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	for _, m := range c.Members() {
		if err := cc.RegisterNode(ctx, control.Node{ID: m.ID, Addr: m.Addr, Zone: m.Zone}); err != nil {
			t.Fatal(err)
		}
	}

	listen, httpAddr := routerFreeAddr(t), routerFreeAddr(t)
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := runRouterCLI(t, sctx, "router", "serve", "--control", cpLis.Addr().String(), "--listen", listen, "--http", httpAddr, "--zone", "zone-b")
		done <- err
	}()
	conn, err := grpc.NewClient(listen, append(servepb.DialOptions(0), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	keys := c.Batches(12)[2]
	var resp *servepb.BatchGetResponse
	for deadline := time.Now().Add(10 * time.Second); ; {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		resp, err = servepb.NewServeClient(conn).BatchGet(rctx, &servepb.BatchGetRequest{Keys: keys})
		rcancel()
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		r := resp.Results[i]
		if r.Status != servepb.KeyStatus_KEY_OK || !r.Found || !bytes.Equal(r.Value, c.Value(k)) {
			t.Errorf("key %d: %v %v, %d bytes", i, r.Status, r.Found, len(r.Value))
		}
	}
	hr, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(hr.Body)
	hr.Body.Close()
	for _, want := range []string{`router_subrequests_total{kind="primary"}`, "router_extra_request_ratio", `router_node_latency_seconds_bucket{node="node-`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("router serve: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("router serve did not stop")
	}
}

// `pillar bench read`, tiny: the flags reach the harness and the report
// lands in --out.
func TestBenchReadCLI(t *testing.T) {
	out := t.TempDir()
	// The node processes are this test binary as pillar (TestCLIChild).
	t.Setenv("PILLAR_CLI_CHILD_ARGV", "1")
	stdout, err := runRouterCLI(t, context.Background(), "bench", "read", "--out", out, "--data", t.TempDir(), "--duration", "300ms",
		"--warmup", "100ms", "--keys", "120", "--partitions", "8", "--clients", "1", "--scenarios", "healthy,slow-hedge", "--slow", "0.5:20ms", "--cache", "64MiB",
		"--node-exec", os.Args[0], "--node-exec", "-test.run=^TestCLIChild$", "--node-exec", "--", "--node-exec", "bench", "--node-exec", "read-node")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| healthy |", "| slow-hedge |", "50% of requests by 20ms", "processes of their own", "block cache 64 MiB per node"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "latency.png")); err != nil {
		t.Error(err)
	}
	if _, err := runRouterCLI(t, context.Background(), "bench", "read", "--slow", "5%"); err == nil || !strings.Contains(err.Error(), "FRACTION:DELAY") {
		t.Errorf("bad --slow: %v", err)
	}
	if _, err := runRouterCLI(t, context.Background(), "bench", "read", "--cache", "lots"); err == nil || !strings.Contains(err.Error(), "--cache") {
		t.Errorf("bad --cache: %v", err)
	}
}
