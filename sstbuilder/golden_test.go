package sstbuilder

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/linxGnu/grocksdb"

	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/pillar"
)

var rewrite = flag.Bool("rewrite", false, "rewrite testdata expectations")

// TestBuildGolden runs testdata/build.txt: each case's manifest (checksums,
// names and sizes masked: SST bytes carry a creation time) and the contents
// of a fresh database after ingesting the batch.
func TestBuildGolden(t *testing.T) {
	path := filepath.Join("testdata", "build.txt")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(raw))
	var header string
	var input []string
	inExpect := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case inExpect:
			if line == "" {
				inExpect = false
				out.WriteString("\n")
			}
			continue // regenerated below
		case strings.HasPrefix(line, "#") || line == "" && header == "":
			out.WriteString(line + "\n")
		case strings.HasPrefix(line, "build "):
			header, input = line, nil
			out.WriteString(line + "\n")
		case line == "----":
			out.WriteString("----\n")
			out.WriteString(runGoldenCase(t, header, input))
			header, inExpect = "", true
		default:
			input = append(input, line)
			out.WriteString(line + "\n")
		}
	}
	if *rewrite {
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(out.Bytes(), raw) {
		t.Fatalf("testdata/build.txt differs (run with -rewrite to update); got:\n%s", out.String())
	}
}

func runGoldenCase(t *testing.T, header string, input []string) string {
	f := strings.Fields(header)
	kind := f[1]
	parts, _ := strconv.Atoi(f[2])
	part, _ := strconv.Atoi(f[3])
	type in struct {
		key  pillar.Key
		url  string
		row  Row
		line int
	}
	var ins []in
	for i, l := range input {
		w := strings.Fields(l)
		k := pillar.KeyOfNormalized(w[0])
		seq, _ := strconv.ParseInt(w[1], 10, 64)
		r := Row{Seq: seq, Delete: w[2] == "delete"}
		if !r.Delete {
			r.Value = []byte(w[3])
		}
		ins = append(ins, in{k, w[0], r, i})
	}
	sort.SliceStable(ins, func(i, j int) bool { return bytes.Compare(ins[i].key[:], ins[j].key[:]) < 0 })
	names := map[string]string{}
	var rows []Row
	for i := range ins {
		ins[i].row.Key = ins[i].key[:]
		rows = append(rows, ins[i].row)
		names[hex.EncodeToString(ins[i].key[:])] = ins[i].url
	}
	var sb strings.Builder
	m, paths, err := BuildPartition(context.Background(), SliceRows(rows), &BuildOptions{
		Dir: t.TempDir(), Partition: part, Partitions: parts, Kind: kind, BatchID: "golden", Source: "testdata", Now: fixedNow,
	})
	if err != nil {
		fmt.Fprintf(&sb, "error: %v\n", err)
		return sb.String()
	}
	for i := range m.Files {
		m.Files[i].Name, m.Files[i].SHA256, m.Files[i].Size = "MASKED", "MASKED", 0
	}
	js, _ := m.Encode()
	sb.Write(js)
	sb.WriteString("\n")
	db := openDB(t, filepath.Join(t.TempDir(), "db"))
	ingest(t, db, paths)
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	it := db.NewIterator(ro)
	defer it.Close()
	for it.SeekToFirst(); it.Valid(); it.Next() {
		k := it.Key().Data()
		if bytes.Equal(k, batch.MetaKey) {
			fmt.Fprintf(&sb, "meta = %s\n", it.Value().Data())
			continue
		}
		fmt.Fprintf(&sb, "%s (%s) = %s\n", hex.EncodeToString(k), names[hex.EncodeToString(k)], it.Value().Data())
	}
	return sb.String()
}
