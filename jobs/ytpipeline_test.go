package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.ytsaurus.tech/yt/go/guid"
	"go.ytsaurus.tech/yt/go/mapreduce"
	"go.ytsaurus.tech/yt/go/mapreduce/spec"
	"go.ytsaurus.tech/yt/go/ypath"
	"go.ytsaurus.tech/yt/go/yt"
	"go.ytsaurus.tech/yt/go/yt/ythttp"
	"go.ytsaurus.tech/yt/go/yterrors"

	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/jobs/pipeline"
	"github.com/pillarkit/pillar/jobs/ytfake"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/ingest"
	"github.com/pillarkit/pillar/pillar/local"
	"github.com/pillarkit/pillar/pillar/ytstore"
	"github.com/pillarkit/pillar/subsets"
)

// backend is a store and the runner production pairs with it.
type backend struct {
	name   string
	store  pillar.Store
	runner jobs.Runner
	fake   *ytfake.Cluster // yt only
}

func embeddedBackend(t *testing.T) *backend {
	ls, err := local.Create(filepath.Join(t.TempDir(), "store"), &local.Options{Partitions: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ls.Close() })
	return &backend{name: "embedded", store: ls, runner: jobs.NewLocal(ls, nil)}
}

// ytBackend is the documented production setup (`--store yt://home/pillar/test`):
// the YTsaurus store and the YT runner, here on the FAKE cluster, whose
// jobs are the real pillar-job binary run as an exec node runs it.
func ytBackend(t *testing.T, patch func(*jobs.YT)) *backend {
	fake := newFakeYT(t)
	root, err := ytstore.RootFromURL("yt://home/pillar/test")
	if err != nil {
		t.Fatal(err)
	}
	b := ytBackendOn(t, fake, root, time.Millisecond, patch)
	b.fake = fake
	return b
}

func ytBackendOn(t *testing.T, yc yt.Client, root ypath.Path, poll time.Duration, patch func(*jobs.YT)) *backend {
	ys, err := ytstore.Create(context.Background(), yc, root, &ytstore.Options{Partitions: 8, PollInterval: poll})
	if err != nil {
		t.Fatal(err)
	}
	r, err := jobs.NewYT(yc, &jobs.YTOptions{Root: root, JobBinary: buildJobBinary(t), PollInterval: poll, Pool: os.Getenv("YT_POOL")})
	if err != nil {
		t.Fatal(err)
	}
	if patch != nil {
		patch(r)
	}
	return &backend{name: "yt", store: ys, runner: r}
}

// writePages writes n HTML pages into dir (edit changes every fourth one).
func writePages(t *testing.T, dir string, n int, edit string) {
	t.Helper()
	for i := 0; i < n; i++ {
		body := ""
		if i%7 != 0 {
			body = strings.Repeat(fmt.Sprintf("Page %d talks about topic %d in sentence form. ", i, i%5), 10+i%9)
		}
		if edit != "" && i%4 == 1 {
			body += " " + edit
		}
		html := fmt.Sprintf("<html><head><title>Page %d</title><link rel=canonical href=\"https://example.org/page/%d\"></head><body><p>%s</p></body></html>", i, i, body)
		f := filepath.Join(dir, fmt.Sprintf("p%03d.html", i))
		if err := os.WriteFile(f, []byte(html), 0o644); err != nil {
			t.Fatal(err)
		}
		// fetched_at is the file's time: the same on both backends.
		at := time.Date(2026, 11, 29, 0, 0, i, 0, time.UTC)
		if err := os.Chtimes(f, at, at); err != nil {
			t.Fatal(err)
		}
	}
}

type exportSink struct{ lines []string }

func (s *exportSink) WriteRecord(pageKey, op string, value []byte) error {
	s.lines = append(s.lines, fmt.Sprintf("%s %s %d bytes", pageKey, op, len(value)))
	return nil
}

// runPipeline is the README's pipeline on one backend: ingest → rechunk →
// embed → subsets recompute → publish → export; an edit, incremental
// backfills and a recompute; a second pair published; rollback. It
// returns what the bulk export streamed.
func runPipeline(t *testing.T, b *backend) (string, error) {
	ctx := context.Background()
	set, err := subsets.Parse("test.yaml", []byte(`
policies:
  - name: a
    exported: true
    where: url ~ "/page/(1|2|5)$"
  - name: b
    exported: true
    where: url ~ "/page/(2|3)$"
`))
	if err != nil {
		t.Fatal(err)
	}
	asOf := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return asOf }
	pages := t.TempDir()
	opts := pipeline.Options{SlicePages: 7, Runner: b.runner, Workers: 2}
	step := func(name string, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %s: %w", b.name, name, err)
		}
		return nil
	}
	writePages(t, pages, 30, "")
	if _, err := ingest.Run(ctx, b.store, ingest.Options{From: pages, Now: now, Workers: 2}); err != nil {
		return "", step("ingest", err)
	}
	r, err := pipeline.Rechunk(ctx, b.store, "tokens:size=40,overlap=8", opts)
	if err != nil {
		return "", step("rechunk", err)
	}
	if _, err := pipeline.Embed(ctx, b.store, r.Version, "hash:dim=16", opts); err != nil {
		return "", step("embed", err)
	}
	// Signals for every third page, one page twice (the later wins) and one
	// unknown page: the merge reduce on the runner.
	imp, err := pipeline.ImportSignals(ctx, b.store, func(emit func(pipeline.ImportedSignal) error) error {
		for i := 0; i <= 30; i += 3 {
			u := fmt.Sprintf("https://example.org/page/%d", i)
			if i == 30 {
				u = "https://example.org/not-ingested"
			}
			k, _, err := pillar.KeyOfURL(u)
			if err != nil {
				return err
			}
			for _, s := range []pipeline.ImportedSignal{{PageKey: k.String(), Name: "score", Num: float64(i), IsNum: true, Row: int64(i)},
				{PageKey: k.String(), Name: "tier", Str: fmt.Sprint("t", i%2), Row: int64(i)}} {
				if err := emit(s); err != nil {
					return err
				}
			}
			if i == 3 {
				if err := emit(pipeline.ImportedSignal{PageKey: k.String(), Name: "score", Num: 99, IsNum: true, Row: 100}); err != nil {
					return err
				}
			}
		}
		return nil
	}, opts)
	if err != nil {
		return "", step("signals import", err)
	}
	if imp.Imported != 21 || imp.UnknownRows != 1 {
		return "", step("signals import", fmt.Errorf("imported %d signals, %d unknown rows; want 21 and 1", imp.Imported, imp.UnknownRows))
	}
	sigs, err := readSignals(ctx, b.store)
	scores := map[float64]bool{}
	for i, sg := range sigs {
		if sg.Name == "score" {
			scores[sg.Num] = true
		}
		if i > 0 && (sigs[i-1].PageKey > sg.PageKey || sigs[i-1].PageKey == sg.PageKey && sigs[i-1].Name >= sg.Name) {
			err = fmt.Errorf("row %d out of (page_key, name) order", i)
		}
	}
	if err != nil || len(sigs) != 20 || !scores[99] || scores[3] {
		return "", step("signals import", fmt.Errorf("signals table: %d rows (want 20, page 3's score 99, sorted): %v %+v", len(sigs), err, sigs))
	}
	if _, err := pipeline.Recompute(ctx, b.store, set, asOf, opts); err != nil {
		return "", step("recompute", err)
	}
	if _, err := pipeline.Publish(ctx, b.store, r.Version, "hash:dim=16", opts); err != nil {
		return "", step("publish", err)
	}
	sink := &exportSink{}
	_, pending, err := pipeline.Export(ctx, b.store, sink, opts)
	if err != nil {
		return "", step("export", err)
	}
	if err := pending.Commit("export-1", "exports/1"); err != nil {
		return "", step("export commit", err)
	}
	writePages(t, pages, 30, "edited")
	if _, err := ingest.Run(ctx, b.store, ingest.Options{From: pages, Now: func() time.Time { return asOf.Add(time.Hour) }, Workers: 2}); err != nil {
		return "", step("second ingest", err)
	}
	if _, err := pipeline.Rechunk(ctx, b.store, "tokens:size=40,overlap=8", opts); err != nil {
		return "", step("second rechunk", err)
	}
	if _, err := pipeline.Embed(ctx, b.store, r.Version, "hash:dim=16", opts); err != nil {
		return "", step("second embed", err)
	}
	if _, err := pipeline.Recompute(ctx, b.store, set, asOf.Add(time.Hour), opts); err != nil {
		return "", step("second recompute", err)
	}
	r2, err := pipeline.Rechunk(ctx, b.store, "tokens:size=64,overlap=4", opts)
	if err != nil {
		return "", step("rechunk v2", err)
	}
	if _, err := pipeline.Embed(ctx, b.store, r2.Version, "hash:dim=16", opts); err != nil {
		return "", step("embed v2", err)
	}
	if _, err := pipeline.Publish(ctx, b.store, r2.Version, "hash:dim=16", opts); err != nil {
		return "", step("publish v2", err)
	}
	if _, err := pipeline.Rollback(ctx, b.store, opts); err != nil {
		return "", step("rollback", err)
	}
	return strings.Join(sink.lines, "\n"), nil
}

// TestPipelineSameOnBothBackends runs the pipeline with each backend's
// real runner — the embedded store with the local runner, and `yt://`
// (the YTsaurus store with the YT runner) on the FAKE cluster — and
// compares what they leave: every table row for row, attribute names,
// version states, the export queue record for record, and what the bulk
// export streamed.
func TestPipelineSameOnBothBackends(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the pipeline runs about a hundred jobs of the job binary")
	}
	comparePipelines(t, embeddedBackend(t), ytBackend(t, nil))
}

// TestPipelineOnCluster is TestPipelineSameOnBothBackends on the real
// cluster at YT_PROXY (token from YT_TOKEN or YT_TOKEN_FILE, pool
// YT_POOL), in a fresh store under YT_TEST_ROOT (default
// //tmp/pillar-pipeline-<guid>), removed afterwards.
func TestPipelineOnCluster(t *testing.T) {
	if os.Getenv("YT_PROXY") == "" {
		t.Skip("YT_PROXY is not set: skipping the pipeline on a real YTsaurus cluster (TestPipelineSameOnBothBackends runs it on the fake)")
	}
	yc, err := ythttp.NewClient(&yt.Config{ReadTokenFromFile: true})
	if err != nil {
		t.Fatal(err)
	}
	root := ypath.Path(os.Getenv("YT_TEST_ROOT"))
	if root == "" {
		root = ypath.Path("//tmp/pillar-pipeline-" + guid.New().String())
	}
	t.Cleanup(func() {
		_ = yc.RemoveNode(context.Background(), root, &yt.RemoveNodeOptions{Recursive: true, Force: true})
	})
	comparePipelines(t, embeddedBackend(t), ytBackendOn(t, yc, root.Child("store"), time.Second, nil))
}

func comparePipelines(t *testing.T, eb, yb *backend) {
	ea, err := runPipeline(t, eb)
	if err != nil {
		t.Fatal(err)
	}
	ya, err := runPipeline(t, yb)
	if err != nil {
		t.Fatal(err)
	}
	if ea == "" || ea != ya {
		t.Errorf("bulk export differs (or is empty):\n  embedded: %.500s\n  yt:       %.500s", ea, ya)
	}
	a, b := dumpStore(t, eb.store), dumpStore(t, yb.store)
	if len(a) < 12 {
		t.Fatalf("the embedded store holds only %d items: the scenario did too little", len(a))
	}
	for k, v := range a {
		if b[k] != v {
			t.Errorf("%s:\n  embedded: %.300s\n  yt:       %.300s", k, v, b[k])
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			t.Errorf("%s only on the yt store: %.300s", k, b[k])
		}
	}
	if yb.fake == nil {
		return
	}
	ops := map[yt.OperationType]int{}
	for _, s := range yb.fake.Specs() {
		ops[s.Type]++
	}
	if ops[yt.OperationMap] == 0 || ops[yt.OperationReduce] == 0 {
		t.Errorf("operations run on the fake: %v; want maps (backfills) and reduces (subsets, export)", ops)
	}
	t.Logf("operations on the fake cluster: %v, jobs run: %d", ops, len(yb.fake.Jobs()))
}

// TestPipelineFakeCatchesMissingFolders: without the runner's creation of
// output tables and their folders (the SDK creates missing outputs without
// recursive), the pipeline fails on the fake exactly as on a cluster: the
// first backfill (whose todo is the docs table itself) writes its first
// slice to backfill-pending/chunks/<cv>, whose folder does not exist yet.
func TestPipelineFakeCatchesMissingFolders(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	_, err := runPipeline(t, ytBackend(t, jobs.SkipCreateOutputs))
	t.Logf("as expected: %.300v", err)
	if err == nil {
		t.Fatal("the pipeline succeeded without output folders being created: the fake does not check parents")
	}
	if !yterrors.ContainsResolveError(err) || !strings.Contains(err.Error(), "backfill-pending") {
		t.Fatalf("want a resolve error for the backfill-pending folder, got: %v", err)
	}
}

// unpendingRunner is the backfill as it was before PendingPrefix: slices
// append straight to the version table, which completion leaves sorted.
// (An empty pending table stands in, so the driver's bookkeeping runs.)
type unpendingRunner struct {
	jobs.Runner
	opts jobs.YTOptions
}

func (r unpendingRunner) Map(ctx context.Context, m mapreduce.Job, op *jobs.Op) error {
	o := *op
	o.Outputs = append([]jobs.Output(nil), op.Outputs...)
	var stand []string
	for i := range o.Outputs {
		if t, ok := strings.CutPrefix(o.Outputs[i].Table, pipeline.PendingPrefix); ok {
			stand = append(stand, o.Outputs[i].Table)
			o.Outputs[i].Table = t
		}
	}
	if err := r.Runner.Map(ctx, m, &o); err != nil {
		return err
	}
	for _, t := range stand {
		ytx := op.Tx.(jobs.YTTxer).YTTx()
		if _, err := ytx.CreateNode(ctx, r.opts.TablePath(t), yt.NodeTable, &yt.CreateNodeOptions{Recursive: true, IgnoreExisting: true}); err != nil {
			return err
		}
	}
	return nil
}

// TestPipelineFakeCatchesUnsortedAppends: appending a backfill slice's
// rows to a version table sorted by page_key (what the backfill did before
// it had pending tables) fails on the fake as on YTsaurus, at the
// incremental rechunk after the edit.
func TestPipelineFakeCatchesUnsortedAppends(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	b := ytBackend(t, nil)
	b.runner = unpendingRunner{b.runner, jobs.YTOptions{Root: "//home/pillar/test"}}
	_, err := runPipeline(t, b)
	if !yterrors.ContainsErrorCode(err, yterrors.CodeSortOrderViolation) || !strings.Contains(err.Error(), "second rechunk") {
		t.Fatalf("want the second rechunk to fail with a sort order violation, got: %v", err)
	}
	t.Logf("as expected: %.300v", err)
}

// TestPipelineFakeCatchesUnsortedRows: rows written out of order into a
// table with key columns fail as YTsaurus fails them (sort order
// violation), through the store's writer and through an operation's
// sorted output, and the pipeline's step fails.
func TestPipelineFakeCatchesUnsortedRows(t *testing.T) {
	ctx := context.Background()
	b := ytBackend(t, nil)
	k1, _, _ := pillar.KeyOfURL("https://example.org/a")
	k2, _, _ := pillar.KeyOfURL("https://example.org/b")
	lo, hi := k1.String(), k2.String()
	if lo > hi {
		lo, hi = hi, lo
	}
	tx, err := b.store.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w, err := tx.WriteTable(ctx, pillar.TableDocs, pillar.Doc{}, &pillar.WriteOptions{SortedBy: []string{"page_key"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{hi, lo} {
		if err := w.Write(&pillar.Doc{PageKey: k, URL: "https://example.org/" + k, Text: "x", ContentHash: k}); err != nil {
			t.Fatal(err)
		}
	}
	err = w.Close()
	tx.Abort()
	if !yterrors.ContainsErrorCode(err, yterrors.CodeSortOrderViolation) {
		t.Fatalf("unsorted rows into a sorted table: %v; want a sort order violation (code 301)", err)
	}

	// An operation declaring a sorted output (the export's desired table)
	// whose job writes out of order: the reduce of a mapper's unsorted
	// output into <sorted_by=[word]> fails the operation.
	docs := makeDocs(31, 40)
	if err := b.fake.SetTable("//home/pillar/test/words_in", docs, nil); err != nil {
		t.Fatal(err)
	}
	op := &jobs.Op{Inputs: []string{"words_in"}, Outputs: []jobs.Output{{Table: "tmp/sorted/wc", SortedBy: []string{"word"}}}}
	err = b.runner.Map(ctx, &jobs.WordCountMapper{}, op)
	if !yterrors.ContainsErrorCode(err, yterrors.CodeSortOrderViolation) {
		t.Fatalf("a map writing unsorted rows to a sorted_by output: %v; want a sort order violation", err)
	}
	if b.fake.HasNode("//home/pillar/test/tmp/sorted/wc") {
		t.Fatal("the failed operation's output table is left behind")
	}
}

// TestYTFailureInjection: a failing job and an aborted operation fail the
// pipeline step with the cluster's error, and the store is left as it was.
func TestYTFailureInjection(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		inject func(*ytfake.Cluster)
		want   string
	}{
		{"failing job", func(c *ytfake.Cluster) {
			c.FailJobs = func(j ytfake.JobInfo) bool { return strings.Contains(j.Title, "backfill") && j.Index == 0 }
		}, "injected job failure"},
		{"aborted operation", func(c *ytfake.Cluster) {
			c.AbortOperations = func(s *spec.Spec) bool { return strings.Contains(s.Title, "backfill") }
		}, "aborted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := ytBackend(t, nil)
			pages := t.TempDir()
			writePages(t, pages, 12, "")
			if _, err := ingest.Run(ctx, b.store, ingest.Options{From: pages}); err != nil {
				t.Fatal(err)
			}
			before := dumpStore(t, b.store)
			tc.inject(b.fake)
			_, err := pipeline.Rechunk(ctx, b.store, "tokens:size=40,overlap=8", pipeline.Options{Runner: b.runner, SlicePages: 5})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("rechunk with %s: %v; want an error containing %q", tc.name, err, tc.want)
			}
			after := dumpStore(t, b.store)
			if !reflect.DeepEqual(before, after) {
				t.Fatalf("the failed step changed the store:\nbefore %v\nafter  %v", keysOf(before), keysOf(after))
			}
			var ye *yterrors.Error
			if !errors.As(err, &ye) {
				t.Fatalf("the error does not carry the cluster's error: %v", err)
			}
		})
	}
}

func keysOf(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// dumpStore describes a store without what legitimately differs between
// backends (timestamps, sizes, file counts, generations).
func dumpStore(t *testing.T, st pillar.Store) map[string]string {
	t.Helper()
	ctx := context.Background()
	sn, err := st.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	out := map[string]string{}
	tabs, err := sn.Tables(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range tabs {
		var row any
		switch {
		case ti.Name == pillar.TableDocs:
			row = pillar.Doc{}
		case strings.HasPrefix(ti.Name, pillar.PrefixChunks):
			row = pillar.Chunk{}
		case strings.HasPrefix(ti.Name, pillar.PrefixEmbed):
			row = pillar.Embedding{}
		case strings.HasPrefix(ti.Name, pillar.PrefixSubsets):
			row = pillar.SubsetMember{}
		case ti.Name == pipeline.TableExportState:
			row = pipeline.ExportState{}
		default:
			out["table "+ti.Name] = fmt.Sprintf("%d rows", ti.Rows)
			continue
		}
		rr, err := sn.ReadTable(ctx, ti.Name, nil)
		if err != nil {
			t.Fatal(err)
		}
		var rows []string
		for rr.Next() {
			p := reflect.New(reflect.TypeOf(row))
			if err := rr.Scan(p.Interface()); err != nil {
				t.Fatalf("%s %s: %v", st.Info().Backend, ti.Name, err)
			}
			rows = append(rows, fmt.Sprintf("%+v", p.Elem().Interface()))
		}
		if err := rr.Err(); err != nil {
			t.Fatal(err)
		}
		rr.Close()
		out["table "+ti.Name] = fmt.Sprintf("sorted by %v, %d rows:\n%s", ti.SortedBy, ti.Rows, strings.Join(rows, "\n"))
	}
	attrs, err := sn.Attrs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name := range attrs {
		out["attr "+name] = "set"
	}
	vs, err := pillar.Versions(ctx, sn)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		out["version "+v.ID] = fmt.Sprintf("%s rows=%d pages=%d empty=%d", v.State, v.Rows, v.Pages, v.EmptyPages)
	}
	for p := 0; p < sn.Info().Partitions; p++ {
		recs, err := sn.ReadQueue(ctx, p, 0, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, r := range recs {
			lines = append(lines, fmt.Sprintf("%d %s %s %d bytes %s", r.Offset, r.Op, r.PageKey, len(r.Value), r.Cause))
		}
		out[fmt.Sprintf("queue %d", p)] = strings.Join(lines, "\n")
	}
	return out
}

// TestConcurrentBackfillsOnYT: two backfills of different chunk versions
// at once. Each runs its operations in its own store transaction; the
// folders their outputs share (backfill-pending/, chunks/) must not make
// one transaction's lock refuse the other (a shared lock on the parent's
// child key, taken when a transaction creates the folder, would).
func TestConcurrentBackfillsOnYT(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	ctx := context.Background()
	b := ytBackend(t, nil)
	pages := t.TempDir()
	writePages(t, pages, 12, "")
	if _, err := ingest.Run(ctx, b.store, ingest.Options{From: pages}); err != nil {
		t.Fatal(err)
	}
	specs := []string{"tokens:size=40,overlap=8", "tokens:size=64,overlap=4"}
	errs := make(chan error, len(specs))
	// Start both slices' transactions before either commits: a runner
	// that holds the first one's operation open until the second started.
	var started sync.WaitGroup
	started.Add(len(specs))
	for _, sp := range specs {
		go func() {
			r := &barrierRunner{Runner: b.runner, wg: &started}
			_, err := pipeline.Rechunk(ctx, b.store, sp, pipeline.Options{Runner: r, SlicePages: 100})
			errs <- err
		}()
	}
	for range specs {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent backfills: %v", err)
		}
	}
}

// barrierRunner runs its first Map only once every runner sharing wg has
// got to its first Map.
type barrierRunner struct {
	jobs.Runner
	wg   *sync.WaitGroup
	once sync.Once
}

func (r *barrierRunner) Map(ctx context.Context, m mapreduce.Job, op *jobs.Op) error {
	r.once.Do(func() { r.wg.Done(); r.wg.Wait() })
	return r.Runner.Map(ctx, m, op)
}

func readSignals(ctx context.Context, st pillar.Store) ([]pillar.Signal, error) {
	sn, err := st.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	defer sn.Release()
	rr, err := sn.ReadTable(ctx, pillar.TableSignals, nil)
	if err != nil {
		return nil, err
	}
	defer rr.Close()
	var out []pillar.Signal
	for rr.Next() {
		var s pillar.Signal
		if err := rr.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rr.Err()
}
