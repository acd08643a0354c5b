package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"go.ytsaurus.tech/yt/go/mapreduce"

	"github.com/pillarkit/pillar/pillar"
)

// Runner runs MapReduce jobs over store tables. Local runs them in this
// process over the embedded store; YT starts YTsaurus operations. The same
// job value runs on either.
type Runner interface {
	// Map runs mapper over the rows of op.Inputs; mapper output i goes to
	// op.Outputs[i].
	Map(ctx context.Context, mapper mapreduce.Job, op *Op) error
	// Reduce groups the rows of op.Inputs by op.ReduceBy (sorted by
	// op.SortBy within a group) and runs reducer over them; KeySwitch is
	// true on the first row of every group but the first of a job.
	Reduce(ctx context.Context, reducer mapreduce.Job, op *Op) error
	// MapReduce runs mapper, sorts its output 0 by op.SortBy and reduces
	// it. Mapper outputs 1..op.MapperOutputs go straight to
	// op.Outputs[0:op.MapperOutputs]; reducer output i goes to
	// op.Outputs[op.MapperOutputs+i].
	MapReduce(ctx context.Context, mapper, reducer mapreduce.Job, op *Op) error
	// Sort writes the rows of op.Inputs to op.Outputs[0] sorted by
	// op.SortBy.
	Sort(ctx context.Context, op *Op) error
}

// Sentinel errors.
var (
	// ErrInvalidOp: the Op is incomplete or contradicts itself.
	ErrInvalidOp = errors.New("invalid operation")
	// ErrJobPanic: a job panicked; the operation failed, the process did not.
	ErrJobPanic = errors.New("job panicked")
	// ErrNotRegistered: the job type was not registered with
	// mapreduce.Register, so it cannot travel to a job process.
	ErrNotRegistered = errors.New("job type is not registered")
)

// Output is one output table of an operation.
type Output struct {
	// Table is the table's name in the store (a Cypress path under the
	// store root on YTsaurus).
	Table string
	// RowType is a value of the row struct written to the table (e.g.
	// pillar.Chunk{}). The local store needs it to create the table. The
	// default value is the job's OutputTypes()[i], when it returns one.
	RowType any
	// SortedBy records that the job writes the rows sorted by these columns.
	// Sort sets it to Op.SortBy itself. The default value is nil.
	SortedBy []string
	// Append adds rows after the table's existing rows instead of replacing
	// them. The default value is false (replace).
	Append bool
	// Scratch marks an intermediate table the pipeline drops when its run
	// ends (pillar.WriteOptions.Scratch: a cheaper codec on the embedded
	// store). The default value is false.
	Scratch bool
}

// Op describes one operation: its tables, keys and resources. It is
// read-only to the runner; one Op may be reused for several runs.
type Op struct {
	// Title names the operation in logs, progress and on YTsaurus. The
	// default value is "<kind> <job type>".
	Title string
	// Inputs are the input tables; a job sees input i as TableIndex() == i.
	// An input may select a row range in YPath syntax, "table[#lo:#hi]"
	// (rows lo ≤ i < hi; RowIndex stays the table's): YTsaurus reads the
	// path as it is, the local runner clamps the range to the table.
	Inputs []string
	// InputTypes are the row types of the inputs, used where the runner
	// itself must decode input rows (the grouping of Reduce, Sort). The
	// default value is the reducer's InputTypes() (a single type serves
	// every input); for Sort, the output's RowType.
	InputTypes []any
	// Outputs are the output tables; a job writes output i through out[i].
	Outputs []Output
	// ReduceBy are the grouping columns of Reduce and MapReduce.
	ReduceBy []string
	// SortBy orders rows: the columns of Sort, and the order of rows within
	// a group for Reduce and MapReduce (ReduceBy must be its prefix). The
	// default value is ReduceBy.
	SortBy []string
	// MapperOutputs is the number of MapReduce mapper outputs (after the
	// first, which feeds the reducer) that go straight to Outputs. The
	// default value is 0.
	MapperOutputs int
	// Tx receives the outputs. When set, the runner reads the inputs from
	// it, writes the outputs into it and leaves Commit to the caller, so a
	// backfill can commit its outputs together with other changes. If the
	// operation fails once started (any error but ErrInvalidOp and
	// ErrNotRegistered, which are found before anything is read or
	// written), the runner aborts Tx: it may hold partial output and must
	// not commit. The default value is nil: the runner begins its own
	// transaction and commits it when the operation succeeds.
	Tx pillar.Tx
	// MemoryLimit bounds the memory of a local operation, in bytes: its
	// sorts buffer at most an eighth of it before spilling (SortShare; their
	// merge read buffers, the readers, writers and jobs use the rest). On YTsaurus it
	// is the memory limit of one job. The default value is 512 MiB.
	MemoryLimit int64
	// Workers is the number of jobs run in parallel by the local runner, and
	// the job count hint on YTsaurus (0 lets the scheduler choose there).
	// The default value is GOMAXPROCS.
	Workers int
	// Secrets are visible to jobs through JobContext.LookupVault; on
	// YTsaurus they travel in the operation's secure vault. The default
	// value is none.
	Secrets map[string]string
	// Progress receives rows and bytes done. The default value is nil (no
	// progress reports).
	Progress Progress
	// Logger receives the runner's log lines. The default value discards
	// them.
	Logger *slog.Logger
	// Stats, when set, receives the statistics of the operation when it
	// ends (also when it fails). The default value is nil.
	Stats *Stats
}

// Stats describe one run of an operation.
type Stats struct {
	InputRows  int64
	OutputRows int64
	// Jobs is the number of map and reduce jobs run.
	Jobs int
	// SortedBytes is the size of the keyed rows the sort handled;
	// SpillRuns and SpilledBytes what it wrote to disk (merge passes
	// included). All zero for a Map.
	SortedBytes  int64
	SpillRuns    int
	SpilledBytes int64
	Elapsed      time.Duration
}

// DefaultMemoryLimit is Op.MemoryLimit's default.
const DefaultMemoryLimit = 512 << 20

// Kind is the type of an operation.
type Kind string

// Operation kinds.
const (
	KindMap       Kind = "map"
	KindReduce    Kind = "reduce"
	KindMapReduce Kind = "map_reduce"
	KindSort      Kind = "sort"
)

// Validate checks the Op for an operation of kind k.
func (op *Op) Validate(k Kind) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("jobs: %s: %w: %s", k, ErrInvalidOp, fmt.Sprintf(format, a...))
	}
	if len(op.Inputs) == 0 {
		return bad("no input tables")
	}
	if len(op.Outputs) == 0 {
		return bad("no output tables")
	}
	seen := map[string]bool{}
	for i, o := range op.Outputs {
		if o.Table == "" {
			return bad("output %d has no table name", i)
		}
		if seen[o.Table] {
			return bad("output table %q is listed twice", o.Table)
		}
		seen[o.Table] = true
		if slices.Contains(op.Inputs, o.Table) {
			return bad("table %q is both an input and an output", o.Table)
		}
	}
	if op.MemoryLimit < 0 || op.Workers < 0 {
		return bad("negative memory limit or worker count")
	}
	if op.MapperOutputs != 0 && k != KindMapReduce {
		return bad("MapperOutputs is only for map_reduce")
	}
	sortBy := op.sortBy()
	switch k {
	case KindReduce, KindMapReduce:
		if len(op.ReduceBy) == 0 {
			return bad("no reduce_by columns")
		}
		if len(sortBy) < len(op.ReduceBy) || !slices.Equal(sortBy[:len(op.ReduceBy)], op.ReduceBy) {
			return bad("reduce_by %v must be a prefix of sort_by %v", op.ReduceBy, sortBy)
		}
		if op.MapperOutputs < 0 || op.MapperOutputs >= len(op.Outputs) {
			return bad("MapperOutputs = %d leaves no output for the reducer (%d outputs)", op.MapperOutputs, len(op.Outputs))
		}
	case KindSort:
		if len(op.SortBy) == 0 {
			return bad("no sort_by columns")
		}
		if len(op.Outputs) != 1 {
			return bad("sort writes exactly one output table, got %d", len(op.Outputs))
		}
		if len(op.ReduceBy) > 0 {
			return bad("sort takes no reduce_by")
		}
	case KindMap:
		if len(op.ReduceBy) > 0 || len(op.SortBy) > 0 {
			return bad("map takes no reduce_by or sort_by")
		}
	}
	return nil
}

func (op *Op) sortBy() []string {
	if len(op.SortBy) > 0 {
		return op.SortBy
	}
	return op.ReduceBy
}

func (op *Op) title(k Kind, jobs ...any) string {
	if op.Title != "" {
		return op.Title
	}
	var names []string
	for _, j := range jobs {
		if j != nil {
			names = append(names, fmt.Sprintf("%T", j))
		}
	}
	if len(names) == 0 {
		return string(k) + " " + strings.Join(op.Inputs, ",")
	}
	return string(k) + " " + strings.Join(names, "+")
}

// JobError is the error of a job that failed (returned an error, panicked,
// or failed to read or write a row).
type JobError struct {
	// Phase is "map", "reduce" or "sort".
	Phase string
	// Job is the job's type, e.g. "*jobs.WordCountMapper".
	Job string
	// Table and Row name the last input row the job read; Row is -1 when it
	// had not read one. Table is "(map output)" in the reduce phase of a
	// MapReduce, whose rows come from the mapper.
	Table string
	Row   int64
	// Stack is the goroutine stack of a panic.
	Stack string
	Err   error
}

func (e *JobError) Error() string {
	where := "before the first input row"
	if e.Row >= 0 {
		where = fmt.Sprintf("input row (%s, %d)", e.Table, e.Row)
	}
	return fmt.Sprintf("jobs: %s job %s: %s: %v", e.Phase, e.Job, where, e.Err)
}

func (e *JobError) Unwrap() error { return e.Err }

// SplitRowRange splits an input of the form "table[#lo:#hi]" into the table
// and its row range; an input without a range gives a nil range.
func SplitRowRange(in string) (string, *pillar.Range, error) {
	i := strings.IndexByte(in, '[')
	if i < 0 || !strings.HasSuffix(in, "]") {
		return in, nil, nil
	}
	lo, hi, ok := strings.Cut(in[i+1:len(in)-1], ":")
	var r pillar.Range
	_, err1 := fmt.Sscanf(lo, "#%d", &r.Start)
	_, err2 := fmt.Sscanf(hi, "#%d", &r.End)
	if !ok || err1 != nil || err2 != nil || r.Start < 0 || r.End < r.Start {
		return "", nil, fmt.Errorf("input %q: a row range is [#lo:#hi] with 0 <= lo <= hi", in)
	}
	return in[:i], &r, nil
}

// RowRange returns table restricted to rows [lo, hi) (see Op.Inputs).
func RowRange(table string, lo, hi int64) string { return fmt.Sprintf("%s[#%d:#%d]", table, lo, hi) }
