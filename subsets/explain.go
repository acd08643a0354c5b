package subsets

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Verdict is one policy's outcome for one page, for people.
type Verdict struct {
	Subset string
	// Result is "member" (the predicate holds; for a policy with top the
	// page is a candidate that top-K may still drop), "no" or "unknown" (a
	// value the predicate needs is missing).
	Result string
	// Why names the parts of the predicate that decided, with the page's
	// values in brackets: `score >= 0.8 [score = 0.3]`.
	Why string
}

// Explain evaluates every policy on p at asOf and says why it holds or not.
// It is for debugging and the CLI; Eval is the fast path.
func (s *Set) Explain(p *Page, asOf time.Time) []Verdict {
	e := env{p: p, asOf: asOf.UnixMilli()}
	out := make([]Verdict, 0, len(s.policies))
	for _, cp := range s.policies {
		v := Verdict{Subset: cp.Name, Result: "member", Why: "every page"}
		if cp.where != nil {
			switch cp.where.fn(e) {
			case triFalse:
				v.Result = "no"
			case triUnknown:
				v.Result = "unknown"
			}
			var sb strings.Builder
			cp.where.why(e, &sb)
			v.Why = sb.String()
		}
		if cp.Top != nil && v.Result == "member" {
			v.Result = "candidate"
			if cp.by != nil {
				val, ok := cp.by(e)
				show := "missing (ranks last)"
				if ok {
					show = formatValue(cp.byType, val)
				}
				v.Why += fmt.Sprintf("; top %d %s: %s", cp.Top.K, describeTop(strings.TrimSpace(cp.Top.Per), cp.byText), show)
			}
		}
		out = append(out, v)
	}
	return out
}

// why explains the value b has for e: the atoms that decided it, with the
// page's values.
func (b *boolExpr) why(e env, sb *strings.Builder) {
	v := b.fn(e)
	switch b.op {
	case tAnd, tOr:
		// The kids that agree with the result decide it: for and-false the
		// first false kid, for or-true the first true kid; otherwise all.
		decisive := triFalse
		if b.op == tOr {
			decisive = triTrue
		}
		if v == decisive {
			for _, k := range b.kids {
				if k.fn(e) == decisive {
					k.why(e, sb)
					return
				}
			}
		}
		sep := ""
		for _, k := range b.kids {
			if v == triUnknown && k.fn(e) != triUnknown {
				continue
			}
			sb.WriteString(sep)
			k.why(e, sb)
			sep = " " + b.op.String() + " "
		}
	case tLParen:
		b.kids[0].why(e, sb)
	case tNot:
		sb.WriteString("not (")
		b.kids[0].why(e, sb)
		sb.WriteString(")")
	default:
		sb.WriteString(strings.Join(strings.Fields(b.src), " "))
		if len(b.vals) > 0 {
			sb.WriteString(" [")
			for i, s := range b.vals {
				if i > 0 {
					sb.WriteString(", ")
				}
				sb.WriteString(s.desc)
				sb.WriteString(" = ")
				sb.WriteString(s.f(e))
			}
			sb.WriteString("]")
		}
	}
}

// showFn renders an operand's value for an explanation.
func showFn(x cexpr) func(env) string {
	if x.t == TypeString {
		f := x.s
		return func(e env) string {
			s, ok := f(e)
			if !ok {
				return "missing"
			}
			if len(s) > 80 {
				s = s[:77] + "..."
			}
			return strconv.Quote(s)
		}
	}
	f, t := x.n, x.t
	return func(e env) string {
		v, ok := f(e)
		if !ok {
			return "missing"
		}
		return formatValue(t, v)
	}
}

// formatValue renders a number, a time (unix ms) or a duration (ms).
func formatValue(t Type, v float64) string {
	switch t {
	case TypeTime:
		return time.UnixMilli(int64(v)).UTC().Format(time.RFC3339)
	case TypeDuration:
		return formatDuration(v)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// formatDuration writes milliseconds in the language's units, rounded down
// to the two largest: 3d4h, 5m12s, 250ms.
func formatDuration(ms float64) string {
	neg := ms < 0
	if neg {
		ms = -ms
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	rest := int64(ms)
	units := 0
	for _, u := range []struct {
		name string
		ms   int64
	}{{"d", 86400e3}, {"h", 3600e3}, {"m", 60e3}, {"s", 1e3}, {"ms", 1}} {
		if n := rest / u.ms; n > 0 && units < 2 {
			fmt.Fprintf(&b, "%d%s", n, u.name)
			rest -= n * u.ms
			units++
		} else if units > 0 {
			units = 2 // only adjacent units: 3d0h5m shows as 3d
		}
	}
	if b.Len() == 0 || (neg && b.Len() == 1) {
		b.WriteString("0s")
	}
	return b.String()
}
