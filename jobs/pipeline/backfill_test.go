package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"go.ytsaurus.tech/yt/go/mapreduce"

	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/local"
)

var ctx = context.Background()

// newStore makes a store with n pages (every 7th empty).
func newStore(t testing.TB, n int) *local.Store {
	t.Helper()
	st, err := local.Create(filepath.Join(t.TempDir(), "store"), &local.Options{Partitions: 8})
	if err != nil {
		t.Fatal(err)
	}
	writeDocs(t, st, n, "v1")
	return st
}

func writeDocs(t testing.TB, st pillar.Store, n int, tag string) {
	t.Helper()
	tx, _ := st.Begin(ctx)
	w, err := tx.WriteTable(ctx, pillar.TableDocs, pillar.Doc{}, &pillar.WriteOptions{SortedBy: []string{"page_key"}})
	if err != nil {
		t.Fatal(err)
	}
	var docs []pillar.Doc
	for i := 0; i < n; i++ {
		k, u, _ := pillar.KeyOfURL(fmt.Sprintf("https://example.org/page/%d", i))
		text := ""
		if i%7 != 0 {
			text = strings.Repeat(fmt.Sprintf("Page %d talks about topic %d in sentence form. ", i, i%5), 40+i%30)
		}
		if tag != "v1" && i%10 == 1 {
			text += " Edited " + tag + "."
		}
		docs = append(docs, pillar.Doc{PageKey: k.String(), URL: u, Host: "example.org", Text: text, ContentHash: fmt.Sprintf("%x", len(text)) + tag[:0] + hashOf(text)})
	}
	sortDocs(docs)
	for i := range docs {
		if err := w.Write(&docs[i]); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

func hashOf(s string) string {
	h := uint64(1469598103934665603)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * 1099511628211
	}
	return fmt.Sprintf("%016x", h)
}

func sortDocs(d []pillar.Doc) {
	for i := 1; i < len(d); i++ {
		for j := i; j > 0 && d[j].PageKey < d[j-1].PageKey; j-- {
			d[j], d[j-1] = d[j-1], d[j]
		}
	}
}

func rows(t testing.TB, st pillar.Store, table string) int64 {
	sn, _ := st.Snapshot(ctx)
	ti, err := sn.Table(ctx, table)
	if err != nil {
		t.Fatal(err)
	}
	return ti.Rows
}

func TestRechunkEmbedIncremental(t *testing.T) {
	st := newStore(t, 60)
	o := Options{SlicePages: 25}
	r1, err := Rechunk(ctx, st, "recursive:size=64,overlap=8", o)
	if err != nil {
		t.Fatal(err)
	}
	if r1.PendingPages != 60 || r1.Slices != 3 || r1.Pages != 60 {
		t.Fatalf("first rechunk %+v", r1)
	}
	sn, _ := st.Snapshot(ctx)
	v, err := pillar.LoadVersion(ctx, sn, r1.Version)
	if err != nil || v.State != pillar.StateComplete || v.EmptyPages != 9 || v.Rows != r1.Rows {
		t.Fatalf("registry %+v %v", v, err)
	}
	ti, _ := sn.Table(ctx, r1.Table)
	if strings.Join(ti.SortedBy, ",") != "page_key,chunk_no" {
		t.Fatalf("not compacted/sorted: %+v", ti)
	}
	gen := st.Info().Generation
	r2, err := Rechunk(ctx, st, "recursive:size=64,overlap=8", o)
	if err != nil || r2.PendingPages != 0 || r2.RowsWritten != 0 || st.Info().Generation != gen {
		t.Fatalf("second rechunk wrote something: %+v %v", r2, err)
	}
	e1, err := Embed(ctx, st, r1.Version, "hash:dim=32", o)
	if err != nil || e1.Rows != r1.Rows || e1.Pages != 60 {
		t.Fatalf("embed %+v %v", e1, err)
	}
	e2, err := Embed(ctx, st, r1.Version, "hash:dim=32", o)
	if err != nil || e2.RowsWritten != 0 {
		t.Fatalf("second embed %+v %v", e2, err)
	}
	// Edit some pages: only they are redone, old rows are dropped.
	writeDocs(t, st, 60, "v2")
	r3, err := Rechunk(ctx, st, "recursive:size=64,overlap=8", o)
	if err != nil || r3.PendingPages != 6 || r3.StalePages != 6 {
		t.Fatalf("rechunk after edit %+v %v", r3, err)
	}
	e3, err := Embed(ctx, st, r1.Version, "hash:dim=32", o)
	if err != nil || e3.PendingPages != 6 || e3.Rows != r3.Rows {
		t.Fatalf("embed after edit %+v %v (chunks %d)", e3, err, r3.Rows)
	}
	// The incremental runs wrote delta layers of what changed, and the
	// merged tables hold as many rows as the versions count.
	sn, _ = st.Snapshot(ctx)
	for _, vt := range []struct{ id, table string }{{r3.Version, r3.Table}, {e3.Version, e3.Table}} {
		ls, err := pillar.Layers(ctx, sn, vt.table)
		if err != nil || pillar.Deltas(ls) != 1 {
			t.Fatalf("%s: layers %+v %v, want the base and one delta", vt.table, ls, err)
		}
		v, _ := pillar.LoadVersion(ctx, sn, vt.id)
		n := int64(0) // read, not the recorded count
		if err := eachRow(ctx, sn, vt.table, false, func(*pageHash) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		if n != v.Rows+v.EmptyPages || rows(t, st, vt.table) != n || v.Pages != 60 {
			t.Fatalf("%s: %d merged rows, version counts %d rows + %d empty pages, %d pages", vt.table, n, v.Rows, v.EmptyPages, v.Pages)
		}
	}
	sn.Release()
	// Versions coexist.
	before := rows(t, st, r1.Table)
	r4, err := Rechunk(ctx, st, "tokens:size=32,overlap=4", o)
	if err != nil || r4.Version == r1.Version {
		t.Fatalf("second version %+v %v", r4, err)
	}
	if rows(t, st, r1.Table) != before {
		t.Fatal("a new version changed another's table")
	}
}

// failingRunner fails the n-th Map call, as a killed run would.
type failingRunner struct {
	jobs.Runner
	calls, failAt int
}

func (f *failingRunner) Map(ctx context.Context, job mapreduce.Job, op *jobs.Op) error {
	f.calls++
	if f.calls == f.failAt {
		return errors.New("killed")
	}
	return f.Runner.Map(ctx, job, op)
}

func TestRechunkResumes(t *testing.T) {
	st := newStore(t, 60)
	fr := &failingRunner{Runner: jobs.NewLocal(st, nil), failAt: 2}
	_, err := Rechunk(ctx, st, "tokens:size=50,overlap=10", Options{SlicePages: 20, Runner: fr})
	if err == nil {
		t.Fatal("want failure")
	}
	r, err := Rechunk(ctx, st, "tokens:size=50,overlap=10", Options{SlicePages: 20})
	if err != nil {
		t.Fatal(err)
	}
	if r.PendingPages != 40 || r.Slices != 2 {
		t.Fatalf("resume redid work: %+v", r)
	}
	// Same rows as a clean run.
	clean := newStore(t, 60)
	rc, _ := Rechunk(ctx, clean, "tokens:size=50,overlap=10", Options{})
	if rc.Rows != r.Rows || rc.Pages != r.Pages {
		t.Fatalf("resumed %d rows/%d pages, clean %d/%d", r.Rows, r.Pages, rc.Rows, rc.Pages)
	}
}

func TestEmbedBadInput(t *testing.T) {
	st := newStore(t, 20)
	r, _ := Rechunk(ctx, st, "tokens:size=50,overlap=10", Options{})
	if _, err := Embed(ctx, st, "no-such-version", "hash:dim=8", Options{}); !errors.Is(err, pillar.ErrNotFound) {
		t.Fatalf("missing chunk version: %v", err)
	}
	if _, err := Embed(ctx, st, r.Version, "word2vec:dim=8", Options{}); err == nil {
		t.Fatal("unknown model accepted")
	}
	if _, err := Rechunk(ctx, st, "tokens:size=10,overlap=10", Options{}); err == nil {
		t.Fatal("overlap == size accepted")
	}
	// A model server that answers NaN for one input: the page is named and
	// the version stays building.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body struct {
			Input []string `json:"input"`
		}
		json.NewDecoder(req.Body).Decode(&body)
		type item struct {
			Index     int       `json:"index"`
			Embedding []float64 `json:"embedding"`
		}
		var data []item
		for i, s := range body.Input {
			v := []float64{1, 0, 0, 0}
			if strings.Contains(s, "Page 3 ") {
				v[1] = math.NaN()
			}
			data = append(data, item{i, v})
		}
		// encoding/json refuses NaN: write it by hand.
		var sb strings.Builder
		sb.WriteString(`{"object":"list","data":[`)
		for i, d := range data {
			if i > 0 {
				sb.WriteString(",")
			}
			fmt.Fprintf(&sb, `{"object":"embedding","index":%d,"embedding":[`, d.Index)
			for j, x := range d.Embedding {
				if j > 0 {
					sb.WriteString(",")
				}
				if math.IsNaN(x) {
					sb.WriteString("NaN")
				} else {
					fmt.Fprintf(&sb, "%g", x)
				}
			}
			sb.WriteString("]}")
		}
		sb.WriteString(`]}`)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(sb.String()))
	}))
	defer srv.Close()
	spec := "openai:url=" + srv.URL + "/v1,model=m,dim=4"
	_, err := Embed(ctx, st, r.Version, spec, Options{})
	if err == nil {
		t.Fatal("NaN vector accepted")
	}
	k3, _, _ := pillar.KeyOfURL("https://example.org/page/3")
	if !strings.Contains(err.Error(), k3.String()) && !strings.Contains(err.Error(), "page") {
		t.Fatalf("error does not name the page: %v", err)
	}
	sn, _ := st.Snapshot(ctx)
	vs, _ := pillar.Versions(ctx, sn)
	for _, v := range vs {
		if v.Kind == pillar.KindEmbeddings && v.State == pillar.StateComplete {
			t.Fatalf("version marked complete after a bad vector: %+v", v)
		}
	}
}

func TestPreview(t *testing.T) {
	st := newStore(t, 30)
	gen := st.Info().Generation
	if _, err := RunPreview(ctx, st, "tokens:size=40,overlap=8", "", 10, 1); err == nil {
		t.Fatal("preview without a published version or --baseline")
	}
	p, err := RunPreview(ctx, st, "tokens:size=40,overlap=8", "tokens:size=40,overlap=8", 10, 1)
	if err != nil {
		t.Fatal(err)
	}
	if p.Sample != 10 || p.ChangedPages != 0 || p.Cand.Chunks != p.Base.Chunks || p.Cand.TokensMax > 40 {
		t.Fatalf("same chunker: %+v", p)
	}
	p, err = RunPreview(ctx, st, "tokens:size=20,overlap=4", "tokens:size=40,overlap=8", 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if p.Sample != 30 || p.ChangedPages == 0 || p.Cand.Chunks <= p.Base.Chunks || p.Example == nil {
		t.Fatalf("different chunkers: %+v", p)
	}
	if st.Info().Generation != gen {
		t.Fatal("preview committed something")
	}
}

// killRunner SIGKILLs its own process in the middle of the n-th Map (after
// the job ran, before the slice commits), as a crash would.
type killRunner struct {
	jobs.Runner
	calls, killAt int
}

func (k *killRunner) Map(ctx context.Context, job mapreduce.Job, op *jobs.Op) error {
	k.calls++
	err := k.Runner.Map(ctx, job, op)
	if k.calls == k.killAt {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	return err
}

// TestRechunkResumesAfterKill runs a backfill in a child process that is
// killed -9 during its third slice, then resumes it here: the two committed
// slices are not redone and the result equals a clean run.
func TestRechunkResumesAfterKill(t *testing.T) {
	if dir := os.Getenv("PILLAR_PIPELINE_CHILD"); dir != "" {
		st, err := local.Open(dir, nil)
		if err != nil {
			os.Exit(3)
		}
		Rechunk(ctx, st, "tokens:size=50,overlap=10", Options{SlicePages: 10, Runner: &killRunner{Runner: jobs.NewLocal(st, nil), killAt: 3}})
		os.Exit(4) // not reached: killed
	}
	st := newStore(t, 60)
	cmd := exec.Command(os.Args[0], "-test.run=^TestRechunkResumesAfterKill$")
	cmd.Env = append(os.Environ(), "PILLAR_PIPELINE_CHILD="+st.Dir())
	out, _ := cmd.CombinedOutput()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("child was not killed: %v\n%s", cmd.ProcessState, out)
	}
	st2, err := local.Open(st.Dir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Rechunk(ctx, st2, "tokens:size=50,overlap=10", Options{SlicePages: 10})
	if err != nil {
		t.Fatal(err)
	}
	if r.PendingPages != 40 {
		t.Fatalf("resume processed %d pages, want the 40 of the uncommitted slices", r.PendingPages)
	}
	clean := newStore(t, 60)
	rc, _ := Rechunk(ctx, clean, "tokens:size=50,overlap=10", Options{})
	if rc.Rows != r.Rows || rc.Pages != r.Pages {
		t.Fatalf("resumed %d rows/%d pages, clean %d/%d", r.Rows, r.Pages, rc.Rows, rc.Pages)
	}
}
