package wire

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/pillarkit/pillar/cobbled/servepb"
)

// ClientOptions configure a Client. The zero value of every field means its
// default.
type ClientOptions struct {
	// Conns is the number of connections to the node; requests are
	// pipelined on each and spread over them. The default value is 2.
	Conns int
	// MaxFrame bounds a response frame. The default value is
	// DefaultMaxFrame.
	MaxFrame int
	// DialTimeout bounds connecting (and the request's context bounds it
	// further). The default value is 5s.
	DialTimeout time.Duration
	// IdleTimeout retires a connection that has had no request in flight
	// for this long: the next request dials a new one. Shorter than the
	// server's ServerOptions.IdleTimeout, so the client closes an idle
	// connection before the server does and no request is sent into a
	// connection the server is closing. The default value is
	// DefaultClientIdleTimeout (1m).
	IdleTimeout time.Duration
	// TLS, when set, runs every connection inside TLS with this
	// configuration (a node serving on a TLS listener). Its ServerName is
	// filled from the address when empty. The default value nil dials
	// plaintext.
	TLS *tls.Config
}

// DefaultClientIdleTimeout is ClientOptions.IdleTimeout's default: well
// under DefaultIdleTimeout, the server's.
const DefaultClientIdleTimeout = time.Minute

// Client sends BatchGets to one node over a pool of pipelined
// connections. It is safe for concurrent use; connections are dialled on
// first use and again after they break.
type Client struct {
	addr  string
	opts  ClientOptions
	next  atomic.Uint64
	slots []slot

	closed atomic.Bool
}

type slot struct {
	mu sync.Mutex
	c  *cconn
}

// NewClient returns a client of the node at addr; it dials nothing yet.
func NewClient(addr string, opts ClientOptions) *Client {
	if opts.Conns <= 0 {
		opts.Conns = 2
	}
	if opts.MaxFrame == 0 {
		opts.MaxFrame = DefaultMaxFrame
	}
	if opts.DialTimeout == 0 {
		opts.DialTimeout = 5 * time.Second
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultClientIdleTimeout
	}
	return &Client{addr: addr, opts: opts, slots: make([]slot, opts.Conns)}
}

// Addr is the node's address.
func (c *Client) Addr() string { return c.addr }

// Close closes every connection; requests in flight fail with
// codes.Unavailable.
func (c *Client) Close() error {
	c.closed.Store(true)
	for i := range c.slots {
		s := &c.slots[i]
		s.mu.Lock()
		if s.c != nil {
			s.c.fail(status.Errorf(codes.Unavailable, "wire: node %s: client closed", c.addr))
		}
		s.mu.Unlock()
	}
	return nil
}

// BatchGet sends req and waits for the answer or ctx. The response's values
// alias one buffer read off the connection, taken from servepb's pool:
// servepb.Release(resp) gives it back once no value is used any more (a
// response never released is left to the garbage collector). Errors are gRPC status errors:
// the node's own (same codes and messages as over gRPC), codes.Unavailable
// for a connection that fails or a peer that breaks the protocol (naming
// the node's address), and the context's.
func (c *Client) BatchGet(ctx context.Context, req *servepb.BatchGetRequest) (*servepb.BatchGetResponse, error) {
	ch := chanPool.Get().(chan result)
	c.Go(ctx, req, func(resp *servepb.BatchGetResponse, err error) { ch <- result{resp, err} })
	r := <-ch
	chanPool.Put(ch)
	return r.resp, r.err
}

// Go is BatchGet without waiting: it sends req and calls done exactly once
// with the answer, the connection's failure or ctx's error (when ctx ends
// first, the node is told to cancel). done runs on the connection's reader
// (or the context's, or the caller's) goroutine and must not block: a
// router posts it to its event loop, so a sub-request costs no goroutine
// of its own.
func (c *Client) Go(ctx context.Context, req *servepb.BatchGetRequest, done func(*servepb.BatchGetResponse, error)) {
	c.send(ctx, req, done, true)
}

// Send is Go for a caller that ends the request itself: ctx gives only its
// deadline (carried to the node, and bounding the write); ctx ending does
// not end the call. Call.Cancel does: a caller that no longer wants the
// answer (a hedge's loser, a request that ended) must cancel it, or it
// waits for the node's answer or the connection's failure. Without ctx's
// AfterFunc a call costs no context registration (an allocation and a
// lock on ctx per call); the router cancels every sub-request its request
// leaves behind. The returned Call is nil when done was already called
// (the client closed, dialling failed, the deadline passed).
func (c *Client) Send(ctx context.Context, req *servepb.BatchGetRequest, done func(*servepb.BatchGetResponse, error)) *Call {
	return c.send(ctx, req, done, false)
}

func (c *Client) send(ctx context.Context, req *servepb.BatchGetRequest, done func(*servepb.BatchGetResponse, error), watch bool) *Call {
	if c.closed.Load() {
		done(nil, status.Errorf(codes.Unavailable, "wire: node %s: client closed", c.addr))
		return nil
	}
	for {
		cc, err := c.conn(ctx)
		if err != nil {
			done(nil, err)
			return nil
		}
		if call, retired := cc.start(ctx, req, done, watch); !retired {
			return call
		}
		// Retired as idle between conn and start: the slot dials again.
	}
}

// Call is one request sent with Send.
type Call struct {
	cc *cconn
	id uint64
}

// Cancel ends the call if it is still waiting: the node is told to stop
// and done is never called. It reports whether it ended it; false means
// done has been called or is being called (the answer or the connection's
// failure came first). Safe to call more than once.
func (x *Call) Cancel() bool {
	if x == nil {
		return false
	}
	if cl := x.cc.take(x.id); cl != nil {
		cl.stop()
		x.cc.cancel(x.id)
		return true
	}
	return false
}

// Ready reports whether a Send now would find a live connection in every
// slot instead of dialling one (none is being dialled either). A caller
// that must not block, such as the router's request loop, sends from a
// goroutine of its own when it is false: a dial to a node that went silent
// waits for DialTimeout or the request's deadline, whichever is first.
func (c *Client) Ready() bool {
	for i := range c.slots {
		s := &c.slots[i]
		if !s.mu.TryLock() {
			return false // dialling
		}
		ok := s.c != nil && s.c.live(c.opts.IdleTimeout)
		s.mu.Unlock()
		if !ok {
			return false
		}
	}
	return true
}

// conn returns a live connection of the next slot, dialling it if needed.
func (c *Client) conn(ctx context.Context) (*cconn, error) {
	s := &c.slots[c.next.Add(1)%uint64(len(c.slots))]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != nil && s.c.usable(c.opts.IdleTimeout) {
		return s.c, nil
	}
	d := net.Dialer{Timeout: c.opts.DialTimeout}
	nc, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return nil, status.Errorf(codes.Unavailable, "wire: node %s: %v", c.addr, err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	if c.opts.TLS != nil {
		cfg := c.opts.TLS
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(c.addr)
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, status.Errorf(codes.Unavailable, "wire: node %s: tls: %v", c.addr, err)
		}
		nc = tc
	}
	if _, err := io.WriteString(nc, Magic); err != nil {
		nc.Close()
		return nil, status.Errorf(codes.Unavailable, "wire: node %s: handshake: %v", c.addr, err)
	}
	s.c = &cconn{cl: c, c: nc, peer: "node " + c.addr, pending: map[uint64]*call{}}
	s.c.last.Store(time.Now().UnixNano())
	go s.c.read()
	return s.c, nil
}

type result struct {
	resp *servepb.BatchGetResponse
	err  error
}

var chanPool = sync.Pool{New: func() any { return make(chan result, 1) }}

// call is one request in flight: whoever removes it from pending (the
// reader with the answer, fail, or the context's AfterFunc) calls done;
// Call.Cancel removes it without.
type call struct {
	done func(*servepb.BatchGetResponse, error)
	stop func() bool // stops the context's AfterFunc (noStop without one)
}

func noStop() bool { return false }

// cconn is one pipelined connection.
type cconn struct {
	cl   *Client
	c    net.Conn
	peer string // "node <addr>", for errors
	wmu  sync.Mutex

	mu      sync.Mutex
	pending map[uint64]*call
	nextID  uint64
	err     error // set once broken
	retired bool  // broken by usable: idle, nothing was in flight

	last atomic.Int64 // unix nanoseconds of the last request sent or frame read
}

// usable reports whether the connection can carry a request: it is not
// broken, and not idle past idle. An idle one is retired (closed) here,
// before the server's own idle timeout closes it under a request.
// live is usable without its side effect: it retires nothing.
func (cc *cconn) live(idle time.Duration) bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.err == nil && (len(cc.pending) > 0 || time.Since(time.Unix(0, cc.last.Load())) < idle)
}

func (cc *cconn) usable(idle time.Duration) bool {
	cc.mu.Lock()
	if cc.err != nil {
		cc.mu.Unlock()
		return false
	}
	if len(cc.pending) > 0 || time.Since(time.Unix(0, cc.last.Load())) < idle {
		cc.mu.Unlock()
		return true
	}
	cc.err = status.Errorf(codes.Unavailable, "wire: node %s: idle connection retired", cc.cl.addr)
	cc.retired = true
	cc.pending = nil
	cc.mu.Unlock()
	cc.c.Close()
	return false
}

// fail breaks the connection: every pending request gets err.
func (cc *cconn) fail(err error) {
	cc.mu.Lock()
	if cc.err != nil {
		cc.mu.Unlock()
		return
	}
	cc.err = err
	p := cc.pending
	cc.pending = nil
	cc.mu.Unlock()
	cc.c.Close()
	for _, cl := range p {
		cl.stop()
		cl.done(nil, err)
	}
}

// take removes request id from pending; it reports whether it was there.
func (cc *cconn) take(id uint64) *call {
	cc.mu.Lock()
	cl := cc.pending[id]
	delete(cc.pending, id)
	cc.mu.Unlock()
	return cl
}

// start sends req on the connection. retired reports that it was not
// sent (done not called) because the connection was retired as idle: the
// caller takes another.
func (cc *cconn) start(ctx context.Context, req *servepb.BatchGetRequest, done func(*servepb.BatchGetResponse, error), watch bool) (_ *Call, retired bool) {
	var timeout uint64
	dl, hasDL := ctx.Deadline()
	if hasDL {
		t := time.Until(dl)
		if t <= 0 {
			done(nil, status.FromContextError(context.DeadlineExceeded).Err())
			return nil, false
		}
		timeout = uint64(t)
	}
	if err := ctx.Err(); err != nil {
		done(nil, status.FromContextError(err).Err())
		return nil, false
	}
	// The whole frame in one pooled buffer: header, timeout, request.
	bp := framePool.Get().(*[]byte)
	frame := append((*bp)[:0], make([]byte, headerLen+8)...)
	binary.BigEndian.PutUint64(frame[headerLen:], timeout)
	frame, err := proto.MarshalOptions{}.MarshalAppend(frame, req)
	if err != nil {
		putFrame(bp, frame)
		done(nil, status.Errorf(codes.Internal, "wire: node %s: encode request: %v", cc.cl.addr, err))
		return nil, false
	}
	cl := &call{done: done, stop: noStop}
	cc.mu.Lock()
	if cc.err != nil {
		err, retired := cc.err, cc.retired
		cc.mu.Unlock()
		putFrame(bp, frame)
		if retired {
			return nil, true
		}
		done(nil, err)
		return nil, false
	}
	cc.last.Store(time.Now().UnixNano())
	cc.nextID++
	id := cc.nextID
	cc.pending[id] = cl
	if watch {
		// Registered before the AfterFunc can run: it finds the call or an
		// answer already took it.
		cl.stop = context.AfterFunc(ctx, func() {
			if cl := cc.take(id); cl != nil {
				cc.cancel(id)
				cl.done(nil, status.FromContextError(ctx.Err()).Err())
			}
		})
	}
	cc.mu.Unlock()
	putHeader((*[headerLen]byte)(frame), KindRequest, id, len(frame)-headerLen)

	cc.wmu.Lock()
	if watch && ctx.Err() != nil { // the AfterFunc answers it; do not make the node read for nobody
		cc.wmu.Unlock()
		putFrame(bp, frame)
		return nil, false
	}
	if hasDL {
		cc.c.SetWriteDeadline(dl)
	} else {
		cc.c.SetWriteDeadline(time.Time{})
	}
	_, err = cc.c.Write(frame)
	cc.wmu.Unlock()
	putFrame(bp, frame)
	if err != nil {
		// A partial frame leaves the stream unusable.
		cc.fail(status.Errorf(codes.Unavailable, "wire: node %s: send: %v", cc.cl.addr, err))
	}
	return &Call{cc: cc, id: id}, false
}

// framePool holds request frame buffers (a 12-key request is ~300 bytes).
var framePool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// putFrame returns a request frame's buffer, unless a huge request grew it.
func putFrame(bp *[]byte, frame []byte) {
	if cap(frame) > 64<<10 {
		return
	}
	*bp = frame[:0]
	framePool.Put(bp)
}

// cancel tells the node to stop working on id (best effort).
func (cc *cconn) cancel(id uint64) {
	cc.wmu.Lock()
	defer cc.wmu.Unlock()
	cc.c.SetWriteDeadline(time.Now().Add(time.Second))
	if err := writeFrame(cc.c, KindCancel, id); err != nil {
		cc.fail(status.Errorf(codes.Unavailable, "wire: node %s: send cancel: %v", cc.cl.addr, err))
	}
}

// read delivers answers until the connection breaks or the node breaks
// the protocol.
func (cc *cconn) read() {
	addr := cc.cl.addr
	r := bufio.NewReaderSize(cc.c, 64<<10)
	for {
		f, err := readHeader(r, cc.peer, cc.cl.opts.MaxFrame)
		if err == nil && f.kind != KindResponse && f.kind != KindError {
			err = fmt.Errorf("wire: peer node %s: a node does not send frames of kind %d (request id %d)", addr, f.kind, f.id)
		}
		var buf []byte
		var bufp *[]byte
		if err == nil {
			// One read into the buffer the values will alias: bufio hands
			// large reads straight to the socket once its buffer is empty.
			// A response's buffer comes from servepb's pool (not zeroed,
			// no fresh pages per response): the caller may give it back
			// with servepb.Release.
			if f.kind == KindResponse {
				bufp = servepb.PooledBuffer(f.n)
				buf = *bufp
			} else {
				buf = make([]byte, f.n)
			}
			_, err = io.ReadFull(r, buf)
			if err != nil && bufp != nil {
				servepb.PutBuffer(bufp)
			}
		}
		if err != nil {
			switch {
			case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
				err = fmt.Errorf("wire: node %s closed the connection", addr)
			case errors.Is(err, net.ErrClosed):
				err = fmt.Errorf("wire: node %s: connection closed", addr)
			}
			cc.fail(status.Error(codes.Unavailable, err.Error()))
			return
		}
		cc.last.Store(time.Now().UnixNano())
		var res result
		if f.kind == KindError {
			if len(buf) < 4 {
				cc.fail(status.Errorf(codes.Unavailable, "wire: peer node %s: error frame of %d bytes, shorter than its code (request id %d)", addr, len(buf), f.id))
				return
			}
			code := codes.Code(binary.BigEndian.Uint32(buf))
			if f.id == 0 { // the node refuses the connection (at its cap) and closes it
				cc.fail(status.Errorf(code, "wire: node %s: %s", addr, buf[4:]))
				return
			}
			res.err = status.Error(code, string(buf[4:]))
		} else {
			resp := new(servepb.BatchGetResponse)
			if err := servepb.DecodePooled(bufp, resp); err != nil {
				cc.fail(status.Errorf(codes.Unavailable, "wire: peer node %s: malformed BatchGetResponse (request id %d): %v", addr, f.id, err))
				return
			}
			res.resp = resp
		}
		if cl := cc.take(f.id); cl != nil {
			cl.stop()
			cl.done(res.resp, res.err)
		} else if res.resp != nil { // cancelled by its caller: nobody sees the answer
			servepb.Release(res.resp)
		}
	}
}
