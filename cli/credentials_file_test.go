package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/tlsconf"
)

func TestReadCredentials(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "creds")
		os.WriteFile(p, []byte(body), 0o600)
		return p
	}
	got, err := readCredentials(write("# roles\nnode tn1 n1\nnode tany\n\nwriter tw\nadmin ta\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []control.Credential{{Role: "node", Token: "tn1", Node: "n1"}, {Role: "node", Token: "tany"}, {Role: "writer", Token: "tw"}, {Role: "admin", Token: "ta"}}
	if len(got) != len(want) {
		t.Fatalf("%+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	for body, mention := range map[string]string{
		"root secret-token\n":     `creds:1: role "root"`,
		"writer\n":                "creds:1: writer with no token",
		"writer tw n1\n":          "creds:1: want",
		"# nothing\n":             "no credentials",
		"admin ta\nnode\n":        "creds:2",
		"node secret-token a b\n": "creds:1",
	} {
		_, err := readCredentials(write(body))
		if err == nil || !strings.Contains(err.Error(), mention) {
			t.Errorf("%q: %v, want an error saying %q", body, err, mention)
		}
		if err != nil && strings.Contains(err.Error(), "secret-token") {
			t.Errorf("%q: the error quotes the token: %v", body, err)
		}
	}
}

// TestControlServeRolesOverMutualTLS: `control serve` with mutual TLS and
// a credentials file: node n1's certificate heartbeats as n1 but not as n2
// and cannot promote; a writer token registers a batch; a plaintext
// client is refused, and the node's token is not sent in plaintext to a
// non-loopback address.
func TestControlServeRolesOverMutualTLS(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if _, err := tlsconf.DevCerts(certs, tlsconf.DevOptions{}); err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(dir, "credentials")
	os.WriteFile(creds, []byte("writer writer-token\n"), 0o600)
	addr := freeAddr(t)
	done := make(chan error, 1)
	go func() {
		_, err := runControlCLI(t, ctx, "control", "serve", "--db", "sqlite:"+filepath.Join(dir, "control.db"), "--listen", addr,
			"--http", freeAddr(t), "--partitions", "4", "--credentials-file", creds,
			"--tls-cert", filepath.Join(certs, "control.pem"), "--tls-key", filepath.Join(certs, "control.key"),
			"--tls-client-ca", filepath.Join(certs, "ca.pem"))
		done <- err
	}()
	defer func() { cancel(); <-done }()
	dial := func(name, token string) *control.Client {
		r, err := tlsconf.NewReloader(tlsconf.Files{CA: filepath.Join(certs, "ca.pem"), Cert: filepath.Join(certs, name+".pem"), Key: filepath.Join(certs, name+".key")}, tlsconf.Options{})
		if err != nil {
			t.Fatal(err)
		}
		c, err := control.Dial(addr, &control.ClientOptions{TLS: r.ClientConfig(), Token: token, MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	node := dial("node-n1", "")
	var err error
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err = node.RegisterNode(ctx, control.Node{ID: "n1", Addr: "127.0.0.1:7101", Zone: "a"}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node n1 registering with its certificate: %v", err)
		}
	}
	if err := node.Heartbeat(ctx, "n1"); err != nil {
		t.Errorf("n1 heartbeat: %v", err)
	}
	if err := node.Heartbeat(ctx, "n2"); !errors.Is(err, control.ErrPermissionDenied) {
		t.Errorf("n1's certificate heartbeating as n2: %v, want permission denied", err)
	}
	if _, err := node.Promote(ctx, "", false); !errors.Is(err, control.ErrPermissionDenied) {
		t.Errorf("n1's certificate promoting: %v, want permission denied", err)
	}
	// The reader's certificate carries no control-plane role; the writer
	// token gives it one.
	if err := dial("reader", "").Heartbeat(ctx, "n1"); !errors.Is(err, control.ErrUnauthenticated) {
		t.Errorf("a reader certificate heartbeating: %v, want unauthenticated", err)
	}
	sum := sha256.Sum256([]byte("b1"))
	m := &batch.Manifest{Format: batch.FormatVersion, ID: "b1", Partition: 0, Partitions: 4, Kind: batch.KindSnapshot,
		Files: []batch.File{{Name: "000001.sst", Size: 100, SHA256: hex.EncodeToString(sum[:]), Keys: 3}},
		Keys:  3, Smallest: "00", Largest: "ff", Source: "test", CreatedAtMS: 1700000000000}
	if _, err := dial("reader", "writer-token").RegisterBatch(ctx, m); err != nil {
		t.Errorf("the writer token registering a batch: %v", err)
	}
	if _, err := node.RegisterBatch(ctx, m); !errors.Is(err, control.ErrPermissionDenied) {
		t.Errorf("n1's certificate registering a batch: %v, want permission denied", err)
	}
}
