package pipeline

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.ytsaurus.tech/yt/go/mapreduce"

	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/local"
	"github.com/pillarkit/pillar/subsets"
)

// countingFS counts the bytes written into the store's table files (not
// the manifests, whose size follows the number of tables and files).
type countingFS struct {
	local.OSFS
	n atomic.Int64
}

func (c *countingFS) Create(name string) (local.File, error) {
	f, err := c.OSFS.Create(name)
	if err != nil || !strings.HasSuffix(name, ".parquet") {
		return f, err
	}
	return &countingFile{File: f, n: &c.n}, nil
}

type countingFile struct {
	local.File
	n *atomic.Int64
}

func (f *countingFile) Write(b []byte) (int, error) {
	n, err := f.File.Write(b)
	f.n.Add(int64(n))
	return n, err
}

// wrappedRunner is a runner that is not *jobs.Local: the incremental
// reconcile selects the changed pages with SelectJob on it, as on
// YTsaurus.
type wrappedRunner struct{ jobs.Runner }

func (w wrappedRunner) Reduce(ctx context.Context, job mapreduce.Job, op *jobs.Op) error {
	return w.Runner.Reduce(ctx, job, op)
}

// publishedState is what a publish leaves that the serving tier sees:
// export/state and the records queued after from (key, op, value hash,
// cause, priority, publication), each partition in queue order.
func publishedState(t *testing.T, st pillar.Store, from map[int]int64) string {
	t.Helper()
	sn, err := st.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	var b strings.Builder
	err = eachRow(ctx, sn, TableExportState, false, func(s *ExportState) error {
		fmt.Fprintf(&b, "state %s %d %s\n", s.PageKey, s.Partition, s.RecordHash)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if ti, err := sn.Table(ctx, TableExportState); err == nil {
		fmt.Fprintf(&b, "state rows %d\n", ti.Rows)
	}
	for p := 0; p < st.Info().Partitions; p++ {
		recs, err := sn.ReadQueue(ctx, p, from[p], 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			fmt.Fprintf(&b, "queue %d %s %s %x %s %s %s\n", p, r.Op, r.PageKey, sha256.Sum256(r.Value), r.Cause, r.Priority, r.Publication)
		}
	}
	return b.String()
}

// editDocs changes the docs of the store by one delta: new text for
// edited, a new title (the same content) for retitled, removed for gone.
func editDocs(t *testing.T, st pillar.Store, edited, retitled, gone []int) {
	t.Helper()
	change := map[string]func(*pillar.Doc) bool{}
	for _, i := range edited {
		change[key(i)] = func(d *pillar.Doc) bool {
			d.Text += " Edited again."
			d.ContentHash = hashOf(d.Text)
			return true
		}
	}
	for _, i := range retitled {
		change[key(i)] = func(d *pillar.Doc) bool { d.Title = "retitled"; return true }
	}
	for _, i := range gone {
		change[key(i)] = func(*pillar.Doc) bool { return false }
	}
	tx, err := st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Abort()
	var puts []pillar.Doc
	var dels []string
	err = eachRow(ctx, tx, pillar.TableDocs, false, func(d *pillar.Doc) error {
		if f, ok := change[d.PageKey]; ok {
			if f(d) {
				puts = append(puts, *d)
			} else {
				dels = append(dels, d.PageKey)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ti, _ := tx.Table(ctx, pillar.TableDocs)
	w, err := pillar.WriteDelta(ctx, tx, pillar.TableDocs, pillar.Doc{}, ti.Rows-int64(len(dels)))
	if err != nil {
		t.Fatal(err)
	}
	for i := range puts {
		if err := w.Put(&puts[i]); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range dels {
		if err := w.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

const incrementalPolicies = `
policies:
  - name: all
    exported: true
    where: url ~ "/page/"
  - name: some
    exported: true
    where: url ~ "/page/(1|2|3|4|5|12|13)$"
`

// pubOutcome is what one publish of TestPublishIncrementalEqualsFull left.
type pubOutcome struct {
	plan  *ExportPlan
	state string
	mark  Watermark
	bytes int64
}

// TestPublishIncrementalEqualsFull: after a bulk export, edits of a few
// pages (new content, a new title only, a removed page) and incremental
// backfills, re-publishing the pair reconciles only the changed pages —
// on the local runner (pillar.ReadKeys) and on another runner (SelectJob)
// — and leaves exactly what the full reconcile leaves: export/state, the
// queued records and the watermark. What it writes does not grow with
// the corpus (4× the pages, the same 7 changed), while the full
// reconcile's does.
func TestPublishIncrementalEqualsFull(t *testing.T) {
	small := publishIncrementalVsFull(t, 100)
	big := publishIncrementalVsFull(t, 400)
	for i, name := range []string{"local runner", "select job"} {
		s, b := small[i].bytes, big[i].bytes
		t.Logf("%s: %d bytes written at 100 pages, %d at 400 (full reconcile: %d, %d)", name, s, b, small[2].bytes, big[2].bytes)
		if float64(b) > 1.25*float64(s) {
			t.Errorf("%s: the incremental publish wrote %d bytes at 400 pages, %d at 100: it grows with the corpus", name, b, s)
		}
	}
	if float64(big[2].bytes) < 2*float64(small[2].bytes) {
		t.Errorf("the full reconcile wrote %d bytes at 400 pages, %d at 100: want it to grow with the corpus (the test measures nothing otherwise)", big[2].bytes, small[2].bytes)
	}
}

// publishIncrementalVsFull builds a store of n pages, exports it, edits 7
// pages and re-publishes copies of it: incrementally on the local runner,
// incrementally on a wrapped runner, and in full. It checks that the
// three agree and returns their outcomes in that order.
func publishIncrementalVsFull(t *testing.T, n int) []pubOutcome {
	dir := filepath.Join(t.TempDir(), "store")
	st, err := local.Create(dir, &local.Options{Partitions: 8})
	if err != nil {
		t.Fatal(err)
	}
	writeDocs(t, st, n, "v1")
	o := Options{}
	r := exportedStore(t, st, incrementalPolicies, o)
	sn, _ := st.Snapshot(ctx)
	var wm Watermark
	if err := sn.Attr(ctx, AttrWatermark, &wm); err != nil {
		t.Fatalf("the bulk export left no watermark: %v", err)
	}
	sn.Release()

	editDocs(t, st, []int{1, 40, 77}, []int{12, 90}, []int{13, 60})
	if _, err := Rechunk(ctx, st, "tokens:size=40,overlap=8", o); err != nil {
		t.Fatal(err)
	}
	if _, err := Embed(ctx, st, r.Version, "hash:dim=16", o); err != nil {
		t.Fatal(err)
	}
	ends := queueEnds(st)
	st.Close()

	publishCopy := func(name string, o Options, runner func(pillar.Store) jobs.Runner) pubOutcome {
		d := filepath.Join(t.TempDir(), name)
		copyStore(t, dir, d)
		fs := &countingFS{}
		s, err := local.Open(d, &local.Options{FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if runner != nil {
			o.Runner = runner(s)
		}
		pr, err := Publish(ctx, s, r.Version, "hash:dim=16", o)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var out pubOutcome
		out.plan, out.state, out.bytes = pr.Export, publishedState(t, s, ends), fs.n.Load()
		sn, _ := s.Snapshot(ctx)
		defer sn.Release()
		if err := sn.Attr(ctx, AttrWatermark, &out.mark); err != nil {
			t.Fatalf("%s: no watermark after the publish: %v", name, err)
		}
		out.mark.Tables = nil // the copies' generations differ
		return out
	}
	full := publishCopy("full", Options{FullReconcile: true}, nil)
	if full.plan.Incremental || full.plan.Puts == 0 || full.plan.Deletes != 2 {
		t.Fatalf("full reconcile: %+v; want puts and 2 deletes", full.plan)
	}
	var out []pubOutcome
	for _, c := range []struct {
		name   string
		runner func(pillar.Store) jobs.Runner
	}{
		{"local runner", nil},
		{"select job", func(s pillar.Store) jobs.Runner { return wrappedRunner{jobs.NewLocal(s, nil)} }},
	} {
		inc := publishCopy(strings.ReplaceAll(c.name, " ", "-"), Options{}, c.runner)
		t.Logf("%d pages, %s: plan %+v", n, c.name, inc.plan)
		if !inc.plan.Incremental || inc.plan.Changed != 7 {
			t.Errorf("%d pages, %s: plan %+v; want incremental over the 7 changed pages", n, c.name, inc.plan)
		}
		if inc.plan.Puts != full.plan.Puts || inc.plan.Deletes != full.plan.Deletes || inc.plan.Desired != full.plan.Desired ||
			inc.plan.Unchanged != full.plan.Unchanged || inc.plan.Bulk != full.plan.Bulk {
			t.Errorf("%d pages, %s: plan %+v, full %+v", n, c.name, inc.plan, full.plan)
		}
		if inc.state != full.state {
			t.Errorf("%d pages, %s: export/state and queue differ from the full reconcile:\nincremental:\n%s\nfull:\n%s", n, c.name, inc.state, full.state)
		}
		if fmt.Sprintf("%+v", inc.mark) != fmt.Sprintf("%+v", full.mark) {
			t.Errorf("%d pages, %s: watermark %+v, full %+v", n, c.name, inc.mark, full.mark)
		}
		out = append(out, inc)
	}
	return append(out, full)
}

// nightlyPolicies are incrementalPolicies and a subset of the retitled
// pages.
const nightlyPolicies = incrementalPolicies + `
  - name: retitled
    exported: true
    where: title ~ "retitled"
`

// TestWatermarkFallsBack: the incremental reconcile applies only while
// the watermark describes export/state and the inputs' bases.
func TestWatermarkFallsBack(t *testing.T) {
	st := newStore(t, 30)
	o := Options{}
	r, _ := Rechunk(ctx, st, "tokens:size=40,overlap=8", o)
	if _, err := Embed(ctx, st, r.Version, "hash:dim=16", o); err != nil {
		t.Fatal(err)
	}
	asOf := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	if _, err := Recompute(ctx, st, policies(t, incrementalPolicies), asOf, o); err != nil {
		t.Fatal(err)
	}
	bulk := o
	bulk.BulkMinPages = 1
	pr, err := Publish(ctx, st, r.Version, "hash:dim=16", bulk)
	if err != nil || !pr.Export.Bulk {
		t.Fatalf("first publish: %+v %v", pr, err)
	}
	sn, _ := st.Snapshot(ctx)
	if err := sn.Attr(ctx, AttrWatermark, new(Watermark)); !errors.Is(err, pillar.ErrNotFound) {
		t.Fatalf("a bulk mark leaves export/state stale, but the watermark is there: %v", err)
	}
	sn.Release()
	// `pillar export` names the default encoding, a publish leaves it
	// empty: the same records.
	_, pending, err := Export(ctx, st, &memSink{}, Options{Encoding: "float16"})
	if err != nil {
		t.Fatal(err)
	}
	if err := pending.Commit("exp1", "/tmp/exp1"); err != nil {
		t.Fatal(err)
	}
	republish := func() *ExportPlan {
		t.Helper()
		pr, err := Publish(ctx, st, r.Version, "hash:dim=16", o)
		if err != nil {
			t.Fatal(err)
		}
		return pr.Export
	}
	if p := republish(); !p.Incremental || p.Changed != 0 || p.Puts != 0 {
		t.Fatalf("nothing changed: %+v", p)
	}
	editDocs(t, st, nil, []int{3}, nil)
	if p := republish(); !p.Incremental || p.Changed != 1 || p.Puts != 1 {
		t.Fatalf("one page retitled: %+v", p)
	}
	// A compaction of docs folds the layers the watermark counts on.
	editDocs(t, st, nil, []int{4}, nil)
	if _, err := pillar.Compact(ctx, st, pillar.TableDocs, nil); err != nil {
		t.Fatal(err)
	}
	if p := republish(); p.Incremental || p.Puts != 1 {
		t.Fatalf("after a compaction of docs: %+v; want a full reconcile with one put", p)
	}
	// Another delta of export/state than the watermark's.
	editDocs(t, st, nil, []int{5}, nil)
	tx, _ := st.Begin(ctx)
	w, err := pillar.WriteDelta(ctx, tx, TableExportState, ExportState{}, -1)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if p := republish(); p.Incremental || p.Puts != 1 {
		t.Fatalf("after a foreign delta of export/state: %+v; want a full reconcile with one put", p)
	}
	if p := republish(); !p.Incremental || p.Puts != 0 {
		t.Fatalf("after the full reconcile: %+v; want an incremental one with nothing to do", p)
	}
	// Different exported subsets: the recompute reconciles in full, and
	// leaves a watermark of the new ones.
	rc, err := Recompute(ctx, st, policies(t, `
policies:
  - name: all
    exported: true
    where: url ~ "/page/"
`), asOf, o)
	if err != nil {
		t.Fatal(err)
	}
	if rc.Export.Incremental {
		t.Fatalf("a recompute that changes the exported subsets: %+v; want a full reconcile", rc.Export)
	}
	if p := republish(); !p.Incremental || p.Puts != 0 {
		t.Fatalf("after the recompute: %+v; want an incremental publish with nothing to do", p)
	}
}

// TestRecomputeIncrementalEqualsFull: a nightly recompute with few
// membership changes (and a few edited pages since the last publish)
// writes the member tables as deltas and reconciles only the pages whose
// membership or inputs changed, with the result of the full reconcile:
// the member tables, subset metadata, export/state and queued records.
func TestRecomputeIncrementalEqualsFull(t *testing.T) {
	const n = 120
	dir := filepath.Join(t.TempDir(), "store")
	st, err := local.Create(dir, &local.Options{Partitions: 8})
	if err != nil {
		t.Fatal(err)
	}
	writeDocs(t, st, n, "v1")
	o := Options{}
	r := exportedStore(t, st, nightlyPolicies, o)
	asOf := incrementalAsOf
	// Page 40's content changes, 90 is retitled (it enters "retitled"), 60
	// is removed (it leaves "all").
	editDocs(t, st, []int{40}, []int{90}, []int{60})
	if _, err := Rechunk(ctx, st, "tokens:size=40,overlap=8", o); err != nil {
		t.Fatal(err)
	}
	if _, err := Embed(ctx, st, r.Version, "hash:dim=16", o); err != nil {
		t.Fatal(err)
	}
	ends := queueEnds(st)
	st.Close()
	nightly := policies(t, nightlyPolicies)
	recompute := func(name string, o Options, runner func(pillar.Store) jobs.Runner) (*RecomputeResult, string) {
		d := filepath.Join(t.TempDir(), name)
		copyStore(t, dir, d)
		s, err := local.Open(d, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if runner != nil {
			o.Runner = runner(s)
		}
		before := map[string][]pillar.SubsetMember{}
		sn0, _ := s.Snapshot(ctx)
		for _, sub := range []string{"all", "some", "retitled"} {
			if before[sub], err = readMembers(ctx, sn0, pillar.SubsetTable(sub)); err != nil {
				t.Fatal(err)
			}
		}
		sn0.Release()
		rc, err := Recompute(ctx, s, nightly, asOf.Add(24*time.Hour), o)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sn, _ := s.Snapshot(ctx)
		defer sn.Release()
		// `subsets diff` from the undo table kept as history: the diff of
		// the generations themselves.
		for sub, old := range before {
			cur, err := readMembers(ctx, sn, pillar.SubsetTable(sub))
			if err != nil {
				t.Fatal(err)
			}
			want, err := subsets.Diff(sub, old, cur)
			if err != nil {
				t.Fatal(err)
			}
			meta, got, err := SubsetDiff(ctx, sn, sub)
			if err != nil {
				t.Fatal(err)
			}
			if !meta.History[len(meta.History)-2].Undo || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s: subsets diff %s from %+v:\n%v\nwant %v", name, sub, meta.History, got, want)
			}
		}
		var b strings.Builder
		b.WriteString(publishedState(t, s, ends))
		for _, sub := range []string{"all", "some", "retitled"} {
			var m SubsetMeta
			if err := sn.Attr(ctx, AttrSubsetPrefix+sub, &m); err != nil {
				t.Fatal(err)
			}
			g := m.History[len(m.History)-1]
			fmt.Fprintf(&b, "subset %s gen %d size %d adds %d removes %d\n", sub, m.Generation, m.Size, g.Adds, g.Removes)
			ms, err := readMembers(ctx, sn, pillar.SubsetTable(sub))
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range ms {
				fmt.Fprintf(&b, "  member %s %+v\n", sub, x)
			}
			ls, err := pillar.Layers(ctx, sn, pillar.SubsetTable(sub))
			if err != nil {
				t.Fatal(err)
			}
			if sub != "some" && (len(ls) < 2 || ls[len(ls)-1].Kind != pillar.LayerDelta && ls[len(ls)-1].Kind != pillar.LayerDeletes) {
				t.Errorf("%s: %s was not written as a delta: layers %+v", name, pillar.SubsetTable(sub), ls)
			}
		}
		return rc, b.String()
	}
	full, fullState := recompute("full", Options{FullReconcile: true}, nil)
	if full.Export.Incremental || full.Export.Puts == 0 || full.Export.Deletes == 0 {
		t.Fatalf("full: %+v; want puts and deletes", full.Export)
	}
	for _, c := range []struct {
		name   string
		runner func(pillar.Store) jobs.Runner
	}{
		{"local runner", nil},
		{"select job", func(s pillar.Store) jobs.Runner { return wrappedRunner{jobs.NewLocal(s, nil)} }},
	} {
		inc, state := recompute(strings.ReplaceAll(c.name, " ", "-"), Options{}, c.runner)
		t.Logf("%s: %+v (full %+v)", c.name, inc.Export, full.Export)
		if !inc.Export.Incremental || inc.Export.Changed != 3 {
			t.Errorf("%s: %+v; want an incremental reconcile of the 3 changed pages", c.name, inc.Export)
		}
		if e, f := inc.Export, full.Export; e.Puts != f.Puts || e.Deletes != f.Deletes || e.Desired != f.Desired || e.Unchanged != f.Unchanged {
			t.Errorf("%s: %+v, full %+v", c.name, e, f)
		}
		if state != fullState {
			t.Errorf("%s: the store differs from the full reconcile's:\n%s\n--- full:\n%s", c.name, state, fullState)
		}
	}
}

// TestIncrementalBackfillEqualsFirstBuild: after a delta of docs (new
// content, a new title, a removed page), the incremental rechunk and embed
// (a plan on the source's (page, hash) projection, then the todo pages'
// rows selected) leave the version tables a first build over the same docs
// gives — on the local runner and with SelectJob.
func TestIncrementalBackfillEqualsFirstBuild(t *testing.T) {
	dump := func(s pillar.Store, table string) string {
		t.Helper()
		sn, _ := s.Snapshot(ctx)
		defer sn.Release()
		var b strings.Builder
		var err error
		if strings.HasPrefix(table, pillar.PrefixEmbed) {
			err = eachRow(ctx, sn, table, false, func(e *pillar.Embedding) error { fmt.Fprintf(&b, "%+v\n", *e); return nil })
		} else {
			err = eachRow(ctx, sn, table, false, func(c *pillar.Chunk) error { fmt.Fprintf(&b, "%+v\n", *c); return nil })
		}
		if err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	for _, c := range []struct {
		name   string
		runner func(pillar.Store) jobs.Runner
	}{
		{"local runner", nil},
		{"select job", func(s pillar.Store) jobs.Runner { return wrappedRunner{jobs.NewLocal(s, nil)} }},
	} {
		st := newStore(t, 50)
		o := Options{SlicePages: 7}
		if c.runner != nil {
			o.Runner = c.runner(st)
		}
		r, err := Rechunk(ctx, st, "tokens:size=40,overlap=8", o)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Embed(ctx, st, r.Version, "hash:dim=16", o); err != nil {
			t.Fatal(err)
		}
		editDocs(t, st, []int{1, 22, 35}, []int{12}, []int{13, 40})
		r2, err := Rechunk(ctx, st, "tokens:size=40,overlap=8", o)
		if err != nil || r2.PendingPages != 3 || r2.StalePages != 5 {
			t.Fatalf("%s: incremental rechunk %+v %v; want 3 pages processed, 5 stale (3 edited, 2 removed)", c.name, r2, err)
		}
		e2, err := Embed(ctx, st, r.Version, "hash:dim=16", o)
		if err != nil || e2.PendingPages != 3 {
			t.Fatalf("%s: incremental embed %+v %v", c.name, e2, err)
		}
		// A first build over the same docs.
		fresh, err := local.Create(filepath.Join(t.TempDir(), "fresh"), &local.Options{Partitions: 8})
		if err != nil {
			t.Fatal(err)
		}
		var docs []pillar.Doc
		sn, _ := st.Snapshot(ctx)
		if err := eachRow(ctx, sn, pillar.TableDocs, false, func(d *pillar.Doc) error { docs = append(docs, *d); return nil }); err != nil {
			t.Fatal(err)
		}
		sn.Release()
		tx, _ := fresh.Begin(ctx)
		if err := writeRows(ctx, tx, pillar.TableDocs, docs, "page_key"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := Rechunk(ctx, fresh, "tokens:size=40,overlap=8", Options{}); err != nil {
			t.Fatal(err)
		}
		fe, err := Embed(ctx, fresh, r.Version, "hash:dim=16", Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, table := range []string{r.Table, fe.Table} {
			if got, want := dump(st, table), dump(fresh, table); got != want {
				t.Errorf("%s: %s after the incremental backfills differs from a first build:\n%s\n--- first build:\n%s", c.name, table, got, want)
			}
		}
		fresh.Close()
	}
}

// incrementalAsOf is the time of the first recompute in exportedStore.
var incrementalAsOf = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

// exportedStore takes st's docs through a first rechunk, embed, recompute
// (under the policies pols, at incrementalAsOf), publish and a committed
// bulk export: the state an incremental round starts from. It returns the
// rechunk's result (r.Version is the chunk version published).
func exportedStore(t *testing.T, st pillar.Store, pols string, o Options) *Result {
	t.Helper()
	r, err := Rechunk(ctx, st, "tokens:size=40,overlap=8", o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Embed(ctx, st, r.Version, "hash:dim=16", o); err != nil {
		t.Fatal(err)
	}
	if _, err := Recompute(ctx, st, policies(t, pols), incrementalAsOf, o); err != nil {
		t.Fatal(err)
	}
	if _, err := Publish(ctx, st, r.Version, "hash:dim=16", o); err != nil {
		t.Fatal(err)
	}
	_, pending, err := Export(ctx, st, &memSink{}, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := pending.Commit("exp1", "/tmp/exp1"); err != nil {
		t.Fatal(err)
	}
	return r
}
