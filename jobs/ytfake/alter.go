package ytfake

import (
	"context"
	"fmt"

	"go.ytsaurus.tech/yt/go/schema"
	"go.ytsaurus.tech/yt/go/ypath"
	"go.ytsaurus.tech/yt/go/yt"
	"go.ytsaurus.tech/yt/go/yterrors"
)

// AlterTable changes a static table's schema (docs: user-guide/storage/
// static-schema.md, "Changing a table schema"): any schema while the table
// is empty; on a table with rows only a compatible one, which keeps every
// existing column (name, type, requiredness, sort order, in order) and
// appends optional, unsorted columns (the rows written so far read them as
// null), keeping the table strict or making it non-strict. Like the
// master's alter_table it runs outside transactions and takes the node's
// exclusive lock, so it fails while another transaction holds any lock on
// the table. Dynamic tables and replicas are not modelled.
func (c *Cluster) AlterTable(ctx context.Context, path ypath.Path, o *yt.AlterTableOptions) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.enter(nil); err != nil {
		return err
	}
	v := view{c: c}
	p, attr, _, _, err := v.resolve(path)
	if err != nil {
		return err
	}
	c.rec(nil, "alter_table %s", p)
	if attr != "" {
		return yterrors.Err(fmt.Sprintf("ytfake: alter_table of an attribute path /%s/@%s", p, attr))
	}
	n := v.get(p)
	if n == nil {
		return notFound(p)
	}
	if n.typ != yt.NodeTable {
		return yterrors.Err(fmt.Sprintf("Node /%s is not a table (it is a %s)", p, n.typ), yterrors.Attr("path", "/"+p))
	}
	if o == nil || o.Schema == nil {
		if o != nil && (o.Dynamic != nil || o.UpstreamReplicaID != nil) {
			return yterrors.Err("ytfake: alter_table of dynamic tables and replicas is not modelled")
		}
		return nil
	}
	if err := v.takeLock(p, n, yt.LockExclusive, "", ""); err != nil {
		return err
	}
	next := o.Schema.Copy()
	if len(n.rows) > 0 && n.schema != nil {
		if err := compatible(p, *n.schema, next); err != nil {
			return err
		}
	}
	n.schema = &next
	c.touch(n, false)
	return nil
}

// compatible checks that a non-empty table's schema may become next.
func compatible(p string, old, next schema.Schema) error {
	fail := func(format string, a ...any) error {
		return yterrors.Err(yterrors.CodeIncompatibleSchemas, fmt.Sprintf("Cannot alter non-empty table /%s: "+format, append([]any{p}, a...)...),
			yterrors.Attr("path", "/"+p))
	}
	strict := func(s schema.Schema) bool { return s.Strict == nil || *s.Strict }
	if !strict(old) && strict(next) {
		return fail("a non-strict schema cannot become strict")
	}
	if len(next.Columns) < len(old.Columns) {
		return fail("columns cannot be removed (%d → %d)", len(old.Columns), len(next.Columns))
	}
	for i, oc := range old.Columns {
		nc := next.Columns[i]
		if nc.Name != oc.Name || nc.Type != oc.Type || nc.Required != oc.Required || nc.SortOrder != oc.SortOrder {
			return fail("column %d changed from %q (%s, required %v, sort %q) to %q (%s, required %v, sort %q)",
				i, oc.Name, oc.Type, oc.Required, oc.SortOrder, nc.Name, nc.Type, nc.Required, nc.SortOrder)
		}
	}
	for _, nc := range next.Columns[len(old.Columns):] {
		if nc.Required || nc.SortOrder != schema.SortNone {
			return fail("new column %q must be optional and unsorted", nc.Name)
		}
	}
	return nil
}
