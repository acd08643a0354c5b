package cli

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/local"
	"github.com/pillarkit/pillar/sstbuilder"
)

// TestExportOrderEnforcedByControlPlane: a bulk export records the queue
// ends it supersedes; `pillar sst build --control` of its snapshots is
// refused by the control plane (no CLI-side check, no --store needed)
// while Lorry has not delivered the older queue records, and accepted after
// `pillar lorry run --once`. The manifests carry the typed fields.
func TestExportOrderEnforcedByControlPlane(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	const parts = 3
	store, objs := filepath.Join(dir, "store"), filepath.Join(dir, "objects")
	st, err := local.Create(store, &local.Options{Partitions: parts})
	if err != nil {
		t.Fatal(err)
	}
	tx, _ := st.Begin(ctx)
	queued := make([]int64, parts)
	var keys [parts][]string
	for i := 0; i < 12; i++ {
		k := pillar.KeyOfNormalized("https://ex.com/" + strings.Repeat("y", i))
		p := k.Partition(parts)
		if err := tx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(p), PageKey: hex.EncodeToString(k[:]), Op: pillar.OpPut, Value: []byte("old")}); err != nil {
			t.Fatal(err)
		}
		queued[p]++
		keys[p] = append(keys[p], hex.EncodeToString(k[:]))
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	st.Close()
	// The export (as pipeline.Export writes it) supersedes the queue.
	exp := filepath.Join(dir, "exp1")
	w, err := sstbuilder.NewExportWriter(exp, parts, batch.KindSnapshot, &sstbuilder.ExportOptions{ID: "exp1", Source: "test"})
	if err != nil {
		t.Fatal(err)
	}
	for p := 0; p < parts; p++ {
		sort.Strings(keys[p])
		for _, k := range keys[p] {
			if err := w.WriteRecord(k, pillar.OpPut, []byte("new")); err != nil {
				t.Fatal(err)
			}
		}
	}
	w.SetQueueEnds(queued)
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}

	addr := startControlPlane(t, ctx, dir, parts)

	build := func(extra ...string) error {
		app := newApp()
		var out bytes.Buffer
		app.Writer, app.ErrWriter, app.Before = &out, &out, nil
		return app.RunContext(ctx, append([]string{"pillar", "sst", "build", "--export", exp, "--objstore", objs, "--control", addr}, extra...))
	}
	err = build()
	if !errors.Is(err, control.ErrNotDelivered) || !strings.Contains(err.Error(), "run Lorry") {
		t.Fatalf("register before Lorry delivered: %v", err)
	}
	// The refusal is retryable: a build that waits succeeds once Lorry has
	// delivered.
	waited := make(chan error, 1)
	go func() { waited <- build("--wait-delivered", "60s") }()
	time.Sleep(300 * time.Millisecond)
	runLorryCLI(t, ctx, "lorry", "run", "--store", store, "--objstore", objs, "--control", addr, "--once")
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("register after Lorry delivered: %v", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("sst build --wait-delivered did not finish")
	}
	c, err := control.Dial(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for p := 0; p < parts; p++ {
		bs, err := c.ListBatches(ctx, p, 0, 100, 0)
		if err != nil {
			t.Fatal(err)
		}
		if queued[p] == 0 {
			continue
		}
		if len(bs) != 2 {
			t.Fatalf("partition %d: %d batches, want the delta then the snapshot", p, len(bs))
		}
		d, s := bs[0].Manifest, bs[1].Manifest
		if d.Kind != batch.KindDelta || d.QueueFirst != 0 || d.QueueEnd != queued[p] || d.Seq != 1 {
			t.Errorf("partition %d delta: %+v", p, d)
		}
		if s.Kind != batch.KindSnapshot || s.Supersedes != queued[p] || s.Seq != 2 || s.Parent != d.ID {
			t.Errorf("partition %d snapshot: %+v", p, s)
		}
	}
}
