package ytfake

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"

	"go.ytsaurus.tech/yt/go/guid"
	"go.ytsaurus.tech/yt/go/mapreduce/spec"
	"go.ytsaurus.tech/yt/go/schema"
	"go.ytsaurus.tech/yt/go/ypath"
	"go.ytsaurus.tech/yt/go/yson"
	"go.ytsaurus.tech/yt/go/yt"
	"go.ytsaurus.tech/yt/go/yterrors"

	"github.com/pillarkit/pillar/jobs/internal/exechost"
)

type operation struct {
	id     yt.OperationID
	spec   *spec.Spec
	tx     *Tx // the transaction it was started in; nil: none
	state  yt.OperationState
	err    *yterrors.Error
	jobs   int
	failed yt.JobID
	stderr []byte
}

func opError(format string, a ...any) *yterrors.Error {
	return yterrors.Err(fmt.Sprintf(format, a...)).(*yterrors.Error)
}

func keysOf(v view, paths []ypath.YPath) []string {
	var out []string
	for _, p := range paths {
		if k, _, _, _, err := v.resolve(p); err == nil {
			out = append(out, k)
		} else {
			out = append(out, string(p.YPath()))
		}
	}
	return out
}

func (c *Cluster) startOperation(ctx context.Context, tx *Tx, typ yt.OperationType, sp any, o *yt.StartOperationOptions) (yt.OperationID, error) {
	s0, ok := sp.(*spec.Spec)
	if !ok {
		return yt.OperationID{}, yterrors.Err(fmt.Sprintf("ytfake: spec of type %T (want *spec.Spec)", sp))
	}
	s := s0.Clone()
	s.Type = typ
	c.mu.Lock()
	if err := c.enter(tx); err != nil {
		c.mu.Unlock()
		return yt.OperationID{}, err
	}
	v := view{c: c, tx: tx}
	if typ == yt.OperationMerge || typ == yt.OperationSort {
		out := ""
		if s.OutputTablePath != nil {
			out = keysOf(v, []ypath.YPath{s.OutputTablePath})[0]
		}
		c.rec(tx, "start_operation %s mode=%s inputs=%v output=%s", typ, s.MergeMode, keysOf(v, s.InputTablePaths), out)
	} else {
		c.rec(tx, "start_operation %s inputs=%v outputs=%v", typ, keysOf(v, s.InputTablePaths), keysOf(v, s.OutputTablePaths))
	}
	c.specs = append(c.specs, s)
	op := &operation{id: yt.OperationID(guid.New()), spec: s, tx: tx, state: yt.StateRunning}
	c.ops[op.id] = op
	c.nops++
	if c.Hold {
		c.mu.Unlock()
		return op.id, nil
	}
	if c.AbortOperations != nil && c.AbortOperations(s) {
		op.state = yt.StateAborted
		op.err = opError("Operation %s aborted (ytfake: injected abort)", op.id)
		c.mu.Unlock()
		return op.id, nil
	}
	c.mu.Unlock()
	c.execute(context.WithoutCancel(ctx), op)
	return op.id, nil
}

// GetOperation reports an operation's state, result and job counts.
func (c *Cluster) GetOperation(ctx context.Context, id yt.OperationID, o *yt.GetOperationOptions) (*yt.OperationStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rec(nil, "get_operation")
	op := c.ops[id]
	if op == nil {
		return nil, yterrors.Err(yterrors.CodeNoSuchOperation, fmt.Sprintf("No such operation %s", id))
	}
	st := &yt.OperationStatus{ID: id, State: op.state, Type: op.spec.Type, Result: &yt.OperationResult{}}
	if op.err != nil {
		st.Result.Error = op.err
	}
	st.BriefProgress.TotalJobCounter = &yt.TotalJobCounter{Total: int64(op.jobs), Completed: int64(op.jobs)}
	if op.state == yt.StateFailed {
		st.BriefProgress.TotalJobCounter.Failed = 1
		st.BriefProgress.TotalJobCounter.Completed--
	}
	return st, nil
}

// AbortOperation ends a running operation in state aborted; it writes
// nothing.
func (c *Cluster) AbortOperation(ctx context.Context, id yt.OperationID, o *yt.AbortOperationOptions) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rec(nil, "abort_operation")
	op := c.ops[id]
	if op == nil {
		return yterrors.Err(yterrors.CodeNoSuchOperation, fmt.Sprintf("No such operation %s", id))
	}
	if !op.state.IsFinished() {
		op.state = yt.StateAborted
		op.err = opError("Operation %s aborted by user request", id)
	}
	return nil
}

// ListJobs lists the operation's failed job (the only jobs the fake
// keeps a record of).
func (c *Cluster) ListJobs(ctx context.Context, id yt.OperationID, o *yt.ListJobsOptions) (*yt.ListJobsResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rec(nil, "list_jobs")
	op := c.ops[id]
	if op == nil {
		return nil, yterrors.Err(yterrors.CodeNoSuchOperation, fmt.Sprintf("No such operation %s", id))
	}
	if op.stderr == nil || o != nil && o.JobState != nil && *o.JobState != yt.JobFailed {
		return &yt.ListJobsResult{}, nil
	}
	return &yt.ListJobsResult{Jobs: []yt.JobStatus{{ID: op.failed, State: string(yt.JobFailed)}}}, nil
}

// GetJobStderr returns the stderr of the operation's failed job.
func (c *Cluster) GetJobStderr(ctx context.Context, id yt.OperationID, job yt.JobID, o *yt.GetJobStderrOptions) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	op := c.ops[id]
	if op == nil || op.failed != job {
		return nil, yterrors.Err(fmt.Sprintf("No such job %s", job))
	}
	return bytes.Clone(op.stderr), nil
}

// input is one input table as the operation's input transaction pinned it.
type input struct {
	path string
	keys []string // its key columns
	rows []exechost.Row
}

// execute runs an operation the way the scheduler and exec nodes would: an
// input transaction holding snapshot locks on the inputs and an output
// transaction, both nested in the operation's transaction (docs:
// user-guide/data-processing/operations, "transactions"); jobs run by
// exechost; outputs written in the output transaction, which commits only
// when every job succeeded.
func (c *Cluster) execute(ctx context.Context, op *operation) {
	s := op.spec
	c.mu.Lock()
	inTx := c.internalTx(op.tx)
	outTx := c.internalTx(op.tx)
	c.mu.Unlock()
	fail := func(err *yterrors.Error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.abort(inTx)
		c.abort(outTx)
		if !op.state.IsFinished() {
			op.state, op.err = yt.StateFailed, err
		}
	}
	inputs, err := c.readInputs(inTx, s)
	if err != nil {
		fail(opError("Operation %s failed to prepare: %v", op.id, err))
		return
	}
	results, outPaths, err := c.runJobs(ctx, op, inputs)
	if err != nil {
		if ye, ok := err.(*yterrors.Error); ok {
			fail(ye)
		} else {
			fail(opError("Operation %s failed: %v", op.id, err))
		}
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if op.state.IsFinished() { // aborted meanwhile
		c.abort(inTx)
		c.abort(outTx)
		return
	}
	if err := c.writeOutputs(outTx, s, inputs, outPaths, results); err != nil {
		c.abort(inTx)
		c.abort(outTx)
		op.state = yt.StateFailed
		op.err = yterrors.Err(fmt.Sprintf("Operation %s failed to commit its outputs", op.id), err).(*yterrors.Error)
		return
	}
	c.abort(inTx)
	if err := c.commit(outTx); err != nil {
		op.state, op.err = yt.StateAborted, yterrors.Err(fmt.Sprintf("Operation %s: its output transaction ended", op.id), err).(*yterrors.Error)
		return
	}
	op.state = yt.StateCompleted
}

// internalTx starts a transaction of the scheduler's (not in the call log).
// c.mu is held.
func (c *Cluster) internalTx(parent *Tx) *Tx {
	t := &Tx{c: c, id: yt.TxID(guid.New()), parent: parent, kids: map[*Tx]bool{}, overlay: map[string]*node{},
		pinned: map[string]*pinned{}, done: make(chan struct{}), timeout: c.opts.TxTimeout, pinging: true, lastPing: c.opts.Now()}
	if parent != nil {
		parent.kids[t] = true
	}
	c.txs[t.id] = t
	return t
}

func (c *Cluster) readInputs(t *Tx, s *spec.Spec) ([]input, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := view{c: c, tx: t}
	if err := c.enter(t.parent); t.parent != nil && err != nil {
		return nil, err
	}
	var out []input
	for _, ip := range s.InputTablePaths {
		p, _, _, _, err := v.resolve(ip)
		if err != nil {
			return nil, err
		}
		n := v.get(p)
		if n == nil {
			return nil, yterrors.Err(yterrors.CodeResolveError, fmt.Sprintf("Input table /%s does not exist", p))
		}
		if n.typ != yt.NodeTable {
			return nil, yterrors.Err(fmt.Sprintf("Input /%s is a %s, not a table", p, n.typ))
		}
		if err := v.takeLock(p, n, yt.LockSnapshot, "", ""); err != nil {
			return nil, err
		}
		// Row ranges select rows; a row keeps its table's row index.
		ranges, err := rowRanges(richOf(ip), len(n.rows))
		if err != nil {
			return nil, err
		}
		var rows []exechost.Row
		for _, r := range ranges {
			for i := r[0]; i < r[1]; i++ {
				rows = append(rows, exechost.Row{Index: int64(i), YSON: n.rows[i]})
			}
		}
		out = append(out, input{path: p, keys: n.effectiveSchema().KeyColumns(), rows: rows})
	}
	return out, nil
}

// sortedBy reports whether keys begins with cols.
func sortedBy(keys, cols []string) bool {
	return len(keys) >= len(cols) && slices.Equal(keys[:len(cols)], cols)
}

// formatOK accepts the formats the fake speaks: YSON (the SDK's reader
// and writers), or none (the cluster's default, YSON).
func formatOK(f any) error {
	if f == nil {
		return nil
	}
	b, err := yson.Marshal(f)
	if err != nil {
		return err
	}
	var name string
	if err := yson.Unmarshal(b, &name); err != nil || name != "yson" {
		return fmt.Errorf("format %s is not modelled by the fake (it speaks YSON only)", b)
	}
	return nil
}

func (c *Cluster) runJobs(ctx context.Context, op *operation, inputs []input) ([][][]byte, []ypath.YPath, error) {
	s := op.spec
	var rows []exechost.Row
	for ti, in := range inputs {
		for _, r := range in.rows {
			r.Table = ti
			rows = append(rows, r)
		}
	}
	outPaths := s.OutputTablePaths
	split := func(n, jobs int) int { return max(1, (n+max(jobs, 1)-1)/max(jobs, 1)) }
	slices0 := func(per int) [][]exechost.Row {
		var groups [][]exechost.Row
		for i := 0; i < len(rows); i += per {
			groups = append(groups, rows[i:min(i+per, len(rows))])
		}
		return groups
	}
	switch s.Type {
	case yt.OperationMap:
		outs, err := c.jobs_(ctx, op, "map", s.Mapper, s.JobIO, slices0(split(len(rows), s.JobCount)), 1, len(outPaths))
		return outs, outPaths, err
	case yt.OperationReduce:
		// "Input tables must be sorted by reduce_by / sort_by": a reduce
		// does not sort (docs: data-processing/operations/reduce.md).
		sortBy := s.SortBy
		if len(sortBy) == 0 {
			sortBy = s.ReduceBy
		}
		for _, in := range inputs {
			if !sortedBy(in.keys, sortBy) {
				return nil, nil, opError("Input table /%s is not sorted by %v (its key columns are %v): a reduce needs sorted inputs", in.path, sortBy, in.keys)
			}
		}
		groups, err := exechost.SortAndGroup(rows, sortBy, s.ReduceBy)
		if err != nil {
			return nil, nil, err
		}
		outs, err := c.jobs_(ctx, op, "reduce", s.Reducer, s.JobIO, groups, split(len(groups), s.JobCount), len(outPaths))
		return outs, outPaths, err
	case yt.OperationMapReduce:
		k := s.MapperOutputTableCount
		mouts, err := c.jobs_(ctx, op, "map", s.Mapper, s.MapJobIO, slices0(split(len(rows), s.MapJobCount)), 1, 1+k)
		if err != nil {
			return nil, nil, err
		}
		var inter []exechost.Row
		for i, r := range mouts[0] {
			inter = append(inter, exechost.Row{Index: int64(i), YSON: r})
		}
		sortBy := s.SortBy
		if len(sortBy) == 0 {
			sortBy = s.ReduceBy
		}
		groups, err := exechost.SortAndGroup(inter, sortBy, s.ReduceBy)
		if err != nil {
			return nil, nil, err
		}
		routs, err := c.jobs_(ctx, op, "reduce", s.Reducer, s.ReduceJobIO, groups, split(len(groups), max(s.PartitionCount, 2)), len(outPaths)-k)
		if err != nil {
			return nil, nil, err
		}
		return append(mouts[1:], routs...), outPaths, nil
	case yt.OperationSort:
		if len(s.SortBy) == 0 {
			return nil, nil, opError("Sort operation without sort_by")
		}
		groups, err := exechost.SortAndGroup(rows, s.SortBy, nil)
		if err != nil {
			return nil, nil, err
		}
		var sorted [][]byte
		for _, g := range groups {
			for _, r := range g {
				sorted = append(sorted, r.YSON)
			}
		}
		return [][][]byte{sorted}, []ypath.YPath{s.OutputTablePath}, nil
	case yt.OperationMerge:
		switch s.MergeMode {
		case "", "unordered", "ordered":
			var all [][]byte
			for _, r := range rows {
				all = append(all, r.YSON)
			}
			return [][][]byte{all}, []ypath.YPath{s.OutputTablePath}, nil
		case "sorted":
			by := s.MergeBy
			for _, in := range inputs {
				if len(by) == 0 {
					by = in.keys
				}
				if len(by) == 0 || !sortedBy(in.keys, by) {
					return nil, nil, opError("Input table /%s is not sorted by %v: a sorted merge needs sorted inputs", in.path, by)
				}
			}
			groups, err := exechost.SortAndGroup(rows, by, nil)
			if err != nil {
				return nil, nil, err
			}
			var all [][]byte
			for _, g := range groups {
				for _, r := range g {
					all = append(all, r.YSON)
				}
			}
			return [][][]byte{all}, []ypath.YPath{s.OutputTablePath}, nil
		}
		return nil, nil, opError("Unknown merge mode %q", s.MergeMode)
	}
	return nil, nil, opError("ytfake: operation type %s is not modelled", s.Type)
}

// jobs_ runs one phase: a job per `per` groups, each the user script's
// command in a fresh sandbox.
func (c *Cluster) jobs_(ctx context.Context, op *operation, phase string, us *spec.UserScript, io *spec.JobIO, groups [][]exechost.Row, per, nOut int) ([][][]byte, error) {
	s := op.spec
	if us == nil {
		return nil, opError("The %s operation has no %s user script", s.Type, phase)
	}
	for _, f := range []any{us.Format, us.InputFormat, us.OutputFormat} {
		if err := formatOK(f); err != nil {
			return nil, opError("%s job: %v", phase, err)
		}
	}
	ctl := exechost.Control{}
	if io != nil && io.ControlAttributes != nil {
		ca := io.ControlAttributes
		ctl = exechost.Control{TableIndex: ca.EnableTableIndex, RowIndex: ca.EnableRowIndex, RangeIndex: ca.EnableRangeIndex, KeySwitch: ca.EnableKeySwitch}
	}
	files := map[string]exechost.File{}
	c.mu.Lock()
	for _, f := range us.FilePaths {
		n := c.nodes[key(ypath.Path(f.CypressPath))]
		if n == nil || n.typ != yt.NodeFile {
			c.mu.Unlock()
			return nil, opError("File %s (%s) of the %s job does not exist", f.CypressPath, f.FileName, phase)
		}
		files[f.FileName] = exechost.File{Data: n.data, Executable: f.Executable}
	}
	c.mu.Unlock()
	dir, err := c.sandboxDir()
	if err != nil {
		return nil, err
	}
	var perJob [][][]exechost.Row
	for i := 0; i < len(groups); i += per {
		perJob = append(perJob, groups[i:min(i+per, len(groups))])
	}
	if len(perJob) == 0 {
		perJob = [][][]exechost.Row{nil}
	}
	outs := make([][][]byte, nOut)
	for cookie, in := range perJob {
		stdin, err := exechost.EncodeInput(in, ctl)
		if err != nil {
			return nil, err
		}
		j := &exechost.Job{Command: us.Command, Files: files, Env: us.Environment, Vault: s.SecureVault,
			JobID: guid.New().String(), OperationID: op.id.String(), Cookie: cookie, Outputs: nOut, Stdin: stdin}
		c.mu.Lock()
		c.jobs = append(c.jobs, j)
		op.jobs++
		inject := c.FailJobs != nil && c.FailJobs(JobInfo{Operation: op.id, Type: s.Type, Title: s.Title, Phase: phase, Index: cookie})
		c.mu.Unlock()
		if inject {
			c.mu.Lock()
			op.stderr, op.failed = []byte("ytfake: injected job failure\n"), yt.JobID(guid.New())
			c.mu.Unlock()
			return nil, opError("Failed jobs limit exceeded: %s job %d: user job failed: exit code 1 (injected by the fake)", phase, cookie)
		}
		res, err := exechost.Run(ctx, filepath.Join(dir, j.JobID), j)
		if err != nil {
			return nil, err
		}
		if res.ExitCode != 0 {
			c.mu.Lock()
			op.stderr, op.failed = []byte(res.Stderr), yt.JobID(guid.New())
			c.mu.Unlock()
			return nil, opError("Failed jobs limit exceeded: %s job %d: user job failed: exit code %d (%s)", phase, cookie, res.ExitCode, exechost.Stage(res.ExitCode))
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

// writeOutputs writes each output in the output transaction t with the
// implicit lock of a write, under the output's schema: the path's
// <schema=…> or the table's own, with the path's <sorted_by=…> as key
// columns (a sort's output is sorted by its sort_by), and checks the rows
// against it (checkRows). c.mu is held.
func (c *Cluster) writeOutputs(t *Tx, s *spec.Spec, inputs []input, paths []ypath.YPath, results [][][]byte) error {
	v := view{c: c, tx: t}
	for i, yp := range paths {
		p, _, _, _, err := v.resolve(yp)
		if err != nil {
			return err
		}
		n := v.get(p)
		if n == nil {
			return yterrors.Err(yterrors.CodeResolveError, fmt.Sprintf("Output table /%s does not exist", p))
		}
		if n.typ != yt.NodeTable {
			return yterrors.Err(fmt.Sprintf("Output /%s is a %s, not a table", p, n.typ))
		}
		rich := richOf(yp)
		app := rich.Append != nil && *rich.Append
		mode := yt.LockExclusive
		if app {
			mode = yt.LockShared
		}
		if err := v.takeLock(p, n, mode, "", ""); err != nil {
			return err
		}
		sch := n.schema
		if rich.Schema != nil {
			if app && len(n.rows) > 0 && (sch == nil || !sch.Equal(*rich.Schema)) {
				return yterrors.Err(yterrors.CodeIncompatibleSchemas, fmt.Sprintf("Cannot append to /%s with a different schema", p))
			}
			x := rich.Schema.Copy()
			sch = &x
		}
		var sortBy []string
		if len(rich.SortedBy) > 0 {
			sortBy = rich.SortedBy
		}
		if s.Type == yt.OperationSort {
			sortBy = s.SortBy
			if sch == nil && len(inputs) > 0 {
				// The output of a sort gets the input's schema, sorted.
				if in := v.get(inputs[0].path); in != nil && in.schema != nil {
					x := in.schema.Copy()
					sch = &x
				}
			}
		}
		if len(sortBy) > 0 {
			sorted, err := withKeys(sch, sortBy)
			if err != nil {
				return yterrors.Err(fmt.Sprintf("Output /%s: %v", p, err))
			}
			if app && len(n.rows) > 0 && !slices.Equal(n.effectiveSchema().KeyColumns(), sortBy) {
				return yterrors.Err(yterrors.CodeSortOrderViolation, fmt.Sprintf("Cannot append rows sorted by %v to /%s sorted by %v", sortBy, p, n.effectiveSchema().KeyColumns()))
			}
			sch = sorted
		}
		var prev []byte
		if app && len(n.rows) > 0 {
			prev = n.rows[len(n.rows)-1]
		}
		if err := checkRows(p, sch, prev, results[i]); err != nil {
			return err
		}
		m := v.mut(p)
		if !app {
			m.rows, m.appendFrom = nil, -1
		}
		if sch != n.schema {
			m.appendFrom = -1
		}
		m.rows = append(m.rows, results[i]...)
		m.schema = sch
		c.touch(m, true)
	}
	return nil
}

// withKeys returns s with cols as its key columns (in front, ascending):
// for a table without a schema, a weak schema of those columns.
func withKeys(s *schema.Schema, cols []string) (*schema.Schema, error) {
	if s == nil {
		f := false
		out := schema.Schema{Strict: &f}
		for _, c := range cols {
			out.Columns = append(out.Columns, schema.Column{Name: c, Type: schema.TypeAny, SortOrder: schema.SortAscending})
		}
		return &out, nil
	}
	var keys, rest []schema.Column
	for _, name := range cols {
		i := slices.IndexFunc(s.Columns, func(c schema.Column) bool { return c.Name == name })
		if i < 0 {
			if s.Strict == nil || *s.Strict {
				return nil, fmt.Errorf("sort column %q is not in the strict schema", name)
			}
			keys = append(keys, schema.Column{Name: name, Type: schema.TypeAny, SortOrder: schema.SortAscending})
			continue
		}
		col := s.Columns[i]
		col.SortOrder = schema.SortAscending
		keys = append(keys, col)
	}
	for _, col := range s.Columns {
		if !slices.Contains(cols, col.Name) {
			col.SortOrder = schema.SortNone
			rest = append(rest, col)
		}
	}
	out := s.Copy()
	out.Columns = append(keys, rest...)
	return &out, nil
}
