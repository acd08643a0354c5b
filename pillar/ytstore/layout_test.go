package ytstore

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"go.ytsaurus.tech/yt/go/ypath"
	"go.ytsaurus.tech/yt/go/yson"
	"go.ytsaurus.tech/yt/go/yt"

	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/jobs/pipeline"
	"github.com/pillarkit/pillar/pillar"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden files under testdata/")

var _ jobs.YTTxer = (*tx)(nil)

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *rewrite {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -rewrite to create it)", err)
	}
	if string(want) != got {
		t.Fatalf("%s differs from the output (run go test -rewrite and review the diff):\n%s", path, got)
	}
}

// TestSchemas pins the Cypress schema of every table kind: the row type and
// the sort order the drivers write it with.
func TestSchemas(t *testing.T) {
	kinds := []struct {
		table    string
		row      any
		sortedBy []string
	}{
		{pillar.TableDocs, pillar.Doc{}, []string{"page_key"}},
		{pillar.TableSignals, pillar.Signal{}, nil},
		{pillar.ChunksTable("<cv>"), pillar.Chunk{}, []string{"page_key", "chunk_no"}},
		{pillar.EmbeddingsTable("<cv>", "<model>"), pillar.Embedding{}, []string{"page_key", "chunk_no"}},
		{pillar.SubsetTable("<name>"), pillar.SubsetMember{}, []string{"page_key"}},
		{pipeline.TableExportState, pipeline.ExportState{}, []string{"page_key"}},
		{"_pillar/queue/p<partition>", pillar.ExportRecord{}, nil},
	}
	var b strings.Builder
	for _, k := range kinds {
		s, err := SchemaFor(k.row, k.sortedBy)
		if err != nil {
			t.Fatalf("%s: %v", k.table, err)
		}
		y, err := yson.MarshalFormat(s, yson.FormatPretty)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "# %s (%T, sorted by %v)\n%s\n\n", k.table, k.row, k.sortedBy, y)
	}
	golden(t, "schemas.golden", b.String())

	if _, err := SchemaFor(pillar.Doc{}, []string{"nope"}); err == nil {
		t.Fatal("a sort column the row type lacks was accepted")
	}
	if _, err := SchemaFor(42, nil); err == nil {
		t.Fatal("a row type that is not a struct was accepted")
	}
}

// exampleCommit is one transaction touching every kind of change.
func exampleCommit(t *testing.T, s *Store) pillar.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	k, _, _ := pillar.KeyOfURL("http://example.com/")
	p := k.Partition(4)
	w, err := tx.WriteTable(ctx, "docs", pillar.Doc{}, &pillar.WriteOptions{SortedBy: []string{"page_key"}})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(&pillar.Doc{PageKey: k.String(), URL: "http://example.com/"})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		w, err := tx.WriteTable(ctx, "chunks/v1", pillar.Chunk{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(&pillar.Chunk{PageKey: k.String(), ChunkNo: int32(i)})
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	tx.SetAttr(ctx, pillar.AttrPublished, pillar.Published{ChunkVersion: "v1", Model: "m"})
	tx.ExpectAttr(ctx, "lorry/partition/p00001")
	tx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(p), PageKey: k.String(), Op: pillar.OpPut, Value: []byte("v")})
	tx.MarkConsumed(ctx, "run/1")
	return tx
}

// TestCommitCalls pins the exact sequence of calls one Commit makes on the
// (FAKE, recording) cluster: commit lock, conflict reads, tables moved and
// merged into place, attributes, queue append, consumed mark, staging
// removed, generation, commit. Snapshot locks are taken concurrently, so
// runs of them are sorted.
func TestCommitCalls(t *testing.T) {
	s, yc := newFakeStore(t)
	yc.ResetCalls()
	tx := exampleCommit(t, s)
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	calls := yc.Calls()
	for i := 0; i < len(calls); {
		j := i
		for j < len(calls) && strings.Contains(calls[j], " snapshot waitable") {
			j++
		}
		if j > i {
			sort.Strings(calls[i:j])
			i = j
		} else {
			i++
		}
	}
	golden(t, "commit.calls", strings.Join(calls, "\n")+"\n")
	if st := s.Stats(); st.Merges != 1 || st.Commits != 1 || st.LockWaits != 0 {
		t.Fatalf("stats %+v: want one commit with one merge and no lock wait", st)
	}
}

// TestLayout pins the Cypress layout after the example commit: every node,
// its type and the store's attributes on it.
func TestLayout(t *testing.T) {
	s, yc := newFakeStore(t)
	if err := exampleCommit(t, s).Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, n := range yc.Nodes("//tmp/pillar") {
		line := fmt.Sprintf("%s  %s", n.Path, n.Type)
		var keys []string
		for k := range n.Attrs {
			if k != attrCreated {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			line += fmt.Sprintf("  @%s=%v", k, n.Attrs[k])
		}
		if n.Type == yt.NodeTable {
			line += fmt.Sprintf("  rows=%d", n.Rows)
		}
		if n.Type == yt.NodeDocument {
			line += fmt.Sprintf("  value=%v", n.Value)
		}
		lines = append(lines, line)
	}
	sort.Strings(lines)
	golden(t, "layout.golden", strings.Join(lines, "\n")+"\n")
}

func TestRootFromURL(t *testing.T) {
	for in, want := range map[string]string{
		"yt://pillar/prod":        "//pillar/prod",
		"yt:////home/pillar/prod": "//home/pillar/prod",
		"yt://home/x/":            "//home/x",
	} {
		got, err := RootFromURL(in)
		if err != nil || string(got) != want {
			t.Errorf("RootFromURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"yt://", "yt:///", "file:///x", "yt://a//b", "yt://a/../b"} {
		if _, err := RootFromURL(bad); err == nil {
			t.Errorf("RootFromURL(%q) accepted", bad)
		}
	}
}

func TestNameEncoding(t *testing.T) {
	for _, n := range []string{"published", "lorry/partition/p00001", "versions/rec-1/hash-d64", ".hidden", "a b%c\x00ü", "x.y-z_0"} {
		enc := encodeName(n)
		if strings.ContainsAny(enc, "/@&*[{\\ ") || strings.HasPrefix(enc, ".") {
			t.Errorf("encodeName(%q) = %q has a character YPath gives a meaning", n, enc)
		}
		dec, err := decodeName(enc)
		if err != nil || dec != n {
			t.Errorf("decodeName(encodeName(%q)) = %q, %v", n, dec, err)
		}
	}
	if encodeName("lorry/partition/p00001") != "lorry%2Fpartition%2Fp00001" {
		t.Errorf("encodeName changed: %s", encodeName("lorry/partition/p00001"))
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	yc := newFakeYT(t)
	if _, err := Open(ctx, yc, "//tmp/none", nil); !errors.Is(err, pillar.ErrNotFound) {
		t.Fatalf("missing root: %v", err)
	}
	if _, err := yc.CreateNode(ctx, ypath.Path("//tmp/plain"), yt.NodeMap, &yt.CreateNodeOptions{Recursive: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, yc, "//tmp/plain", nil); !errors.Is(err, pillar.ErrNotStore) {
		t.Fatalf("plain map node: %v", err)
	}
	s, err := Create(ctx, yc, "//tmp/s", &Options{Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	if s.Info().Partitions != 4 || s.Info().Backend != "yt" || s.Info().Root != "//tmp/s" {
		t.Fatalf("info %+v", s.Info())
	}
	if _, err := Open(ctx, yc, "//tmp/s", &Options{Partitions: 8}); !errors.Is(err, pillar.ErrPartitions) {
		t.Fatalf("partitions: %v", err)
	}
	if _, err := Create(ctx, yc, "//tmp/s", &Options{Partitions: 4}); err == nil {
		t.Fatal("create over an existing store")
	}
	if _, err := Create(ctx, yc, "//tmp/t", nil); err == nil {
		t.Fatal("create without partitions")
	}
	if _, err := Open(ctx, yc, "relative/path", nil); err == nil {
		t.Fatal("a relative root accepted")
	}
	tx, _ := yc.BeginTx(ctx, nil)
	tx.SetNode(ctx, ypath.Path("//tmp/s/@pillar_format"), 99, nil)
	tx.Commit()
	if _, err := Open(ctx, yc, "//tmp/s", nil); !errors.Is(err, pillar.ErrNewerFormat) {
		t.Fatalf("newer format: %v", err)
	}
	// Reserved names.
	s2, _ := Create(ctx, yc, "//tmp/u", &Options{Partitions: 2})
	tx2, err := s2.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Abort()
	if _, err := tx2.WriteTable(ctx, "_pillar/queue/p00000", pillar.ExportRecord{}, nil); err == nil {
		t.Fatal("a table under _pillar/ accepted")
	}
}

// opWrite stands in for an operation jobs.YT runs inside the store
// transaction: it writes a table through the master transaction (YTTx).
func opWrite(t *testing.T, s *Store, tx pillar.Tx, table string, keys ...string) {
	t.Helper()
	ctx := context.Background()
	ytx := tx.(jobs.YTTxer).YTTx()
	p := s.tablePath(table)
	if _, err := ytx.CreateNode(ctx, p, yt.NodeTable, &yt.CreateNodeOptions{Recursive: true, IgnoreExisting: true}); err != nil {
		t.Fatal(err)
	}
	w, err := ytx.WriteTable(ctx, ypath.NewRich(string(p)).SetAppend(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if err := w.Write(&pillar.Chunk{PageKey: k}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
}

// Tables written by operations in the master transaction commit with it,
// count as changed by it (generation, conflicts) and vanish on Abort.
func TestOperationOutputsJoinTheTransaction(t *testing.T) {
	t.Run("content_revision", func(t *testing.T) { testOperationOutputs(t, false) })
	t.Run("revision only", func(t *testing.T) { testOperationOutputs(t, true) })
}

func testOperationOutputs(t *testing.T, noContentRev bool) {
	ctx := context.Background()
	s, yc := newFakeStore(t)
	yc.NoContentRevision = noContentRev
	tx, _ := s.Begin(ctx)
	opWrite(t, s, tx, "chunks/v1", "a", "b")
	tx.Abort()
	sn, _ := s.Snapshot(ctx)
	if _, err := sn.Table(ctx, "chunks/v1"); !errors.Is(err, pillar.ErrNotFound) {
		t.Fatalf("an aborted operation output is visible: %v", err)
	}
	sn.Release()

	tx, _ = s.Begin(ctx)
	opWrite(t, s, tx, "chunks/v1", "a", "b")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	sn, _ = s.Snapshot(ctx)
	ti, err := sn.Table(ctx, "chunks/v1")
	if err != nil || ti.Rows != 2 || ti.Generation != sn.Info().Generation {
		t.Fatalf("operation output after commit: %+v %v (generation %d)", ti, err, sn.Info().Generation)
	}
	sn.Release()

	// Two transactions whose operations append to the same table: the
	// second to commit conflicts.
	a, _ := s.Begin(ctx)
	b, _ := s.Begin(ctx)
	opWrite(t, s, a, "chunks/v1", "c")
	if err := a.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	opWrite(t, s, b, "chunks/v1", "d")
	err = b.Commit(ctx)
	if !errors.Is(err, pillar.ErrConflict) || !strings.Contains(err.Error(), "chunks/v1") {
		t.Fatalf("second operation's commit: %v", err)
	}
	sn, _ = s.Snapshot(ctx)
	defer sn.Release()
	if ti, _ := sn.Table(ctx, "chunks/v1"); ti.Rows != 3 {
		t.Fatalf("chunks/v1 has %d rows, want 3 (the loser's row must not land)", ti.Rows)
	}
	if st := s.Stats(); st.Commits != 2 || st.Conflicts != 1 || st.Snapshots < 5 {
		t.Fatalf("stats %+v: want 2 commits, 1 conflict, at least 5 snapshots", st)
	}
}

// A commit landing between a snapshot's read and its locks: a table
// changed in place (same node, new revision) makes it start over and read
// the new state; a changed attribute does not (it reads the state of its
// first read, whole).
func TestSnapshotRaces(t *testing.T) {
	ctx := context.Background()
	s, yc := newFakeStore(t)
	commit := func(key string, attr int) {
		tx, err := s.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			w, _ := tx.WriteTable(ctx, "docs", pillar.Doc{}, &pillar.WriteOptions{Mode: pillar.Append})
			w.Write(&pillar.Doc{PageKey: key})
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
		}
		tx.SetAttr(ctx, "n", attr)
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	read := func(sn pillar.Snapshot) (int, int) {
		rr, err := sn.ReadTable(ctx, "docs", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer rr.Close()
		rows := 0
		for rr.Next() {
			rows++
		}
		var n int
		if err := sn.Attr(ctx, "n", &n); err != nil {
			t.Fatal(err)
		}
		return rows, n
	}
	commit("a", 1)
	docs := func() yt.NodeID {
		sn, _ := s.Snapshot(ctx)
		defer sn.Release()
		return sn.(*snapshot).st.tables["docs"].ID
	}
	id := docs()

	yc.AfterTxGet = func() { commit("b", 2) }
	sn, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rows, n := read(sn); rows != 2 || n != 2 || s.Stats().SnapshotRetries != 1 {
		t.Fatalf("after a table change mid-snapshot: %d rows, n %d, %d retries; want the new state (2 rows, n 2) after one retry", rows, n, s.Stats().SnapshotRetries)
	}
	sn.Release()
	if docs() != id {
		t.Fatal("the append replaced the docs node: the test no longer changes a table in place")
	}

	yc.AfterTxGet = func() { commit("", 3) }
	sn, err = s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	if rows, n := read(sn); rows != 2 || n != 2 || s.Stats().SnapshotRetries != 1 {
		t.Fatalf("after an attribute change mid-snapshot: %d rows, n %d, %d retries; want the first read's state (2 rows, n 2), no retry", rows, n, s.Stats().SnapshotRetries)
	}
}
