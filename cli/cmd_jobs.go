package cli

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"go.ytsaurus.tech/yt/go/ypath"
	"go.ytsaurus.tech/yt/go/yson"

	"github.com/pillarkit/pillar/internal/bytesize"
	"github.com/pillarkit/pillar/jobs"
)

// jobsCommand runs registered MapReduce jobs over store tables, locally or
// on YTsaurus, and prints the YTsaurus specs they would run with.
func jobsCommand() *cli.Command {
	opFlags := func(extra ...cli.Flag) []cli.Flag {
		return append([]cli.Flag{
			&cli.StringFlag{Name: "store", Usage: "store location: a directory (embedded store); not needed with --yt-proxy or for spec", EnvVars: []string{"PILLAR_STORE"}},
			&cli.StringSliceFlag{Name: "input", Aliases: []string{"i"}, Usage: "input table (repeat for several; the job sees input N as TableIndex N)", Required: true},
			&cli.StringSliceFlag{Name: "output", Aliases: []string{"o"}, Usage: "output table (repeat; the job writes output N through out[N])", Required: true},
			&cli.BoolFlag{Name: "append", Usage: "append to the output tables instead of replacing them"},
			&cli.IntFlag{Name: "workers", Usage: "parallel jobs (local: default GOMAXPROCS; YTsaurus: job count hint)"},
			&cli.StringFlag{Name: "memory-limit", Value: "512MiB", Usage: "memory of the local sort (spills beyond it) and of one YTsaurus job; e.g. 256MiB, 2GiB"},
			&cli.StringSliceFlag{Name: "secret-env", Usage: "pass environment variable NAME to the jobs' secure vault (repeat)"},
			&cli.StringFlag{Name: "title", Usage: "operation title"},
			&cli.StringFlag{Name: "yt-proxy", Usage: "run on this YTsaurus cluster instead of locally (token from YT_TOKEN, else YT_TOKEN_FILE or ~/.yt/token)", EnvVars: []string{"YT_PROXY"}},
			&cli.StringFlag{Name: "yt-root", Value: "//home/pillar", Usage: "Cypress directory of the store's tables on YTsaurus"},
			&cli.StringFlag{Name: "job-binary", Value: "bin/pillar-job", Usage: "job binary uploaded to YTsaurus (CGO_ENABLED=0 go build -o bin/pillar-job ./jobs/cmd/pillar-job)"},
			&cli.BoolFlag{Name: "no-progress", Usage: "no progress bar or progress log lines"},
			&cli.BoolFlag{Name: "json", Usage: "print the operation's statistics as JSON"},
		}, extra...)
	}
	jobFlag := func(name, usage string) []cli.Flag {
		return []cli.Flag{
			&cli.StringFlag{Name: name, Usage: usage + " (see pillar jobs list)", Required: true},
			&cli.StringFlag{Name: name + "-params", Usage: "the " + name + "'s parameters as a JSON object of its exported fields"},
		}
	}
	keyFlags := []cli.Flag{
		&cli.StringFlag{Name: "reduce-by", Usage: "grouping columns, comma-separated", Required: true},
		&cli.StringFlag{Name: "sort-by", Usage: "order within a group, comma-separated; reduce-by must be its prefix (default: reduce-by)"},
	}
	return &cli.Command{
		Name:  "jobs",
		Usage: "run MapReduce jobs (map, reduce, map-reduce, sort) locally or on YTsaurus",
		Description: `Every batch computation is a MapReduce job written against the YTsaurus Go SDK. The same
job runs here, in parallel over the embedded store with an external sort bounded by
--memory-limit and outputs committed atomically, or on a YTsaurus cluster (--yt-proxy),
where the cgo-free job binary --job-binary is uploaded and run by the exec nodes.

Examples:
   pillar jobs list
   pillar jobs map --store data/store --job wordcount -i docs -o wc -o docwords
   pillar jobs mapreduce --store data/store --mapper wordcount --reducer wordsum \
       --reducer-params '{"Frequent": 10}' -i docs -o totals -o frequent --reduce-by word
   pillar jobs reduce --store data/store --job wordsum -i wc -o totals --reduce-by word
   pillar jobs sort --store data/store -i docs -o docs_by_host --sort-by host,page_key --row-type doc
   pillar jobs spec --kind mapreduce -i docs -o totals --reduce-by word --yt-root //home/pillar
   YT_PROXY=cluster.example pillar jobs map --job wordcount -i docs -o wc --job-binary bin/pillar-job`,
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list the registered jobs, their parameters and the row types",
				Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print as JSON"}},
				Action: func(c *cli.Context) error {
					if c.Bool("json") {
						type jobJSON struct {
							Name   string   `json:"name"`
							Type   string   `json:"type"`
							Params []string `json:"params"`
							Usage  string   `json:"usage"`
						}
						out := struct {
							Jobs     []jobJSON `json:"jobs"`
							RowTypes []string  `json:"row_types"`
						}{Jobs: []jobJSON{}, RowTypes: jobs.RowTypeNames()}
						for _, e := range jobs.Registered() {
							out.Jobs = append(out.Jobs, jobJSON{e.Name, fmt.Sprintf("%T", e.Job), append([]string{}, jobs.Params(e.Job)...), e.Usage})
						}
						return printJSON(c.App.Writer, out)
					}
					tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "JOB\tTYPE\tPARAMETERS\tUSAGE")
					for _, e := range jobs.Registered() {
						fmt.Fprintf(tw, "%s\t%T\t%s\t%s\n", e.Name, e.Job, strings.Join(jobs.Params(e.Job), ", "), e.Usage)
					}
					tw.Flush()
					fmt.Fprintln(c.App.Writer, "\nrow types (for sort --row-type):", strings.Join(jobs.RowTypeNames(), ", "))
					return nil
				},
			},
			{
				Name: "map", Usage: "run a mapper over the input tables",
				Flags: opFlags(jobFlag("job", "the mapper")...),
				Action: func(c *cli.Context) error {
					return runJobOp(c, jobs.KindMap, func(r jobs.Runner, op *jobs.Op) error {
						m, err := jobs.New(c.String("job"), []byte(c.String("job-params")))
						if err != nil {
							return err
						}
						return r.Map(c.Context, m, op)
					})
				},
			},
			{
				Name: "reduce", Usage: "group the input rows by --reduce-by and run a reducer",
				Flags: opFlags(append(jobFlag("job", "the reducer"), keyFlags...)...),
				Action: func(c *cli.Context) error {
					return runJobOp(c, jobs.KindReduce, func(r jobs.Runner, op *jobs.Op) error {
						j, err := jobs.New(c.String("job"), []byte(c.String("job-params")))
						if err != nil {
							return err
						}
						return r.Reduce(c.Context, j, op)
					})
				},
			},
			{
				Name: "mapreduce", Usage: "map, sort by --sort-by, reduce by --reduce-by",
				Flags: opFlags(append(append(append(jobFlag("mapper", "the mapper"), jobFlag("reducer", "the reducer")...), keyFlags...),
					&cli.IntFlag{Name: "mapper-outputs", Usage: "mapper outputs 1..N go straight to the first N --output tables"})...),
				Action: func(c *cli.Context) error {
					return runJobOp(c, jobs.KindMapReduce, func(r jobs.Runner, op *jobs.Op) error {
						m, err := jobs.New(c.String("mapper"), []byte(c.String("mapper-params")))
						if err != nil {
							return err
						}
						rd, err := jobs.New(c.String("reducer"), []byte(c.String("reducer-params")))
						if err != nil {
							return err
						}
						return r.MapReduce(c.Context, m, rd, op)
					})
				},
			},
			{
				Name: "sort", Usage: "sort the input tables into one output table",
				Flags: opFlags(
					&cli.StringFlag{Name: "sort-by", Usage: "sort columns, comma-separated", Required: true},
					&cli.StringFlag{Name: "row-type", Usage: "row type of the tables (see pillar jobs list)", Required: true}),
				Action: func(c *cli.Context) error {
					return runJobOp(c, jobs.KindSort, func(r jobs.Runner, op *jobs.Op) error { return r.Sort(c.Context, op) })
				},
			},
			{
				Name:  "spec",
				Usage: "print the YTsaurus operation spec an operation would run with (before the SDK adds command, files and key)",
				Flags: opFlags(
					&cli.StringFlag{Name: "kind", Usage: "map, reduce, mapreduce or sort", Required: true},
					&cli.StringFlag{Name: "reduce-by", Usage: "grouping columns"},
					&cli.StringFlag{Name: "sort-by", Usage: "sort columns"},
					&cli.IntFlag{Name: "mapper-outputs", Usage: "mapper outputs that go straight to output tables"},
					&cli.StringFlag{Name: "pool", Usage: "scheduler pool"}),
				Action: func(c *cli.Context) error {
					kinds := map[string]jobs.Kind{"map": jobs.KindMap, "reduce": jobs.KindReduce, "mapreduce": jobs.KindMapReduce, "map_reduce": jobs.KindMapReduce, "sort": jobs.KindSort}
					k, ok := kinds[c.String("kind")]
					if !ok {
						return fmt.Errorf("--kind %q: not map, reduce, mapreduce or sort", c.String("kind"))
					}
					op, err := jobOp(c, k)
					if err != nil {
						return err
					}
					s, err := jobs.BuildSpec(k, op, &jobs.YTOptions{Root: ypath.Path(c.String("yt-root")), Pool: c.String("pool")})
					if err != nil {
						return err
					}
					for name := range s.SecureVault {
						s.SecureVault[name] = "<secret>"
					}
					b, err := yson.MarshalFormat(s, yson.FormatPretty)
					if err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "# operation type: %s\n%s\n", s.Type, b)
					return nil
				},
			},
		},
	}
}

// jobOp builds the Op from the flags.
func jobOp(c *cli.Context, k jobs.Kind) (*jobs.Op, error) {
	mem, err := bytesize.ParseFlag("memory-limit", c.String("memory-limit"))
	if err != nil {
		return nil, err
	}
	op := &jobs.Op{Title: c.String("title"), Inputs: c.StringSlice("input"), Workers: c.Int("workers"), MemoryLimit: mem,
		MapperOutputs: c.Int("mapper-outputs"), Logger: logger()}
	for _, o := range c.StringSlice("output") {
		op.Outputs = append(op.Outputs, jobs.Output{Table: o, Append: c.Bool("append")})
	}
	split := func(s string) []string {
		if s == "" {
			return nil
		}
		return strings.Split(s, ",")
	}
	op.ReduceBy, op.SortBy = split(c.String("reduce-by")), split(c.String("sort-by"))
	if k == jobs.KindSort && c.String("row-type") != "" {
		rt, ok := jobs.RowType(c.String("row-type"))
		if !ok {
			return nil, fmt.Errorf("--row-type %q: not one of %s", c.String("row-type"), strings.Join(jobs.RowTypeNames(), ", "))
		}
		op.Outputs[0].RowType = rt
	}
	for _, name := range c.StringSlice("secret-env") {
		v, ok := os.LookupEnv(name)
		if !ok {
			return nil, fmt.Errorf("--secret-env %s: the variable is not set", name)
		}
		if op.Secrets == nil {
			op.Secrets = map[string]string{}
		}
		op.Secrets[name] = v
	}
	return op, nil
}

// runJobOp runs one operation with the local runner or, with --yt-proxy,
// on YTsaurus, and prints its statistics.
func runJobOp(c *cli.Context, k jobs.Kind, run func(jobs.Runner, *jobs.Op) error) error {
	op, err := jobOp(c, k)
	if err != nil {
		return err
	}
	if !c.Bool("no-progress") {
		op.Progress = jobs.NewProgress(os.Stderr, logger(), 5*time.Second)
	}
	var st jobs.Stats
	op.Stats = &st
	var r jobs.Runner
	if proxy := c.String("yt-proxy"); proxy != "" {
		yc, err := newYTClient(proxy) // store_yt.go: the one client and token path
		if err != nil {
			return fmt.Errorf("--yt-proxy %s: %w", proxy, err)
		}
		if r, err = jobs.NewYT(yc, &jobs.YTOptions{Root: ypath.Path(c.String("yt-root")), JobBinary: c.String("job-binary"), Logger: logger()}); err != nil {
			return err
		}
	} else {
		if c.String("store") == "" {
			return fmt.Errorf("--store is required to run locally (or give --yt-proxy)")
		}
		store, err := openStore(c, false, 0)
		if err != nil {
			return err
		}
		defer store.Close()
		r = jobs.NewLocal(store, &jobs.LocalOptions{Logger: logger()})
	}
	if err := run(r, op); err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, map[string]any{"kind": string(k), "stats": st})
	}
	fmt.Fprintf(c.App.Writer, "%s: %d input rows → %d output rows in %d jobs, %s", k, st.InputRows, st.OutputRows, st.Jobs, st.Elapsed.Round(time.Millisecond))
	if st.SortedBytes > 0 {
		fmt.Fprintf(c.App.Writer, "; sorted %d bytes, %d spill runs (%d bytes)", st.SortedBytes, st.SpillRuns, st.SpilledBytes)
	}
	fmt.Fprintln(c.App.Writer)
	return nil
}
