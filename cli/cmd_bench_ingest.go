package cli

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/bench/ingestbench"
	"github.com/pillarkit/pillar/cobbled"
	"github.com/pillarkit/pillar/internal/bytesize"
	"github.com/pillarkit/pillar/internal/pace"
	"github.com/pillarkit/pillar/internal/rocks"
)

// Ingest pacing: the flags of `pillar cobbled serve` that pace ingest, and
// `pillar bench ingest`.

func cobbledPaceFlags() []cli.Flag {
	return []cli.Flag{
		&cli.Float64Flag{Name: "ingest-rate", Usage: "cap on batch downloads for ingest, MB/s (10^6 bytes) for the whole node, deltas and snapshots together; 0 = unlimited"},
		&cli.DurationFlag{Name: "ingest-target-p99", Usage: "adaptive pacing: slow snapshot downloads while this node's own BatchGet p99 exceeds this (e.g. 2ms); deltas are never slowed by it; 0 = off"},
		&cli.Float64Flag{Name: "ingest-min-rate", Value: 2, Usage: "floor of the adaptive snapshot rate, MB/s"},
		&cli.Float64Flag{Name: "ingest-ambient-max-rate", Usage: "adaptive pacing: cap on the snapshot rate while other work (deltas, the machine) keeps the p99 over the target even at the floor, MB/s (default: 4 × --ingest-min-rate; -1 = no cap)"},
		&cli.IntFlag{Name: "snapshot-concurrency", Usage: "snapshots downloading/applying at once (default: --ingest-concurrency; set lower to keep a slot for deltas)"},
		&cli.IntFlag{Name: "small-delta-slots", Usage: "ingest slots beyond --ingest-concurrency that only small deltas (--small-delta-size) may take, so a fresh delta does not queue behind other partitions' bulk deltas (default 1; -1 = none)"},
		&cli.StringFlag{Name: "small-delta-size", Value: "1MiB", Usage: "the size up to which a delta's files together make it small (--small-delta-slots)"},
		&cli.Float64Flag{Name: "compaction-rate", Usage: "cap on RocksDB flush and compaction writes, MB/s for the whole node; 0 = unlimited"},
		&cli.BoolFlag{Name: "compaction-normal-priority", Usage: "run compaction threads at normal CPU and I/O priority (default: nice 19, idle I/O class)"},
		&cli.IntFlag{Name: "l0-compaction-trigger", Usage: "L0 files (ingested deltas) that start a compaction, 1..39 (default 8); higher: fewer rewrites of a partition into uncached files, more bloom probes per read"},
		&cli.BoolFlag{Name: "no-cache-warm", Usage: "leave new delta files and compaction outputs cold (default: each is read into the block cache before it serves; compaction outputs up to a quarter of the cache)"},
	}
}

// cobbledPaceOptions sets the pacing options from the flags.
func cobbledPaceOptions(c *cli.Context, o *cobbled.Options) error {
	for _, name := range []string{"ingest-rate", "ingest-min-rate", "compaction-rate"} {
		if c.Float64(name) < 0 {
			return fmt.Errorf("--%s %v: must not be negative", name, c.Float64(name))
		}
	}
	if c.Duration("ingest-target-p99") < 0 || c.Int("snapshot-concurrency") < 0 {
		return fmt.Errorf("--ingest-target-p99 and --snapshot-concurrency must not be negative")
	}
	o.Pace = pace.Options{Rate: int64(c.Float64("ingest-rate") * 1e6), TargetP99: c.Duration("ingest-target-p99"), MinRate: int64(c.Float64("ingest-min-rate") * 1e6),
		AmbientMaxRate: ambientMaxRate(c.Float64("ingest-ambient-max-rate"))}
	if err := o.Pace.Validate(); err != nil {
		return fmt.Errorf("--ingest-rate, --ingest-min-rate, --ingest-ambient-max-rate: %w", err)
	}
	o.SnapshotConcurrency = c.Int("snapshot-concurrency")
	o.SmallDeltaSlots = c.Int("small-delta-slots")
	small, err := bytesize.ParseFlag("small-delta-size", c.String("small-delta-size"))
	if err != nil {
		return err
	}
	o.SmallDeltaBytes = small
	o.Background = rocks.Background{CompactionRate: int64(c.Float64("compaction-rate") * 1e6), NormalPriority: c.Bool("compaction-normal-priority"),
		L0CompactionTrigger: c.Int("l0-compaction-trigger"), NoWarm: c.Bool("no-cache-warm")}
	return o.Background.Validate()
}

func benchIngestCommand() *cli.Command {
	return &cli.Command{
		Name:  "ingest",
		Usage: "ingest benchmark: a node's read tail while it ingests a snapshot, a delta stream, and both, unpaced and paced",
		Description: `Starts one cobbled node in this process (its own RocksDB directories and gRPC server on
127.0.0.1) holding --partitions partitions of the read benchmark's data (--keys keys, values
100 B–100 KiB, mean ≈ 50 KB), and sends a steady --read-rate 12-key BatchGets per second
(open loop, every value checked) for the whole run. For each mode (unpaced: the node's
pacer off; paced: its adaptive mode on, target = --target-ratio × the node's own idle
p99, or --target), after an idle window of --phase each:

  floor        a bare IngestExternalFile loop copying the snapshot's files into a fresh
               database (unpaced mode only)
  a-snapshot   a fresh --snapshot (size) snapshot for partition 0, applied by the node
               (download, verify, new generation, swap)
  b-deltas     --updates updates/s as Lorry-sized delta batches (one per partition every
               --delta-interval) on --delta-partitions partitions, for --phase
  c-both       both at once

and reports read p50/p99/p99.9 idle vs during each, ingest MB/s, the time until the data
is visible, throttle waits and the compaction backlog. Writes results.md (table and the
issue's targets), results.json and latency-timeline.png (latency over time, ingest
windows shaded) to --out, and prints the table. Needs about 3× --snapshot of disk.

With --reference (the default) a second node, in a child process (this command run
again), holds the same data and ingests nothing; every batch is also sent to it, the
order alternating, so each window also has the reference's p99 at the same moments:
on a machine other work keeps busy, that separates ingest's cost from the machine's
noise better than idle windows before and after, which are other moments.

Examples:
   pillar bench ingest --out bench-out/ingest                       # 1 GiB snapshot (several minutes)
   pillar bench ingest --out /tmp/ingest --snapshot 128MiB --phase 4s  # quick look
   pillar bench ingest --out /tmp/ingest --modes paced --target 3ms --compaction-rate 64
   pillar bench ingest --out /tmp/ingest --snapshot 256MiB --reference=false   # idle windows only`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Value: "bench-out/ingest", Usage: "folder for results.md, results.json and latency-timeline.png"},
			&cli.StringFlag{Name: "data", Usage: "folder for the node's data and object store (default: a temporary folder, removed afterwards)"},
			&cli.StringFlag{Name: "snapshot", Value: "1GiB", Usage: "size of the fresh snapshot (e.g. 1GiB, 128MiB)"},
			&cli.DurationFlag{Name: "phase", Value: 10 * time.Second, Usage: "length of each idle window and of the delta stream"},
			&cli.DurationFlag{Name: "settle", Value: 2 * time.Second, Usage: "how long a \"during\" window runs past the ingest's end"},
			&cli.IntFlag{Name: "partitions", Value: 8, Usage: "partitions held by the node"},
			&cli.IntFlag{Name: "keys", Value: 4800, Usage: "keys in the read set"},
			&cli.IntFlag{Name: "read-rate", Value: 200, Usage: "BatchGets per second (open loop)"},
			&cli.IntFlag{Name: "updates", Value: 1000, Usage: "delta updates per second"},
			&cli.IntFlag{Name: "delta-partitions", Value: 4, Usage: "partitions receiving deltas (1..N)"},
			&cli.DurationFlag{Name: "delta-interval", Value: 250 * time.Millisecond, Usage: "time between two delta batches of a partition"},
			&cli.StringFlag{Name: "modes", Value: "unpaced,paced", Usage: "comma-separated modes: unpaced, paced"},
			&cli.Float64Flag{Name: "target-ratio", Value: 1.2, Usage: "paced mode: target p99 = this × the node's own idle p99"},
			&cli.DurationFlag{Name: "target", Usage: "paced mode: a fixed target p99 instead of --target-ratio"},
			&cli.Float64Flag{Name: "min-rate", Value: 16, Usage: "paced mode: floor of the adaptive snapshot rate, MB/s"},
			&cli.Float64Flag{Name: "ambient-max-rate", Usage: "paced mode: cap on the snapshot rate while the deltas or the machine keep the node's p99 over the target even at the floor, MB/s (default: 4 × --min-rate; -1 = no cap)"},
			&cli.Float64Flag{Name: "compaction-rate", Usage: "node's RocksDB compaction rate limit in MB/s, both modes; 0 = unlimited"},
			&cli.BoolFlag{Name: "compaction-normal-priority", Usage: "node's compaction threads at normal CPU and I/O priority (default: nice 19, idle I/O class), both modes"},
			&cli.IntFlag{Name: "l0-compaction-trigger", Usage: "node's L0 files that start a compaction (default: the node's 8), both modes"},
			&cli.BoolFlag{Name: "no-cache-warm", Usage: "node leaves new delta files and compaction outputs cold in its block cache (default: warmed before they serve), both modes"},
			&cli.BoolFlag{Name: "time-db-mutex", Usage: "diagnostic: the node's RocksDB statistics time every DB mutex wait (StatsLevel kAll); a column reports the waits per window"},
			&cli.StringFlag{Name: "cache", Value: "256MiB", Usage: "node's block cache"},
			&cli.IntFlag{Name: "ingest-concurrency", Usage: "node's --ingest-concurrency (default: --delta-partitions + 1; snapshots get 1 slot)"},
			&cli.BoolFlag{Name: "reference", Value: true, Usage: "also read, at the same moments, a reference node in a child process that holds the same data and ingests nothing (judges ratios against the machine's noise as well as against the idle windows)"},
			&cli.StringFlag{Name: "cpuprofile-dir", Usage: "write a Go CPU profile of every window into this folder (cpu-<n>-<mode>-<scenario>.pprof; go tool pprof)"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON (results.json and results.md are written either way)"},
		},
		Action: benchIngest,
	}
}

func benchIngest(c *cli.Context) error {
	// The reference node is this command re-executed (--reference).
	if child, err := ingestbench.ServeReferenceIfAsked(); child {
		return err
	}
	snap, err := bytesize.ParseFlag("snapshot", c.String("snapshot"))
	if err != nil {
		return err
	}
	cache, err := bytesize.ParseFlag("cache", c.String("cache"))
	if err != nil {
		return err
	}
	if c.Float64("compaction-rate") < 0 || c.Float64("min-rate") < 0 {
		return fmt.Errorf("--compaction-rate and --min-rate must not be negative")
	}
	var modes []string
	for _, m := range strings.Split(c.String("modes"), ",") {
		if m = strings.TrimSpace(m); m != "" {
			modes = append(modes, m)
		}
	}
	o := ingestbench.Options{Out: c.String("out"), Dir: c.String("data"), SnapshotBytes: snap, Phase: c.Duration("phase"), Settle: c.Duration("settle"),
		Partitions: c.Int("partitions"), Keys: c.Int("keys"), ReadRate: c.Int("read-rate"), UpdatesPerSec: c.Int("updates"),
		DeltaPartitions: c.Int("delta-partitions"), DeltaInterval: c.Duration("delta-interval"), Modes: modes,
		TargetRatio: c.Float64("target-ratio"), Target: c.Duration("target"), MinRate: int64(c.Float64("min-rate") * 1e6), AmbientMaxRate: ambientMaxRate(c.Float64("ambient-max-rate")), CacheBytes: cache, IngestConcurrency: c.Int("ingest-concurrency"),
		Background: rocks.Background{CompactionRate: int64(c.Float64("compaction-rate") * 1e6), NormalPriority: c.Bool("compaction-normal-priority"),
			L0CompactionTrigger: c.Int("l0-compaction-trigger"), NoWarm: c.Bool("no-cache-warm"), TimeDBMutex: c.Bool("time-db-mutex")}, Logger: logger()}
	o.ProfileDir = c.String("cpuprofile-dir")
	if c.Bool("reference") {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("--reference: %w", err)
		}
		o.Reference = []string{exe, "bench", "ingest"}
	}
	rep, err := ingestbench.Run(c.Context, o)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, rep)
	}
	fmt.Fprint(c.App.Writer, rep.Markdown())
	fmt.Fprintf(c.App.Writer, "\nwritten to %s (results.md, results.json, latency-timeline.png)\n", o.Out)
	return nil
}

// ambientMaxRate turns an --…ambient-max-rate value (MB/s; 0 = the
// default, negative = no cap) into pace.Options.AmbientMaxRate.
func ambientMaxRate(mbps float64) int64 {
	if mbps < 0 {
		return -1
	}
	return int64(mbps * 1e6)
}
