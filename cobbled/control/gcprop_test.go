package control

import (
	"context"
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
