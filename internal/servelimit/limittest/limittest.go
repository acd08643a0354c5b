// Package limittest drives hostile BatchGet requests at a real gRPC server
// for the tests of the servers servelimit bounds (the node's and the
// router's): raw request bytes sent as they are, concurrent attacks on
// connections of their own, and the process heap sampled while they run.
package limittest

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"

	"github.com/pillarkit/pillar/cobbled/servepb"
)

// Raw is an encoded BatchGetRequest that RawCodec sends as it is: the
// attack's bytes are built once, not as millions of Go slices in the test's
// own heap.
type Raw []byte

// RawCodec is a client codec that sends a Raw as it is and everything
// else, and every answer, as protobuf.
type RawCodec struct{}

var protoCodec = encoding.GetCodecV2(proto.Name)

func (RawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(Raw); ok {
		return mem.BufferSlice{mem.SliceBuffer(r)}, nil
	}
	return protoCodec.Marshal(v)
}
func (RawCodec) Unmarshal(data mem.BufferSlice, v any) error { return protoCodec.Unmarshal(data, v) }
func (RawCodec) Name() string                                { return proto.Name }

// EmptyKeys is a BatchGetRequest of n bytes (n even) of empty keys: n/2
// keys, each its tag and a zero length.
func EmptyKeys(n int) Raw {
	b := make(Raw, n)
	for i := 0; i < n; i += 2 {
		b[i] = 0x0a // field 1, bytes
	}
	return b
}

// OneKey is a BatchGetRequest of one key of n bytes.
func OneKey(n int) Raw {
	b := []byte{0x0a}
	for v := uint64(n); ; v >>= 7 {
		if v < 0x80 {
			b = append(b, byte(v))
			break
		}
		b = append(b, byte(v)|0x80)
	}
	return append(b, make([]byte, n)...)
}

// Dial opens a plaintext connection to addr that can send a Raw.
func Dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	opts := append(servepb.DialOptions(0),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(RawCodec{}), grpc.MaxCallSendMsgSize(1<<30)))
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Send sends req (a Raw or a *servepb.BatchGetRequest) as one BatchGet on
// conn.
func Send(ctx context.Context, conn *grpc.ClientConn, req any) (*servepb.BatchGetResponse, error) {
	out := new(servepb.BatchGetResponse)
	err := conn.Invoke(ctx, servepb.Serve_BatchGet_FullMethodName, req, out)
	return out, err
}

// Attack sends req n times at once to addr, each on a connection of its
// own, rounds times over, and returns every error (nil for an answer).
func Attack(ctx context.Context, t testing.TB, addr string, req Raw, n, rounds int) []error {
	conns := make([]*grpc.ClientConn, n)
	for i := range conns {
		conns[i] = Dial(t, addr)
	}
	errs := make([]error, n*rounds)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				_, errs[i*rounds+r] = Send(ctx, c, req)
			}
		}()
	}
	wg.Wait()
	return errs
}

// Heap samples the process's in-use heap (runtime.MemStats.HeapInuse).
type Heap struct {
	Idle uint64 // after a GC, before the sampling started
	mu   sync.Mutex
	peak uint64
	stop chan struct{}
	done chan struct{}
}

// SampleHeap measures the idle heap and samples it every millisecond
// until Stop.
func SampleHeap() *Heap {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	h := &Heap{Idle: ms.HeapInuse, peak: ms.HeapInuse, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			h.mu.Lock()
			h.peak = max(h.peak, ms.HeapInuse)
			h.mu.Unlock()
			select {
			case <-h.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return h
}

// Stop ends the sampling and returns the peak heap seen.
func (h *Heap) Stop() uint64 {
	close(h.stop)
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.peak
}

// MiB formats bytes in MiB.
func MiB(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
