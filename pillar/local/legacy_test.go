package local

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pillarkit/pillar/pillar"
)

// oldChunk is pillar.Chunk as files written before the rename named its
// columns (start, end: SQL reserved words).
type oldChunk struct {
	PageKey     string `parquet:"page_key"`
	ChunkNo     int32  `parquet:"chunk_no"`
	ContentHash string `parquet:"content_hash"`
	Text        string `parquet:"text"`
	Start       int32  `parquet:"start"`
	End         int32  `parquet:"end"`
	Tokens      int32  `parquet:"tokens"`
}

// A chunks table written with the old column names reads back into
// pillar.Chunk with its offsets, and one appended to in the new layout reads
// both files.
func TestLegacyColumnNamesRead(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "store")
	st := mustCreate(t, dir)
	defer func() { st.Close() }()
	write := func(row any, mode pillar.WriteMode) {
		t.Helper()
		tx, err := st.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w, err := tx.WriteTable(ctx, "chunks/v1", row, &pillar.WriteOptions{Mode: mode})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Write(row); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	write(&oldChunk{PageKey: "00", ChunkNo: 0, Text: "old", Start: 3, End: 9, Tokens: 2}, pillar.Replace)
	// The old binary recorded the table's row type as pillar.Chunk.
	cur, err := os.ReadFile(filepath.Join(dir, "CURRENT"))
	if err != nil {
		t.Fatal(err)
	}
	mpath := filepath.Join(dir, "manifests", strings.TrimSpace(string(cur)))
	m, err := os.ReadFile(mpath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(m, []byte(`"local.oldChunk"`)) {
		t.Fatalf("manifest %s does not name local.oldChunk: %s", mpath, m)
	}
	if err := os.WriteFile(mpath, bytes.ReplaceAll(m, []byte(`"local.oldChunk"`), []byte(`"pillar.Chunk"`)), 0o644); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if st, err = Open(dir, nil); err != nil {
		t.Fatal(err)
	}
	write(&pillar.Chunk{PageKey: "01", ChunkNo: 0, Text: "new", Start: 4, End: 11, Tokens: 3}, pillar.Append)
	sn, err := st.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	rr, err := sn.ReadTable(ctx, "chunks/v1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	var got []pillar.Chunk
	for rr.Next() {
		var c pillar.Chunk
		if err := rr.Scan(&c); err != nil {
			t.Fatal(err)
		}
		got = append(got, c)
	}
	if err := rr.Err(); err != nil {
		t.Fatal(err)
	}
	want := []pillar.Chunk{{PageKey: "00", Text: "old", Start: 3, End: 9, Tokens: 2}, {PageKey: "01", Text: "new", Start: 4, End: 11, Tokens: 3}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("read %+v, want %+v", got, want)
	}
}
