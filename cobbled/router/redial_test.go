package router

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/connectivity"

	"github.com/pillarkit/pillar/cobbled"
)

// TestReadRedialsChannelsInBackoff: every node is down long enough for the
// router's channels to back off for seconds, then they all come back and
// node-0 goes down again at once. The read fails over to node-1 and
// node-2, whose channels still wait out their backoff; a call on them
// would fail at once with the last dial's "connection refused". The read
// must wake them (ResetConnectBackoff) and be answered, not fail.
func TestReadRedialsChannelsInBackoff(t *testing.T) {
	c := startCluster(t, nil)
	r := newRouter(t, c, func(o *Options) { o.DisableHedging = true })
	ctx := context.Background()
	keys := c.Keys()[:12]
	mustRead := func(what string) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		res, err := r.BatchGet(cctx, keys)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		for i, x := range res {
			if x.Err != nil || !x.Found {
				t.Fatalf("%s: key %d: found=%v err=%v", what, i, x.Found, x.Err)
			}
		}
	}
	mustRead("healthy")
	ms := c.Members()
	for _, m := range ms {
		m.Kill()
	}
	// Reads while every node is down keep the channels dialling and
	// failing: their backoff grows past a second.
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		t0 := time.Now()
		_, err := r.BatchGet(cctx, keys)
		cancel()
		if err == nil {
			t.Fatal("read answered with every node down")
		}
		if d := time.Since(t0); d > time.Second {
			t.Fatalf("a read with every node down took %v to fail (%v): it should fail at once", d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, m := range ms {
		if err := m.Restart(ctx, cobbled.FaultDelay{}); err != nil {
			t.Fatal(err)
		}
	}
	ms[0].Kill()
	backoff := 0
	for _, m := range ms[1:] {
		if s := connState(r, m.Addr); s == connectivity.TransientFailure || s == connectivity.Idle {
			backoff++
		}
	}
	if backoff == 0 {
		t.Fatal("no channel of the restarted nodes is in backoff: the test would exercise nothing")
	}
	mustRead("node-0 down again, node-1 and node-2 back")
}

func connState(r *Router, addr string) connectivity.State {
	r.installMu.Lock()
	defer r.installMu.Unlock()
	for _, n := range r.nodes {
		if n.addr == addr {
			return n.conn.GetState()
		}
	}
	return connectivity.Shutdown
}
