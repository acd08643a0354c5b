package control

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/objstore"
)

func TestRegisterIdempotentConcurrent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := startEnv(t, b.dsn(t), 4, nil)
		ctx := context.Background()
		const ids, callers = 20, 12
		// Every caller registers every id, in its own order: many duplicate
		// registrations race for each id.
		got := make([]map[string]int64, callers)
		var wg sync.WaitGroup
		errs := make(chan error, callers)
		for c := 0; c < callers; c++ {
			got[c] = map[string]int64{}
			wg.Add(1)
			go func(c int) {
				defer wg.Done()
				order := rand.New(rand.NewSource(int64(c))).Perm(ids)
				for _, i := range order {
					id := fmt.Sprintf("b-%03d", i)
					seq, err := e.client.RegisterBatch(ctx, manifest(id, 1, 4, batch.KindDelta))
					if err != nil {
						errs <- err
						return
					}
					got[c][id] = seq
				}
			}(c)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		// One seq per id, the same for every caller, and seqs 1..ids with no gap.
		var seqs []int64
		for id, seq := range got[0] {
			for c := 1; c < callers; c++ {
				if got[c][id] != seq {
					t.Fatalf("id %s: caller 0 got seq %d, caller %d got %d", id, seq, c, got[c][id])
				}
			}
			seqs = append(seqs, seq)
		}
		slices.Sort(seqs)
		for i, s := range seqs {
			if s != int64(i+1) {
				t.Fatalf("seqs %v: want 1..%d without gaps", seqs, ids)
			}
		}
		list, err := e.client.ListBatches(ctx, 1, 0, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != ids {
			t.Fatalf("listed %d batches, want %d", len(list), ids)
		}
		for i, be := range list {
			if be.Seq != int64(i+1) || got[0][be.Manifest.ID] != be.Seq {
				t.Fatalf("entry %d: seq %d id %s", i, be.Seq, be.Manifest.ID)
			}
		}
		// Same id, different manifest: refused, and nothing changes.
		m := manifest("b-000", 1, 4, batch.KindSnapshot)
		if _, err := e.client.RegisterBatch(ctx, m); !errors.Is(err, ErrConflict) {
			t.Fatalf("re-register with another manifest: %v, want ErrConflict", err)
		}
		// The same id in another partition is the same id.
		if _, err := e.client.RegisterBatch(ctx, manifest("b-000", 2, 4, batch.KindDelta)); !errors.Is(err, ErrConflict) {
			t.Fatalf("same id in another partition: %v, want ErrConflict", err)
		}
		if list2, _ := e.client.ListBatches(ctx, 1, 0, 0, 0); len(list2) != ids {
			t.Fatalf("after conflict: %d batches", len(list2))
		}
	})
}

func TestOrderingAcrossPartitions(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const P, writers, perWriter = 6, 8, 15
		e := startEnv(t, b.dsn(t), P, nil)
		ctx := context.Background()
		type reg struct {
			id  string
			seq int64
		}
		results := make([][]reg, writers)
		var wg sync.WaitGroup
		var failed sync.Once
		var firstErr error
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				rng := rand.New(rand.NewSource(int64(w)))
				for i := 0; i < perWriter; i++ {
					p := rng.Intn(P)
					id := fmt.Sprintf("w%d-%03d", w, i)
					seq, err := e.client.RegisterBatch(ctx, manifest(id, p, P, batch.KindDelta))
					if err != nil {
						failed.Do(func() { firstErr = err })
						return
					}
					results[w] = append(results[w], reg{id, seq})
				}
			}(w)
		}
		wg.Wait()
		if firstErr != nil {
			t.Fatal(firstErr)
		}
		seqOf := map[string]int64{}
		for _, rs := range results {
			for _, r := range rs {
				seqOf[r.id] = r.seq
			}
		}
		total := 0
		for p := 0; p < P; p++ {
			list, err := e.client.ListBatches(ctx, p, 0, 1000, 0)
			if err != nil {
				t.Fatal(err)
			}
			total += len(list)
			lastByWriter := map[string]int{}
			for i, be := range list {
				if be.Seq != int64(i+1) {
					t.Fatalf("partition %d: entry %d has seq %d (gap or disorder)", p, i, be.Seq)
				}
				if be.Manifest.Partition != p || seqOf[be.Manifest.ID] != be.Seq {
					t.Fatalf("partition %d seq %d: %s registered as seq %d", p, be.Seq, be.Manifest.ID, seqOf[be.Manifest.ID])
				}
				// One writer's batches keep their registration order.
				w, n, _ := strings.Cut(be.Manifest.ID, "-")
				var k int
				fmt.Sscanf(n, "%d", &k)
				if prev, ok := lastByWriter[w]; ok && k < prev {
					t.Fatalf("partition %d: writer %s batch %d after %d", p, w, k, prev)
				}
				lastByWriter[w] = k
			}
			// Paging with after_seq and a small limit walks the same log.
			var paged []int64
			for after := int64(0); ; {
				page, err := e.client.ListBatches(ctx, p, after, 4, 0)
				if err != nil {
					t.Fatal(err)
				}
				if len(page) == 0 {
					break
				}
				for _, be := range page {
					paged = append(paged, be.Seq)
				}
				after = page[len(page)-1].Seq
			}
			if len(paged) != len(list) {
				t.Fatalf("partition %d: paging saw %d batches, want %d", p, len(paged), len(list))
			}
		}
		if total != writers*perWriter {
			t.Fatalf("%d batches listed, want %d", total, writers*perWriter)
		}
	})
}

func TestLongPoll(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := startEnv(t, b.dsn(t), 4, nil)
		ctx := context.Background()
		// Many waiters on two partitions; a registration wakes those of its
		// partition only, well within a second of its commit. The partition-0
		// waiters wait far longer than the test needs, so a registration slowed
		// by a loaded machine (a PostgreSQL commit behind other I/O) cannot
		// outlast their wait; a lost wake-up still fails (empty after 20 s, or
		// woken long after the registration returned).
		const waiters = 20
		type res struct {
			p   int
			n   int
			err error
			at  time.Time
		}
		out := make(chan res, waiters)
		for i := 0; i < waiters; i++ {
			p := i % 2
			wait := 3 * time.Second
			if p == 0 {
				wait = 20 * time.Second
			}
			go func() {
				list, err := e.client.ListBatches(ctx, p, 0, 0, wait)
				out <- res{p, len(list), err, time.Now()}
			}()
		}
		time.Sleep(300 * time.Millisecond) // let them all wait
		start := time.Now()
		if _, err := e.client.RegisterBatch(ctx, manifest("wake-1", 0, 4, batch.KindDelta)); err != nil {
			t.Fatal(err)
		}
		registered := time.Now()
		for i := 0; i < waiters; i++ {
			r := <-out
			if r.err != nil {
				t.Fatal(r.err)
			}
			switch r.p {
			case 0:
				if r.n != 1 {
					t.Fatalf("woken waiter: partition 0 with %d batches; want 1", r.n)
				}
				if d := r.at.Sub(registered); d > time.Second {
					t.Fatalf("waiter woke %v after the registration returned", d)
				}
			default:
				// The partition-1 waiters time out empty after their wait.
				if r.p != 1 || r.n != 0 {
					t.Fatalf("partition-1 waiter: %+v", r)
				}
				if d := r.at.Sub(start); d < 2*time.Second {
					t.Fatalf("partition-1 waiter returned after %v, before its wait", d)
				}
			}
		}
		// A waiter behind the newest returns at once.
		t0 := time.Now()
		if list, err := e.client.ListBatches(ctx, 0, 0, 0, 5*time.Second); err != nil || len(list) != 1 || time.Since(t0) > 500*time.Millisecond {
			t.Fatalf("ListBatches behind newest: %d batches, %v, after %v", len(list), err, time.Since(t0))
		}
		// A cancelled long poll returns promptly.
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		t0 = time.Now()
		if _, err := e.client.ListBatches(cctx, 0, 1, 0, 10*time.Second); err == nil || time.Since(t0) > time.Second {
			t.Fatalf("cancelled long poll: %v after %v", err, time.Since(t0))
		}
	})
}

func TestBadInput(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const P = 8
		e := startEnv(t, b.dsn(t), P, nil)
		ctx := context.Background()
		c := e.client
		bad := map[string]*batch.Manifest{}
		m := manifest("x1", P, P, batch.KindDelta)
		bad["partition >= P"] = m
		m = manifest("x2", 0, P, batch.KindDelta)
		m.Files = nil
		bad["no files"] = m
		m = manifest("x3", 0, P, batch.KindDelta)
		m.Files[0].SHA256 = "abcd"
		bad["short checksum"] = m
		m = manifest("x4", 0, P, batch.KindDelta)
		m.Kind = "full"
		bad["bad kind"] = m
		for name, m := range bad {
			if _, err := c.RegisterBatch(ctx, m); !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", name, err)
			}
		}
		if _, err := c.RegisterBatch(ctx, manifest("x5", 0, P*2, batch.KindDelta)); !errors.Is(err, ErrPartitions) {
			t.Errorf("manifest for another P: %v, want ErrPartitions", err)
		}
		if _, err := c.ListBatches(ctx, P, 0, 0, 0); !errors.Is(err, ErrInvalid) {
			t.Errorf("list partition P: %v", err)
		}
		if _, err := c.ListBatches(ctx, -1, 0, 0, 0); !errors.Is(err, ErrInvalid) {
			t.Errorf("list partition -1: %v", err)
		}
		if _, err := c.ListBatches(ctx, 0, 0, 0, 0); err != nil {
			t.Errorf("list empty partition: %v", err)
		}
		// Nothing bad got registered.
		r, err := c.GetRouting(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for p, n := range r.NewestSeq {
			if n != 0 {
				t.Fatalf("partition %d has newest seq %d after only bad registrations", p, n)
			}
		}

		// Progress.
		if err := c.ReportApplied(ctx, "ghost", 0, 1); !errors.Is(err, ErrUnknownNode) {
			t.Errorf("unknown node: %v", err)
		}
		if err := c.Heartbeat(ctx, "ghost"); !errors.Is(err, ErrUnknownNode) {
			t.Errorf("heartbeat unknown node: %v", err)
		}
		if err := c.RegisterNode(ctx, Node{ID: "", Addr: "x:1"}); !errors.Is(err, ErrInvalid) {
			t.Errorf("node without id: %v", err)
		}
		if err := c.RegisterNode(ctx, Node{ID: "n1", Addr: "127.0.0.1:9001", Zone: "a"}); err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 3; i++ {
			if _, err := c.RegisterBatch(ctx, manifest(fmt.Sprintf("ok-%d", i), 0, P, batch.KindDelta)); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.ReportApplied(ctx, "n1", 0, 4); !errors.Is(err, ErrNotFound) {
			t.Errorf("seq beyond newest: %v", err)
		}
		if err := c.ReportApplied(ctx, "n1", 1, 1); !errors.Is(err, ErrNotFound) {
			t.Errorf("seq in an empty partition: %v", err)
		}
		if err := c.ReportApplied(ctx, "n1", 0, 0); !errors.Is(err, ErrNotFound) {
			t.Errorf("seq 0: %v", err)
		}
		if err := c.ReportApplied(ctx, "n1", P, 1); !errors.Is(err, ErrInvalid) {
			t.Errorf("partition P: %v", err)
		}
		if err := c.ReportApplied(ctx, "n1", 0, 2); err != nil {
			t.Fatal(err)
		}
		if err := c.ReportApplied(ctx, "n1", 0, 2); err != nil {
			t.Errorf("same seq again: %v", err)
		}
		if err := c.ReportApplied(ctx, "n1", 0, 1); !errors.Is(err, ErrBackwards) {
			t.Errorf("backwards: %v", err)
		}
		if err := c.ReportApplied(ctx, "n1", 0, 3); err != nil {
			t.Fatal(err)
		}
	})
}

func TestAuth(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := startEnv(t, b.dsn(t), 4, nil)
		ctx := context.Background()
		for name, tok := range map[string]string{"no token": "", "wrong token": "nope"} {
			c, err := Dial(e.addr, &ClientOptions{Token: tok})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.RegisterBatch(ctx, manifest("a1", 0, 4, batch.KindDelta)); !errors.Is(err, ErrUnauthenticated) {
				t.Errorf("%s: register batch: %v", name, err)
			}
			if err := c.RegisterNode(ctx, Node{ID: "n1", Addr: "a:1"}); !errors.Is(err, ErrUnauthenticated) {
				t.Errorf("%s: register node: %v", name, err)
			}
			if err := c.Heartbeat(ctx, "n1"); !errors.Is(err, ErrUnauthenticated) {
				t.Errorf("%s: heartbeat: %v", name, err)
			}
			if err := c.ReportApplied(ctx, "n1", 0, 1); !errors.Is(err, ErrUnauthenticated) {
				t.Errorf("%s: report applied: %v", name, err)
			}
			if err := c.RemoveNode(ctx, "n1", true); !errors.Is(err, ErrUnauthenticated) {
				t.Errorf("%s: remove node: %v", name, err)
			}
			// Reads need no token.
			if _, err := c.ListBatches(ctx, 0, 0, 0, 0); err != nil {
				t.Errorf("%s: list batches: %v", name, err)
			}
			if _, err := c.GetRouting(ctx); err != nil {
				t.Errorf("%s: routing: %v", name, err)
			}
		}
		// Nothing was registered by the refused calls.
		if nodes, err := e.client.ListNodes(ctx); err != nil || len(nodes) != 0 {
			t.Fatalf("nodes after refused calls: %v %v", nodes, err)
		}
		if _, err := e.client.RegisterBatch(ctx, manifest("a1", 0, 4, batch.KindDelta)); err != nil {
			t.Fatalf("with the token: %v", err)
		}
	})
	if _, err := NewServer(&Options{Store: &Store{partitions: 1}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("server without a token: %v", err)
	}
}

func replicaIDs(reps []Replica) []string {
	var ids []string
	for _, r := range reps {
		ids = append(ids, r.NodeID)
	}
	return ids
}

func TestDownDetectionAndReassignment(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const P = 16
		clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
		e := startEnv(t, b.dsn(t), P, func(o *Options) {
			o.Now = clock.Now
			o.DownAfter = 10 * time.Second
			o.ReassignAfter = time.Minute
		})
		ctx := context.Background()
		c := e.client
		nodes := []Node{{"n1", "127.0.0.1:9001", "a"}, {"n2", "127.0.0.1:9002", "b"}, {"n3", "127.0.0.1:9003", "c"},
			{"n4", "127.0.0.1:9004", "a"}, {"n5", "127.0.0.1:9005", "b"}}
		for _, n := range nodes {
			if err := c.RegisterNode(ctx, n); err != nil {
				t.Fatal(err)
			}
		}
		r0, err := c.GetRouting(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var cands []Candidate
		for _, n := range nodes {
			cands = append(cands, Candidate{n.ID, n.Zone})
		}
		want := Assign(P, cands, 3)
		for p := 0; p < P; p++ {
			if got := replicaIDs(r0.Replicas[p]); !slices.Equal(got, want[p]) {
				t.Fatalf("p%d: routed %v, assigned %v", p, got, want[p])
			}
			for _, rep := range r0.Replicas[p] {
				if rep.State != StateUp || rep.Addr == "" || rep.Zone == "" {
					t.Fatalf("p%d: replica %+v", p, rep)
				}
			}
		}
		// A routing watcher wakes on the next change.
		watch := make(chan *Routing, 1)
		go func() {
			r, err := c.WatchRouting(ctx, r0.Version, 10*time.Second)
			if err != nil {
				t.Error(err)
			}
			watch <- r
		}()

		// n1 stops heartbeating; the others keep going.
		beat := func(except ...string) {
			for _, n := range nodes {
				if !slices.Contains(except, n.ID) {
					if err := c.Heartbeat(ctx, n.ID); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		for i := 0; i < 3; i++ {
			clock.Add(5 * time.Second)
			beat("n1")
			if _, err := e.srv.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
		}
		r1, err := c.GetRouting(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r1.Version <= r0.Version {
			t.Fatalf("version %d after n1 went down, was %d", r1.Version, r0.Version)
		}
		select {
		case w := <-watch:
			if w.Version <= r0.Version {
				t.Fatalf("watcher got version %d", w.Version)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("routing watcher not woken")
		}
		held := 0
		for p := 0; p < P; p++ {
			if got := replicaIDs(r1.Replicas[p]); !slices.Equal(got, want[p]) {
				t.Fatalf("p%d: down node moved replicas early: %v -> %v", p, want[p], got)
			}
			for _, rep := range r1.Replicas[p] {
				wantState := StateUp
				if rep.NodeID == "n1" {
					wantState = StateDown
					held++
				}
				if rep.State != wantState {
					t.Fatalf("p%d: %s is %s, want %s", p, rep.NodeID, rep.State, wantState)
				}
			}
		}
		if held == 0 {
			t.Fatal("n1 held no partition; test cluster is too small")
		}
		// Past the grace period n1's partitions move; nothing else does.
		for i := 0; i < 12; i++ {
			clock.Add(5 * time.Second)
			beat("n1")
			if _, err := e.srv.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
		}
		r2, err := c.GetRouting(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for p := 0; p < P; p++ {
			got := replicaIDs(r2.Replicas[p])
			if slices.Contains(got, "n1") || len(got) != 3 {
				t.Fatalf("p%d: after the grace period: %v", p, got)
			}
			if !slices.Contains(want[p], "n1") && !slices.Equal(got, want[p]) {
				t.Fatalf("p%d did not hold n1 but moved: %v -> %v", p, want[p], got)
			}
			if in := setMinus(got, want[p]); len(in) > 1 {
				t.Fatalf("p%d: %v -> %v moves more than one replica", p, want[p], got)
			}
		}
		ns, err := c.ListNodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range ns {
			if n.ID == "n1" && (n.State != StateGone || n.Replicas != 0) {
				t.Fatalf("n1: %+v", n)
			}
		}
		// n1 returns: it is up again at once and gets its partitions back.
		if err := c.Heartbeat(ctx, "n1"); err != nil {
			t.Fatal(err)
		}
		r3, err := c.GetRouting(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for p := 0; p < P; p++ {
			if got := replicaIDs(r3.Replicas[p]); !slices.Equal(got, want[p]) {
				t.Fatalf("p%d after n1 returned: %v, want %v", p, got, want[p])
			}
		}
		// A restarted control plane counts heartbeats from its own start,
		// so it does not declare every node gone.
		clock.Add(time.Hour)
		srv2, err := NewServer(&Options{Store: e.store, Token: testToken, Now: clock.Now, DownAfter: 10 * time.Second, ReassignAfter: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := srv2.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		r4, _ := c.GetRouting(ctx)
		for p := 0; p < P; p++ {
			for _, rep := range r4.Replicas[p] {
				if rep.State != StateUp {
					t.Fatalf("after restart p%d: %+v", p, rep)
				}
			}
		}
	})
}

func TestRemoveNode(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const P = 12
		clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
		e := startEnv(t, b.dsn(t), P, func(o *Options) { o.Now = clock.Now })
		ctx := context.Background()
		c := e.client
		var cands []Candidate
		for i, z := range []string{"a", "b", "c", "a", "b"} {
			n := Node{fmt.Sprintf("rn%d", i), fmt.Sprintf("127.0.0.1:%d", 9600+i), z}
			if err := c.RegisterNode(ctx, n); err != nil {
				t.Fatal(err)
			}
			cands = append(cands, Candidate{n.ID, n.Zone})
		}
		if _, err := c.RegisterBatch(ctx, manifest("rm-1", 0, P, batch.KindDelta)); err != nil {
			t.Fatal(err)
		}
		if err := c.ReportApplied(ctx, "rn0", 0, 1); err != nil {
			t.Fatal(err)
		}
		if err := c.RemoveNode(ctx, "rn0", false); !errors.Is(err, ErrNodeUp) {
			t.Fatalf("remove an up node: %v", err)
		}
		if err := c.RemoveNode(ctx, "nobody", true); !errors.Is(err, ErrUnknownNode) {
			t.Fatalf("remove an unknown node: %v", err)
		}
		// rn1 goes quiet past DownAfter, then is removed without force.
		clock.Add(15 * time.Second)
		for _, id := range []string{"rn0", "rn2", "rn3", "rn4"} {
			c.Heartbeat(ctx, id)
		}
		if _, err := e.srv.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.RemoveNode(ctx, "rn1", false); err != nil {
			t.Fatalf("remove a down node: %v", err)
		}
		if err := c.RemoveNode(ctx, "rn0", true); err != nil {
			t.Fatalf("force-remove an up node: %v", err)
		}
		want := Assign(P, cands[2:], 3)
		r, err := c.GetRouting(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for p := 0; p < P; p++ {
			if got := replicaIDs(r.Replicas[p]); !slices.Equal(got, want[p]) {
				t.Fatalf("p%d after removals: %v, want %v", p, got, want[p])
			}
		}
		ns, _ := c.ListNodes(ctx)
		if len(ns) != 3 {
			t.Fatalf("nodes after removals: %+v", ns)
		}
		if err := c.Heartbeat(ctx, "rn0"); !errors.Is(err, ErrUnknownNode) {
			t.Fatalf("heartbeat of a removed node: %v", err)
		}
		// Re-registering brings it back with no progress.
		if err := c.RegisterNode(ctx, Node{"rn0", "127.0.0.1:9600", "a"}); err != nil {
			t.Fatal(err)
		}
		r, _ = c.GetRouting(ctx)
		for _, rep := range r.Replicas[0] {
			if rep.NodeID == "rn0" && rep.AppliedSeq != 0 {
				t.Fatalf("re-registered node kept its progress: %+v", rep)
			}
		}
	})
}

func TestFewerNodesThanReplicas(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := startEnv(t, b.dsn(t), 4, nil)
		ctx := context.Background()
		if err := e.client.RegisterNode(ctx, Node{"solo", "127.0.0.1:9100", "a"}); err != nil {
			t.Fatal(err)
		}
		r, err := e.client.GetRouting(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for p, reps := range r.Replicas {
			if len(reps) != 1 || reps[0].NodeID != "solo" {
				t.Fatalf("p%d: %v", p, reps)
			}
		}
		if err := e.client.RegisterNode(ctx, Node{"second", "127.0.0.1:9101", "a"}); err != nil {
			t.Fatal(err)
		}
		r, _ = e.client.GetRouting(ctx)
		for p, reps := range r.Replicas {
			if len(reps) != 2 {
				t.Fatalf("p%d: %v", p, reps)
			}
		}
	})
}

func TestProgressAndLag(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
		e := startEnv(t, b.dsn(t), 2, func(o *Options) { o.Now = clock.Now })
		ctx := context.Background()
		c := e.client
		for i, z := range []string{"a", "b", "c"} {
			if err := c.RegisterNode(ctx, Node{fmt.Sprintf("n%d", i), fmt.Sprintf("127.0.0.1:%d", 9200+i), z}); err != nil {
				t.Fatal(err)
			}
		}
		for i := 1; i <= 5; i++ {
			if _, err := c.RegisterBatch(ctx, manifest(fmt.Sprintf("lag-%d", i), 0, 2, batch.KindDelta)); err != nil {
				t.Fatal(err)
			}
			clock.Add(10 * time.Second)
		}
		// Batch 3 was registered at t0+20s, now is t0+50s.
		if err := c.ReportApplied(ctx, "n0", 0, 5); err != nil {
			t.Fatal(err)
		}
		if err := c.ReportApplied(ctx, "n1", 0, 2); err != nil {
			t.Fatal(err)
		}
		r, err := c.GetRouting(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.NewestSeq[0] != 5 || r.NewestSeq[1] != 0 {
			t.Fatalf("newest %v", r.NewestSeq)
		}
		got := map[string]Replica{}
		for _, rep := range r.Replicas[0] {
			got[rep.NodeID] = rep
		}
		check := func(id string, applied, lagB int64, lag time.Duration) {
			rep := got[id]
			if rep.AppliedSeq != applied || rep.LagBatches != lagB || rep.Lag != lag {
				t.Errorf("%s: applied %d lag %d batches %v; want %d, %d, %v", id, rep.AppliedSeq, rep.LagBatches, rep.Lag, applied, lagB, lag)
			}
		}
		check("n0", 5, 0, 0)
		check("n1", 2, 3, 30*time.Second)
		check("n2", 0, 5, 50*time.Second)
	})
}

func TestGarbageCollection(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const P = 2
		objs, err := objstore.OpenLocal(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		e := startEnv(t, b.dsn(t), P, func(o *Options) { o.Objects = objs })
		ctx := context.Background()
		c := e.client
		for i, z := range []string{"a", "b", "c"} {
			if err := c.RegisterNode(ctx, Node{fmt.Sprintf("n%d", i), fmt.Sprintf("127.0.0.1:%d", 9300+i), z}); err != nil {
				t.Fatal(err)
			}
		}
		kinds := []string{batch.KindDelta, batch.KindDelta, batch.KindSnapshot, batch.KindDelta, batch.KindSnapshot, batch.KindDelta}
		var ids []string
		for i, k := range kinds {
			id := fmt.Sprintf("gc-%d", i+1)
			ids = append(ids, id)
			putObject(t, objs, batch.Prefix(0, id)+"000001.sst")
			putObject(t, objs, batch.ManifestKey(0, id))
			if seq, err := c.RegisterBatch(ctx, manifest(id, 0, P, k)); err != nil || seq != int64(i+1) {
				t.Fatalf("register %s: seq %d, %v", id, seq, err)
			}
		}
		// A batch of another partition under a prefix that shares digits
		// must survive.
		putObject(t, objs, batch.Prefix(1, "gc-1")+"000001.sst")
		gc := func() GCStats {
			st, err := e.srv.CollectGarbage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return st
		}
		live := func() []int64 {
			list, err := c.ListBatches(ctx, 0, 0, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			var seqs []int64
			for _, be := range list {
				seqs = append(seqs, be.Seq)
			}
			return seqs
		}
		// Nobody applied the snapshot: nothing goes.
		if st := gc(); st.Marked != 0 || st.Deleted != 0 {
			t.Fatalf("gc before progress: %+v", st)
		}
		// Two replicas passed snapshot 3, one is still at 2: nothing goes.
		c.ReportApplied(ctx, "n0", 0, 6)
		c.ReportApplied(ctx, "n1", 0, 4)
		c.ReportApplied(ctx, "n2", 0, 2)
		if st := gc(); st.Marked != 0 {
			t.Fatalf("gc with a replica at seq 2: %+v", st)
		}
		// The last one applies the snapshot: batches 1 and 2 go.
		if err := c.ReportApplied(ctx, "n2", 0, 3); err != nil {
			t.Fatal(err)
		}
		if st := gc(); st.Marked != 2 || st.Deleted != 2 || st.Objects != 4 {
			t.Fatalf("gc after all applied snapshot 3: %+v", st)
		}
		for i, id := range ids {
			gone := i < 2
			for _, k := range []string{batch.Prefix(0, id) + "000001.sst", batch.ManifestKey(0, id)} {
				if objectExists(t, objs, k) == gone {
					t.Fatalf("%s: exists=%v after gc", k, !gone)
				}
			}
		}
		if !objectExists(t, objs, batch.Prefix(1, "gc-1")+"000001.sst") {
			t.Fatal("gc deleted another partition's object")
		}
		if got := live(); !slices.Equal(got, []int64{3, 4, 5, 6}) {
			t.Fatalf("live after gc: %v", got)
		}
		// A replica behind the floor starts from the snapshot.
		list, err := c.ListBatches(ctx, 0, 1, 0, 0)
		if err != nil || len(list) == 0 || list[0].Seq != 3 || list[0].Manifest.Kind != batch.KindSnapshot {
			t.Fatalf("list after seq 1: %v %v", list, err)
		}
		// A collected id keeps its seq.
		if seq, err := c.RegisterBatch(ctx, manifest("gc-1", 0, P, batch.KindDelta)); err != nil || seq != 1 {
			t.Fatalf("re-register collected batch: seq %d, %v", seq, err)
		}
		// Again: idempotent.
		if st := gc(); st.Marked != 0 || st.Deleted != 0 {
			t.Fatalf("second gc: %+v", st)
		}
		// A newly assigned replica (applied 0) blocks further collection
		// even though every other replica applied snapshot 5.
		c.ReportApplied(ctx, "n1", 0, 6)
		c.ReportApplied(ctx, "n2", 0, 6)
		// Pick a newcomer id that the assignment puts on partition 0.
		fresh := ""
		for i := 0; fresh == ""; i++ {
			id := fmt.Sprintf("fresh-%d", i)
			a := Assign(P, []Candidate{{"n0", "a"}, {"n1", "b"}, {"n2", "c"}, {id, "d"}}, 3)
			if slices.Contains(a[0], id) {
				fresh = id
			}
		}
		if err := c.RegisterNode(ctx, Node{fresh, "127.0.0.1:9309", "d"}); err != nil {
			t.Fatal(err)
		}
		r, _ := c.GetRouting(ctx)
		if !slices.Contains(replicaIDs(r.Replicas[0]), fresh) {
			t.Fatalf("%s not routed on partition 0: %v", fresh, replicaIDs(r.Replicas[0]))
		}
		if st := gc(); st.Marked != 0 {
			t.Fatalf("gc with a fresh replica assigned: %+v", st)
		}
		// It starts from the oldest live batch, snapshot 3.
		if list, _ := c.ListBatches(ctx, 0, 0, 1, 0); len(list) != 1 || list[0].Seq != 3 {
			t.Fatalf("fresh replica's first batch: %v", list)
		}
		if err := c.ReportApplied(ctx, fresh, 0, 5); err != nil {
			t.Fatal(err)
		}
		if st := gc(); st.Marked != 2 || st.Deleted != 2 {
			t.Fatalf("gc through snapshot 5: %+v", st)
		}
		if got := live(); !slices.Equal(got, []int64{5, 6}) {
			t.Fatalf("live after second gc: %v", got)
		}
	})
}

func TestPartitionCountRecorded(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		dsn := b.dsn(t)
		ctx := context.Background()
		if _, err := OpenStore(ctx, dsn, nil); !errors.Is(err, ErrInvalid) {
			t.Fatalf("fresh database without P: %v", err)
		}
		st := openStore(t, dsn, 16)
		st.Close()
		if _, err := OpenStore(ctx, dsn, &StoreOptions{Partitions: 32}); !errors.Is(err, ErrPartitions) {
			t.Fatalf("reopen with another P: %v", err)
		} else {
			t.Log(err)
		}
		st = openStore(t, dsn, 0)
		defer st.Close()
		if st.Partitions() != 16 {
			t.Fatalf("recorded P: %d", st.Partitions())
		}
		// Migrations are recorded and not re-run.
		var n int
		if err := st.db.QueryRow(`SELECT COUNT(*) FROM schema_migrations`).Scan(&n); err != nil || n != len(migrations) {
			t.Fatalf("schema_migrations rows %d, %v", n, err)
		}
		// A database migrated by a newer binary is refused.
		if _, err := st.db.Exec(st.q(`INSERT INTO schema_migrations (version, name, applied_at_ms) VALUES (?, 'future', 0)`), SchemaVersion+1); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenStore(ctx, dsn, nil); err == nil || !strings.Contains(err.Error(), "newer than this binary") {
			t.Fatalf("newer schema: %v", err)
		}
	})
}

func TestUnreachableAtStart(t *testing.T) {
	ctx := context.Background()
	_, err := OpenStore(ctx, "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2", &StoreOptions{Partitions: 4})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("unreachable postgres: %v", err)
	}
	t.Log(err)
	_, err = OpenStore(ctx, "sqlite:/proc/nonexistent/dir/control.db", &StoreOptions{Partitions: 4})
	if err == nil {
		t.Fatal("sqlite in an impossible directory: no error")
	}
	t.Log(err)
	if _, err := OpenStore(ctx, "mysql://x", nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("unknown scheme: %v", err)
	}
}

// Heartbeats lost while the store was unreachable do not count as missed:
// once it is back, node ages count from the last failure, so a PostgreSQL
// outage longer than DownAfter does not mark every node down (and fail
// every read) when it ends; a node that stays silent after it is still
// marked down DownAfter later.
func TestStoreOutageDoesNotMarkNodesDown(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
		e := startEnv(t, b.dsn(t), 4, func(o *Options) {
			o.Now = clock.Now
			o.DownAfter = 10 * time.Second
			o.ReassignAfter = time.Minute
		})
		ctx := context.Background()
		for _, n := range []Node{{"n1", "127.0.0.1:9001", "a"}, {"n2", "127.0.0.1:9002", "b"}} {
			if err := e.client.RegisterNode(ctx, n); err != nil {
				t.Fatal(err)
			}
		}
		states := func() map[string]string {
			t.Helper()
			if _, err := e.srv.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			ns, err := e.client.ListNodes(ctx)
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]string{}
			for _, n := range ns {
				out[n.ID] = n.State
			}
			return out
		}
		// 30 s of outage: every heartbeat (and reconcile) fails meanwhile.
		for i := 0; i < 6; i++ {
			clock.Add(5 * time.Second)
			e.srv.noteStoreFailure()
		}
		if st := states(); st["n1"] != StateUp || st["n2"] != StateUp {
			t.Fatalf("right after a 30 s store outage (DownAfter 10 s): %v, want both up", st)
		}
		// n2 heartbeats again, n1 stays silent.
		for i := 0; i < 3; i++ {
			clock.Add(5 * time.Second)
			if err := e.client.Heartbeat(ctx, "n2"); err != nil {
				t.Fatal(err)
			}
		}
		if st := states(); st["n1"] != StateDown || st["n2"] != StateUp {
			t.Fatalf("15 s after the outage, n1 silent: %v, want n1 down, n2 up", st)
		}
	})
}
