package cli

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/local"
)

func runJobsCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	app := newApp()
	var out, errb bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errb
	app.Before = nil
	err := app.Run(append([]string{"pillar", "jobs"}, args...))
	return out.String(), err
}

func TestJobsCLI(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	st, err := local.Create(dir, &local.Options{Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tx, _ := st.Begin(ctx)
	w, err := tx.WriteTable(ctx, "docs", pillar.Doc{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		w.Write(&pillar.Doc{PageKey: fmt.Sprintf("%032x", i), Host: fmt.Sprintf("h%d", i%3), Text: "alpha beta beta " + strings.Repeat("gamma ", i%4)})
	}
	w.Close()
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	st.Close()

	out, err := runJobsCLI(t, "list")
	if err != nil || !strings.Contains(out, "wordcount") || !strings.Contains(out, "MinLen int") || !strings.Contains(out, "doc, doc_words") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	out, err = runJobsCLI(t, "mapreduce", "--store", dir, "--no-progress", "--mapper", "wordcount", "--reducer", "wordsum",
		"--reducer-params", `{"Frequent": 60}`, "-i", "docs", "-o", "totals", "-o", "frequent", "--reduce-by", "word", "--memory-limit", "1MiB")
	if err != nil || !strings.Contains(out, "map_reduce: 50 input rows") {
		t.Fatalf("mapreduce: %v\n%s", err, out)
	}
	out, err = runJobsCLI(t, "sort", "--store", dir, "--no-progress", "-i", "docs", "-o", "by_host", "--sort-by", "host,page_key", "--row-type", "doc")
	if err != nil || !strings.Contains(out, "sort: 50 input rows → 50 output rows") {
		t.Fatalf("sort: %v\n%s", err, out)
	}
	if _, err = runJobsCLI(t, "map", "--store", dir, "--job", "nosuchjob", "-i", "docs", "-o", "x"); err == nil || !strings.Contains(err.Error(), "no job named") {
		t.Fatalf("unknown job: %v", err)
	}
	out, err = runJobsCLI(t, "spec", "--kind", "mapreduce", "-i", "docs", "-o", "totals", "--reduce-by", "word", "--secret-env", "HOME", "--yt-root", "//home/x")
	if err != nil || !strings.Contains(out, `"//home/x/docs"`) || !strings.Contains(out, `"reduce_by"`) || !strings.Contains(out, "<secret>") {
		t.Fatalf("spec: %v\n%s", err, out)
	}

	st, err = local.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sn, _ := st.Snapshot(ctx)
	defer sn.Release()
	rr, err := sn.ReadTable(ctx, "totals", nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for rr.Next() {
		var wc jobs.WordCount
		if err := rr.Scan(&wc); err != nil {
			t.Fatal(err)
		}
		got[wc.Word] = wc.Count
	}
	if got["alpha"] != 50 || got["beta"] != 100 || got["gamma"] != 73 {
		t.Fatalf("totals %v", got)
	}
	ti, err := sn.Table(ctx, "frequent")
	if err != nil || ti.Rows != 2 {
		t.Fatalf("frequent: %+v %v", ti, err)
	}
}
