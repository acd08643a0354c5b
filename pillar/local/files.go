package local

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/pillarkit/pillar/pillar"
)

// TableFiles returns the absolute paths of the Parquet files that hold the
// table in this snapshot, in read order. Each is a plain Parquet file, so an
// outside reader (DuckDB's read_parquet([...]), pyarrow) given exactly this
// list sees the rows of this generation and no others; a file of a table
// is never rewritten. The files stay while a snapshot or lease holds the
// generation; after that, a later commit's cleanup may remove them.
func (sn *snapshot) TableFiles(ctx context.Context, name string) ([]string, error) {
	if ls := pillar.LayersOf(sn, name); ls != nil {
		return nil, fmt.Errorf("local store %s: table %q has %d delta layers: its rows are the merge of several files, not their union; run `pillar compact --store %s --table %s` first",
			sn.s.dir, name, pillar.Deltas(ls), sn.s.dir, name)
	}
	t, ok := sn.m.Tables[name]
	if !ok {
		return nil, fmt.Errorf("local store %s: table %q: %w", sn.s.dir, name, pillar.ErrNotFound)
	}
	dir, err := filepath.Abs(filepath.Join(sn.s.dir, "data"))
	if err != nil {
		return nil, err
	}
	out := make([]string, len(t.Files))
	for i, f := range t.Files {
		out[i] = filepath.Join(dir, f.Name)
	}
	return out, nil
}
