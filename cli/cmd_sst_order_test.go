package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/jobs/pipeline"
	"github.com/pillarkit/pillar/lorry"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/local"
)

// TestExportOrderCheck: registering a bulk export is refused while Lorry has
// not delivered the queue records committed before it.
func TestExportOrderCheck(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "store")
	st, err := local.Create(dir, &local.Options{Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	k, _, _ := pillar.KeyOfURL("https://ex.org/a")
	tx, _ := st.Begin(ctx)
	tx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(k.Partition(4)), PageKey: k.String(), Op: pillar.OpDelete})
	tx.Commit(ctx)
	ends := make([]int64, 4)
	ends[k.Partition(4)] = 1
	tx, _ = st.Begin(ctx)
	tx.SetAttr(ctx, pipeline.AttrLastExport, pipeline.LastExport{ID: "exp1", QueueEnds: ends})
	tx.Commit(ctx)
	check := func(id string) error {
		var got error
		app := &cli.App{Commands: []*cli.Command{{Name: "x", Flags: []cli.Flag{&cli.StringFlag{Name: "store"}},
			Action: func(c *cli.Context) error { got = checkExportOrder(c, id); return nil }}}}
		if err := app.Run([]string{"pillar", "x", "--store", dir}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if err := check("exp1"); err == nil || !strings.Contains(err.Error(), "lorry run --once") {
		t.Fatalf("undelivered older record: %v", err)
	}
	if err := check("other"); err == nil || !strings.Contains(err.Error(), `"exp1"`) {
		t.Fatalf("another export: %v", err)
	}
	// Once Lorry's committed offset passes the export's queue end, it's fine.
	tx, _ = st.Begin(ctx)
	tx.SetAttr(ctx, lorry.PartitionAttr(k.Partition(4)), lorry.PartitionState{Offset: 1, Token: 1})
	tx.Commit(ctx)
	if err := check("exp1"); err != nil {
		t.Fatalf("after delivery: %v", err)
	}
}
