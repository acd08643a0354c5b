package chunker

import (
	"unicode"
	"unicode/utf8"
)

// TokenizerVersion names the tokenizer's rules. It is part of every chunker
// id (and of the hash embedder's id): a change to the rules below that can
// move a token boundary must bump it, so that old and new outputs never share
// an id.
const TokenizerVersion = "tok1"

// MaxWordBytes is the longest word token in bytes. A longer run of word
// characters (a URL path, a base64 blob, a long compound) is cut into pieces
// of at most MaxWordBytes bytes at rune boundaries, each piece one token, so a
// token count stays a fair proxy for a model's subword token count.
const MaxWordBytes = 32

// Kind is the class of a token.
type Kind uint8

const (
	// Word is a run of letters, numbers and combining marks (at most
	// MaxWordBytes bytes).
	Word Kind = iota + 1
	// Ideograph is one Han, Hiragana or Katakana character: scripts written
	// without spaces count one token per character.
	Ideograph
	// Punct is one character of any other kind: punctuation, symbols,
	// control characters, and each byte of invalid UTF-8.
	Punct
)

func (k Kind) String() string {
	switch k {
	case Word:
		return "word"
	case Ideograph:
		return "ideograph"
	case Punct:
		return "punct"
	}
	return "invalid"
}

// Span is one token: the bytes text[Start:End] and its kind.
type Span struct {
	Start, End int
	Kind       Kind
}

// character classes
const (
	clSpace uint8 = iota // separates tokens, is no token (white space, format characters)
	clWord
	clIdeo
	clPunct
)

var asciiClass [utf8.RuneSelf]uint8

func init() {
	for c := range utf8.RuneSelf {
		r := rune(c)
		switch {
		case unicode.IsSpace(r):
			asciiClass[c] = clSpace
		case unicode.IsLetter(r) || unicode.IsNumber(r):
			asciiClass[c] = clWord
		default:
			asciiClass[c] = clPunct
		}
	}
}

// classify returns the class of a non-ASCII rune (utf8.RuneError, the
// decoding of an invalid byte, is Punct).
func classify(r rune) uint8 {
	switch {
	case unicode.IsSpace(r) || unicode.Is(unicode.Cf, r):
		return clSpace
	case unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana):
		return clIdeo
	case unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r):
		return clWord
	}
	return clPunct
}

// next returns the first token of s at or after byte i; kind is 0 when there
// is none (then start == end == len(s)).
func next(s string, i int) (start, end int, kind Kind) {
	n := len(s)
	for i < n {
		c := s[i]
		var cl uint8
		w := 1
		if c < utf8.RuneSelf {
			cl = asciiClass[c]
		} else {
			var r rune
			r, w = utf8.DecodeRuneInString(s[i:])
			cl = classify(r)
		}
		switch cl {
		case clSpace:
			i += w
		case clIdeo:
			return i, i + w, Ideograph
		case clPunct:
			return i, i + w, Punct
		default:
			return i, wordEnd(s, i, i+w), Word
		}
	}
	return n, n, 0
}

// wordEnd extends the word that starts at start and has been read up to j.
func wordEnd(s string, start, j int) int {
	n := len(s)
	for j < n {
		c := s[j]
		if c < utf8.RuneSelf {
			if asciiClass[c] != clWord || j+1-start > MaxWordBytes {
				return j
			}
			j++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[j:])
		if classify(r) != clWord || j+w-start > MaxWordBytes {
			return j
		}
		j += w
	}
	return j
}

// Tokenize splits text into tokens (see the package documentation for the
// rules). The spans are in order, do not overlap, and together with the
// white space between them cover text. It is safe for concurrent use.
func Tokenize(text string) []Span {
	return AppendTokens(make([]Span, 0, len(text)/5+1), text)
}

// AppendTokens appends the tokens of text to dst and returns the result.
func AppendTokens(dst []Span, text string) []Span {
	for i := 0; ; {
		s, e, k := next(text, i)
		if k == 0 {
			return dst
		}
		dst = append(dst, Span{Start: s, End: e, Kind: k})
		i = e
	}
}

// CountTokens returns len(Tokenize(text)) without allocating.
func CountTokens(text string) int {
	n := 0
	for i := 0; ; n++ {
		_, e, k := next(text, i)
		if k == 0 {
			return n
		}
		i = e
	}
}
