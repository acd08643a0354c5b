package ytfake

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.ytsaurus.tech/yt/go/mapreduce/spec"
	"go.ytsaurus.tech/yt/go/schema"
	"go.ytsaurus.tech/yt/go/ypath"
	"go.ytsaurus.tech/yt/go/yson"
	"go.ytsaurus.tech/yt/go/yt"
	"go.ytsaurus.tech/yt/go/yterrors"
)

type row struct {
	Key   string `yson:"key"`
	N     int64  `yson:"n"`
	Extra string `yson:"extra,omitempty"`
}

var ctx = context.Background()

func newCluster(t *testing.T) *Cluster {
	c := New(&Options{SandboxDir: t.TempDir()})
	t.Cleanup(func() { c.Close() })
	return c
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantCode(t *testing.T, err error, code yterrors.ErrorCode, what string) {
	t.Helper()
	if !yterrors.ContainsErrorCode(err, code) {
		t.Fatalf("%s: %v; want error code %d", what, err, code)
	}
}

func write(c yt.CypressClient, p ypath.YPath, rows ...row) error {
	w, err := c.(interface {
		WriteTable(context.Context, ypath.YPath, *yt.WriteTableOptions) (yt.TableWriter, error)
	}).WriteTable(ctx, p, nil)
	if err != nil {
		return err
	}
	for i := range rows {
		if err := w.Write(&rows[i]); err != nil {
			return err
		}
	}
	return w.Commit()
}

func rev(t *testing.T, c yt.CypressClient, p ypath.Path) (r, cr uint64) {
	t.Helper()
	must(t, c.GetNode(ctx, p.Attr("revision"), &r, nil))
	must(t, c.GetNode(ctx, p.Attr("content_revision"), &cr, nil))
	return r, cr
}

func TestCypress(t *testing.T) {
	c := newCluster(t)
	// A create without recursive fails when the parent is missing: the
	// SDK's creation of operation outputs depends on it.
	_, err := c.CreateNode(ctx, ypath.Path("//home/a/b"), yt.NodeTable, nil)
	wantCode(t, err, yterrors.CodeResolveError, "create under a missing folder")
	if !strings.Contains(err.Error(), `no child with key "home"`) {
		t.Fatalf("error does not name the missing key: %v", err)
	}
	_, err = c.CreateNode(ctx, ypath.Path("//home/a/b"), yt.NodeTable, &yt.CreateNodeOptions{Recursive: true})
	must(t, err)
	_, err = c.CreateNode(ctx, ypath.Path("//home/a/b"), yt.NodeTable, nil)
	wantCode(t, err, yterrors.CodeAlreadyExists, "create over a node")
	var typ yt.NodeType
	must(t, c.GetNode(ctx, ypath.Path("//home/a").Attr("type"), &typ, nil))
	if typ != yt.NodeMap {
		t.Fatalf("recursive create made a %s", typ)
	}
	// Revisions: an attribute set moves @revision only, a write both.
	p := ypath.Path("//home/a/b")
	r0, c0 := rev(t, c, p)
	must(t, c.SetNode(ctx, p.Attr("x"), 1, nil))
	r1, c1 := rev(t, c, p)
	if r1 <= r0 || c1 != c0 {
		t.Fatalf("after an attribute set: revision %d→%d, content revision %d→%d", r0, r1, c0, c1)
	}
	must(t, write(c, p, row{Key: "a"}))
	r2, c2 := rev(t, c, p)
	if r2 <= r1 || c2 <= c1 {
		t.Fatalf("after a write: revision %d→%d, content revision %d→%d", r1, r2, c1, c2)
	}
	err = c.RemoveNode(ctx, ypath.Path("//home/a"), nil)
	if err == nil {
		t.Fatal("a non-empty map node removed without recursive")
	}
	must(t, c.RemoveNode(ctx, ypath.Path("//home/a"), &yt.RemoveNodeOptions{Recursive: true}))
	if c.HasNode("//home/a/b") {
		t.Fatal("the child survived its parent's removal")
	}
}

func TestNestedTransactions(t *testing.T) {
	c := newCluster(t)
	a, err := c.BeginTx(ctx, nil)
	must(t, err)
	b, err := a.BeginTx(ctx, nil)
	must(t, err)
	_, err = b.CreateNode(ctx, ypath.Path("//tmp/x"), yt.NodeDocument, &yt.CreateNodeOptions{Attributes: map[string]any{"value": 1}})
	must(t, err)
	if ok, _ := a.NodeExists(ctx, ypath.Path("//tmp/x"), nil); ok {
		t.Fatal("a nested transaction's change is visible to the parent before it commits")
	}
	if err := a.Commit(); err == nil {
		t.Fatal("a transaction committed with a nested one open")
	}
	must(t, b.Commit())
	if ok, _ := a.NodeExists(ctx, ypath.Path("//tmp/x"), nil); !ok {
		t.Fatal("the nested commit did not reach the parent")
	}
	if c.HasNode("//tmp/x") {
		t.Fatal("the nested commit reached the trunk")
	}
	// Aborting the parent aborts what is nested in it.
	d, err := a.BeginTx(ctx, nil)
	must(t, err)
	must(t, a.Abort())
	select {
	case <-d.Finished():
	default:
		t.Fatal("the nested transaction survived its parent's abort")
	}
	_, err = d.CreateNode(ctx, ypath.Path("//tmp/y"), yt.NodeMap, nil)
	wantCode(t, err, yterrors.CodeNoSuchTransaction, "a call in an aborted transaction")
	if c.HasNode("//tmp/x") {
		t.Fatal("an aborted transaction's change landed")
	}
}

func TestImplicitLocks(t *testing.T) {
	c := newCluster(t)
	p := ypath.Path("//tmp/t")
	_, err := c.CreateNode(ctx, p, yt.NodeTable, nil)
	must(t, err)
	a, _ := c.BeginTx(ctx, nil)
	b, _ := c.BeginTx(ctx, nil)
	// An overwrite takes an exclusive lock: another transaction's write,
	// and a write outside any transaction, conflict with code 402.
	must(t, write(a, p, row{Key: "a"}))
	wantCode(t, write(b, p, row{Key: "b"}), yterrors.CodeConcurrentTransactionLockConflict, "overwrite under another's exclusive lock")
	wantCode(t, write(b, ypath.NewRich(string(p)).SetAppend(), row{Key: "b"}), yterrors.CodeConcurrentTransactionLockConflict, "append under another's exclusive lock")
	wantCode(t, c.RemoveNode(ctx, p, nil), yterrors.CodeConcurrentTransactionLockConflict, "remove outside a transaction")
	// A snapshot lock is compatible with it and pins the old version.
	res, err := b.LockNode(ctx, p, yt.LockSnapshot, nil)
	must(t, err)
	must(t, a.Commit())
	rr, err := b.ReadTable(ctx, res.NodeID.YPath(), nil)
	must(t, err)
	if rr.Next() {
		t.Fatal("a snapshot-locked table reads rows committed after the lock")
	}
	// "A shared or exclusive lock cannot be taken if the transaction ...
	// has already taken a snapshot lock."
	wantCode(t, write(b, p, row{Key: "b"}), yterrors.CodeSameTransactionLockConflict, "write after a snapshot lock")
	must(t, b.Abort())

	// Appends take shared locks: both land.
	x, _ := c.BeginTx(ctx, nil)
	y, _ := c.BeginTx(ctx, nil)
	app := ypath.NewRich(string(p)).SetAppend()
	must(t, write(x, app, row{Key: "x"}))
	must(t, write(y, app, row{Key: "y"}))
	must(t, x.Commit())
	must(t, y.Commit())
	if n := len(c.Rows(p)); n != 3 {
		t.Fatalf("%d rows after two concurrent appends to one row, want 3", n)
	}
	// Creating the same child in two transactions conflicts on the
	// parent's child_key; different children do not.
	x, _ = c.BeginTx(ctx, nil)
	y, _ = c.BeginTx(ctx, nil)
	_, err = x.CreateNode(ctx, ypath.Path("//tmp/k"), yt.NodeMap, nil)
	must(t, err)
	_, err = y.CreateNode(ctx, ypath.Path("//tmp/other"), yt.NodeMap, nil)
	must(t, err)
	_, err = y.CreateNode(ctx, ypath.Path("//tmp/k"), yt.NodeMap, nil)
	wantCode(t, err, yterrors.CodeConcurrentTransactionLockConflict, "the same child created in two transactions")
	// Attributes: shared locks with attribute_key.
	must(t, x.SetNode(ctx, p.Attr("a"), 1, nil))
	must(t, y.SetNode(ctx, p.Attr("b"), 1, nil))
	wantCode(t, y.SetNode(ctx, p.Attr("a"), 2, nil), yterrors.CodeConcurrentTransactionLockConflict, "the same attribute set in two transactions")
	must(t, x.Abort())
	must(t, y.Abort())
}

func TestWaitableLock(t *testing.T) {
	c := newCluster(t)
	_, err := c.CreateNode(ctx, ypath.Path("//tmp/g"), yt.NodeDocument, &yt.CreateNodeOptions{Attributes: map[string]any{"value": 0}})
	must(t, err)
	a, _ := c.BeginTx(ctx, nil)
	b, _ := c.BeginTx(ctx, nil)
	_, err = a.LockNode(ctx, ypath.Path("//tmp/g"), yt.LockExclusive, nil)
	must(t, err)
	_, err = b.LockNode(ctx, ypath.Path("//tmp/g"), yt.LockExclusive, nil)
	wantCode(t, err, yterrors.CodeConcurrentTransactionLockConflict, "an exclusive lock taken twice")
	res, err := b.LockNode(ctx, ypath.Path("//tmp/g"), yt.LockExclusive, &yt.LockNodeOptions{Waitable: true})
	must(t, err)
	state := func() string {
		var s string
		must(t, c.GetNode(ctx, ypath.Path("#"+res.LockID.String()).Attr("state"), &s, nil))
		return s
	}
	if s := state(); s != "pending" {
		t.Fatalf("waitable lock is %s, want pending", s)
	}
	must(t, a.Commit())
	if s := state(); s != "acquired" {
		t.Fatalf("waitable lock is %s after the holder ended, want acquired", s)
	}
	must(t, b.Abort())
}

func TestPingTimeoutAndContext(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := New(&Options{Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }, SandboxDir: t.TempDir()})
	d := yson.Duration(10 * time.Second)
	tx, err := c.BeginTx(ctx, &yt.StartTxOptions{Timeout: &d})
	must(t, err)
	_, err = tx.CreateNode(ctx, ypath.Path("//tmp/x"), yt.NodeMap, nil)
	must(t, err)
	c.StopPings(tx.ID())
	mu.Lock()
	now = now.Add(9 * time.Second)
	mu.Unlock()
	if !c.Alive(tx.ID()) {
		t.Fatal("aborted before its timeout")
	}
	mu.Lock()
	now = now.Add(2 * time.Second)
	mu.Unlock()
	if c.Alive(tx.ID()) {
		t.Fatal("a transaction without pings outlived its timeout")
	}
	wantCode(t, tx.Commit(), yterrors.CodeNoSuchTransaction, "commit after the ping timeout")
	if c.HasNode("//tmp/x") {
		t.Fatal("the timed-out transaction's node landed")
	}
	cctx, cancel := context.WithCancel(ctx)
	tx2, err := c.BeginTx(cctx, nil)
	must(t, err)
	cancel()
	select {
	case <-tx2.Finished():
	case <-time.After(5 * time.Second):
		t.Fatal("cancelling BeginTx's context did not abort the transaction")
	}
}

func TestSchemaEnforced(t *testing.T) {
	c := newCluster(t)
	s := schema.MustInfer(&row{})
	s = s.SortedBy("key")
	p := ypath.Path("//tmp/s")
	_, err := c.CreateNode(ctx, p, yt.NodeTable, &yt.CreateNodeOptions{Attributes: map[string]any{"schema": s}})
	must(t, err)
	must(t, write(c, p, row{Key: "a", N: 1}, row{Key: "b", N: 2}))
	wantCode(t, write(c, p, row{Key: "b"}, row{Key: "a"}), yterrors.CodeSortOrderViolation, "unsorted rows into a sorted table")
	// An append must not go below the last row.
	app := ypath.NewRich(string(p)).SetAppend()
	wantCode(t, write(c, app, row{Key: "a"}), yterrors.CodeSortOrderViolation, "an append below the last key")
	must(t, write(c, app, row{Key: "c"}))
	if n := len(c.Rows(p)); n != 3 {
		t.Fatalf("%d rows after an overwrite of 2 and an append of 1", n)
	}
	must(t, write(c, p, row{Key: "z"}))
	if n := len(c.Rows(p)); n != 1 {
		t.Fatalf("%d rows after an overwrite with 1", n)
	}
	w, _ := c.WriteTable(ctx, p, nil)
	must(t, w.Write(map[string]any{"key": "a", "n": 1, "unknown": 1}))
	wantCode(t, w.Commit(), yterrors.CodeSchemaViolation, "a column the strict schema lacks")
	w, _ = c.WriteTable(ctx, p, nil)
	must(t, w.Write(map[string]any{"key": "a", "n": "one"}))
	wantCode(t, w.Commit(), yterrors.CodeSchemaViolation, "a value of the wrong type")
	w, _ = c.WriteTable(ctx, p, nil)
	must(t, w.Write(map[string]any{"key": "a"}))
	wantCode(t, w.Commit(), yterrors.CodeSchemaViolation, "a required column missing")
}

func runOp(t *testing.T, c *Cluster, typ yt.OperationType, s *spec.Spec) *yt.OperationStatus {
	t.Helper()
	id, err := c.StartOperation(ctx, typ, s, nil)
	must(t, err)
	st, err := c.GetOperation(ctx, id, nil)
	must(t, err)
	return st
}

func TestOperationsWithoutJobs(t *testing.T) {
	c := newCluster(t)
	must(t, c.SetTable("//tmp/in", []row{{Key: "c"}, {Key: "a"}, {Key: "b"}}, nil))
	_, err := c.CreateNode(ctx, ypath.Path("//tmp/sorted"), yt.NodeTable, nil)
	must(t, err)
	st := runOp(t, c, yt.OperationSort, spec.Sort().AddInput(ypath.Path("//tmp/in")).SetOutput(ypath.Path("//tmp/sorted")).SortByColumns("key"))
	if st.State != yt.StateCompleted {
		t.Fatalf("sort: %s %v", st.State, st.Result.Error)
	}
	var keys []string
	must(t, c.GetNode(ctx, ypath.Path("//tmp/sorted/@sorted_by"), &keys, nil))
	if strings.Join(keys, ",") != "key" {
		t.Fatalf("sort output sorted_by %v", keys)
	}
	// A reduce of an unsorted table fails: a reduce does not sort.
	st = runOp(t, c, yt.OperationReduce, spec.Reduce().AddInput(ypath.Path("//tmp/in")).AddOutput(ypath.Path("//tmp/sorted")).ReduceByColumns("key"))
	if st.State != yt.StateFailed || !strings.Contains(st.Result.Error.Error(), "not sorted") {
		t.Fatalf("reduce of an unsorted input: %s %v", st.State, st.Result.Error)
	}
	// A sorted merge needs sorted inputs; an ordered one concatenates.
	_, err = c.CreateNode(ctx, ypath.Path("//tmp/m"), yt.NodeTable, nil)
	must(t, err)
	s := spec.Merge()
	s.MergeMode = "ordered"
	s.InputTablePaths = []ypath.YPath{ypath.Path("//tmp/sorted"), ypath.Path("//tmp/in")}
	s.OutputTablePath = ypath.Path("//tmp/m")
	if st := runOp(t, c, yt.OperationMerge, s); st.State != yt.StateCompleted || len(c.Rows("//tmp/m")) != 6 {
		t.Fatalf("ordered merge: %s %v, %d rows", st.State, st.Result.Error, len(c.Rows("//tmp/m")))
	}
	s.MergeMode = "sorted"
	if st := runOp(t, c, yt.OperationMerge, s); st.State != yt.StateFailed {
		t.Fatalf("sorted merge of an unsorted input: %s", st.State)
	}
	// An output that does not exist fails the operation (the SDK creates
	// outputs; the cluster does not).
	st = runOp(t, c, yt.OperationSort, spec.Sort().AddInput(ypath.Path("//tmp/in")).SetOutput(ypath.Path("//tmp/none")).SortByColumns("key"))
	if st.State != yt.StateFailed || !yterrors.ContainsResolveError(st.Result.Error) {
		t.Fatalf("sort into a missing table: %s %v", st.State, st.Result.Error)
	}
	// Injected abort.
	c.AbortOperations = func(*spec.Spec) bool { return true }
	st = runOp(t, c, yt.OperationSort, spec.Sort().AddInput(ypath.Path("//tmp/in")).SetOutput(ypath.Path("//tmp/sorted")).SortByColumns("key"))
	if st.State != yt.StateAborted || st.Result.Error == nil {
		t.Fatalf("injected abort: %s", st.State)
	}
	// An operation in a transaction writes there, through a nested output
	// transaction, and holds the output's lock for it.
	c.AbortOperations = nil
	tx, _ := c.BeginTx(ctx, nil)
	_, err = tx.CreateNode(ctx, ypath.Path("//tmp/out"), yt.NodeTable, nil)
	must(t, err)
	id, err := tx.StartOperation(ctx, yt.OperationSort, spec.Sort().AddInput(ypath.Path("//tmp/in")).SetOutput(ypath.Path("//tmp/out")).SortByColumns("key"), nil)
	must(t, err)
	if st, _ := c.GetOperation(ctx, id, nil); st.State != yt.StateCompleted {
		t.Fatalf("sort in a transaction: %s %v", st.State, st.Result.Error)
	}
	if c.HasNode("//tmp/out") {
		t.Fatal("an operation's output in a transaction landed before the commit")
	}
	err = write(c, ypath.Path("//tmp/in"), row{Key: "q"})
	must(t, err) // inputs are only snapshot-locked
	must(t, tx.Commit())
	if n := len(c.Rows("//tmp/out")); n != 3 {
		t.Fatalf("%d rows in the committed output", n)
	}
	if c.Running() != 0 {
		t.Fatal("operations left running")
	}
}

func TestFormats(t *testing.T) {
	type fmtAttrs struct {
		Format string `yson:"format,attr"`
		Name   string `yson:",value"`
	}
	for _, ok := range []any{nil, "yson", fmtAttrs{Format: "binary", Name: "yson"}} {
		if err := formatOK(ok); err != nil {
			t.Errorf("format %v refused: %v", ok, err)
		}
	}
	for _, bad := range []any{"json", fmtAttrs{Format: "x", Name: "skiff"}, map[string]any{"name": "dsv"}} {
		if err := formatOK(bad); err == nil {
			t.Errorf("format %v accepted: the fake speaks YSON only", bad)
		}
	}
}

// TestLockCompatibility is the documented matrix (docs:
// storage/transactions.md, "Lock compatibility") for a lock held by
// another transaction that is not an ancestor.
func TestLockCompatibility(t *testing.T) {
	const (
		S = yt.LockSnapshot
		X = yt.LockExclusive
		H = yt.LockShared
	)
	for _, tc := range []struct {
		held             yt.LockMode
		heldChild, hAttr string
		want             yt.LockMode
		child, attr      string
		conflict         bool
	}{
		{held: S, want: S}, {held: S, want: H}, {held: S, want: X}, // a snapshot lock never blocks
		{held: X, want: S}, {held: H, want: S}, // and can always be taken
		{held: X, want: H, conflict: true}, {held: X, want: X, conflict: true},
		{held: H, want: X, conflict: true},
		{held: H, want: H}, // shared without keys: always
		{held: H, heldChild: "a", want: H, child: "a", conflict: true},
		{held: H, heldChild: "a", want: H, child: "b"},
		{held: H, hAttr: "a", want: H, attr: "a", conflict: true},
		{held: H, hAttr: "a", want: H, attr: "b"},
		{held: H, heldChild: "a", want: H, attr: "a"},
	} {
		l := &lock{mode: tc.held, child: tc.heldChild, attr: tc.hAttr}
		if got := conflict(l, tc.want, tc.child, tc.attr); got != tc.conflict {
			t.Errorf("held %s(child %q, attr %q), want %s(child %q, attr %q): conflict %v, documented %v",
				tc.held, tc.heldChild, tc.hAttr, tc.want, tc.child, tc.attr, got, tc.conflict)
		}
	}
}

// TestRowRanges: a path string in YPath syntax selects rows, in reads and
// in operation inputs, as the cluster parses it (the SDK sends it as is).
func TestRowRanges(t *testing.T) {
	c := newCluster(t)
	must(t, c.SetTable("//tmp/in", []row{{Key: "e"}, {Key: "d"}, {Key: "c"}, {Key: "b"}, {Key: "a"}}, nil))
	rr, err := c.ReadTable(ctx, ypath.Path("//tmp/in[#1:#3]"), nil)
	must(t, err)
	var got []string
	for rr.Next() {
		var r row
		must(t, rr.Scan(&r))
		got = append(got, r.Key)
	}
	if strings.Join(got, "") != "dc" {
		t.Fatalf("read of [#1:#3]: %v", got)
	}
	_, err = c.CreateNode(ctx, ypath.Path("//tmp/out"), yt.NodeTable, nil)
	must(t, err)
	st := runOp(t, c, yt.OperationSort, spec.Sort().AddInput(ypath.Path("//tmp/in[#2:#5]")).SetOutput(ypath.Path("//tmp/out")).SortByColumns("key"))
	if st.State != yt.StateCompleted || len(c.Rows("//tmp/out")) != 3 {
		t.Fatalf("sort of [#2:#5]: %s %v, %d rows", st.State, st.Result.Error, len(c.Rows("//tmp/out")))
	}
	must(t, write(c, ypath.Path("<append=%true>//tmp/out"), row{Key: "z"}))
	if n := len(c.Rows("//tmp/out")); n != 4 {
		t.Fatalf("an <append=%%true> path string overwrote: %d rows", n)
	}
}
