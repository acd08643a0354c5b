package cli

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/pillarkit/pillar/internal/health"
)

// TestCobbledServeHealthWhileStarting: `cobbled serve` answers /healthz
// (200, starting, saying what it waits on) and /readyz (503) while its
// first start waits for an unreachable control plane, and stops on cancel.
func TestCobbledServeHealthWhileStarting(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	httpAddr := freeAddr(t)
	done := make(chan error, 1)
	go func() {
		_, err := runControlCLI(t, ctx, "cobbled", "serve", "--id", "n1", "--data", filepath.Join(dir, "n1"),
			"--listen", freeAddr(t), "--http", httpAddr, "--control", freeAddr(t), "--objstore", filepath.Join(dir, "objects"))
		done <- err
	}()
	get := func(path string) (int, health.Report, error) {
		resp, err := http.Get("http://" + httpAddr + path)
		if err != nil {
			return 0, health.Report{}, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		r, err := health.DecodeBody(b)
		return resp.StatusCode, r, err
	}
	var code int
	var rep health.Report
	var err error
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if code, rep, err = get("/healthz"); err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("cobbled serve ended before serving /healthz: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no /healthz: %v", err)
		}
	}
	if code != 200 || rep.Component != "cobbled" || rep.Status != health.Starting || len(rep.WaitingOn) != 1 {
		t.Fatalf("/healthz while starting: %d %+v", code, rep)
	}
	if code, rep, err := get("/readyz"); err != nil || code != 503 || rep.Status != health.Starting {
		t.Fatalf("/readyz while starting: %d %+v %v", code, rep, err)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("cobbled serve did not stop on cancel")
	}
}
