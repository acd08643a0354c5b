package local

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/pillarkit/pillar/pillar"
)

// The typed writer encodes each row before Write returns: a caller that
// reuses one vector buffer for every row (as a batch embedder may) reads
// back every row as it was written, through the typed and the untyped
// writer alike.
func TestTypedWriterCopiesRows(t *testing.T) {
	if typedWriters[reflect.TypeFor[pillar.Embedding]()] == nil {
		t.Fatal("embeddings have no typed writer: the test exercises nothing")
	}
	st := mustCreate(t, t.TempDir())
	tx, err := st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w, err := tx.WriteTable(ctx, "embeddings/x", pillar.Embedding{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]float32, 8)
	const n = 20000 // more than a row group (maxRowsPerRowGroup)
	for i := range n {
		for j := range buf {
			buf[j] = float32(i*10 + j)
		}
		row := pillar.Embedding{PageKey: fmt.Sprintf("k%06d", i), ChunkNo: int32(i % 3), ContentHash: "h", Vector: buf}
		if i%2 == 0 {
			err = w.Write(&row)
		} else {
			err = w.Write(row)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	sn, _ := st.Snapshot(ctx)
	defer sn.Release()
	rr, err := sn.ReadTable(ctx, "embeddings/x", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	i := 0
	for ; rr.Next(); i++ {
		var e pillar.Embedding
		if err := rr.Scan(&e); err != nil {
			t.Fatal(err)
		}
		if e.PageKey != fmt.Sprintf("k%06d", i) || e.ChunkNo != int32(i%3) || len(e.Vector) != 8 || e.Vector[0] != float32(i*10) || e.Vector[7] != float32(i*10+7) {
			t.Fatalf("row %d read back as %+v", i, e)
		}
	}
	if i != n {
		t.Fatalf("read %d rows, wrote %d", i, n)
	}
}
