package tlsconf

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func devSet(t *testing.T, o DevOptions) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := DevCerts(dir, o); err != nil {
		t.Fatal(err)
	}
	return dir
}

// serve runs a TLS echo of the peer's identity on loopback until the test
// ends.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := c.(*tls.Conn)
				if err := tc.Handshake(); err != nil {
					return
				}
				io.WriteString(tc, PeerIdentity(tc.ConnectionState())+"\n")
			}()
		}
	}()
	return ln.Addr().String()
}

func dial(addr string, f Files) (string, error) {
	r, err := NewReloader(f, Options{})
	if err != nil {
		return "", err
	}
	c, err := tls.Dial("tcp", addr, r.ClientConfig())
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	return strings.TrimSpace(string(b)), err
}

func serverFrom(t *testing.T, f Files, o Options) (*Reloader, string) {
	t.Helper()
	r, err := NewReloader(f, o)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := r.ServerConfig()
	if err != nil {
		t.Fatal(err)
	}
	return r, serve(t, cfg)
}

func pair(dir, base string) Files {
	return Files{Cert: filepath.Join(dir, base+".pem"), Key: filepath.Join(dir, base+".key"), CA: filepath.Join(dir, "ca.pem")}
}

func TestMutualTLSIdentity(t *testing.T) {
	dir := devSet(t, DevOptions{})
	_, addr := serverFrom(t, pair(dir, "control"), Options{})
	id, err := dial(addr, pair(dir, "node-n1"))
	if err != nil {
		t.Fatal(err)
	}
	if id != "pillar://node/n1" {
		t.Fatalf("peer identity %q, want pillar://node/n1", id)
	}
}

func TestRefusedPeers(t *testing.T) {
	dir := devSet(t, DevOptions{})
	other := devSet(t, DevOptions{})
	expired := devSet(t, DevOptions{Now: func() time.Time { return time.Now().Add(-48 * time.Hour) }, Valid: time.Hour})
	_, addr := serverFrom(t, pair(dir, "control"), Options{})
	noCert := Files{CA: filepath.Join(dir, "ca.pem")}
	wrongCA := pair(dir, "node-n1")
	wrongCA.CA = filepath.Join(other, "ca.pem")
	clientOfOtherCA := pair(other, "node-n1")
	clientOfOtherCA.CA = filepath.Join(dir, "ca.pem")
	clientExpired := pair(expired, "node-n1")
	clientExpired.CA = filepath.Join(dir, "ca.pem")
	for name, f := range map[string]Files{
		"client without a certificate":              noCert,
		"client that does not trust the server":     wrongCA,
		"client certificate of another CA":          clientOfOtherCA,
		"client certificate of another CA, expired": clientExpired,
	} {
		if id, err := dial(addr, f); err == nil && id != "" {
			t.Errorf("%s: served (identity %q), want refused", name, id)
		}
	}
	// An expired server certificate is refused by the client.
	expiredServer := pair(expired, "control")
	expiredServer.CA = ""
	_, eaddr := serverFrom(t, expiredServer, Options{})
	client := pair(expired, "node-n1")
	if _, err := dial(eaddr, client); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("expired server certificate: %v, want an error saying expired", err)
	}
}

func copyPair(t *testing.T, from, base, to string) {
	t.Helper()
	for _, ext := range []string{".pem", ".key"} {
		b, err := os.ReadFile(filepath.Join(from, base+ext))
		if err != nil {
			t.Fatal(err)
		}
		// Write then rename, as a certificate manager does.
		tmp := filepath.Join(to, "tmp"+ext)
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(to, "server"+ext)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReloadWithoutRestart(t *testing.T) {
	a, b := devSet(t, DevOptions{}), devSet(t, DevOptions{})
	live := t.TempDir()
	copyPair(t, a, "control", live)
	errs := make(chan error, 8)
	srv, addr := serverFrom(t, Files{Cert: filepath.Join(live, "server.pem"), Key: filepath.Join(live, "server.key")},
		Options{Poll: 20 * time.Millisecond, OnError: func(err error) { errs <- err }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go srv.Watch(ctx)
	trustA, trustB := Files{CA: filepath.Join(a, "ca.pem")}, Files{CA: filepath.Join(b, "ca.pem")}
	if _, err := dial(addr, trustA); err != nil {
		t.Fatalf("before the rotation: %v", err)
	}
	copyPair(t, b, "control", live)
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, errA := dial(addr, trustA)
		_, errB := dial(addr, trustB)
		if errA != nil && errB == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rotated certificate was not picked up within 5s (trusting the old CA: %v; the new: %v)", errA, errB)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A half-written file is refused and the current certificate stays.
	if err := os.WriteFile(filepath.Join(live, "server.pem"), []byte("-----BEGIN CERTIFICATE-----\nMIIB"), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), "server.pem") {
			t.Errorf("failed reload %v does not name the file", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a damaged certificate file was not reported")
	}
	if _, err := dial(addr, trustB); err != nil {
		t.Fatalf("after a failed reload the previous certificate must still serve: %v", err)
	}
}

func TestNewReloaderErrorsNameTheFile(t *testing.T) {
	dir := devSet(t, DevOptions{})
	bad := filepath.Join(t.TempDir(), "empty.pem")
	os.WriteFile(bad, []byte("not pem"), 0o644)
	for name, f := range map[string]Files{
		"cert without key":  {Cert: filepath.Join(dir, "control.pem")},
		"key of another":    {Cert: filepath.Join(dir, "control.pem"), Key: filepath.Join(dir, "router.key")},
		"CA with no certs":  {CA: bad},
		"missing CA bundle": {CA: filepath.Join(dir, "nope.pem")},
	} {
		_, err := NewReloader(f, Options{})
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		for _, p := range []string{f.Cert, f.Key, f.CA} {
			if p != "" && strings.Contains(name, "without") {
				continue
			}
			if p != "" && !strings.Contains(err.Error(), filepath.Base(p)) && !strings.Contains(err.Error(), "go together") {
				t.Errorf("%s: %v does not name %s", name, err, p)
			}
		}
	}
}

func TestOffLoopback(t *testing.T) {
	for _, c := range []struct {
		addr            string
		tlsOn, insecure bool
		ok              bool
	}{
		{"127.0.0.1:7000", false, false, true},
		{"[::1]:7000", false, false, true},
		{"localhost:7000", false, false, true},
		{"0.0.0.0:7000", false, false, false},
		{":7000", false, false, false},
		{"10.1.2.3:7000", false, false, false},
		{"0.0.0.0:7000", true, false, true},
		{"0.0.0.0:7000", false, true, true},
	} {
		err := OffLoopback("--listen", c.addr, c.tlsOn, c.insecure)
		if (err == nil) != c.ok {
			t.Errorf("OffLoopback(%q, tls %v, insecure %v) = %v, want ok %v", c.addr, c.tlsOn, c.insecure, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), c.addr) {
			t.Errorf("%v does not name %s", err, c.addr)
		}
	}
}

func TestDevCertsRefusals(t *testing.T) {
	dir := devSet(t, DevOptions{Names: []string{"node/n1"}})
	if _, err := DevCerts(dir, DevOptions{}); err == nil || !strings.Contains(err.Error(), "ca.pem") {
		t.Errorf("second DevCerts into the same folder: %v, want a refusal naming ca.pem", err)
	}
	if _, err := DevCerts(t.TempDir(), DevOptions{Names: []string{"../x"}}); err == nil || !strings.Contains(err.Error(), `"../x"`) {
		t.Errorf("bad name: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "node-n1.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("private key mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
}

// TestListenerAllowsOnlyListedIdentities: a node's listener serving
// TLS for the router and readers only; a writer's certificate of the same
// CA is refused at the handshake, and the refusal is reported once.
func TestListenerAllowsOnlyListedIdentities(t *testing.T) {
	dir := devSet(t, DevOptions{})
	r, err := NewReloader(pair(dir, "node-n1"), Options{})
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
	refused := make(chan string, 4)
	ln := NewListener(inner, cfg, ListenerOptions{Allow: []string{"pillar://router/*", "pillar://reader/reader"},
		OnRefuse: func(remote, reason string) { refused <- reason }})
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4)
				if _, err := io.ReadFull(c, buf); err == nil {
					c.Write(buf)
				}
			}()
		}
	}()
	echo := func(f Files) error {
		cr, err := NewReloader(f, Options{})
		if err != nil {
			return err
		}
		c, err := tls.Dial("tcp", ln.Addr().String(), cr.ClientConfig())
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		buf := make([]byte, 4)
		_, err = io.ReadFull(c, buf)
		return err
	}
	for _, ok := range []string{"router", "reader"} {
		if err := echo(pair(dir, ok)); err != nil {
			t.Errorf("%s: %v, want served", ok, err)
		}
	}
	if err := echo(pair(dir, "writer-lorry")); err == nil {
		t.Error("writer-lorry: served, want refused")
	}
	select {
	case reason := <-refused:
		if !strings.Contains(reason, "pillar://writer/lorry") {
			t.Errorf("refusal %q does not name the identity", reason)
		}
	case <-time.After(5 * time.Second):
		t.Error("the refused connection was not reported")
	}
	if len(refused) != 0 {
		t.Errorf("%d more refusals reported, want one", len(refused))
	}
}

// TestClientVerifiesTheAddressDialled: a certificate of the right CA but
// for another host is refused, when the address dialled is an IP address
// and when it is a name; the same CA's certificate for the address passes.
func TestClientVerifiesTheAddressDialled(t *testing.T) {
	other := devSet(t, DevOptions{Names: []string{"control"}, Hosts: []string{"10.9.9.9", "cp.example"}})
	_, addr := serverFrom(t, Files{Cert: filepath.Join(other, "control.pem"), Key: filepath.Join(other, "control.key")}, Options{})
	trust := Files{CA: filepath.Join(other, "ca.pem")}
	if _, err := dial(addr, trust); err == nil || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("dialling %s, a certificate for 10.9.9.9 and cp.example: %v, want a refusal naming 127.0.0.1", addr, err)
	}
	_, port, _ := net.SplitHostPort(addr)
	if _, err := dial(net.JoinHostPort("localhost", port), trust); err == nil || !strings.Contains(err.Error(), "localhost") {
		t.Errorf("dialling localhost, a certificate for 10.9.9.9 and cp.example: %v, want a refusal naming localhost", err)
	}
	mine := devSet(t, DevOptions{Names: []string{"control"}})
	_, addr = serverFrom(t, Files{Cert: filepath.Join(mine, "control.pem"), Key: filepath.Join(mine, "control.key")}, Options{})
	if _, err := dial(addr, Files{CA: filepath.Join(mine, "ca.pem")}); err != nil {
		t.Errorf("dialling %s, a certificate for it: %v", addr, err)
	}
}
