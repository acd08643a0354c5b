package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"go.ytsaurus.tech/yt/go/mapreduce"

	"github.com/pillarkit/pillar/internal/record"
	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/subsets"
)

// memSink collects a bulk export.
type memSink struct{ keys []string }

func (m *memSink) WriteRecord(key, op string, value []byte) error {
	if _, err := record.Unmarshal(value); err != nil {
		return err
	}
	m.keys = append(m.keys, key)
	return nil
}

func policies(t *testing.T, src string) *subsets.Set {
	t.Helper()
	set, err := subsets.Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// queue returns every queued record as "op key" lines, sorted.
func queue(t *testing.T, st pillar.Store, from map[int]int64) []string {
	t.Helper()
	sn, _ := st.Snapshot(ctx)
	var out []string
	for p := 0; p < st.Info().Partitions; p++ {
		recs, err := sn.ReadQueue(ctx, p, from[p], 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			out = append(out, r.Op+" "+r.PageKey)
			if r.Op == pillar.OpPut {
				if _, err := record.Unmarshal(r.Value); err != nil {
					t.Fatalf("queued record of %s does not decode: %v", r.PageKey, err)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// priorities returns the distinct priorities of the records queued after
// from, sorted and joined by ",".
func priorities(t *testing.T, st pillar.Store, from map[int]int64) string {
	t.Helper()
	sn, _ := st.Snapshot(ctx)
	defer sn.Release()
	seen := map[string]bool{}
	for p := 0; p < st.Info().Partitions; p++ {
		recs, err := sn.ReadQueue(ctx, p, from[p], 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			seen[r.Priority] = true
		}
	}
	var out []string
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func queueEnds(st pillar.Store) map[int]int64 {
	sn, _ := st.Snapshot(ctx)
	m := map[int]int64{}
	for p := 0; p < st.Info().Partitions; p++ {
		m[p], _ = sn.QueueEnd(ctx, p)
	}
	return m
}

func key(i int) string {
	k, _, _ := pillar.KeyOfURL(fmt.Sprintf("https://example.org/page/%d", i))
	return k.String()
}

func TestPublishRecomputeExportLifecycle(t *testing.T) {
	st := newStore(t, 40)
	o := Options{}
	r, err := Rechunk(ctx, st, "tokens:size=40,overlap=8", o)
	if err != nil {
		t.Fatal(err)
	}
	// Publishing before the vectors exist is refused.
	if _, err := Publish(ctx, st, r.Version, "hash:dim=16", o); err == nil {
		t.Fatal("publish without an embedding version")
	}
	e, err := Embed(ctx, st, r.Version, "hash:dim=16", o)
	if err != nil {
		t.Fatal(err)
	}
	// Pages 1, 2 are in "a"; 2, 3 in "b"; 4 in "hidden" (not exported).
	setA := policies(t, `
policies:
  - name: a
    exported: true
    where: url ~ "/page/(1|2)$"
  - name: b
    exported: true
    where: url ~ "/page/(2|3)$"
  - name: hidden
    exported: false
    where: url ~ "/page/4$"
`)
	asOf := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	rc, err := Recompute(ctx, st, setA, asOf, o)
	if err != nil || rc.Export != nil {
		t.Fatalf("recompute before publish: %+v %v", rc, err)
	}
	bulk := o
	bulk.BulkMinPages = 1
	pr, err := Publish(ctx, st, r.Version, "hash:dim=16", bulk)
	if err != nil {
		t.Fatal(err)
	}
	if !pr.Export.Bulk || pr.Export.Desired != 3 {
		t.Fatalf("first publish should mark a bulk rebuild of 3 pages: %+v", pr.Export)
	}
	sink := &memSink{}
	res, pending, err := Export(ctx, st, sink, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := pending.Commit("exp1", "/tmp/exp1"); err != nil {
		t.Fatal(err)
	}
	want := []string{key(1), key(2), key(3)}
	sort.Strings(want)
	if res.Pages != 3 || strings.Join(sink.keys, ",") != strings.Join(want, ",") {
		t.Fatalf("export %+v keys %v", res, sink.keys)
	}
	sn, _ := st.Snapshot(ctx)
	if err := sn.Attr(ctx, AttrBulk, new(BulkMark)); !errors.Is(err, pillar.ErrNotFound) {
		t.Fatalf("bulk mark not cleared: %v", err)
	}
	if err := sn.Attr(ctx, AttrLock, new(OpLock)); !errors.Is(err, pillar.ErrNotFound) {
		t.Fatalf("lock left behind: %v", err)
	}

	// New policies: page 1 leaves a (and every exported subset) → delete;
	// page 2 leaves a but stays in b → nothing; page 5 enters a → put.
	setB := policies(t, `
policies:
  - name: a
    exported: true
    where: url ~ "/page/(2|5)$"
  - name: b
    exported: true
    where: url ~ "/page/(2|3)$"
  - name: hidden
    exported: false
    where: url ~ "/page/4$"
`)
	ends := queueEnds(st)
	rc, err = Recompute(ctx, st, setB, asOf, o)
	if err != nil {
		t.Fatal(err)
	}
	got := queue(t, st, ends)
	wantQ := []string{"delete " + key(1), "put " + key(5)}
	sort.Strings(wantQ)
	if strings.Join(got, "|") != strings.Join(wantQ, "|") || rc.Export.Bulk {
		t.Fatalf("queue after recompute = %v, want %v (plan %+v)", got, wantQ, rc.Export)
	}
	if pr := priorities(t, st, ends); pr != pillar.PriorityFresh {
		t.Fatalf("a recompute queued priorities %q, want fresh (policy entries and deletes)", pr)
	}
	// The same inputs again: nothing.
	ends = queueEnds(st)
	rc, err = Recompute(ctx, st, setB, asOf, o)
	if err != nil || !rc.Skipped || len(queue(t, st, ends)) != 0 {
		t.Fatalf("idempotent re-run: %+v %v", rc, err)
	}
	// Diff of the last recompute of "a".
	sn, _ = st.Snapshot(ctx)
	_, changes, err := SubsetDiff(ctx, sn, "a")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, c := range changes {
		kinds = append(kinds, c.Kind.String())
	}
	sort.Strings(kinds)
	if strings.Join(kinds, ",") != "enter,leave,stay" {
		t.Fatalf("diff of a: %v", kinds)
	}
	if _, _, err := SubsetDiff(ctx, sn, "nope"); !errors.Is(err, subsets.ErrUnknownSubset) {
		t.Fatalf("unknown subset: %v", err)
	}

	// A member page changes: after the incremental backfill, re-publishing
	// the same pair queues just that page.
	writeDocs(t, st, 40, "v2") // edits pages 1, 11, 21, 31
	setC := policies(t, `
policies:
  - name: a
    exported: true
    where: url ~ "/page/(2|5|11)$"
`)
	if _, err := Recompute(ctx, st, setC, asOf, o); err != nil {
		t.Fatal(err)
	}
	if _, err := Rechunk(ctx, st, "tokens:size=40,overlap=8", o); err != nil {
		t.Fatal(err)
	}
	if _, err := Embed(ctx, st, r.Version, "hash:dim=16", o); err != nil {
		t.Fatal(err)
	}
	ends = queueEnds(st)
	pr, err = Publish(ctx, st, r.Version, e.Version[strings.Index(e.Version, "/")+1:], o)
	if err != nil {
		t.Fatal(err)
	}
	if got := queue(t, st, ends); strings.Join(got, "|") != "put "+key(11) {
		t.Fatalf("republish after edit queued %v (plan %+v)", got, pr.Export)
	}
	if pr := priorities(t, st, ends); pr != pillar.PriorityFresh {
		t.Fatalf("re-publishing the live pair queued priorities %q, want fresh (crawl updates)", pr)
	}
}

func TestPublishAtomicAndRollback(t *testing.T) {
	st := newStore(t, 20)
	o := Options{}
	r1, _ := Rechunk(ctx, st, "tokens:size=40,overlap=8", o)
	r2, _ := Rechunk(ctx, st, "tokens:size=60,overlap=8", o)
	if _, err := Embed(ctx, st, r1.Version, "hash:dim=16", o); err != nil {
		t.Fatal(err)
	}
	if _, err := Embed(ctx, st, r2.Version, "hash:dim=16", o); err != nil {
		t.Fatal(err)
	}
	set := policies(t, "policies:\n  - name: all\n    exported: true\n")
	if _, err := Recompute(ctx, st, set, time.Now(), o); err != nil {
		t.Fatal(err)
	}
	if _, err := Publish(ctx, st, r1.Version, "hash:dim=16", o); err != nil {
		t.Fatal(err)
	}
	exportAll := func() {
		t.Helper()
		_, pending, err := Export(ctx, st, &memSink{}, o)
		if err != nil {
			t.Fatal(err)
		}
		if err := pending.Commit(fmt.Sprintf("exp-%d", time.Now().UnixNano()), t.TempDir()); err != nil {
			t.Fatal(err)
		}
	}
	exportAll()
	// A publish whose export job fails leaves everything as it was.
	bad := o
	bad.Runner = &failReduce{Runner: jobs.NewLocal(st, nil)}
	if _, err := Publish(ctx, st, r2.Version, "hash:dim=16", bad); err == nil {
		t.Fatal("want failure")
	}
	sn, _ := st.Snapshot(ctx)
	pub, _ := pillar.LoadPublished(ctx, sn)
	if pub.ChunkVersion != r1.Version {
		t.Fatalf("failed publish changed the pointer to %s", pub.ChunkVersion)
	}
	if err := sn.Attr(ctx, AttrLock, new(OpLock)); !errors.Is(err, pillar.ErrNotFound) {
		t.Fatal("failed publish left the lock")
	}
	for _, ti := range mustTables(t, sn) {
		if strings.HasPrefix(ti.Name, "tmp/") {
			t.Fatalf("failed publish left scratch %s", ti.Name)
		}
	}
	// A new pair is a bulk rebuild (its publication needs a snapshot in the
	// serving tier), however few pages change.
	ends := queueEnds(st)
	p2, err := Publish(ctx, st, r2.Version, "hash:dim=16", o)
	if err != nil {
		t.Fatal(err)
	}
	if !p2.Export.Bulk || p2.ExportState != StateNew || p2.Publication != pillar.EmbedVersionID(r2.Version, resolveModel("hash:dim=16")) {
		t.Fatalf("publishing a new pair: %+v, plan %+v", p2, p2.Export)
	}
	if pr := priorities(t, st, ends); pr != "" {
		t.Fatalf("publishing a new pair queued records (%q) besides the bulk mark", pr)
	}
	// The rollback returns to r1's saved export state: nothing changed
	// meanwhile, so nothing is queued and nothing is rebuilt.
	ends = queueEnds(st)
	rb, err := Rollback(ctx, st, o)
	if err != nil || rb.Published.ChunkVersion != r1.Version || rb.Previous.ChunkVersion != r2.Version {
		t.Fatalf("rollback %+v %v", rb, err)
	}
	if rb.ExportState != StateSaved || rb.Export.Bulk || rb.Export.Puts+rb.Export.Deletes != 0 {
		t.Fatalf("rollback to a saved state: %s, plan %+v", rb.ExportState, rb.Export)
	}
	if pr := priorities(t, st, ends); pr != "" {
		t.Fatalf("a rollback with nothing changed queued %q records", pr)
	}
	sn, _ = st.Snapshot(ctx)
	v1, _ := pillar.LoadVersion(ctx, sn, r1.Version)
	v2, _ := pillar.LoadVersion(ctx, sn, r2.Version)
	if v1.State != pillar.StatePublished || v2.State != pillar.StateComplete {
		t.Fatalf("states after rollback: %s %s", v1.State, v2.State)
	}
	if rb.RollbackTo == nil || rb.RollbackTo.ChunkVersion != r2.Version {
		t.Fatalf("rollback's rollback target %+v, want %s", rb.RollbackTo, r2.Version)
	}
	// Re-publishing the live pair does not move the rollback target.
	again, err := Publish(ctx, st, r1.Version, "hash:dim=16", o)
	if err != nil || again.RollbackTo == nil || again.RollbackTo.ChunkVersion != r2.Version {
		t.Fatalf("re-publish of the live pair: rollback target %+v (want %s), %v", again.RollbackTo, r2.Version, err)
	}
	// A recompute while another operation holds the store is refused.
	lk, err := acquire(ctx, st, "publish")
	if err != nil {
		t.Fatal(err)
	}
	set2 := policies(t, "policies:\n  - name: all\n    exported: true\n    where: text_len > 0\n")
	if _, err := Recompute(ctx, st, set2, time.Now(), o); !errors.Is(err, ErrBusy) {
		t.Fatalf("recompute during publish: %v", err)
	}
	lk.abandon()
}

func mustTables(t *testing.T, sn pillar.Snapshot) []pillar.TableInfo {
	ts, err := sn.Tables(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

type failReduce struct{ jobs.Runner }

func (f *failReduce) Reduce(context.Context, mapreduce.Job, *jobs.Op) error {
	return errors.New("reduce failed")
}

// Policies that select no page at all give empty subsets, not an error (the
// top-K reduce has no rows and writes no table).
func TestRecomputeSelectsNothing(t *testing.T) {
	st := newStore(t, 5)
	set := policies(t, `
policies:
  - name: none
    exported: true
    where: text_len < 0
`)
	rc, err := Recompute(ctx, st, set, time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rc.Subsets) != 1 || rc.Subsets[0].Size != 0 {
		t.Fatalf("subsets %+v, want one empty subset", rc.Subsets)
	}
}

// TestRollbackQueuesChangesSince: returning to a pair (rollback, then
// roll-forward) diffs against that pair's own saved export state, so it
// queues only what changed while the other pair was published — tagged
// with the returning pair's publication — and never marks a bulk rebuild;
// a pair the serving tier no longer holds is rebuilt instead. Right after
// the first publish there is nothing to roll back to, and both publish and
// a rollback dry run say so.
func TestRollbackQueuesChangesSince(t *testing.T) {
	st := newStore(t, 20)
	o := Options{}
	r1, _ := Rechunk(ctx, st, "tokens:size=40,overlap=8", o)
	r2, _ := Rechunk(ctx, st, "tokens:size=60,overlap=8", o)
	for _, r := range []*Result{r1, r2} {
		if _, err := Embed(ctx, st, r.Version, "hash:dim=16", o); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Recompute(ctx, st, policies(t, "policies:\n  - name: all\n    exported: true\n"), time.Now(), o); err != nil {
		t.Fatal(err)
	}
	exportAll := func() {
		t.Helper()
		_, pending, err := Export(ctx, st, &memSink{}, o)
		if err != nil {
			t.Fatal(err)
		}
		if err := pending.Commit(fmt.Sprintf("exp-%d", time.Now().UnixNano()), t.TempDir()); err != nil {
			t.Fatal(err)
		}
	}
	first, err := Publish(ctx, st, r1.Version, "hash:dim=16", o)
	if err != nil {
		t.Fatal(err)
	}
	if first.RollbackTo != nil || !first.Export.Bulk {
		t.Fatalf("first publish: rollback target %+v, plan %+v", first.RollbackTo, first.Export)
	}
	// Re-publishing it before the export ran keeps the mark and queues
	// nothing (export/state is stale until the export rewrites it).
	ends0 := queueEnds(st)
	again, err := Publish(ctx, st, r1.Version, "hash:dim=16", o)
	if err != nil || !again.Export.Bulk || !strings.Contains(again.Export.Reason, "marked already") {
		t.Fatalf("re-publish with a bulk rebuild pending: %v %+v", err, again.Export)
	}
	if pr := priorities(t, st, ends0); pr != "" {
		t.Fatalf("re-publish with a bulk rebuild pending queued %q records", pr)
	}
	dry := o
	dry.DryRun = true
	if _, err := Rollback(ctx, st, dry); !errors.Is(err, ErrNoPrevious) || !strings.Contains(err.Error(), "only chunks "+r1.Version) {
		t.Fatalf("rollback --dry-run after the first publish: %v", err)
	}
	exportAll()
	if _, err := Publish(ctx, st, r2.Version, "hash:dim=16", o); err != nil {
		t.Fatal(err)
	}
	exportAll()
	// While r2 is published, pages 0-9 leave the exported subset.
	narrow := policies(t, "policies:\n  - name: all\n    exported: true\n    where: url ~ \"/page/1[0-9]$\"\n")
	if _, err := Recompute(ctx, st, narrow, time.Now(), o); err != nil {
		t.Fatal(err)
	}
	ends := queueEnds(st)
	rb, err := Rollback(ctx, st, o)
	if err != nil {
		t.Fatal(err)
	}
	pub1 := pillar.EmbedVersionID(r1.Version, resolveModel("hash:dim=16"))
	if rb.ExportState != StateSaved || rb.Export.Bulk || rb.Export.Deletes != 10 || rb.Export.Puts != 0 || rb.Publication != pub1 {
		t.Fatalf("rollback: %s %s, plan %+v", rb.ExportState, rb.Publication, rb.Export)
	}
	sn, _ := st.Snapshot(ctx)
	for p := 0; p < st.Info().Partitions; p++ {
		recs, _ := sn.ReadQueue(ctx, p, ends[p], 1<<20)
		for _, r := range recs {
			if r.Publication != pub1 || r.Op != pillar.OpDelete || r.Priority != pillar.PriorityFresh {
				t.Fatalf("rollback queued %+v", r)
			}
		}
	}
	sn.Release()
	// export/state is r1's again (rewritten from the saved state, not r2's
	// state changed by the deltas against r1's): re-publishing r1 queues
	// nothing.
	if again, err := Publish(ctx, st, r1.Version, "hash:dim=16", o); err != nil || again.Export.Bulk || again.Export.Puts+again.Export.Deletes != 0 {
		t.Fatalf("re-publish after the rollback: %v plan %+v", err, again.Export)
	}
	// Roll forward: r2's saved state already reflects the narrower subset.
	fw, err := Rollback(ctx, st, o)
	if err != nil || fw.Published.ChunkVersion != r2.Version || fw.ExportState != StateSaved || fw.Export.Bulk || fw.Export.Puts+fw.Export.Deletes != 0 {
		t.Fatalf("roll forward: %v %+v plan %+v", err, fw, fw.Export)
	}
	// A pair the serving tier no longer holds is rebuilt.
	gone, err := RollbackWith(ctx, st, o, &PublishOptions{Retained: func(string) bool { return false }})
	if err != nil || gone.ExportState != StateNew || !gone.Export.Bulk {
		t.Fatalf("rollback to a publication not retained: %v %+v plan %+v", err, gone, gone.Export)
	}
}
