package lorry

import (
	"context"
	"errors"
	"fmt"

	"github.com/pillarkit/pillar/pillar"
)

// Group commit. Every partition loop changes its state attribute twice per
// batch; on a store where a commit costs a few fsyncs, one transaction per
// change would make the store's commit lock the bottleneck as partitions
// grow. The committer goroutine takes every request queued while the
// previous commit ran and applies them all in one transaction. Requests
// touch distinct attributes (each partition loop has at most one in flight),
// so a group conflicts only when another worker changed one of them; then
// each request is retried in a transaction of its own, and only the one
// whose partition moved fails.

type casReq struct {
	ctx  context.Context
	p    int
	fn   func(cur PartitionState) (PartitionState, error)
	done chan casRes
}

type casRes struct {
	st  PartitionState
	err error
}

// maxGroup bounds the requests one transaction carries.
const maxGroup = 256

// startCommitter runs the group committer until stop is called (after every
// partition loop has ended).
func (w *Worker) startCommitter() (stop func()) {
	w.casCh = make(chan casReq)
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			var first casReq
			select {
			case first = <-w.casCh:
			case <-quit:
				return
			}
			group := []casReq{first}
		more:
			for len(group) < maxGroup {
				select {
				case r := <-w.casCh:
					group = append(group, r)
				default:
					break more
				}
			}
			w.commitGroup(group)
		}
	}()
	return func() { close(quit); <-done }
}

// cas applies fn to partition p's state through the group committer (or
// directly when none runs) and returns the committed state. An error from fn
// aborts that request only; it is returned together with the state fn saw.
func (w *Worker) cas(ctx context.Context, p int, fn func(cur PartitionState) (PartitionState, error)) (PartitionState, error) {
	if w.casCh == nil {
		return update(ctx, w.o.Store, p, fn)
	}
	req := casReq{ctx: ctx, p: p, fn: fn, done: make(chan casRes, 1)}
	select {
	case w.casCh <- req:
	case <-ctx.Done():
		return PartitionState{}, ctx.Err()
	}
	res := <-req.done
	return res.st, res.err
}

func (w *Worker) commitGroup(group []casReq) {
	if len(group) == 1 {
		r := group[0]
		st, err := update(r.ctx, w.o.Store, r.p, r.fn)
		r.done <- casRes{st, err}
		return
	}
	ctx := context.WithoutCancel(group[0].ctx)
	results := make([]casRes, len(group))
	written := make([]bool, len(group))
	err := func() error {
		tx, err := w.o.Store.Begin(ctx)
		if err != nil {
			return fmt.Errorf("lorry: group commit: begin: %w", err)
		}
		defer tx.Abort()
		wrote := false
		for i, r := range group {
			if err := r.ctx.Err(); err != nil {
				results[i].err = err
				continue
			}
			cur, err := readPartition(ctx, tx, r.p)
			if err != nil {
				results[i] = casRes{cur, err}
				continue
			}
			next, err := r.fn(cur)
			if err != nil {
				results[i] = casRes{cur, err}
				continue
			}
			if err := tx.SetAttr(ctx, PartitionAttr(r.p), next); err != nil {
				results[i] = casRes{cur, fmt.Errorf("lorry: partition %d: %w", r.p, err)}
				continue
			}
			results[i], written[i], wrote = casRes{st: next}, true, true
		}
		if !wrote {
			return nil
		}
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("lorry: group commit of %d partitions: %w", len(group), err)
		}
		return nil
	}()
	if errors.Is(err, pillar.ErrConflict) {
		// Someone else changed one of them: each on its own.
		for _, r := range group {
			st, err := update(r.ctx, w.o.Store, r.p, r.fn)
			r.done <- casRes{st, err}
		}
		return
	}
	for i, r := range group {
		if err != nil && written[i] {
			results[i] = casRes{err: fmt.Errorf("lorry: partition %d: %w", r.p, err)}
		}
		r.done <- results[i]
	}
}
