package chunker

import (
	"fmt"
	"unicode/utf8"
)

// recursiveAlgo versions the recursive chunker's rules (boundary classes,
// splitting, packing, overlap choice); it is part of the chunker's id.
const recursiveAlgo = "recursive/1"

// Boundary strengths: the class of the gap before a token, strongest last.
const (
	bNone      uint8 = iota // the tokens touch: "foo" | ","
	bWord                   // white space without a line break
	bLine                   // a single line break
	bSentence               // after a sentence terminator
	bParagraph              // a blank line: two or more line breaks
)

// recursiveChunker splits at the strongest boundary present until every
// piece fits, then packs pieces greedily; see the package documentation.
type recursiveChunker struct {
	size, overlap int
	spec, id      string
}

func newRecursive(size, overlap int) *recursiveChunker {
	spec := fmt.Sprintf("recursive:size=%d,overlap=%d", size, overlap)
	return &recursiveChunker{size: size, overlap: overlap, spec: spec, id: makeID("recursive", recursiveAlgo, size, overlap, spec)}
}

func (c *recursiveChunker) ID() string   { return c.id }
func (c *recursiveChunker) Spec() string { return c.spec }

// seg is the token range [a, b).
type seg struct{ a, b int }

func (c *recursiveChunker) Chunk(text string) []Chunk {
	toks := Tokenize(text)
	n := len(toks)
	if n == 0 {
		return nil
	}
	str := boundaries(text, toks)

	// 1. Split: pieces of at most size tokens, each as coarse as possible.
	segs := make([]seg, 0, n/c.size+8)
	segs = c.split(str, 0, n, segs)

	// 2. Pack pieces greedily; each chunk after the first starts with an
	// overlap taken from the end of the previous one.
	out := make([]Chunk, 0, n/max(1, c.size-c.overlap)+1)
	start := 0
	for i := 0; i < len(segs); {
		j := i + 1 // segs[i] fits after the overlap by construction
		for j < len(segs) && segs[j].b-start <= c.size {
			j++
		}
		if j < len(segs) {
			j = c.chooseEnd(str, segs, start, i, j)
		}
		out = append(out, makeChunk(text, toks, start, segs[j-1].b))
		if j == len(segs) {
			break
		}
		budget := min(c.overlap, c.size-(segs[j].b-segs[j].a))
		start = overlapStart(str, start, segs[j].a, budget)
		i = j
	}
	return out
}

// chooseEnd picks where a full chunk ends: before piece k, for k in
// (i, j], at the strongest boundary among the ends that leave the chunk at
// least half of size, the latest among equals. j (the greedy end) is always a
// candidate.
func (c *recursiveChunker) chooseEnd(str []uint8, segs []seg, start, i, j int) int {
	half := (c.size + 1) / 2
	best, bestStr := j, str[segs[j].a]
	for k := j - 1; k > i && segs[k-1].b-start >= half; k-- {
		if s := str[segs[k].a]; s > bestStr {
			best, bestStr = k, s
		}
	}
	return best
}

// split appends the pieces of the token range [a, b): the range itself when
// it fits, else the pieces of its parts between the strongest boundaries in
// it. Single tokens always fit (size ≥ 1), so the recursion ends; its depth
// is at most the number of boundary classes.
func (c *recursiveChunker) split(str []uint8, a, b int, out []seg) []seg {
	if b-a <= c.size {
		return append(out, seg{a, b})
	}
	m := bNone
	for i := a + 1; i < b; i++ {
		m = max(m, str[i])
	}
	p := a
	for i := a + 1; i < b; i++ {
		if str[i] == m {
			out = c.split(str, p, i, out)
			p = i
		}
	}
	return c.split(str, p, b, out)
}

// overlapStart picks the token where the next chunk starts: within the last
// budget tokens before e, after prevStart (chunks start strictly later than
// their predecessor), at the boundary of the highest class, sentence and
// paragraph counting alike, the earliest among equals. It returns e (no
// overlap) when the window is empty, has white space nowhere, or has no
// boundary as strong as the one at e (capped at sentence).
func overlapStart(str []uint8, prevStart, e, budget int) int {
	lo := max(prevStart+1, e-budget)
	if budget <= 0 || lo >= e {
		return e
	}
	best, bestRank := lo, min(str[lo], bSentence)
	for i := lo + 1; i < e; i++ {
		if r := min(str[i], bSentence); r > bestRank {
			best, bestRank = i, r
		}
	}
	if bestRank == bNone || bestRank < min(str[e], bSentence) {
		// Never start a chunk glued to the token before, nor with a
		// fragment of a sentence (line) when the chunk ends at a sentence
		// (line) boundary.
		return e
	}
	return best
}

// boundaries returns the class of the gap before each token (index 0 is
// unused).
func boundaries(text string, toks []Span) []uint8 {
	str := make([]uint8, len(toks))
	for i := 1; i < len(toks); i++ {
		gap := text[toks[i-1].End:toks[i].Start]
		breaks := 0
		if len(gap) == 1 && gap[0] == ' ' {
			// the common case
		} else {
			breaks = lineBreaks(gap)
		}
		switch {
		case breaks >= 2:
			str[i] = bParagraph
		case endsSentence(text, toks, i-1, gap != ""):
			str[i] = bSentence
		case breaks == 1:
			str[i] = bLine
		case gap != "":
			str[i] = bWord
		default:
			str[i] = bNone
		}
	}
	return str
}

// lineBreaks counts the line breaks in white space: "\n", "\r\n" and a lone
// "\r", U+0085, U+2028 count one; "\f" and U+2029 (paragraph separator) two.
func lineBreaks(gap string) int {
	n := 0
	for i := 0; i < len(gap); {
		c := gap[i]
		if c < utf8.RuneSelf {
			switch c {
			case '\n':
				n++
			case '\r':
				if i+1 >= len(gap) || gap[i+1] != '\n' {
					n++
				}
			case '\f':
				n += 2
			}
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(gap[i:])
		switch r {
		case 0x85, 0x2028:
			n++
		case 0x2029:
			n += 2
		}
		i += w
	}
	return n
}

// endsSentence reports whether token j ends a sentence: it is a terminator
// (. ! ? … and the full-width 。！？), or a closing quote or bracket glued to
// one, and white space follows (full-width terminators need none).
func endsSentence(text string, toks []Span, j int, spaced bool) bool {
	if toks[j].Kind != Punct {
		return false
	}
	t := text[toks[j].Start:toks[j].End]
	if isCloser(t) && j > 0 && toks[j-1].End == toks[j].Start && toks[j-1].Kind == Punct {
		t = text[toks[j-1].Start:toks[j-1].End]
	}
	switch t {
	case ".", "!", "?", "…":
		return spaced
	case "。", "！", "？":
		return true
	}
	return false
}

func isCloser(t string) bool {
	switch t {
	case "\"", "'", ")", "]", "}", "”", "’", "»", "」", "』", "）":
		return true
	}
	return false
}
