package demo

import (
	"strings"
	"testing"
	"time"

	"github.com/pillarkit/pillar/subsets"
)

// The derived policy change keeps every policy as it was, except that each
// exported one no longer admits the removed pages.
func TestChangedPolicies(t *testing.T) {
	set, err := loadPolicies("")
	if err != nil {
		t.Fatal(err)
	}
	src, err := changedPolicies(set, `not (key in ["00000000000000000000000000000001"])`)
	if err != nil {
		t.Fatal(err)
	}
	set2, err := subsets.Parse("v2", src)
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	if strings.Join(set2.Names(), ",") != strings.Join(set.Names(), ",") {
		t.Fatalf("names %v, want %v", set2.Names(), set.Names())
	}
	now := time.Now()
	page := func(key string) *subsets.Page {
		return &subsets.Page{Key: key, URL: "https://x.example/a", Host: "x.example", TextLen: 5000, FetchedAt: now.UnixMilli()}
	}
	in := func(s *subsets.Set, p *subsets.Page) map[string]bool {
		m := map[string]bool{}
		for _, v := range s.Explain(p, now.Add(time.Hour)) {
			m[v.Subset] = v.Result == "member" || v.Result == "candidate"
		}
		return m
	}
	kept, removed := page("00000000000000000000000000000002"), page("00000000000000000000000000000001")
	if a, b := in(set, kept), in(set2, kept); a["fresh"] != b["fresh"] || !b["fresh"] {
		t.Fatalf("a kept page: %v before, %v after", a, b)
	}
	if b := in(set2, removed); b["fresh"] || b["long-pages"] {
		t.Fatalf("a removed page is still in an exported subset: %v", b)
	}
	if a, b := in(set, removed), in(set2, removed); !a["fresh"] || !a["long-pages"] || a["link-hubs"] != b["link-hubs"] {
		t.Fatalf("the removed page before %v, after %v: only the exported subsets change", a, b)
	}
}
