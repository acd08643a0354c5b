package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCompactCLI: two ingests leave docs with a delta; `pillar compact`
// folds it (text and --json), a second run has nothing to do, an unknown
// table is named, and the flags are checked.
func TestCompactCLI(t *testing.T) {
	dir, store := t.TempDir(), filepath.Join(t.TempDir(), "store")
	for i := 0; i < 20; i++ {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("p%02d.txt", i)), []byte(fmt.Sprintf("Page %d\n\ntext %d", i, i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := runSubsets(t, "ingest", "--store", store, "--from", dir, "--partitions", "4"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p03.txt"), []byte("Page 3\n\nedited"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runSubsets(t, "ingest", "--store", store, "--from", dir, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		RowsWritten int  `json:"rows_written"`
		Delta       bool `json:"delta"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.RowsWritten != 1 || !st.Delta {
		t.Fatalf("second ingest: %+v %v\n%s", st, err, out)
	}
	out, _, err = runSubsets(t, "compact", "--store", store, "--all", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Compacted []struct {
			Table      string `json:"table"`
			Layers     int    `json:"layers"`
			Rows       int    `json:"rows"`
			DurationMS *int64 `json:"duration_ms"`
		} `json:"compacted"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Compacted) != 1 || res.Compacted[0].Table != "docs" ||
		res.Compacted[0].Layers != 1 || res.Compacted[0].Rows != 20 || res.Compacted[0].DurationMS == nil {
		t.Fatalf("compact --all --json: %+v %v\n%s", res, err, out)
	}
	var shape any
	if err := json.Unmarshal([]byte(out), &shape); err != nil {
		t.Fatal(err)
	}
	checkJSONShape(t, "pillar compact --json", shape)
	out, _, err = runSubsets(t, "compact", "--store", store, "--table", "docs")
	if err != nil || !strings.Contains(out, "docs: 0 deltas, left as it is") {
		t.Fatalf("second compact: %v\n%s", err, out)
	}
	_, _, err = runSubsets(t, "compact", "--store", store, "--table", "nosuch")
	if err == nil || !strings.Contains(err.Error(), `table "nosuch" does not exist`) {
		t.Fatalf("compact of an unknown table: %v", err)
	}
	if _, _, err = runSubsets(t, "compact", "--store", store); err == nil || !strings.Contains(err.Error(), "--all") {
		t.Fatalf("compact without a table: %v", err)
	}
}

// TestCompactCLIOnFakeYT: `pillar compact --store yt://…` folds docs' delta
// with a reduce on the (fake) cluster.
func TestCompactCLIOnFakeYT(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the job binary")
	}
	fake, bin := fakeYTForCLI(t)
	dir := t.TempDir()
	for i := 0; i < 12; i++ {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("p%02d.txt", i)), []byte(fmt.Sprintf("Page %d\n\ntext %d", i, i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	store := "yt://home/pillar/compact"
	if _, _, err := runSubsets(t, "ingest", "--store", store, "--from", dir, "--partitions", "4"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p03.txt"), []byte("Page 3\n\nedited"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runSubsets(t, "ingest", "--store", store, "--from", dir); err != nil {
		t.Fatal(err)
	}
	out, _, err := runSubsets(t, "compact", "--store", store, "--table", "docs", "--job-binary", bin, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Compacted []struct {
			Layers int   `json:"layers"`
			Rows   int64 `json:"rows"`
		} `json:"compacted"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Compacted) != 1 || got.Compacted[0].Layers != 1 || got.Compacted[0].Rows != 12 {
		t.Fatalf("compact on yt://: %s", out)
	}
	n := 0
	for _, s := range fake.Specs() {
		if strings.Contains(s.Title, "compact docs") {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("compaction reduces on the fake cluster: %d, want 1", n)
	}
}

// TestIngestMaxLayers: --max-layers compacts docs after the ingest that
// gives it more deltas; 0 is refused with a clear error.
func TestIngestMaxLayers(t *testing.T) {
	dir, store := t.TempDir(), filepath.Join(t.TempDir(), "store")
	page := func(text string) {
		if err := os.WriteFile(filepath.Join(dir, "p.txt"), []byte("Page\n\n"+text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	page("v0")
	if _, _, err := runSubsets(t, "ingest", "--store", store, "--from", dir, "--partitions", "4"); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{0, 0, 3} {
		page(fmt.Sprint("v", i+1))
		out, _, err := runSubsets(t, "ingest", "--store", store, "--from", dir, "--max-layers", "2", "--json")
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Compacted int `json:"compacted"`
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil || st.Compacted != want {
			t.Fatalf("ingest %d with --max-layers 2: compacted %d (%v), want %d\n%s", i+1, st.Compacted, err, want, out)
		}
	}
	if _, _, err := runSubsets(t, "ingest", "--store", store, "--from", dir, "--max-layers", "0"); err == nil || !strings.Contains(err.Error(), "--max-layers 0") {
		t.Fatalf("--max-layers 0: %v", err)
	}
}
