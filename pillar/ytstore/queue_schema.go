package ytstore

import (
	"context"
	"fmt"

	"go.ytsaurus.tech/yt/go/schema"
	"go.ytsaurus.tech/yt/go/yt"
)

// ensureQueueSchema makes partition p's queue table hold every column of
// the current ExportRecord schema before records are appended to it. A
// queue created before a column existed (priority, publication) has a
// strict schema without it, which refuses rows naming it; the missing
// columns are appended with alter_table (optional columns, as YTsaurus
// allows on a non-empty static table: the rows written before read them as
// "", which Lorry takes as a fresh record of the legacy publication).
// alter_table runs outside the commit's transaction; it only adds columns,
// so running it twice, or beside another writer's, is harmless. Checked
// once per partition per Store.
func (s *Store) ensureQueueSchema(ctx context.Context, p int) error {
	if _, ok := s.queueSchemaOK.Load(p); ok {
		return nil
	}
	path := queuePath(s.root, p)
	var have schema.Schema
	if err := s.yc.GetNode(ctx, path.Attr("schema"), &have, nil); err != nil {
		return fmt.Errorf("export queue partition %d: read schema: %w", p, err)
	}
	names := map[string]bool{}
	for _, c := range have.Columns {
		names[c.Name] = true
	}
	var missing []schema.Column
	for _, c := range queueSchema().Columns {
		if !names[c.Name] {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		next := have.Copy()
		next.Columns = append(next.Columns, missing...)
		if err := s.yc.AlterTable(ctx, path, &yt.AlterTableOptions{Schema: &next}); err != nil {
			return fmt.Errorf("export queue partition %d: add columns %v (a queue made before them): %w", p, columnNames(missing), err)
		}
	}
	s.queueSchemaOK.Store(p, true)
	return nil
}

func columnNames(cs []schema.Column) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Name
	}
	return out
}
