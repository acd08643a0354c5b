package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pillarkit/pillar/bench/ingestbench"
	"github.com/pillarkit/pillar/bench/lorrybench"
	"github.com/pillarkit/pillar/bench/readbench"
	"github.com/pillarkit/pillar/bench/scalebench"
	"github.com/pillarkit/pillar/chaos"
	"github.com/pillarkit/pillar/cobbled"
	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/demo"
	"github.com/pillarkit/pillar/internal/objstore"
	"github.com/pillarkit/pillar/jobs/embedder"
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
					_, scalar := e.(float64)
					if _, str := e.(string); str {
						scalar = true
					}
					// (A duration-named key holding an object or list, such
					// as latency summaries by priority, is not a duration.)
					if scalar && durationKey.MatchString(k) && !strings.HasSuffix(k, "_ms") && !strings.HasSuffix(k, "_at") {
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

// TestJSONShapesEveryCommand runs every command that prints a result with
// --json on a real store, control plane and object store, and checks each
// output's shape (snake_case keys, _ms durations, RFC 3339 times). The
// servers' JSON is /healthz (internal/health, tested per server); get
// prints one object per key.
func TestJSONShapesEveryCommand(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	store, objs, pages := filepath.Join(dir, "store"), filepath.Join(dir, "objects"), filepath.Join(dir, "pages")
	writeCorpus(t, pages, 10, "v1")
	pol := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(pol, []byte("policies:\n  - name: all\n    exported: true\n    where: text_len > 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := startControlPlane(t, ctx, dir, 2)
	checked := map[string]bool{}
	// js runs a command and checks its --json output (one JSON value).
	js := func(args ...string) any {
		t.Helper()
		app := newApp()
		var stdout, stderr bytes.Buffer
		app.Writer, app.ErrWriter, app.Before = &stdout, &stderr, nil
		// As Main: flags may follow arguments (args.go).
		if err := app.RunContext(ctx, normalizeArgs(app, append([]string{"pillar"}, args...), &stderr)); err != nil {
			t.Fatalf("pillar %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		out := stdout.String()
		var v any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("pillar %s: not one JSON value: %v\n%s", strings.Join(args, " "), err, out)
		}
		var name []string
		for cmds := newApp().Commands; len(name) < len(args); {
			sub := findCommand(cmds, args[len(name)])
			if sub == nil {
				break
			}
			name, cmds = append(name, sub.Name), sub.Subcommands
		}
		what := strings.Join(name, " ")
		checkJSONShape(t, what+" --json", v, "attributes", "instances") // user-named attributes, instance types
		checked[what] = true
		return v
	}
	obj := func(v any, key string) any {
		t.Helper()
		m, ok := v.(map[string]any)
		if !ok || m[key] == nil {
			t.Fatalf("no %q in %v", key, v)
		}
		return m[key]
	}
	js("ingest", "--store", store, "--from", pages, "--base-url", "https://ex.org/", "--partitions", "2", "--json")
	cv := obj(js("backfill", "rechunk", "--store", store, "--chunker", "tokens:size=40,overlap=8", "--json"), "version").(string)
	js("backfill", "embed", "--store", store, "--chunks", cv, "--model", "hash:dim=8", "--json")
	js("backfill", "preview", "--store", store, "--chunker", "tokens:size=30,overlap=4", "--baseline", "tokens:size=40,overlap=8", "--json")
	sigs := filepath.Join(dir, "signals.csv")
	if err := os.WriteFile(sigs, []byte("url,score\nhttps://ex.org/p00000.html,0.5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	js("signals", "import", "--store", store, "--from", sigs, "--json")
	js("subsets", "validate", "--policies", pol, "--json")
	js("subsets", "recompute", "--store", store, "--policies", pol, "--as-of", "2026-11-30T00:00:00Z", "--json")
	js("subsets", "show", "--store", store, "--json")
	pub := js("publish", "--store", store, "--chunks", cv, "--model", "hash:dim=8", "--json")
	if e := obj(pub, "export").(map[string]any); e["bulk"] == nil {
		t.Errorf("publish --json: export without bulk (bench/scalebench reads export.puts and export.bulk): %v", e)
	}
	cv2 := obj(js("backfill", "rechunk", "--store", store, "--chunker", "tokens:size=30,overlap=4", "--json"), "version").(string)
	js("backfill", "embed", "--store", store, "--chunks", cv2, "--model", "hash:dim=8", "--json")
	js("publish", "--store", store, "--chunks", cv2, "--model", "hash:dim=8", "--json")
	js("rollback", "--store", store, "--json")
	js("versions", "--store", store, "--json")
	js("export", "--store", store, "--out", filepath.Join(dir, "exp1"), "--json")
	// A changed page re-published: export-queue records for Lorry.
	if err := os.WriteFile(filepath.Join(pages, "p00001.html"), []byte("<html><head><title>changed</title></head><body><p>the first page, changed, with new words.</p></body></html>"), 0o644); err != nil {
		t.Fatal(err)
	}
	js("ingest", "--store", store, "--from", pages, "--base-url", "https://ex.org/", "--json")
	js("backfill", "rechunk", "--store", store, "--chunker", "tokens:size=40,overlap=8", "--json")
	js("backfill", "embed", "--store", store, "--chunks", cv, "--model", "hash:dim=8", "--json")
	js("publish", "--store", store, "--chunks", cv, "--model", "hash:dim=8", "--json")
	js("lorry", "run", "--store", store, "--objstore", objs, "--control", addr, "--once", "--json")
	js("export", "--store", store, "--out", filepath.Join(dir, "exp2"), "--objstore", objs, "--control", addr, "--json")
	// Replay the first delivered record of a partition Lorry delivered to.
	rp := -1
	for _, ps := range obj(js("lorry", "status", "--store", store, "--all", "--json"), "partitions").([]any) {
		if m := ps.(map[string]any); rp < 0 && m["committed"].(float64) > 0 {
			rp = int(m["partition"].(float64))
		}
	}
	if rp < 0 {
		out, _, _ := runSubsets(t, "lorry", "status", "--store", store, "--all", "--json")
		t.Fatalf("lorry status --json: no partition with delivered records: %s", out)
	}
	js("lorry", "replay", "--store", store, "--objstore", objs, "--control", addr, "--partition", fmt.Sprint(rp), "--from", "0", "--to", "0", "--json")
	js("lorry", "cleanup", "--store", store, "--objstore", objs, "--dry-run", "--json")
	js("versions", "--store", store, "--control", addr, "--json")
	js("promote", "--control", addr, "--publication", cv+"/"+modelID(t, "hash:dim=8"), "--force", "--json")
	js("verify", "--store", store, "--json")
	js("leases", "--store", store, "--json")
	js("control", "batches", "--control", addr, "--partition", "0", "--json")
	ls := js("sst", "ls", objs, "--json")
	list, _ := ls.([]any)
	if len(list) == 0 {
		t.Fatalf("sst ls --json: no batches: %v", ls)
	}
	id := obj(list[0], "id").(string)
	part := int(obj(list[0], "partition").(float64))
	js("sst", "inspect", filepath.Join(objs, "batches", fmt.Sprintf("p%05d", part), id), "--json")
	// A node's data directory holding partition 0 as the batch log has it.
	node := filepath.Join(dir, "node")
	lo, err := objstore.OpenLocal(objs)
	if err != nil {
		t.Fatal(err)
	}
	n, err := cobbled.Open(ctx, cobbled.Options{ID: "n1", Addr: "127.0.0.1:1", Dir: node, Partitions: 2, CacheBytes: 8 << 20, Objects: lo})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := control.Dial(addr, &control.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	log, err := cl.ListBatches(ctx, 0, 0, 100, 0)
	if err != nil || len(log) == 0 {
		t.Fatalf("batch log of partition 0: %d entries, %v", len(log), err)
	}
	for _, e := range log {
		if err := n.Apply(ctx, cobbled.Batch{Seq: e.Seq, Manifest: e.Manifest}); err != nil {
			t.Fatal(err)
		}
	}
	if reps := obj(js("cobbled", "inspect", "--data", node, "--json"), "replicas").([]any); len(reps) != 1 {
		t.Errorf("cobbled inspect --json: %d replicas, want 1", len(reps))
	}
	// get --json: one object per key, from the node serving partition 0.
	glis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := n.NewGRPCServer()
	go g.Serve(glis)
	defer g.Stop()
	defer n.Close()
	app := newApp()
	var gout, gerr bytes.Buffer
	app.Writer, app.ErrWriter, app.Before = &gout, &gerr, nil
	last := log[len(log)-1].Manifest
	key := last.Smallest
	if err := app.RunContext(ctx, normalizeArgs(app, []string{"pillar", "get", "--node", glis.Addr().String(), key, "--json", "--version", last.Publication}, &gerr)); err != nil {
		t.Fatalf("get: %v\n%s", err, gerr.String())
	}
	lines := strings.Split(strings.TrimSpace(gout.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("get --json: %d lines for one key:\n%s", len(lines), gout.String())
	}
	row := decodeJSON(t, "get --json", lines[0])
	checkJSONShape(t, "get --json", row)
	if row["found"] != true || row["key"] != key {
		t.Errorf("get --json: %s", lines[0])
	}
	js(append(append([]string{"plan"}, planReference...), "--json")...)
	js("jobs", "list", "--json")
	js("jobs", "map", "--store", store, "--job", "wordcount", "-i", "docs", "-o", "wc", "-o", "docwords", "--no-progress", "--json")
	again := js("control", "register", "--control", addr, "--objstore", objs, "--partition", fmt.Sprint(part), "--id", id, "--json")
	if obj(again, "batch") != id {
		t.Errorf("control register --json: %v", again)
	}
	js("control", "retract", "--control", addr, "--batch", id, "--why", "test", "--json")
	synth := filepath.Join(dir, "synth")
	js("sst", "synth-export", "--out", synth, "--partitions", "2", "--pages", "20", "--json")
	js("sst", "upload-export", "--export", synth, "--to", filepath.Join(dir, "uploaded"), "--json")
	for _, want := range []string{"ingest", "backfill rechunk", "backfill embed", "backfill preview", "versions", "publish", "rollback",
		"export", "subsets validate", "subsets recompute", "subsets show", "verify", "leases", "control batches", "sst ls",
		"sst inspect", "cobbled inspect", "plan", "lorry run", "jobs list", "jobs map", "control register", "control retract",
		"sst synth-export", "sst upload-export", "lorry status", "lorry replay", "lorry cleanup", "signals import", "promote"} {
		if !checked[want] {
			t.Errorf("%s --json not checked", want)
		}
	}
}

// bench/scalebench reads `backfill rechunk --json` and `publish --json`
// by taking the last stdout line that starts with '{': the whole value must
// be on it.
func TestJSONOnOneLine(t *testing.T) {
	var b bytes.Buffer
	if err := printJSON(&b, map[string]any{"version": "v1", "export": map[string]any{"puts": 3, "list": []map[string]int{{"a": 1}}}}); err != nil {
		t.Fatal(err)
	}
	if s := b.String(); strings.Count(s, "\n") != 1 || !strings.HasPrefix(s, "{") {
		t.Fatalf("printJSON wrote %q", s)
	}
}

// demo, chaos and the benchmarks print their run's result with --json; a
// run takes minutes (chaos needs PostgreSQL and versitygw), so the shape is
// checked on results with every slice and map filled by one zero element.
func TestJSONShapeDemoChaos(t *testing.T) {
	for name, v := range map[string]any{"demo": &demo.Report{}, "chaos": &chaos.Summary{}, "bench read": &readbench.Report{},
		"bench scale": &scalebench.Report{}, "bench lorry": &lorrybench.Series{}, "bench ingest": &ingestbench.Report{}} {
		fillOne(reflect.ValueOf(v).Elem(), 0)
		var b bytes.Buffer
		if err := printJSON(&b, v); err != nil {
			t.Fatal(err)
		}
		var got any
		if err := json.Unmarshal(b.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		// Map keys are data (fault kinds, read outcomes, child names).
		checkJSONShape(t, name+" --json", got, "reads", "read_errors", "faults", "faults_skipped", "crashes", "starts", "outcomes")
	}
}

// fillOne gives every nil slice and map one zero element, recursively, so
// the shape check sees their element types.
func fillOne(v reflect.Value, depth int) {
	if depth > 6 {
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fillOne(v.Field(i), depth+1)
			}
		}
	case reflect.Slice:
		if v.Len() == 0 && v.Type().Elem().Kind() != reflect.Uint8 {
			v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		}
		for i := 0; i < v.Len(); i++ {
			fillOne(v.Index(i), depth+1)
		}
	case reflect.Map:
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type()))
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			if k.Kind() == reflect.String {
				k.SetString("x")
			}
			fillOne(e, depth+1)
			v.SetMapIndex(k, e)
		}
	case reflect.Pointer:
		if v.IsNil() && v.Type().Elem().Kind() == reflect.Struct {
			v.Set(reflect.New(v.Type().Elem()))
		}
		if !v.IsNil() {
			fillOne(v.Elem(), depth+1)
		}
	}
}

// modelID is the embedding version id of a model spec.
func modelID(t *testing.T, spec string) string {
	t.Helper()
	e, err := embedder.Parse(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	return e.ID()
}
