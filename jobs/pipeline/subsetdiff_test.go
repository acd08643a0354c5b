package pipeline

import (
	"context"

	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/subsets"
)

// Test helpers that collect whole tables: small test subsets only (the
// production code streams, see EachSubsetChange).

// SubsetDiff collects EachSubsetChange.
func SubsetDiff(ctx context.Context, sn pillar.Snapshot, name string) (*SubsetMeta, []subsets.Change, error) {
	var out []subsets.Change
	meta, err := EachSubsetChange(ctx, sn, name, func(c subsets.Change) error {
		out = append(out, c)
		return nil
	})
	return meta, out, err
}

func readMembers(ctx context.Context, sn pillar.Snapshot, table string) ([]pillar.SubsetMember, error) {
	var out []pillar.SubsetMember
	err := eachRow(ctx, sn, table, true, func(m *pillar.SubsetMember) error {
		out = append(out, *m)
		return nil
	})
	return out, err
}
