package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/jobs/chunker"
	"github.com/pillarkit/pillar/jobs/pipeline"
	"github.com/pillarkit/pillar/pillar/local"
	"github.com/pillarkit/pillar/sstbuilder"
)

// TestExportPublishCLI: `pillar export --objstore … --control …` runs the
// whole protocol against a real control plane (SQLite) and a local object
// store: one snapshot per partition carrying the queue end it supersedes;
// a rerun redoes nothing and duplicates nothing.
func TestExportPublishCLI(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	store, objs := filepath.Join(dir, "store"), filepath.Join(dir, "objects")
	pages := filepath.Join(dir, "pages")
	os.MkdirAll(pages, 0o755)
	for i := 0; i < 12; i++ {
		html := fmt.Sprintf("<html><head><title>Page %d</title></head><body><p>%s</p></body></html>", i, strings.Repeat(fmt.Sprintf("Page %d is about topic %d. ", i, i%3), 12))
		if err := os.WriteFile(filepath.Join(pages, fmt.Sprintf("p%02d.html", i)), []byte(html), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pol := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(pol, []byte("policies:\n  - name: all\n    exported: true\n    where: text_len > 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) error {
		t.Helper()
		_, stderr, err := runSubsets(t, args...)
		if err != nil {
			return fmt.Errorf("pillar %s: %w\n%s", strings.Join(args, " "), err, stderr)
		}
		return nil
	}
	must := func(args ...string) {
		t.Helper()
		if err := run(args...); err != nil {
			t.Fatal(err)
		}
	}
	ch, _ := chunker.Parse("tokens:size=40,overlap=8")
	must("ingest", "--store", store, "--from", pages, "--base-url", "https://ex.org/", "--partitions", "3")
	must("backfill", "rechunk", "--store", store, "--chunker", "tokens:size=40,overlap=8")
	must("backfill", "embed", "--store", store, "--chunks", ch.ID(), "--model", "hash:dim=8")
	must("subsets", "recompute", "--store", store, "--policies", pol, "--as-of", "2026-11-30T00:00:00Z")
	must("publish", "--store", store, "--chunks", ch.ID(), "--model", "hash:dim=8")

	addr := startControlPlane(t, ctx, dir, 3)

	exp := filepath.Join(dir, "exports", "bulk1")
	publish := []string{"export", "--store", store, "--out", exp, "--objstore", objs, "--control", addr}
	if err := run("export", "--store", store, "--out", exp, "--objstore", objs); err == nil || !strings.Contains(err.Error(), "--control") {
		t.Fatalf("--objstore without --control: %v", err)
	}
	must("lorry", "run", "--store", store, "--objstore", objs, "--control", addr, "--once")
	must(publish...)
	must(publish...) // a rerun completes nothing new

	st, err := local.Open(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sn, _ := st.Snapshot(ctx)
	var last pipeline.LastExport
	err = sn.Attr(ctx, pipeline.AttrLastExport, &last)
	sn.Release()
	if err != nil || last.ID != "bulk1" || len(last.QueueEnds) != 3 {
		t.Fatalf("export/last: %+v %v", last, err)
	}
	cl, err := control.Dial(addr, &control.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for p := 0; p < 3; p++ {
		es, err := cl.ListBatches(ctx, p, 0, 100, 0)
		if err != nil {
			t.Fatal(err)
		}
		var snaps []batch.Manifest
		for _, e := range es {
			if e.Manifest.Kind == batch.KindSnapshot {
				snaps = append(snaps, e.Manifest)
			}
		}
		if len(snaps) != 1 || snaps[0].ID != sstbuilder.BatchID("bulk1", p) || snaps[0].Supersedes != last.QueueEnds[p] {
			t.Fatalf("partition %d snapshots: %+v (queue end %d)", p, snaps, last.QueueEnds[p])
		}
	}
	// An id the store committed but whose files are gone is refused.
	os.RemoveAll(exp)
	if err := run(publish...); err == nil || !strings.Contains(err.Error(), "use a new id") {
		t.Fatalf("reused id: %v", err)
	}
}
