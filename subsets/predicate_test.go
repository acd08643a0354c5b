package subsets

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var testAsOf = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

func testPage() Page {
	return Page{
		Key:       "00112233445566778899aabbccddeeff",
		URL:       "https://www.postgresql.org/docs/15/sql-select.html",
		Host:      "www.postgresql.org",
		Title:     "SELECT",
		Lang:      "en",
		FetchedAt: testAsOf.Add(-3 * 24 * time.Hour).UnixMilli(),
		TextLen:   5000,
		OutLinks:  42,
		HTMLBytes: 12000,
		Signals: map[string]SignalValue{
			"score":    {Num: 0.85, IsNum: true},
			"category": {Str: "reference"},
			"nan":      {Num: nan(), IsNum: true},
			"wrong":    {Str: "a string where a number is declared"},
		},
	}
}

func nan() float64 { var z float64; return z / z }

func compileWhere(t *testing.T, where string) (*Set, error) {
	t.Helper()
	return Compile(&File{
		Signals:  map[string]Type{"score": TypeNumber, "category": TypeString, "nan": TypeNumber, "wrong": TypeNumber, "absent": TypeNumber, "host": TypeString},
		Policies: []Policy{{Name: "p", Where: where}},
	})
}

// evalTri evaluates where and returns "true", "false" or "unknown".
func evalTri(t *testing.T, where string, p *Page) string {
	t.Helper()
	s, err := compileWhere(t, where)
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	e := env{p: p, asOf: testAsOf.UnixMilli()}
	switch s.policies[0].where.fn(e) {
	case triTrue:
		if len(s.Eval(p, testAsOf)) != 1 {
			t.Fatalf("%s: true but Eval gives no match", where)
		}
		return "true"
	case triFalse:
		return "false"
	}
	if len(s.Eval(p, testAsOf)) != 0 {
		t.Fatalf("%s: unknown but Eval gives a match", where)
	}
	return "unknown"
}

func TestPredicateEval(t *testing.T) {
	p := testPage()
	for _, tc := range []struct{ where, want string }{
		// comparisons of each type
		{`text_len > 4999`, "true"},
		{`text_len >= 5000 and text_len <= 5000 and text_len == 5000`, "true"},
		{`text_len != 5000`, "false"},
		{`text_len < 5e3`, "false"},
		{`out_links > -1`, "true"},
		{`html_bytes == 12000`, "true"},
		{`score >= 0.8`, "true"},
		{`score > 0.85`, "false"},
		{`signal.score < 1`, "true"},
		{`title == "SELECT"`, "true"},
		{`lang != "de"`, "true"},
		{`host < "x"`, "true"},
		{`title >= "T"`, "false"},
		{`key == "00112233445566778899aabbccddeeff"`, "true"},
		// times and durations
		{`age(fetched_at) < 7d`, "true"},
		{`age(fetched_at) < 3d`, "false"},
		{`age(fetched_at) <= 72h`, "true"},
		{`age(fetched_at) == 3d`, "true"},
		{`age(fetched_at) > 2d23h59m59s999ms`, "true"},
		{`age(fetched_at) < 0.5w`, "true"},
		{`fetched_at > time("2026-11-26")`, "true"},
		{`fetched_at > time("2026-11-27T00:00:00Z")`, "false"},
		{`fetched_at == time("2026-11-27 00:00:00")`, "true"},
		{`age(updated_at) < 100w`, "unknown"}, // updated_at is 0: unknown
		{`has(updated_at)`, "false"},
		{`has(fetched_at)`, "true"},
		// regular expressions
		{`url ~ "/docs/15/sql-"`, "true"},
		{"url ~ `^https://www\\.postgresql\\.org/`", "true"},
		{`url ~ "^/docs"`, "false"},
		{`url !~ "release"`, "true"},
		{`title ~ "(?i)^select$"`, "true"},
		// lists
		{`host in ["www.postgresql.org", "docs.python.org"]`, "true"},
		{`host in ["docs.python.org",]`, "false"},
		{`host not in ["docs.python.org"]`, "true"},
		{`text_len in [1, 5000]`, "true"},
		{`age(fetched_at) in [3d]`, "true"},
		// logic and precedence
		{`true`, "true"},
		{`false or true and false`, "false"},
		{`(false or true) and true`, "true"},
		{`not false and false`, "false"},
		{`not (false and false)`, "true"},
		{`not not true`, "true"},
		// string signals and shadowing
		{`category == "reference"`, "true"},
		{`host == "www.postgresql.org"`, "true"}, // the field wins over the signal named host
		{`has(signal.host)`, "false"},
		// missing values: three-valued logic
		{`absent > 1`, "unknown"},
		{`not (absent > 1)`, "unknown"},
		{`absent > 1 or true`, "true"},
		{`absent > 1 or false`, "unknown"},
		{`absent > 1 and false`, "false"},
		{`absent > 1 and true`, "unknown"},
		{`has(absent)`, "false"},
		{`not has(absent)`, "true"},
		{`nan > 0 or nan <= 0`, "unknown"}, // NaN reads as missing
		{`has(nan)`, "false"},
		{`wrong > 0`, "unknown"}, // a string where a number is declared
		{`has(score) and score in [0.85]`, "true"},
	} {
		if got := evalTri(t, tc.where, &p); got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.where, got, tc.want)
		}
	}
}

// TestPredicateErrors: each error of the language, with its position inside
// the expression (policies built in code report where:line:col).
func TestPredicateErrors(t *testing.T) {
	for _, tc := range []struct{ where, want string }{
		{`fetched > 1`, `where:1:1: policy "p": where: unknown field "fetched"`},
		{`signal.nope == 1`, `where:1:1: policy "p": where: unknown signal "nope"`},
		{`score > "high"`, `where:1:7: policy "p": where: type mismatch: cannot compare score (number) with "high" (string)`},
		{`"high" < score`, `where:1:8: policy "p": where: type mismatch: cannot compare "high" (string) with score (number)`},
		{`fetched_at < 7d`, `where:1:12: policy "p": where: type mismatch: cannot compare fetched_at (time) with 7d (duration)`},
		{`age(fetched_at) > 7`, `write durations with a unit`},
		{`text_len > 1d`, `cannot compare text_len (number) with 1d (duration)`},
		{`title`, `where:1:1: policy "p": where: where: title is a string, not a condition`},
		{`fetched_at`, `compare its age, e.g. age(fetched_at) < 7d`},
		{`text_len and true`, `and: text_len is a number, not a condition`},
		{`true or score`, `where:1:9: policy "p": where: or: score is a number, not a condition`},
		{`not url`, `not: url is a string, not a condition`},
		{`true == false`, `cannot compare conditions with ==`},
		{`score ~ "x"`, `~ needs a string on the left, score is a number`},
		{`url ~ title`, `~ needs a string literal (a regular expression) on the right, not title`},
		{`url ~ "("`, `where:1:7: policy "p": where: bad regular expression "(": error parsing regexp`},
		{`url !~ "[z-a]"`, `bad regular expression`},
		{`host in ["a", 2]`, `where:1:15: policy "p": where: type mismatch: list element 2 is a number, host is a string`},
		{`host in []`, `empty list`},
		{`fetched_at in [1]`, `in needs a string or a number on the left, fetched_at is a time`},
		{`host in "a"`, `expected "[" to start a list`},
		{`["a"] == host`, `a list may only follow in or not in`},
		{`age(url) < 1d`, `age takes a time (fetched_at, updated_at), not a string url`},
		{`age() < 1d`, `age takes 1 argument(s), got 0`},
		{`age(fetched_at, updated_at) < 1d`, `age takes 1 argument(s), got 2`},
		{`has("score")`, `has takes a field or signal name, not "score"`},
		{`has(nope)`, `unknown field "nope"`},
		{`time(1) < fetched_at`, `time takes a string literal`},
		{`fetched_at < time("yesterday")`, `where:1:19: policy "p": where: time "yesterday": want RFC 3339`},
		{`lower(url) == "x"`, `unknown function "lower"`},
		// syntax
		{`url = "x"`, `where:1:5: policy "p": where: unexpected "=": use == for equality`},
		{`a && b`, `use and`},
		{`a || b`, `use or`},
		{`!true`, `use not, != or !~`},
		{`lang == 'en'`, `strings are written in double quotes or backquotes`},
		{`lang == "en`, `unterminated string`},
		{`lang == "\q"`, `bad string`},
		{`text_len > 3x`, `where:1:13: policy "p": where: duration 3x: unknown unit "x"`},
		{`text_len > 3d4`, `missing unit after 4`},
		{`1 < text_len < 5`, `comparisons do not chain`},
		{`(true`, `expected ")", found end of expression`},
		{`true)`, `unexpected ")" after a complete expression`},
		{`true true`, `unexpected "true" after a complete expression`},
		{`text_len >`, `where:1:11: policy "p": where: expected a field, signal, literal, function call or (, found end of expression`},
		{`host.name == "x"`, `only signal.<name> has a dot`},
		{`signal.`, `expected a signal name after signal.`},
		{`- url`, `expected a number after -`},
		{`host @ "x"`, `unexpected character '@'`},
		{"true and\n  nope", `where:2:3: policy "p": where: unknown field "nope"`},
		{`   `, ``}, // blank means every page: no error
	} {
		_, err := compileWhere(t, tc.where)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%q: unexpected error %v", tc.where, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%q: no error, want %q", tc.where, tc.want)
			continue
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: error %v does not wrap ErrInvalid", tc.where, err)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\n got  %v\n want %s", tc.where, err, tc.want)
		}
	}
}

// TestCompileInCode covers the checks Compile makes on files built in code.
func TestCompileInCode(t *testing.T) {
	for _, tc := range []struct {
		f    File
		want string
	}{
		{File{}, "no policies"},
		{File{Policies: []Policy{{Name: "a"}, {Name: "a"}}}, `policy "a": name: duplicate policy name`},
		{File{Policies: []Policy{{Name: "a b"}}}, `bad policy name "a b"`},
		{File{Policies: []Policy{{Name: "a", Top: &Top{K: 0, By: "text_len"}}}}, `policy "a": top.k: must be at least 1, got 0`},
		{File{Policies: []Policy{{Name: "a", Top: &Top{K: 3}}}}, `policy "a": top.by: missing ordering`},
		{File{Policies: []Policy{{Name: "a", Top: &Top{K: 3, By: "text_len sideways"}}}}, `top.by:1:10: policy "a": top.by: unexpected name sideways in ordering`},
		{File{Policies: []Policy{{Name: "a", History: -1}}}, `history: must be at least 1`},
		{File{Signals: map[string]Type{"x": TypeTime}, Policies: []Policy{{Name: "a"}}}, `signals.x: type time: want number or string`},
		{File{Signals: map[string]Type{"and": TypeNumber}, Policies: []Policy{{Name: "a"}}}, `bad signal name "and"`},
	} {
		_, err := Compile(&tc.f)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc.f, err, tc.want)
		}
	}
	s, err := Compile(&File{History: 5, Policies: []Policy{{Name: "a", Exported: true}, {Name: "b", History: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	if s.History("a") != 5 || s.History("b") != 2 || s.History("zz") != 0 {
		t.Errorf("history: a=%d b=%d zz=%d", s.History("a"), s.History("b"), s.History("zz"))
	}
	if !s.Exported("a") || s.Exported("b") || s.Exported("zz") {
		t.Error("exported flags wrong")
	}
	if d, _ := Compile(&File{Policies: []Policy{{Name: "a"}, {Name: "b", History: 2}}}); d.History("a") != DefaultHistory {
		t.Errorf("default history %d", d.History("a"))
	}
}

func TestFingerprint(t *testing.T) {
	mk := func(where string, exported bool) string {
		s, err := Compile(&File{Signals: map[string]Type{"score": TypeNumber}, Policies: []Policy{{Name: "a", Where: where, Exported: exported}}})
		if err != nil {
			t.Fatal(err)
		}
		return s.Fingerprint("a")
	}
	a := mk("score > 1", true)
	if a != mk("score > 1", true) || a != mk("  score > 1\n", true) {
		t.Error("fingerprint not stable")
	}
	if a == mk("score > 2", true) || a == mk("score > 1", false) {
		t.Error("fingerprint ignores a change")
	}
}
