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
	// The control plane on TLS too: one --tls-ca verifies every server a
	// process reaches.
	cp := freeAddr(t)
	cdone := make(chan error, 1)
	go func() {
		_, err := runControlCLI(t, ctx, "control", "serve", "--db", "sqlite:"+filepath.Join(dir, "control.db"), "--listen", cp,
			"--http", freeAddr(t), "--partitions", "4", "--no-auth",
			"--tls-cert", filepath.Join(certs, "control.pem"), "--tls-key", filepath.Join(certs, "control.key"))
		cdone <- err
	}()
	defer func() { cancel(); <-cdone }()
	ca := filepath.Join(certs, "ca.pem")
	listen := freeAddr(t)
	done := make(chan error, 1)
	go func() {
		_, err := runControlCLI(t, ctx, "cobbled", "serve", "--id", "n1", "--data", filepath.Join(dir, "n1"),
			"--listen", listen, "--http", freeAddr(t), "--control", cp, "--objstore", filepath.Join(dir, "objects"),
			"--tls-cert", filepath.Join(certs, "node-n1.pem"), "--tls-key", filepath.Join(certs, "node-n1.key"),
			"--tls-client-ca", ca, "--allow-identity", "pillar://router/*", "--tls-ca", ca)
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

	// The router reaches the node over mutual TLS as pillar://router/router
	// and serves readers only; `pillar get` reads through it.
	rlisten := freeAddr(t)
	rdone := make(chan error, 1)
	go func() {
		_, err := runControlCLI(t, ctx, "router", "serve", "--control", cp, "--listen", rlisten, "--http", freeAddr(t),
			"--tls-ca", filepath.Join(certs, "ca.pem"), "--tls-cert", filepath.Join(certs, "router.pem"), "--tls-key", filepath.Join(certs, "router.key"),
			"--tls-client-ca", filepath.Join(certs, "ca.pem"), "--allow-identity", "pillar://reader/*")
		rdone <- err
	}()
	get := func(extra ...string) (string, error) {
		gctx, gcancel := context.WithTimeout(ctx, 10*time.Second)
		defer gcancel()
		return runControlCLI(t, gctx, append(append([]string{"get", "--node", rlisten, "--timeout", "3s"}, extra...), "--json", strings.Repeat("ab", 16))...)
	}
	reader := []string{"--tls-ca", filepath.Join(certs, "ca.pem"), "--tls-cert", filepath.Join(certs, "reader.pem"), "--tls-key", filepath.Join(certs, "reader.key")}
	var out string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if out, err = get(reader...); err == nil {
			break
		}
		select {
		case err := <-rdone:
			t.Fatalf("router serve ended: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("pillar get through the TLS router: %v", err)
		}
	}
	t.Logf("get: %s", out)
	// No publication is loaded: the node's own answer ("not held by node
	// n1") shows the router reached it over TLS; a failed handshake would
	// read "connection" or "tls".
	if !strings.Contains(out, "not held by node n1") || strings.Contains(out, "tls") || strings.Contains(out, "connection") {
		t.Errorf("get through the router: %s, want the node's answer for the key", out)
	}
	if _, err := get(); err == nil {
		t.Error("plaintext get through the TLS router: served, want refused")
	}
	cancel()
	<-done
	<-rdone
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
