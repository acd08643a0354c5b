package embedder

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
)

// Embedder is an embedding model version: a named model with fixed
// parameters. Implementations are safe for concurrent use.
type Embedder interface {
	// ID is derived from the configuration that determines the vectors
	// (same configuration ⇒ same id). It is short, lower-case and safe as a
	// table path component, e.g. "hash-d384-5d1c0a9e". It never holds a
	// secret.
	ID() string
	// Spec is the canonical spec string; Parse(e.Spec(), …) has the same ID.
	// It never holds a secret.
	Spec() string
	// Dims is the length of every vector.
	Dims() int
	// Embed returns one vector of Dims() finite values per text, in input
	// order. No texts, no vectors (and no request). A vector the model got
	// wrong is reported as a *VectorError naming the input's index.
	Embed(ctx context.Context, texts []string) ([][]float32, error)
}

// Errors. Parse returns a *SpecError wrapping ErrUnknownModel or
// ErrBadParam; Embed returns a *VectorError (matching ErrBadVector) for a
// wrong vector and an error matching ErrBadResponse for a response that does
// not answer the request.
var (
	ErrUnknownModel = errors.New("unknown embedder")
	ErrBadParam     = errors.New("bad parameter")
	ErrBadVector    = errors.New("bad vector")
	ErrBadResponse  = errors.New("bad response")
)

// SpecError is a spec that does not parse: it names the spec, the parameter
// at fault (empty when the fault is the embedder name) and why.
type SpecError struct {
	Spec   string
	Param  string
	Reason string
	Err    error // ErrUnknownModel or ErrBadParam
}

func (e *SpecError) Error() string {
	if e.Param == "" {
		return fmt.Sprintf("embedder: spec %q: %s", e.Spec, e.Reason)
	}
	return fmt.Sprintf("embedder: spec %q: parameter %s: %s", e.Spec, e.Param, e.Reason)
}

func (e *SpecError) Unwrap() error { return e.Err }

// VectorError is a vector that cannot be stored: wrong length, NaN or
// infinite values. Index is the position of its text in the texts given to
// Embed, so a caller can name the page and chunk.
type VectorError struct {
	Index  int
	Reason string
}

func (e *VectorError) Error() string {
	return fmt.Sprintf("embedder: input %d: %s", e.Index, e.Reason)
}

// Is makes errors.Is(err, ErrBadVector) true.
func (e *VectorError) Is(target error) bool { return target == ErrBadVector }

// CheckVector returns a *VectorError for input index if v does not have dims
// finite values.
func CheckVector(index int, v []float32, dims int) error {
	if len(v) != dims {
		return &VectorError{Index: index, Reason: fmt.Sprintf("vector has %d dimensions, want %d", len(v), dims)}
	}
	for i, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return &VectorError{Index: index, Reason: fmt.Sprintf("vector value %d is %v", i, x)}
		}
	}
	return nil
}

// Options configure Parse beyond the spec string: where secrets come from,
// and the logger and HTTP client of the openai embedder.
type Options struct {
	// Secrets is consulted first for the API key (the YTsaurus job's secure
	// vault). The default value is nil: only the environment is consulted.
	Secrets map[string]string
	// Getenv reads the environment. The default value is os.Getenv.
	Getenv func(string) string
	// Logger receives retries (Warn) and requests (Debug). The default value
	// is a logger that discards everything.
	Logger *slog.Logger
	// HTTPClient sends the openai embedder's requests; its Timeout should be
	// zero (the spec's timeout applies per attempt). The default value is a
	// client of its own whose transport keeps concurrency idle connections.
	HTTPClient *http.Client
}

func (o *Options) ensureDefaults() {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// Parse returns the embedder a spec describes: a name, then optionally ':'
// and comma-separated name=value parameters:
//
//	hash:dim=384
//	openai:url=http://127.0.0.1:8000/v1,model=bge-small,dim=384,batch=64,concurrency=4
//
// secrets (may be nil) is consulted for the openai API key before the
// environment; see the package documentation.
func Parse(spec string, secrets map[string]string) (Embedder, error) {
	return New(spec, Options{Secrets: secrets})
}

// New is Parse with all options.
func New(spec string, opts Options) (Embedder, error) {
	opts.ensureDefaults()
	name, params, err := splitSpec(spec)
	if err != nil {
		return nil, err
	}
	switch name {
	case "hash":
		return newHash(spec, params)
	case "openai":
		return newOpenAI(spec, params, opts)
	}
	return nil, &SpecError{Spec: spec, Reason: fmt.Sprintf("unknown embedder %q (known: hash, openai)", name), Err: ErrUnknownModel}
}

// WithConcurrency returns spec with its requests in flight set to n: the
// concurrency parameter of a remote model (openai), replacing one given.
// A local model (hash) computes on the calling goroutine and takes no such
// parameter: its spec comes back unchanged. n must be in [1, 1024].
func WithConcurrency(spec string, n int) (string, error) {
	name, params, err := splitSpec(spec)
	if err != nil {
		return "", err
	}
	if n < 1 || n > maxConcurrency {
		return "", &SpecError{Spec: spec, Param: "concurrency", Reason: fmt.Sprintf("must be in [1, %d], got %d", maxConcurrency, n), Err: ErrBadParam}
	}
	if name != "openai" {
		return spec, nil
	}
	parts := make([]string, 0, len(params)+1)
	for _, p := range params {
		if p.name != "concurrency" {
			parts = append(parts, p.name+"="+p.value)
		}
	}
	parts = append(parts, "concurrency="+strconv.Itoa(n))
	return name + ":" + strings.Join(parts, ","), nil
}

// Names lists the known embedders with example parameters.
func Names() []string {
	return []string{
		"hash:dim=384",
		"openai:url=http://127.0.0.1:8000/v1,model=bge-small,dim=384,batch=64,concurrency=4,timeout=1m0s,retries=5,backoff=500ms",
	}
}

type param struct{ name, value string }

// splitSpec splits "name:k=v,k=v" and rejects empty and duplicate names.
func splitSpec(spec string) (string, []param, error) {
	s := strings.TrimSpace(spec)
	name, rest, hasParams := strings.Cut(s, ":")
	if name == "" {
		return "", nil, &SpecError{Spec: spec, Reason: "empty embedder name", Err: ErrUnknownModel}
	}
	if !hasParams {
		return name, nil, nil
	}
	var params []param
	seen := map[string]bool{}
	for _, kv := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return "", nil, &SpecError{Spec: spec, Param: strconv.Quote(kv), Reason: "want name=value", Err: ErrBadParam}
		}
		if seen[k] {
			return "", nil, &SpecError{Spec: spec, Param: k, Reason: "given twice", Err: ErrBadParam}
		}
		seen[k] = true
		params = append(params, param{k, v})
	}
	return name, params, nil
}

// Limits on numeric parameters.
const (
	MaxDim         = 1 << 16
	maxBatch       = 1 << 14
	maxConcurrency = 1024
	maxRetries     = 100
)

// intParam parses an integer parameter in [minimum, maximum].
func intParam(spec string, p param, minimum, maximum int) (int, error) {
	v, err := strconv.Atoi(p.value)
	if err != nil {
		return 0, &SpecError{Spec: spec, Param: p.name, Reason: fmt.Sprintf("value %q is not an integer", p.value), Err: ErrBadParam}
	}
	if v < minimum {
		return 0, &SpecError{Spec: spec, Param: p.name, Reason: fmt.Sprintf("must be at least %d, got %d", minimum, v), Err: ErrBadParam}
	}
	if v > maximum {
		return 0, &SpecError{Spec: spec, Param: p.name, Reason: fmt.Sprintf("must be at most %d, got %d", maximum, v), Err: ErrBadParam}
	}
	return v, nil
}

// hash8 is the first 8 hex digits of SHA-256 over the parts.
func hash8(parts ...string) string {
	sum := sha256.Sum256([]byte("pillar/embedder\x00" + strings.Join(parts, "\x00")))
	return hex.EncodeToString(sum[:4])
}

// slug makes s safe as a table path component: lower-case letters and
// digits, other runs become one '-', at most 40 bytes.
func slug(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(r)
			if b.Len() >= 40 {
				break
			}
			continue
		}
		dash = true
	}
	if b.Len() == 0 {
		return "model"
	}
	return b.String()
}
