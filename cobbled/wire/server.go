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
	"sync"
	"time"

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

// ServerOptions configure a Server. The zero value of every field means its
// default.
type ServerOptions struct {
	// MaxFrame bounds a request frame. The default value is 16 MiB.
	MaxFrame int
	// HandshakeTimeout bounds the wait for Magic (Server.Serve). The
	// default value is 10s.
	HandshakeTimeout time.Duration
	// WriteTimeout bounds writing the answer to a request that carries no
	// deadline (one with a deadline gets its deadline + 1 s): the
	// handler's release, which may hold a node's partition read locks,
	// waits for the write, so a client that stops reading must not hold
	// them for as long as TCP takes to give up. Past it the connection is
	// closed. The default value is 10s.
	WriteTimeout time.Duration
	// Logger receives connection errors (bad frames). The default value
	// discards.
	Logger *slog.Logger
}

// Server serves the wire protocol with a Handler.
type Server struct {
	h    Handler
	opts ServerOptions

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	lis    []net.Listener
	closed bool
}

// NewServer returns a server answering with h.
func NewServer(h Handler, opts ServerOptions) *Server {
	if opts.MaxFrame == 0 {
		opts.MaxFrame = 16 << 20
	}
	if opts.HandshakeTimeout == 0 {
		opts.HandshakeTimeout = 10 * time.Second
	}
	if opts.WriteTimeout == 0 {
		opts.WriteTimeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Server{h: h, opts: opts, conns: map[net.Conn]struct{}{}}
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
		go s.serveConn(c, handshake)
	}
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

// sconn is one client connection on the server.
type sconn struct {
	s    *Server
	c    net.Conn
	peer string
	wmu  sync.Mutex

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
	r := bufio.NewReaderSize(c, 64<<10)
	if handshake {
		c.SetReadDeadline(time.Now().Add(s.opts.HandshakeTimeout))
		var m [len(Magic)]byte
		if _, err := io.ReadFull(r, m[:]); err != nil || string(m[:]) != Magic {
			s.opts.Logger.Warn("wire: connection without the wire handshake", "peer", sc.peer, "err", err)
			return
		}
		c.SetReadDeadline(time.Time{})
	}
	if err := sc.read(ctx, r); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		s.opts.Logger.Warn("wire: closing connection", "peer", sc.peer, "err", err)
	}
}

// read handles frames until the connection fails or a frame is bad.
func (sc *sconn) read(ctx context.Context, r *bufio.Reader) error {
	for {
		f, err := readHeader(r, sc.peer, sc.s.opts.MaxFrame)
		if err != nil {
			return err
		}
		switch f.kind {
		case KindCancel:
			if f.n != 0 {
				return fmt.Errorf("wire: peer %s: cancel frame with %d payload bytes (request id %d)", sc.peer, f.n, f.id)
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
				return fmt.Errorf("wire: peer %s: request %d of %d bytes, shorter than its timeout field", sc.peer, f.id, f.n)
			}
			buf := make([]byte, f.n)
			if _, err := io.ReadFull(r, buf); err != nil {
				return err
			}
			req := new(servepb.BatchGetRequest)
			if err := proto.Unmarshal(buf[8:], req); err != nil {
				return fmt.Errorf("wire: peer %s: request %d: malformed BatchGetRequest: %v", sc.peer, f.id, err)
			}
			rctx, cancel := context.WithCancel(ctx)
			if t := binary.BigEndian.Uint64(buf[:8]); t > 0 {
				rctx, cancel = context.WithTimeout(ctx, time.Duration(t))
			}
			sc.mu.Lock()
			if _, dup := sc.cancels[f.id]; dup {
				sc.mu.Unlock()
				cancel()
				return fmt.Errorf("wire: peer %s: request id %d already in flight", sc.peer, f.id)
			}
			sc.cancels[f.id] = cancel
			sc.mu.Unlock()
			go sc.handle(rctx, f.id, req)
		default:
			return fmt.Errorf("wire: peer %s: a client does not send frames of kind %d (request id %d)", sc.peer, f.kind, f.id)
		}
	}
}

func (sc *sconn) handle(ctx context.Context, id uint64, req *servepb.BatchGetRequest) {
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
		st := status.Convert(err)
		var code [4]byte
		binary.BigEndian.PutUint32(code[:], uint32(st.Code()))
		err = writeFrame(sc.c, KindError, id, code[:], []byte(st.Message()))
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
