package cli

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/pillarkit/pillar/bench/lorrybench"
	"github.com/urfave/cli/v2"
)

func lorryBenchCommand() *cli.Command {
	return &cli.Command{
		Name:  "lorry",
		Usage: "Lorry priority-lanes benchmark: fresh updates delivered while a bulk backlog drains to 3 replicas",
		Description: `Starts, in this process, a local store, a control plane (SQLite over loopback gRPC), a
local object store and three cobbled nodes (real RocksDB, ingesting through the control
plane), then runs two phases, each on a cluster of its own started empty (removed after
the phase, so a phase never ingests into replicas holding the other's backlog):

  bulk only     --records bulk records of --value-size bytes (a republish) are queued,
                then one Lorry worker delivers them; the time to the last one applied
                on all three replicas gives the baseline bulk throughput
  bulk + fresh  the same backlog again, while --fresh-rate fresh updates a second
                (crawl updates of random pages of the backlog) are committed until the
                backlog is delivered

and reports the fresh updates' latency from the commit that queued them to being applied
on all three replicas (p50/p90/p99/max), the bulk throughput ratio (mixed / baseline),
Lorry's loss counter and its own latency view. Writes results.md (with the targets),
results.json and latency.png (latency by priority over time) to --out; with --runs N,
each run's under run-<n>/ and a table of all runs.

It prints a targets table (met / missed) and exits 1 when a target is missed (with
--runs, when any run missed it), also when nothing was delivered; --allow-missed
exits 0 all the same.

The issue's full size is --records 200000 (about 10 GB of values per phase, in the queue,
the object store and three replicas' copies): run it where the disk and cores allow; on a small shared machine run
a scaled-down size (the default 4000) — the backlog still takes much longer to drain than
the fresh target.

Examples:
   pillar bench lorry --out bench-out/lorry
   pillar bench lorry --out bench-out/lorry --records 200000 --data /big/disk/lorrybench
   pillar bench lorry --out bench-out/lorry --records 8000 --in-order    # with the in-order peer
   pillar bench lorry --out bench-out/lorry --records 20000 --runs 3     # repeated runs, all reported
   pillar bench lorry --out bench-out/lorry --records 40000 --fresh-ride-wait -1s   # fresh records never ride bulk batches
   pillar bench lorry --out /tmp/lorry --records 500 --value-size 8192 --partitions 4   # quick look`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Value: "bench-out/lorry", Usage: "folder for results.md, results.json and latency.png"},
			&cli.StringFlag{Name: "data", Usage: "folder for the cluster's data (default: a temporary folder, removed afterwards)"},
			&cli.IntFlag{Name: "records", Value: 4000, Usage: "bulk backlog (the issue's full size: 200000)"},
			&cli.IntFlag{Name: "value-size", Value: 50 << 10, Usage: "bulk record size in bytes"},
			&cli.IntFlag{Name: "fresh-rate", Value: 100, Usage: "fresh updates per second during the mixed phase"},
			&cli.IntFlag{Name: "fresh-size", Usage: "fresh update size in bytes (default: --value-size)"},
			&cli.DurationFlag{Name: "fresh-commit-every", Value: 100 * time.Millisecond, Usage: "the fresh producer commits what is due this often"},
			&cli.IntFlag{Name: "partitions", Value: 8, Usage: "partitions (each with 3 replicas)"},
			&cli.DurationFlag{Name: "max-batch-age", Value: time.Second, Usage: "Lorry's --max-batch-age (default: Lorry's, 1s; 200ms until fresh records rode bulk batches)"},
			&cli.Float64Flag{Name: "bulk-min-share", Value: 0.25, Usage: "Lorry's --bulk-min-share"},
			&cli.BoolFlag{Name: "skip-baseline", Usage: "skip the bulk-only phase (no throughput ratio)"},
			&cli.BoolFlag{Name: "in-order", Usage: "add the peer phase: the same backlog and fresh traffic at one priority (delivered in queue order, as before priorities)"},
			&cli.Int64Flag{Name: "max-batch-bytes", Usage: "Lorry's --max-batch-bytes (default: Lorry's, 8 MiB)"},
			&cli.IntFlag{Name: "runs", Value: 1, Usage: "run the benchmark this many times (each on a fresh cluster); every run is reported, and a target counts as met only if every run met it"},
			&cli.BoolFlag{Name: "allow-missed", Usage: "exit 0 even when a target is missed (the report still says which)"},
			&cli.Int64Flag{Name: "fresh-bulk-batch-bytes", Usage: "bulk batch size while fresh records flow (default: --max-batch-bytes)"},
			&cli.IntFlag{Name: "max-bulk-unapplied", Usage: "Lorry's --max-bulk-unapplied (default: Lorry's)"},
			&cli.IntFlag{Name: "max-bulk-unapplied-total", Usage: "Lorry's --max-bulk-unapplied-total (default: Lorry's, no such bound)"},
			&cli.DurationFlag{Name: "replica-poll", Usage: "Lorry's --replica-poll (default: Lorry's, 250ms)"},
			&cli.DurationFlag{Name: "fresh-ride-wait", Usage: "Lorry's --fresh-ride-wait (default: Lorry's, 1s; negative, such as -1s: fresh records never ride bulk batches)"},
			&cli.IntFlag{Name: "node-ingest-concurrency", Usage: "the cobbled nodes' --ingest-concurrency (default: cobbled's, 2)"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON (results.json and results.md are written either way)"},
			&cli.StringFlag{Name: "cpuprofile", Hidden: true, Usage: "write a CPU profile of the run to this file"},
		},
		Action: func(c *cli.Context) error {
			stop, err := startCPUProfile(c.String("cpuprofile"))
			if err != nil {
				return err
			}
			defer stop()
			res, err := lorrybench.RunSeries(c.Context, lorrybench.Options{
				Dir: c.String("data"), Records: c.Int("records"), ValueSize: c.Int("value-size"),
				FreshRate: c.Int("fresh-rate"), FreshSize: c.Int("fresh-size"), FreshCommitEvery: c.Duration("fresh-commit-every"), Partitions: c.Int("partitions"),
				MaxBatchAge: c.Duration("max-batch-age"), BulkMinShare: c.Float64("bulk-min-share"),
				SkipBaseline: c.Bool("skip-baseline"), InOrder: c.Bool("in-order"),
				MaxBatchBytes: c.Int64("max-batch-bytes"), FreshBulkBatchBytes: c.Int64("fresh-bulk-batch-bytes"),
				MaxBulkUnapplied: c.Int("max-bulk-unapplied"), MaxBulkUnappliedTotal: c.Int("max-bulk-unapplied-total"), ReplicaPoll: c.Duration("replica-poll"), FreshRideWait: c.Duration("fresh-ride-wait"), NodeIngestConcurrency: c.Int("node-ingest-concurrency"),
				Progress: os.Stderr,
			}, c.Int("runs"))
			if err != nil {
				return err
			}
			if err := res.Write(c.String("out")); err != nil {
				return err
			}
			if c.Bool("json") {
				if err := printJSON(c.App.Writer, res); err != nil {
					return err
				}
			} else {
				fmt.Fprint(c.App.Writer, res.Markdown())
				fmt.Fprintf(c.App.Writer, "\nwrote %s/results.md, results.json, latency.png (per run: run-<n>/)\n", c.String("out"))
			}
			if missed := res.Missed(); len(missed) > 0 && !c.Bool("allow-missed") {
				var names []string
				for _, t := range missed {
					names = append(names, fmt.Sprintf("%s (want %s)", t.What, t.Want))
				}
				return cli.Exit(fmt.Sprintf("lorry bench: %d target(s) missed: %s", len(missed), strings.Join(names, "; ")), 1)
			}
			return nil
		},
	}
}
