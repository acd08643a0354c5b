package wire

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/pillarkit/pillar/cobbled/servepb"
)

// echo answers every key with a value of the key repeated, and the version.
// echo answers every key with the key three times, one part per result
// (so responses are written from several buffers, as a node's are).
func echo(_ context.Context, req *servepb.BatchGetRequest) ([][]byte, func(), error) {
	var parts [][]byte
	for _, k := range req.Keys {
		var b []byte
		var r []byte
		r = protowire.AppendTag(r, 1, protowire.VarintType)
		r = append(r, 1)
		r = protowire.AppendTag(r, 2, protowire.BytesType)
		r = protowire.AppendBytes(r, []byte(strings.Repeat(string(k), 3)))
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, r)
		parts = append(parts, b)
	}
	if req.Version != "" {
		var b []byte
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, req.Version)
		parts = append(parts, b)
	}
	return parts, nil, nil
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

func serve(t *testing.T, h Handler) (*Server, string) {
	t.Helper()
	lis := listen(t)
	s := NewServer(h, ServerOptions{})
	go s.Serve(lis)
	t.Cleanup(s.Close)
	return s, lis.Addr().String()
}

func TestPipelined(t *testing.T) {
	_, addr := serve(t, echo)
	c := NewClient(addr, ClientOptions{Conns: 1})
	defer c.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := []byte(fmt.Sprintf("key-%02d", i))
			resp, err := c.BatchGet(context.Background(), &servepb.BatchGetRequest{Keys: [][]byte{key, []byte("x")}, Version: "v1"})
			if err != nil {
				errs <- err
				return
			}
			if len(resp.Results) != 2 || string(resp.Results[0].Value) != strings.Repeat(string(key), 3) || !resp.Results[1].Found || resp.Version != "v1" {
				errs <- fmt.Errorf("request %d: wrong answer %v", i, resp)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestErrorKeepsCode(t *testing.T) {
	_, addr := serve(t, func(context.Context, *servepb.BatchGetRequest) ([][]byte, func(), error) {
		return nil, nil, status.Error(codes.InvalidArgument, "cobbled: BatchGet: empty request (no keys)")
	})
	c := NewClient(addr, ClientOptions{})
	defer c.Close()
	_, err := c.BatchGet(context.Background(), &servepb.BatchGetRequest{})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "empty request") {
		t.Fatalf("err %v, want InvalidArgument with the node's message", err)
	}
	// The connection stays usable after an error answer.
	_, err = c.BatchGet(context.Background(), &servepb.BatchGetRequest{})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("second request: %v", err)
	}
}

func TestCancel(t *testing.T) {
	started, seen := make(chan struct{}), make(chan error, 1)
	released := make(chan struct{})
	_, addr := serve(t, func(ctx context.Context, req *servepb.BatchGetRequest) ([][]byte, func(), error) {
		if string(req.Keys[0]) != "block" {
			return echo(ctx, req)
		}
		close(started)
		<-ctx.Done()
		seen <- ctx.Err()
		return nil, func() { close(released) }, nil
	})
	c := NewClient(addr, ClientOptions{})
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.BatchGet(ctx, &servepb.BatchGetRequest{Keys: [][]byte{[]byte("block")}})
		done <- err
	}()
	<-started
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Fatalf("err %v, want Canceled", err)
	}
	if err := <-seen; !errors.Is(err, context.Canceled) {
		t.Fatalf("handler saw %v, want its context cancelled", err)
	}
	<-released // the handler's buffer is released though nothing is sent
	// The connection still serves (the late answer was not sent).
	if _, err := c.BatchGet(context.Background(), &servepb.BatchGetRequest{Keys: [][]byte{[]byte("k")}}); err != nil {
		t.Fatalf("after a cancel: %v", err)
	}
}

func TestDeadlineTravels(t *testing.T) {
	got := make(chan bool, 1)
	_, addr := serve(t, func(ctx context.Context, req *servepb.BatchGetRequest) ([][]byte, func(), error) {
		_, ok := ctx.Deadline()
		got <- ok
		return echo(ctx, req)
	})
	c := NewClient(addr, ClientOptions{})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if _, err := c.BatchGet(ctx, &servepb.BatchGetRequest{Keys: [][]byte{[]byte("k")}}); err != nil {
		t.Fatal(err)
	}
	if !<-got {
		t.Fatal("the handler's context has no deadline")
	}
}

// A client that sends a bad frame is cut off; the server keeps serving
// others.
func TestServerRefusesBadFrames(t *testing.T) {
	for _, tc := range []struct {
		name  string
		frame []byte
	}{
		{"too long", func() []byte { var h [headerLen]byte; putHeader(&h, KindRequest, 1, 17<<20); return h[:] }()},
		{"unknown kind", func() []byte { var h [headerLen]byte; putHeader(&h, 9, 1, 0); return h[:] }()},
		{"response from a client", func() []byte { var h [headerLen]byte; putHeader(&h, KindResponse, 1, 0); return h[:] }()},
		{"short length", []byte{0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1}},
		{"malformed request", append(func() []byte { var h [headerLen]byte; putHeader(&h, KindRequest, 1, 10); return h[:] }(), 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, addr := serve(t, echo)
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.Write(append([]byte(Magic), tc.frame...))
			if _, err := io.ReadAll(nc); err != nil { // the server closes the connection
				t.Fatal(err)
			}
			c := NewClient(addr, ClientOptions{})
			defer c.Close()
			if _, err := c.BatchGet(context.Background(), &servepb.BatchGetRequest{Keys: [][]byte{[]byte("k")}}); err != nil {
				t.Fatalf("a good client after the bad one: %v", err)
			}
		})
	}
}

// fakeNode accepts one wire connection and answers the first request with
// what reply writes.
func fakeNode(t *testing.T, reply func(w io.Writer, id uint64)) string {
	t.Helper()
	lis := listen(t)
	t.Cleanup(func() { lis.Close() })
	go func() {
		nc, err := lis.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		r := bufio.NewReader(nc)
		io.ReadFull(r, make([]byte, len(Magic)))
		f, err := readHeader(r, "test", 1<<20)
		if err != nil {
			return
		}
		io.ReadFull(r, make([]byte, f.n))
		reply(nc, f.id)
		io.Copy(io.Discard, r)
	}()
	return lis.Addr().String()
}

// A node that breaks the protocol fails the request as Unavailable, with
// an error naming the node.
func TestClientRefusesBadFrames(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply func(w io.Writer, id uint64)
		want  string
	}{
		{"too long", func(w io.Writer, id uint64) {
			var h [headerLen]byte
			putHeader(&h, KindResponse, id, 2<<20)
			w.Write(h[:])
		}, "over the limit"},
		{"request from a node", func(w io.Writer, id uint64) {
			var h [headerLen]byte
			putHeader(&h, KindRequest, id, 0)
			w.Write(h[:])
		}, "does not send frames of kind 1"},
		{"malformed response", func(w io.Writer, id uint64) {
			var h [headerLen]byte
			putHeader(&h, KindResponse, id, 2)
			w.Write(append(h[:], 0x0a, 0xff))
		}, "malformed BatchGetResponse"},
		{"short error", func(w io.Writer, id uint64) {
			var h [headerLen]byte
			putHeader(&h, KindError, id, 2)
			w.Write(append(h[:], 0, 1))
		}, "shorter than its code"},
		{"closed mid-frame", func(w io.Writer, id uint64) {
			var h [headerLen]byte
			putHeader(&h, KindResponse, id, 100)
			w.Write(append(h[:], 1, 2, 3))
			w.(net.Conn).Close()
		}, "closed the connection"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := fakeNode(t, tc.reply)
			c := NewClient(addr, ClientOptions{MaxFrame: 1 << 20})
			defer c.Close()
			_, err := c.BatchGet(context.Background(), &servepb.BatchGetRequest{Keys: [][]byte{[]byte("k")}})
			if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want Unavailable naming %s and %q", err, addr, tc.want)
			}
		})
	}
}

// A node that restarts on its address is reached again without the caller
// doing anything; the request in flight when it went away fails as
// Unavailable.
func TestNodeRestart(t *testing.T) {
	lis := listen(t)
	addr := lis.Addr().String()
	block := make(chan struct{})
	entered := make(chan struct{}, 1)
	s1 := NewServer(func(ctx context.Context, req *servepb.BatchGetRequest) ([][]byte, func(), error) {
		if string(req.Keys[0]) == "block" {
			entered <- struct{}{}
			<-block
		}
		return echo(ctx, req)
	}, ServerOptions{})
	go s1.Serve(lis)
	defer close(block)
	c := NewClient(addr, ClientOptions{Conns: 1})
	defer c.Close()
	if _, err := c.BatchGet(context.Background(), &servepb.BatchGetRequest{Keys: [][]byte{[]byte("k")}}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.BatchGet(context.Background(), &servepb.BatchGetRequest{Keys: [][]byte{[]byte("block")}})
		done <- err
	}()
	<-entered
	s1.Close()
	if err := <-done; status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), addr) {
		t.Fatalf("in flight at the stop: %v, want Unavailable naming %s", err, addr)
	}
	lis2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addr, err)
	}
	s2 := NewServer(echo, ServerOptions{})
	go s2.Serve(lis2)
	defer s2.Close()
	resp, err := c.BatchGet(context.Background(), &servepb.BatchGetRequest{Keys: [][]byte{[]byte("k")}})
	if err != nil || len(resp.Results) != 1 {
		t.Fatalf("after the restart: %v %v", resp, err)
	}
}

// Split hands wire connections to one listener and the rest, first bytes
// replayed, to the other.
func TestSplit(t *testing.T) {
	lis := listen(t)
	other, wl := Split(lis, time.Minute)
	defer other.Close()
	s := NewServer(echo, ServerOptions{})
	go s.ServeConns(wl)
	defer s.Close()
	got := make(chan string, 1)
	go func() {
		nc, err := other.Accept()
		if err != nil {
			got <- err.Error()
			return
		}
		defer nc.Close()
		b := make([]byte, 14)
		io.ReadFull(nc, b)
		got <- string(b)
	}()
	nc, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.Write([]byte("PRI * HTTP/2.0"))
	if g := <-got; g != "PRI * HTTP/2.0" {
		t.Fatalf("other listener got %q", g)
	}
	c := NewClient(lis.Addr().String(), ClientOptions{})
	defer c.Close()
	if _, err := c.BatchGet(context.Background(), &servepb.BatchGetRequest{Keys: [][]byte{[]byte("k")}}); err != nil {
		t.Fatal(err)
	}
}

// A client that sends a request without a deadline and stops reading must
// not hold the handler's parts (a node's pins and partition read locks)
// for ever: the write gives up after WriteTimeout, releases them and
// closes the connection.
func TestWriteTimeoutWithoutDeadline(t *testing.T) {
	released := make(chan struct{})
	big := make([]byte, 64<<20) // far more than the sockets buffer
	lis := listen(t)
	s := NewServer(func(context.Context, *servepb.BatchGetRequest) ([][]byte, func(), error) {
		return [][]byte{big}, func() { close(released) }, nil
	}, ServerOptions{WriteTimeout: 50 * time.Millisecond})
	go s.Serve(lis)
	t.Cleanup(s.Close)
	c, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, Magic); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 8) // timeout 0: no deadline
	body, err = proto.MarshalOptions{}.MarshalAppend(body, &servepb.BatchGetRequest{Keys: [][]byte{[]byte("k")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFrame(c, KindRequest, 1, body); err != nil {
		t.Fatal(err)
	}
	// Never read the answer.
	select {
	case <-released:
	case <-time.After(time.Minute): // a bound on a hang, not a timing assertion
		t.Fatal("the handler's parts are still held a minute after a stalled write without deadline")
	}
}

// Send's call is not ended by its context (only its deadline travels), and
// Call.Cancel ends it: the node's handler sees its context cancelled, done
// is never called, and the connection goes on serving. A call that was
// answered cannot be cancelled.
func TestSendCancel(t *testing.T) {
	started, seen := make(chan struct{}), make(chan error, 1)
	deadline := make(chan bool, 1)
	_, addr := serve(t, func(ctx context.Context, req *servepb.BatchGetRequest) ([][]byte, func(), error) {
		_, ok := ctx.Deadline()
		deadline <- ok
		if string(req.Keys[0]) != "block" {
			return echo(ctx, req)
		}
		close(started)
		<-ctx.Done()
		seen <- ctx.Err()
		return nil, func() {}, nil
	})
	c := NewClient(addr, ClientOptions{Conns: 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	called := make(chan error, 1)
	call := c.Send(ctx, &servepb.BatchGetRequest{Keys: [][]byte{[]byte("block")}}, func(_ *servepb.BatchGetResponse, err error) { called <- err })
	if call == nil {
		t.Fatal("Send returned no call")
	}
	<-started
	if !<-deadline {
		t.Error("the request's deadline did not travel")
	}
	cancel() // Send's context ending does not end the call
	select {
	case err := <-called:
		t.Fatalf("done called (%v) when Send's context ended: only Cancel ends a call", err)
	case <-time.After(50 * time.Millisecond):
	}
	if !call.Cancel() {
		t.Fatal("Cancel of a waiting call: reported not cancelled")
	}
	if call.Cancel() {
		t.Error("Cancel twice: reported cancelled again")
	}
	if err := <-seen; !errors.Is(err, context.Canceled) {
		t.Fatalf("handler saw %v, want its context cancelled", err)
	}
	select {
	case err := <-called:
		t.Fatalf("done called (%v) after Cancel", err)
	case <-time.After(50 * time.Millisecond):
	}
	got := make(chan *servepb.BatchGetResponse, 1)
	call = c.Send(context.Background(), &servepb.BatchGetRequest{Keys: [][]byte{[]byte("k")}}, func(resp *servepb.BatchGetResponse, err error) {
		if err != nil {
			t.Error(err)
		}
		got <- resp
	})
	<-deadline
	if resp := <-got; resp == nil || len(resp.Results) != 1 {
		t.Fatalf("after a cancel: answer %v", resp)
	}
	if call.Cancel() {
		t.Error("Cancel of an answered call: reported cancelled")
	}
}
