package cli

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/chaos"
)

func chaosCommand() *cli.Command {
	return &cli.Command{
		Name:  "chaos",
		Usage: "run the whole system under a seeded fault schedule and check it converges to what was committed",
		UsageText: "pillar chaos [--seed N] [--duration 5m] [--faults all|KIND,...] [options]\n" +
			"   pillar chaos --plan [--seed N] [--duration 5m]",
		Description: `Starts, on 127.0.0.1: a control plane on a fresh PostgreSQL database, the S3 server
(versitygw), three cobbled nodes and Lorry, all as child processes, with a fault proxy in
front of each process's object-store path and TCP proxies around each node. A writer
commits adds, updates and deletes to an embedded store at a steady rate (logging them to
committed.log); readers read through the hedging router and from each node directly.
Meanwhile the fault schedule derived from --seed injects: kill -9 and restart of a node,
of Lorry and of the control plane; object-store errors, slow responses, truncated and
bit-flipped downloads; a node cut off from everything, then healed; a node's disk
(a tmpfs mount, needs root) filled up, then freed. When the faults stop it waits for
convergence and checks: (1) every replica shows every key's last committed state,
(2) no reader saw a value that was never committed, (3) no replica went back to an older
version of a key, (4) per partition the registered batches cover the queue exactly once.
It prints a summary and exits non-zero (naming the seed) when a check fails.

Fault kinds: ` + strings.Join(chaos.AllFaults, ", ") + `

Examples:
   pillar chaos --seed 1 --duration 5m
   pillar chaos --seed 7 --duration 1m --faults kill-node,partition
   pillar chaos --plan --seed 7 --duration 5m      # print the schedule, run nothing
   pillar chaos --seed 3 --dir chaos-out --keep     # keep the logs, store and data`,
		Flags: []cli.Flag{
			&cli.Int64Flag{Name: "seed", Usage: "seed of the fault schedule, the writer and the readers (default: from the clock, printed)"},
			&cli.DurationFlag{Name: "duration", Value: chaos.DefaultDuration, Usage: "length of the fault phase"},
			&cli.StringFlag{Name: "faults", Value: "all", Usage: "fault kinds to inject, comma-separated"},
			&cli.StringFlag{Name: "dir", Usage: "working directory (default: a temporary one, removed after a passing run)"},
			&cli.BoolFlag{Name: "keep", Usage: "keep the working directory after a passing run"},
			&cli.StringFlag{Name: "postgres", Value: "postgres://postgres@127.0.0.1:5432/postgres", EnvVars: []string{"PILLAR_CHAOS_POSTGRES"}, Usage: "PostgreSQL server (a fresh database is created on it and dropped after)"},
			&cli.StringFlag{Name: "versitygw", EnvVars: []string{"PILLAR_VERSITYGW"}, Usage: "versitygw binary (default: bin/versitygw, $PATH)"},
			&cli.IntFlag{Name: "partitions", Value: 4, Usage: "partitions"},
			&cli.IntFlag{Name: "keys", Value: 120, Usage: "distinct pages the writer changes"},
			&cli.Float64Flag{Name: "rate", Value: 5, Usage: "writer commits per second (1–4 changes each)"},
			&cli.DurationFlag{Name: "converge-timeout", Value: 5 * chaos.Minute, Usage: "how long to wait for convergence after the faults"},
			&cli.BoolFlag{Name: "plan", Usage: "print the fault schedule for --seed and --duration and exit"},
			&cli.BoolFlag{Name: "json", Usage: "print the run's summary as JSON on stdout (progress goes to stderr)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("chaos: unexpected argument %q", c.Args().First())
			}
			kinds, err := chaos.ParseFaults(c.String("faults"))
			if err != nil {
				return err
			}
			if c.Bool("plan") {
				if !c.IsSet("seed") {
					return fmt.Errorf("chaos: --plan needs --seed")
				}
				for _, f := range chaos.Schedule(c.Int64("seed"), c.Duration("duration"), kinds, 3) {
					fmt.Println(f)
				}
				return nil
			}
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			stdout := io.Writer(os.Stdout)
			if c.Bool("json") {
				stdout = os.Stderr
			}
			sum, err := chaos.Run(c.Context, chaos.Options{
				Pillar: bin, Seed: c.Int64("seed"), Duration: c.Duration("duration"), Faults: kinds,
				Dir: c.String("dir"), Keep: c.Bool("keep"), Postgres: c.String("postgres"), Versitygw: c.String("versitygw"),
				Partitions: c.Int("partitions"), Keys: c.Int("keys"), CommitsPerSecond: c.Float64("rate"),
				ConvergeTimeout: c.Duration("converge-timeout"), Stdout: stdout, Logger: logger(),
			})
			if c.Bool("json") && sum != nil {
				if jerr := printJSON(c.App.Writer, sum); jerr != nil && err == nil {
					err = jerr
				}
			}
			return err
		},
	}
}
