package embedder

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// apiServer is a real HTTP server on 127.0.0.1 that speaks the
// OpenAI-compatible embeddings API: it embeds with the hash embedder (so the
// right answer is known), always lists the embeddings in reverse order (the
// client must go by "index"), and misbehaves on the requests for which
// misbehave says so.
type apiServer struct {
	srv     *httptest.Server
	hash    *Hash
	key     string // required bearer key; "" accepts any
	base64  bool   // answer base64 embeddings
	delay   time.Duration
	n       atomic.Int64 // requests so far
	flight  atomic.Int64
	maxSeen atomic.Int64
	mu      sync.Mutex
	sizes   []int // inputs per request
	// misbehave, when set, is asked about request number req (from 1); it may
	// write a whole answer itself (return true), or edit the data items.
	misbehave func(req int, w http.ResponseWriter, in []string, items *[]apiItem) bool
}

type apiItem struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"`
}

func newAPIServer(t testing.TB, dim int) *apiServer {
	s := &apiServer{hash: mustHash(t, fmt.Sprintf("hash:dim=%d", dim))}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *apiServer) url() string { return s.srv.URL + "/v1" }

func (s *apiServer) serve(w http.ResponseWriter, r *http.Request) {
	req := int(s.n.Add(1))
	f := s.flight.Add(1)
	for m := s.maxSeen.Load(); f > m && !s.maxSeen.CompareAndSwap(m, f); m = s.maxSeen.Load() {
	}
	defer s.flight.Add(-1)
	if r.Method != http.MethodPost || r.URL.Path != "/v1/embeddings" {
		http.Error(w, `{"error":{"message":"no route"}}`, http.StatusNotFound)
		return
	}
	if s.key != "" && r.Header.Get("Authorization") != "Bearer "+s.key {
		w.WriteHeader(http.StatusUnauthorized)
		got, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s","type":"invalid_request_error"}}`, got)
		return
	}
	var body struct {
		Model          string   `json:"model"`
		Input          []string `json:"input"`
		EncodingFormat string   `json:"encoding_format"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Model == "" {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":"bad request: %v"}`, err)
		return
	}
	s.mu.Lock()
	s.sizes = append(s.sizes, len(body.Input))
	s.mu.Unlock()
	if s.delay > 0 {
		select {
		case <-time.After(s.delay):
		case <-r.Context().Done():
			return
		}
	}
	vecs, _ := s.hash.Embed(r.Context(), body.Input)
	items := make([]apiItem, len(vecs))
	for i, v := range vecs {
		items[len(vecs)-1-i] = apiItem{Object: "embedding", Index: i, Embedding: v}
	}
	if s.misbehave != nil && s.misbehave(req, w, body.Input, &items) {
		return
	}
	if s.base64 {
		for i := range items {
			var b bytes.Buffer
			binary.Write(&b, binary.LittleEndian, items[i].Embedding.([]float32))
			items[i].Embedding = base64.StdEncoding.EncodeToString(b.Bytes())
		}
	}
	out, _ := json.Marshal(map[string]any{"object": "list", "data": items, "model": body.Model, "usage": map[string]int{"prompt_tokens": 1, "total_tokens": 1}})
	// Sentinel values become the bare tokens Python's json module writes.
	out = bytes.ReplaceAll(out, []byte("12345.5"), []byte("NaN"))
	out = bytes.ReplaceAll(out, []byte("-23456.5"), []byte("-Infinity"))
	w.Header().Set("Content-Type", "application/json")
	w.Write(out)
}

func newOpenAITest(t *testing.T, s *apiServer, params string, opts Options) *OpenAI {
	t.Helper()
	spec := "openai:url=" + s.url() + ",model=test-model,dim=" + fmt.Sprint(s.hash.Dims()) + params
	e, err := New(spec, opts)
	if err != nil {
		t.Fatal(err)
	}
	return e.(*OpenAI)
}

func texts(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("text number %d about subject %d", i, i%5)
	}
	return out
}

func checkAgainstHash(t *testing.T, s *apiServer, in []string, got [][]float32) {
	t.Helper()
	want, _ := s.hash.Embed(context.Background(), in)
	if len(got) != len(want) {
		t.Fatalf("%d vectors for %d texts", len(got), len(want))
	}
	for i := range want {
		for j := range want[i] {
			if got[i][j] != want[i][j] {
				t.Fatalf("vector %d value %d: got %v want %v (order mixed up?)", i, j, got[i][j], want[i][j])
			}
		}
	}
}

func TestOpenAIBatchesInOrder(t *testing.T) {
	for _, b64 := range []bool{false, true} {
		s := newAPIServer(t, 16)
		s.base64 = b64
		e := newOpenAITest(t, s, ",batch=3,concurrency=2", Options{})
		in := texts(10)
		got, err := e.Embed(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		checkAgainstHash(t, s, in, got)
		if s.n.Load() != 4 {
			t.Errorf("%d requests for 10 texts in batches of 3, want 4", s.n.Load())
		}
		for _, n := range s.sizes {
			if n > 3 {
				t.Errorf("a request had %d inputs, batch is 3", n)
			}
		}
		if st := e.Stats(); st.Requests != 4 || st.Retries != 0 || st.Vectors != 10 {
			t.Errorf("stats %+v", st)
		}
	}
}

func TestOpenAIEmptyInput(t *testing.T) {
	s := newAPIServer(t, 8)
	e := newOpenAITest(t, s, "", Options{})
	got, err := e.Embed(context.Background(), nil)
	if err != nil || len(got) != 0 || s.n.Load() != 0 {
		t.Fatalf("Embed(nil) = %v, %v after %d requests", got, err, s.n.Load())
	}
}

func TestOpenAIConcurrencyLimit(t *testing.T) {
	s := newAPIServer(t, 8)
	s.delay = 30 * time.Millisecond
	e := newOpenAITest(t, s, ",batch=2,concurrency=3", Options{})
	in := texts(40)
	got, err := e.Embed(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	checkAgainstHash(t, s, in, got)
	if m := s.maxSeen.Load(); m > 3 || m < 2 {
		t.Errorf("%d requests in flight at once, concurrency is 3", m)
	}
	// Concurrent Embed calls share the limit and keep their own results.
	s.maxSeen.Store(0)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			in := texts(12 + g)
			got, err := e.Embed(context.Background(), in)
			if err != nil {
				t.Error(err)
				return
			}
			checkAgainstHash(t, s, in, got)
		})
	}
	wg.Wait()
	if m := s.maxSeen.Load(); m > 3 {
		t.Errorf("%d requests in flight at once from 4 Embed calls, concurrency is 3", m)
	}
}

func TestOpenAIRetryAfter(t *testing.T) {
	s := newAPIServer(t, 8)
	s.misbehave = func(req int, w http.ResponseWriter, _ []string, _ *[]apiItem) bool {
		if req == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"error":{"message":"rate limited"}}`)
			return true
		}
		return false
	}
	// backoff is 1ms: a wait near a second can only come from Retry-After.
	e := newOpenAITest(t, s, ",backoff=1ms", Options{})
	start := time.Now()
	in := texts(3)
	got, err := e.Embed(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	checkAgainstHash(t, s, in, got)
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Errorf("retried after %v, Retry-After said 1s", took)
	}
	if st := e.Stats(); st.Requests != 2 || st.Retries != 1 {
		t.Errorf("stats %+v, want 2 requests, 1 retry", st)
	}
}

func TestOpenAIRetries5xx(t *testing.T) {
	s := newAPIServer(t, 8)
	s.misbehave = func(req int, w http.ResponseWriter, _ []string, _ *[]apiItem) bool {
		codes := map[int]int{1: 500, 2: 502, 3: 503}
		if c, ok := codes[req]; ok {
			w.WriteHeader(c)
			fmt.Fprint(w, "upstream trouble")
			return true
		}
		return false
	}
	e := newOpenAITest(t, s, ",backoff=1ms,retries=3", Options{})
	in := texts(2)
	got, err := e.Embed(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	checkAgainstHash(t, s, in, got)
	if st := e.Stats(); st.Requests != 4 || st.Retries != 3 {
		t.Errorf("stats %+v, want 4 requests, 3 retries", st)
	}

	// Retries run out.
	s2 := newAPIServer(t, 8)
	s2.misbehave = func(_ int, w http.ResponseWriter, _ []string, _ *[]apiItem) bool {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, `{"error":"model is loading"}`)
		return true
	}
	e2 := newOpenAITest(t, s2, ",backoff=1ms,retries=2", Options{})
	_, err = e2.Embed(context.Background(), texts(2))
	var se *StatusError
	if !errors.As(err, &se) || se.Code != 503 || se.Message != "model is loading" {
		t.Fatalf("err = %v, want a StatusError 503 with the server's message", err)
	}
	if !strings.Contains(err.Error(), "giving up after 3 attempts") || !strings.Contains(err.Error(), e2.ID()) || s2.n.Load() != 3 {
		t.Errorf("err = %v after %d requests", err, s2.n.Load())
	}
	if e2.Stats().Failures != 1 {
		t.Errorf("stats %+v", e2.Stats())
	}
}

func TestOpenAIClientErrorsAreNotRetried(t *testing.T) {
	s := newAPIServer(t, 8)
	s.misbehave = func(_ int, w http.ResponseWriter, _ []string, _ *[]apiItem) bool {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":{"message":"This model's maximum context length is 512 tokens","type":"BadRequestError"}}`)
		return true
	}
	e := newOpenAITest(t, s, ",backoff=1ms", Options{})
	_, err := e.Embed(context.Background(), texts(1))
	var se *StatusError
	if !errors.As(err, &se) || se.Code != 400 || !strings.Contains(err.Error(), "maximum context length") {
		t.Fatalf("err = %v", err)
	}
	if s.n.Load() != 1 {
		t.Errorf("%d requests; a 400 must not be retried", s.n.Load())
	}
}

func TestOpenAITimeouts(t *testing.T) {
	s := newAPIServer(t, 8)
	s.misbehave = func(req int, _ http.ResponseWriter, _ []string, _ *[]apiItem) bool {
		if req == 1 {
			time.Sleep(400 * time.Millisecond) // past the client's 100ms
		}
		return false
	}
	e := newOpenAITest(t, s, ",timeout=100ms,backoff=1ms", Options{})
	in := texts(2)
	got, err := e.Embed(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	checkAgainstHash(t, s, in, got)
	if st := e.Stats(); st.Requests != 2 || st.Retries != 1 {
		t.Errorf("stats %+v, want the slow request retried once", st)
	}

	// The caller's deadline wins over retries.
	s2 := newAPIServer(t, 8)
	s2.delay = 5 * time.Second
	e2 := newOpenAITest(t, s2, ",timeout=1s,backoff=1ms", Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = e2.Embed(ctx, texts(5))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the caller's deadline", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Embed returned %v after the caller's deadline", took)
	}
}

func TestOpenAIBadVectors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		edit     func(in []string, items []apiItem) []apiItem
		input    int // the input the error must name
		contains string
	}{
		{"wrong dims", func(_ []string, items []apiItem) []apiItem {
			for i := range items {
				if items[i].Index == 0 {
					items[i].Embedding = []float32{1, 2, 3}
				}
			}
			return items
		}, 4, "3 dimensions, want 8"},
		{"NaN", func(_ []string, items []apiItem) []apiItem {
			for i := range items {
				if items[i].Index == 1 {
					items[i].Embedding.([]float32)[5] = 12345.5 // written as NaN
				}
			}
			return items
		}, 5, "value 5 is NaN"},
		{"-Infinity", func(_ []string, items []apiItem) []apiItem {
			for i := range items {
				if items[i].Index == 0 {
					items[i].Embedding.([]float32)[2] = -23456.5 // written as -Infinity
				}
			}
			return items
		}, 4, "value 2 is -Inf"},
		{"float32 overflow", func(_ []string, items []apiItem) []apiItem {
			for i := range items {
				if items[i].Index == 1 {
					v := make([]float64, 8)
					v[0] = 1e39
					items[i].Embedding = v
				}
			}
			return items
		}, 5, "value 0 is +Inf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newAPIServer(t, 8)
			s.misbehave = func(req int, _ http.ResponseWriter, in []string, items *[]apiItem) bool {
				if strings.Contains(in[0], "number 4 ") { // the batch of inputs 4 and 5
					*items = tc.edit(in, *items)
				}
				return false
			}
			e := newOpenAITest(t, s, ",batch=2,concurrency=1,backoff=1ms", Options{})
			_, err := e.Embed(context.Background(), texts(7))
			var ve *VectorError
			if !errors.Is(err, ErrBadVector) || !errors.As(err, &ve) || ve.Index != tc.input || !strings.Contains(err.Error(), tc.contains) {
				t.Fatalf("err = %v, want a VectorError for input %d (%s)", err, tc.input, tc.contains)
			}
			if s.n.Load() > 4 {
				t.Errorf("%d requests: a bad vector must not be retried", s.n.Load())
			}
		})
	}
}

func TestOpenAIBadResponses(t *testing.T) {
	for _, tc := range []struct {
		name     string
		edit     func(w http.ResponseWriter, items []apiItem) ([]apiItem, bool)
		contains string
	}{
		{"fewer embeddings", func(_ http.ResponseWriter, items []apiItem) ([]apiItem, bool) {
			var out []apiItem
			for _, it := range items {
				if it.Index != 1 {
					out = append(out, it)
				}
			}
			return out, false
		}, "2 embeddings for 3 inputs; none for input 1"},
		{"duplicate index", func(_ http.ResponseWriter, items []apiItem) ([]apiItem, bool) {
			items[0].Index = items[1].Index
			return items, false
		}, "two embeddings for input"},
		{"index out of range", func(_ http.ResponseWriter, items []apiItem) ([]apiItem, bool) {
			items[0].Index = 7
			return items, false
		}, "index 7 out of range"},
		{"not JSON", func(w http.ResponseWriter, items []apiItem) ([]apiItem, bool) {
			w.Write([]byte("<html>gateway</html>"))
			return items, true
		}, "bad response"},
		{"string values", func(_ http.ResponseWriter, items []apiItem) ([]apiItem, bool) {
			items[0].Embedding = []string{"a", "b"}
			return items, false
		}, "is not a number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newAPIServer(t, 8)
			s.misbehave = func(_ int, w http.ResponseWriter, _ []string, items *[]apiItem) bool {
				var done bool
				*items, done = tc.edit(w, *items)
				return done
			}
			e := newOpenAITest(t, s, ",backoff=1ms", Options{})
			_, err := e.Embed(context.Background(), texts(3))
			if !errors.Is(err, ErrBadResponse) || !strings.Contains(err.Error(), tc.contains) {
				t.Fatalf("err = %v, want ErrBadResponse containing %q", err, tc.contains)
			}
		})
	}
}

func TestOpenAIKey(t *testing.T) {
	const key = "sk-test-5ecret-do-not-print"
	s := newAPIServer(t, 8)
	s.key = key
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	noEnv := func(string) string { return "" }

	// No key: the server refuses, the error says so, no retry.
	e := newOpenAITest(t, s, ",backoff=1ms", Options{Getenv: noEnv, Logger: logger})
	if ok, _ := e.HasKey(); ok {
		t.Fatal("found a key where there is none")
	}
	_, err := e.Embed(context.Background(), texts(1))
	var se *StatusError
	if !errors.As(err, &se) || se.Code != 401 {
		t.Fatalf("err = %v, want 401", err)
	}

	// From the secrets map (the job's secure vault), preferred to the environment.
	env := func(name string) string {
		if name == "OPENAI_API_KEY" {
			return "sk-wrong"
		}
		return ""
	}
	e = newOpenAITest(t, s, "", Options{Secrets: map[string]string{"PILLAR_EMBED_API_KEY": key}, Getenv: env, Logger: logger})
	if ok, src := e.HasKey(); !ok || src != "secrets[PILLAR_EMBED_API_KEY]" {
		t.Fatalf("HasKey = %v, %q", ok, src)
	}
	if _, err := e.Embed(context.Background(), texts(2)); err != nil {
		t.Fatal(err)
	}
	// From the environment; key_env names the variable.
	for _, tc := range []struct {
		params, variable string
	}{
		{"", "OPENAI_API_KEY"},
		{",key_env=MY_KEY", "MY_KEY"},
		{",key_env=MY_KEY", "YT_SECURE_VAULT_MY_KEY"},
	} {
		env := func(name string) string {
			if name == tc.variable {
				return key
			}
			return ""
		}
		e = newOpenAITest(t, s, tc.params, Options{Getenv: env, Logger: logger})
		if _, err := e.Embed(context.Background(), texts(2)); err != nil {
			t.Fatalf("key in $%s: %v", tc.variable, err)
		}
	}
	// A server that echoes a wrong key does not get it printed either.
	s.key = "another-key"
	e2 := newOpenAITest(t, s, "", Options{Getenv: func(string) string { return key }, Logger: logger})
	_, err = e2.Embed(context.Background(), texts(1))
	if !errors.As(err, &se) || se.Code != 401 || !strings.Contains(err.Error(), "[redacted]") {
		t.Fatalf("err = %v, want a 401 with the echoed key redacted", err)
	}
	// The key is never printed.
	for what, s := range map[string]string{
		"id": e.ID(), "spec": e.Spec(), "%v": fmt.Sprintf("%v", e), "%+v": fmt.Sprintf("%+v", e), "%#v": fmt.Sprintf("%#v", e),
		"error": fmt.Sprint(err), "logs": logs.String(),
	} {
		if strings.Contains(s, key) || strings.Contains(s, "5ecret") {
			t.Errorf("the API key shows in the %s: %s", what, s)
		}
	}
	if !strings.Contains(logs.String(), "embedder: response") {
		t.Errorf("no debug log lines: %q", logs.String())
	}
}

func TestOpenAISpecs(t *testing.T) {
	base := "openai:url=http://127.0.0.1:8000/v1,model=BAAI/bge-small-en-v1.5,dim=384"
	e, err := Parse(base, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(e.ID(), "openai-baai-bge-small-en-v1-5-d384-") || e.Dims() != 384 {
		t.Errorf("id %s", e.ID())
	}
	if pb := e.(interface{ PreferredBatch() int }).PreferredBatch(); pb != 256 {
		t.Errorf("PreferredBatch = %d, want 64×4", pb)
	}
	if e.Spec() != base+",batch=64,concurrency=4,timeout=1m0s,retries=5,backoff=500ms" {
		t.Errorf("spec %s", e.Spec())
	}
	if e2, err := Parse(e.Spec(), nil); err != nil || e2.ID() != e.ID() || e2.Spec() != e.Spec() {
		t.Errorf("Parse(Spec()) = %v, %v", e2, err)
	}
	// Where and how fast do not change the version; what does.
	same := []string{
		"openai:model=BAAI/bge-small-en-v1.5,dim=384,url=https://embed.internal:443/v1/embeddings,batch=8,concurrency=32,timeout=5s,retries=0,backoff=1s",
	}
	for _, s := range same {
		if e2, err := Parse(s, nil); err != nil || e2.ID() != e.ID() {
			t.Errorf("%s: id %v (%v), want %s", s, e2, err, e.ID())
		}
	}
	for _, s := range []string{
		"openai:url=http://127.0.0.1:8000/v1,model=BAAI/bge-small-en-v1.5,dim=512",
		"openai:url=http://127.0.0.1:8000/v1,model=BAAI/bge-base-en-v1.5,dim=384",
	} {
		if e2, err := Parse(s, nil); err != nil || e2.ID() == e.ID() {
			t.Errorf("%s: same id as %s (%v)", s, base, err)
		}
	}
	for _, tc := range []struct{ spec, param string }{
		{"openai:model=m,dim=8", "url"},
		{"openai:url=http://h/v1,dim=8", "model"},
		{"openai:url=http://h/v1,model=m", "dim"},
		{"openai:url=http://h/v1,model=m,dim=0", "dim"},
		{"openai:url=http://h/v1,model=m,dim=100000", "dim"},
		{"openai:url=http://h/v1,model=m,dim=8,batch=0", "batch"},
		{"openai:url=http://h/v1,model=m,dim=8,batch=many", "batch"},
		{"openai:url=http://h/v1,model=m,dim=8,concurrency=-1", "concurrency"},
		{"openai:url=http://h/v1,model=m,dim=8,timeout=30", "timeout"},
		{"openai:url=http://h/v1,model=m,dim=8,backoff=0s", "backoff"},
		{"openai:url=http://h/v1,model=m,dim=8,retries=x", "retries"},
		{"openai:url=http://h/v1,model=m,dim=8,key_env=not-a-name", "key_env"},
		{"openai:url=http://h/v1,model=m,dim=8,api_key=sk-1", "api_key"},
		{"openai:url=ftp://h/v1,model=m,dim=8", "url"},
		{"openai:url=http://user:pw@h/v1,model=m,dim=8", "url"},
	} {
		_, err := Parse(tc.spec, nil)
		var se *SpecError
		if !errors.Is(err, ErrBadParam) || !errors.As(err, &se) || se.Param != tc.param {
			t.Errorf("Parse(%q) = %v, want a bad parameter %s", tc.spec, err, tc.param)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		v    string
		want time.Duration
	}{
		{"", 0},
		{"junk", 0},
		{"2", 2 * time.Second},
		{"0", time.Millisecond},
		{"86400", maxRetryAfter},
		{now.Add(3 * time.Second).Format(http.TimeFormat), 3 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), time.Millisecond},
	} {
		if got := parseRetryAfter(tc.v, now); got != tc.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", tc.v, got, tc.want)
		}
	}
}

func TestQuoteNonFinite(t *testing.T) {
	in := `{"data":[{"index":0,"embedding":[NaN, -Infinity, Infinity, 1.5]}],"note":"NaN stays"}`
	out, changed := quoteNonFinite([]byte(in))
	want := `{"data":[{"index":0,"embedding":["NaN", "-Infinity", "Infinity", 1.5]}],"note":"NaN stays"}`
	if !changed || string(out) != want {
		t.Fatalf("got %s", out)
	}
	v, err := parseVector(json.RawMessage(`["NaN", "-Infinity", "Infinity", 1.5]`), nil)
	if err != nil || !math.IsNaN(float64(v[0])) || !math.IsInf(float64(v[1]), -1) || !math.IsInf(float64(v[2]), 1) || v[3] != 1.5 {
		t.Fatalf("parseVector = %v, %v", v, err)
	}
}

// TestDecodeBase64Embeddings: base64 vectors decode straight from the
// response, escaped ("\/", as some JSON encoders write "/") or not, and a
// string that is not base64 float32s names its input.
func TestDecodeBase64Embeddings(t *testing.T) {
	want := [][]float32{{0.6, 0.8}, {math.Float32frombits(0x3f7fffff), 0}}
	var items []string
	for i, v := range want {
		var b bytes.Buffer
		binary.Write(&b, binary.LittleEndian, v)
		enc := base64.StdEncoding.EncodeToString(b.Bytes())
		if i == 1 {
			enc = strings.ReplaceAll(enc, "/", `\/`)
		}
		items = append(items, fmt.Sprintf(`{"index":%d,"embedding":"%s"}`, i, enc))
	}
	// 0x3f7fffff is the bytes ff ff 7f 3f, base64 "//9/Pw": escaped slashes.
	if !strings.Contains(items[1], `\/`) {
		t.Fatalf("test vector has no escaped slash: %s", items[1])
	}
	dst := [][]float32{make([]float32, 2), make([]float32, 2)}
	if err := decodeResponse([]byte(`{"data":[`+strings.Join(items, ",")+`]}`), 0, 2, dst); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(dst) != fmt.Sprint(want) {
		t.Fatalf("decoded %v, want %v", dst, want)
	}
	err := decodeResponse([]byte(`{"data":[`+items[0]+`,{"index":1,"embedding":"not base64!"}]}`), 10, 2, dst)
	if err == nil || !strings.Contains(err.Error(), "input 11") || !strings.Contains(err.Error(), "not base64") {
		t.Fatalf("err = %v, want input 11 named as not base64", err)
	}
}
