package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runSubsets(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	app := newApp()
	var out, errb bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errb
	app.Before = nil
	err = app.Run(append([]string{"pillar"}, args...))
	return out.String(), errb.String(), err
}

func TestSubsetsValidate(t *testing.T) {
	out, _, err := runSubsets(t, "subsets", "validate", "--policies", "../testdata/policies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ok, 7 policies (4 exported)", "signals: score (number)", "long-pages", "200 per host by text_len desc"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	out, _, err = runSubsets(t, "subsets", "validate", "--json", "--policies", "../testdata/policies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Valid    bool `json:"valid"`
		Policies []struct {
			Name string `json:"name"`
		} `json:"policies"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || !v.Valid || len(v.Policies) != 7 {
		t.Errorf("json: %v %+v", err, v)
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("signals: {score: number}\npolicies:\n  - name: a\n    where: score > \"high\"\n  - name: a\n    top: {k: 0, by: score}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, err := runSubsets(t, "subsets", "validate", "--policies", bad)
	if err == nil || !strings.Contains(err.Error(), "3 error(s)") {
		t.Fatalf("want 3 errors, got %v\n%s", err, errOut)
	}
	for _, want := range []string{bad + ":4:18: policy \"a\": where: type mismatch", bad + ":5:11: policy \"a\": name: duplicate", bad + ":6:14: policy \"a\": top.k: must be at least 1, got 0"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
}
