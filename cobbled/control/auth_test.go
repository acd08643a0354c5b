package control

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRolesRefuseWhatTheyMayNotDo: a node credential heartbeats and
// registers its own node, but cannot register another node id (a node
// host redirecting routing), promote, retract or register a batch; a
// writer registers batches but cannot remove a node; the admin can.
func TestRolesRefuseWhatTheyMayNotDo(t *testing.T) {
	e := startEnv(t, "sqlite:"+filepath.Join(t.TempDir(), "control.db"), 4, func(o *Options) {
		o.Token = ""
		o.Credentials = []Credential{
			{Role: RoleNode, Token: "node-n1-token", Node: "n1"},
			{Role: RoleWriter, Token: "writer-token"},
			{Role: RoleAdmin, Token: "admin-token"},
		}
	})
	ctx := context.Background()
	as := func(tok string) *Client {
		c, err := Dial(e.addr, &ClientOptions{Token: tok, MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	node, writer, admin, nobody := as("node-n1-token"), as("writer-token"), as("admin-token"), as("wrong-token")

	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v, want allowed", what, err)
		}
	}
	denied := func(what string, err error, sentinel error, mention string) {
		t.Helper()
		if !errors.Is(err, sentinel) {
			t.Errorf("%s: %v, want %v", what, err, sentinel)
		} else if mention != "" && !strings.Contains(err.Error(), mention) {
			t.Errorf("%s: %v does not say %q", what, err, mention)
		}
	}
	must("node registers itself", node.RegisterNode(ctx, Node{ID: "n1", Addr: "127.0.0.1:7101", Zone: "a"}))
	must("node heartbeats", node.Heartbeat(ctx, "n1"))
	denied("node registers another node", node.RegisterNode(ctx, Node{ID: "n2", Addr: "10.9.9.9:7101"}), ErrPermissionDenied, `node "n2"`)
	denied("node heartbeats as another", node.Heartbeat(ctx, "n2"), ErrPermissionDenied, `node "n1"`)
	_, err := node.RegisterBatch(ctx, manifest("b1", 0, 4, "snapshot"))
	denied("node registers a batch", err, ErrPermissionDenied, "writer or admin")
	_, err = node.Promote(ctx, "", false)
	denied("node promotes", err, ErrPermissionDenied, "admin")
	_, err = writer.RegisterBatch(ctx, manifest("b1", 0, 4, "snapshot"))
	must("writer registers a batch", err)
	denied("writer removes a node", writer.RemoveNode(ctx, "n1", true), ErrPermissionDenied, "admin")
	denied("wrong token", nobody.Heartbeat(ctx, "n1"), ErrUnauthenticated, "")
	must("admin removes a node", admin.RemoveNode(ctx, "n1", true))
	if got := e.srv.refusals.Load(); got != 5 {
		t.Errorf("%d refusals counted, want 5 (the wrong token is unauthenticated, not refused)", got)
	}
}

// TestTokenRotationUnderLoad: while nodes heartbeat without pause, the
// node token is rotated (new one added, clients moved, old one removed):
// no call fails, and afterwards the old token is refused.
func TestTokenRotationUnderLoad(t *testing.T) {
	e := startEnv(t, "sqlite:"+filepath.Join(t.TempDir(), "control.db"), 4, func(o *Options) {
		o.Token = ""
		o.Credentials = []Credential{{Role: RoleNode, Token: "old"}, {Role: RoleAdmin, Token: "admin"}}
	})
	ctx := context.Background()
	dial := func(tok string) *Client {
		c, err := Dial(e.addr, &ClientOptions{Token: tok, MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	oldC, newC := dial("old"), dial("new")
	if err := oldC.RegisterNode(ctx, Node{ID: "n1", Addr: "127.0.0.1:7101"}); err != nil {
		t.Fatal(err)
	}
	var useNew atomic.Bool
	var calls, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c := oldC
				if useNew.Load() {
					c = newC
				}
				calls.Add(1)
				if err := c.Heartbeat(ctx, "n1"); err != nil {
					failed.Add(1)
					t.Logf("heartbeat: %v", err)
				}
			}
		}()
	}
	step := func(creds ...Credential) {
		time.Sleep(100 * time.Millisecond)
		if err := e.srv.SetCredentials(creds); err != nil {
			t.Fatal(err)
		}
	}
	admin := Credential{Role: RoleAdmin, Token: "admin"}
	step(Credential{Role: RoleNode, Token: "old"}, Credential{Role: RoleNode, Token: "new"}, admin)
	time.Sleep(100 * time.Millisecond)
	useNew.Store(true)
	time.Sleep(100 * time.Millisecond) // calls in flight with the old token finish
	step(Credential{Role: RoleNode, Token: "new"}, admin)
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	if calls.Load() < 20 || failed.Load() != 0 {
		t.Fatalf("%d of %d heartbeats failed during the rotation, want 0 (of at least 20)", failed.Load(), calls.Load())
	}
	if err := oldC.Heartbeat(ctx, "n1"); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("old token after the rotation: %v, want refused", err)
	}
}

func TestSetCredentialsRefusesBadOnes(t *testing.T) {
	e := startEnv(t, "sqlite:"+filepath.Join(t.TempDir(), "control.db"), 4, nil)
	for _, c := range []Credential{{Role: "root", Token: "x"}, {Role: RoleWriter}, {Role: RoleAdmin, Token: "x", Node: "n1"}} {
		if err := e.srv.SetCredentials([]Credential{c}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", c, err)
		}
	}
}
