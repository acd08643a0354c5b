package control

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/objstore"
)

// TestGCSafetyRandomized drives a control plane through random
// registrations (deltas and snapshots), replica progress, nodes going down,
// away and coming back, and garbage collection, and checks after every step
// that every assigned replica can still reach a correct state: the batches
// after its applied seq are listed contiguously from applied+1, or start
// with a snapshot (which replaces its contents); and every listed batch's
// objects still exist.
func TestGCSafetyRandomized(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const P = 3
		rng := rand.New(rand.NewSource(42))
		clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
		objs, err := objstore.OpenLocal(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		e := startEnv(t, b.dsn(t), P, func(o *Options) {
			o.Now, o.Objects = clock.Now, objs
			o.DownAfter, o.ReassignAfter = 10*time.Second, 30*time.Second
		})
		ctx := context.Background()
		c := e.client
		nodes := []Node{{"g1", "h:1", "a"}, {"g2", "h:2", "b"}, {"g3", "h:3", "c"}, {"g4", "h:4", "a"}, {"g5", "h:5", "b"}}
		alive := map[string]bool{}
		for _, n := range nodes {
			if err := c.RegisterNode(ctx, n); err != nil {
				t.Fatal(err)
			}
			alive[n.ID] = true
		}
		// applied mirrors what each replica really has (what it reported).
		applied := map[string]int64{}
		pending := map[string][]BatchEntry{} // listed, not yet applied
		key := func(p int, node string) string { return fmt.Sprintf("%d/%s", p, node) }
		nextID := 0
		const steps = 300
		for step := 0; step < steps; step++ {
			switch op := rng.Intn(10); {
			case op < 4: // register a batch
				p := rng.Intn(P)
				kind := batch.KindDelta
				if rng.Intn(4) == 0 {
					kind = batch.KindSnapshot
				}
				nextID++
				id := fmt.Sprintf("r-%d", nextID)
				putObject(t, objs, batch.Prefix(p, id)+"000001.sst")
				putObject(t, objs, batch.ManifestKey(p, id))
				if _, err := c.RegisterBatch(ctx, manifest(id, p, P, kind)); err != nil {
					t.Fatal(err)
				}
			case op < 7: // a replica lists its next batches, or applies the ones it listed earlier, as a serving node would
				r, err := c.GetRouting(ctx)
				if err != nil {
					t.Fatal(err)
				}
				p := rng.Intn(P)
				if len(r.Replicas[p]) == 0 {
					continue
				}
				rep := r.Replicas[p][rng.Intn(len(r.Replicas[p]))]
				k := key(p, rep.NodeID)
				if !alive[rep.NodeID] {
					continue
				}
				if len(pending[k]) == 0 {
					list, err := c.ListBatches(ctx, p, applied[k], 1+rng.Intn(5), 0)
					if err != nil {
						t.Fatal(err)
					}
					pending[k] = list
					continue
				}
				// Other steps (GC included) ran between listing and applying.
				for _, be := range pending[k] {
					for _, ok := range []string{batch.Prefix(p, be.Manifest.ID) + "000001.sst", batch.ManifestKey(p, be.Manifest.ID)} {
						if !objectExists(t, objs, ok) {
							t.Fatalf("step %d: %s applying p%d seq %d (listed after its applied %d): object %s is gone", step, rep.NodeID, p, be.Seq, applied[k], ok)
						}
					}
					if err := c.ReportApplied(ctx, rep.NodeID, p, be.Seq); err != nil {
						t.Fatal(err)
					}
					applied[k] = be.Seq
				}
				pending[k] = nil
			case op < 8: // a node dies or comes back
				n := nodes[rng.Intn(len(nodes))]
				alive[n.ID] = !alive[n.ID]
			case op < 9: // time passes; live nodes heartbeat
				clock.Add(time.Duration(5+rng.Intn(20)) * time.Second)
				for _, n := range nodes {
					if alive[n.ID] {
						if err := c.Heartbeat(ctx, n.ID); err != nil {
							t.Fatal(err)
						}
					}
				}
				if _, err := e.srv.Reconcile(ctx); err != nil {
					t.Fatal(err)
				}
			default:
				if _, err := e.srv.CollectGarbage(ctx); err != nil {
					t.Fatal(err)
				}
			}
			// Invariant: every assigned replica can catch up from where it is.
			r, err := c.GetRouting(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// A replica that lost its assignment drops what it listed (a
			// serving node stops following a partition it no longer holds).
			assigned := map[string]bool{}
			for p := 0; p < P; p++ {
				for _, rep := range r.Replicas[p] {
					assigned[key(p, rep.NodeID)] = true
				}
			}
			for k := range pending {
				if !assigned[k] {
					delete(pending, k)
				}
			}
			for p := 0; p < P; p++ {
				for _, rep := range r.Replicas[p] {
					a := applied[key(p, rep.NodeID)]
					if rep.AppliedSeq != a {
						t.Fatalf("step %d: p%d %s: routing says applied %d, replica reported %d", step, p, rep.NodeID, rep.AppliedSeq, a)
					}
					list, err := c.ListBatches(ctx, p, a, 0, 0)
					if err != nil {
						t.Fatal(err)
					}
					if len(list) == 0 {
						if r.NewestSeq[p] > a {
							t.Fatalf("step %d: p%d %s at %d: nothing listed, newest %d", step, p, rep.NodeID, a, r.NewestSeq[p])
						}
						continue
					}
					if list[0].Seq != a+1 && list[0].Manifest.Kind != batch.KindSnapshot {
						t.Fatalf("step %d: p%d %s at %d: first listed is seq %d, a %s", step, p, rep.NodeID, a, list[0].Seq, list[0].Manifest.Kind)
					}
					for i := 1; i < len(list); i++ {
						if list[i].Seq != list[i-1].Seq+1 {
							t.Fatalf("step %d: p%d: gap between %d and %d", step, p, list[i-1].Seq, list[i].Seq)
						}
					}
				}
			}
		}
		var collected int
		for p := 0; p < P; p++ {
			list, _ := c.ListBatches(ctx, p, 0, 0, 0)
			r, _ := c.GetRouting(ctx)
			collected += int(r.NewestSeq[p]) - len(list)
		}
		t.Logf("%d batches registered, %d collected", nextID, collected)
		if collected == 0 {
			t.Fatal("the run collected nothing: the test did not exercise garbage collection")
		}
	})
}

// TestGCLoop checks that Run collects garbage on its own.
func TestGCLoop(t *testing.T) {
	objs, err := objstore.OpenLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := startEnv(t, backends()[0].dsn(t), 1, func(o *Options) {
		o.Objects, o.GCInterval, o.ReconcileInterval = objs, 50*time.Millisecond, 50*time.Millisecond
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { e.srv.Run(ctx); close(done) }()
	if err := e.client.RegisterNode(ctx, Node{"l1", "h:1", "a"}); err != nil {
		t.Fatal(err)
	}
	for i, kind := range []string{batch.KindDelta, batch.KindSnapshot} {
		id := fmt.Sprintf("loop-%d", i)
		putObject(t, objs, batch.ManifestKey(0, id))
		if _, err := e.client.RegisterBatch(ctx, manifest(id, 0, 1, kind)); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.client.ReportApplied(ctx, "l1", 0, 2); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for objectExists(t, objs, batch.ManifestKey(0, "loop-0")) {
		if time.Now().After(deadline) {
			t.Fatal("Run did not collect the batch before the snapshot")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !objectExists(t, objs, batch.ManifestKey(0, "loop-1")) {
		t.Fatal("Run collected the snapshot itself")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// TestGCPublicationsRandomized is TestGCSafetyRandomized with publications:
// batches of several publications interleave in each partition's log while
// publications are registered, promoted (forced or not), rolled back and
// retired, replicas progress, nodes come and go and garbage collection runs
// (retired publications' batches included, after RetireGrace). After every
// step it checks that nothing a publication that is not retired needs is
// gone, by rules the test keeps itself:
//   - the publication's newest snapshot of each partition and every batch
//     of it after that snapshot are listed and their objects exist;
//   - every batch of it from BaseSeq on is listed, and BaseSeq is one of its
//     snapshots;
//   - a replica the routing says HOLDS it (AppliedSeq >= BaseSeq) applied a
//     snapshot of it, and every batch of it after its applied seq is listed
//     to it with its objects.
func TestGCPublicationsRandomized(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const P = 2
		rng := rand.New(rand.NewSource(18))
		clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
		objs, err := objstore.OpenLocal(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		e := startEnv(t, b.dsn(t), P, func(o *Options) {
			o.Now, o.Objects = clock.Now, objs
			o.DownAfter, o.ReassignAfter = 10*time.Second, 30*time.Second
			o.RetireGrace = 20 * time.Second
		})
		ctx := context.Background()
		c := e.client
		nodes := []Node{{"q1", "h:1", "a"}, {"q2", "h:2", "b"}, {"q3", "h:3", "c"}, {"q4", "h:4", "a"}}
		alive := map[string]bool{}
		for _, n := range nodes {
			if err := c.RegisterNode(ctx, n); err != nil {
				t.Fatal(err)
			}
			alive[n.ID] = true
		}
		type reg struct {
			seq       int64
			pub, kind string
			id        string
		}
		log := make([][]reg, P) // every registered batch, per partition, in seq order
		applied := map[string]int64{}
		holds := map[string]map[string]bool{} // replica -> publications it applied a snapshot of
		pending := map[string][]BatchEntry{}
		key := func(p int, node string) string { return fmt.Sprintf("%d/%s", p, node) }
		pubs := []string{"c0/m0"}
		nextPub, nextID := 1, 0
		roles := func() map[string]string {
			ps, _, err := c.ListPublications(ctx)
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]string{}
			for _, p := range ps {
				out[p.ID] = p.Role
			}
			return out
		}
		var promotions, rollbacks, retires, collected int
		const steps = 500
		for step := 0; step < steps; step++ {
			switch op := rng.Intn(16); {
			case op < 5: // register a batch of a publication that is not retired
				rs := roles()
				var cands []string
				for _, id := range pubs {
					if r, ok := rs[id]; !ok || r != RoleRetired {
						cands = append(cands, id)
					}
				}
				if len(cands) == 0 {
					continue
				}
				pub := cands[rng.Intn(len(cands))]
				p := rng.Intn(P)
				kind := batch.KindDelta
				if rng.Intn(3) == 0 {
					kind = batch.KindSnapshot
				}
				nextID++
				id := fmt.Sprintf("b-%d", nextID)
				putObject(t, objs, batch.Prefix(p, id)+"000001.sst")
				putObject(t, objs, batch.ManifestKey(p, id))
				m := manifest(id, p, P, kind)
				m.Publication = pub
				seq, err := c.RegisterBatch(ctx, m)
				if err != nil {
					t.Fatal(err)
				}
				log[p] = append(log[p], reg{seq: seq, pub: pub, kind: kind, id: id})
			case op < 6: // a new candidate (now and then: it retires the one before)
				if rng.Intn(3) != 0 {
					continue
				}
				id := fmt.Sprintf("c%d/m%d", nextPub, nextPub)
				nextPub++
				if _, err := c.RegisterPublication(ctx, id, rng.Intn(2) == 0); err != nil {
					t.Fatal(err)
				}
				pubs = append(pubs, id)
			case op < 9: // promote (sometimes forced), or roll back
				var err error
				if rng.Intn(2) == 0 {
					_, err = c.Promote(ctx, "", rng.Intn(2) == 0)
					if err == nil {
						promotions++
					}
				} else {
					_, err = c.Rollback(ctx, rng.Intn(2) == 0)
					if err == nil {
						rollbacks++
					}
				}
				if testing.Verbose() && err != nil {
					t.Logf("step %d: %v", step, err)
				}
				if err != nil && !errors.Is(err, ErrNotReady) && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrNoPrevious) {
					t.Fatal(err)
				}
			case op < 10: // retire one that is not live (now and then)
				if rng.Intn(3) != 0 {
					continue
				}
				id := pubs[rng.Intn(len(pubs))]
				if _, err := c.Retire(ctx, id); err == nil {
					retires++
				} else if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrNotFound) {
					t.Fatal(err)
				}
			case op < 13: // a replica lists, or applies what it listed
				r, err := c.GetRouting(ctx)
				if err != nil {
					t.Fatal(err)
				}
				p := rng.Intn(P)
				if len(r.Replicas[p]) == 0 {
					continue
				}
				rep := r.Replicas[p][rng.Intn(len(r.Replicas[p]))]
				k := key(p, rep.NodeID)
				if !alive[rep.NodeID] {
					continue
				}
				if len(pending[k]) == 0 {
					if pending[k], err = c.ListBatches(ctx, p, applied[k], 1+rng.Intn(8), 0); err != nil {
						t.Fatal(err)
					}
					if rng.Intn(2) == 0 {
						continue // applied in a later step, other steps (GC included) in between
					}
				}
				for _, be := range pending[k] {
					if !objectExists(t, objs, batch.ManifestKey(p, be.Manifest.ID)) {
						t.Fatalf("step %d: %s applying p%d seq %d: its objects are gone", step, rep.NodeID, p, be.Seq)
					}
					if err := c.ReportAppliedBytes(ctx, rep.NodeID, p, be.Seq, map[string]int64{be.Manifest.Publication: be.Seq}); err != nil {
						t.Fatal(err)
					}
					applied[k] = be.Seq
					if be.Manifest.Kind == batch.KindSnapshot {
						if holds[k] == nil {
							holds[k] = map[string]bool{}
						}
						holds[k][be.Manifest.Publication] = true
					}
				}
				pending[k] = nil
			case op < 14:
				if rng.Intn(2) == 0 {
					continue
				}
				n := nodes[rng.Intn(len(nodes))]
				alive[n.ID] = !alive[n.ID]
			case op < 15:
				clock.Add(time.Duration(5+rng.Intn(20)) * time.Second)
				for _, n := range nodes {
					if alive[n.ID] {
						if err := c.Heartbeat(ctx, n.ID); err != nil {
							t.Fatal(err)
						}
					}
				}
				if _, err := e.srv.Reconcile(ctx); err != nil {
					t.Fatal(err)
				}
			default:
				st, err := e.srv.CollectGarbage(ctx)
				if err != nil {
					t.Fatal(err)
				}
				collected += st.Deleted
			}
			r, err := c.GetRouting(ctx)
			if err != nil {
				t.Fatal(err)
			}
			assigned := map[string]bool{}
			for p := 0; p < P; p++ {
				for _, rep := range r.Replicas[p] {
					assigned[key(p, rep.NodeID)] = true
				}
			}
			for k := range pending {
				if !assigned[k] {
					delete(pending, k)
				}
			}
			for p := 0; p < P; p++ {
				all, err := c.ListBatches(ctx, p, 0, 1000, 0)
				if err != nil {
					t.Fatal(err)
				}
				listed := map[int64]bool{}
				for _, be := range all {
					listed[be.Seq] = true
				}
				need := func(what string, g reg) {
					if !listed[g.seq] {
						t.Fatalf("step %d: p%d: %s: seq %d (%s of %q) is no longer listed", step, p, what, g.seq, g.kind, g.pub)
					}
					if !objectExists(t, objs, batch.ManifestKey(p, g.id)) || !objectExists(t, objs, batch.Prefix(p, g.id)+"000001.sst") {
						t.Fatalf("step %d: p%d: %s: objects of seq %d (%s of %q) are gone", step, p, what, g.seq, g.kind, g.pub)
					}
				}
				for _, pub := range r.Publications {
					if pub.Role == RoleRetired {
						if pub.Holds(p, 1<<62) {
							t.Fatalf("step %d: retired %q is held", step, pub.ID)
						}
						continue
					}
					var newest int64
					for _, g := range log[p] {
						if g.pub == pub.ID && g.kind == batch.KindSnapshot {
							newest = g.seq
						}
					}
					base := pub.BaseSeq[p]
					if (newest == 0) != (base == 0) || base > newest {
						t.Fatalf("step %d: p%d %q: base seq %d, newest snapshot %d", step, p, pub.ID, base, newest)
					}
					for _, g := range log[p] {
						if g.pub != pub.ID {
							continue
						}
						if g.seq == base && g.kind != batch.KindSnapshot {
							t.Fatalf("step %d: p%d %q: base seq %d is a %s", step, p, pub.ID, base, g.kind)
						}
						if newest > 0 && g.seq >= newest {
							need(fmt.Sprintf("%s %q newest snapshot on", pub.Role, pub.ID), g)
						}
						if base > 0 && g.seq >= base {
							need(fmt.Sprintf("%s %q from its base", pub.Role, pub.ID), g)
						}
					}
					for _, rep := range r.Replicas[p] {
						k := key(p, rep.NodeID)
						if !pub.Holds(p, rep.AppliedSeq) {
							continue
						}
						if !holds[k][pub.ID] {
							t.Fatalf("step %d: p%d %s at %d: routing says it holds %q (base %d) but it applied no snapshot of it", step, p, rep.NodeID, rep.AppliedSeq, pub.ID, base)
						}
						for _, g := range log[p] {
							if g.pub == pub.ID && g.seq > rep.AppliedSeq {
								need(fmt.Sprintf("replica %s holding %q at %d", rep.NodeID, pub.ID, rep.AppliedSeq), g)
							}
						}
					}
				}
			}
		}
		t.Logf("%d batches, %d publications, %d promotions, %d rollbacks, %d retires, %d batches deleted", nextID, len(pubs), promotions, rollbacks, retires, collected)
		if collected == 0 || promotions == 0 || rollbacks == 0 || retires == 0 {
			t.Fatal("the run did not exercise collection, promotion, rollback and retirement")
		}
	})
}
