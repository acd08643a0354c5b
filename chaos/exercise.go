package chaos

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/cobbled/router"
	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/lorry"
	"github.com/pillarkit/pillar/pillar"
)

// exercise runs the fault phase, waits for convergence and runs the checks.
func (r *run) exercise() error {
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	sched := Schedule(r.o.Seed, r.o.Duration, r.o.Faults, r.o.Nodes)
	r.sum.Schedule = sched
	r.say("system up (control %s, %d nodes, Lorry, versitygw); fault phase of %s, %d faults", r.ctlAddr, len(r.nodes), r.o.Duration, len(sched))

	var wg sync.WaitGroup
	superStop := make(chan struct{})
	wg.Add(1)
	go func() { defer wg.Done(); r.supervise(superStop) }()
	readStop := make(chan struct{})
	var rwg sync.WaitGroup
	rwg.Add(1)
	go func() { defer rwg.Done(); r.readRouter(ctx, readStop) }()
	for i, n := range r.nodes {
		rwg.Add(1)
		go func() { defer rwg.Done(); r.readDirect(ctx, readStop, n, uint64(i)) }()
	}
	writeStop := make(chan struct{})
	var wwg sync.WaitGroup
	var writeErr error
	wwg.Add(1)
	go func() { defer wwg.Done(); writeErr = r.write(ctx, writeStop) }()

	phaseStart := time.Now()
	faultErr := r.runFaults(ctx, sched, phaseStart)
	if d := r.o.Duration - time.Since(phaseStart); d > 0 && faultErr == nil {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
	close(writeStop)
	wwg.Wait()
	r.healAll()
	r.say("fault phase over: %d commits; waiting for convergence (at most %s)", r.sum.Ops.Commits, r.o.ConvergeTimeout)
	if faultErr != nil || writeErr != nil {
		close(readStop)
		rwg.Wait()
		close(superStop)
		wg.Wait()
		if faultErr != nil {
			return faultErr
		}
		return writeErr
	}
	r.hist.setPhase("converging")
	took, convErr := r.waitConverged(ctx)
	r.sum.Converge = took
	close(readStop)
	rwg.Wait()
	close(superStop)
	wg.Wait()
	if convErr != nil {
		r.sum.check(CheckConverged, []string{convErr.Error()}, 1)
		r.checkChain(ctx)
		r.sum.checkFromHistory(r.hist)
		return nil
	}
	r.say("converged %s after the faults stopped; checking", took.Round(time.Millisecond))
	r.checkFinal(ctx)
	r.sum.checkFromHistory(r.hist)
	r.checkChain(ctx)
	return nil
}

// write commits changes at the configured rate until stop, logging each
// committed op to committed.log.
func (r *run) write(ctx context.Context, stop <-chan struct{}) error {
	f, err := os.Create(filepath.Join(r.dir, "committed.log"))
	if err != nil {
		return err
	}
	defer f.Close()
	log := bufio.NewWriter(f)
	defer log.Flush()
	fmt.Fprintf(log, "# seq key op sha256 outcome (seed %d)\n", r.o.Seed)
	rng := rand.New(rand.NewPCG(uint64(r.o.Seed), 2))
	present := make([]bool, r.o.Keys)
	interval := time.Duration(float64(time.Second) / r.o.CommitsPerSecond)
	t := time.NewTicker(interval)
	defer t.Stop()
	var seq int64
	// one commits n changes at priority pri.
	one := func(pri string, n int) error {
		used := map[int]bool{}
		var ops []op
		var recs []pillar.ExportRecord
		lost := -1
		if r.o.Sabotage == SabotageLoseWrite {
			used[0] = true // key 0 only gets the lost write
			if seq == 0 {
				lost = 0
			}
		}
		for len(ops) < n {
			k := rng.IntN(r.o.Keys)
			if lost == 0 && len(ops) == 0 {
				k, used[0] = 0, false
			}
			if used[k] {
				continue
			}
			used[k] = true
			seq++
			o := op{seq: seq, key: k}
			rec := pillar.ExportRecord{Partition: int32(r.ks.keys[k].Partition(r.o.Partitions)), PageKey: r.ks.keys[k].String(),
				Cause: fmt.Sprintf("chaos seq %d", seq), Priority: pri}
			switch {
			case present[k] && rng.IntN(10) < 3:
				o.del, rec.Op = true, pillar.OpDelete
				r.sum.Ops.Deletes++
			default:
				if present[k] {
					r.sum.Ops.Updates++
				} else {
					r.sum.Ops.Adds++
				}
				v, err := r.ks.value(k, seq)
				if err != nil {
					return err
				}
				o.sum, rec.Op, rec.Value = sha256.Sum256(v), pillar.OpPut, v
			}
			ops = append(ops, o)
			recs = append(recs, rec)
		}
		if lost == 0 {
			recs = recs[1:] // logged, never enqueued
		}
		r.hist.prepare(ops)
		err := r.commit(ctx, recs)
		r.hist.settle(ops, r.o.Partitions, err == nil)
		outcome := "ok"
		if err != nil {
			outcome = "unknown"
			r.sum.Ops.WriteErrors++
			r.say("writer: commit: %v", err)
		} else {
			r.sum.Ops.Commits++
		}
		for _, o := range ops {
			what := "put"
			if o.del {
				what = "delete"
			}
			if err == nil {
				present[o.key] = !o.del
			}
			fmt.Fprintf(log, "%d %s %s %x %s\n", o.seq, r.ks.keys[o.key], what, o.sum, outcome)
		}
		return nil
	}
	for {
		burst := 0
		select {
		case <-stop:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case burst = <-r.burst:
		case <-t.C:
		}
		if burst > 0 {
			// A bulk backlog at once (a republish), for the kill-lorry
			// fault to land in.
			for done := 0; done < burst; {
				n := min(16, max(1, r.o.Keys/2), burst-done)
				if err := one(pillar.PriorityBulk, n); err != nil {
					return err
				}
				done += n
			}
			select {
			case r.burstDone <- struct{}{}:
			default:
			}
			continue
		}
		// One commit in three is bulk work (a republish, larger), the rest
		// fresh updates: Lorry's lanes deliver them out of queue order, and
		// a kill of Lorry lands mid-backlog with the other lane's traffic
		// still flowing (fresh only from the kill until its heal); the
		// checks hold per-key order to the history.
		n, pri := 1+rng.IntN(4), pillar.PriorityFresh
		if !r.freshOnly.Load() && rng.IntN(3) == 0 {
			pri, n = pillar.PriorityBulk, min(4+rng.IntN(12), max(1, r.o.Keys/2))
		}
		if r.freshOnly.Load() {
			r.freshDuringKill.Add(1)
		}
		if err := one(pri, n); err != nil {
			return err
		}
	}
}

func (r *run) commit(ctx context.Context, recs []pillar.ExportRecord) error {
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	tx, err := r.store.Begin(cctx)
	if err != nil {
		return err
	}
	if err := tx.Enqueue(cctx, recs...); err != nil {
		tx.Abort()
		return err
	}
	if err := tx.Commit(cctx); err != nil {
		tx.Abort()
		return err
	}
	return nil
}

func (r *run) randomKeys(rng *rand.Rand, n int) ([]int, [][]byte) {
	idx := make([]int, n)
	raw := make([][]byte, n)
	for i := range idx {
		idx[i] = rng.IntN(r.o.Keys)
		raw[i] = r.ks.keys[idx[i]][:]
	}
	return idx, raw
}

// readRouter reads random keys through the hedging router and checks every
// value (check 2).
func (r *run) readRouter(ctx context.Context, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(uint64(r.o.Seed), 3))
	for {
		select {
		case <-stop:
			return
		case <-time.After(20 * time.Millisecond):
		}
		idx, raw := r.randomKeys(rng, 8)
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		res, err := r.rt.BatchGet(cctx, raw)
		cancel()
		if err != nil {
			r.hist.countReadErr("router: request failed: "+readErrKind(err), err)
			continue
		}
		r.hist.countRead("router: ok")
		for i, x := range res {
			if x.Err != nil {
				r.hist.countReadErr("router: key failed: "+readErrKind(x.Err), x.Err)
				continue
			}
			r.hist.observe("", idx[i], x.Found, x.Value)
		}
	}
}

// readDirect reads random keys from one node directly (not through its
// proxy), one request at a time, checking values (check 2) and per-key
// versions (check 3).
func (r *run) readDirect(ctx context.Context, stop <-chan struct{}, n *node, salt uint64) {
	conn, err := grpc.NewClient(n.directAddr, append(servepb.DialOptions(0), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		r.hist.countRead("direct: dial: " + err.Error())
		return
	}
	defer conn.Close()
	cl := servepb.NewServeClient(conn)
	rng := rand.New(rand.NewPCG(uint64(r.o.Seed), 10+salt))
	for {
		select {
		case <-stop:
			return
		case <-time.After(20 * time.Millisecond):
		}
		idx, raw := r.randomKeys(rng, 8)
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		resp, err := cl.BatchGet(cctx, &servepb.BatchGetRequest{Keys: raw})
		cancel()
		if err != nil {
			r.hist.countReadErr("direct: request failed: "+readErrKind(err), err)
			continue
		}
		if len(resp.Results) != len(raw) {
			r.hist.countRead("direct: wrong result count")
			continue
		}
		r.hist.countRead("direct: ok")
		for i, x := range resp.Results {
			switch x.Status {
			case servepb.KeyStatus_KEY_OK:
				r.hist.observe(n.id, idx[i], x.Found, x.Value)
			default:
				r.hist.countRead("direct: key " + x.Status.String())
			}
		}
	}
}

// readErrKind classifies a read error: the router's sentinel, else the
// gRPC status code.
func readErrKind(err error) string {
	for _, e := range []error{router.ErrNoReplica, router.ErrUnavailable, router.ErrNotServed, router.ErrKeyError,
		router.ErrNoRouting, router.ErrClosed, context.DeadlineExceeded, context.Canceled} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	if s, ok := status.FromError(err); ok {
		return s.Code().String()
	}
	return "other"
}

// waitConverged waits until Lorry delivered every record and every replica
// applied its partition's newest batch.
func (r *run) waitConverged(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(r.o.ConvergeTimeout)
	var why string
	for time.Now().Before(deadline) {
		why = r.notConverged(ctx)
		if why == "" {
			return time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return 0, fmt.Errorf("not converged within %s: %s", r.o.ConvergeTimeout, why)
}

func (r *run) notConverged(ctx context.Context) string {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ls, err := lorry.Status(cctx, r.store, time.Now())
	if err != nil {
		return "lorry status: " + err.Error()
	}
	for _, s := range ls {
		if s.Depth > 0 || s.Pending != nil || s.FreshPending != nil {
			return fmt.Sprintf("partition %d: %d records undelivered", s.Partition, s.Depth)
		}
	}
	rt, err := r.client.GetRouting(cctx)
	if err != nil {
		return "routing: " + err.Error()
	}
	for p, reps := range rt.Replicas {
		if len(reps) < r.o.Nodes {
			return fmt.Sprintf("partition %d: %d replicas", p, len(reps))
		}
		for _, rep := range reps {
			if rep.State != control.StateUp {
				return fmt.Sprintf("partition %d: replica %s is %s", p, rep.NodeID, rep.State)
			}
			if rep.AppliedSeq < rt.NewestSeq[p] {
				return fmt.Sprintf("partition %d: replica %s at seq %d of %d", p, rep.NodeID, rep.AppliedSeq, rt.NewestSeq[p])
			}
		}
	}
	return ""
}
