package jobs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pillarkit/pillar/jobs/pipeline"
	"github.com/pillarkit/pillar/pillar/ingest"
	"github.com/pillarkit/pillar/subsets"
)

// incrementalRepublish runs ingest → rechunk → embed → recompute →
// publish → export on b, edits a quarter of the pages, re-ingests and
// backfills them, re-publishes the pair and recomputes the subsets (with
// full, ignoring the watermark). It returns the re-publish's plan.
func incrementalRepublish(t *testing.T, b *backend, full bool) *pipeline.ExportPlan {
	t.Helper()
	ctx := context.Background()
	set, err := subsets.Parse("test.yaml", []byte(`
policies:
  - name: a
    exported: true
    where: url ~ "/page/"
  - name: b
    exported: true
    where: url ~ "/page/(1|2|3|5|9)$"
`))
	if err != nil {
		t.Fatal(err)
	}
	asOf := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	pages := t.TempDir()
	opts := pipeline.Options{SlicePages: 7, Runner: b.runner, Workers: 2}
	must := func(step string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %s: %v", b.name, step, err)
		}
	}
	writePages(t, pages, 30, "")
	_, err = ingest.Run(ctx, b.store, ingest.Options{From: pages, Now: func() time.Time { return asOf }, Workers: 2})
	must("ingest", err)
	r, err := pipeline.Rechunk(ctx, b.store, "tokens:size=40,overlap=8", opts)
	must("rechunk", err)
	_, err = pipeline.Embed(ctx, b.store, r.Version, "hash:dim=16", opts)
	must("embed", err)
	_, err = pipeline.Recompute(ctx, b.store, set, asOf, opts)
	must("recompute", err)
	_, err = pipeline.Publish(ctx, b.store, r.Version, "hash:dim=16", opts)
	must("publish", err)
	_, pending, err := pipeline.Export(ctx, b.store, &exportSink{}, opts)
	must("export", err)
	must("export commit", pending.Commit("export-1", "exports/1"))
	writePages(t, pages, 30, "edited")
	_, err = ingest.Run(ctx, b.store, ingest.Options{From: pages, Now: func() time.Time { return asOf.Add(time.Hour) }, Workers: 2})
	must("second ingest", err)
	_, err = pipeline.Rechunk(ctx, b.store, "tokens:size=40,overlap=8", opts)
	must("second rechunk", err)
	_, err = pipeline.Embed(ctx, b.store, r.Version, "hash:dim=16", opts)
	must("second embed", err)
	opts.FullReconcile = full
	pr, err := pipeline.Publish(ctx, b.store, r.Version, "hash:dim=16", opts)
	must("republish", err)
	// A nightly recompute: page 7 leaves a (and so every exported
	// subset), b loses 5 and 9 (still in a) and gains 6.
	set2, err := subsets.Parse("test.yaml", []byte(`
policies:
  - name: a
    exported: true
    where: url ~ "/page/" and url !~ "/page/7$"
  - name: b
    exported: true
    where: url ~ "/page/(1|2|3|6)$"
`))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := pipeline.Recompute(ctx, b.store, set2, asOf.Add(24*time.Hour), opts)
	must("nightly recompute", err)
	if rc.Export == nil || rc.Export.Incremental == full || rc.Export.Puts != 0 || rc.Export.Deletes != 1 {
		t.Fatalf("%s: nightly recompute: %+v; want incremental %v, 1 delete (page 7)", b.name, rc.Export, !full)
	}
	return pr.Export
}

// TestIncrementalPublishSameOnBothBackends: re-publishing the live pair
// after an edit of a few pages, and a recompute that changes a few
// members, reconcile only the changed pages on both
// backends (the embedded store with the local runner, which reads them
// with pillar.ReadKeys; the YTsaurus store with the YT runner on the
// FAKE cluster, which selects them with a reduce on the cluster), and
// leaves the same store as the full reconcile: every table, attribute
// and queued record.
func TestIncrementalPublishSameOnBothBackends(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: four pipeline runs, two of them of the job binary on the fake cluster")
	}
	var ref map[string]string
	var refName string
	for _, c := range []struct {
		name string
		b    func() *backend
		full bool
	}{
		{"embedded full", func() *backend { return embeddedBackend(t) }, true},
		{"embedded incremental", func() *backend { return embeddedBackend(t) }, false},
		{"yt full", func() *backend { return ytBackend(t, nil) }, true},
		{"yt incremental", func() *backend { return ytBackend(t, nil) }, false},
	} {
		b := c.b()
		plan := incrementalRepublish(t, b, c.full)
		t.Logf("%s: %+v", c.name, plan)
		if plan.Incremental == c.full || plan.Puts == 0 || plan.Bulk {
			t.Fatalf("%s: plan %+v: want incremental %v, puts, no bulk", c.name, plan, !c.full)
		}
		if !c.full && plan.Changed >= plan.Desired {
			t.Errorf("%s: looked at %d of %d pages", c.name, plan.Changed, plan.Desired)
		}
		dump := dumpStore(t, b.store)
		if ref == nil {
			ref, refName = dump, c.name
			continue
		}
		for _, k := range keysOf(ref) {
			if dump[k] != ref[k] {
				t.Errorf("%s differs from %s:\n  %s: %.400s\n  %s: %.400s", k, refName, refName, ref[k], c.name, dump[k])
			}
		}
		for _, k := range keysOf(dump) {
			if _, ok := ref[k]; !ok {
				t.Errorf("%s: %s only here: %.300s", c.name, k, fmt.Sprint(dump[k]))
			}
		}
	}
}
