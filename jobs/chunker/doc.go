// Package chunker splits page text into passages ("chunks") for embedding.
//
// A chunker version is a named chunker with fixed parameters, parsed from a
// spec string ("recursive:size=512,overlap=64", "tokens:size=256,overlap=32").
// Its ID is derived from the canonical spec, the chunker's algorithm version
// and TokenizerVersion: the same configuration always has the same id, and a
// change of rules that could move a chunk boundary bumps a version constant
// and so changes the id. Ids look like "recursive-s512-o64-3f9a1c2b" and are
// safe as a table path component (chunks/<id>).
//
// # Guarantees
//
//   - Determinism: Chunk is a pure function of (configuration, text). No
//     randomness, maps, clocks or locale are involved; the only outside input
//     is the Unicode tables of the Go release (a character assigned in a newer
//     Unicode version may change class when Go is upgraded).
//   - Offsets: every chunk has Text == text[Start:End] (byte offsets) and
//     starts and ends on a token, so it never begins or ends with white space.
//     Chunks are in text order; Start strictly increases from chunk to chunk.
//     Every token of the text is in at least one chunk.
//   - Size: every chunk has 1 ≤ Tokens ≤ size.
//   - Empty text, or text with no tokens, has no chunks (not an error).
//   - Chunkers are immutable and safe for concurrent use.
//
// # Tokenizer
//
// Sizes and overlaps are counted in tokens of one documented tokenizer, a
// cheap stand-in for a model's subword tokenizer (it counts one token per
// English word or punctuation mark, somewhat fewer than a BPE tokenizer):
//
//   - White space (unicode.IsSpace) and format characters (category Cf:
//     zero-width space, soft hyphen, BOM, …) separate tokens and are no part
//     of any token.
//   - A word token is a maximal run of letters, numbers and combining marks
//     (unicode.IsLetter, IsNumber, IsMark), cut into pieces of at most
//     MaxWordBytes (32) bytes at rune boundaries.
//   - Each Han, Hiragana or Katakana character is a token of its own.
//   - Every other character is a token of its own (punctuation, symbols, '_'),
//     and so is every byte of invalid UTF-8.
//
// So "Don't panic: 3.14!" is Don ' t panic : 3 . 14 ! (9 tokens). CountTokens
// counts without allocating; Tokenize returns the spans.
//
// # tokens
//
// Fixed windows: chunk k covers tokens [k·(size−overlap), k·(size−overlap)+size),
// and the last chunk ends at the last token (it may be shorter). Consecutive
// chunks share exactly overlap tokens, except that the last may share more.
//
// # recursive
//
// The recursive chunker keeps passages whole where it can. Every gap between
// two tokens has a boundary class, strongest first:
//
//	paragraph  the white space holds two or more line breaks (a blank line;
//	           "\f" and U+2029 count two, "\n", "\r\n", "\r", U+0085 and
//	           U+2028 one)
//	sentence   the token before is . ! ? or … followed by white space, or a
//	           full-width 。！？ (no white space needed); a closing quote or
//	           bracket glued to the terminator (`." ` or `?) `) counts as well
//	line       a single line break
//	word       other white space
//	none       the tokens touch ("end" and "," in "end,")
//
// Chunking has two steps:
//
//  1. Split. A token range that has at most size tokens is one piece.
//     A longer range is cut at every gap of the strongest class found inside
//     it, and each part is split again the same way (a paragraph too long
//     becomes sentences, a sentence too long lines, then words, then single
//     tokens). The pieces are the coarsest units that fit.
//  2. Pack. Pieces are added to the current chunk, in order, while the chunk
//     stays within size tokens. When the next piece does not fit, the chunk
//     is full; it ends at the strongest boundary between its pieces that
//     leaves it at least ⌈size/2⌉ tokens (the latest among equals, the greedy
//     end included), so a chunk rather ends at a paragraph or sentence than
//     after the first words of the next one. The chunk is emitted and the
//     next chunk begins with an overlap taken from the end
//     of the emitted one: the window is the last min(overlap, size − tokens of
//     the next piece) tokens of the emitted chunk (excluding its first token);
//     the overlap starts at the gap in that window of the highest class —
//     paragraph and sentence counting alike, then line, then word, then none
//     — the earliest among equals (so, the longest overlap that starts a
//     sentence if there is one, else a line, else a word). There is no
//     overlap when that gap is weaker than the boundary the chunk ended at
//     (capped at sentence): after a chunk that ends a sentence the overlap is
//     whole sentences or nothing, never the tail of one; and there is none
//     when the window has white space nowhere. The next piece then always
//     fits, so every chunk gains at least one new piece.
//
// The overlap is thus at most overlap tokens and may be shorter (or nothing)
// when the next piece is large; chunks are at most size tokens.
package chunker
