package router

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pillarkit/pillar/cobbled"
	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/internal/servelimit/limittest"
	"github.com/pillarkit/pillar/internal/testcluster"
)

// serveRouter serves s's gRPC server on 127.0.0.1 and returns its address.
func serveRouter(t *testing.T, s *Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := s.GRPCServer()
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

// TestAttackEmptyKeysBounded: 8 concurrent BatchGets of 16 MiB of empty
// keys (twice over, each on a connection of its own) are refused from the
// message header, the router's heap stays under idle + 64 MiB, and a good
// client's reads through it are answered all along.
func TestAttackEmptyKeysBounded(t *testing.T) {
	c := startCluster(t, nil)
	addr := serveRouter(t, NewServer(newRouter(t, c, nil)))
	keys := c.Batches(12)[1]
	payload := limittest.EmptyKeys(16 << 20) // built before the idle heap is measured
	good := limittest.Dial(t, addr)
	if _, err := limittest.Send(context.Background(), good, &servepb.BatchGetRequest{Keys: keys}); err != nil {
		t.Fatalf("good read before the attack: %v", err)
	}

	h := limittest.SampleHeap()
	stop := make(chan struct{})
	var ok, failed atomic.Int64
	var first atomic.Value
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := limittest.Send(ctx, good, &servepb.BatchGetRequest{Keys: keys})
			cancel()
			if err == nil && len(resp.Results) != len(keys) {
				err = errors.New("short answer")
			}
			if err != nil {
				failed.Add(1)
				first.CompareAndSwap(nil, err.Error())
				continue
			}
			ok.Add(1)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	errs := limittest.Attack(ctx, t, addr, payload, 8, 2)
	took := time.Since(start)
	time.Sleep(50 * time.Millisecond)
	close(stop)
	<-done
	peak := h.Stop()
	t.Logf("attack: %d requests in %v; heap idle %s, peak %s (+%s); good reads %d answered, %d failed",
		len(errs), took.Round(time.Millisecond), limittest.MiB(h.Idle), limittest.MiB(peak), limittest.MiB(peak-h.Idle), ok.Load(), failed.Load())
	for i, err := range errs {
		if c := status.Code(err); c != codes.InvalidArgument && c != codes.ResourceExhausted {
			t.Errorf("attack request %d: %v, want InvalidArgument or ResourceExhausted", i, err)
		} else if msg := status.Convert(err).Message(); len(msg) > 200 {
			t.Errorf("attack request %d: a %d-byte message", i, len(msg))
		}
	}
	if bound := h.Idle + 64<<20; peak > bound {
		t.Errorf("heap peaked at %s during the attack, over idle %s + 64 MiB", limittest.MiB(peak), limittest.MiB(h.Idle))
	}
	if failed.Load() > 0 || ok.Load() == 0 {
		t.Errorf("good reads during the attack: %d answered, %d failed (first: %v)", ok.Load(), failed.Load(), first.Load())
	}
}

// TestLongKeyRefusedShort: a key of 8 MiB through the router is refused
// with a message of a few dozen bytes, never the key: over gRPC by the
// receive limit, from its header; through Read by the key check, quoting
// the key's first bytes and length. A 16 KiB key (within the receive
// limit) is refused InvalidArgument quoting it short. The connection keeps
// working after each refusal.
func TestLongKeyRefusedShort(t *testing.T) {
	c := startCluster(t, nil)
	r := newRouter(t, c, nil)
	addr := serveRouter(t, NewServer(r))
	keys := c.Batches(12)[1]
	conn := limittest.Dial(t, addr)
	ctx := context.Background()

	_, err := limittest.Send(ctx, conn, limittest.OneKey(8<<20))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "larger than max") || len(err.Error()) > 200 {
		t.Errorf("8 MiB key over gRPC: %v, want ResourceExhausted (over the receive limit)", err)
	}
	if _, err := limittest.Send(ctx, conn, &servepb.BatchGetRequest{Keys: keys}); err != nil {
		t.Errorf("the same connection after the 8 MiB key: %v", err)
	}
	_, err = limittest.Send(ctx, conn, limittest.OneKey(16<<10))
	msg := status.Convert(err).Message()
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(msg, "key 0: 00000000000000000000000000000000…, 16384 bytes, want 16") || len(msg) > 200 {
		t.Errorf("16 KiB key over gRPC: %v, want InvalidArgument quoting the key short", err)
	}
	if _, err := limittest.Send(ctx, conn, &servepb.BatchGetRequest{Keys: keys}); err != nil {
		t.Errorf("the same connection after the 16 KiB key: %v", err)
	}

	huge := make([]byte, 8<<20)
	_, err = r.BatchGet(ctx, [][]byte{keys[0], huge})
	if !errors.Is(err, ErrBadKey) || !strings.Contains(err.Error(), "key 1: 00000000000000000000000000000000…, 8388608 bytes, want 16") || len(err.Error()) > 200 {
		t.Errorf("8 MiB key through Read: %.300v, want ErrBadKey quoting the key short", err)
	}
}

// TestInFlightCap: with MaxInFlight requests being answered (their nodes
// slowed), one more is answered ResourceExhausted at once, before its
// message is read; the ones in flight are answered.
func TestInFlightCap(t *testing.T) {
	c := startCluster(t, func(o *testcluster.Options) {
		o.Node = func(no *cobbled.Options) { no.FaultDelay = cobbled.FaultDelay{Fraction: 1, Delay: time.Second} }
	})
	r := newRouter(t, c, func(o *Options) { o.MaxInFlight = 2; o.DisableHedging = true; o.Timeout = 10 * time.Second })
	s := NewServer(r)
	addr := serveRouter(t, s)
	keys := c.Batches(12)[1]
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		conn := limittest.Dial(t, addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = limittest.Send(ctx, conn, &servepb.BatchGetRequest{Keys: keys})
		}()
	}
	waitFor(t, "2 requests in flight", 5*time.Second, func() bool { return s.guard.InFlight() == 2 })
	start := time.Now()
	_, err := limittest.Send(ctx, limittest.Dial(t, addr), &servepb.BatchGetRequest{Keys: keys})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "2 requests in flight") {
		t.Errorf("third request: %v, want ResourceExhausted naming the limit", err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("the refusal took %v; it should not wait for the requests in flight", d)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("request %d in flight: %v", i, err)
		}
	}
}
