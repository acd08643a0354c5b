package lorry

import (
	"context"
	"time"

	"github.com/pillarkit/pillar/pillar"
)

// Shared snapshots. Every held partition polls its queue; on a store where a
// snapshot costs a round trip (YTsaurus: a transaction), one snapshot per
// partition per poll would multiply that by the partition count. Loops
// therefore share a snapshot for PollInterval/2; it is released when it has
// been replaced and its last user is done.

type sharedSnap struct {
	sn       pillar.Snapshot
	at       time.Time
	refs     int
	replaced bool
}

// snapshot returns a snapshot of the store and the function that releases
// it. Unless fresh, it may share one taken up to PollInterval/2 ago.
func (w *Worker) snapshot(ctx context.Context, fresh bool) (pillar.Snapshot, func(), error) {
	now := w.now()
	if !fresh {
		w.snapMu.Lock()
		if s := w.snap; s != nil && now.Sub(s.at) < w.o.PollInterval/2 {
			s.refs++
			w.snapMu.Unlock()
			return s.sn, func() { w.unref(s) }, nil
		}
		w.snapMu.Unlock()
	}
	sn, err := w.o.Store.Snapshot(ctx)
	if err != nil {
		return nil, nil, err
	}
	s := &sharedSnap{sn: sn, at: now, refs: 1}
	w.snapMu.Lock()
	if old := w.snap; old == nil || !old.at.After(now) {
		if old != nil {
			old.replaced = true
			if old.refs == 0 {
				old.sn.Release()
			}
		}
		w.snap = s
	} else {
		s.replaced = true // a newer one is shared already
	}
	w.snapMu.Unlock()
	return sn, func() { w.unref(s) }, nil
}

func (w *Worker) unref(s *sharedSnap) {
	w.snapMu.Lock()
	defer w.snapMu.Unlock()
	s.refs--
	if s.refs == 0 && s.replaced {
		s.sn.Release()
	}
}

// dropSnapshot releases the shared snapshot once its users are done (at
// the end of Run and Drain).
func (w *Worker) dropSnapshot() {
	w.snapMu.Lock()
	defer w.snapMu.Unlock()
	if s := w.snap; s != nil {
		s.replaced = true
		if s.refs == 0 {
			s.sn.Release()
		}
		w.snap = nil
	}
}
