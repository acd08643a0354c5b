package layout

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/pillarkit/pillar"

// pkg is what the check needs of `go list -json`.
type pkg struct {
	ImportPath   string
	Deps         []string
	TestImports  []string
	XTestImports []string
}

// kind classifies a package of the module by its path.
func kind(path string) string {
	rel := strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
	first := strings.SplitN(rel, "/", 2)[0]
	switch {
	case rel == "cli" || rel == "cmd/pillar":
		return "binary"
	case first == "bench" || first == "demo" || first == "chaos" || first == "badinput":
		return "harness"
	case rel == "internal/testcluster":
		return "fixture"
	}
	return "product"
}

func inModule(path string) bool { return path == module || strings.HasPrefix(path, module+"/") }

// violations lists every product package whose build pulls in a harness, the
// binary or a fixture, and every product package whose tests import a harness
// or the binary.
func violations(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		if !inModule(p.ImportPath) || kind(p.ImportPath) != "product" {
			continue
		}
		for _, d := range p.Deps {
			if inModule(d) && kind(d) != "product" {
				out = append(out, p.ImportPath+" imports "+kind(d)+" "+d)
			}
		}
		for _, d := range append(append([]string{}, p.TestImports...), p.XTestImports...) {
			if k := kind(d); inModule(d) && (k == "harness" || k == "binary") {
				out = append(out, p.ImportPath+" (tests) import "+k+" "+d)
			}
		}
	}
	sort.Strings(out)
	return out
}

func goList(t *testing.T, args ...string) []pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-e", "-json=ImportPath,Deps,TestImports,XTestImports"}, args...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// TestProductImportsNoHarness runs the check on the module as it is.
func TestProductImportsNoHarness(t *testing.T) {
	pkgs := goList(t, "./...")
	kinds := map[string]int{}
	for _, p := range pkgs {
		kinds[kind(p.ImportPath)]++
	}
	// The classification must see each kind, or it checks nothing.
	for _, k := range []string{"product", "harness", "binary", "fixture"} {
		if kinds[k] == 0 {
			t.Fatalf("go list found no %s package (%v); the classification is out of date", k, kinds)
		}
	}
	for _, v := range violations(pkgs) {
		t.Error(v)
	}
}

// TestViolationsCatchHarnessImport feeds the check import graphs that break
// each rule, and one that keeps them.
func TestViolationsCatchHarnessImport(t *testing.T) {
	cases := []struct {
		name string
		p    pkg
		want string
	}{
		{"transitive harness", pkg{ImportPath: module + "/cobbled", Deps: []string{module + "/internal/rocks", module + "/bench/readbench"}},
			module + "/cobbled imports harness " + module + "/bench/readbench"},
		{"binary", pkg{ImportPath: module + "/lorry", Deps: []string{module + "/cli"}},
			module + "/lorry imports binary " + module + "/cli"},
		{"fixture outside tests", pkg{ImportPath: module + "/cobbled/router", Deps: []string{module + "/internal/testcluster"}},
			module + "/cobbled/router imports fixture " + module + "/internal/testcluster"},
		{"harness in tests", pkg{ImportPath: module + "/pillar/local", XTestImports: []string{module + "/demo"}},
			module + "/pillar/local (tests) import harness " + module + "/demo"},
	}
	for _, c := range cases {
		got := violations([]pkg{c.p})
		if len(got) != 1 || got[0] != c.want {
			t.Errorf("%s: violations = %q, want [%q]", c.name, got, c.want)
		}
	}
	ok := []pkg{
		{ImportPath: module + "/cobbled/router", Deps: []string{module + "/cobbled"}, TestImports: []string{module + "/internal/testcluster"}},
		{ImportPath: module + "/bench/readbench", Deps: []string{module + "/internal/testcluster", module + "/cobbled"}},
		{ImportPath: module + "/cli", Deps: []string{module + "/demo", module + "/chaos"}},
	}
	if got := violations(ok); len(got) != 0 {
		t.Errorf("allowed imports reported: %q", got)
	}
}

// TestGoListSeesAnAddedHarnessImport adds, through go list's overlay, a file
// to a real product package that imports a harness, and checks that the
// module-level check reports it: the check reads the real build graph.
func TestGoListSeesAnAddedHarnessImport(t *testing.T) {
	dir := t.TempDir()
	src := dir + "/probe.go"
	if err := writeFile(src, "package bytesize\n\nimport _ \""+module+"/bench/switchbench\"\n"); err != nil {
		t.Fatal(err)
	}
	overlay := dir + "/overlay.json"
	abs, err := exec.Command("go", "list", "-f", "{{.Dir}}", module+"/internal/bytesize").Output()
	if err != nil {
		t.Fatal(err)
	}
	target := strings.TrimSpace(string(abs)) + "/zz_layout_probe.go"
	js, _ := json.Marshal(map[string]map[string]string{"Replace": {target: src}})
	if err := writeFile(overlay, string(js)); err != nil {
		t.Fatal(err)
	}
	pkgs := goList(t, "-overlay", overlay, module+"/internal/bytesize")
	found := false
	for _, v := range violations(pkgs) {
		if strings.HasPrefix(v, module+"/internal/bytesize imports harness "+module+"/bench/switchbench") {
			found = true
		}
	}
	if !found {
		t.Fatalf("an overlay import of bench/switchbench from internal/bytesize was not reported: %q", violations(pkgs))
	}
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o644) }
