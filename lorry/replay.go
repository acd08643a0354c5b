package lorry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pillarkit/pillar/pillar"
)

// ErrReplayBusy: the partition already has a replay waiting to start.
var ErrReplayBusy = errors.New("lorry: a replay of this partition is already waiting")

// RequestReplay asks partition p's holder to re-deliver queue offsets
// [from, to], which must be delivered already (to below the committed
// offset). The holder delivers, after its batch in flight, one batch
// holding for each key with a record in the range the newest record of the
// key delivered so far: replicas end up serving exactly what they served,
// so a replay is idempotent in effect and can be repeated. It returns the
// request; Replays in the partition's state reaches its N once delivered
// (WaitReplay). A worker must hold or take the partition for it to run
// (`pillar lorry replay` runs one for the partition when none does).
func RequestReplay(ctx context.Context, st pillar.Store, p int, from, to int64, now time.Time) (ReplayRequest, error) {
	var req ReplayRequest
	if P := st.Info().Partitions; p < 0 || p >= P {
		return req, fmt.Errorf("lorry: replay: partition %d out of range [0,%d)", p, P)
	}
	if from < 0 || to < from {
		return req, fmt.Errorf("lorry: replay: partition %d: [%d,%d] is not a range of offsets", p, from, to)
	}
	for attempt := 0; ; attempt++ {
		_, err := update(ctx, st, p, func(cur PartitionState) (PartitionState, error) {
			if to >= cur.Offset {
				return cur, fmt.Errorf("lorry: replay: partition %d: offset %d is not delivered yet (the committed offset is %d): Lorry delivers it anyway; replay up to %d at most",
					p, to, cur.Offset, cur.Offset-1)
			}
			if cur.Replay != nil {
				return cur, fmt.Errorf("lorry: replay: partition %d: request %d of [%d,%d] has not started yet: %w", p, cur.Replay.N, cur.Replay.From, cur.Replay.To, ErrReplayBusy)
			}
			cur.ReplayN++
			req = ReplayRequest{From: from, To: to, N: cur.ReplayN, AtMS: now.UnixMilli()}
			cur.Replay = &req
			return cur, nil
		})
		if errors.Is(err, pillar.ErrConflict) && attempt < 20 {
			continue // a worker committed meanwhile
		}
		return req, err
	}
}

// WaitReplay waits until partition p has delivered replay request n (or
// ctx ends), polling every poll.
func WaitReplay(ctx context.Context, st pillar.Store, p int, n int64, poll time.Duration) error {
	for {
		sn, err := st.Snapshot(ctx)
		if err != nil {
			return err
		}
		ps, err := readPartition(ctx, sn, p)
		sn.Release()
		if err != nil {
			return err
		}
		if ps.Replays >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("lorry: replay %d of partition %d not delivered yet (state: replay %v, pending %v): %w", n, p, ps.Replay, ps.Pending, ctx.Err())
		case <-time.After(poll):
		}
	}
}
