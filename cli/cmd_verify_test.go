package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/pillarkit/pillar/pillar/local"
)

// pillar verify passes a fresh store, and after one byte of the docs
// table's text column is flipped it fails naming the table and the file,
// and so does a command that reads the table (a re-run of pillar ingest
// merges with the existing docs).
func TestVerifyFindsAFlippedByte(t *testing.T) {
	root := t.TempDir()
	store := filepath.Join(root, "store")
	writeCorpus(t, filepath.Join(root, "pages"), 30, "v")
	bg := context.Background()
	if _, err := runControlCLI(t, bg, "ingest", "--store", store, "--from", filepath.Join(root, "pages"), "--partitions", "4"); err != nil {
		t.Fatal(err)
	}
	out, err := runControlCLI(t, bg, "verify", "--store", store)
	if err != nil || !strings.Contains(out, "verified 2 files") || !strings.Contains(out, "0 failed") {
		t.Fatalf("verify of a fresh store: %v\n%s", err, out)
	}

	all, _ := os.ReadDir(filepath.Join(store, "data"))
	var ents []os.DirEntry // the table files, not their block-sums sidecars
	for _, e := range all {
		if !strings.HasSuffix(e.Name(), ".blocks") {
			ents = append(ents, e)
		}
	}
	if len(ents) != 2 || len(all) != 4 {
		t.Fatalf("data files after one ingest: %d and %d sidecars, want 2 (docs, the ingest listing) and theirs", len(ents), len(all)-len(ents))
	}
	// The docs table's file is the one with a text column.
	var file, path string
	var off int64 = -1
	for _, e := range ents {
		p := filepath.Join(store, "data", e.Name())
		f, _ := os.Open(p)
		st, _ := f.Stat()
		pf, err := parquet.OpenFile(f, st.Size())
		if err != nil {
			t.Fatal(err)
		}
		for i, col := range pf.Schema().Columns() {
			if len(col) == 1 && col[0] == "text" {
				cc := pf.Metadata().RowGroups[0].Columns[i].MetaData
				off = cc.DataPageOffset + cc.TotalCompressedSize/2
				file, path = e.Name(), p
			}
		}
		f.Close()
	}
	if path == "" {
		t.Fatal("no data file has a text column")
	}
	b, _ := os.ReadFile(path)
	b[off] ^= 1
	os.WriteFile(path, b, 0o644)

	out, err = runControlCLI(t, bg, "verify", "--store", store, "--json")
	if err == nil || !strings.Contains(err.Error(), `table "docs" file `+file) {
		t.Fatalf("verify of a corrupt store: %v, want an error naming table docs and %s", err, file)
	}
	var rep struct {
		Problems []struct {
			Table, File, Error string
			Corrupt            bool
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Problems) != 1 || rep.Problems[0].Table != "docs" || !rep.Problems[0].Corrupt {
		t.Fatalf("verify --json: %v\n%s", err, out)
	}
	// --rehash: every page goes through the merge with docs (a plain
	// re-run of an unchanged folder reads neither the files nor docs).
	_, err = runControlCLI(t, bg, "ingest", "--store", store, "--from", filepath.Join(root, "pages"), "--rehash")
	if err == nil || !strings.Contains(err.Error(), "data corrupt") || !strings.Contains(err.Error(), file) {
		t.Fatalf("re-ingest over a corrupt docs table: %v, want a corrupt-data error naming %s", err, file)
	}
}

// pillar leases lists a live snapshot's lease (held here, read by the
// command's own Store) and none once it is released.
func TestLeasesCommand(t *testing.T) {
	root := t.TempDir()
	store := filepath.Join(root, "store")
	writeCorpus(t, filepath.Join(root, "pages"), 3, "l")
	bg := context.Background()
	if _, err := runControlCLI(t, bg, "ingest", "--store", store, "--from", filepath.Join(root, "pages"), "--partitions", "4"); err != nil {
		t.Fatal(err)
	}
	st, err := local.Open(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	sn, _ := st.Snapshot(bg)
	out, err := runControlCLI(t, bg, "leases", "--store", store, "--json")
	var ls []local.LeaseInfo
	if err != nil || json.Unmarshal([]byte(out), &ls) != nil || len(ls) != 1 || ls[0].Generation != sn.Info().Generation || ls[0].PID != os.Getpid() {
		t.Fatalf("leases while a snapshot is held: %v\n%s", err, out)
	}
	sn.Release()
	out, err = runControlCLI(t, bg, "leases", "--store", store)
	if err != nil || !strings.Contains(out, "0 live leases") {
		t.Fatalf("leases after release: %v\n%s", err, out)
	}
}
