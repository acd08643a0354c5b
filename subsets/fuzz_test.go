package subsets

import (
	"strings"
	"testing"
	"time"
)

// FuzzWhere: no expression makes the compiler or evaluator panic, every
// error has a position inside the expression, and a compiled predicate
// evaluates on any page.
func FuzzWhere(f *testing.F) {
	for _, s := range []string{
		`age(fetched_at) < 7d and lang == "en" and (host in ["a"] or url ~ "/docs/")`,
		`score >= 0.8`, `not (text_len < 200)`, `has(score) or signal.category != "x"`,
		"url ~ `^a.*b$`", `fetched_at > time("2026-01-01")`, `1h30m < age(updated_at)`,
		`host not in ["a", "b",]`, `-1 < out_links`, `(((true)))`, `"\u00e9" == title`,
	} {
		f.Add(s)
	}
	p := testPage()
	empty := Page{Key: "k"}
	f.Fuzz(func(t *testing.T, where string) {
		s, err := Compile(&File{
			Signals:  map[string]Type{"score": TypeNumber, "category": TypeString},
			Policies: []Policy{{Name: "p", Where: where}},
		})
		if err != nil {
			lines := strings.Count(where, "\n") + 1
			for _, e := range err.(ErrorList) {
				if strings.TrimSpace(where) != "" && (e.Line < 1 || e.Line > lines || e.Col < 1) {
					t.Fatalf("%q: error outside the expression: %v", where, e)
				}
			}
			return
		}
		s.Eval(&p, testAsOf)
		s.Eval(&empty, testAsOf)
	})
}

// FuzzPolicyFile: no file makes Parse panic; every error has a line.
func FuzzPolicyFile(f *testing.F) {
	f.Add([]byte("policies:\n  - name: a\n    where: score > 1\n    top: {k: 3, per: host, by: score}\nsignals: {score: number}\n"))
	f.Add([]byte("policies:\n  - name: a\n    where: |\n      lang == \"en\"\n      and nope\n"))
	f.Add([]byte(`{"policies": [{"name": "a", "where": "x ~ \"(\""}]}`))
	f.Fuzz(func(t *testing.T, src []byte) {
		done := make(chan error, 1)
		go func() { _, err := Parse("f.yaml", src); done <- err }()
		var err error
		select {
		case err = <-done:
		case <-time.After(3 * time.Second):
			t.Fatalf("Parse takes over 3s on %q", src)
		}
		if err == nil {
			return
		}
		for _, e := range err.(ErrorList) {
			if e.Line < 1 {
				t.Fatalf("error without a line: %v", e)
			}
		}
	})
}
