package embedder

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	stdfnv "hash/fnv"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unicode"

	"github.com/pillarkit/pillar/jobs/chunker"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden files under testdata/ with the actual output")

func init() { flag.BoolVar(rewrite, "update", false, "same as -rewrite") }

func cosine(a, b []float32) float64 {
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	return dot / math.Sqrt(na*nb)
}

func mustHash(t testing.TB, spec string) *Hash {
	t.Helper()
	e, err := Parse(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	return e.(*Hash)
}

// referenceHash is the algorithm of the package documentation written the
// slow, obvious way (feature strings in a map, the standard library's FNV),
// to check that the documentation and the code agree.
func referenceHash(text string, dim int) []float32 {
	var words []string
	for _, t := range chunker.Tokenize(text) {
		if t.Kind == chunker.Punct {
			continue
		}
		words = append(words, strings.Map(unicode.ToLower, text[t.Start:t.End]))
	}
	tf := map[uint64]int{}
	var hs []uint64 // in order of first occurrence
	feature := func(s string) {
		f := stdfnv.New64a()
		f.Write([]byte(s))
		h := f.Sum64()
		h ^= h >> 33
		h *= 0xff51afd7ed558ccd
		h ^= h >> 33
		h *= 0xc4ceb9fe1a85ec53
		h ^= h >> 33
		if tf[h] == 0 {
			hs = append(hs, h)
		}
		tf[h]++
	}
	for i, w := range words {
		feature(w)
		if i > 0 {
			feature(words[i-1] + " " + w)
		}
	}
	v := make([]float64, dim)
	for _, h := range hs {
		w := 1 + math.Log(float64(tf[h]))
		if h>>63 == 1 {
			w = -w
		}
		v[uint32(h)%uint32(dim)] += w
	}
	var n float64
	for _, x := range v {
		n += x * x
	}
	out := make([]float32, dim)
	if n == 0 {
		return out
	}
	for i, x := range v {
		out[i] = float32(x / math.Sqrt(n))
	}
	return out
}

var sampleTexts = []string{
	"",
	"...",
	"PostgreSQL",
	"The quick brown fox jumps over the lazy dog. The dog sleeps.",
	"CREATE INDEX CONCURRENTLY idx ON orders (customer_id) WHERE NOT shipped;",
	"Ünïcödé TEXT with ΣΊΣΥΦΟΣ and 日本語のテキスト, repeated repeated repeated.",
	strings.Repeat("vacuum analyze ", 50),
}

func TestHashMatchesDocumentedAlgorithm(t *testing.T) {
	for _, dim := range []int{1, 7, 64, 384, 1000} {
		h := mustHash(t, fmt.Sprintf("hash:dim=%d", dim))
		vecs, err := h.Embed(context.Background(), sampleTexts)
		if err != nil {
			t.Fatal(err)
		}
		for i, text := range sampleTexts {
			want := referenceHash(text, dim)
			for j := range want {
				if math.Abs(float64(vecs[i][j]-want[j])) > 1e-6 {
					t.Fatalf("dim %d, text %q: value %d is %v, reference %v", dim, text, j, vecs[i][j], want[j])
				}
			}
		}
	}
}

func TestHashUnitNormAndDeterminism(t *testing.T) {
	h := mustHash(t, "hash:dim=384")
	texts := append([]string{}, sampleTexts...)
	for i := range 200 {
		texts = append(texts, fmt.Sprintf("document %d about topic %d with words %d and %d", i, i%7, i*i, i+3))
	}
	first, err := h.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range first {
		if err := CheckVector(i, v, 384); err != nil {
			t.Fatal(err)
		}
		var n float64
		for _, x := range v {
			n += float64(x) * float64(x)
		}
		words := 0
		for _, tok := range chunker.Tokenize(texts[i]) {
			if tok.Kind != chunker.Punct {
				words++
			}
		}
		switch {
		case words == 0 && n != 0:
			t.Errorf("text %q without words has norm² %v, want the zero vector", texts[i], n)
		case words > 0 && math.Abs(n-1) > 1e-5:
			t.Errorf("text %q has norm² %v, want 1", texts[i], n)
		}
	}
	// The same vectors from many goroutines (run with -race) and one by one.
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < len(texts); i += 8 {
				v := make([]float32, 384)
				h.EmbedTo(v, texts[i])
				for j := range v {
					if v[j] != first[i][j] {
						t.Errorf("text %d: value %d differs between calls", i, j)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

func TestHashSimilarity(t *testing.T) {
	h := mustHash(t, "hash")
	for _, tc := range []struct{ a, near, far string }{
		{
			"How to create an index on a table in PostgreSQL",
			"Creating an index on a PostgreSQL table: CREATE INDEX builds the index on a table",
			"The recipe calls for two cups of flour, sugar and a pinch of salt",
		},
		{
			"Autovacuum removes dead tuples and updates planner statistics",
			"The autovacuum daemon removes dead tuples; it also updates statistics for the planner",
			"Replication slots keep WAL segments until every standby has received them",
		},
		{
			"the cat sat on the mat",
			"the cat sat on a mat",
			"stock markets fell sharply on monday",
		},
	} {
		v, err := h.Embed(context.Background(), []string{tc.a, tc.near, tc.far})
		if err != nil {
			t.Fatal(err)
		}
		near, far := cosine(v[0], v[1]), cosine(v[0], v[2])
		t.Logf("cos(a, near) %.3f, cos(a, far) %.3f", near, far)
		if near < far+0.2 {
			t.Errorf("cos(a, near) = %.3f is not clearly above cos(a, far) = %.3f\na: %s\nnear: %s\nfar: %s", near, far, tc.a, tc.near, tc.far)
		}
	}
}

func TestHashGolden(t *testing.T) {
	// Pins the vectors: a change here changes every stored embedding and must
	// come with a new hashAlgo (and so a new id).
	var b strings.Builder
	for _, dim := range []int{8, 384} {
		h := mustHash(t, fmt.Sprintf("hash:dim=%d", dim))
		fmt.Fprintf(&b, "%s %s\n", h.ID(), h.Spec())
		vecs, err := h.Embed(context.Background(), sampleTexts)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range vecs {
			sum := sha256.New()
			for _, x := range v {
				binary.Write(sum, binary.LittleEndian, math.Float32bits(x))
			}
			var nz []string // the first non-zero values
			for j, x := range v {
				if x != 0 && len(nz) < 4 {
					nz = append(nz, fmt.Sprintf("%d:%.6f", j, x))
				}
			}
			if len(nz) == 0 {
				nz = append(nz, "zero")
			}
			fmt.Fprintf(&b, "  %q: sha256 %x %s\n", string([]rune(sampleTexts[i])[:min(32, len([]rune(sampleTexts[i])))]), sum.Sum(nil)[:8], strings.Join(nz, " "))
		}
	}
	path := filepath.Join("testdata", "hash.golden")
	if *rewrite {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if b.String() != string(want) {
		t.Errorf("hash embedder output changed (go test -run TestHashGolden -rewrite rewrites it)\n--- got\n%s--- want\n%s", b.String(), want)
	}
}

func TestHashSpecs(t *testing.T) {
	a, b := mustHash(t, "hash"), mustHash(t, " hash:dim=384 ")
	if a.ID() != b.ID() || a.Spec() != "hash:dim=384" || a.Dims() != 384 {
		t.Errorf("hash and hash:dim=384: %s %s, %s %s", a.ID(), a.Spec(), b.ID(), b.Spec())
	}
	if c := mustHash(t, "hash:dim=385"); c.ID() == a.ID() || !strings.HasPrefix(c.ID(), "hash-d385-") {
		t.Errorf("dim 385 id %s", c.ID())
	}
	if n, err := NewHash(16); err != nil || n.ID() != mustHash(t, "hash:dim=16").ID() {
		t.Errorf("NewHash(16) = %v, %v", n, err)
	}
	for _, tc := range []struct {
		spec, param string
		want        error
	}{
		{"hash:dim=0", "dim", ErrBadParam},
		{"hash:dim=-1", "dim", ErrBadParam},
		{"hash:dim=big", "dim", ErrBadParam},
		{"hash:dims=384", "dims", ErrBadParam},
		{"hash:dim=3,dim=4", "dim", ErrBadParam},
		{"word2vec:dim=300", "", ErrUnknownModel},
		{"", "", ErrUnknownModel},
	} {
		_, err := Parse(tc.spec, nil)
		var se *SpecError
		if !errors.Is(err, tc.want) || !errors.As(err, &se) || se.Param != tc.param {
			t.Errorf("Parse(%q) = %v, want %v naming parameter %q", tc.spec, err, tc.want, tc.param)
			continue
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.spec)) {
			t.Errorf("Parse(%q): %v does not name the spec", tc.spec, err)
		}
	}
}

func TestHashContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := mustHash(t, "hash").Embed(ctx, []string{"a"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Embed with a cancelled context: %v", err)
	}
	if v, err := mustHash(t, "hash").Embed(context.Background(), nil); err != nil || len(v) != 0 {
		t.Fatalf("Embed(nil) = %v, %v", v, err)
	}
}
