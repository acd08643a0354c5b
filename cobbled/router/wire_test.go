package router

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pillarkit/pillar/cobbled"
)

// The lean wire transport reads the same answers as gRPC, fails over from
// a killed node, and reaches the node again once it is back on its port.
func TestWireTransport(t *testing.T) {
	c := startCluster(t, nil)
	ctx := context.Background()
	r := newRouter(t, c, func(o *Options) {
		o.Transport, o.Zone, o.EjectFor, o.DisableHedging = TransportWire, "zone-a", 10*time.Second, true
	})
	for _, b := range c.Batches(12)[:5] {
		res, err := r.BatchGet(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		checkResults(t, c, b, res)
	}
	if n := nodeStats(r, "node-0").RPCs; n != 5 {
		t.Fatalf("%d sub-requests to node-0 (the router's zone), want 5", n)
	}
	c.Members()[0].Kill()
	b := c.Batches(12)[5]
	res, err := r.BatchGet(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, c, b, res)
	if s := r.Stats(); s.Failovers != 1 {
		t.Errorf("%d failovers after the kill, want 1", s.Failovers)
	}
	if err := c.Members()[0].Restart(ctx, cobbled.FaultDelay{}); err != nil {
		t.Fatal(err)
	}
	// The restarted node answers over a fresh connection.
	got, err := New(ctx, Options{Source: c, Transport: TransportWire, Zone: "zone-a", DisableHedging: true})
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	res, err = got.BatchGet(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, c, b, res)
	if n := nodeStats(got, "node-0").RPCs; n != 1 {
		t.Errorf("%d sub-requests to the restarted node-0, want 1", n)
	}
}

func TestTransportValidated(t *testing.T) {
	if err := (Options{Source: RoutingFunc(nil), Transport: "quic"}).Validate(); err == nil {
		t.Fatal("Transport quic accepted")
	}
}

// Over the wire transport every request reads one version, sent to the
// replicas holding it only, and failover stays within it (as over gRPC:
// TestVersionOnlyToHolders).
func TestWireVersions(t *testing.T) {
	f := startFleet(t, 3, 0, 1) // n2 has not applied B
	ctx := context.Background()
	r := newRouter(t, f, func(o *Options) { o.Transport = TransportWire })
	for range 20 {
		resp, err := r.Read(ctx, f.keys, nil)
		checkVersion(t, f.keys, resp, err, pubA)
		resp, err = r.Read(ctx, f.keys, &ReadOptions{Version: pubB})
		checkVersion(t, f.keys, resp, err, pubB)
	}
	if got := nodeVersionReads(t, f.metrics[2], pubB); got != 0 {
		t.Fatalf("n2, which does not hold %s, got %v requests for it", pubB, got)
	}
	f.srvs[0].Stop() // closes its wire side too (Node.Serve)
	for range 10 {
		resp, err := r.Read(ctx, f.keys, &ReadOptions{Version: pubB})
		checkVersion(t, f.keys, resp, err, pubB)
	}
	if got := nodeVersionReads(t, f.metrics[2], pubB); got != 0 {
		t.Fatalf("after failover: n2 got %v requests for %s", got, pubB)
	}
}

// Response.Release gives the answers' buffers back to the pool: concurrent
// reads that release as they go (with hedges and their losers in flight,
// both transports) still read exactly the values, and a released response
// keeps no values.
func TestResponseRelease(t *testing.T) {
	c := startCluster(t, nil)
	ctx := context.Background()
	for _, tr := range []string{TransportGRPC, TransportWire} {
		t.Run(tr, func(t *testing.T) {
			r := newRouter(t, c, func(o *Options) {
				// Hedge almost at once: losers answer after their request
				// ended and must not be handed back twice or while in use.
				o.Transport, o.HedgeInitialDelay, o.HedgeMinDelay, o.HedgeBudget, o.HedgeBurst = tr, time.Microsecond, time.Microsecond, 1, 1000
			})
			batches := c.Batches(12)
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			for w := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 40 {
						keys := batches[(w*40+i)%len(batches)]
						resp, err := r.Read(ctx, keys, nil)
						if err != nil {
							errs <- err
							return
						}
						for j, k := range keys {
							if x := resp.Results[j]; !x.Found || !bytes.Equal(x.Value, c.Value(k)) {
								errs <- fmt.Errorf("key %x: found %v, %d bytes, want its %d-byte value", k, x.Found, len(x.Value), len(c.Value(k)))
								return
							}
						}
						resp.Release()
						if resp.Results != nil {
							errs <- fmt.Errorf("Release kept the results")
							return
						}
						resp.Release() // twice is harmless
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if s := r.Stats(); s.Hedges == 0 || s.Cancelled == 0 {
				t.Errorf("%d hedges, %d cancelled: the losers' path was not exercised", s.Hedges, s.Cancelled)
			}
		})
	}
}
