package cli

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pillarkit/pillar/internal/health"
)

// TestServersHealthCLI runs `router serve` and `lorry run --http` through
// the CLI against a real control plane and store, and reads /healthz and
// /readyz of each in the one health shape. (control serve: TestControlServeCLI;
// cobbled serve: TestCobbledServeHealthWhileStarting.)
func TestServersHealthCLI(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	addr := startControlPlane(t, ctx, dir, 2)
	store, objs := filepath.Join(dir, "store"), filepath.Join(dir, "objects")
	writeCorpus(t, filepath.Join(dir, "pages"), 4, "v")
	if _, stderr, err := runSubsets(t, "ingest", "--store", store, "--from", filepath.Join(dir, "pages"), "--partitions", "2"); err != nil {
		t.Fatalf("ingest: %v\n%s", err, stderr)
	}
	routerHTTP, lorryHTTP := freeAddr(t), freeAddr(t)
	done := make(chan error, 2)
	go func() {
		_, err := runControlCLI(t, ctx, "router", "serve", "--control", addr, "--listen", freeAddr(t), "--http", routerHTTP)
		done <- err
	}()
	go func() {
		_, err := runControlCLI(t, ctx, "lorry", "run", "--store", store, "--objstore", objs, "--control", addr, "--http", lorryHTTP)
		done <- err
	}()
	get := func(base, path string) (int, health.Report, error) {
		resp, err := http.Get("http://" + base + path)
		if err != nil {
			return 0, health.Report{}, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		r, err := health.DecodeBody(b)
		return resp.StatusCode, r, err
	}
	for _, s := range []struct {
		component, addr, status string
		ready                   int
	}{
		// No node serves yet: the router has no eligible replica anywhere.
		{"router", routerHTTP, health.Starting, 503},
		{"lorry", lorryHTTP, health.OK, 200},
	} {
		var code int
		var rep health.Report
		var err error
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if code, rep, err = get(s.addr, "/healthz"); err == nil && rep.Status == s.status {
				break
			}
			select {
			case err := <-done:
				t.Fatalf("a server ended early: %v", err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s /healthz: %d %+v %v", s.component, code, rep, err)
			}
		}
		if code != 200 || rep.Component != s.component {
			t.Fatalf("%s /healthz: %d %+v", s.component, code, rep)
		}
		if code, rep, err := get(s.addr, "/readyz"); err != nil || code != s.ready || rep.Status != s.status {
			t.Fatalf("%s /readyz: %d %+v %v", s.component, code, rep, err)
		}
	}
	cancel()
	for i := 0; i < 2; i++ {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("a server did not stop on cancel")
		}
	}
}

// TestRouterServeWaitsForControl: `router serve` started before its control
// plane answers /healthz 200 "starting", waiting on the control plane, and
// /readyz 503, retrying; it stops on cancel.
func TestRouterServeWaitsForControl(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	httpAddr, ctl := freeAddr(t), freeAddr(t)
	done := make(chan error, 1)
	go func() {
		_, err := runControlCLI(t, ctx, "router", "serve", "--control", ctl, "--listen", freeAddr(t), "--http", httpAddr)
		done <- err
	}()
	var resp *http.Response
	var err error
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if resp, err = http.Get("http://" + httpAddr + "/readyz"); err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("router serve ended before serving /readyz: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no /readyz: %v", err)
		}
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	rep, err := health.DecodeBody(b)
	if err != nil || resp.StatusCode != 503 || rep.Status != health.Starting || len(rep.WaitingOn) != 1 || !strings.Contains(rep.WaitingOn[0], ctl) {
		t.Fatalf("/readyz before the control plane: %d %s (%v)", resp.StatusCode, b, err)
	}
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("router serve without a control plane returned no error")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("router serve did not stop on cancel")
	}
}
