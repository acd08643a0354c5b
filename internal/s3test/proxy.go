package s3test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// FaultProxy is a fault-injecting HTTP proxy in front of an S3 server: it
// answers chosen requests itself with an S3 error instead of forwarding them.
// It keeps the client's Host header, so SigV4 signatures stay valid.
type FaultProxy struct {
	// Endpoint is the proxy's "http://127.0.0.1:PORT".
	Endpoint string

	mu       sync.Mutex
	failNext int    // fail this many more requests
	failAll  bool   // fail every request
	status   int    // status of injected failures
	method   string // only fail requests with this method ("" = all)
	after    bool   // forward the request first, then fail (a lost response)
	every    int    // with failAll: fail only every every-th matching request
	seen     int    // matching requests while failAll
	requests int
	injected int
}

// NewFaultProxy starts a proxy to target (an "http://host:port" endpoint),
// closed at test cleanup.
func NewFaultProxy(t testing.TB, target string) *FaultProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	p := &FaultProxy{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, ok, after := p.inject(r)
		if ok && after {
			// The server does the work; the client never hears of it.
			rec := httptest.NewRecorder()
			rp.ServeHTTP(rec, r)
		}
		if ok {
			code := "InternalError"
			switch status {
			case 503:
				code = "SlowDown"
			case 502:
				code = "BadGateway"
			}
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(status)
			fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>injected by s3test.FaultProxy</Message></Error>`, code)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.Endpoint = srv.URL
	return p
}

func (p *FaultProxy) inject(r *http.Request) (status int, ok, after bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests++
	if p.method != "" && !strings.EqualFold(p.method, r.Method) {
		return 0, false, false
	}
	if p.failAll && p.every > 1 {
		p.seen++
		if p.seen%p.every != 1 {
			return 0, false, false
		}
	}
	if p.failAll || p.failNext > 0 {
		if p.failNext > 0 {
			p.failNext--
		}
		p.injected++
		return p.status, true, p.after
	}
	return 0, false, false
}

// FailNext makes the next n requests with method (all methods when "") fail
// with status (500, 502, 503 = SlowDown).
func (p *FaultProxy) FailNext(n, status int, method string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failNext, p.failAll, p.status, p.method, p.after = n, false, status, method, false
}

// LoseNextResponses forwards the next n requests with method to the server
// but answers the client with status instead of the server's response: the
// write happened, the client thinks it failed (and retries).
func (p *FaultProxy) LoseNextResponses(n, status int, method string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failNext, p.failAll, p.status, p.method, p.after = n, false, status, method, true
}

// LoseAlternateResponses loses the response of every other request with
// method (the 1st, 3rd, ...) until Heal, so each retry gets through.
func (p *FaultProxy) LoseAlternateResponses(status int, method string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failNext, p.failAll, p.status, p.method, p.after, p.every, p.seen = 0, true, status, method, true, 2, 0
}

// FailAll makes every request with method (all when "") fail with status
// until Heal.
func (p *FaultProxy) FailAll(status int, method string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failNext, p.failAll, p.status, p.method, p.after, p.every = 0, true, status, method, false, 0
}

// Heal stops injecting failures.
func (p *FaultProxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failNext, p.failAll, p.every = 0, false, 0
}

// Counts returns the requests seen and the failures injected so far.
func (p *FaultProxy) Counts() (requests, injected int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.requests, p.injected
}
