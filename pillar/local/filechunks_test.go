package local

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/pillarkit/pillar/pillar"
)

// fileChunks returns the row groups and column chunks of a table file.
func fileChunks(t *testing.T, path string) (groups, chunks int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	for _, rg := range pf.Metadata().RowGroups {
		chunks += len(rg.Columns)
	}
	return len(pf.Metadata().RowGroups), chunks
}

// TestWriterBoundsFileChunks: one writer's rows go into files of at most
// maxFileChunks column chunks each (the metadata a writer keeps until it
// closes a file and a reader decodes when it opens one), in order, so a
// table read (whole, from any row, across the files) is what was written.
// On the code before the bound, the table was one file of 1,257 chunks.
func TestWriterBoundsFileChunks(t *testing.T) {
	dir := t.TempDir()
	s := mustCreate(t, dir)
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Rows of ~600 bytes in row groups of ~1 KB: a row group every 16 rows
	// (the writer checks the size every 16 rows) and, ExportState having 3
	// columns, a file every 170 row groups (2,720 rows).
	w, err := tx.WriteTable(ctx, "state", exportState{}, &pillar.WriteOptions{SortedBy: []string{"page_key"}, RowGroupBytes: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	const n = 6700
	pad := make([]byte, 600)
	for i := range pad {
		pad[i] = 'a' + byte(i*7%26)
	}
	row := func(i int) exportState {
		return exportState{PageKey: fmt.Sprintf("k%07d", i), Partition: int32(i % 16), RecordHash: fmt.Sprintf("%d-%s", i, pad)}
	}
	for i := range n {
		r := row(i)
		if err := w.Write(&r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := s.current()
	if err != nil {
		t.Fatal(err)
	}
	files := m.Tables["state"].Files
	var rows int64
	for _, fe := range files {
		groups, chunks := fileChunks(t, filepath.Join(dir, "data", fe.Name))
		t.Logf("%s: %d rows, %d row groups, %d column chunks", fe.Name, fe.Rows, groups, chunks)
		if chunks > maxFileChunks {
			t.Errorf("file %s holds %d column chunks (%d row groups), more than %d", fe.Name, chunks, groups, maxFileChunks)
		}
		rows += fe.Rows
	}
	if len(files) < 3 || rows != n {
		t.Fatalf("%d files of %d rows: want %d rows in at least 3 files", len(files), rows, n)
	}
	if rep, err := s.Verify(ctx, nil); err != nil || !rep.OK() || rep.Files != len(files) {
		t.Fatalf("verify: %+v, %v (want %d files, no problems)", rep, err, len(files))
	}

	sn, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	check := func(r *pillar.Range) {
		t.Helper()
		rr, err := sn.ReadTable(ctx, "state", r)
		if err != nil {
			t.Fatal(err)
		}
		defer rr.Close()
		i := 0
		if r != nil {
			i = int(r.Start)
		}
		for ; rr.Next(); i++ {
			var got exportState
			if err := rr.Scan(&got); err != nil {
				t.Fatal(err)
			}
			if want := row(i); got != want {
				t.Fatalf("range %+v: row %d is %q, want %q", r, i, got.PageKey, want.PageKey)
			}
		}
		if err := rr.Err(); err != nil {
			t.Fatal(err)
		}
		end := n
		if r != nil {
			end = int(r.End)
		}
		if i != end {
			t.Fatalf("range %+v: read up to row %d, want %d", r, i, end)
		}
	}
	check(nil)
	// Ranges that start inside a later file and cross into the next.
	first := files[0].Rows
	check(&pillar.Range{Start: first + 5, End: first + files[1].Rows + 40})
	check(&pillar.Range{Start: first - 3, End: first + 3})
	check(&pillar.Range{Start: n - 10, End: n})
}

// exportState is a narrow row (3 columns), as export/state's.
type exportState struct {
	PageKey    string `parquet:"page_key"`
	Partition  int32  `parquet:"partition"`
	RecordHash string `parquet:"record_hash"`
}

// TestRolledPartsKeepTableOrder: with several writers of one table, each
// rolling over to new files, the table is the parts in the order their
// writers were opened, each part's files in the order written (writes
// interleaved between the writers), and an Append adds its parts after.
func TestRolledPartsKeepTableOrder(t *testing.T) {
	dir := t.TempDir()
	s := mustCreate(t, dir)
	const per = 3000 // rows per writer: two files each (2,720 rows fill one)
	pad := string(make([]byte, 600))
	row := func(i int) exportState {
		return exportState{PageKey: fmt.Sprintf("k%07d", i), Partition: int32(i % 16), RecordHash: fmt.Sprintf("%d%s", i, pad)}
	}
	opts := func(mode pillar.WriteMode) *pillar.WriteOptions {
		return &pillar.WriteOptions{Mode: mode, RowGroupBytes: 1 << 10}
	}
	// Two transactions: a Replace by writers 0 and 1, then an Append by
	// writers 2 and 3, each pair writing in turns.
	for _, batch := range []struct {
		mode  pillar.WriteMode
		first int
	}{{pillar.Replace, 0}, {pillar.Append, 2}} {
		tx, err := s.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ws [2]pillar.RowWriter
		for j := range ws {
			if ws[j], err = tx.WriteTable(ctx, "state", exportState{}, opts(batch.mode)); err != nil {
				t.Fatal(err)
			}
		}
		for i := range per {
			for j, w := range ws {
				r := row((batch.first+j)*per + i)
				if err := w.Write(&r); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, w := range ws {
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	m, err := s.current()
	if err != nil {
		t.Fatal(err)
	}
	if files := m.Tables["state"].Files; len(files) != 8 {
		t.Fatalf("%d files, want 8 (2 per writer)", len(files))
	}
	sn, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	rr, err := sn.ReadTable(ctx, "state", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	i := 0
	for ; rr.Next(); i++ {
		var got exportState
		if err := rr.Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want := row(i); got != want {
			t.Fatalf("row %d is %q, want %q", i, got.PageKey, want.PageKey)
		}
	}
	if err := rr.Err(); err != nil || i != 4*per {
		t.Fatalf("read %d rows (%v), want %d", i, err, 4*per)
	}
}
