package cli

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/chaos"
	"github.com/pillarkit/pillar/chaos/netns"
)

// runNetns is pillar chaos --netns.
func runNetns(c *cli.Context) error {
	for _, f := range []string{"faults", "plan", "postgres", "converge-timeout"} {
		if c.IsSet(f) {
			return fmt.Errorf("chaos --netns: --%s does not apply (the network run has its own PostgreSQL and scenarios)", f)
		}
	}
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	o := netns.Options{Pillar: bin, Seed: c.Int64("seed"), Dir: c.String("dir"), Keep: c.Bool("keep"),
		Versitygw: c.String("versitygw"), Logger: logger()}
	if c.IsSet("duration") {
		o.Duration = c.Duration("duration")
	}
	if s := c.String("scenarios"); s != "all" {
		o.Scenarios = strings.Split(s, ",")
	}
	if c.IsSet("partitions") {
		o.Partitions = c.Int("partitions")
	}
	if c.IsSet("keys") {
		o.Keys = c.Int("keys")
	}
	if c.IsSet("rate") {
		o.CommitsPerSecond = c.Float64("rate")
	}
	o.Stdout = os.Stdout
	if c.Bool("json") {
		o.Stdout = os.Stderr
	}
	sum, err := netns.Run(c.Context, o)
	if c.Bool("json") && sum != nil {
		if jerr := printJSON(c.App.Writer, sum); jerr != nil && err == nil {
			err = jerr
		}
	}
	return err
}

func chaosCommand() *cli.Command {
	return &cli.Command{
		Name:  "chaos",
		Usage: "run the whole system under a seeded fault schedule and check it converges to what was committed",
		UsageText: "pillar chaos [--seed N] [--duration 5m] [--faults all|KIND,...] [options]\n" +
			"   pillar chaos --plan [--seed N] [--duration 5m]\n" +
			"   pillar chaos --netns [--duration 10m] [--scenarios NAME,...] [--seed N] [--keep]",
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

With --netns (root; iproute2 and iptables) every component runs on a host of its own: a
Linux network namespace on a bridge, talking to the others over real TCP on its own
address, mutual TLS on every gRPC hop: zones a, b and c (a node each), the control plane
with a PostgreSQL of its own (initdb in the working directory), the object store, Lorry,
and a router and a reader in zone a. Faults are iptables rules inside the namespaces.
Scenarios (see docs/operations.md): ` + strings.Join(netns.ScenarioNames(), ", ") + `.
Without --duration it runs the short version (every scenario once, faults of 8-15 s,
about 4 minutes); --duration 10m runs each with its full faults (30 s cuts, 60 s
outages and packet loss), then seeded repeats. The checks: every answer is a value
published for its key and version, no batch mixes versions, every replica of a
partition holds identical committed data (checksums of the whole key range), every
Lorry record applied exactly once in effect, and each scenario's own promise. --keep
leaves the cluster up until Ctrl-C.

Examples:
   pillar chaos --seed 1 --duration 5m
   pillar chaos --seed 7 --duration 1m --faults kill-node,partition
   pillar chaos --plan --seed 7 --duration 5m      # print the schedule, run nothing
   pillar chaos --seed 3 --dir chaos-out --keep     # keep the logs, store and data
   sudo pillar chaos --netns                        # the short version of every network scenario
   sudo pillar chaos --netns --duration 10m --seed 4
   sudo pillar chaos --netns --scenarios zone-cut,packet-loss --keep   # then poke at it`,
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
			&cli.BoolFlag{Name: "netns", Usage: "run the cluster across network namespaces and its network scenarios (root)"},
			&cli.StringFlag{Name: "scenarios", Value: "all", Usage: "with --netns: scenarios to run, comma-separated"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("chaos: unexpected argument %q", c.Args().First())
			}
			if c.Bool("netns") {
				return runNetns(c)
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
