package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runPlanCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	app := newApp()
	var out, errb bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errb
	app.Before = nil
	err := app.Run(append([]string{"pillar", "plan"}, args...))
	return out.String(), err
}

var planReference = []string{"--rps", "200000", "--keys-per-request", "12.5", "--item-size", "50KB", "--pages", "2e9",
	"--updates-per-s", "5000", "--replicas", "3", "--zones", "3"}

func TestPlanCLI(t *testing.T) {
	png := filepath.Join(t.TempDir(), "cost.png")
	out, err := runPlanCLI(t, append(planReference, "--plot", png)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Serving nodes: 231 × i4i.4xlarge", "cross-AZ transfer", "DynamoDB provisioned, monthly:", "Pillar / DynamoDB: 0.095 of on-demand, 0.229 of provisioned", "| 50 KB |"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if b, err := os.ReadFile(png); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("plot: %v", err)
	}

	out, err = runPlanCLI(t, append(planReference, "--json", "--bench", "../plan/testdata/bench-results.json", "--bench-cpus", "2")...)
	if err != nil {
		t.Fatal(err)
	}
	var js struct {
		Plan struct {
			Serving struct{ Nodes int }
			Options struct {
				KeysPerCoreS float64 `json:"keys_per_core_s"`
			}
			RatioProvisioned float64 `json:"ratio_provisioned"`
		}
		Sensitivity [][]struct{ RPS float64 }
		Bench       struct{ CPUs int }
	}
	if err := json.Unmarshal([]byte(out), &js); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if js.Plan.Serving.Nodes == 0 || js.Bench.CPUs != 2 || js.Plan.Options.KeysPerCoreS < 4800 || len(js.Sensitivity) != 7 || len(js.Sensitivity[0]) != 5 {
		t.Errorf("--json: %+v", js)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--rps", "-1", "--keys-per-request", "12", "--item-size", "50KB", "--pages", "1e9"}, "--rps -1"},
		{[]string{"--rps", "1", "--keys-per-request", "12", "--item-size", "50KB", "--pages", "1e9", "--replicas", "0"}, "--replicas 0"},
		{[]string{"--rps", "1", "--keys-per-request", "12", "--item-size", "50KB", "--pages", "1e9", "--replicas", "5"}, "--replicas 5 > --zones 3"},
		{[]string{"--rps", "1", "--keys-per-request", "12", "--item-size", "big", "--pages", "1e9"}, "--item-size"},
		{[]string{"--rps", "1", "--keys-per-request", "12", "--item-size", "50KB", "--pages", "1e9", "--prices", "/nonexistent.yaml"}, "prices"},
		{[]string{"--rps", "1", "--keys-per-request", "12", "--item-size", "50KB", "--pages", "1e9", "--disk-fill", "0"}, "--disk-fill 0"},
		{[]string{"--rps", "1", "--keys-per-request", "12", "--item-size", "50KB", "--pages", "1e9", "--bench-cpus", "4"}, "only with --bench"},
	} {
		if _, err := runPlanCLI(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one naming %q", c.args, err, c.want)
		}
	}
}
