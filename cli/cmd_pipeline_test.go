package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/local"
)

// TestSignalsImportAndRecompute: ingest pages, import a score from CSV
// (with one unknown page and one bad row), and recompute a policy on it.
func TestSignalsImportAndRecompute(t *testing.T) {
	dir := t.TempDir()
	corpus := filepath.Join(dir, "pages")
	os.MkdirAll(corpus, 0o755)
	for _, n := range []string{"a", "b", "c"} {
		os.WriteFile(filepath.Join(corpus, n+".html"), []byte("<title>"+n+"</title><p>page "+n+" text</p>"), 0o644)
	}
	store := filepath.Join(dir, "store")
	if _, _, err := runSubsets(t, "ingest", "--store", store, "--from", corpus, "--base-url", "https://ex.org/", "--partitions", "4"); err != nil {
		t.Fatal(err)
	}
	csv := filepath.Join(dir, "s.csv")
	os.WriteFile(csv, []byte("url,score,tier\nhttps://ex.org/a.html,0.9,gold\nhttps://ex.org/b.html,0.5,silver\nhttps://ex.org/zzz.html,1,x\n"), 0o644)
	if _, _, err := runSubsets(t, "signals", "import", "--store", store, "--from", csv); err != nil {
		t.Fatal(err)
	}
	st, err := local.Open(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	sn, _ := st.Snapshot(context.Background())
	ti, err := sn.Table(context.Background(), pillar.TableSignals)
	if err != nil || ti.Rows != 4 {
		t.Fatalf("signals table: %+v %v (want 4 rows: 2 pages × 2 signals)", ti, err)
	}
	pol := filepath.Join(dir, "p.yaml")
	os.WriteFile(pol, []byte("signals:\n  score: number\npolicies:\n  - name: good\n    exported: true\n    where: score >= 0.8\n"), 0o644)
	if _, _, err := runSubsets(t, "subsets", "recompute", "--store", store, "--policies", pol, "--as-of", "2026-11-30T00:00:00Z"); err != nil {
		t.Fatal(err)
	}
	st2, _ := local.Open(store, nil)
	sn, _ = st2.Snapshot(context.Background())
	ti, err = sn.Table(context.Background(), pillar.SubsetTable("good"))
	if err != nil || ti.Rows != 1 {
		t.Fatalf("subset good: %+v %v (want page a only)", ti, err)
	}
	// The same from Parquet, with typed columns and a null.
	type row struct {
		URL   string   `parquet:"url"`
		Score *float64 `parquet:"score,optional"`
		Tier  string   `parquet:"tier"`
	}
	one := 1.0
	pq := filepath.Join(dir, "s.parquet")
	f, _ := os.Create(pq)
	w := parquet.NewGenericWriter[row](f)
	w.Write([]row{{"https://ex.org/c.html", &one, "gold"}, {"https://ex.org/b.html", nil, "bronze"}})
	w.Close()
	f.Close()
	if _, _, err := runSubsets(t, "signals", "import", "--store", store, "--from", pq); err != nil {
		t.Fatal(err)
	}
	st3, _ := local.Open(store, nil)
	sn, _ = st3.Snapshot(context.Background())
	ti, _ = sn.Table(context.Background(), pillar.TableSignals)
	if ti.Rows != 6 { // a: 2, b: score + tier (bronze replaces silver), c: 2
		t.Fatalf("after the Parquet import: %d signals, want 6", ti.Rows)
	}
	// Bad input: a CSV whose first column is neither url nor page_key.
	os.WriteFile(csv, []byte("name,score\nx,1\n"), 0o644)
	if _, _, err := runSubsets(t, "signals", "import", "--store", store, "--from", csv); err == nil || !strings.Contains(err.Error(), `"url" or "page_key"`) {
		t.Fatalf("bad header: %v", err)
	}
	os.WriteFile(csv, []byte("page_key,score\nnothex,1\n"), 0o644)
	if _, _, err := runSubsets(t, "signals", "import", "--store", store, "--from", csv); err == nil || !strings.Contains(err.Error(), "s.csv:2") {
		t.Fatalf("bad key: %v", err)
	}
}
