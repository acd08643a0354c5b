package jobs

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"go.ytsaurus.tech/yt/go/guid"
	"go.ytsaurus.tech/yt/go/mapreduce"
	"go.ytsaurus.tech/yt/go/mapreduce/spec"
	"go.ytsaurus.tech/yt/go/ypath"
	"go.ytsaurus.tech/yt/go/yt"
)

// YTOptions configure a YT runner and the specs it builds.
type YTOptions struct {
	// Root is the Cypress directory holding the store's tables: table
	// "chunks/v1" is Root + "/chunks/v1". The default value is
	// "//home/pillar".
	Root ypath.Path
	// JobBinary is the local path of the job binary uploaded for the jobs
	// (build it with `CGO_ENABLED=0 go build -o bin/pillar-job
	// ./jobs/cmd/pillar-job`). It must register the same jobs as this
	// process. The default value "" uploads the running executable instead,
	// as the SDK does; that only works when it was built without cgo.
	JobBinary string
	// TmpDir holds temporary tables (reduce inputs sorted for a Reduce).
	// The default value is "//tmp/pillar/tmp".
	TmpDir ypath.Path
	// BinaryCache is the Cypress directory of the file cache the job binary
	// is uploaded to (by MD5, so an unchanged binary is uploaded once). The
	// default value is "//tmp/pillar/bin_cache".
	BinaryCache ypath.Path
	// Pool is the scheduler pool. The default value is "" (the user's
	// default pool).
	Pool string
	// MaxFailedJobs is max_failed_job_count. The default value is 0 (the
	// cluster's default).
	MaxFailedJobs int
	// PollInterval is how often a running operation is polled for its state
	// and progress. The default value is 2 s.
	PollInterval time.Duration
	// Logger receives the runner's log lines. The default value discards
	// them.
	Logger *slog.Logger
}

func (o *YTOptions) ensureDefaults() {
	if o.Root == "" {
		o.Root = "//home/pillar"
	}
	if o.TmpDir == "" {
		o.TmpDir = "//tmp/pillar/tmp"
	}
	if o.BinaryCache == "" {
		o.BinaryCache = "//tmp/pillar/bin_cache"
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 2 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// Validate checks the options.
func (o *YTOptions) Validate() error {
	if !strings.HasPrefix(string(o.Root), "//") {
		return fmt.Errorf("jobs: yt: root %q is not an absolute Cypress path", o.Root)
	}
	if o.JobBinary != "" {
		if st, err := os.Stat(o.JobBinary); err != nil {
			return fmt.Errorf("jobs: yt: job binary: %w", err)
		} else if st.Mode()&0o111 == 0 {
			return fmt.Errorf("jobs: yt: job binary %s is not executable", o.JobBinary)
		}
	}
	return nil
}

// TablePath returns the Cypress path of a store table.
func (o *YTOptions) TablePath(table string) ypath.Path {
	root := o.Root
	if root == "" {
		root = "//home/pillar"
	}
	return ypath.Path(strings.TrimSuffix(string(root), "/") + "/" + table)
}

// BuildSpec builds the YTsaurus operation spec of an Op, before the SDK adds
// the job command, the job binary and job-state files and the job-state key.
// It is a pure function of its arguments.
func BuildSpec(k Kind, op *Op, o *YTOptions) (*spec.Spec, error) {
	if err := op.Validate(k); err != nil {
		return nil, err
	}
	var opts YTOptions
	if o != nil {
		opts = *o
	}
	opts.ensureDefaults()
	var s *spec.Spec
	switch k {
	case KindMap:
		s = spec.Map()
	case KindReduce:
		s = spec.Reduce()
	case KindMapReduce:
		s = spec.MapReduce()
	case KindSort:
		s = spec.Sort()
	default:
		return nil, fmt.Errorf("jobs: %w: unknown kind %q", ErrInvalidOp, k)
	}
	if op.Title != "" {
		s.Title = op.Title
	}
	s.Pool = opts.Pool
	s.MaxFailedJobCount = opts.MaxFailedJobs
	s.Annotations = map[string]any{"pillar_kind": string(k)}
	for _, in := range op.Inputs {
		s = s.AddInput(opts.TablePath(in))
	}
	out := func(o Output) ypath.YPath {
		p := ypath.NewRich(string(opts.TablePath(o.Table)))
		if o.Append {
			p.SetAppend()
		}
		if len(o.SortedBy) > 0 {
			p.SetSortedBy(o.SortedBy)
		}
		return p
	}
	if k == KindSort {
		s = s.SetOutput(out(op.Outputs[0]))
		s = s.SortByColumns(op.SortBy...)
		return s, nil
	}
	for _, o := range op.Outputs {
		s = s.AddOutput(out(o))
	}
	if k == KindReduce || k == KindMapReduce {
		s = s.ReduceByColumns(op.ReduceBy...)
		s = s.SortByColumns(op.sortBy()...)
	}
	for name, v := range op.Secrets {
		s = s.AddSecureVaultVar(name, v)
	}
	mem := op.MemoryLimit
	if mem == 0 {
		mem = DefaultMemoryLimit
	}
	// The SDK's job reader and writers speak YSON; say so rather than rely
	// on the cluster's default format.
	us := func() *spec.UserScript {
		return &spec.UserScript{Format: ysonBinary{Name: "yson", Format: "binary"}, MemoryLimit: mem}
	}
	switch k {
	case KindMap:
		s.Mapper = us()
		s.JobCount = op.Workers
	case KindReduce:
		s.Reducer = us()
		s.JobCount = op.Workers
	case KindMapReduce:
		s.Mapper, s.Reducer = us(), us()
		s.MapperOutputTableCount = op.MapperOutputs
		s.MapJobCount = op.Workers
	}
	return s, nil
}

// ysonBinary is the format <format=binary>yson.
type ysonBinary struct {
	Format string `yson:"format,attr"`
	Name   string `yson:",value"`
}

// YTTxer is what a pillar.Tx of the YTsaurus store offers so that operations
// run inside its YTsaurus transaction (and their outputs commit with it).
type YTTxer interface {
	YTTx() yt.Tx
}

// YT runs jobs as YTsaurus operations through mapreduce.New(client).
type YT struct {
	yc   yt.Client
	opts YTOptions

	mu         sync.Mutex
	binaryPath ypath.Path // uploaded job binary, once

	// skipCreateOutputs leaves output tables to the SDK (tests: proves the
	// fake catches the folders it would not create).
	skipCreateOutputs bool
}

var _ Runner = (*YT)(nil)

// NewYT returns a runner over a YTsaurus client.
func NewYT(yc yt.Client, opts *YTOptions) (*YT, error) {
	var o YTOptions
	if opts != nil {
		o = *opts
	}
	o.ensureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return &YT{yc: yc, opts: o}, nil
}

// createOutputs creates every output table of op that does not exist in
// tx, and its parent folders outside any transaction. The SDK creates
// missing output tables of a map, reduce or map_reduce without Recursive
// (mapreduce/prepare.go, createOutputTable), so an output under a folder
// that does not exist yet ("backfill-pending/chunks/<cv>",
// "tmp/recompute-…/matches") would fail the start; and it does not create
// a sort's output at all (OutputTablePath is not among OutputTablePaths),
// while YTsaurus requires output tables to exist. The folders are created
// outside tx because creating a node takes a shared lock on its parent's
// child key until the transaction ends: two backfills creating
// "backfill-pending" in their own transactions would refuse each other
// (code 402). An empty folder left by a failed run is harmless.
func (y *YT) createOutputs(ctx context.Context, tx yt.Tx, op *Op) error {
	if y.skipCreateOutputs {
		return nil
	}
	for _, o := range op.Outputs {
		p := y.opts.TablePath(o.Table)
		if err := y.createFolder(ctx, p); err != nil {
			return err
		}
		if _, err := tx.CreateNode(ctx, p, yt.NodeTable, &yt.CreateNodeOptions{IgnoreExisting: true}); err != nil {
			return fmt.Errorf("create output table %s: %w", p, err)
		}
	}
	return nil
}

// createFolder creates the folder holding p (with its parents) outside any
// transaction, unless it exists.
func (y *YT) createFolder(ctx context.Context, p ypath.Path) error {
	dir := string(p)
	i := strings.LastIndex(dir, "/")
	if i <= 1 {
		return nil
	}
	dir = dir[:i]
	if _, err := y.yc.CreateNode(ctx, ypath.Path(dir), yt.NodeMap, &yt.CreateNodeOptions{Recursive: true, IgnoreExisting: true}); err != nil {
		return fmt.Errorf("create folder %s: %w", dir, err)
	}
	return nil
}

// Map implements Runner.
func (y *YT) Map(ctx context.Context, mapper mapreduce.Job, op *Op) error {
	return y.run(ctx, KindMap, op, []any{mapper}, func(mr mapreduce.Client, s *spec.Spec, oo []mapreduce.OperationOption) (mapreduce.Operation, error) {
		return mr.Map(mapper, s, oo...)
	})
}

// Reduce implements Runner. YTsaurus reduces sorted tables only: an input
// not sorted by op.SortBy (its sorted_by attribute) is first sorted into a
// temporary table inside the operation's transaction, removed before the
// commit, so Reduce accepts the same inputs as the local runner.
func (y *YT) Reduce(ctx context.Context, reducer mapreduce.Job, op *Op) error {
	return y.run(ctx, KindReduce, op, []any{reducer}, func(mr mapreduce.Client, s *spec.Spec, oo []mapreduce.OperationOption) (mapreduce.Operation, error) {
		return mr.Reduce(reducer, s, oo...)
	})
}

// MapReduce implements Runner.
func (y *YT) MapReduce(ctx context.Context, mapper, reducer mapreduce.Job, op *Op) error {
	return y.run(ctx, KindMapReduce, op, []any{mapper, reducer}, func(mr mapreduce.Client, s *spec.Spec, oo []mapreduce.OperationOption) (mapreduce.Operation, error) {
		return mr.MapReduce(mapper, reducer, s, oo...)
	})
}

// Sort implements Runner.
func (y *YT) Sort(ctx context.Context, op *Op) error {
	return y.run(ctx, KindSort, op, nil, func(mr mapreduce.Client, s *spec.Spec, oo []mapreduce.OperationOption) (mapreduce.Operation, error) {
		return mr.Sort(s, oo...)
	})
}

type startFunc func(mr mapreduce.Client, s *spec.Spec, opts []mapreduce.OperationOption) (mapreduce.Operation, error)

func (y *YT) run(ctx context.Context, k Kind, op *Op, jobsOf []any, start startFunc) (err error) {
	s, err := BuildSpec(k, op, &y.opts)
	if err != nil {
		return err
	}
	title := op.title(k, jobsOf...)
	if s.Title == "" {
		s.Title = "pillar: " + title
	}
	log := op.Logger
	if log == nil {
		log = y.opts.Logger
	}
	log = log.With("op", title)
	for _, j := range jobsOf {
		if _, err := encodeJob(j); err != nil {
			return err
		}
	}
	var oo []mapreduce.OperationOption
	if y.opts.JobBinary != "" && k != KindSort {
		bin, err := y.uploadBinary(ctx)
		if err != nil {
			return err
		}
		s.PatchUserBinary(bin)
		oo = append(oo, mapreduce.SkipSelfUpload())
	}
	// Outputs appear atomically: in the caller's YTsaurus transaction, or
	// in one of ours that commits only when the operation completed. (The
	// SDK creates missing output tables before the operation starts; a
	// failed operation must not leave them behind.)
	var tx yt.Tx
	own := false
	if op.Tx != nil {
		t, ok := op.Tx.(YTTxer)
		if !ok {
			return fmt.Errorf("jobs: %s: %w: Op.Tx %T is not a transaction of the YTsaurus store", title, ErrInvalidOp, op.Tx)
		}
		tx = t.YTTx()
	} else {
		if tx, err = y.yc.BeginTx(ctx, nil); err != nil {
			return fmt.Errorf("jobs: %s: begin transaction: %w", title, err)
		}
		own = true
	}
	defer func() {
		if err != nil {
			if own {
				tx.Abort()
			} else {
				op.Tx.Abort()
			}
		}
	}()
	mr := mapreduce.New(y.yc, mapreduce.WithContext(ctx)).WithTx(tx)
	started := time.Now()
	if err := y.createOutputs(ctx, tx, op); err != nil {
		return fmt.Errorf("jobs: %s: %w", title, err)
	}
	// An output replacing a layered table drops its layers (layers.go).
	if err := y.replaceLayers(ctx, tx, op); err != nil {
		return fmt.Errorf("jobs: %s: %w", title, err)
	}
	// Layered inputs are resolved to their merged rows first (layers.go).
	// (Temporary tables are made in tx: a failed operation's go with it.)
	temps, err := y.resolveLayers(ctx, mr, tx, s, op, log)
	if err != nil {
		return fmt.Errorf("jobs: %s: %w", title, err)
	}
	if k == KindReduce {
		sorted, err := y.sortInputs(ctx, mr, tx, s, log)
		temps = append(temps, sorted...)
		if err != nil {
			return fmt.Errorf("jobs: %s: %w", title, err)
		}
	}
	o, err := start(mr, s, oo)
	if err != nil {
		return fmt.Errorf("jobs: %s: start operation: %w", title, err)
	}
	log.Info("jobs: operation started", "id", o.ID().String())
	if err := y.wait(ctx, o.ID(), op, log); err != nil {
		return fmt.Errorf("jobs: %s: operation %s: %w", title, o.ID(), err)
	}
	for _, p := range temps {
		if err := tx.RemoveNode(ctx, p, &yt.RemoveNodeOptions{Force: true}); err != nil {
			return fmt.Errorf("jobs: %s: remove temporary table %s: %w", title, p, err)
		}
	}
	if own {
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("jobs: %s: commit transaction: %w", title, err)
		}
	}
	if op.Stats != nil {
		*op.Stats = Stats{Elapsed: time.Since(started)}
	}
	log.Info("jobs: operation completed", "id", o.ID().String(), "elapsed", time.Since(started))
	return nil
}

// sortInputs sorts the reduce inputs that are not sorted by s.SortBy into
// temporary tables under YTOptions.TmpDir and points s at them.
func (y *YT) sortInputs(ctx context.Context, mr mapreduce.Client, tx yt.Tx, s *spec.Spec, log *slog.Logger) ([]ypath.Path, error) {
	var temps []ypath.Path
	for i, in := range s.InputTablePaths {
		var attrs struct {
			SortedBy []string `yson:"sorted_by"`
		}
		p := in.YPath()
		if err := tx.GetNode(ctx, p.Attrs(), &attrs, &yt.GetNodeOptions{Attributes: []string{"sorted_by"}}); err != nil {
			return nil, fmt.Errorf("input %s: %w", p, err)
		}
		if len(attrs.SortedBy) >= len(s.SortBy) && slices.Equal(attrs.SortedBy[:len(s.SortBy)], s.SortBy) {
			continue
		}
		tmp := y.opts.TmpDir.Child(guid.New().String())
		if err := y.createFolder(ctx, tmp); err != nil {
			return nil, err
		}
		if _, err := tx.CreateNode(ctx, tmp, yt.NodeTable, nil); err != nil {
			return nil, fmt.Errorf("temporary table for %s: %w", p, err)
		}
		temps = append(temps, tmp)
		// in, not p: a row range ("t[#lo:#hi]") selects the rows to sort.
		so, err := mr.Sort(spec.Sort().AddInput(in).SetOutput(tmp).SortByColumns(s.SortBy...))
		if err != nil {
			return nil, fmt.Errorf("sort input %s: %w", p, err)
		}
		log.Info("jobs: sorting reduce input", "input", p.String(), "sort_by", s.SortBy, "id", so.ID().String())
		if err := y.wait(ctx, so.ID(), &Op{}, log); err != nil {
			return nil, fmt.Errorf("sort input %s: operation %s: %w", p, so.ID(), err)
		}
		s.InputTablePaths[i] = tmp
	}
	return temps, nil
}

// wait polls the operation until it finishes, reporting job counts as
// progress; when ctx ends it aborts the operation.
func (y *YT) wait(ctx context.Context, id yt.OperationID, op *Op, log *slog.Logger) error {
	prog := op.Progress
	if prog == nil {
		prog = nopProgress{}
	}
	defer prog.Done()
	phase := false
	var done int64
	for {
		st, err := y.yc.GetOperation(ctx, id, &yt.GetOperationOptions{Attributes: []string{"state", "result", "brief_progress"}})
		if err != nil && ctx.Err() == nil {
			return err
		}
		if ctx.Err() != nil {
			abortCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if aerr := y.yc.AbortOperation(abortCtx, id, nil); aerr != nil {
				log.Warn("jobs: abort operation", "id", id.String(), "err", aerr)
			}
			return context.Cause(ctx)
		}
		if c := st.BriefProgress.TotalJobCounter; c != nil {
			if !phase {
				prog.Phase("jobs", c.Total, 0)
				phase = true
			}
			if c.Completed > done {
				prog.Add(c.Completed-done, 0)
				done = c.Completed
			}
		}
		if st.State.IsFinished() {
			if st.Result != nil && st.Result.Error != nil && st.Result.Error.Code != 0 {
				return y.failure(ctx, id, st.Result.Error)
			}
			if st.State != yt.StateCompleted {
				return fmt.Errorf("finished in state %s", st.State)
			}
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(y.opts.PollInterval):
		}
	}
}

// failure returns the operation's error with the stderr of a failed job.
func (y *YT) failure(ctx context.Context, id yt.OperationID, opErr error) error {
	res, err := y.yc.ListJobs(ctx, id, &yt.ListJobsOptions{JobState: &yt.JobFailed})
	if err != nil || len(res.Jobs) == 0 {
		return opErr
	}
	stderr, err := y.yc.GetJobStderr(ctx, id, res.Jobs[0].ID, nil)
	if err != nil || len(stderr) == 0 {
		return opErr
	}
	return fmt.Errorf("%w; stderr of job %s:\n%s", opErr, res.Jobs[0].ID, strings.TrimSpace(string(stderr)))
}

// uploadBinary puts the job binary in the Cypress file cache (by MD5) once
// per runner and returns its path.
func (y *YT) uploadBinary(ctx context.Context) (ypath.Path, error) {
	y.mu.Lock()
	defer y.mu.Unlock()
	if y.binaryPath != "" {
		return y.binaryPath, nil
	}
	fail := func(err error) (ypath.Path, error) {
		return "", fmt.Errorf("jobs: yt: upload job binary %s: %w", y.opts.JobBinary, err)
	}
	f, err := os.Open(y.opts.JobBinary)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	h := md5.New()
	if _, err := io.Copy(h, f); err != nil {
		return fail(err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	cache := y.opts.BinaryCache
	if _, err := y.yc.CreateNode(ctx, cache, yt.NodeMap, &yt.CreateNodeOptions{Recursive: true, IgnoreExisting: true}); err != nil {
		return fail(err)
	}
	if p, err := y.yc.GetFileFromCache(ctx, sum, &yt.GetFileFromCacheOptions{CachePath: cache}); err != nil {
		return fail(err)
	} else if p != nil {
		y.binaryPath = p.YPath()
		return y.binaryPath, nil
	}
	tmp := cache.Child("tmp").Child(guid.New().String())
	if _, err := y.yc.CreateNode(ctx, tmp, yt.NodeFile, &yt.CreateNodeOptions{Recursive: true}); err != nil {
		return fail(err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fail(err)
	}
	w, err := y.yc.WriteFile(ctx, tmp, &yt.WriteFileOptions{ComputeMD5: true})
	if err != nil {
		return fail(err)
	}
	if _, err := io.Copy(w, f); err != nil {
		w.Close()
		return fail(err)
	}
	if err := w.Close(); err != nil {
		return fail(err)
	}
	p, err := y.yc.PutFileToCache(ctx, tmp, sum, &yt.PutFileToCacheOptions{CachePath: cache})
	if err != nil {
		return fail(err)
	}
	if err := y.yc.RemoveNode(ctx, tmp, &yt.RemoveNodeOptions{Force: true}); err != nil {
		return fail(err)
	}
	y.binaryPath = p.YPath()
	return y.binaryPath, nil
}
