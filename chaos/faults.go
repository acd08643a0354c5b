package chaos

import (
	"context"
	"errors"
	"fmt"
	"github.com/pillarkit/pillar/lorry"
	"os"
	"syscall"
	"time"
)

// runFaults injects the schedule, each fault healed before the next starts.
func (r *run) runFaults(ctx context.Context, sched []Fault, start time.Time) error {
	for _, f := range sched {
		if d := time.Until(start.Add(f.At)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		heal, err := r.inject(f)
		if err != nil {
			r.sum.FaultsSkipped[f.Kind] = err.Error()
			r.say("fault %s on %s not injected: %v", f.Kind, f.Target, err)
			continue
		}
		r.sum.Faults[f.Kind]++
		r.hist.setPhase("during " + f.Kind)
		r.say("fault %s", f)
		select {
		case <-time.After(f.For):
		case <-ctx.Done():
		}
		if err := heal(); err != nil {
			return fmt.Errorf("heal %s on %s: %w", f.Kind, f.Target, err)
		}
		r.hist.setPhase("after " + f.Kind)
		r.say("healed %s on %s", f.Kind, f.Target)
	}
	return nil
}

func (r *run) node(id string) *node {
	for _, n := range r.nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

func (r *run) s3Targets(target string) []*S3Proxy {
	switch target {
	case "lorry":
		return []*S3Proxy{r.lorryS3}
	case "nodes", "all":
		var out []*S3Proxy
		for _, n := range r.nodes {
			out = append(out, n.s3)
		}
		if target == "all" {
			out = append(out, r.lorryS3)
		}
		return out
	}
	if n := r.node(target); n != nil {
		return []*S3Proxy{n.s3}
	}
	return nil
}

// restart starts p again and waits for it to listen.
func (r *run) restart(p *proc) error {
	if err := p.start(); err != nil {
		return err
	}
	if p.addr == "" {
		return nil
	}
	return p.waitListening(60 * time.Second)
}

// inject starts fault f and returns its heal function.
func (r *run) inject(f Fault) (func() error, error) {
	switch f.Kind {
	case FaultKillNode, FaultKillLorry, FaultKillControl:
		var p *proc
		switch f.Kind {
		case FaultKillLorry:
			p = r.lorry
		case FaultKillControl:
			p = r.control
		default:
			if n := r.node(f.Target); n != nil {
				p = n.proc
			}
		}
		if p == nil {
			return nil, fmt.Errorf("no process %q", f.Target)
		}
		if f.Kind == FaultKillLorry {
			return r.killLorryMidBacklog(p)
		}
		p.kill(true)
		return func() error { return r.restart(p) }, nil
	case FaultS3Error, FaultS3Slow, FaultS3Truncate, FaultS3BitFlip:
		mode := map[string]S3Mode{FaultS3Error: S3Error, FaultS3Slow: S3Slow, FaultS3Truncate: S3Truncate, FaultS3BitFlip: S3BitFlip}[f.Kind]
		ps := r.s3Targets(f.Target)
		if len(ps) == 0 {
			return nil, fmt.Errorf("no object-store path %q", f.Target)
		}
		for _, p := range ps {
			p.Set(mode, f.Frac, f.Delay)
		}
		return func() error {
			for _, p := range ps {
				p.Heal()
			}
			return nil
		}, nil
	case FaultPartition:
		n := r.node(f.Target)
		if n == nil {
			return nil, fmt.Errorf("no node %q", f.Target)
		}
		n.serve.Cut()
		n.ctl.Cut()
		n.s3.Set(S3Cut, 1, 0)
		return func() error {
			n.serve.Heal()
			n.ctl.Heal()
			n.s3.Heal()
			return nil
		}, nil
	case FaultCorruptObject:
		return r.injectCorruptObject(f)
	case FaultDiskFull:
		n := r.node(f.Target)
		if n == nil {
			return nil, fmt.Errorf("no node %q", f.Target)
		}
		if n.dataMount == "" {
			return nil, fmt.Errorf("no size-limited file system for %s: %v", n.id, n.mountErr)
		}
		filled, err := fillDisk(n.ballast)
		if err != nil {
			return nil, err
		}
		r.say("disk-full: %s: %d MiB of ballast, file system full", n.id, filled>>20)
		return func() error {
			if err := os.Remove(n.ballast); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			return nil
		}, nil
	}
	return nil, fmt.Errorf("unknown fault kind %q", f.Kind)
}

// fillDisk writes a ballast file until the file system is full.
func fillDisk(path string) (int64, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for {
		w, err := f.Write(buf)
		n += int64(w)
		if err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				// Fill the last partial block too.
				for _, sz := range []int{64 << 10, 4 << 10, 512} {
					for {
						w, err := f.Write(buf[:sz])
						n += int64(w)
						if err != nil {
							break
						}
					}
				}
				return n, nil
			}
			return n, err
		}
	}
}

// healAll ends every fault and makes sure every process runs.
func (r *run) healAll() {
	for _, n := range r.nodes {
		n.serve.Heal()
		n.ctl.Heal()
		n.s3.Heal()
		_ = os.Remove(n.ballast)
	}
	r.lorryS3.Heal()
	for _, p := range r.procs() {
		if !p.running() {
			if err := r.restart(p); err != nil {
				r.say("restart %s: %v", p.name, err)
			}
		}
	}
}

// killLorryMidBacklog is the kill-lorry fault: the writer queues a bulk
// backlog (a republish) and from then on writes fresh changes only; Lorry is
// killed (-9) while that backlog is undelivered, and restarted by the heal
// with the fresh traffic still flowing (it switches back to mixed traffic
// once Lorry runs again). The four checks then hold the result to the
// history: nothing lost, nothing applied twice or skipped, no replica went
// back (per-key order).
func (r *run) killLorryMidBacklog(p *proc) (func() error, error) {
	r.freshOnly.Store(true)
	before := r.freshDuringKill.Load()
	queued := false
	select {
	case r.burst <- 10 * max(16, r.o.Keys/4):
		select {
		case <-r.burstDone:
			queued = true
		case <-time.After(30 * time.Second):
		}
	case <-time.After(5 * time.Second): // the writer is not running
	}
	var bulk, fresh int64
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	if ls, err := lorry.Status(ctx, r.store, time.Now()); err == nil {
		for _, s := range ls {
			bulk, fresh = bulk+s.BulkBacklog, fresh+s.FreshBacklog
		}
	}
	cancel()
	p.kill(true)
	r.mu.Lock()
	r.sum.LorryKills = append(r.sum.LorryKills, LorryKill{BacklogQueued: queued, BulkUndelivered: bulk, FreshUndelivered: fresh})
	i := len(r.sum.LorryKills) - 1
	r.mu.Unlock()
	return func() error {
		err := r.restart(p)
		r.freshOnly.Store(false)
		r.mu.Lock()
		r.sum.LorryKills[i].FreshCommitsWhileDown = r.freshDuringKill.Load() - before
		r.mu.Unlock()
		return err
	}, nil
}
