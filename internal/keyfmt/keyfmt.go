// Package keyfmt quotes keys in errors and log lines by their first bytes
// and their length, never whole: a request may carry a key of megabytes,
// and an error that quoted it whole would be as long as the key (in a gRPC
// status, longer than an HTTP/2 header may be, which breaks the caller's
// connection instead of answering it).
package keyfmt

import (
	"encoding/hex"
	"strconv"
	"unicode/utf8"
)

// Prefix is how many bytes of a key Short quotes: a whole 16-byte page key.
const Prefix = 16

// Short quotes a raw key as the hex of its first Prefix bytes, "…" when
// there are more, and its length: "00ff…, 8388608 bytes".
func Short(key []byte) string {
	if len(key) == 0 {
		return "empty key, 0 bytes"
	}
	shown := key[:min(len(key), Prefix)]
	b := make([]byte, 0, 2*len(shown)+24)
	b = hex.AppendEncode(b, shown)
	if len(shown) < len(key) {
		b = append(b, "…"...)
	}
	b = append(b, ", "...)
	b = strconv.AppendInt(b, int64(len(key)), 10)
	b = append(b, " bytes"...)
	return string(b)
}

// TextPrefix is how many bytes of a text key ShortText quotes.
const TextPrefix = 40

// ShortText quotes a key given as text (a hex page key from a queue row,
// a URL) as its first TextPrefix bytes, Go-quoted, "…" when there are
// more, and its length: "\"00ff…\"…, 70000 bytes".
func ShortText(s string) string {
	shown := s
	if len(shown) > TextPrefix {
		shown = shown[:TextPrefix]
		for len(shown) > 0 && !utf8.ValidString(shown) { // do not split a character
			shown = shown[:len(shown)-1]
		}
	}
	q := strconv.Quote(shown)
	if len(shown) < len(s) {
		q += "…"
	}
	return q + ", " + strconv.Itoa(len(s)) + " bytes"
}
