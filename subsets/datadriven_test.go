package subsets

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pillarkit/pillar/pillar"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected outputs of testdata/*.txt")

// A data-driven test file is a list of cases:
//
//	command arg=value ...
//	input lines
//	----
//	expected output
//	(blank line)
//
// Lines starting with # between cases are comments. -rewrite regenerates the
// expected outputs from what the code produces.
type ddCase struct {
	// comment holds the comment lines before the case (kept by -rewrite).
	comment string
	cmd     string
	args    map[string]string
	input   string
	output  string
	line    int
}

func readDD(t *testing.T, path string) (cases []ddCase, lines []string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	var comment []string
	for i := 0; i < len(lines); {
		l := lines[i]
		if strings.TrimSpace(l) == "" {
			i++
			continue
		}
		if strings.HasPrefix(l, "#") {
			comment = append(comment, l)
			i++
			continue
		}
		c := ddCase{line: i + 1, args: map[string]string{}, comment: strings.Join(comment, "\n")}
		comment = nil
		f := strings.Fields(l)
		c.cmd = f[0]
		for _, a := range f[1:] {
			k, v, _ := strings.Cut(a, "=")
			c.args[k] = v
		}
		i++
		var in []string
		for i < len(lines) && lines[i] != "----" {
			in = append(in, lines[i])
			i++
		}
		if i == len(lines) {
			t.Fatalf("%s:%d: case without ----", path, c.line)
		}
		i++
		var out []string
		for i < len(lines) && strings.TrimSpace(lines[i]) != "" {
			out = append(out, lines[i])
			i++
		}
		c.input = strings.Join(in, "\n")
		if len(in) > 0 {
			c.input += "\n"
		}
		c.output = strings.Join(out, "\n")
		cases = append(cases, c)
	}
	return cases, lines
}

func runDD(t *testing.T, path string, run func(t *testing.T, c ddCase) string) {
	cases, _ := readDD(t, path)
	var b strings.Builder
	for i, c := range cases {
		got := strings.TrimRight(run(t, c), "\n")
		if !*rewrite && got != c.output {
			t.Errorf("%s:%d: %s\n--- got:\n%s\n--- want:\n%s", path, c.line, c.cmd, got, c.output)
		}
		if i > 0 {
			b.WriteString("\n")
		}
		if c.comment != "" {
			b.WriteString(c.comment + "\n")
		}
		keys := make([]string, 0, len(c.args))
		for k := range c.args {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString(c.cmd)
		for _, k := range keys {
			if c.args[k] == "" {
				fmt.Fprintf(&b, " %s", k)
			} else {
				fmt.Fprintf(&b, " %s=%s", k, c.args[k])
			}
		}
		b.WriteString("\n" + c.input + "----\n" + got + "\n")
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// parsePages reads pages, one a line: key=K url=U [host=H] [lang=L]
// [fetched=TIME] [updated=TIME] [text_len=N] [out_links=N] [html_bytes=N]
// [title="..."]; any other name=value is a signal (a number if it parses as
// one, else a string; name="..." forces a string).
func parsePages(t *testing.T, in string) []Page {
	t.Helper()
	var pages []Page
	for _, l := range strings.Split(strings.TrimSpace(in), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		var p Page
		for _, kv := range splitFields(l) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				t.Fatalf("page line %q: %q is not name=value", l, kv)
			}
			quoted := strings.HasPrefix(v, `"`)
			if quoted {
				u, err := strconv.Unquote(v)
				if err != nil {
					t.Fatalf("page line %q: %v", l, err)
				}
				v = u
			}
			num := func() int64 {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("page line %q: %s: %v", l, k, err)
				}
				return n
			}
			tm := func() int64 {
				for _, layout := range timeLayouts {
					if x, err := time.Parse(layout, v); err == nil {
						return x.UnixMilli()
					}
				}
				t.Fatalf("page line %q: %s: bad time %q", l, k, v)
				return 0
			}
			switch k {
			case "key":
				p.Key = v
			case "url":
				p.URL = v
			case "host":
				p.Host = v
			case "title":
				p.Title = v
			case "lang":
				p.Lang = v
			case "fetched":
				p.FetchedAt = tm()
			case "updated":
				p.UpdatedAt = tm()
			case "text_len":
				p.TextLen = num()
			case "out_links":
				p.OutLinks = num()
			case "html_bytes":
				p.HTMLBytes = num()
			default:
				if p.Signals == nil {
					p.Signals = map[string]SignalValue{}
				}
				if f, err := strconv.ParseFloat(v, 64); err == nil && !quoted {
					p.Signals[k] = SignalValue{Num: f, IsNum: true}
				} else {
					p.Signals[k] = SignalValue{Str: v}
				}
			}
		}
		if p.Key == "" && p.URL != "" {
			k, _, err := pillar.KeyOfURL(p.URL)
			if err != nil {
				t.Fatalf("page line %q: %v", l, err)
			}
			p.Key = k.String()
		}
		if p.Host == "" && p.URL != "" {
			p.Host = pillar.HostOf(p.URL)
		}
		if p.Key == "" {
			t.Fatalf("page line %q: no key and no url", l)
		}
		pages = append(pages, p)
	}
	return pages
}

// splitFields splits on spaces outside double quotes.
func splitFields(s string) []string {
	var out []string
	var cur strings.Builder
	inQ := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && inQ && i+1 < len(s):
			cur.WriteByte(c)
			i++
			cur.WriteByte(s[i])
		case c == '"':
			inQ = !inQ
			cur.WriteByte(c)
		case c == ' ' && !inQ:
			if cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteByte(c)
		}
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

func asOfArg(t *testing.T, c ddCase) time.Time {
	v, ok := c.args["as-of"]
	if !ok {
		t.Fatalf("line %d: %s needs as-of=", c.line, c.cmd)
	}
	at, err := time.Parse(time.RFC3339, v)
	if err != nil {
		t.Fatalf("line %d: as-of: %v", c.line, err)
	}
	return at
}

// errorLines renders a Parse error one error a line.
func errorLines(err error) string {
	if l, ok := err.(ErrorList); ok {
		var b strings.Builder
		for _, e := range l {
			b.WriteString("error: " + e.Error() + "\n")
		}
		return b.String()
	}
	return "error: " + err.Error()
}

// TestDataDriven runs testdata/*.txt: policy files to validation results
// (with file:line:col), and pages to matches and memberships.
func TestDataDriven(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			var set *Set
			var pages []Page
			var prev map[string]Previous
			labels := map[string]string{}
			label := func(key string) string {
				if l := labels[key]; l != "" {
					return key + " " + l
				}
				return key
			}
			runDD(t, file, func(t *testing.T, c ddCase) string {
				switch c.cmd {
				case "parse":
					s, err := Parse("policies.yaml", []byte(c.input))
					if err != nil {
						set = nil
						return errorLines(err)
					}
					set = s
					return "ok\n" + s.String()
				case "load":
					s, err := ReadFile(c.args["file"])
					if err != nil {
						set = nil
						return errorLines(err)
					}
					set = s
					return "ok\n" + s.String()
				case "pages":
					pages = parsePages(t, c.input)
					for _, p := range pages {
						if p.URL != "" {
							labels[p.Key] = path.Base(p.URL)
						}
					}
					return fmt.Sprintf("%d pages", len(pages))
				case "eval":
					if set == nil {
						t.Fatalf("line %d: eval without a valid parse", c.line)
					}
					asOf := asOfArg(t, c)
					var b strings.Builder
					for i := range pages {
						ms := set.Eval(&pages[i], asOf)
						names := make([]string, len(ms))
						for j, m := range ms {
							names[j] = m.Subset
						}
						fmt.Fprintf(&b, "%s: %s\n", label(pages[i].Key), strings.Join(names, " "))
					}
					return b.String()
				case "explain":
					// explain as-of=T [key=K]: every policy's verdict per page.
					if set == nil {
						t.Fatalf("line %d: explain without a valid parse", c.line)
					}
					asOf := asOfArg(t, c)
					var b strings.Builder
					for i := range pages {
						if k := c.args["key"]; k != "" && pages[i].Key != k {
							continue
						}
						fmt.Fprintf(&b, "%s:\n", label(pages[i].Key))
						for _, v := range set.Explain(&pages[i], asOf) {
							fmt.Fprintf(&b, "  %s: %s: %s\n", v.Subset, v.Result, v.Why)
						}
					}
					return b.String()
				case "members":
					if set == nil {
						t.Fatalf("line %d: members without a valid parse", c.line)
					}
					asOf := asOfArg(t, c)
					var all []Match
					for i := range pages {
						all = set.AppendEval(all, &pages[i], asOf)
					}
					var b strings.Builder
					for _, name := range set.Names() {
						ms, err := set.Members(name, all)
						if err != nil {
							t.Fatal(err)
						}
						fmt.Fprintf(&b, "%s:\n", name)
						for _, m := range ms {
							fmt.Fprintf(&b, "  %s %g %s\n", label(m.PageKey), m.Score, m.Reason)
						}
					}
					return b.String()
				case "plan":
					// plan as-of=T [changed=k1,k2]: a recompute against the
					// previous plan of this file; prints non-stay changes and
					// the export decisions.
					if set == nil {
						t.Fatalf("line %d: plan without a valid parse", c.line)
					}
					changed := map[string]bool{}
					for _, k := range strings.Split(c.args["changed"], ",") {
						changed[k] = true
					}
					pl, err := set.Plan(pages, asOfArg(t, c), prev, func(k string) bool { return changed[k] })
					if err != nil {
						return errorLines(err)
					}
					prev = set.Previous(pl)
					var b strings.Builder
					for _, ch := range pl.Changes {
						if ch.Kind != Stay {
							fmt.Fprintf(&b, "%s %s %s\n", ch.Kind, ch.Subset, label(ch.PageKey))
						}
					}
					for _, d := range pl.Decisions {
						fmt.Fprintf(&b, "%s %s (%s)\n", d.Op, label(d.PageKey), d.Cause)
					}
					if b.Len() == 0 {
						return "no changes, no export work"
					}
					return b.String()
				}
				t.Fatalf("line %d: unknown command %q", c.line, c.cmd)
				return ""
			})
		})
	}
}
