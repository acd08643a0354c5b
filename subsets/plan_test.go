package subsets

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pillarkit/pillar/pillar"
)

func members(keys ...string) []pillar.SubsetMember {
	out := make([]pillar.SubsetMember, len(keys))
	for i, k := range keys {
		out[i] = pillar.SubsetMember{PageKey: k, Score: float64(i + 1)}
	}
	return out
}

func TestDiff(t *testing.T) {
	ch, err := Diff("s", members("a", "b", "d", "f"), members("b", "c", "d", "e"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range ch {
		if c.Subset != "s" {
			t.Fatalf("subset %q", c.Subset)
		}
		got = append(got, c.Kind.String()+" "+c.PageKey)
	}
	want := []string{"leave a", "stay b", "enter c", "stay d", "enter e", "leave f"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if ch[1].OldScore != 2 || ch[1].NewScore != 1 {
		t.Errorf("stay b scores: %+v", ch[1])
	}
	for _, tc := range []struct{ old, new []pillar.SubsetMember }{
		{nil, nil}, {members("a"), nil}, {nil, members("a")},
	} {
		if _, err := Diff("s", tc.old, tc.new); err != nil {
			t.Error(err)
		}
	}
	for _, tc := range []struct {
		old, new []pillar.SubsetMember
		want     string
	}{
		{members("b", "a"), nil, `subsets: diff of "s": old generation: key a after b`},
		{nil, members("a", "a"), `new generation: key a after a`},
		{members("a", "c"), members("a", "b", "d", "c"), `new generation: key c after d`},
	} {
		_, err := Diff("s", tc.old, tc.new)
		if !errors.Is(err, ErrUnsorted) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
	// Stopping early is allowed.
	n := 0
	for range DiffSeq("s", slices.Values(members("a", "b", "c")), slices.Values(members("x"))) {
		n++
		if n == 2 {
			break
		}
	}
}

func TestExportDecision(t *testing.T) {
	for _, tc := range []struct {
		old, new []string
		changed  bool
		want     string
	}{
		{nil, []string{"fresh"}, false, "put k subsets: entered fresh"},
		{nil, []string{"fresh", "docs", "fresh"}, true, "put k subsets: entered docs,fresh"},
		{[]string{"fresh"}, []string{"fresh"}, false, " k "},
		{[]string{"fresh"}, []string{"fresh"}, true, "put k subsets: changed while in fresh"},
		{[]string{"fresh"}, []string{"docs"}, false, " k "}, // moved between exported subsets
		{[]string{"fresh", "docs"}, []string{"docs"}, false, " k "},
		{[]string{"fresh", "docs"}, []string{"docs"}, true, "put k subsets: changed while in docs"},
		{[]string{"fresh", "docs"}, nil, false, "delete k subsets: left docs,fresh"},
		{[]string{"fresh"}, nil, true, "delete k subsets: left fresh"},
		{nil, nil, true, " k "},
		{nil, nil, false, " k "},
	} {
		if got := ExportDecision("k", tc.old, tc.new, tc.changed).String(); got != tc.want {
			t.Errorf("old %v new %v changed %v: got %q, want %q", tc.old, tc.new, tc.changed, got, tc.want)
		}
	}
}

func TestPrune(t *testing.T) {
	kept, dropped := Prune([]int64{5, 1, 3, 2, 4, 3}, 3)
	if !slices.Equal(kept, []int64{3, 4, 5}) || !slices.Equal(dropped, []int64{1, 2}) {
		t.Errorf("kept %v dropped %v", kept, dropped)
	}
	kept, dropped = Prune([]int64{7}, 0)
	if !slices.Equal(kept, []int64{7}) || dropped != nil {
		t.Errorf("keep 0: kept %v dropped %v", kept, dropped)
	}
}

const planPolicies = `
signals: {score: number}
policies:
  - name: fresh
    exported: true
    where: age(fetched_at) < 7d
  - name: high-value
    exported: true
    where: score >= 0.8
  - name: sql
    exported: false
    where: url ~ "/sql-"
  - name: best
    exported: true
    where: has(score)
    top: {k: 1, per: host, by: score desc}
`

func planPages(t *testing.T) []Page {
	return parsePages(t, `
key=01 url=https://h/sql-a host=h fetched=2026-11-28 score=0.9
key=02 url=https://h/b host=h fetched=2026-11-10 score=0.5
key=03 url=https://h/sql-c host=h fetched=2026-11-29
key=04 url=https://g/d host=g fetched=2026-11-01 score=0.1
key=05 url=https://g/sql-e host=g fetched=2026-10-01
`)
}

func decisions(pl *Plan) string {
	var b strings.Builder
	for _, d := range pl.Decisions {
		b.WriteString(d.String() + "\n")
	}
	return b.String()
}

func changes(pl *Plan) string {
	var b strings.Builder
	for _, c := range pl.Changes {
		if c.Kind != Stay {
			fmt.Fprintf(&b, "%s %s %s\n", c.Subset, c.Kind, c.PageKey)
		}
	}
	return b.String()
}

// TestPlanLifecycle walks the membership diff through enter, stay, change,
// leave, idempotent re-runs, and a page that leaves one of two exported
// subsets.
func TestPlanLifecycle(t *testing.T) {
	set, err := Parse("p.yaml", []byte(planPolicies))
	if err != nil {
		t.Fatal(err)
	}
	pages := planPages(t)
	day1 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

	// First run: everything enters.
	p1, err := set.Plan(pages, day1, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantChanges := `fresh enter 01
fresh enter 03
high-value enter 01
sql enter 01
sql enter 03
sql enter 05
best enter 01
best enter 04
`
	if got := changes(p1); got != wantChanges {
		t.Errorf("run 1 changes:\n%s\nwant:\n%s", got, wantChanges)
	}
	// 05 is only in sql, which is not exported; 02 is in nothing.
	wantDec := `put 01 subsets: entered best,fresh,high-value
put 03 subsets: entered fresh
put 04 subsets: entered best
`
	if got := decisions(p1); got != wantDec {
		t.Errorf("run 1 decisions:\n%s\nwant:\n%s", got, wantDec)
	}

	// Idempotence: same inputs, same as-of, page order shuffled: no work,
	// the same generation.
	prev := set.Previous(p1)
	rev := slices.Clone(pages)
	slices.Reverse(rev)
	p2, err := set.Plan(rev, day1, prev, func(string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	if got := changes(p2) + decisions(p2); got != "" {
		t.Errorf("re-run produced work:\n%s", got)
	}
	for name, m := range p1.Members {
		if !slices.Equal(m, p2.Members[name]) {
			t.Errorf("%s: re-run changed the generation", name)
		}
	}

	// A member's record changes: re-exported. A non-member's change: nothing.
	p3, err := set.Plan(pages, day1, prev, func(k string) bool { return k == "03" || k == "02" })
	if err != nil {
		t.Fatal(err)
	}
	if got := decisions(p3); got != "put 03 subsets: changed while in fresh\n" {
		t.Errorf("change: got %q", got)
	}

	// Eight days later 01 is no longer fresh but still high-value and best:
	// it leaves fresh and is not deleted. 03 leaves its only exported subset.
	day5 := day1.Add(8 * 24 * time.Hour)
	p4, err := set.Plan(pages, day5, prev, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := changes(p4); got != "fresh leave 01\nfresh leave 03\n" {
		t.Errorf("day 5 changes: %q", got)
	}
	if got := decisions(p4); got != "delete 03 subsets: left fresh\n" {
		t.Errorf("day 5 decisions: %q", got)
	}

	// A policy that stops being exported deletes members exported only by it;
	// a policy that disappears has its members leave.
	set2, err := Parse("p2.yaml", []byte(strings.Replace(strings.Replace(planPolicies,
		"name: fresh\n    exported: true", "name: fresh\n    exported: false", 1),
		"  - name: best\n    exported: true\n    where: has(score)\n    top: {k: 1, per: host, by: score desc}\n", "", 1)))
	if err != nil {
		t.Fatal(err)
	}
	p5, err := set2.Plan(pages, day1, prev, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := changes(p5); got != "best leave 01\nbest leave 04\n" {
		t.Errorf("policy change: changes %q", got)
	}
	if got := decisions(p5); got != "delete 03 subsets: left fresh\ndelete 04 subsets: left best\n" {
		t.Errorf("policy change: decisions %q", got)
	}
	if _, ok := p5.Members["best"]; ok {
		t.Error("a removed policy still has members")
	}
}

func TestNewPage(t *testing.T) {
	d := &pillar.Doc{PageKey: "ab", URL: "https://Example.com/x", Text: "héllo", FetchedAt: 5}
	p, err := NewPage(d, []pillar.Signal{
		{PageKey: "ab", Name: "score", Num: 0.5, IsNum: true},
		{PageKey: "ab", Name: "cat", Str: "x"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.Host != "example.com" || p.TextLen != 6 || p.FetchedAt != 5 || p.Key != "ab" {
		t.Errorf("page %+v", p)
	}
	if v, ok := p.num("score"); !ok || v != 0.5 {
		t.Error("score")
	}
	if v, ok := p.str("cat"); !ok || v != "x" {
		t.Error("cat")
	}
	if _, ok := p.num("cat"); ok {
		t.Error("a string signal read as a number")
	}
	if _, err := NewPage(d, []pillar.Signal{{PageKey: "cd", Name: "score"}}); err == nil || !strings.Contains(err.Error(), "belongs to page cd") {
		t.Errorf("foreign signal: %v", err)
	}
	if _, err := NewPage(d, []pillar.Signal{{PageKey: "ab", Name: "s"}, {PageKey: "ab", Name: "s"}}); !errors.Is(err, ErrDuplicateSignal) {
		t.Errorf("duplicate signal: %v", err)
	}
}

// TestSourceRoundTrip: a job re-parses Set.Source and gets the same policies.
func TestSourceRoundTrip(t *testing.T) {
	a := demoSet(t)
	b, err := Parse(a.Filename(), a.Source())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Names(), b.Names()) {
		t.Fatalf("names %v vs %v", a.Names(), b.Names())
	}
	for _, n := range a.Names() {
		if a.Fingerprint(n) != b.Fingerprint(n) || a.Exported(n) != b.Exported(n) || a.History(n) != b.History(n) || a.HasTop(n) != b.HasTop(n) {
			t.Errorf("%s differs after the round trip", n)
		}
	}
	if a.Filename() != "../testdata/policies.yaml" || len(a.Source()) == 0 {
		t.Errorf("filename %q, %d source bytes", a.Filename(), len(a.Source()))
	}
	if c, _ := Compile(&File{Policies: []Policy{{Name: "x"}}}); c.Source() != nil {
		t.Error("a set built in code has source")
	}
}
