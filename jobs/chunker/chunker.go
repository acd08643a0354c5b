package chunker

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Chunk is one passage of a text: Text == text[Start:End], with Start and
// End byte offsets into the text given to Chunk. Tokens is the passage's
// token count under the package tokenizer.
type Chunk struct {
	Text       string
	Start, End int
	Tokens     int
}

// Chunker is a chunker version: a named chunker with fixed parameters.
// Implementations are immutable and safe for concurrent use.
type Chunker interface {
	// ID is derived from the full configuration: equal configurations have
	// equal ids, different ones (almost surely) different ids. It is short,
	// lower-case and safe as a table path component, e.g.
	// "recursive-s512-o64-3f9a1c2b".
	ID() string
	// Spec is the canonical spec string: Parse(c.Spec()) has the same ID.
	Spec() string
	// Chunk splits text into passages, in text order. Empty text (or text of
	// white space only) has no chunks. The result is a pure function of the
	// configuration and text.
	Chunk(text string) []Chunk
}

// Errors of Parse. Every error Parse returns is a *SpecError wrapping one of
// these.
var (
	ErrUnknownChunker = errors.New("unknown chunker")
	ErrBadParam       = errors.New("bad parameter")
)

// SpecError is a spec that does not parse: it names the spec, the parameter
// at fault (empty when the fault is the chunker name) and why.
type SpecError struct {
	Spec   string
	Param  string
	Reason string
	Err    error // ErrUnknownChunker or ErrBadParam
}

func (e *SpecError) Error() string {
	if e.Param == "" {
		return fmt.Sprintf("chunker: spec %q: %s", e.Spec, e.Reason)
	}
	return fmt.Sprintf("chunker: spec %q: parameter %s: %s", e.Spec, e.Param, e.Reason)
}

func (e *SpecError) Unwrap() error { return e.Err }

// Names lists the known chunkers with their default parameters.
func Names() []string {
	return []string{
		fmt.Sprintf("recursive:size=%d,overlap=%d", defaultRecursiveSize, defaultRecursiveOverlap),
		fmt.Sprintf("tokens:size=%d,overlap=%d", defaultTokensSize, defaultTokensOverlap),
	}
}

// MaxSize is the largest chunk size a spec may ask for, in tokens.
const MaxSize = 1 << 20

const (
	defaultRecursiveSize    = 512
	defaultRecursiveOverlap = 64
	defaultTokensSize       = 256
	defaultTokensOverlap    = 32
)

// Parse returns the chunker a spec describes: a name, then optionally ':' and
// comma-separated name=value parameters, e.g. "recursive:size=512,overlap=64"
// or "tokens:size=256,overlap=32". Both chunkers take size (tokens per chunk,
// at least 1) and overlap (tokens shared with the previous chunk, below
// size); an omitted parameter takes its default ("recursive" alone is
// "recursive:size=512,overlap=64", "tokens" alone "tokens:size=256,overlap=32").
func Parse(spec string) (Chunker, error) {
	name, params, err := splitSpec(spec)
	if err != nil {
		return nil, err
	}
	var size, overlap int
	switch name {
	case "recursive":
		size, overlap = defaultRecursiveSize, defaultRecursiveOverlap
	case "tokens":
		size, overlap = defaultTokensSize, defaultTokensOverlap
	default:
		return nil, &SpecError{Spec: spec, Reason: fmt.Sprintf("unknown chunker %q (known: recursive, tokens)", name), Err: ErrUnknownChunker}
	}
	for _, p := range params {
		v, err := strconv.Atoi(p.value)
		switch p.name {
		case "size", "overlap":
			if err != nil {
				return nil, &SpecError{Spec: spec, Param: p.name, Reason: fmt.Sprintf("value %q is not an integer", p.value), Err: ErrBadParam}
			}
		default:
			return nil, &SpecError{Spec: spec, Param: p.name, Reason: fmt.Sprintf("unknown parameter (%s takes size, overlap)", name), Err: ErrBadParam}
		}
		if p.name == "size" {
			size = v
		} else {
			overlap = v
		}
	}
	switch {
	case size > MaxSize:
		return nil, &SpecError{Spec: spec, Param: "size", Reason: fmt.Sprintf("must be at most %d, got %d", MaxSize, size), Err: ErrBadParam}
	case size < 1:
		return nil, &SpecError{Spec: spec, Param: "size", Reason: fmt.Sprintf("must be at least 1, got %d", size), Err: ErrBadParam}
	case overlap < 0:
		return nil, &SpecError{Spec: spec, Param: "overlap", Reason: fmt.Sprintf("must not be negative, got %d", overlap), Err: ErrBadParam}
	case overlap >= size:
		return nil, &SpecError{Spec: spec, Param: "overlap", Reason: fmt.Sprintf("must be below size %d, got %d", size, overlap), Err: ErrBadParam}
	}
	if name == "tokens" {
		return newTokens(size, overlap), nil
	}
	return newRecursive(size, overlap), nil
}

// MustParse is Parse for specs known to be valid; it panics on error.
func MustParse(spec string) Chunker {
	c, err := Parse(spec)
	if err != nil {
		panic(err)
	}
	return c
}

type param struct{ name, value string }

// splitSpec splits "name:k=v,k=v" and rejects empty and duplicate names.
func splitSpec(spec string) (string, []param, error) {
	s := strings.TrimSpace(spec)
	name, rest, hasParams := strings.Cut(s, ":")
	if name == "" {
		return "", nil, &SpecError{Spec: spec, Reason: "empty chunker name", Err: ErrUnknownChunker}
	}
	var params []param
	if !hasParams {
		return name, nil, nil
	}
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

// makeID derives an id from the canonical spec and the algorithm version:
// "<name>-s<size>-o<overlap>-<first 8 hex digits of SHA-256>".
func makeID(name, algo string, size, overlap int, spec string) string {
	sum := sha256.Sum256([]byte("pillar/chunker\x00" + algo + "\x00" + TokenizerVersion + "\x00" + spec))
	return fmt.Sprintf("%s-s%d-o%d-%s", name, size, overlap, hex.EncodeToString(sum[:4]))
}

// makeChunk turns the token range [a, b) into a chunk.
func makeChunk(text string, toks []Span, a, b int) Chunk {
	s, e := toks[a].Start, toks[b-1].End
	return Chunk{Text: text[s:e], Start: s, End: e, Tokens: b - a}
}
