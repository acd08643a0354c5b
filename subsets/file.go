package subsets

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// DefaultHistory is the number of membership generations kept per subset
// when neither the file nor the policy says.
const DefaultHistory = 3

// File is a policy file: declared signals and the policies over them.
type File struct {
	// Name names the file in error messages. The default value is "".
	Name string
	// History is the number of membership generations each subset keeps
	// (the newest included), unless a policy sets its own. The default value
	// is DefaultHistory.
	History int
	// Signals declares the named signals policies may use, with their type
	// (TypeNumber or TypeString). The default value is none.
	Signals map[string]Type
	// Policies in file order. At least one is required.
	Policies []Policy

	// pos holds source positions when the file was parsed; nil for files
	// built in code.
	pos *filePos
}

// Policy defines one subset.
type Policy struct {
	// Name of the subset (and of its table, subsets/<name>): letters,
	// digits, '-' and '_', starting with a letter or digit.
	Name string
	// Exported subsets decide what the serving tier holds. The default value
	// is false.
	Exported bool
	// Description is free text for people. The default value is "".
	Description string
	// Where is the predicate a member satisfies (see the package comment for
	// the language). The default value "" admits every page.
	Where string
	// Top, if set, keeps only the best K members per group.
	Top *Top
	// History is the number of membership generations to keep. The default
	// value (0) takes the file's History.
	History int
}

// Top keeps the best K members of each group.
type Top struct {
	// K is the number of members kept per group; at least 1.
	K int
	// Per is a string expression (a field or string signal: host, lang) whose
	// value names the group. The default value "" makes all members one group.
	Per string
	// By orders members: an expression of type number, time or duration,
	// then asc or desc (the default). Required. Ties go to the smaller page
	// key; members with no value rank last.
	By string
}

// filePos holds the source positions of a parsed file.
type filePos struct {
	lines    []string
	policies []policyPos
}

// policyPos holds where a policy's parts are in the file.
type policyPos struct {
	name           [2]int     // line, column of the name
	topPos         [2]int     // line, column of top
	where, per, by *yaml.Node // expression scalars, aligned by yamlPosMap
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$`)
var signalRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ReadFile reads, validates and compiles a policy file (YAML or JSON).
func ReadFile(path string) (*Set, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("subsets: %w", err)
	}
	return Parse(path, src)
}

// Parse validates and compiles a policy file (YAML or JSON; JSON is YAML).
// filename names the file in errors. On failure the error is an ErrorList
// with every error found, each with its file:line:col.
func Parse(filename string, src []byte) (*Set, error) {
	c := &errs{file: filename, inFile: true}
	f := decodeFile(filename, src, c)
	if f == nil {
		return nil, c.err()
	}
	s := compileFile(f, c)
	if err := c.err(); err != nil {
		return nil, err
	}
	s.src = append([]byte(nil), src...)
	return s, nil
}

// decodeFile walks the YAML tree. It returns nil only when nothing of the
// file could be read; otherwise it returns what it read and leaves the errors
// in c.
func decodeFile(filename string, src []byte, c *errs) *File {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		c.add(yamlError(err))
		return nil
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		c.add(&Error{Line: 1, Msg: "empty policy file: want a mapping with policies: (and optionally signals:, history:)"})
		return nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		c.add(at(root, "", "", "policy file must be a mapping with policies: (and optionally signals:, history:)"))
		return nil
	}
	f := &File{Name: filename, pos: &filePos{lines: splitLines(src)}}
	var policiesNode *yaml.Node
	eachKey(root, "", "", c, func(key string, k, v *yaml.Node) {
		switch key {
		case "history":
			f.History = intValue(v, "", "history", c)
			if f.History < 1 && v.Tag == "!!int" {
				c.add(at(v, "", "history", fmt.Sprintf("must be at least 1, got %s", v.Value)))
			}
		case "signals":
			decodeSignals(f, v, c)
		case "policies":
			policiesNode = v
		default:
			c.add(at(k, "", "", fmt.Sprintf("unknown key %q (want policies, signals, history)", key)))
		}
	})
	if policiesNode == nil {
		c.add(at(root, "", "", "no policies: key (a policy file needs at least one policy)"))
		return f
	}
	if policiesNode.Kind != yaml.SequenceNode {
		c.add(at(policiesNode, "", "policies", "want a list of policies"))
		return f
	}
	if len(policiesNode.Content) == 0 {
		c.add(at(policiesNode, "", "policies", "empty: a policy file needs at least one policy"))
		return f
	}
	seen := map[string]int{}
	for _, pn := range policiesNode.Content {
		p, pp := decodePolicy(pn, c)
		if p.Name != "" {
			if first, dup := seen[p.Name]; dup {
				c.add(&Error{Line: pp.name[0], Col: pp.name[1], Policy: p.Name, Field: "name",
					Msg: fmt.Sprintf("duplicate policy name (first defined at line %d)", first)})
			} else {
				seen[p.Name] = pp.name[0]
			}
		}
		f.Policies = append(f.Policies, p)
		f.pos.policies = append(f.pos.policies, pp)
	}
	return f
}

func decodeSignals(f *File, v *yaml.Node, c *errs) {
	if v.Kind != yaml.MappingNode {
		c.add(at(v, "", "signals", "want a mapping of signal name to type (number or string)"))
		return
	}
	f.Signals = map[string]Type{}
	eachKey(v, "", "signals", c, func(name string, k, tv *yaml.Node) {
		if !signalRE.MatchString(name) || keywords[name] != 0 || name == "signal" {
			c.add(at(k, "", "signals", fmt.Sprintf("bad signal name %q: want letters, digits and _, not a keyword", name)))
			return
		}
		switch strings.TrimSpace(tv.Value) {
		case "number":
			f.Signals[name] = TypeNumber
		case "string":
			f.Signals[name] = TypeString
		default:
			c.add(at(tv, "", "signals."+name, fmt.Sprintf("unknown type %q (want number or string)", tv.Value)))
			return
		}
	})
}

func decodePolicy(pn *yaml.Node, c *errs) (Policy, policyPos) {
	var p Policy
	pp := policyPos{name: [2]int{pn.Line, pn.Column}}
	if pn.Kind != yaml.MappingNode {
		c.add(at(pn, "", "", "a policy must be a mapping with name, where, exported, top"))
		return p, pp
	}
	// The name first, so other errors can name the policy.
	for i := 0; i+1 < len(pn.Content); i += 2 {
		if pn.Content[i].Value == "name" {
			v := pn.Content[i+1]
			pp.name = [2]int{v.Line, v.Column}
			if v.Kind != yaml.ScalarNode || !nameRE.MatchString(v.Value) {
				c.add(at(v, "", "name", fmt.Sprintf("bad policy name %q: want letters, digits, - and _ (at most 100), starting with a letter or digit", v.Value)))
			} else {
				p.Name = v.Value
			}
		}
	}
	hasName := false
	eachKey(pn, p.Name, "", c, func(key string, k, v *yaml.Node) {
		switch key {
		case "name":
			hasName = true
		case "exported":
			if v.Kind != yaml.ScalarNode || v.Tag != "!!bool" {
				c.add(at(v, p.Name, "exported", fmt.Sprintf("want true or false, got %s", show(v))))
				return
			}
			_ = v.Decode(&p.Exported)
		case "description":
			p.Description = stringValue(v, p.Name, "description", c)
		case "where":
			p.Where = stringValue(v, p.Name, "where", c)
			pp.where = v
		case "history":
			p.History = intValue(v, p.Name, "history", c)
			if p.History < 1 && v.Tag == "!!int" {
				c.add(at(v, p.Name, "history", fmt.Sprintf("must be at least 1, got %s", v.Value)))
			}
		case "top":
			p.Top = decodeTop(v, p.Name, &pp, c)
		default:
			c.add(at(k, p.Name, "", fmt.Sprintf("unknown key %q (want name, exported, description, where, top, history)", key)))
		}
	})
	if !hasName {
		c.add(at(pn, "", "", "policy without a name"))
	}
	return p, pp
}

func decodeTop(v *yaml.Node, policy string, pp *policyPos, c *errs) *Top {
	pp.topPos = [2]int{v.Line, v.Column}
	if v.Kind != yaml.MappingNode {
		c.add(at(v, policy, "top", "want a mapping {k: N, per: FIELD, by: FIELD desc}"))
		return nil
	}
	t := &Top{}
	hasK := false
	eachKey(v, policy, "top", c, func(key string, kn, vn *yaml.Node) {
		switch key {
		case "k":
			hasK = true
			t.K = intValue(vn, policy, "top.k", c)
			if t.K < 1 && vn.Tag == "!!int" {
				c.add(at(vn, policy, "top.k", fmt.Sprintf("must be at least 1, got %s", vn.Value)))
			}
		case "per":
			t.Per = stringValue(vn, policy, "top.per", c)
			pp.per = vn
		case "by":
			t.By = stringValue(vn, policy, "top.by", c)
			pp.by = vn
		default:
			c.add(at(kn, policy, "top", fmt.Sprintf("unknown key %q (want k, per, by)", key)))
		}
	})
	if !hasK {
		c.add(at(v, policy, "top", "missing k (the number of members kept per group)"))
	}
	return t
}

// eachKey calls fn for each key of a mapping, reporting duplicate and
// non-scalar keys.
func eachKey(m *yaml.Node, policy, field string, c *errs, fn func(key string, k, v *yaml.Node)) {
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			c.add(at(k, policy, field, "keys must be plain names"))
			continue
		}
		if line, dup := seen[k.Value]; dup {
			c.add(at(k, policy, field, fmt.Sprintf("duplicate key %q (first at line %d)", k.Value, line)))
			continue
		}
		seen[k.Value] = k.Line
		fn(k.Value, k, v)
	}
}

func stringValue(v *yaml.Node, policy, field string, c *errs) string {
	if v.Kind != yaml.ScalarNode {
		c.add(at(v, policy, field, fmt.Sprintf("want a string, got %s", show(v))))
		return ""
	}
	return v.Value
}

func intValue(v *yaml.Node, policy, field string, c *errs) int {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!int" {
		c.add(at(v, policy, field, fmt.Sprintf("want an integer, got %s", show(v))))
		return 0
	}
	n, err := strconv.Atoi(v.Value)
	if err != nil {
		c.add(at(v, policy, field, fmt.Sprintf("want an integer, got %s", v.Value)))
		return 0
	}
	return n
}

func show(v *yaml.Node) string {
	switch v.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	return strconv.Quote(v.Value)
}

func at(n *yaml.Node, policy, field, msg string) *Error {
	return &Error{Line: n.Line, Col: n.Column, Policy: policy, Field: field, Msg: msg}
}

var yamlLineRE = regexp.MustCompile(`line (\d+):?\s*(.*)`)

// yamlError turns a yaml.v3 syntax error ("yaml: line 3: ...") into an Error.
func yamlError(err error) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	e := &Error{Line: 1, Msg: "bad YAML: " + msg}
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		e.Msg = "bad YAML: " + m[2]
	}
	return e
}
