package lorry

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/pillarkit/pillar/pillar"
)

// PartitionStatus is one partition's delivery as the store records it.
type PartitionStatus struct {
	Partition int `json:"partition"`
	// QueueEnd is the offset the next enqueued record gets; Committed is the
	// next offset to deliver (everything below it is delivered); FreshOffset
	// the fresh lane's position (every fresh record below it is delivered).
	QueueEnd    int64 `json:"queue_end"`
	Committed   int64 `json:"committed"`
	FreshOffset int64 `json:"fresh_offset"`
	// Depth is the number of undelivered records: FreshBacklog fresh ones
	// (at or above FreshOffset) plus BulkBacklog bulk ones (at or above
	// Committed; a bulk record a delivered fresh one supersedes counts
	// until the bulk lane passes it).
	Depth        int64 `json:"depth"`
	FreshBacklog int64 `json:"fresh_backlog"`
	BulkBacklog  int64 `json:"bulk_backlog"`
	// OldestAge is how long ago the oldest undelivered record was committed
	// to the store (zero when Depth is 0), also by priority.
	OldestAge      time.Duration `json:"-"`
	FreshOldestAge time.Duration `json:"-"`
	BulkOldestAge  time.Duration `json:"-"`
	OldestAgeMS    int64         `json:"oldest_age_ms"`
	FreshOldestMS  int64         `json:"fresh_oldest_age_ms"`
	BulkOldestMS   int64         `json:"bulk_oldest_age_ms"`
	// Batch and Seq name the last committed batch.
	Batch string `json:"batch,omitempty"`
	Seq   int64  `json:"seq"`
	// Pending is the batch being delivered, if any; Replay a replay asked
	// for and not started yet.
	Pending      *Pending       `json:"pending,omitempty"`
	FreshPending *Pending       `json:"fresh_pending,omitempty"`
	Replay       *ReplayRequest `json:"replay,omitempty"`
	Replays      int64          `json:"replays"`
	// Owner holds the lease until LeaseExpires (past: lapsed, any worker
	// may take it); "" when free.
	Owner          string    `json:"owner,omitempty"`
	LeaseExpires   time.Time `json:"-"`
	LeaseExpiresMS int64     `json:"lease_expires_ms,omitempty"`
	Delivered      int64     `json:"delivered"`
}

// WorkerStatus is a live worker's report, as of its last heartbeat.
type WorkerStatus struct {
	ID      string                    `json:"id"`
	Owned   int                       `json:"owned"`
	Lost    int64                     `json:"lost"`
	Latency map[string]LatencySummary `json:"latency,omitempty"`
	// HeartbeatAgeMS is how long ago the worker wrote its report.
	HeartbeatAgeMS int64 `json:"heartbeat_age_ms"`
}

// StatusReport is `pillar lorry status`: every partition, the live
// workers, and their totals.
type StatusReport struct {
	Partitions []PartitionStatus `json:"partitions"`
	Workers    []WorkerStatus    `json:"workers"`
	// Depth, FreshBacklog, BulkBacklog and OldestAgeMS sum (or take the
	// maximum) over the partitions; Lost sums the live workers' loss
	// counters.
	Depth         int64 `json:"depth"`
	FreshBacklog  int64 `json:"fresh_backlog"`
	BulkBacklog   int64 `json:"bulk_backlog"`
	OldestAgeMS   int64 `json:"oldest_age_ms"`
	FreshOldestMS int64 `json:"fresh_oldest_age_ms"`
	BulkOldestMS  int64 `json:"bulk_oldest_age_ms"`
	Lost          int64 `json:"lost"`
}

// Status reads every partition's queue position, backlog by priority and
// lease from a snapshot of the store (it reads the undelivered records'
// heads, not their values). It is read-only and safe to run beside workers.
func Status(ctx context.Context, st pillar.Store, now time.Time) ([]PartitionStatus, error) {
	sn, err := st.Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("lorry: status: %w", err)
	}
	defer sn.Release()
	return partitionStatus(ctx, sn, now, true)
}

// Positions is Status without the backlog: each partition's positions,
// pending batches, lease and queue end, read from Lorry's state and the
// queue's end alone (the backlog counts and ages, which read every
// undelivered record's head, stay zero). A caller that polls delivery
// progress uses it.
func Positions(ctx context.Context, st pillar.Store) ([]PartitionStatus, error) {
	sn, err := st.Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("lorry: positions: %w", err)
	}
	defer sn.Release()
	return partitionStatus(ctx, sn, time.Time{}, false)
}

func partitionStatus(ctx context.Context, sn pillar.Snapshot, now time.Time, backlog bool) ([]PartitionStatus, error) {
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
		s := PartitionStatus{Partition: p, QueueEnd: end, Committed: ps.Offset, FreshOffset: ps.FreshOffset(),
			Batch: ps.Batch, Seq: ps.Seq, Pending: ps.Pending, FreshPending: ps.FreshPending, Replay: ps.Replay, Replays: ps.Replays, Delivered: ps.Delivered}
		if ps.Owner != "" {
			s.Owner, s.LeaseExpires, s.LeaseExpiresMS = ps.Owner, time.UnixMilli(ps.ExpiresMS), ps.ExpiresMS
		}
		if !backlog {
			out = append(out, s)
			continue
		}
		var oldest [2]int64
		for next := ps.Offset; next < end; {
			hs, err := readHeads(ctx, sn, p, next, 4096)
			if err != nil {
				return nil, fmt.Errorf("lorry: status: partition %d: %w", p, err)
			}
			if len(hs) == 0 {
				break
			}
			for _, h := range hs {
				pr := prOf(&h)
				if pr == prFresh && h.Offset < s.FreshOffset {
					continue
				}
				if pr == prFresh {
					s.FreshBacklog++
				} else {
					s.BulkBacklog++
				}
				if oldest[pr] == 0 && h.CommittedAt > 0 {
					oldest[pr] = h.CommittedAt
				}
			}
			next = hs[len(hs)-1].Offset + 1
		}
		s.Depth = s.FreshBacklog + s.BulkBacklog
		age := func(at int64) time.Duration {
			if at == 0 {
				return 0
			}
			return max(0, now.Sub(time.UnixMilli(at)))
		}
		s.FreshOldestAge, s.BulkOldestAge = age(oldest[prFresh]), age(oldest[prBulk])
		s.OldestAge = max(s.FreshOldestAge, s.BulkOldestAge)
		s.OldestAgeMS, s.FreshOldestMS, s.BulkOldestMS = s.OldestAge.Milliseconds(), s.FreshOldestAge.Milliseconds(), s.BulkOldestAge.Milliseconds()
		out = append(out, s)
	}
	return out, nil
}

// readHeads reads queue heads from a snapshot, without values when the
// store can.
func readHeads(ctx context.Context, sn pillar.Snapshot, p int, from int64, limit int) ([]pillar.ExportRecord, error) {
	if hr, ok := sn.(pillar.QueueHeadReader); ok {
		return hr.ReadQueueHeads(ctx, p, from, limit)
	}
	recs, err := sn.ReadQueue(ctx, p, from, limit)
	for i := range recs {
		recs[i].Value = nil
	}
	return recs, err
}

// Report is Status plus the live workers' loss counters and latencies.
func Report(ctx context.Context, st pillar.Store, now time.Time) (*StatusReport, error) {
	sn, err := st.Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("lorry: status: %w", err)
	}
	defer sn.Release()
	parts, err := partitionStatus(ctx, sn, now, true)
	if err != nil {
		return nil, err
	}
	r := &StatusReport{Partitions: parts, Workers: []WorkerStatus{}}
	for _, s := range parts {
		r.Depth += s.Depth
		r.FreshBacklog += s.FreshBacklog
		r.BulkBacklog += s.BulkBacklog
		r.OldestAgeMS = max(r.OldestAgeMS, s.OldestAgeMS)
		r.FreshOldestMS = max(r.FreshOldestMS, s.FreshOldestMS)
		r.BulkOldestMS = max(r.BulkOldestMS, s.BulkOldestMS)
	}
	attrs, err := sn.Attrs(ctx)
	if err != nil {
		return nil, fmt.Errorf("lorry: status: %w", err)
	}
	for name, raw := range attrs {
		id, ok := strings.CutPrefix(name, AttrWorkerPrefix)
		if !ok {
			continue
		}
		var ws WorkerState
		if err := json.Unmarshal(raw, &ws); err != nil || ws.ExpiresMS <= now.UnixMilli() {
			continue
		}
		age := now.UnixMilli() - ws.AtMS
		r.Workers = append(r.Workers, WorkerStatus{ID: id, Owned: ws.Owned, Lost: ws.Lost, Latency: ws.Latency, HeartbeatAgeMS: max(0, age)})
		r.Lost += ws.Lost
	}
	sort.Slice(r.Workers, func(i, j int) bool { return r.Workers[i].ID < r.Workers[j].ID })
	return r, nil
}
