package jobs_test

// This file holds a FAKE YTsaurus cluster: a yt.Client that keeps Cypress
// nodes in memory, records every call, and runs operations by executing
// their jobs with exechost exactly as an exec node would (sandbox, job
// binary, job-state, secure vault, YSON on stdin, outputs on descriptors
// 3i+1). It stands in for a cluster only because none can be reached from
// this machine; the job binary it runs is the real one.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.ytsaurus.tech/yt/go/guid"
	"go.ytsaurus.tech/yt/go/mapreduce/spec"
	"go.ytsaurus.tech/yt/go/ypath"
	"go.ytsaurus.tech/yt/go/yson"
	"go.ytsaurus.tech/yt/go/yt"
	"go.ytsaurus.tech/yt/go/yterrors"

	"github.com/pillarkit/pillar/jobs/internal/exechost"
	"github.com/pillarkit/pillar/jobs/internal/rowkey"
)

type fakeNode struct {
	typ      yt.NodeType
	rows     [][]byte // tables: YSON maps
	data     []byte   // files
	sortedBy []string // tables: the sorted_by attribute
}

type fakeOp struct {
	state  yt.OperationState
	err    *yterrors.Error
	stderr []byte
	jobID  yt.JobID
}

// fakeYT is the FAKE cluster (see the file comment).
type fakeYT struct {
	yt.Client // nil: a method not implemented below panics (an unexpected call)
	t         *testing.T
	sandboxes string

	mu     sync.Mutex
	calls  []string
	nodes  map[string]*fakeNode
	cache  map[string]string // md5 → path
	ops    map[yt.OperationID]*fakeOp
	specs  []*spec.Spec
	jobs   []*exechost.Job // every job run, in order
	nextTx int
	// hold keeps operations running (not executed) until aborted.
	hold bool
}

func newFakeYT(t *testing.T) *fakeYT {
	return &fakeYT{t: t, sandboxes: t.TempDir(), nodes: map[string]*fakeNode{}, cache: map[string]string{}, ops: map[yt.OperationID]*fakeOp{}}
}

func (c *fakeYT) record(format string, a ...any) {
	c.calls = append(c.calls, fmt.Sprintf(format, a...))
}

func pathOf(p ypath.YPath) string { return strings.TrimSuffix(string(p.YPath()), "/@") }

// view is the cluster as seen from outside any transaction (tx nil) or
// from inside one.
type view struct {
	c  *fakeYT
	tx *fakeTx
}

func (v view) get(p string) *fakeNode {
	if v.tx != nil {
		if n, ok := v.tx.overlay[p]; ok {
			return n // nil: removed in the transaction
		}
	}
	return v.c.nodes[p]
}

func (v view) put(p string, n *fakeNode) {
	if v.tx != nil {
		v.tx.overlay[p] = n
		return
	}
	v.c.nodes[p] = n
}

func (v view) CreateNode(ctx context.Context, path ypath.YPath, typ yt.NodeType, o *yt.CreateNodeOptions) (yt.NodeID, error) {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	p := pathOf(path)
	v.c.record("CreateNode %s %s", typ, p)
	if v.get(p) != nil {
		if o != nil && o.IgnoreExisting {
			return yt.NodeID{}, nil
		}
		return yt.NodeID{}, yterrors.Err(yterrors.CodeAlreadyExists, "node exists", yterrors.Attr("path", p))
	}
	v.put(p, &fakeNode{typ: typ})
	return yt.NodeID(guid.New()), nil
}

func (v view) NodeExists(ctx context.Context, path ypath.YPath, o *yt.NodeExistsOptions) (bool, error) {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	v.c.record("NodeExists %s", pathOf(path))
	return v.get(pathOf(path)) != nil, nil
}

func (v view) GetNode(ctx context.Context, path ypath.YPath, result any, o *yt.GetNodeOptions) error {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	p := pathOf(path)
	v.c.record("GetNode %s", path.YPath())
	n := v.get(p)
	if n == nil {
		return yterrors.Err(yterrors.CodeResolveError, "no such node", yterrors.Attr("path", p))
	}
	attrs := map[string]any{"type": n.typ, "row_count": len(n.rows)}
	if n.sortedBy != nil {
		attrs["sorted_by"] = n.sortedBy
	}
	b, err := yson.Marshal(attrs)
	if err != nil {
		return err
	}
	return yson.Unmarshal(b, result)
}

func (v view) StartOperation(ctx context.Context, typ yt.OperationType, sp any, o *yt.StartOperationOptions) (yt.OperationID, error) {
	s := sp.(*spec.Spec).Clone()
	s.Type = typ
	v.c.mu.Lock()
	v.c.record("StartOperation %s", typ)
	v.c.specs = append(v.c.specs, s)
	v.c.mu.Unlock()
	id := yt.OperationID(guid.New())
	v.c.mu.Lock()
	hold := v.c.hold
	v.c.mu.Unlock()
	if hold {
		v.c.mu.Lock()
		v.c.ops[id] = &fakeOp{state: yt.StateRunning}
		v.c.mu.Unlock()
		return id, nil
	}
	op := v.c.execute(ctx, v, id, s)
	v.c.mu.Lock()
	v.c.ops[id] = op
	v.c.mu.Unlock()
	return id, nil
}

func (c *fakeYT) CreateNode(ctx context.Context, p ypath.YPath, typ yt.NodeType, o *yt.CreateNodeOptions) (yt.NodeID, error) {
	return view{c: c}.CreateNode(ctx, p, typ, o)
}
func (c *fakeYT) NodeExists(ctx context.Context, p ypath.YPath, o *yt.NodeExistsOptions) (bool, error) {
	return view{c: c}.NodeExists(ctx, p, o)
}
func (c *fakeYT) GetNode(ctx context.Context, p ypath.YPath, r any, o *yt.GetNodeOptions) error {
	return view{c: c}.GetNode(ctx, p, r, o)
}
func (c *fakeYT) StartOperation(ctx context.Context, typ yt.OperationType, s any, o *yt.StartOperationOptions) (yt.OperationID, error) {
	return view{c: c}.StartOperation(ctx, typ, s, o)
}

func (c *fakeYT) RemoveNode(ctx context.Context, path ypath.YPath, o *yt.RemoveNodeOptions) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.record("RemoveNode %s", pathOf(path))
	delete(c.nodes, pathOf(path))
	return nil
}

type fileWriter struct {
	bytes.Buffer
	done func([]byte)
}

func (w *fileWriter) Close() error { w.done(w.Bytes()); return nil }

func (c *fakeYT) WriteFile(ctx context.Context, path ypath.YPath, o *yt.WriteFileOptions) (io.WriteCloser, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := pathOf(path)
	c.record("WriteFile %s", p)
	if n := c.nodes[p]; n == nil || n.typ != yt.NodeFile {
		return nil, yterrors.Err(yterrors.CodeResolveError, "no such file", yterrors.Attr("path", p))
	}
	return &fileWriter{done: func(b []byte) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.nodes[p].data = bytes.Clone(b)
	}}, nil
}

func (c *fakeYT) GetFileFromCache(ctx context.Context, md5 string, o *yt.GetFileFromCacheOptions) (ypath.YPath, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.record("GetFileFromCache %s", md5)
	if p, ok := c.cache[md5]; ok {
		return ypath.Path(p), nil
	}
	return nil, nil
}

func (c *fakeYT) PutFileToCache(ctx context.Context, path ypath.YPath, md5 string, o *yt.PutFileToCacheOptions) (ypath.YPath, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.record("PutFileToCache %s", md5)
	p := string(o.CachePath.YPath()) + "/" + md5[len(md5)-2:] + "/" + md5
	c.nodes[p] = &fakeNode{typ: yt.NodeFile, data: c.nodes[pathOf(path)].data}
	c.cache[md5] = p
	return ypath.Path(p), nil
}

func (c *fakeYT) GetOperation(ctx context.Context, id yt.OperationID, o *yt.GetOperationOptions) (*yt.OperationStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.record("GetOperation")
	op := c.ops[id]
	if op == nil {
		return nil, yterrors.Err("no such operation")
	}
	st := &yt.OperationStatus{ID: id, State: op.state, Result: &yt.OperationResult{Error: op.err}}
	st.BriefProgress.TotalJobCounter = &yt.TotalJobCounter{Total: 1, Completed: 1}
	return st, nil
}

func (c *fakeYT) AbortOperation(ctx context.Context, id yt.OperationID, o *yt.AbortOperationOptions) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.record("AbortOperation")
	if op := c.ops[id]; op != nil && !op.state.IsFinished() {
		op.state = yt.StateAborted
	}
	return nil
}

func (c *fakeYT) ListJobs(ctx context.Context, id yt.OperationID, o *yt.ListJobsOptions) (*yt.ListJobsResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	op := c.ops[id]
	if op == nil || op.stderr == nil {
		return &yt.ListJobsResult{}, nil
	}
	return &yt.ListJobsResult{Jobs: []yt.JobStatus{{ID: op.jobID, State: "failed"}}}, nil
}

func (c *fakeYT) GetJobStderr(ctx context.Context, id yt.OperationID, job yt.JobID, o *yt.GetJobStderrOptions) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ops[id].stderr, nil
}

func (c *fakeYT) BeginTx(ctx context.Context, o *yt.StartTxOptions) (yt.Tx, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nextTx++
	c.record("BeginTx")
	return &fakeTx{c: c, id: yt.TxID(guid.New()), overlay: map[string]*fakeNode{}, done: make(chan struct{})}, nil
}

// fakeTx is a FAKE YTsaurus transaction: nodes it creates or writes are
// visible to it and become visible to everyone at Commit.
type fakeTx struct {
	yt.Tx   // nil: unexpected calls panic
	c       *fakeYT
	id      yt.TxID
	overlay map[string]*fakeNode
	done    chan struct{}
	ended   bool
}

func (t *fakeTx) ID() yt.TxID               { return t.id }
func (t *fakeTx) Finished() <-chan struct{} { return t.done }
func (t *fakeTx) CreateNode(ctx context.Context, p ypath.YPath, typ yt.NodeType, o *yt.CreateNodeOptions) (yt.NodeID, error) {
	return view{t.c, t}.CreateNode(ctx, p, typ, o)
}
func (t *fakeTx) NodeExists(ctx context.Context, p ypath.YPath, o *yt.NodeExistsOptions) (bool, error) {
	return view{t.c, t}.NodeExists(ctx, p, o)
}
func (t *fakeTx) GetNode(ctx context.Context, p ypath.YPath, r any, o *yt.GetNodeOptions) error {
	return view{t.c, t}.GetNode(ctx, p, r, o)
}
func (t *fakeTx) StartOperation(ctx context.Context, typ yt.OperationType, s any, o *yt.StartOperationOptions) (yt.OperationID, error) {
	return view{t.c, t}.StartOperation(ctx, typ, s, o)
}

func (t *fakeTx) RemoveNode(ctx context.Context, path ypath.YPath, o *yt.RemoveNodeOptions) error {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.c.record("RemoveNode %s (tx)", pathOf(path))
	t.overlay[pathOf(path)] = nil
	return nil
}

func (t *fakeTx) Commit() error {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.c.record("CommitTx")
	if t.ended {
		return yterrors.Err("transaction finished")
	}
	for p, n := range t.overlay {
		if n == nil {
			delete(t.c.nodes, p)
		} else {
			t.c.nodes[p] = n
		}
	}
	t.ended = true
	close(t.done)
	return nil
}

func (t *fakeTx) Abort() error {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.c.record("AbortTx")
	if !t.ended {
		t.ended = true
		close(t.done)
	}
	return nil
}

// setTable puts rows (Go values, YSON-encoded here) in a table.
func (c *fakeYT) setTable(path ypath.Path, rows any) {
	c.t.Helper()
	b, err := yson.Marshal(rows)
	if err != nil {
		c.t.Fatal(err)
	}
	var raws []yson.RawValue
	if err := yson.Unmarshal(b, &raws); err != nil {
		c.t.Fatal(err)
	}
	n := &fakeNode{typ: yt.NodeTable}
	for _, r := range raws {
		n.rows = append(n.rows, []byte(r))
	}
	c.mu.Lock()
	c.nodes[string(path)] = n
	c.mu.Unlock()
}

// tableRows decodes a committed table into a slice of T.
func fakeTable[T any](t *testing.T, c *fakeYT, path ypath.Path) []T {
	t.Helper()
	c.mu.Lock()
	n := c.nodes[string(path)]
	c.mu.Unlock()
	if n == nil {
		t.Fatalf("fake cluster: no table %s", path)
	}
	out := make([]T, len(n.rows))
	for i, r := range n.rows {
		if err := yson.Unmarshal(r, &out[i]); err != nil {
			t.Fatalf("table %s row %d: %v", path, i, err)
		}
	}
	return out
}

func (c *fakeYT) hasNode(path ypath.Path) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[string(path)] != nil
}

// execute runs an operation the way the scheduler and exec nodes would:
// map jobs over the inputs (JobCount contiguous slices), a stable sort and
// grouping by the keys, reduce jobs over whole groups; each job is the
// spec's command run by exechost in a fresh sandbox.
func (c *fakeYT) execute(ctx context.Context, v view, id yt.OperationID, s *spec.Spec) *fakeOp {
	op := &fakeOp{state: yt.StateCompleted}
	fail := func(format string, a ...any) *fakeOp {
		op.state = yt.StateFailed
		op.err = yterrors.Err(fmt.Sprintf(format, a...)).(*yterrors.Error)
		return op
	}
	c.mu.Lock()
	var inputs []exechost.Row
	for ti, p := range s.InputTablePaths {
		n := v.get(pathOf(p))
		if n == nil {
			c.mu.Unlock()
			return fail("input table %s is missing", pathOf(p))
		}
		if s.Type == yt.OperationReduce && (len(n.sortedBy) < len(s.SortBy) || !slices.Equal(n.sortedBy[:len(s.SortBy)], s.SortBy)) {
			c.mu.Unlock()
			return fail("input table %s is not sorted by %v (sorted_by %v)", pathOf(p), s.SortBy, n.sortedBy)
		}
		for ri, r := range n.rows {
			inputs = append(inputs, exechost.Row{Table: ti, Index: int64(ri), YSON: r})
		}
	}
	c.mu.Unlock()

	outTables := s.OutputTablePaths
	results := make([][][]byte, len(outTables))
	runJobs := func(us *spec.UserScript, io *spec.JobIO, groups [][]exechost.Row, perJob int, nOut int) ([][][]byte, error) {
		ctl := exechost.Control{}
		if ca := io.ControlAttributes; ca != nil {
			ctl = exechost.Control{TableIndex: ca.EnableTableIndex, RowIndex: ca.EnableRowIndex, RangeIndex: ca.EnableRangeIndex, KeySwitch: ca.EnableKeySwitch}
		}
		files := map[string]exechost.File{}
		c.mu.Lock()
		for _, f := range us.FilePaths {
			n := c.nodes[string(f.CypressPath)]
			if n == nil {
				c.mu.Unlock()
				return nil, fmt.Errorf("file %s of %s is missing", f.CypressPath, f.FileName)
			}
			files[f.FileName] = exechost.File{Data: n.data, Executable: f.Executable}
		}
		c.mu.Unlock()
		outs := make([][][]byte, nOut)
		var perJobInput [][][]exechost.Row
		for start := 0; start < len(groups); start += perJob {
			perJobInput = append(perJobInput, groups[start:min(start+perJob, len(groups))])
		}
		if len(perJobInput) == 0 {
			perJobInput = [][][]exechost.Row{nil}
		}
		for cookie, in := range perJobInput {
			stdin, err := exechost.EncodeInput(in, ctl)
			if err != nil {
				return nil, err
			}
			j := &exechost.Job{Command: us.Command, Files: files, Env: us.Environment, Vault: s.SecureVault,
				JobID: guid.New().String(), OperationID: id.String(), Cookie: cookie, Outputs: nOut, Stdin: stdin}
			c.mu.Lock()
			c.jobs = append(c.jobs, j)
			c.mu.Unlock()
			res, err := exechost.Run(ctx, filepath.Join(c.sandboxes, j.JobID), j)
			if err != nil {
				return nil, err
			}
			if res.ExitCode != 0 {
				op.stderr, op.jobID = []byte(res.Stderr), yt.JobID(guid.New())
				return nil, fmt.Errorf("user job failed: exit code %d (%s)", res.ExitCode, exechost.Stage(res.ExitCode))
			}
			for i, b := range res.Outputs {
				rows, err := exechost.DecodeRows(b)
				if err != nil {
					return nil, err
				}
				outs[i] = append(outs[i], rows...)
			}
		}
		return outs, nil
	}
	jobCount := func(n int) int { return max(n, 1) }
	split := func(groups int, jobs int) int { return max(1, (groups+jobs-1)/jobs) }
	switch s.Type {
	case yt.OperationMap:
		// A map job's input is one group (no key switches): cut the rows
		// into JobCount jobs of one group each.
		per := split(len(inputs), jobCount(s.JobCount))
		var groups [][]exechost.Row
		for i := 0; i < len(inputs); i += per {
			groups = append(groups, inputs[i:min(i+per, len(inputs))])
		}
		outs, err := runJobs(s.Mapper, s.JobIO, groups, 1, len(outTables))
		if err != nil {
			return fail("%v", err)
		}
		results = outs
	case yt.OperationReduce:
		// As on YTsaurus, a reduce reads sorted tables; it does not sort.
		if err := checkSorted(inputs, s.SortBy); err != nil {
			return fail("%v", err)
		}
		groups, err := exechost.SortAndGroup(inputs, s.SortBy, s.ReduceBy)
		if err != nil {
			return fail("%v", err)
		}
		outs, err := runJobs(s.Reducer, s.JobIO, groups, split(len(groups), jobCount(s.JobCount)), len(outTables))
		if err != nil {
			return fail("%v", err)
		}
		results = outs
	case yt.OperationMapReduce:
		k := s.MapperOutputTableCount
		per := split(len(inputs), jobCount(s.MapJobCount))
		var groups [][]exechost.Row
		for i := 0; i < len(inputs); i += per {
			groups = append(groups, inputs[i:min(i+per, len(inputs))])
		}
		mouts, err := runJobs(s.Mapper, s.MapJobIO, groups, 1, 1+k)
		if err != nil {
			return fail("%v", err)
		}
		var inter []exechost.Row
		for i, r := range mouts[0] {
			inter = append(inter, exechost.Row{Index: int64(i), YSON: r})
		}
		rgroups, err := exechost.SortAndGroup(inter, s.SortBy, s.ReduceBy)
		if err != nil {
			return fail("%v", err)
		}
		routs, err := runJobs(s.Reducer, s.ReduceJobIO, rgroups, split(len(rgroups), 2), len(outTables)-k)
		if err != nil {
			return fail("%v", err)
		}
		results = append(mouts[1:], routs...)
	case yt.OperationSort:
		groups, err := exechost.SortAndGroup(inputs, s.SortBy, nil)
		if err != nil {
			return fail("%v", err)
		}
		var rows [][]byte
		for _, g := range groups {
			for _, r := range g {
				rows = append(rows, r.YSON)
			}
		}
		outTables = []ypath.YPath{ypath.NewRich(string(s.OutputTablePath.YPath())).SetSortedBy(s.SortBy)}
		results = [][][]byte{rows}
	default:
		return fail("operation type %s is not supported by the fake", s.Type)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, p := range outTables {
		n := &fakeNode{typ: yt.NodeTable}
		if r, ok := p.(*ypath.Rich); ok && r.Append != nil && *r.Append {
			if old := v.get(pathOf(p)); old != nil {
				n.rows = append(n.rows, old.rows...)
			}
		}
		n.rows = append(n.rows, results[i]...)
		if r, ok := p.(*ypath.Rich); ok {
			n.sortedBy = r.SortedBy
		}
		v.put(pathOf(p), n)
	}
	return op
}

// checkSorted fails unless every input table's rows are sorted by cols.
func checkSorted(rows []exechost.Row, cols []string) error {
	enc := rowkey.New(cols)
	var prev []byte
	for i, r := range rows {
		k, err := enc.AppendYSON(nil, r.YSON)
		if err != nil {
			return err
		}
		if i > 0 && rows[i-1].Table == r.Table && bytes.Compare(prev, k) > 0 {
			return fmt.Errorf("input table %d is not sorted by %v at row %d", r.Table, cols, r.Index)
		}
		prev = k
	}
	return nil
}
