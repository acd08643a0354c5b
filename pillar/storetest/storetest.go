package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/pillarkit/pillar/pillar"
)

// Factory returns a new, empty store for one subtest.
type Factory func(t *testing.T) pillar.Store

// Run runs every conformance subtest against stores made by open.
func Run(t *testing.T, open Factory) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := open(t)
			defer st.Close()
			if p := st.Info().Partitions; p < 2 {
				t.Fatalf("storetest: the factory's store has %d partitions; the suite needs at least 2", p)
			}
			c.f(t, st)
		})
	}
}

var cases = []struct {
	name string
	f    func(t *testing.T, st pillar.Store)
}{
	{"EmptyStore", testEmptyStore},
	{"WriteReadRanges", testWriteReadRanges},
	{"WritersInOpenOrder", testWritersInOpenOrder},
	{"ConcurrentWritersOneTx", testConcurrentWriters},
	{"ManyRows", testManyRows},
	{"ReplaceAppendDrop", testReplaceAppendDrop},
	{"TableInfo", testTableInfo},
	{"RowTypeChecks", testRowTypeChecks},
	{"UnclosedWriter", testUnclosedWriter},
	{"Attributes", testAttributes},
	{"SnapshotIsolation", testSnapshotIsolation},
	{"TxReadsItsBeginState", testTxReadsBegin},
	{"TableConflict", testTableConflict},
	{"DropConflict", testDropConflict},
	{"AttrConflict", testAttrConflict},
	{"ExpectAttr", testExpectAttr},
	{"DisjointCommits", testDisjointCommits},
	{"CounterCAS", testCounterCAS},
	{"Queue", testQueue},
	{"QueueConcurrentAppends", testQueueConcurrent},
	{"QueueValidation", testQueueValidation},
	{"Consumed", testConsumed},
	{"AbortAndDone", testAbortAndDone},
	{"Generation", testGeneration},
	{"DropThenAppend", testDropThenAppend},
	{"CanceledCommitKeepsCause", testCanceledCommit},
	{"SnapshotOutlivesChurn", testSnapshotOutlivesChurn},
}

var ctx = context.Background()

// key returns the i-th test page key (hex) and its partition under p.
func key(i int, p int) (string, int) {
	k, _, err := pillar.KeyOfURL(fmt.Sprintf("http://storetest.example/page/%d", i))
	if err != nil {
		panic(err)
	}
	return k.String(), k.Partition(p)
}

// sortedKeys returns n test keys in ascending order.
func sortedKeys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i], _ = key(i, 1)
	}
	slices.Sort(out)
	return out
}

func begin(t *testing.T, st pillar.Store) pillar.Tx {
	t.Helper()
	tx, err := st.Begin(ctx)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	return tx
}

func snap(t *testing.T, st pillar.Store) pillar.Snapshot {
	t.Helper()
	sn, err := st.Snapshot(ctx)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	t.Cleanup(sn.Release)
	return sn
}

func commit(t *testing.T, tx pillar.Tx) {
	t.Helper()
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

// writeDocs writes one writer's worth of docs whose PageKey and Title are
// the given strings (Title carries a tag so tests can tell writers apart).
func writeDocs(t *testing.T, tx pillar.Tx, table string, opts *pillar.WriteOptions, tag string, keys ...string) {
	t.Helper()
	w, err := tx.WriteTable(ctx, table, pillar.Doc{}, opts)
	if err != nil {
		t.Fatalf("WriteTable %q: %v", table, err)
	}
	for i, k := range keys {
		if err := w.Write(&pillar.Doc{PageKey: k, URL: "http://storetest.example/" + k, Title: tag, Version: int64(i)}); err != nil {
			t.Fatalf("Write %q: %v", table, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close writer of %q: %v", table, err)
	}
}

func readDocs(t *testing.T, sn pillar.Snapshot, table string, r *pillar.Range) []pillar.Doc {
	t.Helper()
	rr, err := sn.ReadTable(ctx, table, r)
	if err != nil {
		t.Fatalf("ReadTable %q %v: %v", table, r, err)
	}
	defer rr.Close()
	var out []pillar.Doc
	for rr.Next() {
		var d pillar.Doc
		if err := rr.Scan(&d); err != nil {
			t.Fatalf("Scan %q: %v", table, err)
		}
		out = append(out, d)
	}
	if err := rr.Err(); err != nil {
		t.Fatalf("read %q: %v", table, err)
	}
	return out
}

func docKeys(ds []pillar.Doc) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.PageKey
	}
	return out
}

func docTags(ds []pillar.Doc) string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Title
	}
	return strings.Join(out, ",")
}

func wantKeys(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got %d keys %v, want %d keys %v", what, len(got), short(got), len(want), short(want))
	}
}

func short(ks []string) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = k[:min(len(k), 6)]
	}
	return out
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error %v, want one wrapping %v", what, err, target)
	}
}

func testEmptyStore(t *testing.T, st pillar.Store) {
	sn := snap(t, st)
	tabs, err := sn.Tables(ctx)
	if err != nil || len(tabs) != 0 {
		t.Fatalf("Tables of an empty store: %v %v", tabs, err)
	}
	_, err = sn.Table(ctx, "docs")
	wantErr(t, "Table of a missing table", err, pillar.ErrNotFound)
	_, err = sn.ReadTable(ctx, "docs", nil)
	wantErr(t, "ReadTable of a missing table", err, pillar.ErrNotFound)
	var v any
	wantErr(t, "Attr of a missing attribute", sn.Attr(ctx, "nope", &v), pillar.ErrNotFound)
	attrs, err := sn.Attrs(ctx)
	if err != nil || len(attrs) != 0 {
		t.Fatalf("Attrs of an empty store: %v %v", attrs, err)
	}
	for p := 0; p < sn.Info().Partitions; p++ {
		if end, err := sn.QueueEnd(ctx, p); err != nil || end != 0 {
			t.Fatalf("QueueEnd(%d) of an empty store: %d %v", p, end, err)
		}
		if recs, err := sn.ReadQueue(ctx, p, 0, 10); err != nil || len(recs) != 0 {
			t.Fatalf("ReadQueue(%d) of an empty store: %v %v", p, recs, err)
		}
	}
	if ok, err := sn.Consumed(ctx, "id"); ok || err != nil {
		t.Fatalf("Consumed of an empty store: %v %v", ok, err)
	}
	if sn.Info().Partitions != st.Info().Partitions || sn.Info().Backend == "" {
		t.Fatalf("snapshot info %+v vs store info %+v", sn.Info(), st.Info())
	}
}

func testWriteReadRanges(t *testing.T, st pillar.Store) {
	keys := sortedKeys(10)
	tx := begin(t, st)
	writeDocs(t, tx, "docs", &pillar.WriteOptions{SortedBy: []string{"page_key"}}, "a", keys...)
	commit(t, tx)
	sn := snap(t, st)
	wantKeys(t, "all rows", docKeys(readDocs(t, sn, "docs", nil)), keys)
	for _, r := range []pillar.Range{{Start: 0, End: 10}, {Start: 0, End: 0}, {Start: 3, End: 7}, {Start: 9, End: 10}, {Start: 10, End: 10}} {
		wantKeys(t, fmt.Sprintf("range %v", r), docKeys(readDocs(t, sn, "docs", &r)), keys[r.Start:r.End])
	}
	for _, r := range []pillar.Range{{Start: -1, End: 2}, {Start: 0, End: 11}, {Start: 5, End: 4}} {
		if rr, err := sn.ReadTable(ctx, "docs", &r); err == nil {
			rr.Close()
			t.Fatalf("range %v outside [0,10) accepted", r)
		}
	}
	// Next without Scan moves on.
	rr, err := sn.ReadTable(ctx, "docs", &pillar.Range{Start: 2, End: 8})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rr.Next() {
		n++
	}
	if err := rr.Err(); err != nil || n != 6 {
		t.Fatalf("Next-only: %d rows, %v", n, err)
	}
	rr.Close()
	// Every column survives.
	d := readDocs(t, sn, "docs", &pillar.Range{Start: 4, End: 5})[0]
	if d.URL != "http://storetest.example/"+keys[4] || d.Title != "a" || d.Version != 4 {
		t.Fatalf("row 4 = %+v", d)
	}
}

func testWritersInOpenOrder(t *testing.T, st pillar.Store) {
	keys := sortedKeys(6)
	tx := begin(t, st)
	// Open three writers, write them out of order; rows land in open order.
	ws := make([]pillar.RowWriter, 3)
	for i := range ws {
		w, err := tx.WriteTable(ctx, "docs", pillar.Doc{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ws[i] = w
	}
	for _, i := range []int{2, 0, 1} {
		for _, k := range keys[2*i : 2*i+2] {
			if err := ws[i].Write(&pillar.Doc{PageKey: k, Title: fmt.Sprint(i)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := ws[i].Close(); err != nil {
			t.Fatal(err)
		}
	}
	commit(t, tx)
	got := readDocs(t, snap(t, st), "docs", nil)
	wantKeys(t, "three writers", docKeys(got), keys)
	if tags := docTags(got); tags != "0,0,1,1,2,2" {
		t.Fatalf("writer order %s", tags)
	}
}

// testManyRows reads ranges across the boundaries of writers and of the
// backends' internal blocks (row groups of 8192 rows in the embedded store).
func testManyRows(t *testing.T, st pillar.Store) {
	const n = 20000
	tx := begin(t, st)
	for wi, part := range [][2]int{{0, 12000}, {12000, n}} {
		w, err := tx.WriteTable(ctx, "signals", pillar.Signal{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := part[0]; i < part[1]; i++ {
			if err := w.Write(&pillar.Signal{PageKey: fmt.Sprintf("%032x", i), Name: fmt.Sprint(wi), Num: float64(i), IsNum: true}); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	commit(t, tx)
	sn := snap(t, st)
	if ti, err := sn.Table(ctx, "signals"); err != nil || ti.Rows != n {
		t.Fatalf("signals: %+v %v", ti, err)
	}
	for _, r := range []pillar.Range{{Start: 0, End: n}, {Start: 8190, End: 8194}, {Start: 11998, End: 12003}, {Start: 16383, End: 16386}, {Start: n - 1, End: n}} {
		rr, err := sn.ReadTable(ctx, "signals", &r)
		if err != nil {
			t.Fatal(err)
		}
		i := r.Start
		for rr.Next() {
			var s pillar.Signal
			if err := rr.Scan(&s); err != nil {
				t.Fatal(err)
			}
			if s.Num != float64(i) || s.PageKey != fmt.Sprintf("%032x", i) {
				t.Fatalf("range %v: row %d holds %v", r, i, s.Num)
			}
			i++
		}
		if err := rr.Err(); err != nil {
			t.Fatal(err)
		}
		rr.Close()
		if i != r.End {
			t.Fatalf("range %v: read up to %d", r, i)
		}
	}
}

func testConcurrentWriters(t *testing.T, st pillar.Store) {
	const writers, per = 4, 25
	tx := begin(t, st)
	ws := make([]pillar.RowWriter, writers)
	for i := range ws {
		w, err := tx.WriteTable(ctx, "docs", pillar.Doc{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ws[i] = w
	}
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < per; j++ {
				k, _ := key(i*per+j, 1)
				if err := w.Write(&pillar.Doc{PageKey: k, Title: fmt.Sprint(i), Version: int64(j)}); err != nil {
					errs[i] = err
					return
				}
			}
			errs[i] = w.Close()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	commit(t, tx)
	got := readDocs(t, snap(t, st), "docs", nil)
	if len(got) != writers*per {
		t.Fatalf("%d rows, want %d", len(got), writers*per)
	}
	for i, d := range got {
		if d.Title != fmt.Sprint(i/per) || d.Version != int64(i%per) {
			t.Fatalf("row %d = writer %s row %d: writers' rows are not in open order", i, d.Title, d.Version)
		}
	}
}

func testReplaceAppendDrop(t *testing.T, st pillar.Store) {
	keys := sortedKeys(6)
	tx := begin(t, st)
	writeDocs(t, tx, "chunks/v1", nil, "a", keys[0:2]...)
	commit(t, tx)

	tx = begin(t, st)
	writeDocs(t, tx, "chunks/v1", &pillar.WriteOptions{Mode: pillar.Append}, "b", keys[2:4]...)
	writeDocs(t, tx, "chunks/v1", &pillar.WriteOptions{Mode: pillar.Append}, "c", keys[4:5]...)
	commit(t, tx)
	got := readDocs(t, snap(t, st), "chunks/v1", nil)
	wantKeys(t, "after append", docKeys(got), keys[0:5])
	if tags := docTags(got); tags != "a,a,b,b,c" {
		t.Fatalf("append order %s", tags)
	}

	tx = begin(t, st)
	writeDocs(t, tx, "chunks/v1", nil, "d", keys[5])
	commit(t, tx)
	wantKeys(t, "after replace", docKeys(readDocs(t, snap(t, st), "chunks/v1", nil)), keys[5:6])

	// Append to a missing table creates it.
	tx = begin(t, st)
	writeDocs(t, tx, "subsets/fresh", &pillar.WriteOptions{Mode: pillar.Append}, "e", keys[0])
	commit(t, tx)
	wantKeys(t, "append creates", docKeys(readDocs(t, snap(t, st), "subsets/fresh", nil)), keys[0:1])

	// An empty writer makes an empty table.
	tx = begin(t, st)
	writeDocs(t, tx, "tmp/empty", nil, "f")
	commit(t, tx)
	if ti, err := snap(t, st).Table(ctx, "tmp/empty"); err != nil || ti.Rows != 0 {
		t.Fatalf("empty table: %+v %v", ti, err)
	}

	tx = begin(t, st)
	if err := tx.DropTable(ctx, "chunks/v1"); err != nil {
		t.Fatal(err)
	}
	if err := tx.DropTable(ctx, "chunks/none"); !errors.Is(err, pillar.ErrNotFound) || !strings.Contains(err.Error(), "chunks/none") {
		t.Fatalf("drop of a missing table: %v, want ErrNotFound naming chunks/none", err)
	}
	commit(t, tx)
	sn := snap(t, st)
	_, err := sn.Table(ctx, "chunks/v1")
	wantErr(t, "dropped table", err, pillar.ErrNotFound)
	tabs, err := sn.Tables(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ti := range tabs {
		names = append(names, ti.Name)
	}
	if strings.Join(names, ",") != "subsets/fresh,tmp/empty" {
		t.Fatalf("Tables = %v, want [subsets/fresh tmp/empty] in name order", names)
	}

	// Drop then write in one Tx: the new contents.
	tx = begin(t, st)
	if err := tx.DropTable(ctx, "subsets/fresh"); err != nil {
		t.Fatal(err)
	}
	writeDocs(t, tx, "subsets/fresh", nil, "g", keys[3])
	commit(t, tx)
	wantKeys(t, "drop then write", docKeys(readDocs(t, snap(t, st), "subsets/fresh", nil)), keys[3:4])
}

func testTableInfo(t *testing.T, st pillar.Store) {
	keys := sortedKeys(5)
	tx := begin(t, st)
	writeDocs(t, tx, "docs", &pillar.WriteOptions{SortedBy: []string{"page_key"}}, "a", keys...)
	w, err := tx.WriteTable(ctx, "embeddings/v/m", pillar.Embedding{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(&pillar.Embedding{PageKey: keys[0], Vector: []float32{1, -2.5, 3}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	commit(t, tx)
	sn := snap(t, st)
	ti, err := sn.Table(ctx, "docs")
	if err != nil {
		t.Fatal(err)
	}
	if ti.Name != "docs" || ti.Rows != 5 || ti.Bytes <= 0 || ti.Files < 1 || !slices.Equal(ti.SortedBy, []string{"page_key"}) {
		t.Fatalf("docs info %+v", ti)
	}
	for _, col := range []string{"page_key", "url", "text", "version"} {
		if !strings.Contains(ti.Schema, col+":") {
			t.Fatalf("docs schema %q lacks column %s", ti.Schema, col)
		}
	}
	if ti.Generation != sn.Info().Generation {
		t.Fatalf("docs generation %d, the store's %d", ti.Generation, sn.Info().Generation)
	}
	ei, err := sn.Table(ctx, "embeddings/v/m")
	if err != nil || ei.Rows != 1 || len(ei.SortedBy) != 0 {
		t.Fatalf("embeddings info %+v %v", ei, err)
	}
	rr, err := sn.ReadTable(ctx, "embeddings/v/m", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	var e pillar.Embedding
	if !rr.Next() || rr.Scan(&e) != nil || !slices.Equal(e.Vector, []float32{1, -2.5, 3}) {
		t.Fatalf("vector round trip: %+v %v", e, rr.Err())
	}
	// An append breaks a claimed order unless it claims the same.
	tx = begin(t, st)
	writeDocs(t, tx, "docs", &pillar.WriteOptions{Mode: pillar.Append}, "b", keys[0])
	commit(t, tx)
	if ti, err := snap(t, st).Table(ctx, "docs"); err != nil || len(ti.SortedBy) != 0 || ti.Rows != 6 {
		t.Fatalf("after an unsorted append: %+v %v", ti, err)
	}
}

func testRowTypeChecks(t *testing.T, st pillar.Store) {
	keys := sortedKeys(1)
	tx := begin(t, st)
	writeDocs(t, tx, "docs", nil, "a", keys...)
	commit(t, tx)

	tx = begin(t, st)
	defer tx.Abort()
	if _, err := tx.WriteTable(ctx, "docs", pillar.Chunk{}, &pillar.WriteOptions{Mode: pillar.Append}); err == nil || !strings.Contains(err.Error(), `"docs"`) {
		t.Fatalf("append of another row type: %v (want an error naming \"docs\")", err)
	}
	if _, err := tx.WriteTable(ctx, "x", 42, nil); err == nil {
		t.Fatal("row type int accepted")
	}
	for _, bad := range []string{"", "/abs", "a//b", "a/", "a/../b"} {
		if _, err := tx.WriteTable(ctx, bad, pillar.Doc{}, nil); err == nil {
			t.Fatalf("table name %q accepted", bad)
		}
	}
	w, err := tx.WriteTable(ctx, "t", pillar.Doc{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(&pillar.Chunk{PageKey: keys[0]}); err == nil {
		t.Fatal("a Chunk row accepted by a writer of Docs")
	}
	w.Close()
}

func testUnclosedWriter(t *testing.T, st pillar.Store) {
	keys := sortedKeys(2)
	tx := begin(t, st)
	writeDocs(t, tx, "docs", nil, "a", keys[0])
	commit(t, tx)

	tx = begin(t, st)
	w, err := tx.WriteTable(ctx, "docs", pillar.Doc{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(&pillar.Doc{PageKey: keys[1]}); err != nil {
		t.Fatal(err)
	}
	if err := tx.SetAttr(ctx, "a", 1); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("Commit with an unclosed writer succeeded")
	}
	tx.Abort()
	w.Close()
	sn := snap(t, st)
	wantKeys(t, "after a refused commit", docKeys(readDocs(t, sn, "docs", nil)), keys[0:1])
	var v int
	wantErr(t, "attribute of a refused commit", sn.Attr(ctx, "a", &v), pillar.ErrNotFound)
}

type attrValue struct {
	S string            `json:"s"`
	N int64             `json:"n"`
	F float64           `json:"f"`
	L []int             `json:"l"`
	M map[string]string `json:"m"`
}

func testAttributes(t *testing.T, st pillar.Store) {
	names := []string{"published", "versions/recursive-1/hash-d64", "lorry/partition/p00001", "odd name: with [brackets] & @at *star"}
	val := attrValue{S: "x\x00y ü", N: 1 << 62, F: 0.1, L: []int{1, 2}, M: map[string]string{"k": "v"}}
	tx := begin(t, st)
	for i, n := range names {
		v := val
		v.N += int64(i)
		if err := tx.SetAttr(ctx, n, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.SetAttr(ctx, "bad", func() {}); err == nil {
		t.Fatal("an attribute that is not JSON-encodable accepted")
	}
	commit(t, tx)
	sn := snap(t, st)
	for i, n := range names {
		var got attrValue
		if err := sn.Attr(ctx, n, &got); err != nil {
			t.Fatalf("Attr %q: %v", n, err)
		}
		want := val
		want.N += int64(i)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Attr %q = %+v, want %+v", n, got, want)
		}
	}
	all, err := sn.Attrs(ctx)
	if err != nil || len(all) != len(names) {
		t.Fatalf("Attrs: %d %v", len(all), err)
	}
	if string(all["published"]) == "" || !strings.Contains(string(all["published"]), `"n":4611686018427387904`) {
		t.Fatalf("Attrs[published] = %s (want the JSON value)", all["published"])
	}
	tx = begin(t, st)
	if err := tx.DeleteAttr(ctx, names[1]); err != nil {
		t.Fatal(err)
	}
	if err := tx.SetAttr(ctx, names[0], "replaced"); err != nil {
		t.Fatal(err)
	}
	commit(t, tx)
	sn2 := snap(t, st)
	var s string
	if err := sn2.Attr(ctx, names[0], &s); err != nil || s != "replaced" {
		t.Fatalf("replaced attribute: %q %v", s, err)
	}
	var got attrValue
	wantErr(t, "deleted attribute", sn2.Attr(ctx, names[1], &got), pillar.ErrNotFound)
	if all, _ := sn2.Attrs(ctx); len(all) != len(names)-1 {
		t.Fatalf("Attrs after delete: %d", len(all))
	}
	// Decoding into a wrong type is an error.
	var n int
	if err := sn2.Attr(ctx, names[0], &n); err == nil {
		t.Fatal("a string attribute decoded into an int")
	}
}

func testSnapshotIsolation(t *testing.T, st pillar.Store) {
	keys := sortedKeys(4)
	k, p := key(0, st.Info().Partitions)
	tx := begin(t, st)
	writeDocs(t, tx, "docs", nil, "old", keys[0:2]...)
	tx.SetAttr(ctx, "tag", "old")
	tx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(p), PageKey: k, Op: pillar.OpPut})
	commit(t, tx)
	old := snap(t, st)

	tx = begin(t, st)
	writeDocs(t, tx, "docs", nil, "new", keys[2:4]...)
	writeDocs(t, tx, "chunks/v", nil, "new", keys[0])
	tx.SetAttr(ctx, "tag", "new")
	tx.SetAttr(ctx, "other", 1)
	tx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(p), PageKey: k, Op: pillar.OpDelete})
	tx.MarkConsumed(ctx, "run-new")
	commit(t, tx)

	// The old snapshot still reads its generation, whole.
	wantKeys(t, "old snapshot docs", docKeys(readDocs(t, old, "docs", nil)), keys[0:2])
	_, err := old.Table(ctx, "chunks/v")
	wantErr(t, "old snapshot: table created later", err, pillar.ErrNotFound)
	var tag string
	if err := old.Attr(ctx, "tag", &tag); err != nil || tag != "old" {
		t.Fatalf("old snapshot attr: %q %v", tag, err)
	}
	wantErr(t, "old snapshot: attribute set later", old.Attr(ctx, "other", new(int)), pillar.ErrNotFound)
	if end, err := old.QueueEnd(ctx, p); err != nil || end != 1 {
		t.Fatalf("old snapshot queue end %d %v", end, err)
	}
	if recs, err := old.ReadQueue(ctx, p, 0, 10); err != nil || len(recs) != 1 {
		t.Fatalf("old snapshot reads %d queue records, %v; want 1", len(recs), err)
	}
	if ok, _ := old.Consumed(ctx, "run-new"); ok {
		t.Fatal("old snapshot sees a later consumed mark")
	}
	cur := snap(t, st)
	wantKeys(t, "new snapshot docs", docKeys(readDocs(t, cur, "docs", nil)), keys[2:4])
	// A table dropped after a snapshot still reads in it.
	tx = begin(t, st)
	if err := tx.DropTable(ctx, "chunks/v"); err != nil {
		t.Fatal(err)
	}
	commit(t, tx)
	wantKeys(t, "snapshot of a table dropped since", docKeys(readDocs(t, cur, "chunks/v", nil)), keys[0:1])
	if cur.Info().Generation <= old.Info().Generation {
		t.Fatalf("generation %d after %d", cur.Info().Generation, old.Info().Generation)
	}
}

func testTxReadsBegin(t *testing.T, st pillar.Store) {
	keys := sortedKeys(3)
	tx := begin(t, st)
	writeDocs(t, tx, "docs", nil, "a", keys[0])
	tx.SetAttr(ctx, "x", "a")
	commit(t, tx)

	tx = begin(t, st)
	defer tx.Abort()
	writeDocs(t, tx, "docs", nil, "b", keys[1])
	tx.SetAttr(ctx, "x", "b")
	// Its own writes are not visible to its reads.
	wantKeys(t, "tx reads", docKeys(readDocs(t, tx, "docs", nil)), keys[0:1])
	var x string
	if err := tx.Attr(ctx, "x", &x); err != nil || x != "a" {
		t.Fatalf("tx attr %q %v", x, err)
	}
	// Nor are commits of others after its Begin.
	other := begin(t, st)
	writeDocs(t, other, "chunks/c", nil, "c", keys[2])
	commit(t, other)
	_, err := tx.Table(ctx, "chunks/c")
	wantErr(t, "tx reads a table committed after its Begin", err, pillar.ErrNotFound)
	commit(t, tx)
}

func testTableConflict(t *testing.T, st pillar.Store) {
	keys := sortedKeys(3)
	tx := begin(t, st)
	writeDocs(t, tx, "docs", nil, "base", keys[0])
	commit(t, tx)

	a := begin(t, st)
	b := begin(t, st)
	writeDocs(t, a, "docs", nil, "a", keys[1])
	commit(t, a)
	// b began before a committed. Its write (or, for a backend that locks
	// early, the commit) fails with ErrConflict naming the table.
	err := writeOrCommit(b, "docs", pillar.Replace, keys[2])
	wantErr(t, "second writer", err, pillar.ErrConflict)
	if !strings.Contains(err.Error(), "docs") {
		t.Fatalf("conflict error does not name the table: %v", err)
	}
	b.Abort()
	got := readDocs(t, snap(t, st), "docs", nil)
	if docTags(got) != "a" {
		t.Fatalf("after the conflict docs hold %q; want the first committer's rows only", docTags(got))
	}
	// Appends conflict too: they change the table.
	c := begin(t, st)
	d := begin(t, st)
	writeDocs(t, c, "docs", &pillar.WriteOptions{Mode: pillar.Append}, "c", keys[0])
	commit(t, c)
	wantErr(t, "append after another's append", writeOrCommit(d, "docs", pillar.Append, keys[2]), pillar.ErrConflict)
	d.Abort()
	// A transaction that begins after the commit is fine.
	e := begin(t, st)
	writeDocs(t, e, "docs", nil, "e", keys[2])
	commit(t, e)
}

// writeOrCommit writes rows into table and commits; it returns the first
// error (a backend may report a conflict at WriteTable, Close or Commit).
func writeOrCommit(tx pillar.Tx, table string, mode pillar.WriteMode, keys ...string) error {
	w, err := tx.WriteTable(ctx, table, pillar.Doc{}, &pillar.WriteOptions{Mode: mode})
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := w.Write(&pillar.Doc{PageKey: k, Title: "loser"}); err != nil {
			w.Close()
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func testDropConflict(t *testing.T, st pillar.Store) {
	keys := sortedKeys(2)
	tx := begin(t, st)
	writeDocs(t, tx, "tmp/scratch", nil, "base", keys[0])
	commit(t, tx)
	a := begin(t, st)
	b := begin(t, st)
	writeDocs(t, a, "tmp/scratch", nil, "a", keys[1])
	commit(t, a)
	err := b.DropTable(ctx, "tmp/scratch")
	if err == nil {
		err = b.Commit(ctx)
	}
	wantErr(t, "drop of a table changed since Begin", err, pillar.ErrConflict)
	b.Abort()
	if got := readDocs(t, snap(t, st), "tmp/scratch", nil); docTags(got) != "a" {
		t.Fatalf("scratch = %q after a refused drop", docTags(got))
	}
}

func testAttrConflict(t *testing.T, st pillar.Store) {
	a := begin(t, st)
	b := begin(t, st)
	a.SetAttr(ctx, "published", "a")
	b.SetAttr(ctx, "published", "b")
	b.SetAttr(ctx, "unrelated", "b")
	commit(t, a)
	err := b.Commit(ctx)
	wantErr(t, "second SetAttr", err, pillar.ErrConflict)
	if !strings.Contains(err.Error(), "published") {
		t.Fatalf("conflict error does not name the attribute: %v", err)
	}
	sn := snap(t, st)
	var s string
	if err := sn.Attr(ctx, "published", &s); err != nil || s != "a" {
		t.Fatalf("published = %q %v", s, err)
	}
	wantErr(t, "attribute of the loser", sn.Attr(ctx, "unrelated", &s), pillar.ErrNotFound)
	// Deletes conflict as sets do.
	c := begin(t, st)
	d := begin(t, st)
	c.DeleteAttr(ctx, "published")
	d.SetAttr(ctx, "published", "d")
	commit(t, c)
	wantErr(t, "set after another's delete", d.Commit(ctx), pillar.ErrConflict)
}

func testExpectAttr(t *testing.T, st pillar.Store) {
	tx := begin(t, st)
	tx.SetAttr(ctx, "offset", 0)
	commit(t, tx)
	// Unchanged: the expectation holds and nothing is written.
	a := begin(t, st)
	if err := a.ExpectAttr(ctx, "offset"); err != nil {
		t.Fatal(err)
	}
	a.SetAttr(ctx, "other", 1)
	commit(t, a)
	var n int
	if err := snap(t, st).Attr(ctx, "offset", &n); err != nil || n != 0 {
		t.Fatalf("offset %d %v after an ExpectAttr-only commit", n, err)
	}
	// Changed meanwhile: ErrConflict, and nothing of the loser is visible.
	b := begin(t, st)
	c := begin(t, st)
	b.SetAttr(ctx, "offset", 1)
	c.ExpectAttr(ctx, "offset")
	k, p := key(0, st.Info().Partitions)
	c.Enqueue(ctx, pillar.ExportRecord{Partition: int32(p), PageKey: k, Op: pillar.OpPut})
	c.MarkConsumed(ctx, "c")
	commit(t, b)
	wantErr(t, "ExpectAttr after another's SetAttr", c.Commit(ctx), pillar.ErrConflict)
	sn := snap(t, st)
	if end, _ := sn.QueueEnd(ctx, p); end != 0 {
		t.Fatalf("the loser's queue records are visible: end %d", end)
	}
	if ok, _ := sn.Consumed(ctx, "c"); ok {
		t.Fatal("the loser's consumed mark is visible")
	}
	// Expecting an absent attribute fails when someone creates it.
	d := begin(t, st)
	e := begin(t, st)
	d.ExpectAttr(ctx, "lease")
	d.SetAttr(ctx, "lease", "d")
	e.SetAttr(ctx, "lease", "e")
	commit(t, e)
	wantErr(t, "ExpectAttr of an absent attribute someone created", d.Commit(ctx), pillar.ErrConflict)
}

func testDisjointCommits(t *testing.T, st pillar.Store) {
	keys := sortedKeys(2)
	a := begin(t, st)
	b := begin(t, st)
	c := begin(t, st)
	writeDocs(t, a, "chunks/a", nil, "a", keys[0])
	a.SetAttr(ctx, "lorry/partition/p00000", 1)
	writeDocs(t, b, "chunks/b", nil, "b", keys[1])
	b.SetAttr(ctx, "lorry/partition/p00001", 1)
	c.MarkConsumed(ctx, "c")
	commit(t, a)
	commit(t, b)
	commit(t, c)
	sn := snap(t, st)
	wantKeys(t, "chunks/a", docKeys(readDocs(t, sn, "chunks/a", nil)), keys[0:1])
	wantKeys(t, "chunks/b", docKeys(readDocs(t, sn, "chunks/b", nil)), keys[1:2])
	if ok, _ := sn.Consumed(ctx, "c"); !ok {
		t.Fatal("consumed mark lost")
	}
}

// testCounterCAS: goroutines increment one attribute with read, set and
// retry on ErrConflict; no increment is lost (Lorry's pattern).
func testCounterCAS(t *testing.T, st pillar.Store) {
	const workers, each = 4, 5
	tx := begin(t, st)
	tx.SetAttr(ctx, "counter", 0)
	commit(t, tx)
	var wg sync.WaitGroup
	errs := make([]error, workers)
	conflicts := make([]int, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; {
				tx, err := st.Begin(ctx)
				if err != nil {
					errs[w] = err
					return
				}
				var n int
				if err := tx.Attr(ctx, "counter", &n); err != nil {
					tx.Abort()
					errs[w] = err
					return
				}
				if err := tx.SetAttr(ctx, "counter", n+1); err != nil {
					tx.Abort()
					errs[w] = err
					return
				}
				err = tx.Commit(ctx)
				tx.Abort()
				if errors.Is(err, pillar.ErrConflict) {
					conflicts[w]++
					if conflicts[w] > 1000 {
						errs[w] = fmt.Errorf("worker %d: over 1000 conflicts", w)
						return
					}
					continue
				}
				if err != nil {
					errs[w] = err
					return
				}
				i++
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := snap(t, st).Attr(ctx, "counter", &n); err != nil || n != workers*each {
		t.Fatalf("counter = %d %v, want %d (conflicts per worker %v)", n, err, workers*each, conflicts)
	}
}

// queueRecs returns n records of partition p (keys of that partition).
func queueRecs(parts, p, n int, cause string) []pillar.ExportRecord {
	var out []pillar.ExportRecord
	for i := 0; len(out) < n; i++ {
		k, kp := key(i, parts)
		if kp != p {
			continue
		}
		op := pillar.OpPut
		if len(out)%3 == 2 {
			op = pillar.OpDelete
		}
		out = append(out, pillar.ExportRecord{Partition: int32(p), PageKey: k, Op: op, Value: []byte(fmt.Sprintf("%s-%d", cause, len(out))), Cause: cause})
	}
	return out
}

func testQueue(t *testing.T, st pillar.Store) {
	parts := st.Info().Partitions
	tx := begin(t, st)
	if err := tx.Enqueue(ctx, queueRecs(parts, 0, 3, "a")...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Enqueue(ctx, queueRecs(parts, 1, 2, "a")...); err != nil {
		t.Fatal(err)
	}
	tx.Enqueue(ctx) // nothing: fine
	commit(t, tx)
	tx = begin(t, st)
	tx.Enqueue(ctx, queueRecs(parts, 0, 2, "b")...)
	commit(t, tx)

	sn := snap(t, st)
	for p, want := range map[int]int64{0: 5, 1: 2} {
		if end, err := sn.QueueEnd(ctx, p); err != nil || end != want {
			t.Fatalf("QueueEnd(%d) = %d %v, want %d", p, end, err, want)
		}
	}
	recs, err := sn.ReadQueue(ctx, 0, 0, 100)
	if err != nil || len(recs) != 5 {
		t.Fatalf("ReadQueue(0): %d records %v", len(recs), err)
	}
	wantVals := []string{"a-0", "a-1", "a-2", "b-0", "b-1"}
	for i, r := range recs {
		if r.Offset != int64(i) || r.Partition != 0 || string(r.Value) != wantVals[i] || r.CommittedAt == 0 {
			t.Fatalf("record %d = %+v", i, r)
		}
		if want := queueRecs(parts, 0, 3, "x")[i%3]; i < 3 && (r.PageKey != want.PageKey || r.Op != want.Op) {
			t.Fatalf("record %d = %s %s, want %s %s", i, r.PageKey, r.Op, want.PageKey, want.Op)
		}
	}
	if recs[0].CommittedAt > recs[3].CommittedAt {
		t.Fatalf("CommittedAt goes back: %d then %d", recs[0].CommittedAt, recs[3].CommittedAt)
	}
	if r, err := sn.ReadQueue(ctx, 0, 2, 2); err != nil || len(r) != 2 || r[0].Offset != 2 || r[1].Offset != 3 {
		t.Fatalf("ReadQueue(0, 2, 2) = %+v %v", r, err)
	}
	if r, err := sn.ReadQueue(ctx, 0, 4, 10); err != nil || len(r) != 1 || r[0].Offset != 4 {
		t.Fatalf("ReadQueue(0, 4, 10) = %+v %v", r, err)
	}
	if r, err := sn.ReadQueue(ctx, 0, 5, 10); err != nil || len(r) != 0 {
		t.Fatalf("ReadQueue at the end = %+v %v", r, err)
	}
	if r, err := sn.ReadQueue(ctx, 0, 0, 0); err != nil || len(r) != 0 {
		t.Fatalf("ReadQueue limit 0 = %+v %v", r, err)
	}
	if r, err := sn.ReadQueue(ctx, 1, 0, 10); err != nil || len(r) != 2 || r[1].Offset != 1 {
		t.Fatalf("ReadQueue(1) = %+v %v", r, err)
	}
	if _, err := sn.QueueEnd(ctx, parts); err == nil {
		t.Fatalf("QueueEnd(%d) of a store with %d partitions accepted", parts, parts)
	}
	if _, err := sn.ReadQueue(ctx, -1, 0, 1); err == nil {
		t.Fatal("ReadQueue(-1) accepted")
	}
}

// testQueueConcurrent: transactions that began together all append; offsets
// stay dense and each transaction's records are contiguous.
func testQueueConcurrent(t *testing.T, st pillar.Store) {
	const txs, per = 4, 3
	parts := st.Info().Partitions
	open := make([]pillar.Tx, txs)
	for i := range open {
		open[i] = begin(t, st)
		if err := open[i].Enqueue(ctx, queueRecs(parts, 1, per, fmt.Sprint(i))...); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, txs)
	for i, tx := range open {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = tx.Commit(ctx) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("queue appends conflicted: %v", err)
	}
	recs, err := snap(t, st).ReadQueue(ctx, 1, 0, 100)
	if err != nil || len(recs) != txs*per {
		t.Fatalf("%d records %v, want %d", len(recs), err, txs*per)
	}
	seen := map[string]bool{}
	for i := 0; i < len(recs); i += per {
		cause := recs[i].Cause
		if seen[cause] {
			t.Fatalf("records of tx %s are not contiguous", cause)
		}
		seen[cause] = true
		for j := 0; j < per; j++ {
			r := recs[i+j]
			if r.Offset != int64(i+j) || r.Cause != cause || string(r.Value) != fmt.Sprintf("%s-%d", cause, j) {
				t.Fatalf("offset %d: %+v", i+j, r)
			}
		}
	}
}

func testQueueValidation(t *testing.T, st pillar.Store) {
	parts := st.Info().Partitions
	k, p := key(0, parts)
	tx := begin(t, st)
	defer tx.Abort()
	for _, r := range []pillar.ExportRecord{
		{Partition: int32(parts), PageKey: k, Op: pillar.OpPut},
		{Partition: -1, PageKey: k, Op: pillar.OpPut},
		{Partition: int32((p + 1) % parts), PageKey: k, Op: pillar.OpPut},
		{Partition: int32(p), PageKey: "not-a-key", Op: pillar.OpPut},
		{Partition: int32(p), PageKey: k, Op: "upsert"},
	} {
		if err := tx.Enqueue(ctx, r); err == nil {
			t.Fatalf("invalid record accepted: %+v", r)
		}
	}
}

func testConsumed(t *testing.T, st pillar.Store) {
	tx := begin(t, st)
	if err := tx.MarkConsumed(ctx, "run-1", "run-2", "odd/id with spaces"); err != nil {
		t.Fatal(err)
	}
	commit(t, tx)
	tx = begin(t, st)
	tx.MarkConsumed(ctx, "run-1") // again: fine
	commit(t, tx)
	sn := snap(t, st)
	for _, id := range []string{"run-1", "run-2", "odd/id with spaces"} {
		if ok, err := sn.Consumed(ctx, id); !ok || err != nil {
			t.Fatalf("Consumed(%q) = %v %v", id, ok, err)
		}
	}
	if ok, err := sn.Consumed(ctx, "run-3"); ok || err != nil {
		t.Fatalf("Consumed(run-3) = %v %v", ok, err)
	}
}

func testAbortAndDone(t *testing.T, st pillar.Store) {
	keys := sortedKeys(1)
	k, p := key(0, st.Info().Partitions)
	tx := begin(t, st)
	writeDocs(t, tx, "docs", nil, "a", keys...)
	tx.SetAttr(ctx, "x", 1)
	tx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(p), PageKey: k, Op: pillar.OpPut})
	tx.MarkConsumed(ctx, "id")
	if err := tx.Abort(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Abort(); err != nil {
		t.Fatalf("second Abort: %v", err)
	}
	wantErr(t, "Commit after Abort", tx.Commit(ctx), pillar.ErrTxDone)
	sn := snap(t, st)
	if tabs, _ := sn.Tables(ctx); len(tabs) != 0 {
		t.Fatalf("tables after Abort: %v", tabs)
	}
	wantErr(t, "attribute after Abort", sn.Attr(ctx, "x", new(int)), pillar.ErrNotFound)
	if end, _ := sn.QueueEnd(ctx, p); end != 0 {
		t.Fatalf("queue after Abort: %d", end)
	}
	if ok, _ := sn.Consumed(ctx, "id"); ok {
		t.Fatal("consumed after Abort")
	}

	tx = begin(t, st)
	tx.SetAttr(ctx, "x", 2)
	commit(t, tx)
	if err := tx.Abort(); err != nil {
		t.Fatalf("Abort after Commit: %v", err)
	}
	wantErr(t, "Commit after Commit", tx.Commit(ctx), pillar.ErrTxDone)
	wantErr(t, "SetAttr after Commit", tx.SetAttr(ctx, "x", 3), pillar.ErrTxDone)
	wantErr(t, "DeleteAttr after Commit", tx.DeleteAttr(ctx, "x"), pillar.ErrTxDone)
	wantErr(t, "ExpectAttr after Commit", tx.ExpectAttr(ctx, "x"), pillar.ErrTxDone)
	wantErr(t, "MarkConsumed after Commit", tx.MarkConsumed(ctx, "y"), pillar.ErrTxDone)
	wantErr(t, "Enqueue after Commit", tx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(p), PageKey: k, Op: pillar.OpPut}), pillar.ErrTxDone)
	_, err := tx.WriteTable(ctx, "docs", pillar.Doc{}, nil)
	wantErr(t, "WriteTable after Commit", err, pillar.ErrTxDone)
	wantErr(t, "DropTable after Commit", tx.DropTable(ctx, "docs"), pillar.ErrTxDone)
	var x int
	if err := snap(t, st).Attr(ctx, "x", &x); err != nil || x != 2 {
		t.Fatalf("x = %d %v", x, err)
	}
}

func testGeneration(t *testing.T, st pillar.Store) {
	keys := sortedKeys(2)
	g0 := snap(t, st).Info().Generation
	tx := begin(t, st)
	writeDocs(t, tx, "docs", nil, "a", keys[0])
	commit(t, tx)
	sn1 := snap(t, st)
	g1 := sn1.Info().Generation
	if g1 <= g0 {
		t.Fatalf("generation %d after a commit from %d", g1, g0)
	}
	tx = begin(t, st)
	if tx.Info().Generation != g1 {
		t.Fatalf("Tx reads generation %d, the latest is %d", tx.Info().Generation, g1)
	}
	writeDocs(t, tx, "chunks/x", nil, "b", keys[1])
	commit(t, tx)
	sn2 := snap(t, st)
	g2 := sn2.Info().Generation
	if g2 <= g1 || st.Info().Generation != g2 {
		t.Fatalf("generations %d, %d; store says %d", g1, g2, st.Info().Generation)
	}
	d, _ := sn2.Table(ctx, "docs")
	c, _ := sn2.Table(ctx, "chunks/x")
	if d.Generation != g1 || c.Generation != g2 {
		t.Fatalf("table generations docs %d (want %d), chunks/x %d (want %d)", d.Generation, g1, c.Generation, g2)
	}
}

// testDropThenAppend: a table dropped and then written with Append in the
// same Tx has exactly the new rows (nothing is left to append to); written
// and then dropped, it is gone.
func testDropThenAppend(t *testing.T, st pillar.Store) {
	keys := sortedKeys(4)
	tx := begin(t, st)
	writeDocs(t, tx, "docs", nil, "a", keys[0:2]...)
	writeDocs(t, tx, "tmp/x", nil, "a", keys[0])
	commit(t, tx)

	tx = begin(t, st)
	if err := tx.DropTable(ctx, "docs"); err != nil {
		t.Fatal(err)
	}
	writeDocs(t, tx, "docs", &pillar.WriteOptions{Mode: pillar.Append}, "b", keys[2:4]...)
	writeDocs(t, tx, "tmp/x", nil, "b", keys[1])
	if err := tx.DropTable(ctx, "tmp/x"); err != nil {
		t.Fatal(err)
	}
	commit(t, tx)
	sn := snap(t, st)
	got := readDocs(t, sn, "docs", nil)
	wantKeys(t, "drop then append", docKeys(got), keys[2:4])
	if tags := docTags(got); tags != "b,b" {
		t.Fatalf("drop then append: tags %s, want b,b", tags)
	}
	_, err := sn.Table(ctx, "tmp/x")
	wantErr(t, "write then drop", err, pillar.ErrNotFound)
}

// testCanceledCommit: a Commit whose context is canceled fails with an
// error that wraps context.Canceled (errors.Is), commits nothing, and
// leaves the store writable.
func testCanceledCommit(t *testing.T, st pillar.Store) {
	keys := sortedKeys(2)
	k, p := key(0, st.Info().Partitions)
	tx := begin(t, st)
	writeDocs(t, tx, "docs", nil, "a", keys...)
	if err := tx.SetAttr(ctx, "x", 1); err != nil {
		t.Fatal(err)
	}
	if err := tx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(p), PageKey: k, Op: pillar.OpPut}); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	err := tx.Commit(cctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Commit with a canceled context: %v, want an error wrapping context.Canceled", err)
	}
	sn := snap(t, st)
	if _, err := sn.Table(ctx, "docs"); !errors.Is(err, pillar.ErrNotFound) {
		t.Fatalf("docs after a canceled commit: %v, want ErrNotFound", err)
	}
	wantErr(t, "attribute after a canceled commit", sn.Attr(ctx, "x", new(int)), pillar.ErrNotFound)
	if end, _ := sn.QueueEnd(ctx, p); end != 0 {
		t.Fatalf("queue end %d after a canceled commit", end)
	}
	tx = begin(t, st)
	writeDocs(t, tx, "docs", nil, "b", keys...)
	commit(t, tx)
	wantKeys(t, "after retry", docKeys(readDocs(t, snap(t, st), "docs", nil)), keys)
}

// FaultFactory returns a new, empty store whose I/O can be made to fail:
// after fail(err), every operation of the backend's commit path that writes
// (a file, a rename, a Cypress node) returns err (or an error wrapping it),
// until fail(nil). Reads are not affected.
type FaultFactory func(t *testing.T) (st pillar.Store, fail func(err error))

// RunFaults runs the fault cases against stores made by open.
func RunFaults(t *testing.T, open FaultFactory) {
	for _, c := range faultCases {
		t.Run(c.name, func(t *testing.T) {
			st, fail := open(t)
			defer st.Close()
			defer fail(nil)
			c.f(t, st, fail)
		})
	}
}

var faultCases = []struct {
	name string
	f    func(t *testing.T, st pillar.Store, fail func(error))
}{
	{"IOErrorKeepsCause", testIOErrorKeepsCause},
}

// ErrInjected is the I/O error the fault cases inject. It wraps
// syscall.EIO, as a failing disk's error would.
var ErrInjected = fmt.Errorf("storetest: injected I/O fault: %w", syscall.EIO)

// testIOErrorKeepsCause: a commit whose write fails returns an error from
// which the underlying I/O error is reachable (errors.Is), commits nothing
// (the previous state reads as before) and leaves the store writable.
func testIOErrorKeepsCause(t *testing.T, st pillar.Store, fail func(error)) {
	keys := sortedKeys(4)
	k, p := key(0, st.Info().Partitions)
	tx := begin(t, st)
	writeDocs(t, tx, "docs", nil, "a", keys[0:2]...)
	commit(t, tx)

	tx = begin(t, st)
	writeDocs(t, tx, "docs", nil, "b", keys[2:4]...)
	if err := tx.SetAttr(ctx, "x", 1); err != nil {
		t.Fatal(err)
	}
	if err := tx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(p), PageKey: k, Op: pillar.OpPut}); err != nil {
		t.Fatal(err)
	}
	fail(ErrInjected)
	err := tx.Commit(ctx)
	fail(nil)
	if err == nil {
		t.Fatal("Commit succeeded with every write failing")
	}
	if !errors.Is(err, ErrInjected) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Commit: %v, want an error wrapping the injected I/O error (and syscall.EIO)", err)
	}
	sn := snap(t, st)
	got := readDocs(t, sn, "docs", nil)
	wantKeys(t, "docs after a failed commit", docKeys(got), keys[0:2])
	wantErr(t, "attribute after a failed commit", sn.Attr(ctx, "x", new(int)), pillar.ErrNotFound)
	if end, _ := sn.QueueEnd(ctx, p); end != 0 {
		t.Fatalf("queue end %d after a failed commit", end)
	}
	tx = begin(t, st)
	writeDocs(t, tx, "docs", nil, "c", keys[2:4]...)
	commit(t, tx)
	wantKeys(t, "docs after the retry", docKeys(readDocs(t, snap(t, st), "docs", nil)), keys[2:4])
}

// testSnapshotOutlivesChurn: a snapshot (and an open Tx) held across many
// commits that replace, append to and drop what it reads still reads all
// of it, queue included; a backend's cleanup or compaction must not take
// its files. Backends run the suite with their time-based retention as
// short as it goes, so that only the snapshot's own hold protects it.
func testSnapshotOutlivesChurn(t *testing.T, st pillar.Store) {
	keys := sortedKeys(40)
	k, p := key(0, st.Info().Partitions)
	tx := begin(t, st)
	writeDocs(t, tx, "docs", nil, "held", keys...)
	writeDocs(t, tx, "chunks/v", nil, "held", keys[0:5]...)
	tx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(p), PageKey: k, Op: pillar.OpPut, Value: []byte("held")})
	commit(t, tx)
	held := snap(t, st)
	heldTx := begin(t, st)
	defer heldTx.Abort()
	for i := 0; i < 20; i++ {
		tx := begin(t, st)
		writeDocs(t, tx, "docs", nil, fmt.Sprint(i), keys[i%7])
		if i%3 == 0 {
			writeDocs(t, tx, "chunks/v", &pillar.WriteOptions{Mode: pillar.Append}, fmt.Sprint(i), keys[5+i%5])
		}
		if i == 10 {
			if err := tx.DropTable(ctx, "chunks/v"); err != nil {
				t.Fatal(err)
			}
		}
		tx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(p), PageKey: k, Op: pillar.OpDelete})
		commit(t, tx)
	}
	for _, sn := range []pillar.Snapshot{held, heldTx} {
		got := readDocs(t, sn, "docs", nil)
		wantKeys(t, "held snapshot docs after 20 commits", docKeys(got), keys)
		if tags := docTags(got); strings.Count(tags, "held") != len(keys) {
			t.Fatalf("held snapshot docs tags %s", tags)
		}
		wantKeys(t, "held snapshot chunks/v (dropped since)", docKeys(readDocs(t, sn, "chunks/v", nil)), keys[0:5])
		recs, err := sn.ReadQueue(ctx, p, 0, 100)
		if err != nil || len(recs) != 1 || string(recs[0].Value) != "held" {
			t.Fatalf("held snapshot queue: %d records, %v", len(recs), err)
		}
	}
}
