package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExplainTopKFinalAndDiffJSON: explain gives the final answer after
// top-K (in, out, or not computed before the first recompute), and subsets
// diff --json lists the entered pages with their URLs.
func TestExplainTopKFinalAndDiffJSON(t *testing.T) {
	root := t.TempDir()
	pages, store := filepath.Join(root, "pages"), filepath.Join(root, "store")
	os.MkdirAll(pages, 0o755)
	for i := 0; i < 4; i++ { // page i is longer than page i-1
		body := strings.Repeat("<p>some words of a page of a growing size.</p>\n", 20*(i+1))
		os.WriteFile(filepath.Join(pages, fmt.Sprintf("p%d.html", i)), []byte("<html><body>"+body+"</body></html>"), 0o644)
	}
	policies := filepath.Join(root, "policies.yaml")
	os.WriteFile(policies, []byte("policies:\n  - name: longest\n    exported: true\n    where: text_len >= 0\n    top: {k: 2, by: text_len desc}\n"), 0o644)
	if _, _, err := runSubsets(t, "ingest", "--store", store, "--from", pages, "--base-url", "https://ex.org/", "--partitions", "2"); err != nil {
		t.Fatal(err)
	}
	explain := func(page string) map[string]any {
		t.Helper()
		out, _, err := runSubsets(t, "subsets", "explain", "--store", store, "--policies", policies, "--url", "https://ex.org/"+page, "--json")
		if err != nil {
			t.Fatalf("explain %s: %v", page, err)
		}
		v := decodeJSON(t, "subsets explain --json", out)
		checkJSONShape(t, "subsets explain --json", v)
		return v
	}
	final := func(v map[string]any) string {
		return v["verdicts"].([]any)[0].(map[string]any)["final"].(string)
	}
	if v := explain("p3.html"); final(v) != "not computed" || v["exported"] != false {
		t.Fatalf("before recompute: %v", v)
	}
	if _, _, err := runSubsets(t, "subsets", "recompute", "--store", store, "--policies", policies); err != nil {
		t.Fatal(err)
	}
	for page, want := range map[string]string{"p3.html": "in", "p2.html": "in", "p1.html": "out", "p0.html": "out"} {
		v := explain(page)
		if got := final(v); got != want || v["exported"] != (want == "in") {
			t.Errorf("%s after recompute: final %q exported %v, want %q", page, got, v["exported"], want)
		}
	}
	out, _, err := runSubsets(t, "subsets", "explain", "--store", store, "--policies", policies, "--url", "https://ex.org/p1.html")
	if err != nil || !strings.Contains(out, "longest: out after top-K") || !strings.Contains(out, "not exported") {
		t.Errorf("explain text for a page top-K dropped: %v\n%s", err, out)
	}

	out, _, err = runSubsets(t, "subsets", "diff", "--store", store, "--subset", "longest", "--json")
	if err != nil {
		t.Fatal(err)
	}
	v := decodeJSON(t, "subsets diff --json", out)
	checkJSONShape(t, "subsets diff --json", v)
	if v["entered"].(float64) != 2 || v["left"].(float64) != 0 {
		t.Fatalf("subsets diff --json counts: %s", out)
	}
	var urls []string
	for _, p := range v["pages"].([]any) {
		pm := p.(map[string]any)
		if pm["change"] != "enter" || pm["page_key"] == "" {
			t.Errorf("page %v", pm)
		}
		urls = append(urls, pm["url"].(string))
	}
	if got := strings.Join(urls, " "); !strings.Contains(got, "https://ex.org/p3.html") || !strings.Contains(got, "https://ex.org/p2.html") {
		t.Errorf("subsets diff --json URLs = %s", got)
	}
	out, _, err = runSubsets(t, "subsets", "diff", "--store", store, "--subset", "longest")
	if err != nil || !strings.Contains(out, "https://ex.org/p3.html") {
		t.Errorf("subsets diff shows no URLs: %v\n%s", err, out)
	}
}
