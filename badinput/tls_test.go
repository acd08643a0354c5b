package badinput

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/internal/tlsconf"
)

// devCerts writes tlsconf.DevCerts into a new folder with o and returns
// the folder.
func devCerts(t *testing.T, o tlsconf.DevOptions) string {
	dir := t.TempDir()
	if _, err := tlsconf.DevCerts(dir, o); err != nil {
		t.Fatal(err)
	}
	return dir
}

func pair(dir, base string) tlsconf.Files {
	return tlsconf.Files{Cert: filepath.Join(dir, base+".pem"), Key: filepath.Join(dir, base+".key")}
}

// tlsServer serves TLS with the pair base of dir (and, with clientCA,
// client certificates of that CA required) through tlsconf.NewListener
// with lo, and returns its address; a connection reads one byte and
// closes.
func tlsServer(t *testing.T, dir, base, clientCA string, lo tlsconf.ListenerOptions) string {
	f := pair(dir, base)
	f.CA = clientCA
	r, err := tlsconf.NewReloader(f, tlsconf.Options{Poll: -1})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := r.ServerConfig()
	if err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := tlsconf.NewListener(inner, cfg, lo)
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); c.Read(make([]byte, 1)) }()
		}
	}()
	return inner.Addr().String()
}

// tlsRefusal serves mutual TLS as the node n1 of the CA in serverDir,
// verifying client certificates against the CA in clientCADir and
// allowing only the router's identity, and connects with client. It
// returns the refusal the listener reported, with the client's own error:
// the reason an operator reads in the node's log.
func tlsRefusal(t *testing.T, serverDir, clientCADir string, client *tls.Config) error {
	refused := make(chan string, 1)
	addr := tlsServer(t, serverDir, "node-n1", filepath.Join(clientCADir, "ca.pem"), tlsconf.ListenerOptions{
		Allow:    []string{"pillar://router/*"},
		OnRefuse: func(remote, reason string) { refused <- reason },
	})
	conn, cerr := tls.Dial("tcp", addr, client)
	if cerr == nil {
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		conn.Write([]byte("x"))
		_, cerr = conn.Read(make([]byte, 1))
		conn.Close()
	}
	select {
	case reason := <-refused:
		return fmt.Errorf("node refused: %s (client saw: %v)", reason, cerr)
	case <-time.After(5 * time.Second):
		if cerr != nil {
			return fmt.Errorf("client: %w", cerr)
		}
		return nil
	}
}

// clientTLS is a client configuration with base's certificate (none when
// base is "") trusting the CA in caDir.
func clientTLS(t *testing.T, certDir, base, caDir string) *tls.Config {
	f := tlsconf.Files{CA: filepath.Join(caDir, "ca.pem")}
	if base != "" {
		p := pair(certDir, base)
		f.Cert, f.Key = p.Cert, p.Key
	}
	r, err := tlsconf.NewReloader(f, tlsconf.Options{Poll: -1})
	if err != nil {
		t.Fatal(err)
	}
	return r.ClientConfig()
}

// rolesControl serves a control plane whose credentials are a node token
// bound to n1 and an admin token, and returns its address.
func rolesControl(t *testing.T) string {
	srv, err := control.NewServer(&control.Options{Store: controlStore(t), Credentials: []control.Credential{
		{Role: control.RoleNode, Token: "node-n1-token", Node: "n1"},
		{Role: control.RoleAdmin, Token: "admin-token"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := srv.GRPCServer()
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// controlAs dials the control plane at addr with token.
func controlAs(t *testing.T, addr, token string) *control.Client {
	c, err := control.Dial(addr, &control.ClientOptions{Token: token, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// expired is DevCerts of names valid for a day that ended a day ago.
func expired(t *testing.T, names ...string) string {
	return devCerts(t, tlsconf.DevOptions{Names: names, Now: func() time.Time { return time.Now().Add(-48 * time.Hour) }, Valid: 24 * time.Hour})
}

// tlsRows are the bad inputs of the untrusted network: certificates,
// identities, credentials and plaintext where TLS is required.
func tlsRows() []bad {
	ctx := context.Background()
	return []bad{
		{"tls", "client certificate expired", func(t *testing.T) error {
			node, old := devCerts(t, tlsconf.DevOptions{Names: []string{"node/n1"}}), expired(t, "router")
			return tlsRefusal(t, node, old, clientTLS(t, old, "router", node))
		}, nil, []string{"node refused: tls handshake", "expired"}},
		{"tls", "client certificate from another CA", func(t *testing.T) error {
			node, other := devCerts(t, tlsconf.DevOptions{Names: []string{"node/n1"}}), devCerts(t, tlsconf.DevOptions{Names: []string{"router"}})
			return tlsRefusal(t, node, node, clientTLS(t, other, "router", node))
		}, nil, []string{"node refused: tls handshake", "unknown authority"}},
		{"tls", "client without a certificate", func(t *testing.T) error {
			node := devCerts(t, tlsconf.DevOptions{Names: []string{"node/n1"}})
			return tlsRefusal(t, node, node, clientTLS(t, "", "", node))
		}, nil, []string{"node refused: tls handshake", "client didn't provide a certificate"}},
		{"tls", "client identity not allowed on the node", func(t *testing.T) error {
			dir := devCerts(t, tlsconf.DevOptions{Names: []string{"node/n1", "writer/lorry"}})
			return tlsRefusal(t, dir, dir, clientTLS(t, dir, "writer-lorry", dir))
		}, nil, []string{`node refused: peer identity "pillar://writer/lorry" is not allowed here`}},
		{"tls", "server certificate expired", func(t *testing.T) error {
			dir := expired(t, "node/n1")
			conn, err := tls.Dial("tcp", tlsServer(t, dir, "node-n1", "", tlsconf.ListenerOptions{}), clientTLS(t, "", "", dir))
			if err == nil {
				conn.Close()
			}
			return err
		}, nil, []string{"certificate has expired"}},
		{"tls", "server certificate from another CA", func(t *testing.T) error {
			node, other := devCerts(t, tlsconf.DevOptions{Names: []string{"node/n1"}}), devCerts(t, tlsconf.DevOptions{Names: []string{"router"}})
			conn, err := tls.Dial("tcp", tlsServer(t, node, "node-n1", "", tlsconf.ListenerOptions{}), clientTLS(t, "", "", other))
			if err == nil {
				conn.Close()
			}
			return err
		}, nil, []string{"unknown authority"}},
		{"tls", "server certificate for another host", func(t *testing.T) error {
			dir := devCerts(t, tlsconf.DevOptions{Names: []string{"node/n1"}, Hosts: []string{"10.9.9.9"}})
			conn, err := tls.Dial("tcp", tlsServer(t, dir, "node-n1", "", tlsconf.ListenerOptions{}), clientTLS(t, "", "", dir))
			if err == nil {
				conn.Close()
			}
			return err
		}, nil, []string{"127.0.0.1", "10.9.9.9"}},
		{"tls", "key that does not match the certificate", func(t *testing.T) error {
			a, b := devCerts(t, tlsconf.DevOptions{Names: []string{"router"}}), devCerts(t, tlsconf.DevOptions{Names: []string{"router"}})
			_, err := tlsconf.NewReloader(tlsconf.Files{Cert: filepath.Join(a, "router.pem"), Key: filepath.Join(b, "router.key")}, tlsconf.Options{})
			return err
		}, nil, []string{"router.pem", "private key does not match public key"}},
		{"tls", "certificate file that is not PEM", func(t *testing.T) error {
			dir := devCerts(t, tlsconf.DevOptions{Names: []string{"router"}})
			bad := filepath.Join(dir, "garbage.pem")
			if err := os.WriteFile(bad, []byte("not a certificate\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := tlsconf.NewReloader(tlsconf.Files{Cert: bad, Key: filepath.Join(dir, "router.key")}, tlsconf.Options{})
			return err
		}, nil, []string{"garbage.pem"}},
		{"tls", "plaintext listener beyond loopback", func(*testing.T) error {
			return tlsconf.OffLoopback("--listen", "10.1.2.3:7000", false, false)
		}, nil, []string{"10.1.2.3:7000", "--insecure"}},
		{"auth", "node credential promoting", func(t *testing.T) error {
			_, err := controlAs(t, rolesControl(t), "node-n1-token").Promote(ctx, "", false)
			return err
		}, control.ErrPermissionDenied, []string{"admin"}},
		{"auth", "node credential registering another node", func(t *testing.T) error {
			return controlAs(t, rolesControl(t), "node-n1-token").RegisterNode(ctx, control.Node{ID: "n2", Addr: "10.9.9.9:7101", Zone: "a"})
		}, control.ErrPermissionDenied, []string{`node "n2"`}},
		{"auth", "unknown token", func(t *testing.T) error {
			return controlAs(t, rolesControl(t), "guess").Heartbeat(ctx, "n1")
		}, control.ErrUnauthenticated, nil},
		{"cli", "control token over plaintext beyond loopback", func(t *testing.T) error {
			return cliRun(t, "status", "--control", "10.1.2.3:7100", "--token-file", writeFile(t, "tok", "admin-token\n"))
		}, nil, []string{"never sent in plaintext beyond loopback"}},
		{"cli", "node connection cap of 0", func(t *testing.T) error {
			return cliRun(t, "cobbled", "serve", "--id", "n1", "--data", "d", "--control", "127.0.0.1:1", "--objstore", "o", "--max-conns", "0")
		}, nil, []string{"--max-conns 0", "at least 1"}},
		{"cli", "router in-flight cap of 0", func(t *testing.T) error {
			return cliRun(t, "router", "serve", "--control", "127.0.0.1:1", "--listen", "127.0.0.1:0", "--max-in-flight", "0")
		}, nil, []string{"--max-in-flight 0", "at least 1"}},
	}
}
