package chaos

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// S3Mode is what an S3Proxy does to the requests it is told to hit.
type S3Mode int

// S3 proxy modes.
const (
	S3Pass     S3Mode = iota // forward untouched
	S3Error                  // answer 500 InternalError / 503 SlowDown itself
	S3Slow                   // forward after a delay
	S3Truncate               // GET: send the full Content-Length, then only part of the body, then drop the connection
	S3BitFlip                // GET: flip one bit of the body (length unchanged)
	S3Cut                    // drop the connection without an answer
)

var s3ModeNames = [...]string{"pass", "error", "slow", "truncate", "bitflip", "cut"}

func (m S3Mode) String() string {
	if int(m) < len(s3ModeNames) {
		return s3ModeNames[m]
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// S3Proxy is a fault-injecting HTTP proxy in front of an S3 server. It keeps
// the client's Host header, so SigV4 signatures stay valid. Faults hit a
// fraction of requests (all when the fraction is 1); truncation and bit flips
// hit only GET responses with a body.
type S3Proxy struct {
	// Endpoint is "http://127.0.0.1:PORT".
	Endpoint string
	target   *url.URL
	srv      *http.Server
	l        net.Listener
	tr       *http.Transport

	mu       sync.Mutex
	mode     S3Mode
	fraction float64
	delay    time.Duration
	rng      *rand.Rand

	requests atomic.Int64
	injected atomic.Int64
}

// NewS3Proxy starts a proxy to target ("http://host:port") on a free
// loopback port. seed drives which requests are hit.
func NewS3Proxy(target string, seed uint64) (*S3Proxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("chaos: s3 proxy target %q: %w", target, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("chaos: s3 proxy: %w", err)
	}
	p := &S3Proxy{Endpoint: "http://" + l.Addr().String(), target: u, l: l,
		tr:  &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true},
		rng: rand.New(rand.NewPCG(seed, seed^0x5eed))}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = p.srv.Serve(l) }()
	return p, nil
}

// Set makes the proxy hit fraction of requests with mode (delay is the
// S3Slow delay).
func (p *S3Proxy) Set(mode S3Mode, fraction float64, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode, p.fraction, p.delay = mode, fraction, delay
}

// Heal forwards everything untouched again.
func (p *S3Proxy) Heal() { p.Set(S3Pass, 0, 0) }

// Counts returns the requests seen and the faults injected.
func (p *S3Proxy) Counts() (requests, injected int64) { return p.requests.Load(), p.injected.Load() }

// Close stops the proxy.
func (p *S3Proxy) Close() error {
	err := p.srv.Close()
	p.tr.CloseIdleConnections()
	return err
}

// pick decides the fault for one request: the mode, the delay and a random
// number for the fault's details.
func (p *S3Proxy) pick(r *http.Request) (S3Mode, time.Duration, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.mode
	if m == S3Pass || p.rng.Float64() >= p.fraction {
		return S3Pass, 0, 0
	}
	if (m == S3Truncate || m == S3BitFlip) && r.Method != http.MethodGet {
		return S3Pass, 0, 0
	}
	return m, p.delay, p.rng.Uint64()
}

func (p *S3Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	mode, delay, x := p.pick(r)
	switch mode {
	case S3Error:
		p.injected.Add(1)
		status, code := http.StatusInternalServerError, "InternalError"
		if x%2 == 0 {
			status, code = http.StatusServiceUnavailable, "SlowDown"
		}
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>injected by chaos.S3Proxy</Message></Error>`, code)
		return
	case S3Cut:
		p.injected.Add(1)
		panic(http.ErrAbortHandler)
	case S3Slow:
		p.injected.Add(1)
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host = p.target.Scheme, p.target.Host
	out.Host = r.Host // keep the signed Host
	if r.ContentLength == 0 {
		out.Body = nil
	}
	resp, err := p.tr.RoundTrip(out)
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if (mode == S3Truncate || mode == S3BitFlip) && resp.StatusCode/100 == 2 {
		body, err := io.ReadAll(resp.Body)
		if err != nil || len(body) == 0 {
			w.WriteHeader(resp.StatusCode)
			_, _ = w.Write(body)
			return
		}
		p.injected.Add(1)
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		w.WriteHeader(resp.StatusCode)
		if mode == S3BitFlip {
			b := bytes.Clone(body)
			bit := x % uint64(8*len(b))
			b[bit/8] ^= 1 << (bit % 8)
			_, _ = w.Write(b)
			return
		}
		_, _ = w.Write(body[:int(x%uint64(len(body)))])
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		panic(http.ErrAbortHandler) // the client sees a short body
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}
