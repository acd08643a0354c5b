package tlsconf

import (
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// ListenerOptions tune NewListener. The zero value of every field means
// its default.
type ListenerOptions struct {
	// Allow lists the peer identities (PeerIdentity) a connection may
	// have: exact, or a prefix ending in "*" ("pillar://router/*"). The
	// default value nil allows any verified peer (and, without a client
	// CA, any peer).
	Allow []string
	// HandshakeTimeout bounds a connection's TLS handshake. The default
	// value is 10s.
	HandshakeTimeout time.Duration
	// OnRefuse receives each refused connection's remote address and
	// reason (a failed handshake or an identity not allowed). The default
	// value nil drops them.
	OnRefuse func(remote, reason string)
}

// NewListener serves TLS with cfg on inner's connections, so every
// protocol above it (gRPC and the wire protocol on one port) runs inside
// TLS. Each connection's handshake runs on its first Read or Write, in
// the goroutine that serves it, never in Accept; a peer whose identity
// is not in Allow is refused there and its connection closed.
func NewListener(inner net.Listener, cfg *tls.Config, o ListenerOptions) net.Listener {
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 10 * time.Second
	}
	return &listener{Listener: inner, cfg: cfg, o: o}
}

type listener struct {
	net.Listener
	cfg *tls.Config
	o   ListenerOptions
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &authConn{Conn: tls.Server(c, l.cfg), l: l}, nil
}

// Allowed reports whether id matches one of allow's entries (exact, or a
// prefix ending in "*"); an empty allow list allows every id.
func Allowed(allow []string, id string) bool {
	if len(allow) == 0 {
		return true
	}
	for _, a := range allow {
		if p, ok := strings.CutSuffix(a, "*"); ok && strings.HasPrefix(id, p) || a == id {
			return true
		}
	}
	return false
}

type authConn struct {
	*tls.Conn
	l    *listener
	once sync.Once
	err  error
}

func (c *authConn) check() error {
	c.once.Do(func() {
		c.Conn.SetDeadline(time.Now().Add(c.l.o.HandshakeTimeout))
		if err := c.Conn.Handshake(); err != nil {
			c.err = fmt.Errorf("tls handshake: %w", err)
		} else if id := PeerIdentity(c.Conn.ConnectionState()); !Allowed(c.l.o.Allow, id) {
			c.err = fmt.Errorf("peer identity %q is not allowed here", id)
		}
		c.Conn.SetDeadline(time.Time{})
		if c.err != nil {
			if c.l.o.OnRefuse != nil {
				c.l.o.OnRefuse(c.Conn.RemoteAddr().String(), c.err.Error())
			}
			c.Conn.Close()
		}
	})
	return c.err
}

func (c *authConn) Read(b []byte) (int, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *authConn) Write(b []byte) (int, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}
