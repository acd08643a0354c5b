package embedder

import (
	"context"
	"fmt"
	"math"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/pillarkit/pillar/jobs/chunker"
)

// hashAlgo versions the hash embedder's features and weighting (part of its
// id, together with chunker.TokenizerVersion).
const hashAlgo = "hash/1"

const defaultHashDim = 384

// Hash is the feature-hashing embedder (see the package documentation for
// the exact algorithm). It needs no model and is safe for concurrent use.
type Hash struct {
	dim      int
	spec, id string
}

// NewHash returns the hash embedder of dim dimensions (dim ≥ 1).
func NewHash(dim int) (*Hash, error) {
	h, err := newHash(fmt.Sprintf("hash:dim=%d", dim), []param{{"dim", fmt.Sprint(dim)}})
	if err != nil {
		return nil, err
	}
	return h, nil
}

func newHash(spec string, params []param) (*Hash, error) {
	dim := defaultHashDim
	for _, p := range params {
		if p.name != "dim" {
			return nil, &SpecError{Spec: spec, Param: p.name, Reason: "unknown parameter (hash takes dim)", Err: ErrBadParam}
		}
		v, err := intParam(spec, p, 1, MaxDim)
		if err != nil {
			return nil, err
		}
		dim = v
	}
	canon := fmt.Sprintf("hash:dim=%d", dim)
	return &Hash{dim: dim, spec: canon, id: fmt.Sprintf("hash-d%d-%s", dim, hash8(hashAlgo, chunker.TokenizerVersion, canon))}, nil
}

func (h *Hash) ID() string   { return h.id }
func (h *Hash) Spec() string { return h.spec }
func (h *Hash) Dims() int    { return h.dim }

// PreferredBatch is a batch size for Embed calls; the hash embedder works
// per text, so any size is as fast.
func (h *Hash) PreferredBatch() int { return 256 }

// Embed embeds each text; it checks ctx between texts.
func (h *Hash) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	slab := make([]float32, len(texts)*h.dim)
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)
	for i, t := range texts {
		if i%64 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("embedder: %s: %w", h.id, err)
			}
		}
		out[i] = slab[i*h.dim : (i+1)*h.dim : (i+1)*h.dim]
		h.embed(s, t, out[i])
	}
	return out, nil
}

// EmbedTo writes the vector of text into dst (len(dst) must be Dims()).
func (h *Hash) EmbedTo(dst []float32, text string) {
	if len(dst) != h.dim {
		panic(fmt.Sprintf("embedder: %s: EmbedTo with %d dimensions", h.id, len(dst)))
	}
	s := scratchPool.Get().(*scratch)
	h.embed(s, text, dst)
	scratchPool.Put(s)
}

type scratch struct {
	toks   []chunker.Span
	buf    []byte   // lower-cased words, back to back
	ends   []int    // ends[k] is the end of word k in buf
	hashes []uint64 // one per feature, in text order
	keys   []uint64 // open-addressing table of distinct features …
	counts []int32  // … and their term frequencies (0: empty slot)
	order  []int32  // slots of distinct features in order of first occurrence
	acc    []float64
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

func (h *Hash) embed(s *scratch, text string, dst []float32) {
	// Words: lower-cased Word and Ideograph tokens.
	s.toks = chunker.AppendTokens(s.toks[:0], text)
	s.buf, s.ends = s.buf[:0], s.ends[:0]
	for _, t := range s.toks {
		if t.Kind == chunker.Punct {
			continue
		}
		s.buf = appendLower(s.buf, text[t.Start:t.End])
		s.ends = append(s.ends, len(s.buf))
	}
	// Features: unigrams and bigrams, hashed.
	s.hashes = s.hashes[:0]
	start := 0
	for k, end := range s.ends {
		s.hashes = append(s.hashes, mix(fnv(fnvOffset, s.buf[start:end])))
		if k > 0 {
			prev := 0
			if k > 1 {
				prev = s.ends[k-2]
			}
			f := fnv(fnvOffset, s.buf[prev:start])
			f = fnv(f, []byte{' '})
			s.hashes = append(s.hashes, mix(fnv(f, s.buf[start:end])))
		}
		start = end
	}
	// Term frequencies, counted in an open-addressing table; distinct
	// features are kept in order of first occurrence.
	size := 16
	for size < 2*len(s.hashes) {
		size <<= 1
	}
	if cap(s.counts) < size {
		s.keys, s.counts = make([]uint64, size), make([]int32, size)
	}
	keys, counts := s.keys[:size], s.counts[:size]
	clear(counts)
	s.order = s.order[:0]
	for _, f := range s.hashes {
		slot := int(f>>32) & (size - 1)
		for counts[slot] != 0 && keys[slot] != f {
			slot = (slot + 1) & (size - 1)
		}
		if counts[slot] == 0 {
			keys[slot] = f
			s.order = append(s.order, int32(slot))
		}
		counts[slot]++
	}
	if cap(s.acc) < h.dim {
		s.acc = make([]float64, h.dim)
	}
	acc := s.acc[:h.dim]
	clear(acc)
	for _, slot := range s.order {
		f := keys[slot]
		w := 1 + math.Log(float64(counts[slot]))
		if f>>63 != 0 {
			w = -w
		}
		acc[uint32(f)%uint32(h.dim)] += w
	}
	var norm float64
	for _, x := range acc {
		norm += x * x
	}
	if norm == 0 {
		clear(dst)
		return
	}
	inv := 1 / math.Sqrt(norm)
	for i, x := range acc {
		dst[i] = float32(x * inv)
	}
}

// appendLower appends s lower-cased rune by rune (unicode.ToLower).
func appendLower(dst []byte, s string) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			dst = append(dst, c)
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		dst = utf8.AppendRune(dst, unicode.ToLower(r))
		i += w
	}
	return dst
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// fnv continues a 64-bit FNV-1a hash over b.
func fnv(h uint64, b []byte) uint64 {
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime
	}
	return h
}

// mix is MurmurHash3's 64-bit finalizer: FNV-1a's low bits are weak, and the
// bucket is taken from the low 32 bits.
func mix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}
