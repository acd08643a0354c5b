package wire

import (
	"bytes"
	"io"
	"net"
	"sync"
	"time"
)

// Split serves two protocols on one listener: connections that open with
// Magic come out of the wire listener (Magic consumed: serve it with
// Server.ServeConns), every other connection (gRPC's HTTP/2 preface starts
// "PRI * HTTP/2.0") comes out of the other, its first bytes replayed.
// Closing either listener closes lis and both. A connection that sends
// fewer than len(Magic) bytes within sniff is handed to the other listener
// with what it sent (an idle HTTP/2 client waits for nothing: it sends its
// preface at once).
func Split(lis net.Listener, sniff time.Duration) (other, wire net.Listener) {
	if sniff <= 0 {
		sniff = 10 * time.Second
	}
	s := &splitter{lis: lis, done: make(chan struct{}), other: make(chan net.Conn), wire: make(chan net.Conn)}
	go s.accept(sniff)
	return &subListener{s: s, ch: s.other}, &subListener{s: s, ch: s.wire}
}

type splitter struct {
	lis         net.Listener
	other, wire chan net.Conn
	once        sync.Once
	done        chan struct{}
	mu          sync.Mutex
	err         error
}

func (s *splitter) accept(sniff time.Duration) {
	for {
		c, err := s.lis.Accept()
		if err != nil {
			s.mu.Lock()
			s.err = err
			s.mu.Unlock()
			s.close()
			return
		}
		go s.route(c, sniff)
	}
}

func (s *splitter) route(c net.Conn, sniff time.Duration) {
	c.SetReadDeadline(time.Now().Add(sniff))
	buf := make([]byte, len(Magic))
	n, err := io.ReadFull(c, buf)
	c.SetReadDeadline(time.Time{})
	ch := s.other
	var conn net.Conn = &prefixConn{Conn: c, prefix: buf[:n]}
	if err == nil && bytes.Equal(buf, []byte(Magic)) {
		ch, conn = s.wire, c
	} else if n == 0 && err != nil {
		c.Close()
		return
	}
	select {
	case ch <- conn:
	case <-s.done:
		c.Close()
	}
}

func (s *splitter) close() {
	s.once.Do(func() {
		close(s.done)
		s.lis.Close()
	})
}

type subListener struct {
	s  *splitter
	ch chan net.Conn
}

func (l *subListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.s.done:
		l.s.mu.Lock()
		err := l.s.err
		l.s.mu.Unlock()
		if err == nil {
			err = net.ErrClosed
		}
		return nil, err
	}
}

func (l *subListener) Close() error   { l.s.close(); return nil }
func (l *subListener) Addr() net.Addr { return l.s.lis.Addr() }

// prefixConn replays the bytes read while sniffing.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
