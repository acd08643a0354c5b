package sstbuilder

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/objstore"
)

func TestParseBatchURL(t *testing.T) {
	for _, tc := range []struct {
		in, store string
		p         int
		id        string
	}{
		{"s3://bucket/prefix/batches/p00007/exp-1-p00007", "s3://bucket/prefix", 7, "exp-1-p00007"},
		{"s3://bucket/batches/p00007/b/", "s3://bucket", 7, "b"},
		{"file:///data/obj/batches/p00012/b/manifest.json", "file:///data/obj", 12, "b"},
		{"data/obj/batches/p00000/b", "data/obj", 0, "b"},
		{"batches/p00000/b", ".", 0, "b"},
	} {
		s, p, id, err := ParseBatchURL(tc.in)
		if err != nil || s != tc.store || p != tc.p || id != tc.id {
			t.Errorf("ParseBatchURL(%q) = %q %d %q %v", tc.in, s, p, id, err)
		}
	}
	for _, bad := range []string{"s3://bucket/p00007/b", "s3://b/batches/p7/b", "s3://b/batches/p00007/Bad"} {
		if _, _, _, err := ParseBatchURL(bad); err == nil {
			t.Errorf("ParseBatchURL(%q) accepted", bad)
		}
	}
}

// A tampered object (same size) and a wrong meta key are caught.
func TestInspectCorrupt(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	store, _ := objstore.Open(ctx, root, nil)
	keys := pageKeys(50, 0, 1)
	var rows []Row
	for _, k := range keys {
		rows = append(rows, Row{Key: k, Value: []byte("value-" + string(k))})
	}
	m, paths, err := BuildPartition(ctx, SliceRows(rows), &BuildOptions{Dir: t.TempDir(), Partition: 0, Partitions: 1, BatchID: "good"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Upload(ctx, store, m, paths); err != nil {
		t.Fatal(err)
	}
	in, err := InspectBatch(ctx, store, 0, "good", nil)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	in.WriteText(&sb)
	for _, want := range []string{"batch      good", "50 live after ingest", "checksums verified", "not a record"} {
		if !strings.Contains(sb.String(), want) {
			t.Fatalf("inspect text lacks %q:\n%s", want, sb.String())
		}
	}
	if len(in.Samples) != 5 || in.Samples[0].Key != m.Smallest || in.Samples[4].Key != m.Largest {
		t.Fatalf("samples %+v", in.Samples)
	}
	// Tamper with the SST in the store.
	obj := filepath.Join(root, filepath.FromSlash(batch.Prefix(0, "good")+m.Files[0].Name))
	b, _ := os.ReadFile(obj)
	b[10] ^= 1
	os.WriteFile(obj, b, 0o644)
	if _, err := InspectBatch(ctx, store, 0, "good", nil); !errors.Is(err, ErrCorruptBatch) {
		t.Fatalf("tampered: %v", err)
	}
	// Tampered with a manifest that matches (size and SHA-256 of the
	// damaged file): the block checksums still catch it.
	lying := *m
	lying.ID = "lying"
	lying.Files = append([]batch.File(nil), m.Files...)
	sum := sha256.Sum256(b)
	lying.Files[0].SHA256 = hex.EncodeToString(sum[:])
	bad := filepath.Join(t.TempDir(), m.Files[0].Name)
	os.WriteFile(bad, b, 0o644)
	if _, err := Upload(ctx, store, &lying, []string{bad}); err != nil {
		t.Fatal(err)
	}
	if _, err := InspectBatch(ctx, store, 0, "lying", nil); !errors.Is(err, ErrCorruptBatch) || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Fatalf("damaged file with a matching manifest: %v", err)
	}
	// A manifest naming another batch's files (meta key mismatch).
	m2 := *m
	m2.ID = "other"
	if _, err := Upload(ctx, store, &m2, paths); err != nil {
		t.Fatal(err)
	}
	if _, err := InspectBatch(ctx, store, 0, "other", nil); !errors.Is(err, ErrCorruptBatch) || !strings.Contains(err.Error(), "meta key") {
		t.Fatalf("meta mismatch: %v", err)
	}
}
