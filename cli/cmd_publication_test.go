package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/jobs/chunker"
	"github.com/pillarkit/pillar/jobs/pipeline"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/local"
)

// TestPublicationCycleCLI drives the serving-versions commands against a
// real control plane (SQLite), a local object store and an embedded store,
// with one node whose progress the test reports: publish --serve (live),
// rollback with nothing to go back to (both the store's and the serving
// answer agree with what publish printed), publish --serve of a second
// pair as candidate, --wait timing out naming the lagging replica, promote
// refused then done, versions/status tables, rollback in one step without
// an export or a new batch, and roll-forward.
func TestPublicationCycleCLI(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	store, objs := filepath.Join(dir, "store"), filepath.Join(dir, "objects")
	pages := filepath.Join(dir, "pages")
	os.MkdirAll(pages, 0o755)
	for i := 0; i < 10; i++ {
		html := fmt.Sprintf("<html><head><title>Page %d</title></head><body><p>%s</p></body></html>", i, strings.Repeat(fmt.Sprintf("Page %d is about topic %d. ", i, i%3), 12))
		if err := os.WriteFile(filepath.Join(pages, fmt.Sprintf("p%02d.html", i)), []byte(html), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pol := filepath.Join(dir, "p.yaml")
	os.WriteFile(pol, []byte("policies:\n  - name: all\n    exported: true\n    where: text_len > 0\n"), 0o644)
	run := func(args ...string) (string, error) {
		t.Helper()
		out, stderr, err := runSubsets(t, args...)
		if err != nil {
			return out, fmt.Errorf("pillar %s: %w\n%s", strings.Join(args, " "), err, stderr)
		}
		return out, nil
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := run(args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	c1, _ := chunker.Parse("tokens:size=40,overlap=8")
	c2, _ := chunker.Parse("tokens:size=60,overlap=8")
	must("ingest", "--store", store, "--from", pages, "--base-url", "https://ex.org/", "--partitions", "2")
	for _, spec := range []string{"tokens:size=40,overlap=8", "tokens:size=60,overlap=8"} {
		must("backfill", "rechunk", "--store", store, "--chunker", spec)
	}
	for _, cv := range []string{c1.ID(), c2.ID()} {
		must("backfill", "embed", "--store", store, "--chunks", cv, "--model", "hash:dim=8")
	}
	must("subsets", "recompute", "--store", store, "--policies", pol, "--as-of", "2026-11-30T00:00:00Z")
	addr := startControlPlane(t, ctx, dir, 2)
	cl, err := control.Dial(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.RegisterNode(ctx, control.Node{ID: "n1", Addr: "127.0.0.1:9", Zone: "a"}); err != nil {
		t.Fatal(err)
	}
	// applyAll is the node: it applies every registered batch.
	applyAll := func() {
		t.Helper()
		r, err := cl.GetRouting(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for p, newest := range r.NewestSeq {
			if newest > 0 {
				if err := cl.ReportApplied(ctx, "n1", p, newest); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	storeChunks := func() string {
		t.Helper()
		st, err := local.Open(store, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		sn, _ := st.Snapshot(ctx)
		defer sn.Release()
		p, _ := pillar.LoadPublished(ctx, sn)
		return p.ChunkVersion
	}
	serve := []string{"--store", store, "--model", "hash:dim=8", "--serve", "--objstore", objs, "--control", addr}
	out := must(append([]string{"publish", "--chunks", c1.ID(), "--live"}, serve...)...)
	pub1 := pillar.EmbedVersionID(c1.ID(), "hash-d8-ec732edd")
	if !strings.Contains(out, "publication "+pub1+" is live") {
		t.Fatalf("first publish --serve --live:\n%s", out)
	}
	applyAll()
	// Nothing to roll back to: the serving answer and the store's agree.
	if _, err := run("rollback", "--store", store, "--control", addr, "--dry-run"); err == nil || !strings.Contains(err.Error(), "no previous publication is retained") || !strings.Contains(err.Error(), "needs a second publication") {
		t.Fatalf("rollback --control --dry-run after the first publish: %v", err)
	}
	if _, err := run("rollback", "--store", store, "--dry-run"); err == nil || !strings.Contains(err.Error(), "only chunks "+c1.ID()) {
		t.Fatalf("rollback --dry-run after the first publish: %v", err)
	}
	// The second pair, published in the store first (a bulk rebuild is
	// marked), then made servable: --serve exports what the mark asks for
	// and registers it as the candidate; --wait times out naming the
	// replica that has not applied it.
	must("publish", "--store", store, "--chunks", c2.ID(), "--model", "hash:dim=8")
	_, err = run(append([]string{"publish", "--chunks", c2.ID(), "--wait", "300ms"}, serve...)...)
	pub2 := pillar.EmbedVersionID(c2.ID(), "hash-d8-ec732edd")
	if err == nil || !strings.Contains(err.Error(), "not ready after 300ms") || !strings.Contains(err.Error(), "n1/p0 (up, applied") {
		t.Fatalf("publish --serve --wait with a lagging replica: %v", err)
	}
	if _, err := run("promote", "--control", addr); err == nil || !strings.Contains(err.Error(), "not ready") || !strings.Contains(err.Error(), "n1/p") {
		t.Fatalf("promote of a candidate not ready: %v", err)
	}
	applyAll()
	// While pub2 is a candidate the store publishes the live pair again,
	// so Lorry's updates reach what is served.
	if got := storeChunks(); got != c1.ID() {
		t.Fatalf("store while %s is a candidate publishes %s, want the live pair %s", pub2, got, c1.ID())
	}
	must("versions", "--store", store, "--control", addr) // prints to stdout; status below shows the same table
	out = must("status", "--control", addr)
	for _, want := range []string{pub1 + "  live  yes  2/2", pub2 + "  candidate  yes  2/2", "live: " + pub1} {
		if !strings.Contains(strings.Join(strings.Fields(out), "  "), strings.Join(strings.Fields(want), "  ")) {
			t.Fatalf("versions --control lacks %q:\n%s", want, out)
		}
	}
	out = must("promote", "--control", addr, "--store", store)
	if !strings.Contains(out, "promoted "+pub2+" to live (was "+pub1) || !strings.Contains(out, "store: now publishes "+pub2+" (export state saved: 0 puts, 0 deletes") {
		t.Fatalf("promote:\n%s", out)
	}
	js := must("status", "--control", addr, "--json")
	var status struct {
		Live         string `json:"live"`
		Publications []struct {
			ID      string `json:"id"`
			Role    string `json:"role"`
			Ready   bool   `json:"ready"`
			Holding int    `json:"replicas_holding"`
		} `json:"publications"`
	}
	if err := json.Unmarshal([]byte(js), &status); err != nil || status.Live != pub2 || len(status.Publications) != 2 || !status.Publications[0].Ready || status.Publications[1].Role != control.RolePrevious {
		t.Fatalf("status --json: %v\n%s", err, js)
	}
	// Rollback: one step, no export, no batch.
	before, _ := cl.GetRouting(ctx)
	out = must("rollback", "--store", store, "--control", addr)
	if !strings.Contains(out, "rolled back serving to "+pub1) || !strings.Contains(out, "no export, no SST build") || !strings.Contains(out, "against its saved export state: 0 puts and 0 deletes") {
		t.Fatalf("rollback:\n%s", out)
	}
	after, _ := cl.GetRouting(ctx)
	if after.Live != pub1 || fmt.Sprint(after.NewestSeq) != fmt.Sprint(before.NewestSeq) {
		t.Fatalf("after rollback: live %s, newest seqs %v (before %v)", after.Live, after.NewestSeq, before.NewestSeq)
	}
	st, err := local.Open(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	sn, _ := st.Snapshot(ctx)
	p, _ := pillar.LoadPublished(ctx, sn)
	bulkErr := sn.Attr(ctx, pipeline.AttrBulk, new(pipeline.BulkMark))
	sn.Release()
	st.Close()
	if p.ChunkVersion != c1.ID() || bulkErr == nil {
		t.Fatalf("store after rollback: published %s, bulk mark %v", p.ChunkVersion, bulkErr)
	}
	// Roll forward, as JSON.
	js = must("rollback", "--store", store, "--control", addr, "--json")
	var rf struct {
		Live     string   `json:"live"`
		SwitchMS *float64 `json:"switch_ms"`
		Store    struct {
			ExportState string `json:"export_state"`
		} `json:"store"`
	}
	if err := json.Unmarshal([]byte(js), &rf); err != nil || rf.Live != pub2 || rf.SwitchMS == nil || rf.Store.ExportState != pipeline.StateSaved {
		t.Fatalf("roll forward --json: %v\n%s", err, js)
	}
	// A rollback interrupted after the serving switch (simulated: the
	// control plane alone rolls back) is finished by running it again: the
	// store follows, serving does not swap back.
	if _, err := cl.Rollback(ctx, false); err != nil {
		t.Fatal(err)
	}
	out = must("rollback", "--store", store, "--control", addr)
	if !strings.Contains(out, "serving already switched to "+pub1+" by an interrupted rollback") {
		t.Fatalf("finishing an interrupted rollback:\n%s", out)
	}
	if r, _ := cl.GetRouting(ctx); r.Live != pub1 {
		t.Fatalf("after finishing: live %s", r.Live)
	}
	if got := storeChunks(); got != c1.ID() {
		t.Fatalf("store after finishing: %s", got)
	}
	// Promote by name (roll forward to the previous one) with --store: the
	// store follows the new live pair.
	out = must("promote", "--control", addr, "--publication", pub2, "--store", store)
	if !strings.Contains(out, "promoted "+pub2) || !strings.Contains(out, "store: now publishes "+pub2+" (export state saved") {
		t.Fatalf("promote --publication --store:\n%s", out)
	}
	if got := storeChunks(); got != c2.ID() {
		t.Fatalf("store after promote --store: %s", got)
	}
}
