package subsets

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// posMap maps byte offsets of an expression to 1-based (line, column)
// positions: of the policy file for expressions read from a file, or of the
// expression itself for policies built in code.
type posMap struct {
	line, col []int32 // indexed by byte offset, len(expr)+1
}

func (m *posMap) at(off int) (line, col int) {
	if m == nil || len(m.line) == 0 {
		return 0, 0
	}
	if off < 0 {
		off = 0
	}
	if off >= len(m.line) {
		off = len(m.line) - 1
	}
	return int(m.line[off]), int(m.col[off])
}

// selfPosMap positions offsets within the expression text itself.
func selfPosMap(s string) *posMap {
	m := &posMap{line: make([]int32, len(s)+1), col: make([]int32, len(s)+1)}
	line, col := int32(1), int32(1)
	for i, r := range s {
		w := utf8.RuneLen(r)
		if w < 1 {
			w = 1
		}
		for k := 0; k < w && i+k < len(s); k++ {
			m.line[i+k], m.col[i+k] = line, col
		}
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	m.line[len(s)], m.col[len(s)] = line, col
	return m
}

type rawRune struct {
	r         rune
	line, col int32
}

// lookahead bounds how many non-space raw characters alignment may skip to
// find the next character of the value (quotes, escapes, indicators).
const lookahead = 16

// yamlPosMap aligns the decoded value of a YAML scalar with the raw file text
// it came from, so a position inside the value maps to the exact file line and
// column for plain, single-quoted and block (| and >) scalars, whatever
// folding or indentation YAML applied. Escapes in double-quoted scalars may
// shift a column by a few characters; the line stays right.
func yamlPosMap(value string, lines []string, n *yaml.Node) *posMap {
	startLine, startCol := n.Line-1, n.Column-1
	if n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		startLine, startCol = n.Line, 0 // content starts on the next line
	}
	limit := 4*len(value) + 1024
	var raw []rawRune
	for li := startLine; li < len(lines) && len(raw) < limit; li++ {
		col := 0
		for _, r := range lines[li] {
			if li == startLine && col < startCol {
				col++
				continue
			}
			raw = append(raw, rawRune{r, int32(li + 1), int32(col + 1)})
			col++
		}
		raw = append(raw, rawRune{'\n', int32(li + 1), int32(col + 1)})
	}
	m := &posMap{line: make([]int32, len(value)+1), col: make([]int32, len(value)+1)}
	last := rawRune{line: int32(n.Line), col: int32(n.Column)}
	j := 0
	for i, r := range value {
		cur := last
		if j < len(raw) {
			if unicode.IsSpace(r) {
				cur = raw[j]
				if unicode.IsSpace(raw[j].r) {
					j++
				}
			} else {
				skipped := 0
				for k := j; k < len(raw) && skipped <= lookahead; k++ {
					if raw[k].r == r {
						j = k
						break
					}
					if !unicode.IsSpace(raw[k].r) {
						skipped++
					}
				}
				cur = raw[j]
				if raw[j].r == r {
					j++
				}
			}
		}
		w := utf8.RuneLen(r)
		if w < 1 {
			w = 1
		}
		for k := 0; k < w && i+k < len(value); k++ {
			m.line[i+k], m.col[i+k] = cur.line, cur.col
		}
		last = cur
		last.col++
	}
	m.line[len(value)], m.col[len(value)] = last.line, last.col
	return m
}

// splitLines splits a file into lines without their line endings.
func splitLines(src []byte) []string {
	s := strings.ReplaceAll(string(src), "\r\n", "\n")
	return strings.Split(s, "\n")
}
