package subsets

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pillarkit/pillar/pillar"
	"gopkg.in/yaml.v3"
)

// Set is a validated, compiled policy file. It is immutable: any number of
// goroutines may call its methods at once.
type Set struct {
	file     string
	src      []byte
	history  int
	signals  map[string]Type
	policies []*compiled
	byName   map[string]*compiled
}

// compiled is one compiled policy.
type compiled struct {
	Policy
	where   *boolExpr // nil: every page
	per     strFn     // nil: one group
	by      numFn     // nil: no top
	byType  Type
	desc    bool
	byText  string // the ordering as written, normalised: "text_len desc"
	history int
}

// Match is one page satisfying one policy's predicate, before top-K. Its
// fields carry yson and parquet tags so a mapper can write it as an
// intermediate row and a reducer read it back.
type Match struct {
	Subset  string `yson:"subset" parquet:"subset"`
	PageKey string `yson:"page_key" parquet:"page_key"`
	// Group is the value of the policy's top.per ("" without top or per,
	// and when the page lacks the value).
	Group string `yson:"group" parquet:"group_key"` // "group" is an SQL reserved word
	// Score is the value of top.by (times in unix seconds, durations in
	// seconds), or 1 for a policy without top.
	Score float64 `yson:"score" parquet:"score"`
	// NoScore is set when the page has no value for top.by; such members rank
	// after all others.
	NoScore bool `yson:"no_score" parquet:"no_score"`
	// Reason names the parts of the predicate that held.
	Reason string `yson:"reason" parquet:"reason"`
}

// Member returns the membership row of a match.
func (m *Match) Member() pillar.SubsetMember {
	return pillar.SubsetMember{PageKey: m.PageKey, Score: m.Score, Reason: m.Reason}
}

// Compile validates and compiles a policy file built in code. Errors inside
// an expression are positioned within that expression (where:1:7).
func Compile(f *File) (*Set, error) {
	c := &errs{file: f.Name}
	if len(f.Policies) == 0 {
		c.add(&Error{Line: 1, Msg: "no policies (a policy file needs at least one policy)"})
		return nil, c.err()
	}
	if f.pos == nil { // Parse checked these with positions already
		checkInCode(f, c)
	}
	s := compileFile(f, c)
	if err := c.err(); err != nil {
		return nil, err
	}
	return s, nil
}

// checkInCode does for a File built in code what decodeFile does for a
// parsed one: names, duplicates, top.k, history and signal declarations.
func checkInCode(f *File, c *errs) {
	seen := map[string]bool{}
	for _, p := range f.Policies {
		if !nameRE.MatchString(p.Name) {
			c.add(&Error{Policy: p.Name, Field: "name", Msg: fmt.Sprintf("bad policy name %q: want letters, digits, - and _ (at most 100), starting with a letter or digit", p.Name)})
		} else if seen[p.Name] {
			c.add(&Error{Policy: p.Name, Field: "name", Msg: "duplicate policy name"})
		}
		seen[p.Name] = true
		if p.Top != nil && p.Top.K < 1 {
			c.add(&Error{Policy: p.Name, Field: "top.k", Msg: fmt.Sprintf("must be at least 1, got %d", p.Top.K)})
		}
		if p.History < 0 {
			c.add(&Error{Policy: p.Name, Field: "history", Msg: fmt.Sprintf("must be at least 1, got %d", p.History)})
		}
	}
	names := make([]string, 0, len(f.Signals))
	for name := range f.Signals {
		names = append(names, name)
	}
	sort.Strings(names) // errors in a stable order
	for _, name := range names {
		t := f.Signals[name]
		if !signalRE.MatchString(name) || keywords[name] != 0 || name == "signal" {
			c.add(&Error{Field: "signals", Msg: fmt.Sprintf("bad signal name %q", name)})
		}
		if t != TypeNumber && t != TypeString {
			c.add(&Error{Field: "signals." + name, Msg: fmt.Sprintf("type %s: want number or string", t)})
		}
	}
	if f.History < 0 {
		c.add(&Error{Field: "history", Msg: fmt.Sprintf("must be at least 1, got %d", f.History)})
	}
}

// compileFile type-checks and compiles every policy, adding errors to c.
func compileFile(f *File, c *errs) *Set {
	s := &Set{file: f.Name, history: f.History, signals: map[string]Type{}, byName: map[string]*compiled{}}
	if s.history <= 0 {
		s.history = DefaultHistory
	}
	for n, t := range f.Signals {
		if t == TypeNumber || t == TypeString { // others were reported
			s.signals[n] = t
		}
	}
	for i := range f.Policies {
		var pp *policyPos
		if f.pos != nil {
			pp = &f.pos.policies[i]
		}
		var lines []string
		if f.pos != nil {
			lines = f.pos.lines
		}
		cp := compilePolicy(f.Policies[i], s.signals, pp, lines, c)
		cp.history = cp.Policy.History
		if cp.history <= 0 {
			cp.history = s.history
		}
		if _, dup := s.byName[cp.Name]; !dup && cp.Name != "" {
			s.byName[cp.Name] = cp
		}
		s.policies = append(s.policies, cp)
	}
	return s
}

func compilePolicy(p Policy, signals map[string]Type, pp *policyPos, lines []string, c *errs) *compiled {
	cp := &compiled{Policy: p}
	// expr compiles one expression field, positioning its errors.
	expr := func(field, src string, yn *yaml.Node, parse func(string) (node, error), check func(*compiler, node)) {
		var pm *posMap
		if yn != nil {
			pm = yamlPosMap(src, lines, yn)
		} else {
			pm = selfPosMap(src)
		}
		report := func(off int, msg string) {
			line, col := pm.at(off)
			c.add(&Error{Line: line, Col: col, Policy: p.Name, Field: field, Msg: msg})
		}
		n, err := parse(src)
		if err != nil {
			var se *syntaxError
			if errors.As(err, &se) {
				report(se.off, se.msg)
			} else {
				report(0, err.Error())
			}
			return
		}
		check(&compiler{src: src, signals: signals, fail: report}, n)
	}
	var whereNode, perNode, byNode *yaml.Node
	if pp != nil {
		whereNode, perNode, byNode = pp.where, pp.per, pp.by
	}
	if strings.TrimSpace(p.Where) != "" {
		expr("where", p.Where, whereNode, parseExpr, func(cm *compiler, n node) {
			x := cm.cond(n, "where")
			if x.t == TypeBool {
				cp.where = x.b
			}
		})
	}
	if p.Top == nil {
		return cp
	}
	if strings.TrimSpace(p.Top.Per) != "" {
		expr("top.per", p.Top.Per, perNode, parseExpr, func(cm *compiler, n node) {
			x := cm.compile(n)
			switch x.t {
			case TypeInvalid:
			case TypeString:
				cp.per = x.s
			default:
				cm.errorf(start(n), "groups are named by a string (host, lang, a string signal); %s is %s", x.desc, x.t.article())
			}
		})
	}
	if strings.TrimSpace(p.Top.By) == "" {
		e := &Error{Policy: p.Name, Field: "top.by", Msg: "missing ordering (e.g. by: score desc)"}
		if pp != nil {
			e.Field = "top"
			e.Line, e.Col = pp.topPos[0], pp.topPos[1]
		}
		c.add(e)
		return cp
	}
	var desc bool
	expr("top.by", p.Top.By, byNode,
		func(src string) (node, error) {
			n, d, err := parseOrder(src)
			desc = d
			return n, err
		},
		func(cm *compiler, n node) {
			x := cm.compile(n)
			switch x.t {
			case TypeInvalid:
			case TypeNumber, TypeTime, TypeDuration:
				cp.by, cp.byType, cp.desc = x.n, x.t, desc
				dir := "asc"
				if desc {
					dir = "desc"
				}
				cp.byText = cm.text(n) + " " + dir
			default:
				cm.errorf(start(n), "members are ordered by a number, time or duration; %s is %s", x.desc, x.t.article())
			}
		})
	return cp
}

// Filename returns the name the set was parsed from.
func (s *Set) Filename() string { return s.file }

// Source returns the policy file's bytes (nil for sets built with Compile):
// ship them to a job and Parse them there.
func (s *Set) Source() []byte { return s.src }

// Names returns the policy names in file order.
func (s *Set) Names() []string {
	out := make([]string, len(s.policies))
	for i, p := range s.policies {
		out[i] = p.Name
	}
	return out
}

// Policies returns the policies in file order.
func (s *Set) Policies() []Policy {
	out := make([]Policy, len(s.policies))
	for i, p := range s.policies {
		out[i] = p.Policy
	}
	return out
}

// Policy returns the named policy.
func (s *Set) Policy(name string) (Policy, bool) {
	p, ok := s.byName[name]
	if !ok {
		return Policy{}, false
	}
	return p.Policy, true
}

// Exported reports whether the named subset is exported.
func (s *Set) Exported(name string) bool {
	p, ok := s.byName[name]
	return ok && p.Exported
}

// History returns how many membership generations the named subset keeps
// (the newest included); 0 for an unknown subset.
func (s *Set) History(name string) int {
	if p, ok := s.byName[name]; ok {
		return p.history
	}
	return 0
}

// Signals returns the declared signals.
func (s *Set) Signals() map[string]Type {
	out := make(map[string]Type, len(s.signals))
	for k, v := range s.signals {
		out[k] = v
	}
	return out
}

// Fingerprint identifies the definition of the named subset (exported flag,
// predicate, top-K and the types of the declared signals): equal
// fingerprints evaluate alike. Record it with each generation to tell a
// policy change from a data change.
func (s *Set) Fingerprint(name string) string {
	p, ok := s.byName[name]
	if !ok {
		return ""
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%v\x00%s\x00", p.Name, p.Exported, strings.TrimSpace(p.Where))
	if p.Top != nil {
		fmt.Fprintf(h, "%d\x00%s\x00%s\x00", p.Top.K, strings.TrimSpace(p.Top.Per), p.byText)
	}
	sigs := make([]string, 0, len(s.signals))
	for n, t := range s.signals {
		sigs = append(sigs, n+":"+t.String())
	}
	sort.Strings(sigs)
	fmt.Fprintf(h, "%s", strings.Join(sigs, ","))
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// Eval returns the policies p satisfies at asOf (age(t) is asOf - t), in
// file order, before top-K: a policy with top yields a candidate to pass to
// its TopK. Eval never reads the clock.
func (s *Set) Eval(p *Page, asOf time.Time) []Match {
	return s.AppendEval(nil, p, asOf)
}

// AppendEval is Eval appending to dst, for callers that reuse a buffer.
func (s *Set) AppendEval(dst []Match, p *Page, asOf time.Time) []Match {
	e := env{p: p, asOf: asOf.UnixMilli()}
	for _, cp := range s.policies {
		if cp.where != nil && cp.where.fn(e) != triTrue {
			continue
		}
		m := Match{Subset: cp.Name, PageKey: p.Key, Score: 1}
		if cp.where == nil {
			m.Reason = "every page"
		} else {
			m.Reason = cp.where.reasonString(e)
		}
		if cp.per != nil {
			m.Group, _ = cp.per(e)
		}
		if cp.by != nil {
			v, ok := cp.by(e)
			switch {
			case !ok:
				m.Score, m.NoScore = 0, true
			case cp.byType == TypeNumber:
				m.Score = v
			default: // times and durations: milliseconds to seconds
				m.Score = v / 1000
			}
		}
		dst = append(dst, m)
	}
	return dst
}

// NewTopK returns a TopK for one group of the named subset, which must have
// top. Use one TopK per group; Reset it to reuse it for the next.
func (s *Set) NewTopK(subset string) (*TopK, error) {
	p, ok := s.byName[subset]
	if !ok {
		return nil, fmt.Errorf("subsets: %q: %w", subset, ErrUnknownSubset)
	}
	if p.Top == nil {
		return nil, fmt.Errorf("subsets: %q has no top", subset)
	}
	per := strings.TrimSpace(p.Top.Per)
	return NewTopK(p.Top.K, p.desc, describeTop(per, p.byText)), nil
}

func describeTop(per, by string) string {
	if per == "" {
		return "by " + by
	}
	return "per " + per + " by " + by
}

// HasTop reports whether the named subset keeps only its top K per group.
func (s *Set) HasTop(subset string) bool {
	p, ok := s.byName[subset]
	return ok && p.Top != nil
}

// String summarises the set, one policy a line.
func (s *Set) String() string {
	var b strings.Builder
	for _, p := range s.policies {
		exp := "internal"
		if p.Exported {
			exp = "exported"
		}
		where := strings.Join(strings.Fields(p.Where), " ")
		if where == "" {
			where = "every page"
		}
		fmt.Fprintf(&b, "%s\t%s\twhere %s", p.Name, exp, where)
		if p.Top != nil {
			fmt.Fprintf(&b, "\ttop %s %s", strconv.Itoa(p.Top.K), describeTop(strings.TrimSpace(p.Top.Per), p.byText))
		}
		fmt.Fprintf(&b, "\thistory %d\n", p.history)
	}
	return b.String()
}
