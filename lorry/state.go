package lorry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/pillarkit/pillar/pillar"
)

// Store attributes Lorry owns. Nothing else writes them, so a Lorry commit
// never conflicts with a backfill or a publish.
const (
	// AttrStoreID holds a random id, set once, that makes batch ids unique
	// across stores sharing an object store and control plane.
	AttrStoreID = "lorry/store-id"
	// AttrPartitionPrefix + "p00007" holds partition 7's PartitionState.
	AttrPartitionPrefix = "lorry/partition/"
	// AttrWorkerPrefix + worker id holds a live worker's WorkerState.
	AttrWorkerPrefix = "lorry/worker/"
)

// PartitionAttr returns the attribute holding partition p's state.
func PartitionAttr(p int) string { return fmt.Sprintf("%sp%05d", AttrPartitionPrefix, p) }

// PartitionState is a partition's delivery position and lease, one JSON
// attribute per partition. Every change is a compare-and-swap: the writer
// reads it in its transaction, checks Owner and Token, and Commit fails with
// pillar.ErrConflict if anyone changed it meanwhile.
type PartitionState struct {
	// Offset is the next queue offset to deliver: every record below it is in
	// a registered batch. It only moves forward, and only after registration.
	Offset int64 `json:"offset"`
	// Batch and Seq name the last committed batch and its control-plane
	// sequence number.
	Batch string `json:"batch,omitempty"`
	Seq   int64  `json:"seq,omitempty"`
	// Pending is the batch being delivered, recorded before its upload: a
	// worker that takes the partition over delivers exactly this batch first,
	// so no two batches ever cover the same offsets.
	Pending *Pending `json:"pending,omitempty"`
	// FreshPending is the fresh lane's batch being delivered (LaneFresh),
	// recorded like Pending: the fresh lane has a slot of its own, so a
	// fresh batch is built, uploaded and registered while an ordinary
	// batch is in flight. A worker that takes the partition over delivers
	// it first, then Pending.
	FreshPending *Pending `json:"fresh_pending,omitempty"`
	// Owner is the worker holding the lease ("" when free), ExpiresMS when it
	// lapses (unix milliseconds). Token increases at every acquisition, so a
	// worker that lost the lease cannot commit even under the same id.
	Owner     string `json:"owner,omitempty"`
	Token     int64  `json:"token"`
	ExpiresMS int64  `json:"expires_ms,omitempty"`
	// Delivered counts the records committed so far; UpdatedMS is the time
	// of the last change.
	Delivered int64 `json:"delivered"`
	UpdatedMS int64 `json:"updated_ms,omitempty"`

	// Fresh, when above Offset, is the fresh lane's position: every fresh
	// record below it is in a registered batch as well (0: Offset).
	Fresh int64 `json:"fresh,omitempty"`
	// Replay is a replay an operator asked for (`pillar lorry replay`) and
	// the holder has not started yet; Replays counts those delivered.
	Replay  *ReplayRequest `json:"replay,omitempty"`
	Replays int64          `json:"replays,omitempty"`
	ReplayN int64          `json:"replay_n,omitempty"` // requests made so far
}

// FreshOffset is the fresh lane's position: every fresh record below it is
// in a registered batch.
func (s PartitionState) FreshOffset() int64 { return max(s.Offset, s.Fresh) }

// Batch lanes (Pending.Lane).
const (
	// LaneOrdinary ("") covers every record of [First, Last] except the
	// fresh ones below the fresh position (delivered already) and the bulk
	// ones a later delivered fresh record of the same key supersedes. Its
	// commit moves Offset (and Fresh, if behind) to Last+1.
	LaneOrdinary = ""
	// LaneFresh covers the fresh records of [First, Last], First being the
	// fresh position; its commit moves Fresh to Last+1.
	LaneFresh = "fresh"
	// LaneReplay re-delivers, for every key with a record in [First, Last],
	// the newest record of that key delivered so far; it moves no offset.
	LaneReplay = "replay"
)

// slot returns where a batch of pend's lane is recorded while in flight:
// FreshPending for the fresh lane, Pending for the others.
func (s *PartitionState) slot(lane string) **Pending {
	if lane == LaneFresh {
		return &s.FreshPending
	}
	return &s.Pending
}

// Pending is a batch whose offsets are fixed but which is not committed yet.
type Pending struct {
	ID    string `json:"id"`
	First int64  `json:"first"`
	Last  int64  `json:"last"` // inclusive
	// Lane says which records of [First, Last] the batch holds and what its
	// commit moves (LaneOrdinary, LaneFresh, LaneReplay).
	Lane string `json:"lane,omitempty"`
	// FreshLast, on an ordinary batch, adds the fresh records from the
	// fresh position (or Last+1) to FreshLast: fresh records that were
	// waiting ride along with the bulk batch, and its commit moves the
	// fresh position past them.
	FreshLast int64 `json:"fresh_last,omitempty"`
}

// ReplayRequest asks the partition's holder to re-deliver [From, To].
type ReplayRequest struct {
	From int64 `json:"from"`
	To   int64 `json:"to"` // inclusive
	// N numbers the request (Replays+1 when it was made): the batch id
	// includes it, so a second replay of one range is delivered again while
	// a retried delivery of one request registers the same batch.
	N    int64 `json:"n"`
	AtMS int64 `json:"at_ms"`
}

// applyCommit returns the state after pend, holding n records and
// registered as seq (0: unknown), is committed.
func applyCommit(st PartitionState, pend Pending, seq, n int64) PartitionState {
	switch pend.Lane {
	case LaneFresh:
		if f := max(st.FreshOffset(), pend.Last+1); f > st.Offset {
			st.Fresh = f
		}
		st.FreshPending = nil
	case LaneReplay:
		st.Replays++
		n = 0
	default:
		f := max(st.FreshOffset(), pend.Last+1, pend.FreshLast+1)
		st.Offset = pend.Last + 1
		st.Fresh = 0
		if f > st.Offset {
			st.Fresh = f
		}
	}
	if pend.Lane != LaneFresh {
		st.Pending = nil
	}
	st.Batch = pend.ID
	st.Seq = max(st.Seq, seq)
	st.Delivered += n
	return st
}

// WorkerState is a live worker's heartbeat, used to divide partitions fairly.
type WorkerState struct {
	ExpiresMS int64 `json:"expires_ms"`
	StartedMS int64 `json:"started_ms"`
	Owned     int   `json:"owned"`
	// Lost is the worker's loss counter and Latency its recent delivery
	// latencies by priority, as of the heartbeat (`pillar lorry status`
	// shows them).
	Lost    int64                     `json:"lost"`
	AtMS    int64                     `json:"at_ms"` // when this report was written
	Latency map[string]LatencySummary `json:"latency,omitempty"`
}

// BatchID returns the id of the batch of partition p holding queue offsets
// [first, last] of the store with the given Lorry store id. The same range
// always gets the same id, so a retried delivery registers the same batch.
func BatchID(storeID string, p int, first, last int64) string {
	return fmt.Sprintf("lorry-%s-p%05d-%d-%d", storeID, p, first, last)
}

// CombinedBatchID names an ordinary batch of [first, last] with the fresh
// records up to freshLast riding along.
func CombinedBatchID(storeID string, p int, first, last, freshLast int64) string {
	return fmt.Sprintf("%s-f%d", BatchID(storeID, p, first, last), freshLast)
}

// FreshBatchID names a fresh-lane batch: the fresh records of [first, last].
func FreshBatchID(storeID string, p int, first, last int64) string {
	return fmt.Sprintf("lorry-%s-p%05d-f%d-%d", storeID, p, first, last)
}

// ReplayBatchID names the n-th replay of partition p, of [first, last].
func ReplayBatchID(storeID string, p int, first, last, n int64) string {
	return fmt.Sprintf("lorry-%s-p%05d-r%d-%d-%d", storeID, p, n, first, last)
}

// ErrLeaseLost: the partition's state no longer names this worker and lease
// token: another worker took the partition over (this one was too slow to
// renew). Drain returns it when a partition was lost midway; Run just drops
// the partition.
var ErrLeaseLost = errors.New("lorry: lease lost")

// readPartition reads partition p's state from a snapshot; a missing
// attribute is the zero state.
func readPartition(ctx context.Context, sn pillar.Snapshot, p int) (PartitionState, error) {
	var st PartitionState
	err := sn.Attr(ctx, PartitionAttr(p), &st)
	if errors.Is(err, pillar.ErrNotFound) {
		return PartitionState{}, nil
	}
	if err != nil {
		return st, fmt.Errorf("lorry: partition %d: read state: %w", p, err)
	}
	return st, nil
}

// storeID returns the store's Lorry id, creating it on first use.
func storeID(ctx context.Context, st pillar.Store) (string, error) {
	for attempt := 0; ; attempt++ {
		sn, err := st.Snapshot(ctx)
		if err != nil {
			return "", fmt.Errorf("lorry: store id: %w", err)
		}
		var id string
		err = sn.Attr(ctx, AttrStoreID, &id)
		sn.Release()
		if err == nil && id != "" {
			return id, nil
		}
		if err != nil && !errors.Is(err, pillar.ErrNotFound) {
			return "", fmt.Errorf("lorry: store id: %w", err)
		}
		tx, err := st.Begin(ctx)
		if err != nil {
			return "", fmt.Errorf("lorry: store id: %w", err)
		}
		if err := tx.Attr(ctx, AttrStoreID, &id); err == nil && id != "" {
			tx.Abort()
			return id, nil
		}
		var b [4]byte
		_, _ = rand.Read(b[:])
		id = hex.EncodeToString(b[:])
		if err := tx.SetAttr(ctx, AttrStoreID, id); err != nil {
			tx.Abort()
			return "", fmt.Errorf("lorry: store id: %w", err)
		}
		err = tx.Commit(ctx)
		if err == nil {
			return id, nil
		}
		if !errors.Is(err, pillar.ErrConflict) || attempt > 5 {
			return "", fmt.Errorf("lorry: store id: %w", err)
		}
		// Another worker set it meanwhile: read theirs.
	}
}

// update changes partition p's state in one transaction: fn gets the current
// state and returns the new one (or an error, which aborts). It returns the
// committed state.
func update(ctx context.Context, st pillar.Store, p int, fn func(cur PartitionState) (PartitionState, error)) (PartitionState, error) {
	tx, err := st.Begin(ctx)
	if err != nil {
		return PartitionState{}, fmt.Errorf("lorry: partition %d: begin: %w", p, err)
	}
	defer tx.Abort()
	cur, err := readPartition(ctx, tx, p)
	if err != nil {
		return cur, err
	}
	next, err := fn(cur)
	if err != nil {
		return cur, err
	}
	if err := tx.SetAttr(ctx, PartitionAttr(p), next); err != nil {
		return cur, fmt.Errorf("lorry: partition %d: %w", p, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return cur, fmt.Errorf("lorry: partition %d: commit state: %w", p, err)
	}
	return next, nil
}

// partitionOfAttr parses "lorry/partition/p00007".
func partitionOfAttr(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, AttrPartitionPrefix+"p")
	if !ok {
		return 0, false
	}
	var p int
	if _, err := fmt.Sscanf(rest, "%d", &p); err != nil || fmt.Sprintf("%05d", p) != rest {
		return 0, false
	}
	return p, true
}
