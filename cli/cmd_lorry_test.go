package cli

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/lorry"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/local"
)

func runLorryCLI(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()
	app := newApp()
	var out bytes.Buffer
	app.Writer, app.ErrWriter = &out, &out
	app.Before = nil
	if err := app.RunContext(ctx, append([]string{"pillar"}, args...)); err != nil {
		t.Fatalf("pillar %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// TestLorryCLI: records queued in a store are delivered by
// `pillar lorry run --once` to a real control plane (SQLite) and a local
// object store; `pillar lorry status` then shows nothing left, and
// `pillar lorry cleanup` finds nothing to remove.
func TestLorryCLI(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	const parts = 3
	st, err := local.Create(filepath.Join(dir, "store"), &local.Options{Partitions: parts})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	queued := make([]int64, parts)
	for i := 0; i < 12; i++ {
		k := pillar.KeyOfNormalized("https://ex.com/" + strings.Repeat("x", i))
		r := pillar.ExportRecord{Partition: int32(k.Partition(parts)), PageKey: hex.EncodeToString(k[:]), Op: pillar.OpPut, Value: []byte("value")}
		if i%4 == 3 {
			r.Op, r.Value = pillar.OpDelete, nil
		}
		if err := tx.Enqueue(ctx, r); err != nil {
			t.Fatal(err)
		}
		queued[r.Partition]++
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	st.Close()

	addr := startControlPlane(t, ctx, dir, parts)

	store, objs := filepath.Join(dir, "store"), filepath.Join(dir, "objects")
	out := runLorryCLI(t, ctx, "lorry", "status", "--store", store, "--json")
	var before lorry.StatusReport
	if err := json.Unmarshal([]byte(out), &before); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	var shape any
	_ = json.Unmarshal([]byte(out), &shape)
	checkJSONShape(t, "lorry status --json", shape)
	for p, s := range before.Partitions {
		if s.Depth != queued[p] || s.FreshBacklog != queued[p] || s.BulkBacklog != 0 || s.Committed != 0 {
			t.Fatalf("status before: partition %d %+v, want depth %d, all fresh", p, s, queued[p])
		}
	}
	for _, key := range []string{`"fresh_backlog"`, `"bulk_oldest_age_ms"`, `"oldest_age_ms"`, `"lost"`} {
		if !strings.Contains(out, key) {
			t.Fatalf("status --json lacks %s:\n%s", key, out)
		}
	}

	out = runLorryCLI(t, ctx, "lorry", "run", "--store", store, "--objstore", objs, "--control", addr, "--once", "--json")
	var res struct {
		Delivered, Skipped []int
		Stats              struct{ Records, Deletes int64 }
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("run --once --json: %v\n%s", err, out)
	}
	shape = nil
	_ = json.Unmarshal([]byte(out), &shape)
	checkJSONShape(t, "lorry run --once --json", shape)
	if res.Stats.Records != 12 || res.Stats.Deletes != 3 || len(res.Delivered) != parts || len(res.Skipped) != 0 {
		t.Fatalf("run --once: %+v", res)
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
		var keys int64
		for _, b := range bs {
			keys += b.Manifest.Keys
			if b.Manifest.Kind != "delta" || !strings.HasPrefix(b.Manifest.ID, "lorry-") {
				t.Fatalf("partition %d: batch %+v", p, b.Manifest)
			}
		}
		if queued[p] > 0 && (len(bs) != 1 || keys != queued[p]) {
			t.Fatalf("partition %d: %d batches with %d keys, want one with %d", p, len(bs), keys, queued[p])
		}
	}

	out = runLorryCLI(t, ctx, "lorry", "status", "--store", store)
	if !strings.Contains(out, "backlog: 0 fresh (oldest -), 0 bulk") || !strings.Contains(out, "free") {
		t.Fatalf("status after:\n%s", out)
	}
	// A replay of a delivered range, with no worker running: the command
	// delivers it itself, as one more batch.
	rp := 0
	for queued[rp] == 0 {
		rp++
	}
	out = runLorryCLI(t, ctx, "lorry", "replay", "--store", store, "--objstore", objs, "--control", addr, "--partition", fmt.Sprint(rp), "--from", "0")
	if !strings.Contains(out, fmt.Sprintf("replay 1 of partition %d delivered", rp)) {
		t.Fatalf("replay:\n%s", out)
	}
	if bs, err := c.ListBatches(ctx, rp, 0, 100, 0); err != nil || len(bs) != 2 || !strings.Contains(bs[1].Manifest.Source, ":replay:") {
		t.Fatalf("after the replay: %d batches %v", len(bs), err)
	}
	out = runLorryCLI(t, ctx, "lorry", "cleanup", "--store", store, "--objstore", objs, "--grace", "1s", "--dry-run")
	if !strings.Contains(out, "would remove 0") {
		t.Fatalf("cleanup:\n%s", out)
	}
	// Nothing new: a second drain delivers nothing.
	out = runLorryCLI(t, ctx, "lorry", "run", "--store", store, "--objstore", objs, "--control", addr, "--once")
	if !strings.Contains(out, "0 batches, 0 records") {
		t.Fatalf("second drain:\n%s", out)
	}
}
