package ytfake

import (
	"testing"

	"go.ytsaurus.tech/yt/go/schema"
	"go.ytsaurus.tech/yt/go/ypath"
	"go.ytsaurus.tech/yt/go/yt"
	"go.ytsaurus.tech/yt/go/yterrors"
)

// TestAlterTable: a non-empty strict table takes an optional column
// appended (and then rows naming it; the old rows read it as absent), but
// not a removed, changed or required one; alter_table waits for no
// transaction: it fails while another holds a lock on the table.
func TestAlterTable(t *testing.T) {
	c := newCluster(t)
	p := ypath.Path("//tmp/t")
	base := schema.Schema{Columns: []schema.Column{{Name: "key", Type: schema.TypeString, Required: true}, {Name: "n", Type: schema.TypeInt64}}}
	must(t, c.SetTable(p, []row{{Key: "a", N: 1}}, &base))
	wantCode(t, write(c, ypath.NewRich(string(p)).SetAppend(), row{Key: "b", Extra: "x"}), yterrors.CodeSchemaViolation, "a column the strict schema lacks")

	for what, bad := range map[string]schema.Schema{
		"removed":  {Columns: base.Columns[:1]},
		"changed":  {Columns: []schema.Column{base.Columns[0], {Name: "n", Type: schema.TypeString}}},
		"required": base.Append(schema.Column{Name: "extra", Type: schema.TypeString, Required: true}),
		"sorted":   base.Append(schema.Column{Name: "extra", Type: schema.TypeString, SortOrder: schema.SortAscending}),
	} {
		wantCode(t, c.AlterTable(ctx, p, &yt.AlterTableOptions{Schema: &bad}), yterrors.CodeIncompatibleSchemas, what+" column on a non-empty table")
	}
	next := base.Append(schema.Column{Name: "extra", Type: schema.TypeString})

	tx, err := c.BeginTx(ctx, nil)
	must(t, err)
	_, err = tx.LockNode(ctx, p, yt.LockShared, nil)
	must(t, err)
	wantCode(t, c.AlterTable(ctx, p, &yt.AlterTableOptions{Schema: &next}), yterrors.CodeConcurrentTransactionLockConflict, "alter under another transaction's lock")
	must(t, tx.Abort())

	must(t, c.AlterTable(ctx, p, &yt.AlterTableOptions{Schema: &next}))
	must(t, write(c, ypath.NewRich(string(p)).SetAppend(), row{Key: "b", N: 2, Extra: "x"}))
	if rows := c.Rows(p); len(rows) != 2 {
		t.Fatalf("rows %d, want 2", len(rows))
	}
	var got schema.Schema
	must(t, c.GetNode(ctx, p.Attr("schema"), &got, nil))
	if len(got.Columns) != 3 || got.Columns[2].Name != "extra" {
		t.Fatalf("schema %v", got)
	}
}
