package cobbled

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/clock"
)

// serveTestNode starts n's gRPC server on 127.0.0.1 and returns a client.
func serveTestNode(t testing.TB, n *Node) (servepb.ServeClient, *grpc.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	srv := n.NewGRPCServer()
	go srv.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), append(servepb.DialOptions(0), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	must(t, err)
	t.Cleanup(func() { conn.Close(); srv.Stop() })
	return servepb.NewServeClient(conn), srv
}

func TestBatchGet(t *testing.T) {
	const parts = 4
	objects, dir := t.TempDir(), t.TempDir()
	ctx := context.Background()
	n := openTestNode(t, dir, objects, parts, func(o *Options) { o.MaxKeys = 16; o.MaxResponseBytes = 700 << 10 })
	defer n.Close()
	want := model{}
	var present, absent [3][]string
	for p := 0; p < 3; p++ { // the node holds 0, 1, 2; not 3
		ks := keysIn(8, p, parts)
		var ops []op
		for i, k := range ks[:5] {
			v := strings.Repeat(fmt.Sprintf("p%dk%d.", p, i), 1+i*4000) // up to ~100 KB
			if i == 4 {
				v = "" // found, empty value
			}
			ops = append(ops, op{key: k, val: v})
			want[k] = v
		}
		present[p], absent[p] = ks[:5], ks[5:]
		m := writeBatch(t, objects, parts, p, fmt.Sprintf("s%d", p), batch.KindSnapshot, ops, 0)
		must(t, n.Apply(ctx, Batch{Seq: 1, Manifest: m}))
	}
	foreign := keysIn(2, 3, parts)
	cli, _ := serveTestNode(t, n)

	// Keys in mixed partition order, with a duplicate, a missing key and keys
	// of a partition the node does not hold.
	req := []string{present[2][0], foreign[0], present[0][3], absent[1][0], present[1][4], present[2][0], foreign[1], present[0][0], absent[0][1]}
	keys := make([][]byte, len(req))
	for i, k := range req {
		keys[i] = []byte(k)
	}
	resp, err := cli.BatchGet(ctx, &servepb.BatchGetRequest{Keys: keys})
	must(t, err)
	if len(resp.Results) != len(req) {
		t.Fatalf("%d results for %d keys", len(resp.Results), len(req))
	}
	for i, k := range req {
		r := resp.Results[i]
		v, ok := want[k]
		switch {
		case k == foreign[0] || k == foreign[1]:
			if r.Status != servepb.KeyStatus_KEY_NOT_SERVED || r.Found || !strings.Contains(r.Error, "partition 3 not served") {
				t.Errorf("key %d (foreign): %v", i, r)
			}
		case r.Status != servepb.KeyStatus_KEY_OK || r.Found != ok || !bytes.Equal(r.Value, []byte(v)):
			t.Errorf("key %d: found %v status %v value %d bytes; want found %v, %d bytes", i, r.Found, r.Status, len(r.Value), ok, len(v))
		}
	}

	// The wire protocol's answer (framing plus values written from where
	// RocksDB pinned them) is byte for byte the gRPC encoding: sizes across
	// inlineMax, an empty value, not served and missing keys, a version.
	for _, version := range []string{"", "nope"} {
		r := &servepb.BatchGetRequest{Keys: keys, Version: version}
		enc, err := n.batchGet(ctx, r)
		must(t, err)
		parts, release, err := n.WireHandler()(ctx, r)
		must(t, err)
		if got, want := bytes.Join(parts, nil), enc.(*servepb.Encoded).Buf.ReadOnlyData(); !bytes.Equal(got, want) {
			t.Errorf("version %q: the wire answer (%d bytes in %d parts) differs from the gRPC encoding (%d bytes)", version, len(got), len(parts), len(want))
		}
		if version == "" && len(parts) < 3 {
			t.Errorf("%d parts: values over %d bytes were copied, not written in place", len(parts), inlineMax)
		}
		release()
		enc.(*servepb.Encoded).Buf.Free()
	}

	bad := []struct {
		name string
		keys [][]byte
		code codes.Code
		msg  string
	}{
		{"empty", nil, codes.InvalidArgument, "empty request"},
		{"short key", [][]byte{keys[0], []byte("0123456789abcde")}, codes.InvalidArgument, "key 1"},
		{"long key", [][]byte{[]byte("0123456789abcdefX")}, codes.InvalidArgument, "17 bytes, want 16"},
		{"too many keys", nil, codes.InvalidArgument, "over the limit of 16"},
	}
	many := make([][]byte, 17)
	for i := range many {
		many[i] = keys[0]
	}
	bad[3].keys = many
	for _, c := range bad {
		_, err := cli.BatchGet(ctx, &servepb.BatchGetRequest{Keys: c.keys})
		if status.Code(err) != c.code || !strings.Contains(status.Convert(err).Message(), c.msg) {
			t.Errorf("%s: got %v, want %v containing %q", c.name, err, c.code, c.msg)
		}
	}
	// Over the response byte limit: 16 copies of a 60 KB value > 700 KiB.
	big := make([][]byte, 16)
	for i := range big {
		big[i] = []byte(present[0][3])
	}
	_, err = cli.BatchGet(ctx, &servepb.BatchGetRequest{Keys: big})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "over the limit") {
		t.Errorf("response limit: got %v", err)
	}
}

func TestBatchGetFaultDelayAndGracefulStop(t *testing.T) {
	const parts = 1
	objects, dir := t.TempDir(), t.TempDir()
	ctx := context.Background()
	clk := clock.NewFake(time.Time{})
	n := openTestNode(t, dir, objects, parts, func(o *Options) {
		o.FaultDelay, o.Clock = FaultDelay{Fraction: 1, Delay: time.Second}, clk
	})
	defer n.Close()
	k := keysIn(1, 0, parts)[0]
	m := writeBatch(t, objects, parts, 0, "s", batch.KindSnapshot, []op{{key: k, val: "v"}}, 0)
	must(t, n.Apply(ctx, Batch{Seq: 1, Manifest: m}))
	cli, srv := serveTestNode(t, n)
	done := make(chan error, 1)
	go func() {
		resp, err := cli.BatchGet(ctx, &servepb.BatchGetRequest{Keys: [][]byte{[]byte(k)}})
		if err == nil && (!resp.Results[0].Found || string(resp.Results[0].Value) != "v") {
			err = fmt.Errorf("wrong result %v", resp.Results[0])
		}
		done <- err
	}()
	waitFor(t, "the request to be in flight", 10*time.Second, func() bool {
		var m dto.Metric
		n.opts.Metrics.inflight.Write(&m)
		return m.GetGauge().GetValue() == 1
	})
	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := clk.BlockUntil(bctx, 1); err != nil { // the fault delay's timer
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }() // drains the delayed request
	clk.Advance(time.Second - time.Nanosecond)
	select {
	case err := <-done:
		t.Fatalf("request answered before its fault delay passed (%v)", err)
	case <-stopped:
		t.Fatal("graceful stop returned with a request in flight")
	case <-time.After(50 * time.Millisecond):
	}
	clk.Advance(time.Nanosecond)
	if err := <-done; err != nil {
		t.Fatalf("in-flight request during graceful stop: %v", err)
	}
	<-stopped
}

// TestReadsDuringSnapshotSwap applies generation after generation (snapshots
// and deltas rewriting every key) while readers read all keys at once: no
// read may fail, and every read must see a single generation.
func TestReadsDuringSnapshotSwap(t *testing.T) {
	const parts, p, nkeys, gens = 2, 1, 40, 24
	objects, dir := t.TempDir(), t.TempDir()
	ctx := context.Background()
	n := openTestNode(t, dir, objects, parts, nil)
	defer n.Close()
	universe := keysIn(nkeys, p, parts)
	var bs []Batch
	for g := 1; g <= gens; g++ {
		kind := batch.KindSnapshot
		if g%3 == 0 {
			kind = batch.KindDelta
		}
		var ops []op
		for i, k := range universe {
			ops = append(ops, op{key: k, val: fmt.Sprintf("g%03d/%02d/%s", g, i, strings.Repeat("x", 100*i))})
		}
		bs = append(bs, Batch{Seq: int64(g), Manifest: writeBatch(t, objects, parts, p, fmt.Sprintf("g%03d", g), kind, ops, 16)})
	}
	must(t, n.Apply(ctx, bs[0]))
	keys := make([][]byte, nkeys)
	for i, k := range universe {
		keys[i] = []byte(k)
	}
	var stop atomic.Bool
	var reads atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	check := func(vals [][]byte) error {
		g := string(vals[0][:4])
		for i, v := range vals {
			if !strings.HasPrefix(string(v), fmt.Sprintf("%s/%02d/", g, i)) {
				return fmt.Errorf("key %d: %.12q in a read of generation %s", i, v, g)
			}
		}
		return nil
	}
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			vals := make([][]byte, nkeys)
			for !stop.Load() {
				if r%2 == 0 { // the node's in-process MultiGet
					err := n.MultiGet(p, keys, func(i int, v []byte, found bool) {
						vals[i] = append(vals[i][:0], v...)
					})
					if err == nil {
						err = check(vals)
					}
					if err != nil {
						errs <- err
						return
					}
				} else { // the BatchGet handler
					out, err := n.batchGet(ctx, &servepb.BatchGetRequest{Keys: keys})
					if err == nil {
						err = decodeCheck(out, vals, check)
					}
					if err != nil {
						errs <- err
						return
					}
				}
				reads.Add(1)
			}
		}(r)
	}
	for _, b := range bs[1:] {
		// Let readers in between generations, however loaded the machine.
		before := reads.Load()
		waitFor(t, "a read", 10*time.Second, func() bool { return reads.Load() > before || len(errs) > 0 })
		must(t, n.Apply(ctx, b))
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d reads across %d generations", reads.Load(), gens)
	if reads.Load() < gens {
		t.Fatalf("only %d reads", reads.Load())
	}
}

// decodeCheck decodes an encoded response as a client would and checks it.
func decodeCheck(out any, vals [][]byte, check func([][]byte) error) error {
	enc := out.(*servepb.Encoded)
	defer enc.Buf.Free()
	var resp servepb.BatchGetResponse
	if err := proto.Unmarshal(enc.Buf.ReadOnlyData(), &resp); err != nil {
		return err
	}
	if len(resp.Results) != len(vals) {
		return fmt.Errorf("%d results, want %d", len(resp.Results), len(vals))
	}
	for i, r := range resp.Results {
		if !r.Found || r.Status != servepb.KeyStatus_KEY_OK {
			return fmt.Errorf("key %d: %v", i, r)
		}
		vals[i] = r.Value
	}
	return check(vals)
}

func unmarshal(enc *servepb.Encoded, resp *servepb.BatchGetResponse) error {
	return proto.Unmarshal(enc.Buf.ReadOnlyData(), resp)
}

func TestBatchGetCancelledBeforeRead(t *testing.T) {
	n := openTestNode(t, t.TempDir(), t.TempDir(), 1, nil)
	defer n.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := n.batchGet(ctx, &servepb.BatchGetRequest{Keys: [][]byte{make([]byte, 16)}})
	if status.Code(err) != codes.Canceled {
		t.Fatalf("got %v, want Canceled", err)
	}
}
