package lorry

import (
	"context"
	"fmt"

	"github.com/pillarkit/pillar/pillar"
)

// UndeliveredBefore returns the partitions whose committed offset is below
// ends[p]: Lorry has not yet delivered every queue record older than those
// positions (a bulk export's queue ends, which its snapshots supersede: the
// control plane refuses such a snapshot until then). It reads only the
// partitions' Lorry state, not the queue.
func UndeliveredBefore(ctx context.Context, st pillar.Store, ends []int64) ([]int, error) {
	sn, err := st.Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("lorry: %w", err)
	}
	defer sn.Release()
	var out []int
	for p, end := range ends {
		ps, err := readPartition(ctx, sn, p)
		if err != nil {
			return nil, err
		}
		if ps.Offset < end {
			out = append(out, p)
		}
	}
	return out, nil
}
