package cli

import (
	"bytes"
	"context"
	"encoding/hex"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pillarkit/pillar/lorry"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/local"
)

// TestLorryOnceAfterDeadWorker: a worker died holding a partition's lease
// with records queued. `lorry run --once` right after waits the lease out
// and delivers them; with a wait shorter than the lease it fails, saying
// which partitions it could not deliver, instead of exiting 0.
func TestLorryOnceAfterDeadWorker(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	const parts = 2
	store, objs := filepath.Join(dir, "store"), filepath.Join(dir, "objects")
	st, err := local.Create(store, &local.Options{Partitions: parts})
	if err != nil {
		t.Fatal(err)
	}
	k := pillar.KeyOfNormalized("https://ex.com/dead-worker")
	p := k.Partition(parts)
	lease := func(d time.Duration) {
		tx, _ := st.Begin(ctx)
		if err := tx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(p), PageKey: hex.EncodeToString(k[:]), Op: pillar.OpPut, Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
		var cur lorry.PartitionState
		tx.Attr(ctx, lorry.PartitionAttr(p), &cur)
		cur.Owner, cur.Token, cur.ExpiresMS = "dead-worker", cur.Token+1, time.Now().Add(d).UnixMilli()
		if err := tx.SetAttr(ctx, lorry.PartitionAttr(p), cur); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	lease(30 * time.Second)
	addr := startControlPlane(t, ctx, dir, parts)
	run := func(args ...string) (string, error) {
		app := newApp()
		var out bytes.Buffer
		app.Writer, app.ErrWriter, app.Before = &out, &out, nil
		err := app.RunContext(ctx, append([]string{"pillar", "lorry", "run", "--store", store, "--objstore", objs, "--control", addr, "--once"}, args...))
		return out.String(), err
	}
	// The lease outlives the wait: a clear failure, nothing claimed.
	if _, err := run("--wait-leases", "500ms"); err == nil || !strings.Contains(err.Error(), "leased by another worker") {
		t.Fatalf("--once under a live lease: %v", err)
	}
	// A lease that lapses within the wait (the default: one lease TTL) is
	// waited out and the record delivered.
	st2, _ := local.Open(store, nil)
	st.Close()
	st = st2
	defer st.Close()
	lease(1500 * time.Millisecond)
	start := time.Now()
	out, err := run("--lease-ttl", "3s", "--json")
	if err != nil {
		t.Fatalf("--once after the dead worker's lease: %v\n%s", err, out)
	}
	ls, err := lorry.Status(ctx, st, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if ls[p].Depth != 0 || time.Since(start) < time.Second {
		t.Fatalf("partition %d after --once: %+v (took %s)", p, ls[p], time.Since(start))
	}
}
