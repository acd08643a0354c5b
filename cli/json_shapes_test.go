package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	snakeKey   = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	goDuration = regexp.MustCompile(`^-?[0-9.]+(ns|µs|us|ms|s|m|h)([0-9.]+(ns|µs|us|ms|s|m|h))*$`)
	timeish    = regexp.MustCompile(`(?i)^\d{4}-\d\d-\d\d[T ]`)
	// Keys that hold a duration: they end in _ms.
	durationKey = regexp.MustCompile(`(^|_)(elapsed|duration|took|age|latency|wait|uptime|interval|timeout)($|_)`)
)

// checkJSONShape fails on a key that is not snake_case, a duration that is
// not milliseconds under an _ms key (a Go duration string, or a duration
// key without _ms), and a time that is not RFC 3339. Keys under a skip key
// (user-named attributes) are not checked, their values are.
func checkJSONShape(t *testing.T, what string, v any, skip ...string) {
	t.Helper()
	for _, p := range jsonShapeProblems(what, v, skip...) {
		t.Error(p)
	}
}

func jsonShapeProblems(what string, v any, skip ...string) []string {
	var problems []string
	errorf := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	var walk func(path string, v any, checkKeys bool)
	walk = func(path string, v any, checkKeys bool) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				p := path + "." + k
				if checkKeys {
					if !snakeKey.MatchString(k) {
						errorf("%s: key %s is not snake_case", what, p)
					}
					if durationKey.MatchString(k) && !strings.HasSuffix(k, "_ms") && !strings.HasSuffix(k, "_at") {
						errorf("%s: key %s holds a duration: want milliseconds under a _ms key", what, p)
					}
				}
				walk(p, e, checkKeys && !slices.Contains(skip, k))
			}
		case []any:
			for i, e := range x {
				walk(path+"["+strconv.Itoa(i)+"]", e, checkKeys)
			}
		case string:
			if goDuration.MatchString(x) && strings.ContainsAny(x, "hmsµn") {
				errorf("%s: %s = %q is a Go duration: want a number of milliseconds under a _ms key", what, path, x)
			}
			if timeish.MatchString(x) {
				if _, err := time.Parse(time.RFC3339Nano, x); err != nil {
					errorf("%s: %s = %q is not RFC 3339", what, path, x)
				}
			}
		}
	}
	walk("", v, true)
	return problems
}

func decodeJSON(t *testing.T, what, s string) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%s: not one JSON object: %v\n%s", what, err, s)
	}
	return v
}

func keysOf(m map[string]any) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	sort.Strings(k)
	return k
}

func TestCheckJSONShapeCatches(t *testing.T) {
	for _, bad := range []string{
		`{"ElapsedNs": 1}`, `{"elapsed": 12}`, `{"took": "1.5s"}`, `{"a": {"b": "2026-12-01 10:00:00"}}`, `{"x": [{"lagNs": 3}]}`,
	} {
		var v any
		if err := json.Unmarshal([]byte(bad), &v); err != nil {
			t.Fatal(err)
		}
		if len(jsonShapeProblems("bad", v)) == 0 {
			t.Errorf("checkJSONShape passed %s", bad)
		}
	}
}

// TestTablesJSONAndFiles: tables --json is one snake_case object; --files
// lists each table's Parquet files, absolute, existing, and as many as the
// table has.
func TestTablesJSONAndFiles(t *testing.T) {
	root := t.TempDir()
	store := filepath.Join(root, "store")
	writeCorpus(t, filepath.Join(root, "pages"), 12, "v")
	if _, _, err := runSubsets(t, "ingest", "--store", store, "--from", filepath.Join(root, "pages"), "--partitions", "4"); err != nil {
		t.Fatal(err)
	}
	out, _, err := runSubsets(t, "tables", "--store", store, "--json")
	if err != nil {
		t.Fatal(err)
	}
	v := decodeJSON(t, "tables --json", out)
	checkJSONShape(t, "tables --json", v, "attributes")
	if got := strings.Join(keysOf(v), ","); got != "attributes,backend,export_queue_rows,generation,partitions,store,tables" {
		t.Errorf("tables --json keys = %s", got)
	}
	tables := v["tables"].([]any)
	if len(tables) == 0 {
		t.Fatalf("no tables: %s", out)
	}
	docs := tables[0].(map[string]any)
	if got := strings.Join(keysOf(docs), ","); got != "bytes,files,generation,name,rows,schema,sorted_by" {
		t.Errorf("tables --json table keys = %s", got)
	}
	if docs["name"] != "docs" || docs["rows"].(float64) != 12 {
		t.Errorf("docs = %v", docs)
	}

	out, _, err = runSubsets(t, "tables", "--store", store, "--files", "--json")
	if err != nil {
		t.Fatal(err)
	}
	v = decodeJSON(t, "tables --files --json", out)
	for _, tb := range v["tables"].([]any) {
		tm := tb.(map[string]any)
		paths, _ := tm["paths"].([]any)
		if len(paths) != int(tm["files"].(float64)) {
			t.Errorf("table %s: %d paths for %v files", tm["name"], len(paths), tm["files"])
		}
		for _, p := range paths {
			if !filepath.IsAbs(p.(string)) {
				t.Errorf("path %s is not absolute", p)
			}
			if _, err := os.Stat(p.(string)); err != nil {
				t.Error(err)
			}
		}
	}
	out, _, err = runSubsets(t, "tables", "--store", store, "--files")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "docs\t/") || !strings.HasSuffix(lines[0], ".parquet") {
		t.Errorf("tables --files:\n%s", out)
	}
}
