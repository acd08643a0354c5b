package subsets

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Type is the type of a predicate value.
type Type int

// Types of the predicate language. Signals are declared as TypeNumber or
// TypeString.
const (
	TypeInvalid Type = iota
	TypeBool
	TypeNumber
	TypeString
	TypeTime
	TypeDuration
	typeList
)

var typeNames = [...]string{
	TypeInvalid: "invalid", TypeBool: "condition", TypeNumber: "number", TypeString: "string",
	TypeTime: "time", TypeDuration: "duration", typeList: "list",
}

func (t Type) String() string { return typeNames[t] }

// article returns "a number", "an invalid", ...
func (t Type) article() string {
	s := t.String()
	if strings.ContainsRune("aeiou", rune(s[0])) {
		return "an " + s
	}
	return "a " + s
}

// tri is a three-valued truth value: a comparison with a missing signal is
// unknown, and a page is a member only if its predicate is true.
type tri int8

const (
	triFalse tri = iota
	triTrue
	triUnknown
)

func triOf(b bool) tri {
	if b {
		return triTrue
	}
	return triFalse
}

// env is the evaluation environment of one page.
type env struct {
	p    *Page
	asOf int64 // unix milliseconds
}

type (
	triFn func(env) tri
	numFn func(env) (float64, bool) // numbers; times and durations in milliseconds
	strFn func(env) (string, bool)
)

// boolExpr is a compiled condition, kept as a tree so a member's reason can
// name the parts of the predicate that held.
type boolExpr struct {
	fn   triFn
	op   tokKind // tAnd, tOr, tNot, tLParen (parentheses) or tEOF (an atom)
	kids []*boolExpr
	src  string
	// static is the reason when it does not depend on the page (no or
	// below): computed once, so most matches cost no allocation.
	static   string
	isStatic bool
	vals     []shown // operands an explanation shows (atoms only)
}

// finish computes the static reason of b from its kids.
func (b *boolExpr) finish() *boolExpr {
	switch b.op {
	case tAnd:
		if b.kids[0].isStatic && b.kids[1].isStatic {
			b.static, b.isStatic = b.kids[0].static+" and "+b.kids[1].static, true
		}
	case tOr:
	case tLParen:
		b.static, b.isStatic = b.kids[0].static, b.kids[0].isStatic
	default:
		b.static, b.isStatic = strings.Join(strings.Fields(b.src), " "), true
	}
	return b
}

// shown is an operand whose value an explanation shows.
type shown struct {
	desc string
	f    func(env) string
}

// withVals records the non-literal operands of an atom (all arguments but
// the last, which is the atom) for Explain, and returns the atom.
func (c *compiler) withVals(args ...cexpr) cexpr {
	b := args[len(args)-1]
	for _, x := range args[:len(args)-1] {
		if x.lit == nil {
			b.b.vals = append(b.b.vals, shown{desc: x.desc, f: showFn(x)})
		}
	}
	return b
}

// reasonString returns the parts of b that made it true (b must be true
// for e).
func (b *boolExpr) reasonString(e env) string {
	if b.isStatic {
		return b.static
	}
	var sb strings.Builder
	b.reason(e, &sb)
	return sb.String()
}

// reason writes the parts of b that made it true (b must be true for e).
func (b *boolExpr) reason(e env, sb *strings.Builder) {
	if b.isStatic {
		sb.WriteString(b.static)
		return
	}
	switch b.op {
	case tAnd:
		b.kids[0].reason(e, sb)
		sb.WriteString(" and ")
		b.kids[1].reason(e, sb)
	case tOr:
		if b.kids[0].fn(e) == triTrue {
			b.kids[0].reason(e, sb)
		} else {
			b.kids[1].reason(e, sb)
		}
	case tLParen:
		b.kids[0].reason(e, sb)
	default: // atoms and not
		sb.WriteString(b.src)
	}
}

// cexpr is a compiled, type-checked expression.
type cexpr struct {
	t    Type
	b    *boolExpr
	n    numFn
	s    strFn
	lit  *litNode // set for literals
	list *listNode
	desc string // how to name the expression in a type error
}

// field describes a docs field a predicate may name.
type field struct {
	t Type
	n numFn
	s strFn
}

var fields = map[string]field{
	"key":        {t: TypeString, s: func(e env) (string, bool) { return e.p.Key, true }},
	"url":        {t: TypeString, s: func(e env) (string, bool) { return e.p.URL, true }},
	"host":       {t: TypeString, s: func(e env) (string, bool) { return e.p.Host, true }},
	"title":      {t: TypeString, s: func(e env) (string, bool) { return e.p.Title, true }},
	"lang":       {t: TypeString, s: func(e env) (string, bool) { return e.p.Lang, true }},
	"text_len":   {t: TypeNumber, n: func(e env) (float64, bool) { return float64(e.p.TextLen), true }},
	"out_links":  {t: TypeNumber, n: func(e env) (float64, bool) { return float64(e.p.OutLinks), true }},
	"html_bytes": {t: TypeNumber, n: func(e env) (float64, bool) { return float64(e.p.HTMLBytes), true }},
	"fetched_at": {t: TypeTime, n: func(e env) (float64, bool) { return float64(e.p.FetchedAt), e.p.FetchedAt != 0 }},
	"updated_at": {t: TypeTime, n: func(e env) (float64, bool) { return float64(e.p.UpdatedAt), e.p.UpdatedAt != 0 }},
}

// FieldNames lists the docs fields a predicate may name, sorted.
func FieldNames() []string {
	out := make([]string, 0, len(fields))
	for n := range fields {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// FieldType returns the type of a docs field, or TypeInvalid.
func FieldType(name string) Type { return fields[name].t }

// compiler type-checks and compiles one expression.
type compiler struct {
	src     string
	signals map[string]Type
	fail    func(off int, msg string)
	failed  bool
}

func (c *compiler) errorf(off int, format string, args ...any) {
	c.failed = true
	c.fail(off, fmt.Sprintf(format, args...))
}

func (c *compiler) text(n node) string {
	o, e := n.span()
	return c.src[o:e]
}

var bad = cexpr{t: TypeInvalid}

func (c *compiler) compile(n node) cexpr {
	switch n := n.(type) {
	case *nameNode:
		return c.name(n)
	case *litNode:
		return c.literal(n)
	case *listNode:
		return cexpr{t: typeList, list: n, desc: "a list"}
	case *parenNode:
		x := c.compile(n.x)
		if x.t == TypeBool {
			return cexpr{t: TypeBool, b: (&boolExpr{fn: x.b.fn, op: tLParen, kids: []*boolExpr{x.b}, src: c.text(n)}).finish(), desc: c.text(n)}
		}
		x.desc = c.text(n)
		return x
	case *unaryNode:
		x := c.cond(n.x, "not")
		if x.t != TypeBool {
			return bad
		}
		f := x.b.fn
		return c.boolOf(n, tNot, func(e env) tri {
			switch f(e) {
			case triTrue:
				return triFalse
			case triFalse:
				return triTrue
			}
			return triUnknown
		}, x.b)
	case *callNode:
		return c.call(n)
	case *binaryNode:
		return c.binary(n)
	}
	panic(fmt.Sprintf("subsets: unknown node %T", n))
}

func (c *compiler) boolOf(n node, op tokKind, fn triFn, kids ...*boolExpr) cexpr {
	return cexpr{t: TypeBool, b: (&boolExpr{fn: fn, op: op, kids: kids, src: c.text(n)}).finish(), desc: c.text(n)}
}

// cond compiles n and requires a condition.
func (c *compiler) cond(n node, ctx string) cexpr {
	x := c.compile(n)
	if x.t == TypeInvalid || x.t == TypeBool {
		return x
	}
	hint := ""
	switch x.t {
	case TypeNumber:
		hint = fmt.Sprintf(" (compare it, e.g. %s > 0)", c.text(n))
	case TypeString:
		hint = fmt.Sprintf(` (compare it, e.g. %s == "..." or %s ~ "regexp")`, c.text(n), c.text(n))
	case TypeTime:
		hint = fmt.Sprintf(" (compare its age, e.g. age(%s) < 7d)", c.text(n))
	}
	c.errorf(start(n), "%s: %s is %s, not a condition%s", ctx, x.desc, x.t.article(), hint)
	return bad
}

func (c *compiler) name(n *nameNode) cexpr {
	desc := c.text(n)
	if !n.signal {
		if f, ok := fields[n.name]; ok {
			return cexpr{t: f.t, n: f.n, s: f.s, desc: desc}
		}
	}
	t, ok := c.signals[n.name]
	if !ok {
		if n.signal {
			c.errorf(n.off, "unknown signal %q (declare it under signals:)", n.name)
		} else {
			c.errorf(n.off, "unknown field %q (fields: %s; signals must be declared under signals:)", n.name, strings.Join(FieldNames(), ", "))
		}
		return bad
	}
	name := n.name
	switch t {
	case TypeNumber:
		return cexpr{t: t, n: func(e env) (float64, bool) { return e.p.num(name) }, desc: desc}
	case TypeString:
		return cexpr{t: t, s: func(e env) (string, bool) { return e.p.str(name) }, desc: desc}
	}
	panic("subsets: signal of type " + t.String())
}

func (c *compiler) literal(n *litNode) cexpr {
	x := cexpr{lit: n, desc: n.text}
	switch n.kind {
	case tNumber:
		v := n.num
		x.t, x.n = TypeNumber, func(env) (float64, bool) { return v, true }
	case tDuration:
		v := n.num
		x.t, x.n = TypeDuration, func(env) (float64, bool) { return v, true }
	case tString:
		v := n.str
		x.t, x.s = TypeString, func(env) (string, bool) { return v, true }
	case tTrue, tFalse:
		v := triOf(n.kind == tTrue)
		return c.boolOf(n, tEOF, func(env) tri { return v })
	}
	return x
}

var timeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02"}

func (c *compiler) call(n *callNode) cexpr {
	want := func(k int) bool {
		if len(n.args) != k {
			c.errorf(n.off, "%s takes %d argument(s), got %d", n.fn, k, len(n.args))
			return false
		}
		return true
	}
	switch n.fn {
	case "age":
		if !want(1) {
			return bad
		}
		x := c.compile(n.args[0])
		if x.t == TypeInvalid {
			return bad
		}
		if x.t != TypeTime {
			c.errorf(start(n.args[0]), "age takes a time (fetched_at, updated_at), not %s %s", x.t.article(), x.desc)
			return bad
		}
		f := x.n
		return cexpr{t: TypeDuration, desc: c.text(n), n: func(e env) (float64, bool) {
			v, ok := f(e)
			return float64(e.asOf) - v, ok
		}}
	case "has":
		if !want(1) {
			return bad
		}
		nm, ok := n.args[0].(*nameNode)
		if !ok {
			c.errorf(start(n.args[0]), "has takes a field or signal name, not %s", c.text(n.args[0]))
			return bad
		}
		x := c.name(nm)
		if x.t == TypeInvalid {
			return bad
		}
		if x.n != nil {
			f := x.n
			return c.withVals(x, c.boolOf(n, tEOF, func(e env) tri { _, ok := f(e); return triOf(ok) }))
		}
		f := x.s
		return c.withVals(x, c.boolOf(n, tEOF, func(e env) tri { _, ok := f(e); return triOf(ok) }))
	case "time":
		if !want(1) {
			return bad
		}
		l, ok := n.args[0].(*litNode)
		if !ok || l.kind != tString {
			c.errorf(start(n.args[0]), `time takes a string literal such as "2026-01-31" or "2026-01-31T12:00:00Z"`)
			return bad
		}
		for _, layout := range timeLayouts {
			if t, err := time.Parse(layout, l.str); err == nil {
				v := float64(t.UnixMilli())
				// A constant: lit makes comparisons take the constant fast
				// path and keeps it out of explanations.
				return cexpr{t: TypeTime, desc: c.text(n), n: func(env) (float64, bool) { return v, true },
					lit: &litNode{off: n.off, end: n.end, kind: tNumber, num: v, text: c.text(n)}}
			}
		}
		c.errorf(l.off, `time %s: want RFC 3339 ("2026-01-31T12:00:00Z") or a date ("2026-01-31")`, l.text)
		return bad
	}
	c.errorf(n.off, "unknown function %q (functions: age, has, time)", n.fn)
	return bad
}

func (c *compiler) binary(n *binaryNode) cexpr {
	switch n.op {
	case tAnd, tOr:
		word := "and"
		if n.op == tOr {
			word = "or"
		}
		x, y := c.cond(n.x, word), c.cond(n.y, word)
		if x.t != TypeBool || y.t != TypeBool {
			return bad
		}
		fx, fy := x.b.fn, y.b.fn
		if n.op == tAnd {
			return c.boolOf(n, tAnd, func(e env) tri {
				a := fx(e)
				if a == triFalse {
					return triFalse
				}
				b := fy(e)
				if b == triFalse {
					return triFalse
				}
				if a == triTrue && b == triTrue {
					return triTrue
				}
				return triUnknown
			}, x.b, y.b)
		}
		return c.boolOf(n, tOr, func(e env) tri {
			a := fx(e)
			if a == triTrue {
				return triTrue
			}
			b := fy(e)
			if b == triTrue {
				return triTrue
			}
			if a == triFalse && b == triFalse {
				return triFalse
			}
			return triUnknown
		}, x.b, y.b)
	case tMatch, tNoMatch:
		return c.match(n)
	case tIn, tNot:
		return c.in(n)
	}
	return c.compare(n)
}

func (c *compiler) match(n *binaryNode) cexpr {
	x := c.compile(n.x)
	y := c.compile(n.y)
	if x.t == TypeInvalid || y.t == TypeInvalid {
		return bad
	}
	op := "~"
	if n.op == tNoMatch {
		op = "!~"
	}
	if x.t != TypeString {
		c.errorf(start(n.x), "type mismatch: %s needs a string on the left, %s is %s", op, x.desc, x.t.article())
		return bad
	}
	if y.lit == nil || y.lit.kind != tString {
		c.errorf(start(n.y), `%s needs a string literal (a regular expression) on the right, not %s`, op, y.desc)
		return bad
	}
	re, err := regexp.Compile(y.lit.str)
	if err != nil {
		c.errorf(y.lit.off, "bad regular expression %s: %v", y.lit.text, err)
		return bad
	}
	f, neg := x.s, n.op == tNoMatch
	return c.withVals(x, c.boolOf(n, tEOF, func(e env) tri {
		s, ok := f(e)
		if !ok {
			return triUnknown
		}
		return triOf(re.MatchString(s) != neg)
	}))
}

func (c *compiler) in(n *binaryNode) cexpr {
	x := c.compile(n.x)
	if x.t == TypeInvalid {
		return bad
	}
	l := n.y.(*listNode)
	neg := n.op == tNot
	if len(l.elems) == 0 {
		c.errorf(l.off, "empty list")
		return bad
	}
	switch x.t {
	case TypeString, TypeNumber, TypeDuration:
	default:
		c.errorf(start(n.x), "in needs a string or a number on the left, %s is %s", x.desc, x.t.article())
		return bad
	}
	okElems := true
	for _, el := range l.elems {
		lt := c.literal(el).t
		if lt != x.t {
			c.errorf(el.off, "type mismatch: list element %s is %s, %s is %s", el.text, lt.article(), x.desc, x.t.article())
			okElems = false
		}
	}
	if !okElems {
		return bad
	}
	if x.t == TypeString {
		set := make(map[string]struct{}, len(l.elems))
		for _, el := range l.elems {
			set[el.str] = struct{}{}
		}
		f := x.s
		return c.withVals(x, c.boolOf(n, tEOF, func(e env) tri {
			s, ok := f(e)
			if !ok {
				return triUnknown
			}
			_, hit := set[s]
			return triOf(hit != neg)
		}))
	}
	set := make(map[float64]struct{}, len(l.elems))
	for _, el := range l.elems {
		set[el.num] = struct{}{}
	}
	f := x.n
	return c.withVals(x, c.boolOf(n, tEOF, func(e env) tri {
		v, ok := f(e)
		if !ok {
			return triUnknown
		}
		_, hit := set[v]
		return triOf(hit != neg)
	}))
}

func (c *compiler) compare(n *binaryNode) cexpr {
	x := c.compile(n.x)
	y := c.compile(n.y)
	if x.t == TypeInvalid || y.t == TypeInvalid {
		return bad
	}
	op := n.op
	if x.t == TypeBool || y.t == TypeBool {
		c.errorf(n.opOff, "cannot compare conditions with %s: use and, or, not", op)
		return bad
	}
	if x.t == typeList || y.t == typeList {
		c.errorf(n.opOff, "cannot compare a list with %s: use in", op)
		return bad
	}
	if x.t != y.t {
		hint := ""
		switch {
		case x.t == TypeTime && y.t == TypeDuration || x.t == TypeDuration && y.t == TypeTime:
			hint = "; compare age(...) with a duration, e.g. age(fetched_at) < 7d"
		case x.t == TypeDuration && y.t == TypeNumber || x.t == TypeNumber && y.t == TypeDuration:
			hint = "; write durations with a unit, e.g. 7d or 12h"
		}
		c.errorf(n.opOff, "type mismatch: cannot compare %s (%s) with %s (%s)%s", x.desc, x.t, y.desc, y.t, hint)
		return bad
	}
	if x.t == TypeString {
		fx, fy := x.s, y.s
		return c.withVals(x, y, c.boolOf(n, tEOF, func(e env) tri {
			a, ok := fx(e)
			if !ok {
				return triUnknown
			}
			b, ok := fy(e)
			if !ok {
				return triUnknown
			}
			var r bool
			switch op {
			case tEq:
				r = a == b
			case tNe:
				r = a != b
			case tLt:
				r = a < b
			case tLe:
				r = a <= b
			case tGt:
				r = a > b
			default:
				r = a >= b
			}
			return triOf(r)
		}))
	}
	fx := x.n
	if y.lit != nil { // the common case: field op constant
		b := y.lit.num
		return c.withVals(x, y, c.boolOf(n, tEOF, numCmpConst(fx, op, b)))
	}
	fy := y.n
	return c.withVals(x, y, c.boolOf(n, tEOF, func(e env) tri {
		a, ok := fx(e)
		if !ok {
			return triUnknown
		}
		b, ok := fy(e)
		if !ok {
			return triUnknown
		}
		return triOf(cmpNum(op, a, b))
	}))
}

func cmpNum(op tokKind, a, b float64) bool {
	switch op {
	case tEq:
		return a == b
	case tNe:
		return a != b
	case tLt:
		return a < b
	case tLe:
		return a <= b
	case tGt:
		return a > b
	}
	return a >= b
}

// numCmpConst specialises a comparison against a constant per operator: it
// is the hot path of most policies.
func numCmpConst(f numFn, op tokKind, b float64) triFn {
	switch op {
	case tLt:
		return func(e env) tri {
			a, ok := f(e)
			if !ok {
				return triUnknown
			}
			return triOf(a < b)
		}
	case tGe:
		return func(e env) tri {
			a, ok := f(e)
			if !ok {
				return triUnknown
			}
			return triOf(a >= b)
		}
	}
	return func(e env) tri {
		a, ok := f(e)
		if !ok {
			return triUnknown
		}
		return triOf(cmpNum(op, a, b))
	}
}
