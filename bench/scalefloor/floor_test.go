package scalefloor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pillarkit/pillar/jobs/pipeline"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/ingest"
	"github.com/pillarkit/pillar/pillar/local"
	"github.com/pillarkit/pillar/sstbuilder"
	"github.com/pillarkit/pillar/subsets"
)

const policies = `history: 2
policies:
  - name: all
    exported: true
    where: text_len >= 0
  - name: long-per-host
    exported: true
    where: text_len >= 1000
    top: {k: 5, per: host, by: text_len desc}
  - name: short
    exported: false
    where: text_len < 900
`

// corpus writes n pages over 4 hosts, of varied lengths, one empty.
func corpus(t *testing.T, dir string, n int) {
	t.Helper()
	for i := range n {
		var b strings.Builder
		fmt.Fprintf(&b, "<html><head><title>Page %d</title><link rel=\"canonical\" href=\"https://h%d.floor.test/p/%d.html\"></head><body>", i, i%4, i)
		if i != 7 {
			for j := range 20 + i%60 {
				fmt.Fprintf(&b, "<p>word%d of page %d and some more words to chunk</p>\n", j, i)
			}
		}
		b.WriteString("</body></html>\n")
		p := filepath.Join(dir, fmt.Sprintf("d%d", i/50), fmt.Sprintf("p%04d.html", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFloorsWriteTheStepsRows runs every step of the scale benchmark's full
// round on a small corpus, each followed by its floor on the step's input,
// and requires the floor to have read input and written exactly the rows
// the step wrote: a floor that skips the transformation, drops rows or
// writes nothing fails here.
func TestFloorsWriteTheStepsRows(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src, storeDir, pol := filepath.Join(dir, "corpus"), filepath.Join(dir, "store"), filepath.Join(dir, "policies.yaml")
	corpus(t, src, 300)
	if err := os.WriteFile(pol, []byte(policies), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := local.Create(storeDir, &local.Options{Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	set, err := subsets.ReadFile(pol)
	if err != nil {
		t.Fatal(err)
	}
	rows := func(tables ...string) int64 {
		sn, err := st.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer sn.Release()
		var n int64
		for _, tb := range tables {
			ti, err := sn.Table(ctx, tb)
			if err != nil {
				t.Fatal(err)
			}
			n += ti.Rows
		}
		return n
	}
	asOf := time.Now()
	const spec, model = "recursive:size=64,overlap=8", "hash:dim=16"
	var cv, mv string
	for _, step := range Steps {
		var want int64
		switch step {
		case StepIngest:
			if _, err := ingest.Run(ctx, st, ingest.Options{From: src, BaseURL: "https://floor.test/"}); err != nil {
				t.Fatal(err)
			}
			want = rows(pillar.TableDocs)
		case StepRechunk:
			r, err := pipeline.Rechunk(ctx, st, spec, pipeline.Options{})
			if err != nil {
				t.Fatal(err)
			}
			cv = r.Version
			want = rows(pillar.ChunksTable(cv))
		case StepEmbed:
			r, err := pipeline.Embed(ctx, st, cv, model, pipeline.Options{})
			if err != nil {
				t.Fatal(err)
			}
			mv = r.Version
			want = rows(pillar.PrefixEmbed + mv)
		case StepSubsets:
			if _, err := pipeline.Recompute(ctx, st, set, asOf, pipeline.Options{}); err != nil {
				t.Fatal(err)
			}
			for _, n := range set.Names() {
				want += rows(pillar.SubsetTable(n))
			}
		case StepPublish:
			r, err := pipeline.Publish(ctx, st, cv, model, pipeline.Options{})
			if err != nil {
				t.Fatal(err)
			}
			want = int64(r.Export.Desired)
		case StepExport:
			w, err := sstbuilder.NewExportWriter(filepath.Join(dir, "export"), 4, "snapshot", &sstbuilder.ExportOptions{ID: "floor"})
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := pipeline.Export(ctx, st, w, pipeline.Options{}); err != nil {
				t.Fatal(err)
			}
			meta, err := w.Close()
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range meta.Files {
				want += f.Rows
			}
		}
		res, err := Run(ctx, Options{Step: step, Store: storeDir, Corpus: src, BaseURL: "https://floor.test/",
			Scratch: filepath.Join(dir, "floor", step), Chunker: spec, ChunkVersion: cv, Model: model, Policies: pol, AsOf: asOf, Workers: 2})
		if err != nil {
			t.Fatalf("%s floor: %v", step, err)
		}
		if res.RowsIn == 0 || res.RowsOut == 0 || res.Files == 0 || res.Bytes == 0 {
			t.Fatalf("%s floor: %+v: it read or wrote nothing", step, res)
		}
		if res.RowsOut != want {
			t.Fatalf("%s floor wrote %d rows, the step %d", step, res.RowsOut, want)
		}
		t.Logf("%s: %d rows in, %d out (the step's), %d files", step, res.RowsIn, res.RowsOut, res.Files)
	}
}
