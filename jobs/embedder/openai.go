package embedder

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// openaiAlgo versions how the openai embedder turns responses into vectors
// (part of its id).
const openaiAlgo = "openai/1"

// Default API key variables, looked up in this order.
var defaultKeyNames = []string{"PILLAR_EMBED_API_KEY", "OPENAI_API_KEY"}

const (
	defaultBatch       = 64
	defaultConcurrency = 4
	defaultTimeout     = time.Minute
	defaultRetries     = 5
	defaultBackoff     = 500 * time.Millisecond
	maxBackoff         = 30 * time.Second
	maxRetryAfter      = 5 * time.Minute
)

// OpenAI is a client of the OpenAI-compatible POST /v1/embeddings API (vLLM,
// text-embeddings-inference, Ollama, LiteLLM, OpenAI itself). It is safe for
// concurrent use; see the package documentation for batching, retries and
// validation.
type OpenAI struct {
	endpoint    string // …/embeddings
	baseURL     string // as given in the spec
	model       string
	dim         int
	batch       int
	concurrency int
	timeout     time.Duration
	retries     int
	backoff     time.Duration
	rate        float64       // requests per second (retries included); 0: no limit
	limit       *rate.Limiter // nil without rate
	keyEnv      string
	key         secret
	keySource   string // where the key came from, for logs; never the key
	spec, id    string
	client      *http.Client
	log         *slog.Logger
	sem         chan struct{} // one slot per request in flight, shared by every embedder of the spec (sharedLimits)

	requests, retried, failed, vectors atomic.Int64
}

// secret is an API key. It is held through a pointer so that printing an
// OpenAI value with fmt (which does not call methods of unexported fields)
// shows an address, never the key; nil means no key.
type secret = *apiKey

type apiKey struct{ v string }

func (*apiKey) String() string   { return "[redacted]" }
func (*apiKey) GoString() string { return "[redacted]" }

// String is the embedder's id.
func (e *OpenAI) String() string { return e.id }

// Stats is a snapshot of an OpenAI embedder's counters.
type Stats struct {
	Requests int64 // HTTP requests sent, retries included
	Retries  int64 // requests that were retries
	Failures int64 // Embed calls that failed (not counting the caller cancelling)
	Vectors  int64 // vectors returned
}

// Stats returns the counters so far.
func (e *OpenAI) Stats() Stats {
	return Stats{Requests: e.requests.Load(), Retries: e.retried.Load(), Failures: e.failed.Load(), Vectors: e.vectors.Load()}
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func newOpenAI(spec string, params []param, opts Options) (*OpenAI, error) {
	e := &OpenAI{batch: defaultBatch, concurrency: defaultConcurrency, timeout: defaultTimeout, retries: defaultRetries, backoff: defaultBackoff, log: opts.Logger}
	bad := func(p, format string, args ...any) error {
		return &SpecError{Spec: spec, Param: p, Reason: fmt.Sprintf(format, args...), Err: ErrBadParam}
	}
	var err error
	for _, p := range params {
		switch p.name {
		case "url":
			u, perr := url.Parse(p.value)
			switch {
			case perr != nil:
				return nil, bad(p.name, "value %q is not a URL", p.value)
			case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
				return nil, bad(p.name, "value %q is not an http(s) URL", p.value)
			case u.User != nil:
				return nil, bad(p.name, "must not hold credentials (put the key in PILLAR_EMBED_API_KEY)")
			case u.RawQuery != "" || u.Fragment != "":
				return nil, bad(p.name, "must have no query or fragment")
			}
			e.baseURL = strings.TrimRight(p.value, "/")
		case "model":
			if p.value == "" {
				return nil, bad(p.name, "must not be empty")
			}
			e.model = p.value
		case "dim":
			e.dim, err = intParam(spec, p, 1, MaxDim)
		case "batch":
			e.batch, err = intParam(spec, p, 1, maxBatch)
		case "concurrency":
			e.concurrency, err = intParam(spec, p, 1, maxConcurrency)
		case "retries":
			e.retries, err = intParam(spec, p, 0, maxRetries)
		case "rate":
			r, perr := strconv.ParseFloat(p.value, 64)
			if perr != nil || math.IsNaN(r) || math.IsInf(r, 0) {
				return nil, bad(p.name, "value %q is not a number of requests per second", p.value)
			}
			if r <= 0 {
				return nil, bad(p.name, "must be positive, got %v", r)
			}
			e.rate = r
		case "timeout", "backoff":
			d, perr := time.ParseDuration(p.value)
			if perr != nil {
				return nil, bad(p.name, "value %q is not a duration (e.g. 30s, 250ms)", p.value)
			}
			if d <= 0 {
				return nil, bad(p.name, "must be positive, got %v", d)
			}
			if p.name == "timeout" {
				e.timeout = d
			} else {
				e.backoff = d
			}
		case "key_env":
			if !envNameRE.MatchString(p.value) {
				return nil, bad(p.name, "value %q is not a variable name", p.value)
			}
			e.keyEnv = p.value
		default:
			return nil, bad(p.name, "unknown parameter (openai takes url, model, dim, batch, concurrency, rate, timeout, retries, backoff, key_env)")
		}
		if err != nil {
			return nil, err
		}
	}
	for _, req := range []struct{ name, v string }{{"url", e.baseURL}, {"model", e.model}, {"dim", strconv.Itoa(e.dim)}} {
		if req.v == "" || req.v == "0" {
			return nil, bad(req.name, "required")
		}
	}
	e.endpoint = e.baseURL
	if !strings.HasSuffix(e.endpoint, "/embeddings") {
		e.endpoint += "/embeddings"
	}
	e.spec = fmt.Sprintf("openai:url=%s,model=%s,dim=%d,batch=%d,concurrency=%d,timeout=%v,retries=%d,backoff=%v",
		e.baseURL, e.model, e.dim, e.batch, e.concurrency, e.timeout, e.retries, e.backoff)
	if e.rate > 0 {
		e.spec += ",rate=" + strconv.FormatFloat(e.rate, 'g', -1, 64)
	}
	if e.keyEnv != "" {
		e.spec += ",key_env=" + e.keyEnv
	}
	// The id covers what determines the vectors: the model and its
	// dimensions. Where it is served and how fast we ask are not part of it.
	e.id = fmt.Sprintf("openai-%s-d%d-%s", slug(e.model), e.dim, hash8(openaiAlgo, fmt.Sprintf("model=%s,dim=%d", e.model, e.dim)))

	names := defaultKeyNames
	if e.keyEnv != "" {
		names = []string{e.keyEnv}
	}
	e.key, e.keySource = lookupKey(names, opts)

	lim := sharedLimits(e.spec, e.concurrency, e.rate)
	e.sem, e.limit = lim.sem, lim.limit
	e.client = opts.HTTPClient
	if e.client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = e.concurrency
		e.client = &http.Client{Transport: tr}
	}
	return e, nil
}

// openaiLimits are the request slots and the rate limiter that every
// OpenAI embedder of one spec in this process shares: a job runner's
// mappers (the local runner runs Workers of them at once) each parse
// their own embedder, and concurrency= and rate= are the model server's
// caps, not one mapper's. Processes do not share them: on YTsaurus each
// job is a process of its own, and the caps hold per job.
type openaiLimits struct {
	sem   chan struct{}
	limit *rate.Limiter // nil without rate
}

var openaiShared sync.Map // canonical spec → *openaiLimits

func sharedLimits(spec string, concurrency int, rps float64) *openaiLimits {
	if v, ok := openaiShared.Load(spec); ok {
		return v.(*openaiLimits)
	}
	l := &openaiLimits{sem: make(chan struct{}, concurrency)}
	if rps > 0 {
		l.limit = rate.NewLimiter(rate.Limit(rps), max(concurrency, 1))
	}
	v, _ := openaiShared.LoadOrStore(spec, l)
	return v.(*openaiLimits)
}

// lookupKey finds the API key: the secrets map, then the environment, then
// the environment variable a YTsaurus job gets for a secure vault entry.
func lookupKey(names []string, opts Options) (secret, string) {
	for _, n := range names {
		if v := opts.Secrets[n]; v != "" {
			return &apiKey{v}, "secrets[" + n + "]"
		}
	}
	for _, n := range names {
		if v := opts.Getenv(n); v != "" {
			return &apiKey{v}, "$" + n
		}
	}
	for _, n := range names {
		if v := opts.Getenv("YT_SECURE_VAULT_" + n); v != "" {
			return &apiKey{v}, "$YT_SECURE_VAULT_" + n
		}
	}
	return nil, ""
}

func (e *OpenAI) ID() string   { return e.id }
func (e *OpenAI) Spec() string { return e.spec }
func (e *OpenAI) Dims() int    { return e.dim }

// PreferredBatch is the number of texts per Embed call that keeps every
// request slot busy: batch × concurrency.
func (e *OpenAI) PreferredBatch() int { return e.batch * e.concurrency }

// BatchSize is the most texts per request (the batch parameter).
func (e *OpenAI) BatchSize() int { return e.batch }

// Concurrency is the most requests in flight across all Embed calls (the
// concurrency parameter).
func (e *OpenAI) Concurrency() int { return e.concurrency }

// HasKey reports whether an API key was found, and where (a variable or
// secret name, never the key).
func (e *OpenAI) HasKey() (bool, string) { return e.key != nil, e.keySource }

// Embed sends the texts in batches of at most batch, with at most
// concurrency requests in flight across all Embed calls of e, and returns the
// vectors in input order. The first batch that fails for good cancels the
// others; the error returned is that of the earliest failed batch.
func (e *OpenAI) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	n := len(texts)
	if n == 0 {
		return [][]float32{}, nil
	}
	out := make([][]float32, n)
	slab := make([]float32, n*e.dim)
	for i := range out {
		out[i] = slab[i*e.dim : (i+1)*e.dim : (i+1)*e.dim]
	}
	nb := (n + e.batch - 1) / e.batch
	errs := make([]error, nb)
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := e.sem
	var wg sync.WaitGroup
dispatch:
	for b := range nb {
		select {
		case sem <- struct{}{}:
		case <-bctx.Done():
			break dispatch
		}
		wg.Go(func() {
			defer func() { <-sem }()
			lo, hi := b*e.batch, min((b+1)*e.batch, n)
			if err := e.embedBatch(bctx, texts[lo:hi], lo, out[lo:hi]); err != nil {
				errs[b] = err
				cancel()
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("embedder: %s: %w", e.id, err)
	}
	var cancelled error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if errors.Is(err, context.Canceled) {
			cancelled = err // a batch we stopped because another failed
			continue
		}
		e.failed.Add(1)
		return nil, err
	}
	if cancelled != nil {
		return nil, cancelled
	}
	e.vectors.Add(int64(n))
	return out, nil
}

type embedRequest struct {
	Model          string   `json:"model"`
	Input          []string `json:"input"`
	EncodingFormat string   `json:"encoding_format"`
}

// attemptError is the failure of one attempt, and whether (and when) to
// try again.
type attemptError struct {
	err        error
	retry      bool
	retryAfter time.Duration // from Retry-After; 0 when absent
}

// StatusError is an HTTP error answer that was not retried (or the last of
// the retries).
type StatusError struct {
	Code    int
	Message string // the server's error message or the start of its body
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("HTTP %d %s: %s", e.Code, http.StatusText(e.Code), e.Message)
}

// embedBatch embeds texts[i], which is input base+i, into dst[i], retrying
// what can be retried.
func (e *OpenAI) embedBatch(ctx context.Context, texts []string, base int, dst [][]float32) error {
	body, err := json.Marshal(embedRequest{Model: e.model, Input: texts, EncodingFormat: "float"})
	if err != nil {
		return fmt.Errorf("embedder: %s: inputs %d..%d: %w", e.id, base, base+len(texts)-1, err)
	}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			e.retried.Add(1)
		}
		ae := e.attempt(ctx, body, base, dst)
		if ae == nil {
			return nil
		}
		where := fmt.Sprintf("embedder: %s: inputs %d..%d", e.id, base, base+len(texts)-1)
		if !ae.retry {
			return fmt.Errorf("%s: %w", where, ae.err)
		}
		if attempt >= e.retries {
			return fmt.Errorf("%s: giving up after %d attempts: %w", where, attempt+1, ae.err)
		}
		wait := e.backoffFor(attempt)
		if ae.retryAfter > 0 {
			wait = min(ae.retryAfter, maxRetryAfter)
		}
		e.log.Warn("embedder: retrying", "embedder", e.id, "inputs", fmt.Sprintf("%d..%d", base, base+len(texts)-1),
			"attempt", attempt+1, "wait", wait, "err", ae.err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: waiting to retry after %v: %w", where, ae.err, ctx.Err())
		case <-t.C:
		}
	}
}

// backoffFor is the wait before retry attempt+1: backoff·2^attempt, at most
// maxBackoff, with jitter in [½, 1] of that.
func (e *OpenAI) backoffFor(attempt int) time.Duration {
	d := e.backoff << min(attempt, 20)
	if d <= 0 || d > maxBackoff {
		d = maxBackoff
	}
	return d/2 + rand.N(d/2+1)
}

func (e *OpenAI) attempt(ctx context.Context, body []byte, base int, dst [][]float32) *attemptError {
	actx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, e.endpoint, bytes.NewReader(body))
	if err != nil {
		return &attemptError{err: err}
	}
	if e.limit != nil {
		if err := e.limit.Wait(ctx); err != nil {
			return &attemptError{err: err}
		}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if e.key != nil {
		req.Header.Set("Authorization", "Bearer "+e.key.v)
	}
	e.requests.Add(1)
	start := time.Now()
	resp, err := e.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return &attemptError{err: ctx.Err()}
		}
		if actx.Err() != nil {
			return &attemptError{err: fmt.Errorf("no answer within %v", e.timeout), retry: true}
		}
		return &attemptError{err: err, retry: true}
	}
	defer resp.Body.Close()
	limit := int64(1<<20 + len(dst)*e.dim*64)
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		if ctx.Err() != nil {
			return &attemptError{err: ctx.Err()}
		}
		if actx.Err() != nil {
			return &attemptError{err: fmt.Errorf("response not read within %v", e.timeout), retry: true}
		}
		return &attemptError{err: fmt.Errorf("reading response: %w", err), retry: true}
	}
	e.log.Debug("embedder: response", "embedder", e.id, "status", resp.StatusCode, "inputs", len(dst), "bytes", len(data), "took", time.Since(start))
	if resp.StatusCode != http.StatusOK {
		msg := errorMessage(data)
		if e.key != nil && e.key.v != "" {
			msg = strings.ReplaceAll(msg, e.key.v, "[redacted]") // some servers echo the key
		}
		se := &StatusError{Code: resp.StatusCode, Message: msg}
		switch {
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode >= 500:
			return &attemptError{err: se, retry: true, retryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
		}
		return &attemptError{err: se}
	}
	if int64(len(data)) > limit {
		return &attemptError{err: fmt.Errorf("%w: response larger than %d bytes", ErrBadResponse, limit)}
	}
	if err := decodeResponse(data, base, e.dim, dst); err != nil {
		return &attemptError{err: err}
	}
	return nil
}

// errorMessage extracts {"error":{"message":…}} (OpenAI, vLLM), {"error":"…"}
// (TEI, Ollama) or {"message":…}, else the start of the body.
func errorMessage(data []byte) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(data, &v) == nil {
		var s string
		var obj struct {
			Message string `json:"message"`
		}
		switch {
		case json.Unmarshal(v.Error, &s) == nil && s != "":
			return s
		case json.Unmarshal(v.Error, &obj) == nil && obj.Message != "":
			return obj.Message
		case v.Message != "":
			return v.Message
		}
	}
	s := strings.TrimSpace(string(data))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	if s == "" {
		s = "(empty body)"
	}
	return strconv.Quote(s)
}

// parseRetryAfter reads delay-seconds or an HTTP date; 0 when absent or
// unreadable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 || math.IsNaN(s) {
			return time.Millisecond // retry now, but say that it was asked for
		}
		return time.Duration(math.Min(s, maxRetryAfter.Seconds()) * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), time.Millisecond)
	}
	return 0
}

type embedResponse struct {
	Data []struct {
		Index     *int            `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
}

// decodeResponse fills dst from an embeddings response to len(dst) inputs
// numbered from base, checking that every input has exactly one embedding of
// dim finite values.
func decodeResponse(data []byte, base, dim int, dst [][]float32) error {
	var r embedResponse
	if err := json.Unmarshal(data, &r); err != nil {
		// Python servers write NaN and Infinity bare, which JSON has not:
		// quote them so the vector, and its input, can be named.
		fixed, changed := quoteNonFinite(data)
		if !changed {
			return fmt.Errorf("%w: %v", ErrBadResponse, err)
		}
		if err := json.Unmarshal(fixed, &r); err != nil {
			return fmt.Errorf("%w: %v", ErrBadResponse, err)
		}
	}
	n := len(dst)
	seen := make([]bool, n)
	for pos, d := range r.Data {
		i := pos
		if d.Index != nil {
			i = *d.Index
		}
		if i < 0 || i >= n {
			return fmt.Errorf("%w: embedding index %d out of range for %d inputs", ErrBadResponse, i, n)
		}
		if seen[i] {
			return fmt.Errorf("%w: two embeddings for input %d", ErrBadResponse, base+i)
		}
		seen[i] = true
		v, err := parseVector(d.Embedding, dst[i][:0:dim])
		if err != nil {
			return fmt.Errorf("%w: input %d: %v", ErrBadResponse, base+i, err)
		}
		if err := CheckVector(base+i, v, dim); err != nil {
			return err
		}
	}
	if len(r.Data) != n {
		var missing []string
		for i, ok := range seen {
			if !ok && len(missing) < 5 {
				missing = append(missing, strconv.Itoa(base+i))
			}
		}
		return fmt.Errorf("%w: %d embeddings for %d inputs; none for input %s", ErrBadResponse, len(r.Data), n, strings.Join(missing, ", "))
	}
	return nil
}

// parseVector parses a JSON array of numbers (or of the strings "NaN",
// "Infinity", "-Infinity") or a base64 string of little-endian float32s,
// appending to dst while it has room; it returns everything parsed (a longer
// vector than dst's capacity is returned in a new slice, for CheckVector to
// report).
func parseVector(raw json.RawMessage, dst []float32) ([]float32, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		// The one escape a base64 string can hold is "\/": unquote only then.
		s := raw[1 : len(raw)-1]
		if bytes.IndexByte(s, '\\') >= 0 {
			var u string
			if err := json.Unmarshal(raw, &u); err != nil {
				return nil, err
			}
			s = []byte(u)
		}
		b := make([]byte, base64.StdEncoding.DecodedLen(len(s)))
		n, err := base64.StdEncoding.Decode(b, s)
		b = b[:n]
		if err != nil || len(b)%4 != 0 {
			return nil, fmt.Errorf("embedding is a string but not base64 float32s")
		}
		for i := 0; i < len(b); i += 4 {
			dst = append(dst, math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))
		}
		return dst, nil
	}
	if len(raw) < 2 || raw[0] != '[' || raw[len(raw)-1] != ']' {
		return nil, fmt.Errorf("embedding is not an array")
	}
	body := bytes.TrimSpace(raw[1 : len(raw)-1])
	if len(body) == 0 {
		return dst, nil
	}
	for len(body) > 0 {
		var tok []byte
		if i := bytes.IndexByte(body, ','); i >= 0 {
			tok, body = bytes.TrimSpace(body[:i]), body[i+1:]
			if len(bytes.TrimSpace(body)) == 0 {
				return nil, fmt.Errorf("embedding array ends with a comma")
			}
		} else {
			tok, body = bytes.TrimSpace(body), nil
		}
		if len(tok) >= 2 && tok[0] == '"' && tok[len(tok)-1] == '"' {
			tok = tok[1 : len(tok)-1]
			switch string(tok) {
			case "NaN", "Infinity", "-Infinity", "+Infinity":
			default:
				return nil, fmt.Errorf("embedding value %q is not a number", tok)
			}
		}
		f, err := strconv.ParseFloat(string(tok), 32)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return nil, fmt.Errorf("embedding value %q is not a number", tok)
		}
		// ErrRange: f is ±Inf (overflow) or 0 (underflow); CheckVector
		// rejects the former.
		dst = append(dst, float32(f))
	}
	return dst, nil
}

// quoteNonFinite rewrites the bare tokens NaN, Infinity and -Infinity
// outside strings as JSON strings.
func quoteNonFinite(data []byte) ([]byte, bool) {
	var out []byte
	changed := false
	inStr, esc := false, false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if inStr {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
			out = append(out, c)
			continue
		}
		if c == '"' {
			inStr = true
			out = append(out, c)
			continue
		}
		matched := false
		for _, w := range []string{"NaN", "Infinity", "-Infinity"} {
			if bytes.HasPrefix(data[i:], []byte(w)) {
				out = append(out, '"')
				out = append(out, w...)
				out = append(out, '"')
				i += len(w) - 1
				matched, changed = true, true
				break
			}
		}
		if !matched {
			out = append(out, c)
		}
	}
	return out, changed
}
