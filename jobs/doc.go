// Package jobs holds the toolkit's MapReduce jobs and the runners that
// execute them: Local, in this process over the embedded store, and YT, as
// YTsaurus operations. A job is written once against the YTsaurus Go SDK
// (go.ytsaurus.tech/yt/go/mapreduce, v0.0.33): a pointer to a struct with
// Do(ctx, in mapreduce.Reader, out []mapreduce.Writer) error and typed rows
// (yson tags for YTsaurus, parquet tags for the embedded store).
//
// # Adding a job
//
//  1. Define the job type in this package (a file of its own, e.g.
//     rechunk.go): a struct whose exported fields are its parameters, with
//     Do, InputTypes and OutputTypes. Rows are read with in.Next/in.Scan and
//     written with out[i].Write; a reducer uses mapreduce.GroupKeys.
//  2. Register it in an init function: jobs.Register("rechunk", "usage",
//     &Rechunk{}). That registers it with the SDK (gob) and with the CLI
//     (pillar jobs list / run). Only exported fields travel to a job
//     process; unexported ones are zero there, also under the local runner,
//     which clones the job the same way for every job it runs.
//  3. Run it: jobs.NewLocal(store, nil).Map(ctx, &Rechunk{...}, &jobs.Op{...})
//     or the same through a *YT. The job binary jobs/cmd/pillar-job imports
//     this package, so the new job is in it without further work. Keep the
//     package free of cgo (no grocksdb: nothing from sstbuilder, cobbled or
//     internal/rocks): the job binary is built with CGO_ENABLED=0.
//  4. Test it with the local runner (see local_test.go), and add it to the
//     conformance test (conformance_test.go) to prove that it behaves the
//     same inside a YTsaurus job process.
//
// # Local runner guarantees
//
//   - Map splits each input into row ranges (about two per worker over all
//     inputs, in proportion to their rows) and runs one job per range,
//     Op.Workers at a time. Output i of the job of range k lands after that of range k-1:
//     outputs keep input order (inputs in Op.Inputs order).
//   - Reduce and MapReduce key the rows by Op.SortBy (ReduceBy its prefix),
//     sort them with an external sort bounded by Op.MemoryLimit (sorted runs
//     spilled to a per-operation temp directory and merged), and give each
//     reduce job a contiguous run of whole key groups. As on YTsaurus,
//     KeySwitch() is true on the first row of every group except the first
//     row of a job. Rows with equal sort keys keep their input order
//     (Reduce: table index, then row index; MapReduce: the order the
//     mappers of consecutive ranges wrote them), so results do not depend
//     on scheduling. In the reduce phase of a MapReduce, TableIndex is 0 and
//     RowIndex counts the job's rows, as the SDK sees it with index control
//     attributes disabled.
//   - A Reduce input recorded as sorted by the operation's sort columns
//     (TableInfo.SortedBy has SortBy as a prefix) is not sorted again: it is
//     read in order and merged with the sorted runs of the other inputs, as
//     a YTsaurus reduce reads sorted tables. Its order is checked as it is
//     read; a row out of order fails the operation naming the table.
//     Inputs may be row ranges, "table[#lo:#hi]" (YPath syntax).
//   - Sort reads the inputs in parallel, sorts them the same way (ties in
//     input order) and writes consecutive key ranges with all workers, one
//     file each in key order, recording SortedBy on the table.
//   - Memory: the sort's buffers, capacity included, stay within an eighth
//     of Op.MemoryLimit (SortShare; plus one read buffer per run while
//     merging, up to another sixteenth); the store's writers buffer a row group per open
//     output file, each at most RowGroupShare (1/32 of the limit, 1-8 MiB)
//     and together about OutputShare (an eighth: OutputRowGroup divides it
//     among outputs × workers, at least 256 KiB each), and the readers a
//     page per input column, in the rest.
//   - Every job runs on its own gob-decoded copy of the job value, as on
//     YTsaurus; JobContext.JobCookie is the job's index, LookupVault reads
//     Op.Secrets.
//   - Outputs are written into one store transaction (Op.Tx or the runner's
//     own). If anything fails (a job returns an error or panics, a row does
//     not decode, the context is cancelled) the runner stops every job,
//     aborts the transaction, removes its temp files and returns the first
//     error: a *JobError naming the phase, the job, the last input row it
//     read (table, index) and the cause; errors.Is(err, ErrJobPanic) for a
//     panic. No output table appears and no file stays behind.
//
// # YTsaurus runner
//
// YT builds each operation's spec with BuildSpec (a pure function; the
// golden files under testdata/spec pin it): input and output Cypress paths
// under YTOptions.Root, reduce_by/sort_by, the job count (Op.Workers), the
// memory limit, the pool, Op.Secrets in the secure vault, and the YSON
// format the SDK's reader and writers speak. It uploads YTOptions.JobBinary
// (jobs/cmd/pillar-job, built with CGO_ENABLED=0) to a Cypress file cache
// once, attaches it as go-binary, and hands the spec to
// mapreduce.New(client), which adds the job command, the gob-encoded and
// encrypted job-state file and its key (vault entry job_state_key). The
// operation runs inside a YTsaurus transaction (the caller's, when Op.Tx
// implements YTTxer, else one of the runner's, committed on success), so a
// failed or cancelled operation leaves no output table; cancelling ctx
// aborts the operation. A Reduce input not sorted by SortBy on the cluster
// is sorted into a temporary table first (YTsaurus reduces sorted tables
// only; the local runner sorts every Reduce input itself). Before starting
// an operation the runner creates its output tables that do not exist, with
// their folders, in the operation's transaction: the SDK creates missing
// outputs without `recursive` (a table under a new folder such as
// backfill-pending/chunks/<cv> would fail the start) and never a sort's.
//
// The job protocol is tested without a cluster: the FAKE cluster jobs/ytfake
// records what the SDK sends and runs each job through internal/exechost,
// which executes the real job binary as an exec node does (sandbox with
// go-binary and job-state, YT_JOB_ID, YT_JOB_COOKIE, YT_SECURE_VAULT, YSON
// rows with control attributes on stdin, output i on descriptor 3i+1), and
// the outputs are compared row for row with the local runner's
// (conformance_test.go); the whole pipeline on yt:// runs on it too
// (ytpipeline_test.go). With YT_PROXY set, `make test-yt` runs the same on a
// real cluster (docs/ytsaurus.md).
//
// Concurrency: a Local or YT runner may run several operations at once from
// different goroutines; one Op value may be shared by runs that do not set
// Stats. Progress implementations must accept Add from many goroutines.
package jobs
