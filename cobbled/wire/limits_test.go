package wire

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/pillarkit/pillar/cobbled/servepb"
)

func serveWith(t *testing.T, h Handler, opts ServerOptions) (*Server, string) {
	t.Helper()
	lis := listen(t)
	s := NewServer(h, opts)
	go s.Serve(lis)
	t.Cleanup(s.Close)
	return s, lis.Addr().String()
}

// dialRaw opens a connection and sends Magic.
func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	if _, err := io.WriteString(nc, Magic); err != nil {
		t.Fatal(err)
	}
	return nc
}

// requestFrame encodes req as a request frame without a deadline.
func requestFrame(t *testing.T, id uint64, req *servepb.BatchGetRequest) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{}.MarshalAppend(make([]byte, headerLen+8), req)
	if err != nil {
		t.Fatal(err)
	}
	putHeader((*[headerLen]byte)(b), KindRequest, id, len(b)-headerLen)
	return b
}

// readAnswer reads one frame from the server.
func readAnswer(r *bufio.Reader) (frame, []byte, error) {
	f, err := readHeader(r, "node", 1<<20)
	if err != nil {
		return f, nil, err
	}
	b := make([]byte, f.n)
	_, err = io.ReadFull(r, b)
	return f, b, err
}

// wantError reads an error frame for id with code.
func wantError(t *testing.T, r *bufio.Reader, id uint64, code codes.Code) string {
	t.Helper()
	f, b, err := readAnswer(r)
	if err != nil {
		t.Fatalf("waiting for the %v answer to request %d: %v", code, id, err)
	}
	if f.kind != KindError || f.id != id || len(b) < 4 || codes.Code(binary.BigEndian.Uint32(b)) != code {
		t.Fatalf("answer kind %d id %d payload %q, want a %v error for request %d", f.kind, f.id, b, code, id)
	}
	return string(b[4:])
}

// wantClosed waits (at most within) for the server to close nc.
func wantClosed(t *testing.T, nc net.Conn, within time.Duration) {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(within))
	_, err := io.Copy(io.Discard, nc)
	if isTimeout(err) {
		t.Fatalf("connection still open %v on", within)
	}
}

func heapInuse() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func idleHeap() uint64 {
	runtime.GC()
	runtime.GC()
	return heapInuse()
}

// heapPeak samples the heap every few milliseconds until stop; the
// returned function stops it and gives the highest sample.
func heapPeak() (stop func() uint64) {
	var peak atomic.Uint64
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			if h := heapInuse(); h > peak.Load() {
				peak.Store(h)
			}
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return func() uint64 { close(done); <-finished; return peak.Load() }
}

const mib = 1 << 20

// Eight connections each send a request frame whose header claims the
// largest frame the server takes (16 MiB) and stream its payload: empty
// keys past MaxKeys, one key of almost 16 MiB, or a 16 MiB field of an
// unknown number. Each is refused (InvalidArgument, its bytes read past,
// never kept) as soon as its bytes cross a limit, the server's heap stays
// under idle + 64 MiB (a buffer sized by the header would be 8 × 16 MiB),
// and a good client's requests keep succeeding all along.
func TestAmplificationBounded(t *testing.T) {
	_, addr := serveWith(t, echo, ServerOptions{})
	idle := idleHeap()
	stop := heapPeak()

	const claim = DefaultServerMaxFrame - (headerLen - 4) // payload of the longest frame
	payloads := map[string]func(w io.Writer){
		"empty keys": func(w io.Writer) {
			chunk := bytes.Repeat([]byte{0x0a, 0x00}, 32<<10)
			for sent := 0; sent < claim-8; sent += len(chunk) {
				if _, err := w.Write(chunk[:min(len(chunk), claim-8-sent)]); err != nil {
					return
				}
			}
		},
		"one huge key": func(w io.Writer) {
			var p []byte
			p = protowire.AppendTag(p, 1, protowire.BytesType)
			p = protowire.AppendVarint(p, uint64(claim-8-len(p)-4))
			w.Write(p)
			chunk := bytes.Repeat([]byte{'k'}, 64<<10)
			for sent := len(p); sent < claim-8; sent += len(chunk) {
				if _, err := w.Write(chunk[:min(len(chunk), claim-8-sent)]); err != nil {
					return
				}
			}
		},
		"huge unknown field": func(w io.Writer) {
			var p []byte
			p = protowire.AppendTag(p, 9, protowire.BytesType)
			p = protowire.AppendVarint(p, uint64(claim-8-len(p)-4))
			w.Write(p)
			chunk := make([]byte, 64<<10)
			for sent := len(p); sent < claim-8; sent += len(chunk) {
				if _, err := w.Write(chunk[:min(len(chunk), claim-8-sent)]); err != nil {
					return
				}
			}
		},
	}
	kinds := []string{"empty keys", "one huge key", "huge unknown field"}

	attackDone := make(chan struct{})
	var good, goodErrs atomic.Int64
	var goodWG sync.WaitGroup
	goodWG.Add(1)
	go func() {
		defer goodWG.Done()
		c := NewClient(addr, ClientOptions{Conns: 1})
		defer c.Close()
		for {
			select {
			case <-attackDone:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := c.BatchGet(ctx, &servepb.BatchGetRequest{Keys: [][]byte{[]byte("good")}})
			cancel()
			if err != nil || len(resp.Results) != 1 {
				goodErrs.Add(1)
				t.Errorf("good request during the attack: %v", err)
			}
			good.Add(1)
		}
	}()

	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kind := kinds[i%len(kinds)]
			for round := range 3 {
				nc, err := net.Dial("tcp", addr)
				if err != nil {
					t.Error(err)
					return
				}
				var h [headerLen]byte
				putHeader(&h, KindRequest, 1, claim)
				nc.Write(append([]byte(Magic), h[:]...))
				nc.Write(make([]byte, 8)) // no deadline
				payloads[kind](nc)
				nc.SetReadDeadline(time.Now().Add(30 * time.Second))
				f, b, err := readAnswer(bufio.NewReader(nc))
				nc.Close()
				if err != nil || f.kind != KindError || codes.Code(binary.BigEndian.Uint32(b)) != codes.InvalidArgument {
					t.Errorf("%s, round %d: answer kind %d %q (%v), want InvalidArgument", kind, round, f.kind, b, err)
				}
			}
		}()
	}
	wg.Wait()
	close(attackDone)
	goodWG.Wait()
	peak := stop()
	t.Logf("heap in use: idle %.1f MiB, peak during the attack %.1f MiB (+%.1f MiB); %d good requests during it, %d failed",
		float64(idle)/mib, float64(peak)/mib, (float64(peak)-float64(idle))/mib, good.Load(), goodErrs.Load())
	if peak > idle+64*mib {
		t.Fatalf("heap in use peaked at %.1f MiB, over idle (%.1f MiB) + 64 MiB", float64(peak)/mib, float64(idle)/mib)
	}
	if good.Load() == 0 {
		t.Fatal("no good request completed during the attack")
	}
}

// A thousand connections that stall, in four ways (nothing sent, Magic
// and nothing, half a frame header, a header claiming 16 MiB and part of
// its payload), are each closed once their deadline passes, and while
// they are open the server's heap stays bounded (a connection holds its
// read buffer and what arrived, not what a header claims).
func TestStalledConnectionsClosed(t *testing.T) {
	const n = 1000 // two descriptors each in this process: check ulimit -n
	const deadline = time.Second
	s, addr := serveWith(t, echo, ServerOptions{HandshakeTimeout: deadline, IdleTimeout: deadline, FrameTimeout: deadline, MaxConns: 2 * n})
	idle := idleHeap()

	var big [headerLen]byte
	putHeader(&big, KindRequest, 7, DefaultServerMaxFrame-(headerLen-4))
	sends := [][]byte{
		nil,
		[]byte(Magic),
		append([]byte(Magic), big[:6]...),
		append(append(append([]byte(Magic), big[:]...), make([]byte, 8)...), bytes.Repeat([]byte{0x0a, 0}, 500)...), // 500 empty keys so far
	}
	conns := make([]net.Conn, n)
	sent := make([]time.Time, n)
	for i := range conns {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v (ulimit -n too low?)", i, err)
		}
		t.Cleanup(func() { nc.Close() })
		if b := sends[i%len(sends)]; b != nil {
			nc.Write(b)
		}
		conns[i], sent[i] = nc, time.Now()
	}
	tracked := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.conns)
	}
	for wait := time.Now(); tracked() < n && time.Since(wait) < deadline/2; {
		time.Sleep(5 * time.Millisecond) // every connection accepted
	}
	time.Sleep(50 * time.Millisecond) // and its bytes read
	held := heapInuse()
	open := tracked()
	t.Logf("%d stalled connections open on the server; heap in use: idle %.1f MiB, with them %.1f MiB (+%.1f MiB)",
		open, float64(idle)/mib, float64(held)/mib, (float64(held)-float64(idle))/mib)
	if open != n {
		t.Errorf("%d connections open on the server, want %d: some were closed before their deadline", open, n)
	}
	if held > idle+64*mib {
		t.Errorf("heap in use %.1f MiB with %d stalled connections, over idle (%.1f MiB) + 64 MiB", float64(held)/mib, n, float64(idle)/mib)
	}

	const slack = 2 * time.Second // scheduling on a loaded machine; far under a cleared deadline's forever
	var wg sync.WaitGroup
	var late atomic.Int64
	for i, nc := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc.SetReadDeadline(sent[i].Add(deadline + slack))
			if _, err := io.Copy(io.Discard, nc); isTimeout(err) {
				if late.Add(1) == 1 {
					t.Errorf("connection %d (stalled as %q) still open %v after its last byte", i, sends[i%len(sends)], deadline+slack)
				}
			}
		}()
	}
	wg.Wait()
	if l := late.Load(); l > 0 {
		t.Fatalf("%d of %d stalled connections not closed within %v", l, n, deadline+slack)
	}
	for wait := time.Now(); tracked() > 0 && time.Since(wait) < time.Second; {
		time.Sleep(5 * time.Millisecond) // a closed connection is untracked just after its close
	}
	if open := tracked(); open != 0 {
		t.Fatalf("%d connections still tracked by the server", open)
	}
}

// A connection over MaxConns is answered a KindError frame of id 0 with
// codes.ResourceExhausted and closed; connections within the cap go on
// serving, and a slot freed by a closed connection is taken again.
func TestConnectionCap(t *testing.T) {
	_, addr := serveWith(t, echo, ServerOptions{MaxConns: 2})
	a := NewClient(addr, ClientOptions{Conns: 1})
	defer a.Close()
	get := func(c *Client) error {
		_, err := c.BatchGet(context.Background(), &servepb.BatchGetRequest{Keys: [][]byte{[]byte("k")}})
		return err
	}
	if err := get(a); err != nil {
		t.Fatal(err)
	}
	b := dialRaw(t, addr)
	b.Write(requestFrame(t, 1, &servepb.BatchGetRequest{Keys: [][]byte{[]byte("k")}}))
	br := bufio.NewReader(b)
	if f, _, err := readAnswer(br); err != nil || f.kind != KindResponse {
		t.Fatalf("second connection: answer kind %d, %v", f.kind, err)
	}

	// The third: raw, then through Client.
	over := dialRaw(t, addr)
	over.Write(requestFrame(t, 1, &servepb.BatchGetRequest{Keys: [][]byte{[]byte("k")}}))
	over.SetReadDeadline(time.Now().Add(10 * time.Second))
	msg := wantError(t, bufio.NewReader(over), 0, codes.ResourceExhausted)
	if !strings.Contains(msg, "2 connections") {
		t.Errorf("refusal %q does not name the cap", msg)
	}
	wantClosed(t, over, 10*time.Second)
	c := NewClient(addr, ClientOptions{Conns: 1})
	defer c.Close()
	if err := get(c); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), addr) {
		t.Fatalf("a client over the cap: %v, want ResourceExhausted naming %s", err, addr)
	}

	if err := get(a); err != nil {
		t.Fatalf("a connection within the cap after the refusals: %v", err)
	}
	b.Close()
	deadline := time.Now().Add(10 * time.Second)
	for { // the server notices b's close and frees its slot
		err := get(c)
		if err == nil {
			break
		}
		if status.Code(err) != codes.ResourceExhausted || time.Now().After(deadline) {
			t.Fatalf("after a connection closed: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// blocker answers "block" keys once release is closed, others at once;
// entered counts the blocked requests.
func blocker() (h Handler, entered chan struct{}, release chan struct{}) {
	entered, release = make(chan struct{}, 100), make(chan struct{})
	h = func(ctx context.Context, req *servepb.BatchGetRequest) ([][]byte, func(), error) {
		if len(req.Keys) > 0 && string(req.Keys[0]) == "block" {
			entered <- struct{}{}
			<-release
		}
		return echo(ctx, req)
	}
	return h, entered, release
}

// Requests past MaxInFlight on a connection, or past MaxServerInFlight on
// the server, are answered codes.ResourceExhausted without reaching the
// handler; the connection stays, and once answers go out it takes
// requests again.
func TestInFlightCaps(t *testing.T) {
	h, entered, release := blocker()
	_, addr := serveWith(t, h, ServerOptions{MaxInFlight: 2, MaxServerInFlight: 3})
	block := &servepb.BatchGetRequest{Keys: [][]byte{[]byte("block")}}
	a, b := dialRaw(t, addr), dialRaw(t, addr)
	ar, br := bufio.NewReader(a), bufio.NewReader(b)
	a.SetReadDeadline(time.Now().Add(20 * time.Second))
	b.SetReadDeadline(time.Now().Add(20 * time.Second))

	a.Write(append(requestFrame(t, 1, block), requestFrame(t, 2, block)...))
	<-entered
	<-entered
	a.Write(requestFrame(t, 3, block)) // third on a: over MaxInFlight
	if msg := wantError(t, ar, 3, codes.ResourceExhausted); !strings.Contains(msg, "in flight") {
		t.Errorf("refusal %q", msg)
	}
	b.Write(requestFrame(t, 1, block))
	<-entered
	b.Write(requestFrame(t, 2, block)) // fourth on the server: over MaxServerInFlight
	wantError(t, br, 2, codes.ResourceExhausted)

	close(release)
	got := map[uint64]bool{}
	for range 2 {
		f, _, err := readAnswer(ar)
		if err != nil || f.kind != KindResponse {
			t.Fatalf("answer on a: kind %d, %v", f.kind, err)
		}
		got[f.id] = true
	}
	if !got[1] || !got[2] {
		t.Fatalf("answers on a for %v, want 1 and 2", got)
	}
	if f, _, err := readAnswer(br); err != nil || f.kind != KindResponse || f.id != 1 {
		t.Fatalf("answer on b: kind %d id %d, %v", f.kind, f.id, err)
	}
	for id := uint64(10); id < 13; id++ { // the counts went back down
		a.Write(requestFrame(t, id, &servepb.BatchGetRequest{Keys: [][]byte{[]byte("k")}}))
		if f, _, err := readAnswer(ar); err != nil || f.kind != KindResponse || f.id != id {
			t.Fatalf("after the answers, request %d: kind %d id %d, %v", id, f.kind, f.id, err)
		}
	}
}

// A request that would take the server past MaxBufferedBytes is answered
// codes.ResourceExhausted; smaller requests pass.
func TestBufferedBytesCap(t *testing.T) {
	_, addr := serveWith(t, echo, ServerOptions{MaxBufferedBytes: 64 << 10})
	c := NewClient(addr, ClientOptions{Conns: 1})
	defer c.Close()
	keys := make([][]byte, 1000)
	for i := range keys {
		keys[i] = bytes.Repeat([]byte{byte(i)}, 100)
	}
	_, err := c.BatchGet(context.Background(), &servepb.BatchGetRequest{Keys: keys})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a 100 KB request with 64 KiB buffered at most: %v, want ResourceExhausted", err)
	}
	if _, err := c.BatchGet(context.Background(), &servepb.BatchGetRequest{Keys: keys[:100]}); err != nil {
		t.Fatalf("a 10 KB request on the same connection: %v", err)
	}
}

// More than MaxKeys keys is InvalidArgument before the handler sees the
// request, and the connection stays usable.
func TestMaxKeys(t *testing.T) {
	var calls atomic.Int64
	_, addr := serveWith(t, func(ctx context.Context, req *servepb.BatchGetRequest) ([][]byte, func(), error) {
		calls.Add(1)
		return echo(ctx, req)
	}, ServerOptions{MaxKeys: 15})
	c := NewClient(addr, ClientOptions{Conns: 1})
	defer c.Close()
	keys := make([][]byte, 16)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("key-%02d", i))
	}
	_, err := c.BatchGet(context.Background(), &servepb.BatchGetRequest{Keys: keys})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "limit of 15") {
		t.Fatalf("16 keys, limit 15: %v, want InvalidArgument naming the limit", err)
	}
	if calls.Load() != 0 {
		t.Fatal("the handler saw a request over MaxKeys")
	}
	if resp, err := c.BatchGet(context.Background(), &servepb.BatchGetRequest{Keys: keys[:15]}); err != nil || len(resp.Results) != 15 {
		t.Fatalf("15 keys after the refusal: %v", err)
	}
}

// recorder is a slog.Handler that keeps the records.
type recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.recs = append(r.recs, rec.Clone())
	r.mu.Unlock()
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func (r *recorder) records() []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]slog.Record(nil), r.recs...)
}

func attr(rec slog.Record, key string) slog.Value {
	var v slog.Value
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value
			return false
		}
		return true
	})
	return v
}

// A thousand bad frames write a handful of log lines, not a thousand: one
// per reason per LogInterval, each counting the lines suppressed before
// it, so that every bad frame is either logged or counted.
func TestBadFrameLogRateLimited(t *testing.T) {
	rec := &recorder{}
	const interval = 500 * time.Millisecond
	_, addr := serveWith(t, echo, ServerOptions{Logger: slog.New(rec), LogInterval: interval})
	var bad [headerLen]byte
	putHeader(&bad, 9, 1, 0) // unknown kind
	send := func(n int) {
		var wg sync.WaitGroup
		work := make(chan struct{}, n)
		for range n {
			work <- struct{}{}
		}
		close(work)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range work {
					nc, err := net.Dial("tcp", addr)
					if err != nil {
						t.Error(err)
						return
					}
					nc.Write(append([]byte(Magic), bad[:]...))
					io.Copy(io.Discard, nc) // closed by the server, after it logged
					nc.Close()
				}
			}()
		}
		wg.Wait()
	}
	start := time.Now()
	send(1000)
	elapsed := time.Since(start)
	lines := len(rec.records())
	allowed := 1 + int(elapsed/interval)
	t.Logf("1000 bad frames in %v: %d log lines (at most %d allowed)", elapsed.Round(time.Millisecond), lines, allowed)
	if lines > allowed {
		t.Fatalf("1000 bad frames in %v wrote %d log lines, want at most %d (one per %v)", elapsed, lines, allowed, interval)
	}
	time.Sleep(interval)
	send(1)
	recs := rec.records()
	total := 0
	for _, r := range recs {
		if got := attr(r, "reason").String(); got != reasonBadFrame {
			t.Errorf("line %q: reason %q, want %q", r.Message, got, reasonBadFrame)
		}
		total += 1 + int(attr(r, "suppressed").Int64())
	}
	if total != 1001 {
		t.Fatalf("%d lines, logged or counted as suppressed, for 1001 bad frames", total)
	}
}

// A key longer than MaxKeyBytes is refused when its length prefix and
// first bytes arrive; the error quotes its first 32 bytes and its length,
// not the key, and the connection stays usable.
func TestLongKeyQuotedShort(t *testing.T) {
	_, addr := serveWith(t, echo, ServerOptions{})
	c := NewClient(addr, ClientOptions{Conns: 1})
	defer c.Close()
	key := bytes.Repeat([]byte{0xab}, 8<<20)
	_, err := c.BatchGet(context.Background(), &servepb.BatchGetRequest{Keys: [][]byte{[]byte("k"), key}})
	want := fmt.Sprintf("key 1 (%s…, %d bytes)", strings.Repeat("ab", 32), len(key))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), want) {
		t.Fatalf("an 8 MiB key: %.300v, want InvalidArgument quoting %q", err, want)
	}
	if l := len(err.Error()); l > 300 {
		t.Fatalf("error of %d bytes for an 8 MiB key: %.300s…", l, err)
	}
	if _, err := c.BatchGet(context.Background(), &servepb.BatchGetRequest{Keys: [][]byte{[]byte("k")}}); err != nil {
		t.Fatalf("the same connection after the refusal: %v", err)
	}
	if got := shortKey([]byte("short"), 5); got != "73686f7274, 5 bytes" {
		t.Errorf("shortKey of a short key: %q", got)
	}
}

// A connection idle past IdleTimeout is closed by the server, but not one
// waiting for an answer; Client retires its idle connections first, so a
// request after a pause does not meet a closing connection.
func TestIdleTimeout(t *testing.T) {
	h, entered, release := blocker()
	_, addr := serveWith(t, h, ServerOptions{IdleTimeout: 200 * time.Millisecond})
	idle := dialRaw(t, addr)
	wantClosed(t, idle, 10*time.Second)

	c := NewClient(addr, ClientOptions{Conns: 1, IdleTimeout: 50 * time.Millisecond})
	defer c.Close()
	done := make(chan error, 1)
	go func() {
		_, err := c.BatchGet(context.Background(), &servepb.BatchGetRequest{Keys: [][]byte{[]byte("block")}})
		done <- err
	}()
	<-entered
	time.Sleep(500 * time.Millisecond) // past the server's IdleTimeout, a request in flight
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("a request answered after the idle timeout: %v", err)
	}
	for range 3 {
		time.Sleep(100 * time.Millisecond) // past the client's IdleTimeout
		if _, err := c.BatchGet(context.Background(), &servepb.BatchGetRequest{Keys: [][]byte{[]byte("k")}}); err != nil {
			t.Fatalf("a request after a pause: %v", err)
		}
	}
}
