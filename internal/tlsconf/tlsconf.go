package tlsconf

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Files names the PEM files of one side of a connection. The zero value
// names none (no TLS).
type Files struct {
	// Cert and Key are this side's certificate chain and private key. A
	// server needs both; a client sends them when the server asks for a
	// client certificate. The default value "" sends none.
	Cert, Key string
	// CA is the bundle the peer's certificate is verified against: for a
	// client the server's CA, for a server the CA of the client
	// certificates it requires (mutual TLS). The default value "": a client
	// uses the system roots, a server asks for no client certificate.
	CA string
	// ServerName is the name a client verifies in the server's
	// certificate. The default value "" takes it from the address dialled.
	ServerName string
}

// Enabled reports whether any file is named.
func (f Files) Enabled() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

// Options tune a Reloader. The zero value of every field means its
// default.
type Options struct {
	// Poll is how often the files' size and modification time are checked
	// for a change. The default value is 10s; a negative value turns
	// polling off (SIGHUP only).
	Poll time.Duration
	// OnError receives a reload that failed (the previous material stays
	// in use). The default value nil drops it.
	OnError func(error)
	// OnReload is called after a reload that took effect. The default
	// value nil does nothing.
	OnReload func()
	// ClientCertOptional makes a server with a client CA verify a client
	// certificate when one is sent instead of requiring one (the control
	// plane, where a bearer token may authenticate instead). The default
	// value false requires it.
	ClientCertOptional bool
}

// material is one consistent load of the files.
type material struct {
	cert  *tls.Certificate // nil: none configured
	pool  *x509.CertPool   // nil: none configured
	stamp string           // the files' sizes and modification times
}

// Reloader holds the current material of a Files and reloads it.
type Reloader struct {
	files Files
	opts  Options
	cur   atomic.Pointer[material]
	mu    sync.Mutex // serialises reloads
}

// NewReloader loads f once; an error names the file that failed.
func NewReloader(f Files, opts Options) (*Reloader, error) {
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("tls: a certificate and its key go together (cert " + quoteOrNone(f.Cert) + ", key " + quoteOrNone(f.Key) + ")")
	}
	r := &Reloader{files: f, opts: opts}
	m, err := load(f)
	if err != nil {
		return nil, err
	}
	r.cur.Store(m)
	return r, nil
}

func quoteOrNone(s string) string {
	if s == "" {
		return "none"
	}
	return fmt.Sprintf("%q", s)
}

func stampOf(paths ...string) string {
	s := ""
	for _, p := range paths {
		if p == "" {
			continue
		}
		if fi, err := os.Stat(p); err == nil {
			s += fmt.Sprintf("%s:%d:%d;", p, fi.Size(), fi.ModTime().UnixNano())
		} else {
			s += p + ":missing;"
		}
	}
	return s
}

func load(f Files) (*material, error) {
	m := &material{stamp: stampOf(f.Cert, f.Key, f.CA)}
	if f.Cert != "" {
		c, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("tls: certificate %s with key %s: %w", f.Cert, f.Key, err)
		}
		if len(c.Certificate) > 0 {
			if leaf, err := x509.ParseCertificate(c.Certificate[0]); err == nil {
				c.Leaf = leaf
			}
		}
		m.cert = &c
	}
	if f.CA != "" {
		b, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("tls: CA bundle: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("tls: CA bundle %s: no PEM certificates in it", f.CA)
		}
		m.pool = pool
	}
	return m, nil
}

// Reload loads the files again. On failure the previous material stays
// and the error is returned (and passed to Options.OnError).
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, err := load(r.files)
	if err != nil {
		if r.opts.OnError != nil {
			r.opts.OnError(err)
		}
		return err
	}
	r.cur.Store(m)
	if r.opts.OnReload != nil {
		r.opts.OnReload()
	}
	return nil
}

// Certificate is the current certificate (nil when none is configured).
func (r *Reloader) Certificate() *tls.Certificate { return r.cur.Load().cert }

// Watch reloads on SIGHUP and, unless Options.Poll is negative, when a
// file changes, until ctx ends.
func (r *Reloader) Watch(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	poll := r.opts.Poll
	if poll == 0 {
		poll = 10 * time.Second
	}
	var tick <-chan time.Time
	if poll > 0 {
		t := time.NewTicker(poll)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			_ = r.Reload()
		case <-tick:
			if stampOf(r.files.Cert, r.files.Key, r.files.CA) != r.cur.Load().stamp {
				_ = r.Reload()
			}
		}
	}
}

// ServerConfig is the server side: the current certificate on every
// handshake, and with a CA, a verified client certificate required.
func (r *Reloader) ServerConfig() (*tls.Config, error) {
	if r.cur.Load().cert == nil {
		return nil, errors.New("tls: a server needs a certificate and key (--tls-cert, --tls-key)")
	}
	base := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		m := r.cur.Load()
		c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*m.cert}, NextProtos: []string{"h2"}}
		if m.pool != nil {
			c.ClientCAs = m.pool
			c.ClientAuth = tls.RequireAndVerifyClientCert
			if r.opts.ClientCertOptional {
				c.ClientAuth = tls.VerifyClientCertIfGiven
			}
		}
		return c, nil
	}
	return base, nil
}

// ClientConfig is the client side: the server's certificate verified, by
// crypto/tls itself, against the CA loaded when ClientConfig is called (or
// the system roots) and against the name or IP address dialled, and the
// current client certificate sent when the server asks for one. A client
// certificate rotates without a restart; a client's CA bundle is read at
// start (rotate a CA by adding the new one to the bundle first). Verifying
// against a CA that reloads would mean verifying outside crypto/tls,
// where the address dialled is not known when it is an IP address.
func (r *Reloader) ClientConfig() *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: r.files.ServerName, RootCAs: r.cur.Load().pool}
	c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if m := r.cur.Load(); m.cert != nil {
			return m.cert, nil
		}
		return &tls.Certificate{}, nil
	}
	return c
}

// PeerIdentity is the identity of a verified peer certificate: its first
// URI SAN, else its common name. DevCerts puts "pillar://<role>/<name>"
// there.
func PeerIdentity(cs tls.ConnectionState) string {
	if len(cs.PeerCertificates) == 0 {
		return ""
	}
	c := cs.PeerCertificates[0]
	if len(c.URIs) > 0 {
		return c.URIs[0].String()
	}
	return c.Subject.CommonName
}

// IsLoopback reports whether a listen address binds only the loopback
// interface ("127.0.0.1:7000", "[::1]:7000", "localhost:7000"). An empty
// host (":7000") binds every interface.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// OffLoopback refuses a plaintext listener bound beyond loopback unless
// insecure is set; what names the listener's flag in the error.
func OffLoopback(what, addr string, tlsOn, insecure bool) error {
	if tlsOn || insecure || IsLoopback(addr) {
		return nil
	}
	return fmt.Errorf("%s %s: binds beyond loopback without TLS; give --tls-cert and --tls-key (pillar dev certs makes a local set), "+
		"bind 127.0.0.1, or pass --insecure to serve plaintext on the network on purpose", what, addr)
}
