package lorry

import (
	"context"
	"fmt"
	"time"

	"github.com/pillarkit/pillar/pillar"
)

// PartitionStatus is one partition's delivery as the store records it.
type PartitionStatus struct {
	Partition int
	// QueueEnd is the offset the next enqueued record gets; Committed is the
	// next offset to deliver; Depth = QueueEnd - Committed.
	QueueEnd, Committed, Depth int64
	// OldestAge is how long ago the oldest undelivered record was committed
	// to the store (zero when Depth is 0).
	OldestAge time.Duration
	// Batch and Seq name the last committed batch.
	Batch string
	Seq   int64
	// Pending is the batch being delivered, if any.
	Pending *Pending
	// Owner holds the lease until LeaseExpires (past: lapsed, any worker
	// may take it); "" when free.
	Owner        string
	LeaseExpires time.Time
	Delivered    int64
}

// Status reads every partition's queue position and lease from a snapshot
// of the store. It is read-only and safe to run beside workers.
func Status(ctx context.Context, st pillar.Store, now time.Time) ([]PartitionStatus, error) {
	sn, err := st.Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("lorry: status: %w", err)
	}
	defer sn.Release()
	P := sn.Info().Partitions
	out := make([]PartitionStatus, 0, P)
	for p := 0; p < P; p++ {
		ps, err := readPartition(ctx, sn, p)
		if err != nil {
			return nil, err
		}
		end, err := sn.QueueEnd(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("lorry: status: %w", err)
		}
		s := PartitionStatus{Partition: p, QueueEnd: end, Committed: ps.Offset, Depth: max(0, end-ps.Offset),
			Batch: ps.Batch, Seq: ps.Seq, Pending: ps.Pending, Delivered: ps.Delivered}
		if ps.Owner != "" {
			s.Owner, s.LeaseExpires = ps.Owner, time.UnixMilli(ps.ExpiresMS)
		}
		if s.Depth > 0 {
			recs, err := sn.ReadQueue(ctx, p, ps.Offset, 1)
			if err != nil {
				return nil, fmt.Errorf("lorry: status: partition %d: %w", p, err)
			}
			if len(recs) > 0 && recs[0].CommittedAt > 0 {
				s.OldestAge = max(0, now.Sub(time.UnixMilli(recs[0].CommittedAt)))
			}
		}
		out = append(out, s)
	}
	return out, nil
}
