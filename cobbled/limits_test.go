package cobbled

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/servelimit/limittest"
)

// limitsNode opens a node holding partitions 0 and 1 of 4 (five keys each,
// values up to ~20 KB), serves its gRPC server on 127.0.0.1 and returns
// its address and a good request's keys.
func limitsNode(t *testing.T, mod func(*Options)) (*Node, string, [][]byte) {
	t.Helper()
	const parts = 4
	objects := t.TempDir()
	n := openTestNode(t, t.TempDir(), objects, parts, mod)
	t.Cleanup(func() { n.Close() })
	var keys [][]byte
	for p := range 2 {
		var ops []op
		for i, k := range keysIn(5, p, parts) {
			ops = append(ops, op{key: k, val: strings.Repeat(fmt.Sprintf("p%dk%d.", p, i), 1+i*1000)})
			keys = append(keys, []byte(k))
		}
		m := writeBatch(t, objects, parts, p, fmt.Sprintf("s%d", p), batch.KindSnapshot, ops, 0)
		must(t, n.Apply(context.Background(), Batch{Seq: 1, Manifest: m}))
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	srv := n.NewGRPCServer()
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return n, lis.Addr().String(), keys
}

// goodReads sends req on conn until stop is closed and counts the answers
// and the failures (with the first failure).
type goodReads struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	first      error
	done       chan struct{}
}

func readUntil(conn *grpc.ClientConn, keys [][]byte, stop <-chan struct{}) *goodReads {
	g := &goodReads{done: make(chan struct{})}
	go func() {
		defer close(g.done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := limittest.Send(ctx, conn, &servepb.BatchGetRequest{Keys: keys})
			cancel()
			if err == nil && len(resp.Results) != len(keys) {
				err = fmt.Errorf("%d results for %d keys", len(resp.Results), len(keys))
			}
			if err != nil {
				g.failed.Add(1)
				g.mu.Lock()
				if g.first == nil {
					g.first = err
				}
				g.mu.Unlock()
				continue
			}
			g.ok.Add(1)
		}
	}()
	return g
}

// checkAttack runs the amplification attack at addr: 8 concurrent
// BatchGets of 16 MiB of empty keys (8 million keys each), twice over,
// each on a connection of its own, while a good client reads on another.
// Every attack request must be refused (InvalidArgument or
// ResourceExhausted, in a short message), the process heap must stay
// under its idle size + 64 MiB throughout, and every good read must be
// answered.
func checkAttack(t *testing.T, addr string, keys [][]byte) {
	t.Helper()
	payload := limittest.EmptyKeys(16 << 20) // built before the idle heap is measured
	good := limittest.Dial(t, addr)
	if _, err := limittest.Send(context.Background(), good, &servepb.BatchGetRequest{Keys: keys}); err != nil {
		t.Fatalf("good read before the attack: %v", err)
	}
	h := limittest.SampleHeap()
	stop := make(chan struct{})
	reads := readUntil(good, keys, stop)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	errs := limittest.Attack(ctx, t, addr, payload, 8, 2)
	took := time.Since(start)
	time.Sleep(50 * time.Millisecond) // good reads after the attack, too
	close(stop)
	<-reads.done
	peak := h.Stop()
	t.Logf("attack: %d requests in %v; heap idle %s, peak %s (+%s); good reads %d answered, %d failed",
		len(errs), took.Round(time.Millisecond), limittest.MiB(h.Idle), limittest.MiB(peak), limittest.MiB(peak-h.Idle), reads.ok.Load(), reads.failed.Load())
	for i, err := range errs {
		c := status.Code(err)
		if c != codes.InvalidArgument && c != codes.ResourceExhausted {
			t.Errorf("attack request %d: %v, want InvalidArgument or ResourceExhausted", i, err)
		} else if msg := status.Convert(err).Message(); len(msg) > 200 {
			t.Errorf("attack request %d: a %d-byte message", i, len(msg))
		}
	}
	if errs[0] != nil {
		t.Logf("refused: %v", errs[0])
	}
	if bound := h.Idle + 64<<20; peak > bound {
		t.Errorf("heap peaked at %s during the attack, over idle %s + 64 MiB", limittest.MiB(peak), limittest.MiB(h.Idle))
	}
	if reads.failed.Load() > 0 || reads.ok.Load() == 0 {
		t.Errorf("good reads during the attack: %d answered, %d failed (first: %v)", reads.ok.Load(), reads.failed.Load(), reads.first)
	}
}

// TestAttackEmptyKeysBounded: the decode-amplification attack over gRPC is
// refused from the message header (the receive limit is sized from
// MaxKeys), costs the node no memory to speak of, and does not stop it
// answering a good client.
func TestAttackEmptyKeysBounded(t *testing.T) {
	_, addr, keys := limitsNode(t, nil)
	checkAttack(t, addr, keys)
}

// TestLongKeyRefusedShort: a key of 8 MiB is refused by the receive limit
// and one of 16 KiB (within it) by the key check, in messages that quote
// the key by its first bytes and length; the connection keeps working.
func TestLongKeyRefusedShort(t *testing.T) {
	_, addr, keys := limitsNode(t, nil)
	conn := limittest.Dial(t, addr)
	ctx := context.Background()
	_, err := limittest.Send(ctx, conn, limittest.OneKey(8<<20))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "larger than max") {
		t.Errorf("8 MiB key: %v, want ResourceExhausted (over the receive limit)", err)
	}
	_, err = limittest.Send(ctx, conn, limittest.OneKey(16<<10))
	msg := status.Convert(err).Message()
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(msg, "key 0: 00000000000000000000000000000000…, 16384 bytes, want 16") || len(msg) > 200 {
		t.Errorf("16 KiB key: %v, want InvalidArgument quoting the key short", err)
	}
	if _, err := limittest.Send(ctx, conn, &servepb.BatchGetRequest{Keys: keys}); err != nil {
		t.Errorf("the same connection after the refusals: %v", err)
	}
}

// TestInFlightCap: a request past MaxInFlight is answered
// ResourceExhausted at once, before its message is read; the requests in
// flight are answered.
func TestInFlightCap(t *testing.T) {
	n, addr, keys := limitsNode(t, func(o *Options) {
		o.MaxInFlight = 2
		o.FaultDelay = FaultDelay{Fraction: 1, Delay: time.Second}
	})
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
	waitFor(t, "2 requests in flight", 5*time.Second, func() bool { return n.requestGuard().InFlight() == 2 })
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
	if got := n.requestGuard().InFlight(); got != 0 {
		t.Errorf("%d in flight after every answer", got)
	}
}
