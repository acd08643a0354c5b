// Package fakemodel is a fake embedding model server, labelled as one:
// there is no GPU or model on the machines the tests and benchmarks run on.
// It is a real HTTP server on 127.0.0.1 speaking the OpenAI-compatible
// embeddings API (POST /v1/embeddings) the openai embedder calls, and it
// behaves like a model server with a fixed number of slots: each request
// holds a slot for Latency (its answer computed within it), requests
// beyond Slots queue, so its capacity is Slots × inputs / Latency whatever
// the client does. Vectors are a deterministic function of the text
// (Vector), cheap to compute, so the server's own CPU does not compete with
// the client's on a small machine, and answers are base64, as OpenAI's
// encoding_format=base64 gives.
//
// Faults: every FailEvery-th request answers HTTP 429 with Retry-After, or
// 503 when Fail5xx; the client is expected to retry them.
package fakemodel

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Server. Zero values are documented per field.
type Options struct {
	// Dim is the vector length. The default value is 384.
	Dim int
	// Latency is how long a request holds its slot, the computation of its
	// answer included. The default value is 0.
	Latency time.Duration
	// Slots is how many requests are served at once; others wait for a
	// slot. The default value is 4.
	Slots int
	// FailEvery makes every FailEvery-th request fail (429 with
	// Retry-After: RetryAfter, or 503 with Fail5xx) after holding its slot.
	// The default value 0 fails none.
	FailEvery int
	// Fail5xx answers 503 instead of 429 for the failed requests.
	Fail5xx bool
	// RetryAfter is the Retry-After of a 429, in whole seconds; 0 sends
	// none (the client then uses its own backoff).
	RetryAfter int
}

// Server is a running fake model.
type Server struct {
	o     Options
	srv   *httptest.Server
	slots chan struct{}

	requests, failed, inputs atomic.Int64
	flight, maxFlight        atomic.Int64
	mu                       sync.Mutex
	starts                   []time.Time // when each request got its slot
}

// Start starts a server; Close stops it.
func Start(o Options) *Server {
	if o.Dim <= 0 {
		o.Dim = 384
	}
	if o.Slots <= 0 {
		o.Slots = 4
	}
	s := &Server{o: o, slots: make(chan struct{}, o.Slots)}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// URL is the base URL for the openai embedder's url= parameter.
func (s *Server) URL() string { return s.srv.URL + "/v1" }

// Spec is an openai embedder spec for this server with extra parameters
// (",batch=64,concurrency=4"), model "fake".
func (s *Server) Spec(extra string) string {
	return fmt.Sprintf("openai:url=%s,model=fake,dim=%d%s", s.URL(), s.o.Dim, extra)
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// Stats are the server's counters.
type Stats struct {
	Requests, Failed, Inputs int64
	MaxInFlight              int64 // most requests holding or waiting for a slot at once
}

// Stats returns the counters so far.
func (s *Server) Stats() Stats {
	return Stats{Requests: s.requests.Load(), Failed: s.failed.Load(), Inputs: s.inputs.Load(), MaxInFlight: s.maxFlight.Load()}
}

// Starts returns when each request got its slot, in order.
func (s *Server) Starts() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.starts...)
}

// Capacity is the most inputs per second the server answers with requests
// of batch inputs: Slots × batch / Latency (+Inf without latency).
func (s *Server) Capacity(batch int) float64 {
	if s.o.Latency <= 0 {
		return math.Inf(1)
	}
	return float64(s.o.Slots*batch) / s.o.Latency.Seconds()
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	f := s.flight.Add(1)
	defer s.flight.Add(-1)
	for m := s.maxFlight.Load(); f > m && !s.maxFlight.CompareAndSwap(m, f); m = s.maxFlight.Load() {
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/embeddings" {
		http.Error(w, `{"error":{"message":"no route"}}`, http.StatusNotFound)
		return
	}
	var body struct {
		Model string   `json:"model"`
		Input []string `json:"input"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Model == "" {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":{"message":"bad request: %v"}}`, err)
		return
	}
	select {
	case s.slots <- struct{}{}:
	case <-r.Context().Done():
		return
	}
	start := time.Now()
	s.mu.Lock()
	s.starts = append(s.starts, start)
	s.mu.Unlock()
	n := s.requests.Add(1)
	fail := s.o.FailEvery > 0 && n%int64(s.o.FailEvery) == 0
	// The answer is computed while the request holds its slot, and the
	// slot is held for Latency in all: a model's latency includes its own
	// compute, so Latency is the service time, not a sleep added to it.
	var out []byte
	if !fail {
		out = s.answer(body.Model, body.Input)
	}
	if wait := s.o.Latency - time.Since(start); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			<-s.slots
			return
		}
	}
	<-s.slots
	if fail {
		s.failed.Add(1)
		if s.o.Fail5xx {
			http.Error(w, `{"error":{"message":"model overloaded"}}`, http.StatusServiceUnavailable)
			return
		}
		if s.o.RetryAfter > 0 {
			w.Header().Set("Retry-After", fmt.Sprint(s.o.RetryAfter))
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"error":{"message":"rate limit reached","type":"requests"}}`)
		return
	}
	s.inputs.Add(int64(len(body.Input)))
	w.Header().Set("Content-Type", "application/json")
	w.Write(out)
}

// answer is the embeddings response for inputs. It is written by hand,
// not with encoding/json: on a small machine the fake's own CPU competes
// with the client it measures.
func (s *Server) answer(model string, inputs []string) []byte {
	raw := make([]byte, 4*s.o.Dim)
	vec := make([]float32, s.o.Dim)
	out := make([]byte, 0, 64+len(inputs)*(base64.StdEncoding.EncodedLen(len(raw))+48))
	out = append(out, `{"object":"list","data":[`...)
	for i, text := range inputs {
		Vector(text, vec)
		for j, x := range vec {
			binary.LittleEndian.PutUint32(raw[4*j:], math.Float32bits(x))
		}
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"object":"embedding","index":`...)
		out = strconv.AppendInt(out, int64(i), 10)
		out = append(out, `,"embedding":"`...)
		out = base64.StdEncoding.AppendEncode(out, raw)
		out = append(out, `"}`...)
	}
	out = append(out, `],"model":`...)
	m, _ := json.Marshal(model)
	out = append(out, m...)
	return append(out, '}')
}

// Vector fills dst with text's vector: unit length, from an xorshift
// sequence seeded by the text's FNV-1a hash.
func Vector(text string, dst []float32) {
	h := fnv.New64a()
	h.Write([]byte(text))
	x := h.Sum64() | 1
	var sum float64
	for i := range dst {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		v := float32(int32(x>>32)) / (1 << 31)
		dst[i] = v
		sum += float64(v) * float64(v)
	}
	if sum == 0 {
		dst[0], sum = 1, 1
	}
	inv := float32(1 / math.Sqrt(sum))
	for i := range dst {
		dst[i] *= inv
	}
}
