package chaos

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// TCPProxy forwards TCP connections from a loopback listener to a target
// address. Cut drops every open connection and refuses new ones (accepted
// and closed at once) until Heal: the network path is gone, not slow.
type TCPProxy struct {
	// Addr is the proxy's "127.0.0.1:PORT".
	Addr   string
	target string
	l      net.Listener
	cut    atomic.Bool

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
	// Dropped counts connections closed by Cut or refused while cut.
	Dropped atomic.Int64
}

// NewTCPProxy listens on addr ("127.0.0.1:0" for any port) and forwards to
// target.
func NewTCPProxy(addr, target string) (*TCPProxy, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("chaos: tcp proxy to %s: %w", target, err)
	}
	p := &TCPProxy{Addr: l.Addr().String(), target: target, l: l, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *TCPProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		if p.cut.Load() {
			p.Dropped.Add(1)
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, up) {
			c.Close()
			up.Close()
			return
		}
		p.wg.Add(2)
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

func (p *TCPProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *TCPProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

func (p *TCPProxy) dropAll() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.conns {
		c.Close()
		n++
	}
	return n
}

// Cut drops every open connection and refuses new ones until Heal.
func (p *TCPProxy) Cut() {
	p.cut.Store(true)
	p.Dropped.Add(int64(p.dropAll() / 2))
}

// Heal accepts connections again.
func (p *TCPProxy) Heal() { p.cut.Store(false) }

// Close stops the proxy and closes every connection.
func (p *TCPProxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.l.Close()
	p.dropAll()
	p.wg.Wait()
	return err
}
