package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/internal/tlsconf"
)

// TestCobbledServeTLS runs `cobbled serve` with mutual TLS serving only
// the router identity: the router's certificate reads, a reader's
// certificate of the same CA, a plaintext client and a client of another
// CA are refused.
func TestCobbledServeTLS(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	certs, other := filepath.Join(dir, "certs"), filepath.Join(dir, "other")
	for _, d := range []string{certs, other} {
		if _, err := tlsconf.DevCerts(d, tlsconf.DevOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cp := startControlPlane(t, ctx, dir, 4)
	listen := freeAddr(t)
	done := make(chan error, 1)
	go func() {
		_, err := runControlCLI(t, ctx, "cobbled", "serve", "--id", "n1", "--data", filepath.Join(dir, "n1"),
			"--listen", listen, "--http", freeAddr(t), "--control", cp, "--objstore", filepath.Join(dir, "objects"),
			"--tls-cert", filepath.Join(certs, "node-n1.pem"), "--tls-key", filepath.Join(certs, "node-n1.key"),
			"--tls-client-ca", filepath.Join(certs, "ca.pem"), "--allow-identity", "pillar://router/*")
		done <- err
	}()
	read := func(creds credentials.TransportCredentials) error {
		conn, err := grpc.NewClient(listen, grpc.WithTransportCredentials(creds))
		if err != nil {
			return err
		}
		defer conn.Close()
		rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
		defer rcancel()
		_, err = servepb.NewServeClient(conn).BatchGet(rctx, &servepb.BatchGetRequest{Keys: [][]byte{make([]byte, 16)}})
		return err
	}
	as := func(d, name string) credentials.TransportCredentials {
		r, err := tlsconf.NewReloader(tlsconf.Files{Cert: filepath.Join(d, name+".pem"), Key: filepath.Join(d, name+".key"), CA: filepath.Join(certs, "ca.pem")}, tlsconf.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return credentials.NewTLS(r.ClientConfig())
	}
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err = read(as(certs, "router")); err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("cobbled serve ended: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the router's certificate is not served: %v", err)
		}
	}
	for name, creds := range map[string]credentials.TransportCredentials{
		"a reader's certificate":      as(certs, "reader"),
		"a certificate of another CA": as(other, "router"),
		"plaintext":                   insecure.NewCredentials(),
	} {
		if err := read(creds); err == nil {
			t.Errorf("%s: served, want refused", name)
		}
	}
	cancel()
	<-done
}

// TestServeRefusesPlaintextOffLoopback: a read-path server bound beyond
// loopback without TLS does not start unless --insecure is given, and says
// why; nor does one whose --http port is beyond loopback.
func TestServeRefusesPlaintextOffLoopback(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cp := startControlPlane(t, ctx, dir, 4)
	for _, args := range [][]string{
		{"router", "serve", "--control", cp, "--listen", "0.0.0.0:0", "--http", "127.0.0.1:0"},
		{"router", "serve", "--control", cp, "--listen", "127.0.0.1:0", "--http", "0.0.0.0:0"},
		{"cobbled", "serve", "--id", "n1", "--data", filepath.Join(dir, "n1"), "--listen", "0.0.0.0:0", "--http", "127.0.0.1:0",
			"--control", cp, "--objstore", filepath.Join(dir, "objects")},
	} {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, err := runControlCLI(t, cctx, args...)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "--insecure") || !strings.Contains(err.Error(), "0.0.0.0:0") {
			t.Errorf("%s: %v, want a refusal naming the address and --insecure", strings.Join(args[:2], " "), err)
		}
	}
}
