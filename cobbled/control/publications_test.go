package control

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/objstore"
)

// pubBatch registers a batch of publication pub and returns its seq.
func pubBatch(t *testing.T, e *env, objs objstore.Store, id string, p, parts int, kind, pub string) int64 {
	t.Helper()
	if objs != nil {
		putObject(t, objs, batch.Prefix(p, id)+"000001.sst")
		putObject(t, objs, batch.ManifestKey(p, id))
	}
	m := manifest(id, p, parts, kind)
	m.Publication = pub
	seq, err := e.client.RegisterBatch(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

func publication(t *testing.T, e *env, id string) PublicationStatus {
	t.Helper()
	ps, _, err := e.client.ListPublications(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.ID == id {
			return p
		}
	}
	t.Fatalf("publication %q not listed", id)
	return PublicationStatus{}
}

// TestPublicationLifecycle walks one publication cycle on both backends:
// the first publication a batch names goes live at once; a registered
// candidate is not ready until every replica applied its snapshot, and
// promoting it before is refused naming the lagging replica; promote,
// rollback (live <-> previous), roll forward; the routing carries the
// publications, their base seqs and the live id, and its version moves
// when a replica passes a snapshot; rollback with nothing retained lists
// what is retained.
func TestPublicationLifecycle(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const P = 2
		e := startEnv(t, b.dsn(t), P, func(o *Options) { o.Replicas = 1 })
		ctx := context.Background()
		c := e.client
		if err := c.RegisterNode(ctx, Node{"n1", "h:1", "a"}); err != nil {
			t.Fatal(err)
		}
		const v1, v2 = "rec-a/hash-1", "rec-b/hash-2"
		s10 := pubBatch(t, e, nil, "v1-p0", 0, P, batch.KindSnapshot, v1)
		s11 := pubBatch(t, e, nil, "v1-p1", 1, P, batch.KindSnapshot, v1)
		r, err := c.GetRouting(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Live != v1 || len(r.Publications) != 1 || r.Publications[0].BaseSeq[0] != s10 || r.Publications[0].BaseSeq[1] != s11 {
			t.Fatalf("routing after v1's snapshots: live %q, %+v", r.Live, r.Publications)
		}
		if _, err := c.Rollback(ctx, false); !errors.Is(err, ErrNoPrevious) || !strings.Contains(err.Error(), `"rec-a/hash-1" (live, not ready)`) || !strings.Contains(err.Error(), "pillar publish --serve") {
			t.Fatalf("rollback with nothing previous: %v", err)
		}
		for p, s := range []int64{s10, s11} {
			if err := c.ReportAppliedBytes(ctx, "n1", p, s, map[string]int64{v1: 1000 + int64(p)}); err != nil {
				t.Fatal(err)
			}
		}
		if got := publication(t, e, v1); !got.Ready || got.Holding != 2 || got.Replicas[1].Bytes != 1001 {
			t.Fatalf("v1 after both snapshots applied: %+v", got)
		}
		// v2: an explicit candidate; its first snapshot arrives.
		if ch, err := c.RegisterPublication(ctx, v2, false); err != nil || ch.Publication.Role != RoleCandidate {
			t.Fatalf("register v2: %v %+v", err, ch)
		}
		s20 := pubBatch(t, e, nil, "v2-p0", 0, P, batch.KindSnapshot, v2)
		d1 := pubBatch(t, e, nil, "v1-d0", 0, P, batch.KindDelta, v1) // v1 keeps getting deltas meanwhile
		before, _ := c.GetRouting(ctx)
		if err := c.ReportApplied(ctx, "n1", 0, s20); err != nil {
			t.Fatal(err)
		}
		after, _ := c.GetRouting(ctx)
		if after.Version <= before.Version {
			t.Fatalf("routing version %d -> %d: passing v2's snapshot must bump it", before.Version, after.Version)
		}
		if pv2 := after.Publication(v2); pv2 == nil || !pv2.Holds(0, s20) || pv2.Holds(1, s11) {
			t.Fatalf("v2 in routing: %+v", pv2)
		}
		_, err = c.Promote(ctx, "", false)
		if !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), "p1 (no snapshot yet)") {
			t.Fatalf("promote of a candidate without p1's snapshot: %v", err)
		}
		s21 := pubBatch(t, e, nil, "v2-p1", 1, P, batch.KindSnapshot, v2)
		_, err = c.Promote(ctx, "", false)
		if !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), "n1/p1 (applied 1, needs 2)") {
			t.Fatalf("promote of a candidate a replica lags on: %v", err)
		}
		if err := c.ReportApplied(ctx, "n1", 0, d1); err != nil {
			t.Fatal(err)
		}
		if err := c.ReportApplied(ctx, "n1", 1, s21); err != nil {
			t.Fatal(err)
		}
		ch, err := c.Promote(ctx, "", false)
		if err != nil || ch.Publication.ID != v2 || ch.WasLive != v1 || ch.Publication.Role != RoleLive {
			t.Fatalf("promote v2: %v %+v", err, ch)
		}
		if r, _ := c.GetRouting(ctx); r.Live != v2 || r.Publication(v1).Role != RolePrevious || r.Version < ch.RoutingVersion {
			t.Fatalf("after promote: live %q, v1 %+v", r.Live, r.Publication(v1))
		}
		// Rollback and roll forward: each one transaction, no batch.
		for i, want := range []string{v1, v2, v1} {
			ch, err := c.Rollback(ctx, false)
			if err != nil || ch.Publication.ID != want {
				t.Fatalf("rollback %d: %v %+v, want %s live", i, err, ch, want)
			}
		}
		// A third publication promoted by force retires the previous one.
		const v3 = "rec-c/hash-3"
		if _, err := c.RegisterPublication(ctx, v3, false); err != nil {
			t.Fatal(err)
		}
		if ch, err := c.Promote(ctx, v3, true); err != nil || ch.WasLive != v1 {
			t.Fatalf("forced promote of v3: %v %+v", err, ch)
		}
		if got := publication(t, e, v2); got.Role != RoleRetired {
			t.Fatalf("v2 after v3's promotion: %+v", got)
		}
		if _, err := c.Retire(ctx, v3); !errors.Is(err, ErrInvalid) {
			t.Fatalf("retire the live publication: %v", err)
		}
		if _, err := c.Promote(ctx, v2, false); !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), "retired") {
			t.Fatalf("promote a retired publication: %v", err)
		}
	})
}

// TestPublicationPromoteWhenReady: a candidate registered to be promoted
// once ready goes live when the last replica passes its snapshot, with no
// call in between; a publication first named by a batch while another is
// live waits likewise.
func TestPublicationPromoteWhenReady(t *testing.T) {
	e := startEnv(t, backends()[0].dsn(t), 1, func(o *Options) { o.Replicas = 2 })
	ctx := context.Background()
	c := e.client
	for _, n := range []Node{{"w1", "h:1", "a"}, {"w2", "h:2", "b"}} {
		if err := c.RegisterNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	s1 := pubBatch(t, e, nil, "a-p0", 0, 1, batch.KindSnapshot, "a/m")
	s2 := pubBatch(t, e, nil, "b-p0", 0, 1, batch.KindSnapshot, "b/m") // first named here: waits
	if got := publication(t, e, "b/m"); got.Role != RoleCandidate || !got.PromoteWhenReady {
		t.Fatalf("b/m: %+v", got)
	}
	for _, n := range []string{"w1", "w2"} {
		if err := c.ReportApplied(ctx, n, 0, s1); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.ReportApplied(ctx, "w1", 0, s2); err != nil {
		t.Fatal(err)
	}
	if r, _ := c.GetRouting(ctx); r.Live != "a/m" {
		t.Fatalf("live %q before every replica holds b/m", r.Live)
	}
	if err := c.ReportApplied(ctx, "w2", 0, s2); err != nil {
		t.Fatal(err)
	}
	r, _ := c.GetRouting(ctx)
	if r.Live != "b/m" || r.Publication("a/m").Role != RolePrevious {
		t.Fatalf("after every replica holds b/m: live %q, %+v", r.Live, r.Publications)
	}
}

// TestPublicationRetention: a live publication whose snapshot comes
// before a newer publication's snapshot that every replica applied keeps
// its snapshot and deltas through garbage collection; a retired one's
// batches go once RetireGrace has passed, not before.
func TestPublicationRetention(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
		objs, err := objstore.OpenLocal(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		e := startEnv(t, b.dsn(t), 1, func(o *Options) {
			o.Replicas, o.Objects, o.Now, o.RetireGrace = 1, objs, clock.Now, time.Minute
		})
		ctx := context.Background()
		c := e.client
		if err := c.RegisterNode(ctx, Node{"r1", "h:1", "a"}); err != nil {
			t.Fatal(err)
		}
		old := pubBatch(t, e, objs, "old-d", 0, 1, batch.KindDelta, "live/m")
		sl := pubBatch(t, e, objs, "live-s", 0, 1, batch.KindSnapshot, "live/m")
		dl := pubBatch(t, e, objs, "live-d", 0, 1, batch.KindDelta, "live/m")
		if _, err := c.RegisterPublication(ctx, "cand/m", false); err != nil {
			t.Fatal(err)
		}
		sc := pubBatch(t, e, objs, "cand-s", 0, 1, batch.KindSnapshot, "cand/m")
		dc := pubBatch(t, e, objs, "cand-d", 0, 1, batch.KindDelta, "cand/m")
		if err := c.ReportApplied(ctx, "r1", 0, dc); err != nil {
			t.Fatal(err)
		}
		if _, err := e.srv.CollectGarbage(ctx); err != nil {
			t.Fatal(err)
		}
		list, _ := c.ListBatches(ctx, 0, 0, 0, 0)
		if len(list) != 4 || list[0].Seq != sl || objectExists(t, objs, batch.ManifestKey(0, "old-d")) || !objectExists(t, objs, batch.ManifestKey(0, "live-s")) {
			t.Fatalf("after gc: listed %d from seq %d (want 4 from %d: live's snapshot %d, its delta %d and the candidate's %d, %d; %d collected)", len(list), list[0].Seq, sl, sl, dl, sc, dc, old)
		}
		// Retire the candidate: kept through the grace period, then gone.
		if _, err := c.Retire(ctx, "cand/m"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.srv.CollectGarbage(ctx); err != nil {
			t.Fatal(err)
		}
		if !objectExists(t, objs, batch.ManifestKey(0, "cand-s")) {
			t.Fatal("a retired publication's batch was deleted within its grace period")
		}
		clock.Add(2 * time.Minute)
		if _, err := e.srv.CollectGarbage(ctx); err != nil {
			t.Fatal(err)
		}
		if objectExists(t, objs, batch.ManifestKey(0, "cand-s")) || objectExists(t, objs, batch.ManifestKey(0, "cand-d")) {
			t.Fatal("a retired publication's batches outlived the grace period")
		}
		if !objectExists(t, objs, batch.ManifestKey(0, "live-s")) || !objectExists(t, objs, batch.ManifestKey(0, "live-d")) {
			t.Fatal("the live publication's snapshot or delta was deleted")
		}
	})
}

// TestMigrationLegacyPublication: a database from before publications
// (schema 2) that holds batches is migrated with the legacy publication ""
// live, so its replicas go on holding and serving what they served.
func TestMigrationLegacyPublication(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		dsn := b.dsn(t)
		st := openStore(t, dsn, 1)
		if _, _, err := st.RegisterBatch(ctx, manifest("old-s", 0, 1, batch.KindSnapshot), time.Now()); err != nil {
			t.Fatal(err)
		}
		// Back to schema 2: what a binary before publications left.
		for _, q := range []string{
			`DROP INDEX batches_snapshots`, `DROP INDEX batches_by_publication`,
			`ALTER TABLE batches DROP COLUMN publication`, `ALTER TABLE progress DROP COLUMN publication_bytes`,
			`DROP TABLE publications`, `DELETE FROM schema_migrations WHERE version = 3`,
		} {
			if _, err := st.db.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		st.Close()
		st = openStore(t, dsn, 1)
		defer st.Close()
		pubs, live, err := st.Publications(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if live != "" || len(pubs) != 1 || pubs[0].ID != "" || pubs[0].Role != RoleLive || pubs[0].BaseSeq[0] != 1 {
			t.Fatalf("after migrating a schema-2 database: live %q, %+v", live, pubs)
		}
	})
}
