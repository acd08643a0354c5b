package cli

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/bench/scalebench"
	"github.com/pillarkit/pillar/bench/scalefloor"
	"github.com/pillarkit/pillar/internal/bytesize"
)

// A benchmark step (a child of `pillar bench scale`) records its heap peaks
// for the report.
func init() {
	if p := os.Getenv(scalebench.HeapEnv); p != "" {
		go scalebench.SampleHeap(p)
	}
}

func benchScaleCommand() *cli.Command {
	return &cli.Command{
		Name:  "scale",
		Usage: "corpus-scale benchmark: peak RSS, pages/s and bytes written per pipeline step against N",
		Description: `For each page size (--sizes) and corpus size (--n), generates N synthetic HTML pages and
runs the full round — ingest → backfill rechunk → backfill embed → subsets recompute →
publish → export — then the incremental round: edit --edit-fraction of the pages,
re-ingest them, rechunk, embed and publish (the queue is then ready for Lorry).

Every step is a child process of this binary at --memory-limit, so its peak RSS is the
child's own (ru_maxrss); its CPU seconds (user + system) and the load average at its start
and end are recorded beside the wall time. An N given twice in --n runs again (a repeat:
the big round's pages/s must hold against each small round). Writes results.md (table and
targets), results.json and plots (rss-, rate-, cpurate-, bytes-<size>.png) to --out, and
prints the table.
--floors runs, after each step of the full round, its floor as a child process of its own: a
bare loop (package bench/scalefloor) that reads the step's input (the corpus, or the Parquet
files of its input tables) with parquet-go, applies the step's own transformation (clean,
chunk, embed, evaluate the policies, encode the records) and writes the same rows with the
same schema, codec and row-group bounds into a scratch folder, with no sort, merge,
transaction or bookkeeping. The report then has, per step, pages per CPU-second of the step
and of its floor and their ratio, and each one's CPU utilisation (CPU-seconds over wall
seconds); a floor that wrote another row count than its step fails the run.
--big adds N = 1,000,000 with the first page size. Every target is printed as met or
missed; a target whose measurements are missing (a step that did not run, a single N, an
unfinished --big run) is missed.

Examples:
   pillar bench scale --out bench-out/scale
   pillar bench scale --out /tmp/scale --n 2000,8000 --sizes 4KiB     # quick look
   pillar bench scale --out bench-out/scale --n 80000 --sizes 4KiB --floors   # steps against their floors
   pillar bench scale --out bench-out/scale --big
   pillar bench scale --out bench-out/big --sizes 4KiB --big-only
   pillar bench scale --out bench-out/fair --n 10000,160000,10000 --sizes 4KiB   # 10k before and after
   pillar bench scale --out bench-out/all --from-json bench-out/scale/results.json,bench-out/big/results.json`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Value: "bench-out/scale", Usage: "folder for results.md, results.json and the plots"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON (results.json and results.md are written either way)"},
			&cli.StringFlag{Name: "data", Usage: "working folder for corpora and stores (default: a temporary folder, removed afterwards)"},
			&cli.StringFlag{Name: "n", Value: "10000,40000,160000", Usage: "comma-separated corpus sizes"},
			&cli.StringFlag{Name: "sizes", Value: "4KiB,20KiB", Usage: "comma-separated page sizes (bytes of HTML)"},
			&cli.BoolFlag{Name: "big", Usage: "also run N = 1,000,000 with the first page size of --sizes"},
			&cli.BoolFlag{Name: "big-only", Usage: "run only the N = 1,000,000 round (merge its results.json with another run's through --from-json)"},
			&cli.StringFlag{Name: "memory-limit", Value: "64MiB", Usage: "--memory-limit of every step"},
			&cli.Float64Flag{Name: "edit-fraction", Value: 0.001, Usage: "fraction of the pages edited in the incremental round"},
			&cli.IntFlag{Name: "workers", Usage: "--workers of every step (default: all CPUs)"},
			&cli.IntFlag{Name: "partitions", Value: 16, Usage: "partitions of the stores"},
			&cli.BoolFlag{Name: "keep", Usage: "keep each round's corpus and store under --data"},
			&cli.StringFlag{Name: "profile", Usage: "folder for a heap profile of every step (in-use memory at its peak live heap; for diagnosis: it slows the steps)"},
			&cli.BoolFlag{Name: "floors", Usage: "after each step of the full round, run its floor (the same I/O and transformation in a bare loop) and report pages per CPU-second of both, their ratio and each one's CPU utilisation"},
			&cli.StringFlag{Name: "from-json", Usage: "run nothing: redraw the table and plots of saved results.json files (comma-separated: merged, e.g. a --big-only run with the main one) into --out"},
		},
		Subcommands: []*cli.Command{benchScaleFloorCommand()},
		Action: func(c *cli.Context) error {
			if f := c.String("from-json"); f != "" {
				rep, err := scalebench.Load(strings.Split(f, ",")...)
				if err != nil {
					return err
				}
				if err := rep.Write(c.String("out")); err != nil {
					return err
				}
				if c.Bool("json") {
					return printJSON(c.App.Writer, rep)
				}
				fmt.Print(rep.Markdown())
				return nil
			}
			opts := scalebench.Options{Data: c.String("data"), MemoryLimit: c.String("memory-limit"),
				EditFraction: c.Float64("edit-fraction"), Workers: c.Int("workers"), Partitions: c.Int("partitions"), Log: os.Stderr, Keep: c.Bool("keep"),
				Profile: c.String("profile"), Floors: c.Bool("floors"),
				// A long run saves what it measured after every round.
				AfterRound: func(r *scalebench.Report) { _ = r.Write(c.String("out")) }}
			if _, err := bytesize.ParseFlag("memory-limit", opts.MemoryLimit); err != nil {
				return err
			}
			for _, f := range strings.Split(c.String("n"), ",") {
				n, err := strconv.Atoi(strings.TrimSpace(f))
				if err != nil || n < 1 {
					return fmt.Errorf("--n: %q is not a page count", f)
				}
				opts.Ns = append(opts.Ns, n)
			}
			for _, f := range strings.Split(c.String("sizes"), ",") {
				b, err := bytesize.Parse(f)
				if err != nil || b < 512 {
					return fmt.Errorf("--sizes: %q is not a page size of at least 512 bytes", f)
				}
				opts.Sizes = append(opts.Sizes, int(b))
			}
			var rep *scalebench.Report
			var err error
			if !c.Bool("big-only") {
				rep, err = scalebench.Run(c.Context, opts)
			} else {
				rep = &scalebench.Report{Options: opts}
			}
			if c.Bool("big") || c.Bool("big-only") {
				if err == nil {
					big := opts
					big.Ns, big.Sizes = []int{1_000_000}, opts.Sizes[:1]
					var more *scalebench.Report
					more, err = scalebench.Run(c.Context, big)
					if more != nil {
						rep.Steps = append(rep.Steps, more.Steps...)
						rep.Load = append(rep.Load, more.Load...)
						if rep.Started.IsZero() {
							rep.Started = more.Started
						}
					}
				}
				rep.BigN = 1_000_000 // missed unless every step of it ran
				rep.Reevaluate()
			}
			if rep != nil && len(rep.Steps) > 0 {
				if werr := rep.Write(c.String("out")); werr != nil && err == nil {
					err = werr
				}
				if c.Bool("json") {
					if jerr := printJSON(c.App.Writer, rep); jerr != nil && err == nil {
						err = jerr
					}
				} else {
					fmt.Print(rep.Markdown())
				}
			}
			return err
		},
	}
}

// benchScaleFloorCommand is the child `pillar bench scale --floors` runs for
// a step's floor (hidden: the benchmark passes the step's inputs).
func benchScaleFloorCommand() *cli.Command {
	return &cli.Command{
		Name:   "floor",
		Hidden: true,
		Usage:  "run one step's floor (a child of pillar bench scale --floors) and print its result as JSON",
		Description: `Reads the step's input (--from for ingest, else the files of the input tables of --store),
applies the step's transformation and writes the same rows into --scratch, in a bare loop
with one goroutine per CPU (--workers). Prints {"step","rows_in","rows_out","files","bytes"}.

Examples:
   pillar bench scale floor --step rechunk --store /tmp/s --scratch /tmp/f --chunker recursive:size=512,overlap=64`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "step", Required: true, Usage: "the step: " + strings.Join(scalefloor.Steps, ", ")},
			&cli.StringFlag{Name: "store", Usage: "the store the step ran on (a directory)", EnvVars: []string{envStore}},
			&cli.StringFlag{Name: "from", Usage: "ingest: the corpus folder"},
			&cli.StringFlag{Name: "base-url", Usage: "ingest: the --base-url of the step"},
			&cli.StringFlag{Name: "scratch", Required: true, Usage: "folder the floor writes into"},
			&cli.StringFlag{Name: "chunker", Usage: "rechunk: the chunker spec"},
			&cli.StringFlag{Name: "chunks", Usage: "embed: the chunk version read"},
			&cli.StringFlag{Name: "model", Usage: "embed: the model spec"},
			&cli.StringFlag{Name: "policies", Usage: "subsets recompute, publish, export: the policy file"},
			&cli.StringFlag{Name: "as-of", Usage: "subsets recompute: the --as-of (RFC 3339)"},
			&cli.IntFlag{Name: "workers", Usage: "goroutines (default: GOMAXPROCS)"},
			memoryLimitFlag,
		},
		Action: func(c *cli.Context) error {
			o := scalefloor.Options{Step: c.String("step"), Store: c.String("store"), Corpus: c.String("from"), BaseURL: c.String("base-url"),
				Scratch: c.String("scratch"), Chunker: c.String("chunker"), ChunkVersion: c.String("chunks"), Model: c.String("model"),
				Policies: c.String("policies"), Workers: c.Int("workers")}
			if a := c.String("as-of"); a != "" {
				t, err := time.Parse(time.RFC3339, a)
				if err != nil {
					return fmt.Errorf("--as-of: %w", err)
				}
				o.AsOf = t
			}
			lim, err := memoryLimit(c)
			if err != nil {
				return err
			}
			o.MemoryLimit = lim
			res, err := scalefloor.Run(c.Context, o)
			if err != nil {
				return err
			}
			return printJSON(c.App.Writer, res)
		},
	}
}
