package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/local"
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

func TestSubsetsExplain(t *testing.T) {
	dir := t.TempDir()
	st, err := local.Create(dir, &local.Options{Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	url := "https://www.postgresql.org/docs/15/sql-select.html"
	key, _, err := pillar.KeyOfURL(url)
	if err != nil {
		t.Fatal(err)
	}
	fetched := time.Date(2026, 11, 13, 0, 0, 0, 0, time.UTC)
	tx, err := st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	write := func(table string, rowType any, rows ...any) {
		w, err := tx.WriteTable(ctx, table, rowType, &pillar.WriteOptions{SortedBy: []string{"page_key"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if err := w.Write(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	write(pillar.TableDocs, pillar.Doc{}, &pillar.Doc{PageKey: key.String(), URL: url, Host: "www.postgresql.org",
		FetchedAt: fetched.UnixMilli(), Lang: "en", TextLen: 1500, OutLinks: 7})
	write(pillar.TableSignals, pillar.Signal{}, &pillar.Signal{PageKey: key.String(), Name: "score", Num: 0.3, IsNum: true})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	st.Close()

	out, _, err := runSubsets(t, "subsets", "explain", "--store", dir, "--policies", "../testdata/policies.yaml",
		"--url", url, "--as-of", "2026-11-20T00:00:00Z")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"page " + key.String() + " " + url + ", as of 2026-11-20T00:00:00Z",
		`fresh          true      member     age(fetched_at) < 30d [age(fetched_at) = 7d] and lang == "en" [lang = "en"]`,
		"long-pages     true      no         text_len >= 2000 [text_len = 1500]",
		"high-value     true      no         score >= 0.8 [score = 0.3]",
		"exported: a member of sql-reference, fresh",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	out, _, err = runSubsets(t, "subsets", "explain", "--store", dir, "--policies", "../testdata/policies.yaml",
		"--key", key.String(), "--as-of", "2027-01-20T00:00:00Z")
	if err != nil || !strings.Contains(out, "fresh          true      no         age(fetched_at) < 30d [age(fetched_at) = 68d]") {
		t.Errorf("later as-of: %v\n%s", err, out)
	}
	if _, _, err := runSubsets(t, "subsets", "explain", "--store", dir, "--policies", "../testdata/policies.yaml",
		"--url", "https://www.postgresql.org/docs/15/nope.html"); !errors.Is(err, pillar.ErrNotFound) {
		t.Errorf("unknown page: %v", err)
	}
	if _, _, err := runSubsets(t, "subsets", "explain", "--store", dir, "--policies", "../testdata/policies.yaml"); err == nil {
		t.Error("explain without --url or --key succeeded")
	}
}
