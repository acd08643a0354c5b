package ytstore

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pillarkit/pillar/jobs/pipeline"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/local"
	"github.com/pillarkit/pillar/subsets"
)

// TestDriversSameOnBothBackends runs the real drivers (rechunk, embed,
// subset recompute, publish, an edit and an incremental rechunk; local
// runner) on the embedded store and on this store over the FAKE cluster,
// and compares what they leave: tables row for row, attribute names and
// version states, the export queue record for record.
func TestDriversSameOnBothBackends(t *testing.T) {
	ctx := context.Background()
	ls, err := local.Create(filepath.Join(t.TempDir(), "store"), &local.Options{Partitions: 8})
	if err != nil {
		t.Fatal(err)
	}
	ys, err := Create(ctx, newFakeYT(t), "//home/pillar/test", &Options{Partitions: 8, PollInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	set, err := subsets.Parse("test.yaml", []byte(`
policies:
  - name: a
    exported: true
    where: url ~ "/page/(1|2|5)$"
  - name: b
    exported: true
    where: url ~ "/page/(2|3)$"
`))
	if err != nil {
		t.Fatal(err)
	}
	asOf := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	for _, st := range []pillar.Store{ls, ys} {
		name := st.Info().Backend
		writeCorpus(t, st, 30, "")
		opts := pipeline.Options{SlicePages: 7}
		r, err := pipeline.Rechunk(ctx, st, "tokens:size=40,overlap=8", opts)
		if err != nil {
			t.Fatalf("%s: rechunk: %v", name, err)
		}
		if _, err := pipeline.Embed(ctx, st, r.Version, "hash:dim=16", opts); err != nil {
			t.Fatalf("%s: embed: %v", name, err)
		}
		if _, err := pipeline.Recompute(ctx, st, set, asOf, opts); err != nil {
			t.Fatalf("%s: recompute: %v", name, err)
		}
		if _, err := pipeline.Publish(ctx, st, r.Version, "hash:dim=16", opts); err != nil {
			t.Fatalf("%s: publish: %v", name, err)
		}
		writeCorpus(t, st, 30, "edited")
		if _, err := pipeline.Rechunk(ctx, st, "tokens:size=40,overlap=8", opts); err != nil {
			t.Fatalf("%s: second rechunk: %v", name, err)
		}
		if _, err := pipeline.Embed(ctx, st, r.Version, "hash:dim=16", opts); err != nil {
			t.Fatalf("%s: second embed: %v", name, err)
		}
		if _, err := pipeline.Recompute(ctx, st, set, asOf.Add(time.Hour), opts); err != nil {
			t.Fatalf("%s: second recompute: %v", name, err)
		}
	}
	a, b := dump(t, ls), dump(t, ys)
	if len(a) < 8 {
		t.Fatalf("the embedded store holds only %d items: the scenario did too little", len(a))
	}
	for k, v := range a {
		if b[k] != v {
			t.Errorf("%s:\n  embedded: %.300s\n  yt:       %.300s", k, v, b[k])
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			t.Errorf("%s only on the yt store: %.300s", k, b[k])
		}
	}
}

func writeCorpus(t *testing.T, st pillar.Store, n int, edit string) {
	t.Helper()
	ctx := context.Background()
	var docs []pillar.Doc
	for i := 0; i < n; i++ {
		k, u, _ := pillar.KeyOfURL(fmt.Sprintf("https://example.org/page/%d", i))
		text := ""
		if i%7 != 0 {
			text = strings.Repeat(fmt.Sprintf("Page %d talks about topic %d in sentence form. ", i, i%5), 10+i%9)
		}
		if edit != "" && i%4 == 1 {
			text += " " + edit
		}
		docs = append(docs, pillar.Doc{PageKey: k.String(), URL: u, Host: "example.org", Text: text, ContentHash: fmt.Sprintf("h%d-%d", i, len(text))})
	}
	sort.Slice(docs, func(i, j int) bool { return docs[i].PageKey < docs[j].PageKey })
	tx, err := st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w, err := tx.WriteTable(ctx, pillar.TableDocs, pillar.Doc{}, &pillar.WriteOptions{SortedBy: []string{"page_key"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range docs {
		if err := w.Write(&docs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// dump describes a store without what legitimately differs between
// backends (timestamps, sizes, file counts, generations).
func dump(t *testing.T, st pillar.Store) map[string]string {
	t.Helper()
	ctx := context.Background()
	sn, err := st.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	out := map[string]string{}
	tabs, err := sn.Tables(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range tabs {
		var row any
		switch {
		case ti.Name == pillar.TableDocs:
			row = pillar.Doc{}
		case strings.HasPrefix(ti.Name, pillar.PrefixChunks):
			row = pillar.Chunk{}
		case strings.HasPrefix(ti.Name, pillar.PrefixEmbed):
			row = pillar.Embedding{}
		case strings.HasPrefix(ti.Name, pillar.PrefixSubsets):
			row = pillar.SubsetMember{}
		case ti.Name == pipeline.TableExportState:
			row = pipeline.ExportState{}
		default:
			out["table "+ti.Name] = fmt.Sprintf("%d rows", ti.Rows)
			continue
		}
		rr, err := sn.ReadTable(ctx, ti.Name, nil)
		if err != nil {
			t.Fatal(err)
		}
		var rows []string
		for rr.Next() {
			p := reflect.New(reflect.TypeOf(row))
			if err := rr.Scan(p.Interface()); err != nil {
				t.Fatalf("%s %s: %v", st.Info().Backend, ti.Name, err)
			}
			rows = append(rows, fmt.Sprintf("%+v", p.Elem().Interface()))
		}
		if err := rr.Err(); err != nil {
			t.Fatal(err)
		}
		rr.Close()
		out["table "+ti.Name] = fmt.Sprintf("sorted by %v, %d rows:\n%s", ti.SortedBy, ti.Rows, strings.Join(rows, "\n"))
	}
	attrs, err := sn.Attrs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name := range attrs {
		out["attr "+name] = "set"
	}
	vs, err := pillar.Versions(ctx, sn)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		out["version "+v.ID] = fmt.Sprintf("%s rows=%d pages=%d empty=%d", v.State, v.Rows, v.Pages, v.EmptyPages)
	}
	for p := 0; p < sn.Info().Partitions; p++ {
		recs, err := sn.ReadQueue(ctx, p, 0, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, r := range recs {
			lines = append(lines, fmt.Sprintf("%d %s %s %d bytes %s", r.Offset, r.Op, r.PageKey, len(r.Value), r.Cause))
		}
		out[fmt.Sprintf("queue %d", p)] = strings.Join(lines, "\n")
	}
	return out
}
