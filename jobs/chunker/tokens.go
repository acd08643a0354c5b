package chunker

import "fmt"

// tokensAlgo versions the tokens chunker's windowing rules (part of its id).
const tokensAlgo = "tokens/1"

// tokensChunker cuts fixed windows of size tokens; window k starts at token
// k*(size-overlap). The last window ends at the last token.
type tokensChunker struct {
	size, overlap int
	spec, id      string
}

func newTokens(size, overlap int) *tokensChunker {
	spec := fmt.Sprintf("tokens:size=%d,overlap=%d", size, overlap)
	return &tokensChunker{size: size, overlap: overlap, spec: spec, id: makeID("tokens", tokensAlgo, size, overlap, spec)}
}

func (c *tokensChunker) ID() string   { return c.id }
func (c *tokensChunker) Spec() string { return c.spec }

func (c *tokensChunker) Chunk(text string) []Chunk {
	toks := Tokenize(text)
	n := len(toks)
	if n == 0 {
		return nil
	}
	step := c.size - c.overlap
	out := make([]Chunk, 0, (n+step-1)/step)
	for a := 0; ; a += step {
		b := min(a+c.size, n)
		out = append(out, makeChunk(text, toks, a, b))
		if b == n {
			return out
		}
	}
}
