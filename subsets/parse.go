package subsets

import "fmt"

// The abstract syntax tree of a predicate. Every node knows the byte range
// [off, end) of its source text, for error positions and match reasons.

type node interface {
	span() (off, end int)
}

// nameNode is a field or signal reference: host, score, signal.score.
type nameNode struct {
	off, end int
	name     string
	signal   bool // written as signal.<name>
}

// litNode is a literal: number, duration (ms), string or bool.
type litNode struct {
	off, end int
	kind     tokKind // tNumber, tDuration, tString, tTrue, tFalse
	num      float64
	str      string
	text     string
}

// listNode is a literal list: ["a", "b"].
type listNode struct {
	off, end int
	elems    []*litNode
}

// callNode is a function call: age(fetched_at), has(score).
type callNode struct {
	off, end int
	fn       string
	args     []node
}

// unaryNode is "not x".
type unaryNode struct {
	off, end int
	x        node
}

// binaryNode is and, or, a comparison, ~, !~, in or not in.
type binaryNode struct {
	off, end int
	op       tokKind // tAnd, tOr, tEq..tGe, tMatch, tNoMatch, tIn; tNot for "not in"
	opOff    int
	x, y     node
}

// parenNode keeps parentheses so reasons quote what the author wrote.
type parenNode struct {
	off, end int
	x        node
}

func (n *nameNode) span() (int, int)   { return n.off, n.end }
func (n *litNode) span() (int, int)    { return n.off, n.end }
func (n *listNode) span() (int, int)   { return n.off, n.end }
func (n *callNode) span() (int, int)   { return n.off, n.end }
func (n *unaryNode) span() (int, int)  { return n.off, n.end }
func (n *binaryNode) span() (int, int) { return n.off, n.end }
func (n *parenNode) span() (int, int)  { return n.off, n.end }

// parser is a recursive-descent parser over the token list.
type parser struct {
	toks []token
	i    int
}

func (p *parser) peek() token { return p.toks[p.i] }

func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tEOF {
		p.i++
	}
	return t
}

func (p *parser) fail(t token, format string, args ...any) error {
	return &syntaxError{t.off, fmt.Sprintf(format, args...)}
}

func (p *parser) expect(k tokKind, what string) (token, error) {
	t := p.next()
	if t.kind != k {
		return t, p.fail(t, "expected %s, found %s", what, t.describe())
	}
	return t, nil
}

// parseExpr parses a whole predicate; the input must end after it.
func parseExpr(src string) (node, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	if p.peek().kind == tEOF {
		return nil, p.fail(p.peek(), "empty expression")
	}
	n, err := p.or()
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tEOF {
		return nil, p.fail(t, "unexpected %s after a complete expression (missing and/or?)", t.describe())
	}
	return n, nil
}

// parseOrder parses a top-K ordering: expr [asc|desc]. desc is the default.
func parseOrder(src string) (n node, desc bool, err error) {
	toks, err := lex(src)
	if err != nil {
		return nil, false, err
	}
	p := &parser{toks: toks}
	if p.peek().kind == tEOF {
		return nil, false, p.fail(p.peek(), "empty ordering: want a field or signal, then asc or desc")
	}
	n, err = p.or()
	if err != nil {
		return nil, false, err
	}
	desc = true
	if t := p.peek(); t.kind == tIdent && (t.text == "asc" || t.text == "desc") {
		desc = t.text == "desc"
		p.next()
	}
	if t := p.peek(); t.kind != tEOF {
		return nil, false, p.fail(t, "unexpected %s in ordering: want a field or signal, then asc or desc", t.describe())
	}
	return n, desc, nil
}

func (p *parser) or() (node, error) {
	x, err := p.and()
	if err != nil {
		return nil, err
	}
	for p.peek().kind == tOr {
		op := p.next()
		y, err := p.and()
		if err != nil {
			return nil, err
		}
		x = &binaryNode{off: start(x), end: end(y), op: tOr, opOff: op.off, x: x, y: y}
	}
	return x, nil
}

func (p *parser) and() (node, error) {
	x, err := p.unary()
	if err != nil {
		return nil, err
	}
	for p.peek().kind == tAnd {
		op := p.next()
		y, err := p.unary()
		if err != nil {
			return nil, err
		}
		x = &binaryNode{off: start(x), end: end(y), op: tAnd, opOff: op.off, x: x, y: y}
	}
	return x, nil
}

func (p *parser) unary() (node, error) {
	if t := p.peek(); t.kind == tNot {
		p.next()
		x, err := p.unary()
		if err != nil {
			return nil, err
		}
		return &unaryNode{off: t.off, end: end(x), x: x}, nil
	}
	return p.cmp()
}

func (p *parser) cmp() (node, error) {
	x, err := p.operand()
	if err != nil {
		return nil, err
	}
	t := p.peek()
	switch t.kind {
	case tEq, tNe, tLt, tLe, tGt, tGe, tMatch, tNoMatch:
		p.next()
		y, err := p.operand()
		if err != nil {
			return nil, err
		}
		n := &binaryNode{off: start(x), end: end(y), op: t.kind, opOff: t.off, x: x, y: y}
		if k := p.peek().kind; k >= tEq && k <= tNoMatch {
			return nil, p.fail(p.peek(), "comparisons do not chain: use and (a < b and b < c)")
		}
		return n, nil
	case tIn:
		p.next()
		l, err := p.list()
		if err != nil {
			return nil, err
		}
		return &binaryNode{off: start(x), end: l.end, op: tIn, opOff: t.off, x: x, y: l}, nil
	case tNot:
		// "x not in [...]"
		if p.toks[p.i+1].kind == tIn {
			p.next()
			p.next()
			l, err := p.list()
			if err != nil {
				return nil, err
			}
			return &binaryNode{off: start(x), end: l.end, op: tNot, opOff: t.off, x: x, y: l}, nil
		}
	}
	return x, nil
}

func (p *parser) list() (*listNode, error) {
	lb, err := p.expect(tLBrack, `"[" to start a list`)
	if err != nil {
		return nil, err
	}
	l := &listNode{off: lb.off}
	for {
		if t := p.peek(); t.kind == tRBrack {
			p.next()
			l.end = t.end
			return l, nil
		}
		lit, err := p.literal()
		if err != nil {
			return nil, err
		}
		l.elems = append(l.elems, lit)
		t := p.next()
		switch t.kind {
		case tComma:
			continue
		case tRBrack:
			l.end = t.end
			return l, nil
		default:
			return nil, p.fail(t, `expected "," or "]" in list, found %s`, t.describe())
		}
	}
}

// literal reads a literal, allowing a leading minus on numbers and durations.
func (p *parser) literal() (*litNode, error) {
	t := p.next()
	neg := false
	off := t.off
	if t.kind == tMinus {
		neg = true
		t = p.next()
		if t.kind != tNumber && t.kind != tDuration {
			return nil, p.fail(t, "expected a number after -, found %s", t.describe())
		}
	}
	switch t.kind {
	case tNumber, tDuration, tString, tTrue, tFalse:
		n := &litNode{off: off, end: t.end, kind: t.kind, num: t.num, str: t.str, text: t.text}
		if neg {
			n.num = -n.num
			n.text = "-" + n.text
		}
		return n, nil
	}
	return nil, p.fail(t, "expected a literal (number, duration, string, true or false), found %s", t.describe())
}

func (p *parser) operand() (node, error) {
	t := p.peek()
	switch t.kind {
	case tLParen:
		p.next()
		x, err := p.or()
		if err != nil {
			return nil, err
		}
		rp, err := p.expect(tRParen, `")"`)
		if err != nil {
			return nil, err
		}
		return &parenNode{off: t.off, end: rp.end, x: x}, nil
	case tNumber, tDuration, tString, tTrue, tFalse, tMinus:
		return p.literal()
	case tLBrack:
		return nil, p.fail(t, "a list may only follow in or not in")
	case tIdent:
		p.next()
		if p.peek().kind == tLParen {
			p.next()
			c := &callNode{off: t.off, fn: t.text}
			if p.peek().kind == tRParen {
				c.end = p.next().end
				return c, nil
			}
			for {
				a, err := p.or()
				if err != nil {
					return nil, err
				}
				c.args = append(c.args, a)
				sep := p.next()
				if sep.kind == tRParen {
					c.end = sep.end
					return c, nil
				}
				if sep.kind != tComma {
					return nil, p.fail(sep, `expected "," or ")" in call of %s, found %s`, t.text, sep.describe())
				}
			}
		}
		if t.text == "signal" && p.peek().kind == tDot {
			p.next()
			nt, err := p.expect(tIdent, "a signal name after signal.")
			if err != nil {
				return nil, err
			}
			return &nameNode{off: t.off, end: nt.end, name: nt.text, signal: true}, nil
		}
		if p.peek().kind == tDot {
			return nil, p.fail(p.peek(), `unexpected "." after %s (only signal.<name> has a dot)`, t.text)
		}
		return &nameNode{off: t.off, end: t.end, name: t.text}, nil
	}
	return nil, p.fail(t, "expected a field, signal, literal, function call or (, found %s", t.describe())
}

func start(n node) int { o, _ := n.span(); return o }
func end(n node) int   { _, e := n.span(); return e }
