package chunker

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func params(t testing.TB, c Chunker) (size, overlap int, exact bool) {
	switch c := c.(type) {
	case *tokensChunker:
		return c.size, c.overlap, true
	case *recursiveChunker:
		return c.size, c.overlap, false
	}
	t.Fatalf("unknown chunker %T", c)
	return
}

// checkChunks checks the documented guarantees of one Chunk result.
func checkChunks(t testing.TB, c Chunker, text string, chunks []Chunk) {
	t.Helper()
	size, overlap, exact := params(t, c)
	toks := Tokenize(text)
	if len(toks) == 0 {
		if len(chunks) != 0 {
			t.Fatalf("%s: text without tokens has %d chunks", c.Spec(), len(chunks))
		}
		return
	}
	if len(chunks) == 0 {
		t.Fatalf("%s: %d tokens, no chunks", c.Spec(), len(toks))
	}
	if chunks[0].Start != toks[0].Start || chunks[len(chunks)-1].End != toks[len(toks)-1].End {
		t.Fatalf("%s: chunks cover [%d,%d), tokens [%d,%d)", c.Spec(), chunks[0].Start, chunks[len(chunks)-1].End, toks[0].Start, toks[len(toks)-1].End)
	}
	for i, k := range chunks {
		if k.Start < 0 || k.End > len(text) || k.Start >= k.End || text[k.Start:k.End] != k.Text {
			t.Fatalf("%s: chunk %d [%d,%d): offsets do not round trip", c.Spec(), i, k.Start, k.End)
		}
		if n := CountTokens(k.Text); n != k.Tokens || n < 1 || n > size {
			t.Fatalf("%s: chunk %d: Tokens %d, counted %d, size %d", c.Spec(), i, k.Tokens, n, size)
		}
		if i == 0 {
			continue
		}
		p := chunks[i-1]
		if k.Start <= p.Start || k.End <= p.End {
			t.Fatalf("%s: chunk %d [%d,%d) does not advance past chunk %d [%d,%d)", c.Spec(), i, k.Start, k.End, i-1, p.Start, p.End)
		}
		if k.Start > p.End {
			if n := CountTokens(text[p.End:k.Start]); n != 0 {
				t.Fatalf("%s: %d tokens between chunks %d and %d are in no chunk", c.Spec(), n, i-1, i)
			}
			continue
		}
		shared := CountTokens(text[k.Start:p.End])
		switch {
		case exact && i < len(chunks)-1 && shared != overlap:
			t.Fatalf("%s: chunks %d and %d share %d tokens, want %d", c.Spec(), i-1, i, shared, overlap)
		case exact && shared < overlap:
			t.Fatalf("%s: last chunk shares %d tokens, want at least %d", c.Spec(), shared, overlap)
		case !exact && shared > overlap:
			t.Fatalf("%s: chunks %d and %d share %d tokens, overlap is %d", c.Spec(), i-1, i, shared, overlap)
		}
	}
}

var vocab = []string{
	"the", "a", "PostgreSQL", "index", "query", "planner", "vacuum", "tuple", "rows", "é", "naïve",
	"中文", "日本語のテキスト", "한국어", "42", "3.14", "e.g.", "don't", "x_y", "😀", "👩‍💻",
	"supercalifragilisticexpialidocious-and-then-some-more", strings.Repeat("b", 70), "\xff\xfe",
	",", ".", "!", "?", ";", ":", "(", ")", "\"", "…", "。", "—", "\u00ad", "\u200b",
}
var gaps = []string{" ", " ", " ", " ", "", "\n", "\n\n", " \n \n", "\t", "\r\n", ". ", "? ", ".\n", "\u00a0", "  ", "\f", "\u2029"}

func randomText(r *rand.Rand, words int) string {
	var b strings.Builder
	for range words {
		b.WriteString(vocab[r.IntN(len(vocab))])
		b.WriteString(gaps[r.IntN(len(gaps))])
	}
	return b.String()
}

func TestRandomTexts(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for it := range 400 {
		text := randomText(r, r.IntN(400))
		size := 1 + r.IntN(40)
		overlap := r.IntN(size)
		for _, name := range []string{"tokens", "recursive"} {
			c := MustParse(fmt.Sprintf("%s:size=%d,overlap=%d", name, size, overlap))
			chunks := c.Chunk(text)
			checkChunks(t, c, text, chunks)
			again := c.Chunk(strings.Clone(text))
			if fmt.Sprint(again) != fmt.Sprint(chunks) {
				t.Fatalf("iteration %d: %s is not deterministic", it, c.Spec())
			}
		}
	}
}

func TestEmptyText(t *testing.T) {
	for _, spec := range []string{"tokens", "recursive", "recursive:size=1,overlap=0"} {
		c := MustParse(spec)
		for _, text := range []string{"", " ", "\n\n\t", "\u200b\u00ad"} {
			if got := c.Chunk(text); len(got) != 0 {
				t.Errorf("%s: Chunk(%q) = %v, want no chunks", spec, text, got)
			}
		}
	}
}

// TestRecursiveKeepsUnitsWhole checks the point of the recursive chunker: a
// paragraph that fits is never cut, and a sentence that fits is never cut.
func TestRecursiveKeepsUnitsWhole(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	words := []string{"alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"}
	type span struct{ start, end, tokens int }
	var paras []span
	var b strings.Builder
	for p := range 60 {
		if p > 0 {
			b.WriteString("\n\n")
		}
		start := b.Len()
		for s := range 1 + r.IntN(6) {
			if s > 0 {
				b.WriteString(" ")
			}
			for w := range 2 + r.IntN(12) {
				if w > 0 {
					b.WriteString(" ")
				}
				b.WriteString(words[r.IntN(len(words))])
			}
			b.WriteString(".")
		}
		paras = append(paras, span{start, b.Len(), CountTokens(b.String()[start:])})
	}
	text := b.String()
	c := MustParse("recursive:size=40,overlap=8")
	chunks := c.Chunk(text)
	checkChunks(t, c, text, chunks)
	// Every chunk ends at a sentence boundary (all sentences here are
	// shorter than size) and starts at a word.
	for i, k := range chunks {
		if !strings.HasSuffix(k.Text, ".") {
			t.Errorf("chunk %d ends inside a sentence: %q", i, k.Text)
		}
		if k.Start > 0 && text[k.Start-1] != ' ' && text[k.Start-1] != '\n' {
			t.Errorf("chunk %d starts inside a word: %q", i, k.Text)
		}
	}
	// No chunk ends inside a paragraph that fits in size.
	fitting := 0
	for _, p := range paras {
		if p.tokens > 40 {
			continue
		}
		fitting++
		for i, k := range chunks {
			if k.End > p.start && k.End < p.end {
				t.Errorf("chunk %d ends inside a paragraph of %d tokens: %q", i, p.tokens, text[p.start:p.end])
			}
		}
	}
	if fitting < 10 || fitting == len(paras) {
		t.Fatalf("%d of %d paragraphs fit: the test text does not exercise both cases", fitting, len(paras))
	}
}

// TestRecursiveOverlapPrefersSentences: the overlap starts at the earliest
// sentence start within the window.
func TestRecursiveOverlapPrefersSentences(t *testing.T) {
	c := MustParse("recursive:size=12,overlap=6")
	for _, tc := range []struct{ text, want string }{
		// window ". seven eight nine ten .": the sentence start
		{"one two three four five six. seven eight nine ten. eleven twelve thirteen.", "seven eight nine ten. eleven twelve thirteen."},
		// window "six seven eight nine ten .": no sentence starts there
		{"one two three four five. six seven eight nine ten. eleven twelve thirteen.", "six seven eight nine ten. eleven twelve thirteen."},
		// budget 12-11 = 1, window ".": white space nowhere, no overlap
		{"one two three four five six. seven eight nine ten. eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty.", "eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty."},
	} {
		chunks := c.Chunk(tc.text)
		checkChunks(t, c, tc.text, chunks)
		if len(chunks) != 2 || chunks[1].Text != tc.want {
			t.Errorf("Chunk(%q) = %+v, want a second chunk %q", tc.text, chunks, tc.want)
		}
	}
}

func TestTokensOverlapExact(t *testing.T) {
	text := strings.Repeat("w ", 1000)
	c := MustParse("tokens:size=100,overlap=30")
	chunks := c.Chunk(text)
	checkChunks(t, c, text, chunks)
	// windows at 0, 70, …, 910 (the one ending at 1000)
	if len(chunks) != 14 || chunks[13].Tokens != 90 {
		t.Fatalf("got %d chunks, last %d tokens; want 14 and 90", len(chunks), chunks[len(chunks)-1].Tokens)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		spec, param string
		want        error
	}{
		{"", "", ErrUnknownChunker},
		{"sentences:size=10", "", ErrUnknownChunker},
		{"tokens:size=0", "size", ErrBadParam},
		{"tokens:size=99999999999999", "size", ErrBadParam},
		{"tokens:size=-3,overlap=0", "size", ErrBadParam},
		{"recursive:size=64,overlap=64", "overlap", ErrBadParam},
		{"recursive:size=64,overlap=100", "overlap", ErrBadParam},
		{"recursive:overlap=-1", "overlap", ErrBadParam},
		{"recursive:size=abc", "size", ErrBadParam},
		{"recursive:size=1.5", "size", ErrBadParam},
		{"recursive:size=64,stride=3", "stride", ErrBadParam},
		{"recursive:size=64,size=32", "size", ErrBadParam},
		{"recursive:size", `"size"`, ErrBadParam},
		{"tokens:overlap=300", "overlap", ErrBadParam}, // default size 256
	} {
		_, err := Parse(tc.spec)
		if !errors.Is(err, tc.want) {
			t.Errorf("Parse(%q) = %v, want %v", tc.spec, err, tc.want)
			continue
		}
		var se *SpecError
		if !errors.As(err, &se) || se.Param != tc.param || se.Spec != tc.spec {
			t.Errorf("Parse(%q): %#v, want parameter %q", tc.spec, err, tc.param)
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.spec)) || !strings.Contains(err.Error(), tc.param) {
			t.Errorf("Parse(%q): error %q does not name the spec and parameter", tc.spec, err)
		}
	}
}

var idRE = regexp.MustCompile(`^(tokens|recursive)-s[0-9]+-o[0-9]+-[0-9a-f]{8}$`)

func TestIDs(t *testing.T) {
	same := [][]string{
		{"recursive", "recursive:size=512,overlap=64", "recursive:overlap=64,size=512", " recursive: size=512 , overlap=64 ", "recursive:size=0512"},
		{"tokens", "tokens:size=256,overlap=32", "tokens:overlap=32"},
	}
	seen := map[string]string{}
	for _, group := range same {
		first := MustParse(group[0])
		for _, s := range group {
			c := MustParse(s)
			if c.ID() != first.ID() || c.Spec() != first.Spec() {
				t.Errorf("%q: id %s spec %s, want %s %s", s, c.ID(), c.Spec(), first.ID(), first.Spec())
			}
			if c2 := MustParse(c.Spec()); c2.ID() != c.ID() {
				t.Errorf("Parse(Spec()) changes the id of %q", s)
			}
		}
	}
	for _, name := range []string{"tokens", "recursive"} {
		for size := 1; size < 40; size++ {
			for overlap := range size {
				c := MustParse(fmt.Sprintf("%s:size=%d,overlap=%d", name, size, overlap))
				if !idRE.MatchString(c.ID()) {
					t.Fatalf("id %q is not of the documented form", c.ID())
				}
				if prev, dup := seen[c.ID()]; dup {
					t.Fatalf("%s and %s share id %s", prev, c.Spec(), c.ID())
				}
				seen[c.ID()] = c.Spec()
			}
		}
	}
}

func TestCountTokensMatchesTokenize(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		text := randomText(r, r.IntN(100))
		toks := Tokenize(text)
		if CountTokens(text) != len(toks) {
			t.Fatalf("CountTokens(%q) = %d, Tokenize %d", text, CountTokens(text), len(toks))
		}
		last := 0
		for _, s := range toks {
			if s.Start < last || s.End <= s.Start || s.End-s.Start > MaxWordBytes && s.Kind == Word {
				t.Fatalf("bad span %+v after %d in %q", s, last, text)
			}
			if CountTokens(text[last:s.Start]) != 0 || strings.TrimFunc(text[last:s.Start], isSeparator) != "" {
				t.Fatalf("gap %q before token %+v is not white space", text[last:s.Start], s)
			}
			last = s.End
		}
	}
}

func isSeparator(r rune) bool {
	return r < 0x80 && asciiClass[r] == clSpace || r >= 0x80 && classify(r) == clSpace
}

func TestTestdataTextsChunk(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.txt")
	if len(files) == 0 {
		t.Fatal("no testdata/*.txt")
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, spec := range []string{"tokens:size=7,overlap=3", "recursive:size=7,overlap=3", "recursive:size=64,overlap=16", "recursive:size=512,overlap=64", "tokens"} {
			c := MustParse(spec)
			checkChunks(t, c, string(data), c.Chunk(string(data)))
		}
	}
}

// FuzzChunkers checks the documented guarantees on arbitrary text and
// parameters (go test -fuzz FuzzChunkers ./jobs/chunker to search further).
func FuzzChunkers(f *testing.F) {
	f.Add("Hello, world. This is a test.\n\nNew paragraph!", uint16(4), uint16(1))
	f.Add("日本語の文です。二番目の文です！", uint16(3), uint16(2))
	f.Add("\xff\xfe a\u00adb \r\n\r\n c", uint16(1), uint16(0))
	f.Add(strings.Repeat("x", 100)+" y", uint16(2), uint16(1))
	f.Fuzz(func(t *testing.T, text string, size, overlap uint16) {
		s := 1 + int(size)%64
		o := int(overlap) % s
		for _, name := range []string{"tokens", "recursive"} {
			c := MustParse(fmt.Sprintf("%s:size=%d,overlap=%d", name, s, o))
			checkChunks(t, c, text, c.Chunk(text))
		}
	})
}
