package subsets

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// tokKind is the kind of a lexical token of the predicate language.
type tokKind int

const (
	tEOF tokKind = iota
	tIdent
	tNumber
	tDuration
	tString
	tLParen
	tRParen
	tLBrack
	tRBrack
	tComma
	tDot
	tMinus
	tEq      // ==
	tNe      // !=
	tLt      // <
	tLe      // <=
	tGt      // >
	tGe      // >=
	tMatch   // ~
	tNoMatch // !~
	tAnd
	tOr
	tNot
	tIn
	tTrue
	tFalse
)

var tokNames = [...]string{
	tEOF: "end of expression", tIdent: "name", tNumber: "number", tDuration: "duration",
	tString: "string", tLParen: "(", tRParen: ")", tLBrack: "[", tRBrack: "]", tComma: ",",
	tDot: ".", tMinus: "-", tEq: "==", tNe: "!=", tLt: "<", tLe: "<=", tGt: ">", tGe: ">=",
	tMatch: "~", tNoMatch: "!~", tAnd: "and", tOr: "or", tNot: "not", tIn: "in",
	tTrue: "true", tFalse: "false",
}

func (k tokKind) String() string { return tokNames[k] }

var keywords = map[string]tokKind{
	"and": tAnd, "or": tOr, "not": tNot, "in": tIn, "true": tTrue, "false": tFalse,
}

// token is one lexical token. Off and End are byte offsets into the
// expression text.
type token struct {
	kind     tokKind
	off, end int
	text     string  // identifier text or raw source of the token
	num      float64 // tNumber; tDuration in milliseconds
	str      string  // tString: the decoded value
}

// describe names a token for an error message.
func (t token) describe() string {
	switch t.kind {
	case tEOF:
		return "end of expression"
	case tIdent, tNumber, tDuration, tString:
		return fmt.Sprintf("%s %s", t.kind, t.text)
	default:
		return fmt.Sprintf("%q", t.kind.String())
	}
}

// syntaxError is an error at a byte offset of the expression.
type syntaxError struct {
	off int
	msg string
}

func (e *syntaxError) Error() string { return e.msg }

// durationUnits maps a duration suffix to milliseconds.
var durationUnits = map[string]float64{
	"ms": 1, "s": 1e3, "m": 60e3, "h": 3600e3, "d": 86400e3, "w": 7 * 86400e3,
}

// lex splits an expression into tokens, ending with tEOF.
func lex(src string) ([]token, error) {
	var toks []token
	i := 0
	for {
		for i < len(src) {
			r, w := utf8.DecodeRuneInString(src[i:])
			if !unicode.IsSpace(r) {
				break
			}
			i += w
		}
		if i >= len(src) {
			toks = append(toks, token{kind: tEOF, off: i, end: i})
			return toks, nil
		}
		start := i
		c := src[i]
		switch {
		case c == '_' || isLetter(c):
			for i < len(src) && (src[i] == '_' || isLetter(src[i]) || isDigit(src[i])) {
				i++
			}
			word := src[start:i]
			kind := tIdent
			if k, ok := keywords[word]; ok {
				kind = k
			}
			toks = append(toks, token{kind: kind, off: start, end: i, text: word})
		case isDigit(c):
			t, err := lexNumber(src, start)
			if err != nil {
				return nil, err
			}
			toks = append(toks, t)
			i = t.end
		case c == '"' || c == '`':
			t, err := lexString(src, start)
			if err != nil {
				return nil, err
			}
			toks = append(toks, t)
			i = t.end
		default:
			kind, w := tEOF, 1
			two := ""
			if i+1 < len(src) {
				two = src[i : i+2]
			}
			switch {
			case two == "==":
				kind, w = tEq, 2
			case two == "!=":
				kind, w = tNe, 2
			case two == "<=":
				kind, w = tLe, 2
			case two == ">=":
				kind, w = tGe, 2
			case two == "!~":
				kind, w = tNoMatch, 2
			case c == '<':
				kind = tLt
			case c == '>':
				kind = tGt
			case c == '~':
				kind = tMatch
			case c == '(':
				kind = tLParen
			case c == ')':
				kind = tRParen
			case c == '[':
				kind = tLBrack
			case c == ']':
				kind = tRBrack
			case c == ',':
				kind = tComma
			case c == '.':
				kind = tDot
			case c == '-':
				kind = tMinus
			case c == '=':
				return nil, &syntaxError{start, `unexpected "=": use == for equality`}
			case two == "&&":
				return nil, &syntaxError{start, `unexpected "&&": use and`}
			case two == "||":
				return nil, &syntaxError{start, `unexpected "||": use or`}
			case c == '!':
				return nil, &syntaxError{start, `unexpected "!": use not, != or !~`}
			case c == '\'':
				return nil, &syntaxError{start, "unexpected ': strings are written in double quotes or backquotes"}
			default:
				r, _ := utf8.DecodeRuneInString(src[i:])
				return nil, &syntaxError{start, fmt.Sprintf("unexpected character %q", r)}
			}
			i += w
			toks = append(toks, token{kind: kind, off: start, end: i, text: src[start:i]})
		}
	}
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isDigit(c byte) bool  { return '0' <= c && c <= '9' }

// scanDecimal returns the end of a decimal number (digits, optional fraction,
// optional exponent) starting at i.
func scanDecimal(src string, i int) int {
	for i < len(src) && isDigit(src[i]) {
		i++
	}
	if i+1 < len(src) && src[i] == '.' && isDigit(src[i+1]) {
		i++
		for i < len(src) && isDigit(src[i]) {
			i++
		}
	}
	if i < len(src) && (src[i] == 'e' || src[i] == 'E') {
		j := i + 1
		if j < len(src) && (src[j] == '+' || src[j] == '-') {
			j++
		}
		if j < len(src) && isDigit(src[j]) {
			for j < len(src) && isDigit(src[j]) {
				j++
			}
			i = j
		}
	}
	return i
}

// lexNumber reads a number or a duration (one or more number+unit pairs:
// 7d, 1h30m, 1.5h, 250ms).
func lexNumber(src string, start int) (token, error) {
	i := scanDecimal(src, start)
	if i >= len(src) || !isLetter(src[i]) {
		v, err := strconv.ParseFloat(src[start:i], 64)
		if err != nil {
			return token{}, &syntaxError{start, fmt.Sprintf("bad number %s", src[start:i])}
		}
		return token{kind: tNumber, off: start, end: i, text: src[start:i], num: v}, nil
	}
	// A duration: number unit [number unit]...
	var total float64
	j := start
	for {
		numEnd := j
		for numEnd < len(src) && (isDigit(src[numEnd]) || src[numEnd] == '.') {
			numEnd++
		}
		if numEnd == j {
			break
		}
		unitEnd := numEnd
		for unitEnd < len(src) && isLetter(src[unitEnd]) {
			unitEnd++
		}
		v, err := strconv.ParseFloat(src[j:numEnd], 64)
		if err != nil {
			return token{}, &syntaxError{j, fmt.Sprintf("bad duration %s", src[start:unitEnd])}
		}
		unit := src[numEnd:unitEnd]
		mult, ok := durationUnits[unit]
		if !ok {
			if unit == "" {
				return token{}, &syntaxError{numEnd, fmt.Sprintf("duration %s: missing unit after %s (use ms, s, m, h, d or w)", src[start:numEnd], src[j:numEnd])}
			}
			return token{}, &syntaxError{numEnd, fmt.Sprintf("duration %s: unknown unit %q (use ms, s, m, h, d or w)", src[start:unitEnd], unit)}
		}
		total += v * mult
		j = unitEnd
	}
	if j < len(src) && (src[j] == '_' || isLetter(src[j])) {
		return token{}, &syntaxError{j, fmt.Sprintf("bad duration %s", src[start:j+1])}
	}
	return token{kind: tDuration, off: start, end: j, text: src[start:j], num: total}, nil
}

// lexString reads a double-quoted string (Go escapes) or a backquoted raw
// string (no escapes: convenient for regular expressions).
func lexString(src string, start int) (token, error) {
	q := src[start]
	i := start + 1
	for i < len(src) {
		c := src[i]
		if c == q {
			raw := src[start : i+1]
			var val string
			if q == '`' {
				val = raw[1 : len(raw)-1]
			} else {
				v, err := strconv.Unquote(raw)
				if err != nil {
					return token{}, &syntaxError{start, fmt.Sprintf("bad string %s: %v", raw, err)}
				}
				val = v
			}
			return token{kind: tString, off: start, end: i + 1, text: raw, str: val}, nil
		}
		if c == '\\' && q == '"' {
			i += 2
			continue
		}
		if c == '\n' && q == '"' {
			break
		}
		i++
	}
	return token{}, &syntaxError{start, "unterminated string " + strings.SplitN(src[start:], "\n", 2)[0]}
}
