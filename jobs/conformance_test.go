package jobs_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.ytsaurus.tech/yt/go/ypath"
	"go.ytsaurus.tech/yt/go/yson"
	"go.ytsaurus.tech/yt/go/yt"

	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/jobs/internal/exechost"
	"github.com/pillarkit/pillar/jobs/ytfake"
	"github.com/pillarkit/pillar/pillar"
)

var jobBinary struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// buildJobBinary builds jobs/cmd/pillar-job the way it is shipped
// (CGO_ENABLED=0) once per test binary.
func buildJobBinary(t *testing.T) string {
	t.Helper()
	jobBinary.once.Do(func() {
		jobBinary.dir, jobBinary.err = os.MkdirTemp("", "pillar-job-test-")
		if jobBinary.err != nil {
			return
		}
		jobBinary.path = filepath.Join(jobBinary.dir, "pillar-job")
		cmd := exec.Command("go", "build", "-o", jobBinary.path, "github.com/pillarkit/pillar/jobs/cmd/pillar-job")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			jobBinary.err = errors.New("go build pillar-job: " + err.Error() + "\n" + string(out))
		}
	})
	if jobBinary.err != nil {
		t.Fatal(jobBinary.err)
	}
	return jobBinary.path
}

// newFakeYT returns the shared FAKE cluster (jobs/ytfake), its job
// sandboxes in the test's temp dir.
func newFakeYT(t *testing.T) *ytfake.Cluster {
	c := ytfake.New(&ytfake.Options{SandboxDir: t.TempDir()})
	t.Cleanup(func() { c.Close() })
	return c
}

// fakeTable decodes a committed table of the fake cluster into a slice of T.
func fakeTable[T any](t *testing.T, c *ytfake.Cluster, path ypath.Path) []T {
	t.Helper()
	if !c.HasNode(path) {
		t.Fatalf("fake cluster: no table %s", path)
	}
	rows := c.Rows(path)
	out := make([]T, len(rows))
	for i, r := range rows {
		if err := yson.Unmarshal(r, &out[i]); err != nil {
			t.Fatalf("table %s row %d: %v", path, i, err)
		}
	}
	return out
}

func TestMain(m *testing.M) {
	code := m.Run()
	if jobBinary.dir != "" {
		os.RemoveAll(jobBinary.dir)
	}
	os.Exit(code)
}

// conformance runs each operation twice, with the local runner on the
// embedded store and with the YT runner on the fake cluster (whose jobs are
// the real pillar-job binary run as an exec node runs it), and compares
// every output table row for row.
type conformance struct {
	t    *testing.T
	e    *env
	fake *ytfake.Cluster
	yt   *jobs.YT
	opts *jobs.YTOptions
}

func newConformance(t *testing.T) *conformance {
	e := newEnv(t)
	fake := newFakeYT(t)
	opts := &jobs.YTOptions{Root: "//home/pillar", JobBinary: buildJobBinary(t), PollInterval: 1}
	y, err := jobs.NewYT(fake, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &conformance{t: t, e: e, fake: fake, yt: y, opts: opts}
}

func (c *conformance) input(name string, docs []pillar.Doc) {
	writeTable(c.e, name, docs)
	if err := c.fake.SetTable(c.opts.TablePath(name), docs, nil); err != nil {
		c.t.Fatal(err)
	}
}

func compareOutput[T comparable](c *conformance, table string) int {
	c.t.Helper()
	local := readTable[T](c.e, table)
	remote := fakeTable[T](c.t, c.fake, c.opts.TablePath(table))
	if len(local) != len(remote) {
		c.t.Fatalf("%s: local runner wrote %d rows, the job binary %d", table, len(local), len(remote))
	}
	for i := range local {
		if local[i] != remote[i] {
			c.t.Fatalf("%s row %d: local %+v, job binary %+v", table, i, local[i], remote[i])
		}
	}
	if len(local) == 0 {
		c.t.Fatalf("%s: no rows; the comparison proves nothing", table)
	}
	return len(local)
}

func TestConformance(t *testing.T) {
	c := newConformance(t)
	ctx := context.Background()
	c.input("docs_a", makeDocs(21, 300))
	c.input("docs_b", makeDocs(22, 200))
	secrets := map[string]string{"crawl_host": "vault.example"}

	t.Run("map", func(t *testing.T) {
		mapper := &jobs.WordCountMapper{MinLen: 2, VaultHost: "crawl_host"}
		op := func() *jobs.Op {
			return &jobs.Op{Inputs: []string{"docs_a", "docs_b"}, Outputs: []jobs.Output{{Table: "wc"}, {Table: "docwords"}},
				Workers: 3, Secrets: secrets}
		}
		if err := c.e.runner.Map(ctx, mapper, op()); err != nil {
			t.Fatal(err)
		}
		if err := c.yt.Map(ctx, mapper, op()); err != nil {
			t.Fatal(err)
		}
		n := compareOutput[jobs.WordCount](c, "wc")
		m := compareOutput[jobs.DocWords](c, "docwords")
		if dw := readTable[jobs.DocWords](c.e, "docwords"); dw[0].Host != "vault.example" || dw[len(dw)-1].Table != 1 {
			t.Fatalf("vault or table index not seen by the job: %+v", dw[len(dw)-1])
		}
		t.Logf("map: %d + %d rows equal", n, m)
	})
	t.Run("sort+reduce", func(t *testing.T) {
		sortOp := func() *jobs.Op {
			return &jobs.Op{Inputs: []string{"wc"}, Outputs: []jobs.Output{{Table: "wc_sorted", RowType: jobs.WordCount{}}}, SortBy: []string{"word"}}
		}
		if err := c.e.runner.Sort(ctx, sortOp()); err != nil {
			t.Fatal(err)
		}
		if err := c.yt.Sort(ctx, sortOp()); err != nil {
			t.Fatal(err)
		}
		compareOutput[jobs.WordCount](c, "wc_sorted")
		op := func(in ...string) *jobs.Op {
			return &jobs.Op{Inputs: in, Outputs: []jobs.Output{{Table: "sums"}, {Table: "frequent"}},
				ReduceBy: []string{"word"}, Workers: 2}
		}
		reducer := &jobs.WordSumReducer{Frequent: 60}
		if err := c.e.runner.Reduce(ctx, reducer, op("wc_sorted")); err != nil {
			t.Fatal(err)
		}
		if err := c.yt.Reduce(ctx, reducer, op("wc_sorted")); err != nil {
			t.Fatal(err)
		}
		n := compareOutput[jobs.WordCount](c, "sums")
		m := compareOutput[jobs.WordCount](c, "frequent")
		t.Logf("reduce: %d + %d rows equal", n, m)

		// An unsorted input (the map's output) and a sorted one: the YT
		// runner sorts the first on the cluster (YTsaurus refuses to
		// reduce unsorted tables; so does the fake), the local runner
		// sorts both itself. Ties come in (table, row) order on both.
		if err := c.e.runner.Reduce(ctx, reducer, op("wc", "wc_sorted")); err != nil {
			t.Fatal(err)
		}
		sorts := len(c.fake.Specs())
		if err := c.yt.Reduce(ctx, reducer, op("wc", "wc_sorted")); err != nil {
			t.Fatal(err)
		}
		specs := c.fake.Specs()
		if got := specs[sorts]; got.Type != yt.OperationSort || len(specs) != sorts+2 {
			t.Fatalf("operations after an unsorted reduce input: %d, first %s; want a sort, then the reduce", len(specs)-sorts, got.Type)
		}
		if tmp := string(specs[sorts].OutputTablePath.YPath()); c.fake.HasNode(ypath.Path(tmp)) || !strings.HasPrefix(tmp, "//tmp/pillar/tmp/") {
			t.Fatalf("temporary sorted table %s left behind", tmp)
		}
		compareOutput[jobs.WordCount](c, "sums")
		compareOutput[jobs.WordCount](c, "frequent")

		// A row range of an unsorted input: only those rows are sorted
		// and reduced.
		rng := jobs.RowRange("wc", 10, 60)
		if err := c.e.runner.Reduce(ctx, reducer, op(rng)); err != nil {
			t.Fatal(err)
		}
		if err := c.yt.Reduce(ctx, reducer, op(rng)); err != nil {
			t.Fatal(err)
		}
		compareOutput[jobs.WordCount](c, "sums")
	})
	t.Run("map_reduce", func(t *testing.T) {
		op := func() *jobs.Op {
			return &jobs.Op{Inputs: []string{"docs_a", "docs_b"},
				Outputs:  []jobs.Output{{Table: "docwords2"}, {Table: "totals"}, {Table: "frequent2"}},
				ReduceBy: []string{"word"}, SortBy: []string{"word", "count"}, MapperOutputs: 1, Workers: 2}
		}
		if err := c.e.runner.MapReduce(ctx, &jobs.WordCountMapper{}, &jobs.WordSumReducer{}, op()); err != nil {
			t.Fatal(err)
		}
		if err := c.yt.MapReduce(ctx, &jobs.WordCountMapper{}, &jobs.WordSumReducer{}, op()); err != nil {
			t.Fatal(err)
		}
		compareOutput[jobs.DocWords](c, "docwords2")
		n := compareOutput[jobs.WordCount](c, "totals")
		compareOutput[jobs.WordCount](c, "frequent2")
		t.Logf("map_reduce: %d totals equal", n)
	})
	t.Run("sort", func(t *testing.T) {
		op := func() *jobs.Op {
			return &jobs.Op{Inputs: []string{"docs_a", "docs_b"}, Outputs: []jobs.Output{{Table: "by_host", RowType: pillar.Doc{}}},
				SortBy: []string{"host", "url"}}
		}
		if err := c.e.runner.Sort(ctx, op()); err != nil {
			t.Fatal(err)
		}
		if err := c.yt.Sort(ctx, op()); err != nil {
			t.Fatal(err)
		}
		compareOutput[pillar.Doc](c, "by_host")
	})

	// What the SDK handed the cluster: the job command, the binary and
	// job-state files, the vault with the job-state key.
	specs := c.fake.Specs()
	if len(specs) != 9 {
		t.Fatalf("%d operations started, want 9", len(specs))
	}
	ms := specs[0]
	if want := "./go-binary -job github.com/pillarkit/pillar/jobs.WordCountMapper -output-pipes 2"; ms.Mapper.Command != want {
		t.Fatalf("mapper command %q, want %q", ms.Mapper.Command, want)
	}
	var names []string
	for _, f := range ms.Mapper.FilePaths {
		names = append(names, f.FileName)
		if f.FileName == "go-binary" && (!f.Executable || !strings.HasPrefix(string(f.CypressPath), "//tmp/pillar/bin_cache/")) {
			t.Fatalf("go-binary file %+v", f)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"go-binary", "job-state"}) {
		t.Fatalf("mapper files %v", names)
	}
	if ms.SecureVault["job_state_key"] == "" || ms.SecureVault["crawl_host"] != "vault.example" {
		t.Fatalf("secure vault keys: %v", slices.Sorted(func(yield func(string) bool) {
			for k := range ms.SecureVault {
				if !yield(k) {
					return
				}
			}
		}))
	}
	if mr := specs[7]; mr.Reducer.Command != "./go-binary -job github.com/pillarkit/pillar/jobs.WordSumReducer -output-pipes 2" ||
		mr.Mapper.Command != "./go-binary -job github.com/pillarkit/pillar/jobs.WordCountMapper -output-pipes 2" {
		t.Fatalf("map_reduce commands %q / %q", mr.Mapper.Command, mr.Reducer.Command)
	}
	uploads := 0
	for _, call := range c.fake.Calls() {
		if strings.HasPrefix(call, "put_file_to_cache") {
			uploads++
		}
	}
	if uploads != 1 {
		t.Fatalf("job binary uploaded %d times, want once", uploads)
	}
}

// TestConformanceFailures: a job that fails or panics inside the job
// binary fails the operation with the stage and the job's stderr, and
// leaves no output table (the runner's YTsaurus transaction is aborted).
func TestConformanceFailures(t *testing.T) {
	c := newConformance(t)
	ctx := context.Background()
	docs := makeDocs(23, 50)
	c.input("docs", docs)
	for _, tc := range []struct {
		mapper *jobs.WordCountMapper
		want   []string
	}{
		{&jobs.WordCountMapper{FailOn: docs[7].Title}, []string{"exit code 1 (job returned an error)", "refusing title " + `"` + docs[7].Title}},
		{&jobs.WordCountMapper{PanicOn: docs[7].Title}, []string{"exit code 2", "panic: wordcount: panic on title " + docs[7].Title}},
		{&jobs.WordCountMapper{VaultHost: "missing"}, []string{"exit code 1", `secret "missing" is not in the vault`}},
	} {
		op := &jobs.Op{Inputs: []string{"docs"}, Outputs: []jobs.Output{{Table: "wc"}, {Table: "dw"}}}
		err := c.yt.Map(ctx, tc.mapper, op)
		if err == nil {
			t.Fatalf("%+v: want an error", tc.mapper)
		}
		for _, w := range tc.want {
			if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(w)) {
				t.Fatalf("error lacks %q:\n%v", w, err)
			}
		}
		for _, tb := range []string{"wc", "dw"} {
			if c.fake.HasNode(c.opts.TablePath(tb)) {
				t.Fatalf("output table %s exists after a failed operation", tb)
			}
		}
	}
	if calls := c.fake.Calls(); !strings.HasSuffix(calls[len(calls)-1], ": abort_tx") {
		t.Fatalf("last call %q, want the runner's abort_tx", calls[len(calls)-1])
	}
}

// TestYTCancel: cancelling the context while the operation runs aborts the
// operation and the runner's transaction.
func TestYTCancel(t *testing.T) {
	fake := newFakeYT(t)
	fake.Hold = true
	r, err := jobs.NewYT(fake, &jobs.YTOptions{PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := fake.SetTable("//home/pillar/docs", makeDocs(25, 3), nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- r.Map(ctx, &jobs.WordCountMapper{}, &jobs.Op{Inputs: []string{"docs"}, Outputs: []jobs.Output{{Table: "wc"}}})
	}()
	for fake.Running() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case err = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Map did not return within 5 s of cancellation")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	calls := strings.Join(fake.Calls(), "\n")
	// The runner's transaction was begun with ctx, so cancelling ctx aborts
	// it (as the SDK's does), and with it the operation; the runner also
	// aborts the operation itself.
	if !regexp.MustCompile(`(?m)^tx1: abort_tx`).MatchString(calls) || !strings.Contains(calls, "\nabort_operation") || fake.HasNode("//home/pillar/wc") || fake.Running() != 0 {
		t.Fatalf("operation or transaction not aborted, or output left:\n%s", calls)
	}
}

// TestJobBinaryStages runs the job binary with a broken environment and
// checks the SDK's exit code for each stage.
func TestJobBinaryStages(t *testing.T) {
	c := newConformance(t)
	c.input("docs", makeDocs(24, 5))
	if err := c.yt.Map(context.Background(), &jobs.WordCountMapper{}, &jobs.Op{Inputs: []string{"docs"}, Outputs: []jobs.Output{{Table: "wc"}}}); err != nil {
		t.Fatal(err)
	}
	good := *c.fake.Jobs()[0]
	dir := t.TempDir()
	for i, tc := range []struct {
		name  string
		patch func(j *exechost.Job)
		code  int
		alt   int // also accepted
	}{
		{"ok", func(j *exechost.Job) {}, 0, 0},
		{"corrupt vault", func(j *exechost.Job) { j.Vault = nil; j.Env = map[string]string{"YT_SECURE_VAULT": "{"} }, 5, 0},
		{"no job_state_key", func(j *exechost.Job) { j.Vault = map[string]string{"x": "y"} }, 6, 0},
		{"job-state from another client", func(j *exechost.Job) {
			f := j.Files["job-state"]
			f.Data = append(slices.Clone(f.Data[:len(f.Data)-1]), f.Data[len(f.Data)-1]^1)
			j.Files = map[string]exechost.File{"go-binary": j.Files["go-binary"], "job-state": f}
		}, 6, 0},
		{"missing output descriptor", func(j *exechost.Job) { j.Command = strings.Replace(j.Command, "-output-pipes 1", "-output-pipes 2", 1) },
			// The SDK probes descriptor 4 with F_GETFD (stage 3), but the Go
			// runtime of the job may hold a descriptor of that number itself
			// (netpoll), in which case the write fails instead (stage 4).
			3, 4},
	} {
		j := good
		j.Env = map[string]string{}
		for k, v := range good.Env {
			j.Env[k] = v
		}
		tc.patch(&j)
		res, err := exechost.Run(context.Background(), filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")), &j)
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode != tc.code && (tc.alt == 0 || res.ExitCode != tc.alt) {
			t.Fatalf("case %d %s: exit code %d (%s), want %d; stderr:\n%s", i, tc.name, res.ExitCode, exechost.Stage(res.ExitCode), tc.code, res.Stderr)
		}
	}
}

// TestYTIntegration runs the word count on a real cluster when YT_PROXY is
// set (YT_TOKEN for the token, YT_TEST_ROOT for a scratch directory).
func TestYTIntegration(t *testing.T) {
	if os.Getenv("YT_PROXY") == "" {
		t.Skip("YT_PROXY is not set: skipping the run on a real YTsaurus cluster (the conformance test runs the job binary without one)")
	}
	ytIntegration(t, buildJobBinary(t))
}
