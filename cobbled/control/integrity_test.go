package control

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/objstore"
)

// TestSnapshotOrderingRefusal: a snapshot that supersedes queue records
// whose deltas are not registered is refused with the retryable
// ErrNotDelivered, through the gRPC client too, and accepted once they are.
// Seq and parent are assigned and do not take part in idempotency.
func TestSnapshotOrderingRefusal(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := startEnv(t, b.dsn(t), 4, nil)
		ctx := context.Background()
		d1 := manifest("d1", 2, 4, batch.KindDelta)
		d1.QueueFirst, d1.QueueEnd = 0, 10
		if seq, err := e.client.RegisterBatch(ctx, d1); err != nil || seq != 1 {
			t.Fatalf("d1: %d %v", seq, err)
		}
		snap := manifest("exp-p2", 2, 4, batch.KindSnapshot)
		snap.Supersedes = 25
		_, err := e.client.RegisterBatch(ctx, snap)
		if !errors.Is(err, ErrNotDelivered) || !strings.Contains(err.Error(), "up to 10") {
			t.Fatalf("snapshot before its deltas: %v", err)
		}
		// The refusal left no gap and no row.
		d2 := manifest("d2", 2, 4, batch.KindDelta)
		d2.QueueFirst, d2.QueueEnd = 10, 25
		if seq, err := e.client.RegisterBatch(ctx, d2); err != nil || seq != 2 {
			t.Fatalf("d2: %d %v", seq, err)
		}
		if seq, err := e.client.RegisterBatch(ctx, snap); err != nil || seq != 3 {
			t.Fatalf("snapshot after its deltas: %d %v", seq, err)
		}
		// Another partition's deltas do not count.
		other := manifest("exp-p3", 3, 4, batch.KindSnapshot)
		other.Supersedes = 1
		if _, err := e.client.RegisterBatch(ctx, other); !errors.Is(err, ErrNotDelivered) {
			t.Fatalf("partition 3: %v", err)
		}
		es, err := e.client.ListBatches(ctx, 2, 0, 10, 0)
		if err != nil || len(es) != 3 {
			t.Fatalf("list: %v %v", es, err)
		}
		for i, want := range []string{"", "d1", "d2"} {
			if es[i].Manifest.Seq != int64(i+1) || es[i].Manifest.Parent != want {
				t.Errorf("entry %d: seq %d parent %q, want %d %q", i, es[i].Manifest.Seq, es[i].Manifest.Parent, i+1, want)
			}
		}
		// Re-registering what was listed (seq and parent filled in) is the
		// same batch.
		again := es[1].Manifest
		if seq, err := e.client.RegisterBatch(ctx, &again); err != nil || seq != 2 {
			t.Fatalf("re-register listed manifest: %d %v", seq, err)
		}
	})
}

// TestRetractAndFaults: a retracted batch is listed as retracted, keeps its
// seq and is not a GC floor; a replica fault shows in routing, and one that
// stops serving makes the replica "corrupt" (not routed to) and bumps the
// routing version.
func TestRetractAndFaults(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := startEnv(t, b.dsn(t), 2, nil)
		ctx := context.Background()
		for _, id := range []string{"s1", "bad"} {
			if _, err := e.client.RegisterBatch(ctx, manifest(id, 0, 2, batch.KindSnapshot)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.client.RetractBatch(ctx, "bad", ""); !errors.Is(err, ErrInvalid) {
			t.Fatalf("no reason: %v", err)
		}
		if _, err := e.client.RetractBatch(ctx, "nope", "x"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("unknown: %v", err)
		}
		r, err := e.client.RetractBatch(ctx, "bad", "block checksum mismatch")
		if err != nil || r.Partition != 0 || r.Seq != 2 || r.Already {
			t.Fatalf("retract: %+v %v", r, err)
		}
		if r, err := e.client.RetractBatch(ctx, "bad", "again"); err != nil || !r.Already {
			t.Fatalf("retract twice: %+v %v", r, err)
		}
		es, _ := e.client.ListBatches(ctx, 0, 0, 10, 0)
		if len(es) != 2 || es[0].Retracted != "" || es[1].Retracted != "block checksum mismatch" {
			t.Fatalf("listed: %+v", es)
		}
		if err := e.client.RegisterNode(ctx, Node{ID: "n1", Addr: "127.0.0.1:1", Zone: "a"}); err != nil {
			t.Fatal(err)
		}
		if err := e.client.ReportApplied(ctx, "n1", 0, 2); err != nil {
			t.Fatal(err)
		}
		// The retracted snapshot is not a floor: nothing is collected.
		if n, err := e.store.MarkCollectable(ctx); err != nil || n != 0 {
			t.Fatalf("gc marked %d %v", n, err)
		}
		r0, _ := e.client.GetRouting(ctx)
		f := Fault{Node: "n1", Partition: 0, BatchID: "x", Reason: "corrupt batch x: block checksum mismatch", Serving: true}
		if err := e.client.ReportFault(ctx, f); err != nil {
			t.Fatal(err)
		}
		r1, _ := e.client.GetRouting(ctx)
		if rep := r1.Replicas[0][0]; rep.Fault != f.Reason || rep.State != StateUp || r1.Version != r0.Version {
			t.Fatalf("serving fault: %+v version %d→%d", rep, r0.Version, r1.Version)
		}
		f = Fault{Node: "n1", Partition: 0, Reason: "corrupt replica: read of key 00ff…: Corruption", Serving: false}
		if err := e.client.ReportFault(ctx, f); err != nil {
			t.Fatal(err)
		}
		r2, _ := e.client.GetRouting(ctx)
		if rep := r2.Replicas[0][0]; rep.State != StateCorrupt || rep.AppliedSeq != 0 || r2.Version <= r1.Version {
			t.Fatalf("replica fault: %+v version %d→%d", rep, r1.Version, r2.Version)
		}
		// Rebuilding, the replica reports from 1 again (progress was reset).
		if err := e.client.ReportApplied(ctx, "n1", 0, 1); err != nil {
			t.Fatalf("report after reset: %v", err)
		}
		if err := e.client.ReportFault(ctx, Fault{Node: "n1", Partition: 0}); err != nil {
			t.Fatal(err)
		}
		r3, _ := e.client.GetRouting(ctx)
		if rep := r3.Replicas[0][0]; rep.State != StateUp || rep.Fault != "" || r3.Version <= r2.Version {
			t.Fatalf("cleared: %+v", rep)
		}
		if err := e.client.ReportFault(ctx, Fault{Node: "ghost", Partition: 0, Reason: "x"}); !errors.Is(err, ErrUnknownNode) {
			t.Fatalf("unknown node: %v", err)
		}
	})
}

// TestRebuildFromObjects: registration stamps seq and parent into the
// object store's manifests; a fresh database rebuilt from them has the same
// log (ids, seqs, retractions, the collected floor), and registration goes
// on from there.
func TestRebuildFromObjects(t *testing.T) {
	ctx := context.Background()
	objs, err := objstore.OpenLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := startEnv(t, "sqlite:"+filepath.Join(t.TempDir(), "c.db"), 2, func(o *Options) { o.Objects = objs })
	put := func(m *batch.Manifest) {
		raw, _ := m.Encode()
		if err := objs.Put(ctx, batch.ManifestKey(m.Partition, m.ID), bytes.NewReader(raw), int64(len(raw)), nil); err != nil {
			t.Fatal(err)
		}
	}
	var want []string
	for i, kind := range []string{batch.KindSnapshot, batch.KindDelta, batch.KindDelta, batch.KindSnapshot, batch.KindDelta} {
		m := manifest(fmt.Sprintf("b%d", i+1), 1, 2, kind)
		if kind == batch.KindDelta {
			m.QueueFirst, m.QueueEnd = int64(10*i), int64(10*i+10)
		} else {
			m.Supersedes = int64(10 * i)
		}
		put(m)
		if _, err := e.client.RegisterBatch(ctx, m); err != nil {
			t.Fatal(err)
		}
		want = append(want, fmt.Sprintf("%d:%s", i+1, m.ID))
	}
	if _, err := e.client.RetractBatch(ctx, "b3", "bad delta"); err != nil {
		t.Fatal(err)
	}
	// Not stamped: registered with no manifest object, and an orphan
	// manifest nobody registered.
	orphan := manifest("orphan", 0, 2, batch.KindSnapshot)
	put(orphan)
	// What Run's GC loop does after registrations.
	if n, err := e.srv.StampManifests(ctx, -1, 0); err != nil || n != 5 {
		t.Fatalf("stamped %d, %v", n, err)
	}
	raw, _ := objstore.ReadAll(ctx, objs, batch.ManifestKey(1, "b2"))
	if m, err := batch.Decode(raw); err != nil || m.Seq != 2 || m.Parent != "b1" {
		t.Fatalf("stamped manifest: %+v %v", m, err)
	}
	// Garbage-collected batches' objects are gone: drop b1's manifest, so
	// the rebuilt log starts at b2 (not a snapshot: skipped) ... b4.
	if err := objs.Delete(ctx, batch.ManifestKey(1, "b1")); err != nil {
		t.Fatal(err)
	}

	fresh := openStore(t, "sqlite:"+filepath.Join(t.TempDir(), "rebuilt.db"), 2)
	defer fresh.Close()
	rep, err := fresh.RebuildFromObjects(ctx, objs, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Manifests != 5 || rep.Registered != 2 || rep.Partitions != 1 || len(rep.Skipped) != 3 {
		t.Fatalf("report: %+v", rep)
	}
	es, head, err := fresh.ListBatches(ctx, 1, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		got = append(got, fmt.Sprintf("%d:%s", e.Seq, e.Manifest.ID))
	}
	if strings.Join(got, " ") != "4:b4 5:b5" || head.NewestSeq != 5 || head.CollectedThrough != 3 {
		t.Fatalf("rebuilt log %v head %+v (want the chain from the last snapshot after the break)", got, head)
	}
	// Registration continues; the orphan's producer registers it again.
	if seq, _, err := fresh.RegisterBatch(ctx, manifest("b6", 1, 2, batch.KindDelta), time.Now()); err != nil || seq != 6 {
		t.Fatalf("register after rebuild: %d %v", seq, err)
	}
	if _, err := fresh.RebuildFromObjects(ctx, objs, time.Now()); !errors.Is(err, ErrInvalid) {
		t.Fatalf("rebuild into a non-empty database: %v", err)
	}

	// With every manifest there, the whole log comes back, retraction too.
	full := openStore(t, "sqlite:"+filepath.Join(t.TempDir(), "full.db"), 2)
	defer full.Close()
	b1 := manifest("b1", 1, 2, batch.KindSnapshot)
	b1.Seq = 1
	put(b1)
	if _, err := full.RebuildFromObjects(ctx, objs, time.Now()); err != nil {
		t.Fatal(err)
	}
	es, _, _ = full.ListBatches(ctx, 1, 0, 100)
	got = nil
	for _, e := range es {
		got = append(got, fmt.Sprintf("%d:%s", e.Seq, e.Manifest.ID))
		if (e.Manifest.ID == "b3") != (e.Retracted == "bad delta") {
			t.Errorf("%s retracted %q", e.Manifest.ID, e.Retracted)
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("full rebuild %v, want %v", got, want)
	}
	// delivered_end came back: a snapshot superseding what the deltas
	// covered is accepted.
	s := manifest("s-after", 1, 2, batch.KindSnapshot)
	s.Supersedes = 50
	if _, _, err := full.RegisterBatch(ctx, s, time.Now()); err != nil {
		t.Fatal(err)
	}
}

// copyDB copies an open SQLite database's files (a crash image: the WAL is
// not checkpointed) into dir.
func copyDB(t *testing.T, src, dir string) string {
	t.Helper()
	dst := filepath.Join(dir, "copy.db")
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(src + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst+suffix, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// TestDamagedDatabaseRefused: fault injection on the SQLite files. A WAL
// truncated inside a frame or with a flipped byte in a live frame, and a
// main file with damaged pages, are refused at open with ErrDamaged naming
// the file; an intact crash image, and one whose WAL ends right after a
// frame header (a process killed between SQLite's two writes of a frame),
// open with every batch.
func TestDamagedDatabaseRefused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "control.db")
	st := openStore(t, "sqlite:"+path, 64)
	defer st.Close()
	// Keep everything in the WAL.
	if _, err := st.db.Exec(`PRAGMA wal_autocheckpoint=0`); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 64; i++ {
		if _, _, err := st.RegisterBatch(ctx, manifest(fmt.Sprintf("b%d", i), i, 64, batch.KindSnapshot), time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	walSize := func(p string) int64 {
		fi, err := os.Stat(p + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	count := func(p string) (int, error) {
		s, err := OpenStore(ctx, "sqlite:"+p, nil)
		if err != nil {
			return 0, err
		}
		defer s.Close()
		var n int
		err = s.db.QueryRow(`SELECT COUNT(*) FROM batches`).Scan(&n)
		return n, err
	}
	if walSize(path) < 64*4096 {
		t.Fatalf("WAL only %d bytes: the test needs the batches in it", walSize(path))
	}
	// Intact crash image.
	if n, err := count(copyDB(t, path, t.TempDir())); err != nil || n != 64 {
		t.Fatalf("intact copy: %d batches, %v", n, err)
	}
	const frame = 24 + 4096
	cases := []struct {
		name    string
		damage  func(p string)
		refused string // "" = opens with all 64
	}{
		{"truncated mid-frame", func(p string) {
			sz := walSize(p)
			os.Truncate(p+"-wal", sz-frame*5-1000)
		}, "truncated"},
		{"cut after a frame header", func(p string) {
			// Append the header of a frame that was never completed.
			f, _ := os.OpenFile(p+"-wal", os.O_RDWR, 0)
			defer f.Close()
			h := make([]byte, 24)
			sz := walSize(p)
			f.ReadAt(h, sz-frame)
			f.WriteAt(h, sz)
		}, ""},
		{"flipped byte in a live frame", func(p string) {
			f, _ := os.OpenFile(p+"-wal", os.O_RDWR, 0)
			defer f.Close()
			off := int64(32 + frame*3 + 100)
			b := []byte{0}
			f.ReadAt(b, off)
			b[0] ^= 0x40
			f.WriteAt(b, off)
		}, "fails its checksum"},
		{"damaged header", func(p string) {
			f, _ := os.OpenFile(p+"-wal", os.O_RDWR, 0)
			defer f.Close()
			f.WriteAt([]byte{0xff}, 13)
		}, "header checksum"},
		{"damaged main file", func(p string) {
			// Checkpoint the copy so the pages are in the main file, then
			// overwrite a page in the middle.
			s, err := OpenStore(ctx, "sqlite:"+p, nil)
			if err != nil {
				t.Fatal(err)
			}
			s.db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`)
			s.Close()
			f, _ := os.OpenFile(p, os.O_RDWR, 0)
			defer f.Close()
			fi, _ := f.Stat()
			junk := bytes.Repeat([]byte{0xa5}, 4096)
			f.WriteAt(junk, (fi.Size()/4096/2)*4096)
		}, "quick_check"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := copyDB(t, path, t.TempDir())
			c.damage(p)
			n, err := count(p)
			if c.refused == "" {
				if err != nil || n != 64 {
					t.Fatalf("want all 64 batches: %d, %v", n, err)
				}
				return
			}
			if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), c.refused) || !strings.Contains(err.Error(), "copy.db") {
				t.Fatalf("want ErrDamaged (%s) naming the file, got %d batches, %v", c.refused, n, err)
			}
			// The damage is real: without the check, batches are lost
			// silently (or the database fails later).
			if s, err := OpenStore(ctx, "sqlite:"+p, &StoreOptions{SkipIntegrityCheck: true}); err == nil {
				var n int
				if err := s.db.QueryRow(`SELECT COUNT(*) FROM batches`).Scan(&n); err == nil && n == 64 && c.name != "damaged main file" {
					t.Errorf("unchecked open still sees all 64 batches: the damage is not one")
				}
				t.Logf("unchecked open: %d batches, %v", n, err)
				s.Close()
			} else {
				t.Logf("unchecked open: %v", err)
			}
		})
	}
}

// TestUpgradeBackfillsDelivered: a database from before typed queue ranges
// (schema 1) gets each partition's delivered queue end from its legacy Lorry
// deltas, so bulk snapshots are not refused forever after the upgrade.
func TestUpgradeBackfillsDelivered(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	stmts := append([]string{`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at_ms BIGINT NOT NULL)`,
		`INSERT INTO schema_migrations VALUES (1, 'initial schema', 0)`,
		`INSERT INTO cluster (id, partitions, routing_version, created_at_ms) VALUES (1, 2, 1, 0)`,
		`INSERT INTO partitions (part) VALUES (0)`, `INSERT INTO partitions (part) VALUES (1)`}, migrations[0].stmts...)
	// Tables first, then rows.
	stmts = append(stmts[len(stmts)-len(migrations[0].stmts):], stmts[:len(stmts)-len(migrations[0].stmts)]...)
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	for i, src := range []string{"lorry:p1:0-9", "lorry:p1:10-24", "lorry:p1:fresh:25-30", "pillar export x"} {
		m := manifest(fmt.Sprintf("legacy%d", i), 1, 2, batch.KindDelta)
		m.Source = src
		raw, _ := json.Marshal(m)
		if _, err := db.Exec(`INSERT INTO batches (part, seq, id, kind, manifest, registered_at_ms) VALUES (1, ?, ?, 'delta', ?, 0)`, i+1, m.ID, string(raw)); err != nil {
			t.Fatal(err)
		}
	}
	db.Exec(`UPDATE partitions SET newest_seq = 4 WHERE part = 1`)
	db.Close()
	st := openStore(t, "sqlite:"+path, 2)
	defer st.Close()
	snap := manifest("after-upgrade", 1, 2, batch.KindSnapshot)
	snap.Supersedes = 26
	if _, _, err := st.RegisterBatch(ctx, snap, time.Now()); !errors.Is(err, ErrNotDelivered) || !strings.Contains(err.Error(), "only up to 25") {
		t.Fatalf("beyond the legacy deltas: %v", err)
	}
	snap.Supersedes = 25
	if seq, _, err := st.RegisterBatch(ctx, snap, time.Now()); err != nil || seq != 5 {
		t.Fatalf("covered by the legacy deltas: %d %v", seq, err)
	}
}
