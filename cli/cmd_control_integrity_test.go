package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/objstore"
)

// TestControlRetractStatusRebuildCLI: `pillar control retract` marks a
// batch, `pillar status` shows a replica's fault, and after the database is
// lost `pillar control rebuild --from-objstore` brings the log back (ids,
// seqs, the retraction) from the stamped manifests; `control serve` then
// runs on it. A damaged database is refused by `control serve`.
func TestControlRetractStatusRebuildCLI(t *testing.T) {
	dir := t.TempDir()
	objects := filepath.Join(dir, "objects")
	objs, err := objstore.OpenLocal(objects)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	serve := func(dsn string) (addr string, stop func() error) {
		addr = freeAddr(t)
		sctx, scancel := context.WithCancel(ctx)
		served := make(chan error, 1)
		go func() {
			_, err := runControlCLI(t, sctx, "control", "serve", "--db", dsn, "--listen", addr, "--http", "",
				"--partitions", "2", "--no-auth", "--objstore", objects)
			served <- err
		}()
		cl, err := control.Dial(addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		for i := 0; ; i++ {
			if _, err := cl.Partitions(ctx); err == nil {
				break
			} else if i > 100 {
				t.Fatalf("serve did not come up: %v", err)
			}
			select {
			case err := <-served:
				t.Fatalf("serve exited: %v", err)
			case <-time.After(50 * time.Millisecond):
			}
		}
		return addr, func() error { scancel(); return <-served }
	}
	dbPath := filepath.Join(dir, "control.db")
	addr, stop := serve("sqlite:" + dbPath)
	cl, err := control.Dial(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := 1; i <= 3; i++ {
		sum := sha256.Sum256([]byte{byte(i)})
		m := &batch.Manifest{Format: 1, ID: fmt.Sprintf("b%d", i), Partition: 1, Partitions: 2, Kind: batch.KindSnapshot,
			Files: []batch.File{{Name: "000001.sst", Size: 10, SHA256: hex.EncodeToString(sum[:]), Keys: 1}}, Keys: 1, Source: "cli"}
		raw, _ := m.Encode()
		if err := objs.Put(ctx, batch.ManifestKey(1, m.ID), bytes.NewReader(raw), int64(len(raw)), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := cl.RegisterBatch(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	out, err := runControlCLI(t, ctx, "control", "retract", "--control", addr, "--batch", "b2", "--why", "block checksum mismatch")
	if err != nil || !strings.Contains(out, "partition 1 seq 2") {
		t.Fatalf("retract: %v\n%s", err, out)
	}
	if _, err := runControlCLI(t, ctx, "control", "retract", "--control", addr, "--batch", "nope", "--why", "x"); err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Fatalf("retract unknown: %v", err)
	}
	if err := cl.RegisterNode(ctx, control.Node{ID: "n1", Addr: "127.0.0.1:9", Zone: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := cl.ReportFault(ctx, control.Fault{Node: "n1", Partition: 1, BatchID: "b2", Reason: "corrupt batch b2: block checksum mismatch", Serving: true}); err != nil {
		t.Fatal(err)
	}
	out, err = runControlCLI(t, ctx, "status", "--control", addr, "--lagging")
	if err != nil || !strings.Contains(out, "corrupt batch b2: block checksum mismatch") {
		t.Fatalf("status does not show the fault: %v\n%s", err, out)
	}
	// The server writes seq and parent into the stored manifests soon after
	// registration.
	for _, n := range []string{"b1", "b2", "b3"} {
		for deadline := time.Now().Add(20 * time.Second); ; {
			raw, _ := objstore.ReadAll(ctx, objs, batch.ManifestKey(1, n))
			m, err := batch.Decode(raw)
			if err == nil && m.Seq != 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("manifest %s not stamped: %+v %v", n, m, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	// The database is damaged: serve refuses it, naming the file.
	f, err := os.OpenFile(dbPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	f.WriteAt(bytes.Repeat([]byte{0x5a}, 4096), fi.Size()-4096)
	f.Close()
	_, err = runControlCLI(t, ctx, "control", "serve", "--db", "sqlite:"+dbPath, "--listen", freeAddr(t), "--http", "", "--no-auth")
	if err == nil || !strings.Contains(err.Error(), "damaged") || !strings.Contains(err.Error(), "control.db") {
		t.Fatalf("serve on a damaged database: %v", err)
	}

	// Rebuild into a fresh database and serve it.
	newDB := "sqlite:" + filepath.Join(dir, "rebuilt.db")
	out, err = runControlCLI(t, ctx, "control", "rebuild", "--db", newDB, "--from-objstore", objects, "--partitions", "2")
	if err != nil || !strings.Contains(out, "rebuilt 3 batches of 1 partitions") {
		t.Fatalf("rebuild: %v\n%s", err, out)
	}
	addr, stop = serve(newDB)
	defer stop()
	out, err = runControlCLI(t, ctx, "control", "batches", "--control", addr, "--partition", "1")
	if err != nil || !strings.Contains(out, "b1") || !strings.Contains(out, "b3") || !strings.Contains(out, "RETRACTED (block checksum mismatch)") {
		t.Fatalf("batches after rebuild: %v\n%s", err, out)
	}
	cl2, err := control.Dial(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl2.Close()
	es, err := cl2.ListBatches(ctx, 1, 0, 10, 0)
	if err != nil || len(es) != 3 || es[1].Retracted != "block checksum mismatch" || es[2].Seq != 3 {
		t.Fatalf("rebuilt log: %+v %v", es, err)
	}
}
