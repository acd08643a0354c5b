package wire

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/pillarkit/pillar/cobbled/servepb"
)

// Handler answers one BatchGet: the encoded BatchGetResponse as parts
// written back to back with one writev (a node hands its framing and the
// values pinned in RocksDB's block cache, not a copy), and a function that
// releases them once written, or an error (a gRPC status error keeps its
// code; any other error is sent as codes.Unknown, as gRPC does).
type Handler func(ctx context.Context, req *servepb.BatchGetRequest) (resp [][]byte, release func(), err error)

// writeGrace is how long past a request's deadline its answer may take to
// write before the connection is given up (closed: its requests in flight
// fail over on the client): the handler's release, which may hold a
// node's partition read locks, waits for the write.
const writeGrace = time.Second

// Defaults of ServerOptions.
const (
	DefaultServerMaxFrame    = 16 << 20
	DefaultMaxKeys           = 1024
	DefaultMaxKeyBytes       = 1 << 10
	DefaultMaxConns          = 1024
	DefaultMaxInFlight       = 512
	DefaultMaxServerInFlight = 4096
	DefaultMaxBufferedBytes  = 64 << 20
	DefaultIdleTimeout       = 5 * time.Minute
	DefaultFrameTimeout      = 10 * time.Second
	DefaultLogInterval       = 10 * time.Second
)

// maxOtherBytes bounds the bytes of a request's fields other than its keys
// (version, caller id, fields of a newer client): a few hundred bytes in
// practice.
const maxOtherBytes = 64 << 10

// readBufSize is a connection's read buffer: room for dozens of pipelined
// requests (~300 bytes each) per read, small enough that a thousand idle
// connections hold 16 MiB.
const readBufSize = 16 << 10

// maxRefusing bounds the connections being refused at once (each gets its
// error frame and a moment to read it); past it a connection over the cap
// is closed without an answer.
const maxRefusing = 64

// ServerOptions configure a Server. The zero value (or a negative value) of
// every field means its default, a bound safe on an untrusted network.
type ServerOptions struct {
	// MaxFrame bounds a request frame's length field; a longer frame
	// closes the connection. The default value is
	// DefaultServerMaxFrame (16 MiB).
	MaxFrame int
	// MaxKeys bounds the keys of a request, counted as its bytes arrive: a
	// request with more is answered codes.InvalidArgument before its keys
	// are decoded (the rest of its frame is read past, not kept). Set it to
	// the node's own limit. The default value is DefaultMaxKeys (1024).
	MaxKeys int
	// MaxKeyBytes bounds one key of a request, checked as soon as its
	// length arrives: a longer key is answered codes.InvalidArgument
	// quoting its first bytes and its length. The default value is
	// DefaultMaxKeyBytes (1 KiB, far above a node's 16-byte keys).
	MaxKeyBytes int
	// MaxConns bounds the connections served at once on each listener
	// (each Serve or ServeConns call): one past it is sent a KindError
	// frame with id 0 and codes.ResourceExhausted and closed. The default
	// value is DefaultMaxConns (1024).
	MaxConns int
	// MaxInFlight bounds the requests of one connection being answered at
	// once; a request past it is answered codes.ResourceExhausted (the
	// connection stays). The default value is DefaultMaxInFlight (512).
	MaxInFlight int
	// MaxServerInFlight is MaxInFlight for the whole server, all
	// connections together. The default value is
	// DefaultMaxServerInFlight (4096).
	MaxServerInFlight int
	// MaxBufferedBytes bounds the request bytes the server holds at once,
	// all connections together: frames being received (a frame's buffer
	// grows with the bytes that arrive, never to the length its header
	// claims up front) and requests being answered. A request that would
	// pass it is answered codes.ResourceExhausted. The default value is
	// DefaultMaxBufferedBytes (64 MiB).
	MaxBufferedBytes int
	// HandshakeTimeout bounds the wait for Magic (Server.Serve). The
	// default value is 10s.
	HandshakeTimeout time.Duration
	// IdleTimeout closes a connection that has no request in flight and
	// sends no frame for this long. Client retires its idle connections
	// sooner (ClientOptions.IdleTimeout), so a request never races the
	// close. The default value is DefaultIdleTimeout (5m).
	IdleTimeout time.Duration
	// FrameTimeout bounds receiving one frame, from its first byte to its
	// last; a connection that stalls mid-frame is closed. The default value
	// is DefaultFrameTimeout (10s).
	FrameTimeout time.Duration
	// WriteTimeout bounds writing the answer to a request that carries no
	// deadline (one with a deadline gets its deadline + 1 s), and a
	// refusal: the handler's release, which may hold a node's partition
	// read locks, waits for the write, so a client that stops reading must
	// not hold them for as long as TCP takes to give up. Past it the
	// connection is closed. The default value is 10s.
	WriteTimeout time.Duration
	// LogInterval is the least time between two log lines of one reason
	// (bad frame, stalled frame, connection cap, ...): an unauthenticated
	// client cannot flood the log; a line counts the ones suppressed
	// before it. The default value is DefaultLogInterval (10s).
	LogInterval time.Duration
	// Logger receives connection errors (bad frames) and refusals. The
	// default value discards.
	Logger *slog.Logger
}

// Server serves the wire protocol with a Handler.
type Server struct {
	h    Handler
	opts ServerOptions
	log  logLimiter

	inflight atomic.Int64 // requests being answered, all connections
	buffered atomic.Int64 // request bytes held, all connections
	refusing atomic.Int64 // connections being refused

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	lis    []net.Listener
	closed bool
}

// NewServer returns a server answering with h.
func NewServer(h Handler, opts ServerOptions) *Server {
	defInt := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	defInt(&opts.MaxFrame, DefaultServerMaxFrame)
	defInt(&opts.MaxKeys, DefaultMaxKeys)
	defInt(&opts.MaxKeyBytes, DefaultMaxKeyBytes)
	defInt(&opts.MaxConns, DefaultMaxConns)
	defInt(&opts.MaxInFlight, DefaultMaxInFlight)
	defInt(&opts.MaxServerInFlight, DefaultMaxServerInFlight)
	defInt(&opts.MaxBufferedBytes, DefaultMaxBufferedBytes)
	defDur(&opts.HandshakeTimeout, 10*time.Second)
	defDur(&opts.IdleTimeout, DefaultIdleTimeout)
	defDur(&opts.FrameTimeout, DefaultFrameTimeout)
	defDur(&opts.WriteTimeout, 10*time.Second)
	defDur(&opts.LogInterval, DefaultLogInterval)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{h: h, opts: opts, conns: map[net.Conn]struct{}{}}
	s.log = logLimiter{l: opts.Logger, every: opts.LogInterval, last: map[string]*logState{}}
	return s
}

// ErrServerClosed is returned by Serve after Close.
var ErrServerClosed = errors.New("wire: server closed")

// Serve accepts connections on lis, reads Magic from each and serves it,
// until lis fails or Close. Connections from Split have had their Magic
// read already: use ServeConns for them.
func (s *Server) Serve(lis net.Listener) error {
	return s.serve(lis, true)
}

// ServeConns is Serve for a listener whose connections have sent Magic
// already (Split's wire listener).
func (s *Server) ServeConns(lis net.Listener) error {
	return s.serve(lis, false)
}

func (s *Server) serve(lis net.Listener, handshake bool) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		lis.Close()
		return ErrServerClosed
	}
	s.lis = append(s.lis, lis)
	s.mu.Unlock()
	var open atomic.Int64 // this listener's connections
	for {
		c, err := lis.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return ErrServerClosed
			}
			return err
		}
		if open.Add(1) > int64(s.opts.MaxConns) {
			open.Add(-1)
			go s.refuseConn(c)
			continue
		}
		go func() {
			defer open.Add(-1)
			s.serveConn(c, handshake)
		}()
	}
}

// refuseConn answers a connection over MaxConns with a KindError frame of
// id 0 (codes.ResourceExhausted) and closes it. It half-closes first and
// reads what the client already sent for a moment, so that closing with
// unread bytes does not reset the connection before the client reads the
// answer.
func (s *Server) refuseConn(c net.Conn) {
	defer c.Close()
	s.log.warn(reasonConnCap, "wire: refusing a connection over the cap", "peer", c.RemoteAddr().String(), "max_conns", s.opts.MaxConns)
	if s.refusing.Add(1) > maxRefusing {
		s.refusing.Add(-1)
		return
	}
	defer s.refusing.Add(-1)
	var code [4]byte
	binary.BigEndian.PutUint32(code[:], uint32(codes.ResourceExhausted))
	msg := fmt.Sprintf("wire: server at its limit of %d connections on this listener", s.opts.MaxConns)
	c.SetDeadline(time.Now().Add(time.Second))
	if err := writeFrame(c, KindError, 0, code[:], []byte(msg)); err != nil {
		return
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	io.CopyN(io.Discard, c, 64<<10)
}

// Close closes the listeners and every connection at once; requests in
// flight are not answered (clients fail them as Unavailable and fail over).
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	lis, conns := s.lis, s.conns
	s.lis, s.conns = nil, map[net.Conn]struct{}{}
	s.mu.Unlock()
	for _, l := range lis {
		l.Close()
	}
	for c := range conns {
		c.Close()
	}
}

// reserve takes n bytes of MaxBufferedBytes; it reports false (taking
// nothing) when they are not there.
func (s *Server) reserve(n int) bool {
	if s.buffered.Add(int64(n)) > int64(s.opts.MaxBufferedBytes) {
		s.buffered.Add(-int64(n))
		return false
	}
	return true
}

func (s *Server) unreserve(n int) { s.buffered.Add(-int64(n)) }

// Reasons group log lines (one line per reason per LogInterval).
const (
	reasonHandshake = "handshake"
	reasonBadFrame  = "bad frame"
	reasonStalled   = "stalled frame"
	reasonConnCap   = "connection cap"
	reasonRefused   = "refused request"
)

// connError is why the server ends a connection; reason groups its log
// lines. A connection that was only idle ends with errIdle (not logged).
type connError struct {
	reason string
	err    error
}

func (e *connError) Error() string { return e.err.Error() }
func (e *connError) Unwrap() error { return e.err }

func badFrame(format string, args ...any) error {
	return &connError{reasonBadFrame, fmt.Errorf(format, args...)}
}

var errIdle = errors.New("wire: idle connection closed")

func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// sconn is one client connection on the server.
type sconn struct {
	s    *Server
	c    net.Conn
	peer string
	wmu  sync.Mutex

	inflight atomic.Int64 // requests admitted and not yet answered

	mu      sync.Mutex
	cancels map[uint64]context.CancelFunc
}

func (s *Server) serveConn(c net.Conn, handshake bool) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	sc := &sconn{s: s, c: c, peer: c.RemoteAddr().String(), cancels: map[uint64]context.CancelFunc{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel() // every request of the connection
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	if handshake {
		// Straight off the socket: a connection that never sends Magic
		// costs no read buffer.
		c.SetReadDeadline(time.Now().Add(s.opts.HandshakeTimeout))
		var m [len(Magic)]byte
		if _, err := io.ReadFull(c, m[:]); err != nil || string(m[:]) != Magic {
			s.log.warn(reasonHandshake, "wire: connection without the wire handshake", "peer", sc.peer, "err", err)
			return
		}
	}
	err := sc.read(ctx, bufio.NewReaderSize(c, readBufSize))
	var ce *connError
	switch {
	case err == nil, errors.Is(err, errIdle), errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
	case errors.As(err, &ce):
		s.log.warn(ce.reason, "wire: closing connection", "peer", sc.peer, "err", err)
	default:
		s.log.warn(reasonBadFrame, "wire: closing connection", "peer", sc.peer, "err", err)
	}
}

// read handles frames until the connection fails, idles out or a frame is
// bad. Between frames the read deadline is IdleTimeout (extended while a
// request is in flight); from a frame's first byte it is FrameTimeout.
func (sc *sconn) read(ctx context.Context, r *bufio.Reader) error {
	o := &sc.s.opts
	for {
		if r.Buffered() == 0 {
			sc.c.SetReadDeadline(time.Now().Add(o.IdleTimeout))
			if _, err := r.Peek(1); err != nil {
				if isTimeout(err) {
					if sc.inflight.Load() > 0 {
						continue // waiting for answers is not idle
					}
					return errIdle
				}
				return err
			}
		}
		start := time.Now()
		sc.c.SetReadDeadline(start.Add(o.FrameTimeout))
		f, err := readHeader(r, sc.peer, o.MaxFrame)
		if err != nil {
			if isTimeout(err) {
				return &connError{reasonStalled, fmt.Errorf("wire: peer %s: frame header not received within %v", sc.peer, o.FrameTimeout)}
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
				return err
			}
			return &connError{reasonBadFrame, err}
		}
		switch f.kind {
		case KindCancel:
			if f.n != 0 {
				return badFrame("wire: peer %s: cancel frame with %d payload bytes (request id %d)", sc.peer, f.n, f.id)
			}
			sc.mu.Lock()
			cancel := sc.cancels[f.id]
			delete(sc.cancels, f.id)
			sc.mu.Unlock()
			if cancel != nil {
				cancel()
			}
		case KindRequest:
			if f.n < 8 {
				return badFrame("wire: peer %s: request %d of %d bytes, shorter than its timeout field", sc.peer, f.id, f.n)
			}
			if err := sc.request(ctx, r, f); err != nil {
				if isTimeout(err) {
					return &connError{reasonStalled, fmt.Errorf("wire: peer %s: request %d of %d bytes not received within %v", sc.peer, f.id, f.n, o.FrameTimeout)}
				}
				return err
			}
		default:
			return badFrame("wire: peer %s: a client does not send frames of kind %d (request id %d)", sc.peer, f.kind, f.id)
		}
	}
}

// request receives request frame f's payload and starts its handler, or
// refuses it (the connection stays). An error ends the connection.
func (sc *sconn) request(ctx context.Context, r *bufio.Reader, f frame) error {
	s, o := sc.s, &sc.s.opts
	var t [8]byte
	if _, err := io.ReadFull(r, t[:]); err != nil {
		return err
	}
	n := f.n - 8
	if !sc.admit() {
		if _, err := io.CopyN(io.Discard, r, int64(n)); err != nil {
			return err
		}
		s.log.warn(reasonRefused, "wire: refusing a request over the in-flight cap", "peer", sc.peer, "max_in_flight", o.MaxInFlight, "max_server_in_flight", o.MaxServerInFlight)
		return sc.refuse(f.id, status.Errorf(codes.ResourceExhausted, "wire: server at its limit of requests in flight (%d per connection, %d in all)", o.MaxInFlight, o.MaxServerInFlight))
	}
	msg, held, refusal, err := sc.receive(r, f.id, n)
	if err != nil || refusal != nil {
		sc.finish(0)
		if err != nil {
			return err
		}
		s.log.warn(reasonRefused, "wire: refusing a request", "peer", sc.peer, "err", refusal)
		return sc.refuse(f.id, refusal)
	}
	req := new(servepb.BatchGetRequest)
	if err := proto.Unmarshal(msg, req); err != nil {
		sc.finish(held)
		return badFrame("wire: peer %s: request %d: malformed BatchGetRequest: %v", sc.peer, f.id, err)
	}
	rctx, cancel := context.WithCancel(ctx)
	if t := binary.BigEndian.Uint64(t[:]); t > 0 {
		rctx, cancel = context.WithTimeout(ctx, time.Duration(t))
	}
	sc.mu.Lock()
	if _, dup := sc.cancels[f.id]; dup {
		sc.mu.Unlock()
		cancel()
		sc.finish(held)
		return badFrame("wire: peer %s: request id %d already in flight", sc.peer, f.id)
	}
	sc.cancels[f.id] = cancel
	sc.mu.Unlock()
	go sc.handle(rctx, f.id, req, held)
	return nil
}

// receive reads a request's message of n bytes into a buffer that grows
// with the bytes that arrive (up to n, within MaxBufferedBytes), checking
// its fields as they come. A request over a limit is read past without
// keeping it and comes back as refusal; held is the bytes reserved for
// msg.
func (sc *sconn) receive(r *bufio.Reader, id uint64, n int) (msg []byte, held int, refusal, err error) {
	s := sc.s
	var q reqScan
	for len(msg) < n && refusal == nil {
		if len(msg) == cap(msg) {
			grow := min(n, max(2*cap(msg), 4<<10))
			if !s.reserve(grow - held) {
				refusal = status.Errorf(codes.ResourceExhausted, "wire: server at its limit of %d bytes of requests held", s.opts.MaxBufferedBytes)
				break
			}
			held = grow
			msg = append(make([]byte, 0, grow), msg...)
		}
		k, rerr := r.Read(msg[len(msg):cap(msg)])
		msg = msg[:len(msg)+k]
		if rerr != nil && len(msg) < n {
			s.unreserve(held)
			return nil, 0, nil, rerr
		}
		refusal, err = q.check(msg, n, &s.opts)
		if err != nil {
			s.unreserve(held)
			return nil, 0, nil, badFrame("wire: peer %s: request %d: malformed BatchGetRequest: %v", sc.peer, id, err)
		}
	}
	if refusal != nil {
		s.unreserve(held)
		if _, err := io.CopyN(io.Discard, r, int64(n-len(msg))); err != nil {
			return nil, 0, nil, err
		}
		return nil, 0, refusal, nil
	}
	return msg, held, nil, nil
}

// admit counts a request in flight on the connection and the server; it
// reports false (counting nothing) when either is at its cap.
func (sc *sconn) admit() bool {
	o := &sc.s.opts
	if sc.inflight.Add(1) > int64(o.MaxInFlight) {
		sc.inflight.Add(-1)
		return false
	}
	if sc.s.inflight.Add(1) > int64(o.MaxServerInFlight) {
		sc.s.inflight.Add(-1)
		sc.inflight.Add(-1)
		return false
	}
	return true
}

// finish ends an admitted request: its counts and its held bytes.
func (sc *sconn) finish(held int) {
	sc.s.unreserve(held)
	sc.s.inflight.Add(-1)
	sc.inflight.Add(-1)
}

// refuse answers request id with err's status; a failed write ends the
// connection.
func (sc *sconn) refuse(id uint64, err error) error {
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	sc.c.SetWriteDeadline(time.Now().Add(sc.s.opts.WriteTimeout))
	return writeError(sc.c, id, err)
}

// writeError writes err's gRPC status as a KindError frame.
func writeError(c net.Conn, id uint64, err error) error {
	st := status.Convert(err)
	var code [4]byte
	binary.BigEndian.PutUint32(code[:], uint32(st.Code()))
	return writeFrame(c, KindError, id, code[:], []byte(st.Message()))
}

func (sc *sconn) handle(ctx context.Context, id uint64, req *servepb.BatchGetRequest, held int) {
	defer sc.finish(held)
	resp, release, err := sc.s.h(ctx, req)
	sc.mu.Lock()
	cancel, live := sc.cancels[id]
	delete(sc.cancels, id)
	sc.mu.Unlock()
	if live {
		cancel()
	}
	if !live { // cancelled by the client: it expects nothing more
		if release != nil {
			release()
		}
		return
	}
	sc.wmu.Lock()
	if dl, ok := ctx.Deadline(); ok {
		sc.c.SetWriteDeadline(dl.Add(writeGrace))
	} else {
		sc.c.SetWriteDeadline(time.Now().Add(sc.s.opts.WriteTimeout))
	}
	if err != nil {
		err = writeError(sc.c, id, err)
	} else {
		err = writeFrame(sc.c, KindResponse, id, resp...)
	}
	sc.wmu.Unlock()
	if release != nil {
		release()
	}
	if err != nil {
		sc.c.Close() // the reader sees it and ends the connection
	}
}
