package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/pillarkit/pillar/jobs/chunker"
)

// sqlReserved are DuckDB's reserved keywords (duckdb_keywords() with
// keyword_category 'reserved'): a column with one of these names must be
// quoted in every query an outside reader writes.
var sqlReserved = strings.Fields(`all analyse analyze and any array as asc asymmetric both case cast check collate
	column constraint create default deferrable desc describe distinct do else end except false fetch for foreign
	from grant group having in initially intersect into lateral leading limit not null offset on only or order
	pivot pivot_longer pivot_wider placing primary qualify references returning select show some summarize
	symmetric table then to trailing true union unique unpivot using variadic when where window with`)

// TestParquetForOutsideReaders builds a store (ingest, chunks, embeddings,
// subsets, a publish, an export-queue change) and an export, then opens every
// Parquet file of both through parquet-go's generic file reader (the file's
// own schema, no Pillar row type) the way DuckDB or pyarrow would: no column
// is an SQL reserved word, every *_at column is TIMESTAMP(MILLIS), and the
// chunk offsets are start_offset/end_offset.
func TestParquetForOutsideReaders(t *testing.T) {
	dir := t.TempDir()
	store, pages := filepath.Join(dir, "store"), filepath.Join(dir, "pages")
	writeCorpus(t, pages, 8, "v1")
	pol := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(pol, []byte("policies:\n  - name: all\n    exported: true\n    where: text_len > 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	must := func(args ...string) string {
		t.Helper()
		out, stderr, err := runSubsets(t, args...)
		if err != nil {
			t.Fatalf("pillar %s: %v\n%s", strings.Join(args, " "), err, stderr)
		}
		return out
	}
	ch, _ := chunker.Parse("tokens:size=40,overlap=8")
	cycle := func() {
		must("ingest", "--store", store, "--from", pages, "--base-url", "https://ex.org/", "--partitions", "2")
		must("backfill", "rechunk", "--store", store, "--chunker", "tokens:size=40,overlap=8")
		must("backfill", "embed", "--store", store, "--chunks", ch.ID(), "--model", "hash:dim=8")
		must("subsets", "recompute", "--store", store, "--policies", pol, "--as-of", "2026-11-30T00:00:00Z")
		must("publish", "--store", store, "--chunks", ch.ID(), "--model", "hash:dim=8")
	}
	cycle()
	// A changed page: the re-publish queues its export record.
	if err := os.WriteFile(filepath.Join(pages, "p00000.html"), []byte("<html><head><title>changed</title></head><body><p>new text of the first page, changed.</p></body></html>"), 0o644); err != nil {
		t.Fatal(err)
	}
	cycle()
	exp := filepath.Join(dir, "export")
	must("export", "--store", store, "--out", exp)

	files, _ := filepath.Glob(filepath.Join(store, "data", "*.parquet"))
	expFiles, _ := filepath.Glob(filepath.Join(exp, "*.parquet"))
	if len(files) == 0 || len(expFiles) == 0 {
		t.Fatalf("%d store files, %d export files", len(files), len(expFiles))
	}
	seen := map[string]string{} // column -> logical type, over all files
	for _, path := range append(files, expFiles...) {
		cols := readGeneric(t, path)
		for name, typ := range cols {
			if slices.Contains(sqlReserved, name) {
				t.Errorf("%s: column %q is an SQL reserved word", path, name)
			}
			if strings.HasSuffix(name, "_at") && typ != "TIMESTAMP(isAdjustedToUTC=true,unit=MILLIS)" {
				t.Errorf("%s: column %q is %s, want TIMESTAMP(MILLIS)", path, name, typ)
			}
			seen[name] = typ
		}
	}
	for _, want := range []string{"fetched_at", "updated_at", "committed_at", "start_offset", "end_offset", "queue_offset", "page_key", "seq", "value"} {
		if _, ok := seen[want]; !ok {
			t.Errorf("no file has a %s column (columns: %v)", want, seen)
		}
	}
}

// readGeneric opens a Parquet file with nothing but its own schema, reads
// every row as a generic parquet.Row and returns the top-level columns'
// logical types (the physical type where there is none).
func readGeneric(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	cols := map[string]string{}
	for _, fl := range pf.Schema().Fields() {
		typ := "group"
		if fl.Leaf() {
			typ = fl.Type().String()
			if lt := fl.Type().LogicalType(); lt != nil {
				typ = lt.String()
			}
		}
		cols[fl.Name()] = typ
	}
	r := parquet.NewGenericReader[any](pf)
	defer r.Close()
	rows := make([]parquet.Row, 64)
	var n int64
	for {
		k, err := r.ReadRows(rows)
		n += int64(k)
		if err != nil || k == 0 {
			break
		}
	}
	if n != pf.NumRows() {
		t.Errorf("%s: read %d rows generically, the footer says %d", path, n, pf.NumRows())
	}
	return cols
}
