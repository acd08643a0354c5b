package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/internal/health"
	"github.com/pillarkit/pillar/internal/tlsconf"
	"github.com/pillarkit/pillar/lorry"
	"github.com/pillarkit/pillar/pillar"
)

func lorryCommand() *cli.Command {
	return &cli.Command{
		Name:  "lorry",
		Usage: "deliver the export queue to the serving tier (batches → object store → control plane)",
		Description: `Lorry reads each partition's export-queue records from the store, accumulates them
into delta batches (newest record of a key wins, deletes become tombstones), uploads each
batch to the object store, registers it with the control plane and only then advances the
partition's committed offset in the store. Several workers may run at once: partitions are
leased (one writer each) and shared out fairly; a dead worker's leases lapse after
--lease-ttl. Per partition, fresh records (crawl updates, policy deletes) are delivered
ahead of the bulk backlog (republishes), keeping per-key order; bulk keeps a minimum
share (--bulk-min-share) and pauses first when replicas lag (--max-replica-lag).
See 'pillar lorry run --help'.

Examples:
   pillar lorry run --store data/store --objstore data/objects --control 127.0.0.1:7000 --once
   pillar lorry status --store data/store
   pillar lorry replay --store data/store --objstore data/objects --control 127.0.0.1:7000 --partition 7 --from 1200 --to 1299
   pillar lorry cleanup --store data/store --objstore data/objects --dry-run`,
		Subcommands: []*cli.Command{lorryRunCommand(), lorryStatusCommand(), lorryReplayCommand(), lorryCleanupCommand()},
	}
}

func lorryRunCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run a Lorry worker (until interrupted, or --once: drain what is queued now and exit)",
		UsageText: "pillar lorry run --store DIR --objstore URL --control HOST:PORT [--once] [options]",
		Description: `Delivers the export queue of the partitions this worker can lease. A batch closes when
its records reach --max-batch-bytes or --max-batch-records, or when its oldest record is
--max-batch-age old, whichever comes first. Each batch is recorded as pending in the store
first, then uploaded (conditional creates: nothing is ever overwritten), registered (the
batch id comes from the partition and its offsets, so a retry registers the same batch
once) and committed. A failing step is retried with backoff for as long as it takes; the
worker reads at most one batch ahead per partition meanwhile and never drops a record.

With --once the worker leases every partition no live worker holds, delivers everything
queued at start (without waiting for batch ages), gives the leases back and exits;
partitions held by a running worker are listed as skipped. Without it the worker runs
until SIGINT/SIGTERM, then gives its leases back.

Examples:
   pillar lorry run --store data/store --objstore data/objects --control 127.0.0.1:7000 --once
   pillar lorry run --store data/store --objstore s3://pillar-batches/prod --s3-endpoint http://127.0.0.1:7070 \
       --control 127.0.0.1:7000 --token-file control.token --max-batch-age 500ms
   pillar lorry run --store data/store --objstore data/objects --control 127.0.0.1:7000 --id lorry-a --partitions 0-15`,
		Flags: controlClientFlags(
			storeFlag,
			&cli.StringFlag{Name: "objstore", Required: true, EnvVars: []string{"PILLAR_OBJSTORE"}, Usage: "object store: a directory, file:///abs/dir or s3://bucket/prefix"},
			s3EndpointFlag, s3RegionFlag, s3PathStyleFlag,
			&cli.BoolFlag{Name: "once", Usage: "drain what is queued now, then exit"},
			&cli.DurationFlag{Name: "wait-leases", Usage: "with --once: how long to wait for partitions leased by another (possibly dead) worker to lapse before failing (default: one --lease-ttl)"},
			&cli.StringFlag{Name: "id", Usage: "worker id in leases (default: host-pid-random); a restart with the same id takes its leases back at once — never run two workers with one id"},
			&cli.StringFlag{Name: "partitions", Usage: "only these partitions: a list of numbers and ranges, e.g. 0-7,12 (default: all)"},
			&cli.Int64Flag{Name: "max-batch-bytes", Value: 8 << 20, Usage: "close a batch at this many bytes of values (also the read-ahead bound per partition)"},
			&cli.IntFlag{Name: "max-batch-records", Value: 100000, Usage: "close a batch at this many records"},
			&cli.Int64Flag{Name: "max-buffered-bytes", Value: 512 << 20, Usage: "records all partitions together may hold in memory (read ahead and in flight)"},
			&cli.DurationFlag{Name: "max-batch-age", Value: time.Second, Usage: "close a batch once its oldest record is this old"},
			&cli.DurationFlag{Name: "poll", Value: 100 * time.Millisecond, Usage: "how often an idle partition looks for new records"},
			&cli.DurationFlag{Name: "lease-ttl", Value: 15 * time.Second, Usage: "a dead worker's partitions are taken over this long after its last renewal"},
			&cli.IntFlag{Name: "parallelism", Value: 4, Usage: "partitions building and uploading at the same time"},
			&cli.DurationFlag{Name: "orphan-grace", Value: 15 * time.Minute, Usage: "unregistered uploads older than this are removed by the periodic cleanup"},
			&cli.DurationFlag{Name: "cleanup-interval", Value: 10 * time.Minute, Usage: "how often the held partitions' orphans are cleaned (0: never)"},
			&cli.StringFlag{Name: "tmp", Usage: "directory for SST files being built (default: under $TMPDIR)"},
			&cli.BoolFlag{Name: "json", Usage: "with --once: print the result as JSON"},
			&cli.StringFlag{Name: "http", Usage: "serve Prometheus /metrics, /healthz and /readyz on this address, e.g. 127.0.0.1:7201 (default: none)"},
			&cli.BoolFlag{Name: "insecure", Usage: "serve the plaintext --http on a non-loopback address (refused without it)"},
			&cli.Float64Flag{Name: "bulk-min-share", Value: 0.25, Usage: "share of a partition's delivery time bulk batches keep while fresh ones are waiting too (0-1]"},
			&cli.Int64Flag{Name: "max-replica-lag", Value: 8, Usage: "pause a partition's bulk batches while a replica is this many batches behind (fresh ones continue; -1: never)"},
			&cli.IntFlag{Name: "max-bulk-unapplied", Value: 2, Usage: "while fresh records flow in a partition, pause its bulk batches as long as this many of them are registered and not applied on every replica, so a fresh record waits behind few bulk batches on each replica (fresh ones continue; -1: no such bound)"},
			&cli.IntFlag{Name: "max-bulk-unapplied-total", Usage: "--max-bulk-unapplied over all the worker's partitions together (a replica applies a few batches at a time across its partitions); 0: no such bound"},
			&cli.DurationFlag{Name: "fresh-ride-wait", Value: time.Second, Usage: "while a partition's bulk batches flow, a fresh record waits up to this long (at least --max-batch-age) for the next bulk batch to carry it, instead of a batch of its own (fewer batches for the replicas to apply); negative, such as -1s: never"},
			&cli.DurationFlag{Name: "replica-poll", Value: 250 * time.Millisecond, Usage: "how often replica progress is read from the control plane (backpressure, latency, loss counter)"},
			&cli.DurationFlag{Name: "loss-after", Value: 5 * time.Minute, Usage: "a fresh record not applied on every replica this long after its commit counts as lost (lorry_lost_records_total)"},
			&cli.DurationFlag{Name: "bulk-loss-after", Value: time.Hour, Usage: "the same for bulk records"},
		),
		Action: func(c *cli.Context) error {
			st, err := openStore(c, false, 0)
			if err != nil {
				return err
			}
			defer st.Close()
			objs, err := sstOpenStore(c, c.String("objstore"))
			if err != nil {
				return err
			}
			ctl, err := dialControl(c)
			if err != nil {
				return err
			}
			defer ctl.Close()
			if n, err := ctl.Partitions(c.Context); err != nil {
				return fmt.Errorf("lorry: control plane %s: %w", c.String("control"), err)
			} else if n != st.Info().Partitions {
				return fmt.Errorf("lorry: the store has %d partitions, the control plane %d", st.Info().Partitions, n)
			}
			parts, err := parsePartitionList(c.String("partitions"))
			if err != nil {
				return err
			}
			cleanup := c.Duration("cleanup-interval")
			if cleanup == 0 {
				cleanup = -1
			}
			metrics := lorry.NewMetrics()
			var worker atomic.Pointer[lorry.Worker] // the worker /healthz reports on
			if addr := c.String("http"); addr != "" && !tlsconf.IsLoopback(addr) && !c.Bool("insecure") {
				return fmt.Errorf("lorry run --http %s: the metrics and health port serves plaintext; bind it to 127.0.0.1 or pass --insecure", addr)
			}
			if addr := c.String("http"); addr != "" {
				srv, err := startDaemonHTTP("lorry run", addr, health.New(health.Options{Component: "lorry"}, lorryHealth(&worker)),
					metrics.Collectors()...) // daemon.go: /metrics, /healthz, /readyz
				if err != nil {
					return err
				}
				defer srv.Close()
			}
			newWorker := func() (*lorry.Worker, error) {
				w, err := lorry.New(lorry.Options{
					Store: st, Objects: objs, Registry: ctl, ID: c.String("id"), Partitions: parts,
					MaxBatchBytes: c.Int64("max-batch-bytes"), MaxBatchRecords: c.Int("max-batch-records"),
					MaxBufferedBytes: c.Int64("max-buffered-bytes"),
					MaxBatchAge:      c.Duration("max-batch-age"), PollInterval: c.Duration("poll"),
					LeaseTTL: c.Duration("lease-ttl"), Parallelism: c.Int("parallelism"),
					OrphanGrace: c.Duration("orphan-grace"), CleanupInterval: cleanup, TempDir: c.String("tmp"),
					BulkMinShare: c.Float64("bulk-min-share"), MaxReplicaLag: c.Int64("max-replica-lag"),
					MaxBulkUnapplied: c.Int("max-bulk-unapplied"), MaxBulkUnappliedTotal: c.Int("max-bulk-unapplied-total"), ReplicaPoll: c.Duration("replica-poll"),
					LossAfter: c.Duration("loss-after"), BulkLossAfter: c.Duration("bulk-loss-after"), FreshRideWait: c.Duration("fresh-ride-wait"),
					Logger: logger(), Metrics: metrics,
				})
				if err == nil {
					worker.Store(w)
				}
				return w, err
			}
			w, err := newWorker()
			if err != nil {
				return err
			}
			if !c.Bool("once") {
				logger().Info("lorry: running", "id", w.ID(), "store", st.Info().Root, "objstore", c.String("objstore"), "control", c.String("control"))
				return w.Run(c.Context)
			}
			start := time.Now()
			waitUntil := start.Add(c.Duration("wait-leases"))
			if !c.IsSet("wait-leases") {
				waitUntil = start.Add(c.Duration("lease-ttl") + 2*time.Second)
			}
		drain:
			res, err := w.Drain(c.Context)
			if err == nil && len(res.Skipped) > 0 {
				// Partitions leased by another worker: a live one delivers
				// them, but one that just died holds its leases until they
				// lapse. Wait that out, or say so and fail: exiting 0 would
				// claim a drain that did not happen.
				held, expires, serr := lorryHeldUndelivered(c.Context, st, res.Skipped)
				if serr != nil {
					return serr
				}
				if len(held) > 0 {
					if !expires.After(waitUntil) {
						logger().Info("lorry: waiting for other workers' leases to lapse", "partitions", held, "until", expires.UTC().Format(time.RFC3339))
						select {
						case <-time.After(time.Until(expires) + 200*time.Millisecond):
						case <-c.Context.Done():
							return c.Context.Err()
						}
						if w, err = newWorker(); err != nil {
							return err
						}
						goto drain
					}
					err = fmt.Errorf("lorry run --once: partitions %v have undelivered records but are leased by another worker until %s, past the wait — not delivered (a live worker renews its lease and delivers them; a dead one's lease lapses then: rerun, or give --wait-leases)",
						held, expires.UTC().Format(time.RFC3339))
				}
			}
			if c.Bool("json") {
				_ = printJSON(c.App.Writer, res) // jsonshape.go: snake_case, _ms, RFC 3339
			} else {
				s := res.Stats
				fmt.Fprintf(c.App.Writer, "lorry: drained %d partitions in %s: %d batches, %d records, %d keys (%d tombstones), %s uploaded, %d retries\n",
					len(res.Delivered), time.Since(start).Round(time.Millisecond), s.Batches, s.Records, s.Keys, s.Deletes, humanBytes(s.Bytes), s.Retries)
				if len(res.Skipped) > 0 {
					fmt.Fprintf(c.App.Writer, "lorry: skipped partitions held by a running worker: %v\n", res.Skipped)
				}
			}
			return err
		},
	}
}

func lorryCleanupCommand() *cli.Command {
	return &cli.Command{
		Name:  "cleanup",
		Usage: "remove uploaded Lorry objects that no registered batch names",
		Description: `Removes, under batches/pNNNNN/lorry-<store id>-…/, objects older than --grace that no
batch manifest names (files of an upload that crashed and was rebuilt under new names) and
prefixes without a manifest that are not a partition's pending batch. Running workers do the
same for their partitions every --cleanup-interval; this is for a one-off pass.

Examples:
   pillar lorry cleanup --store data/store --objstore data/objects --dry-run
   pillar lorry cleanup --store data/store --objstore s3://pillar-batches/prod --grace 1h`,
		Flags: []cli.Flag{
			storeFlag,
			&cli.StringFlag{Name: "objstore", Required: true, EnvVars: []string{"PILLAR_OBJSTORE"}, Usage: "object store: a directory, file:///abs/dir or s3://bucket/prefix"},
			s3EndpointFlag, s3RegionFlag, s3PathStyleFlag,
			&cli.DurationFlag{Name: "grace", Value: 15 * time.Minute, Usage: "only remove objects older than this"},
			&cli.StringFlag{Name: "partitions", Usage: "only these partitions, e.g. 0-7,12 (default: all)"},
			&cli.BoolFlag{Name: "dry-run", Usage: "list what would be removed, remove nothing"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
		},
		Action: func(c *cli.Context) error {
			st, err := openStore(c, false, 0)
			if err != nil {
				return err
			}
			defer st.Close()
			objs, err := sstOpenStore(c, c.String("objstore"))
			if err != nil {
				return err
			}
			parts, err := parsePartitionList(c.String("partitions"))
			if err != nil {
				return err
			}
			res, err := lorry.Cleanup(c.Context, lorry.CleanupOptions{Store: st, Objects: objs, Partitions: parts,
				Grace: c.Duration("grace"), DryRun: c.Bool("dry-run"), Logger: logger()})
			if c.Bool("json") && err == nil {
				return printJSON(c.App.Writer, map[string]any{"dry_run": c.Bool("dry-run"), "result": res})
			}
			verb := "removed"
			if c.Bool("dry-run") {
				verb = "would remove"
			}
			for _, k := range res.Keys {
				fmt.Fprintf(c.App.Writer, "%s %s\n", verb, k)
			}
			fmt.Fprintf(c.App.Writer, "lorry cleanup: %d batches, %d objects looked at; %s %d; %d orphans younger than %s kept\n",
				res.Batches, res.Objects, verb, res.Removed, res.Young, c.Duration("grace"))
			return err
		},
	}
}

// parsePartitionList parses "0-7,12" ("" is nil: all partitions).
func parsePartitionList(s string) ([]int, error) {
	var out []int
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("--partitions %q: %q is not a partition number or range", s, part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("--partitions %q: bad range %q", s, part)
			}
		}
		for p := a; p <= b; p++ {
			out = append(out, p)
		}
	}
	return out, nil
}

// lorryHeldUndelivered returns which of the partitions have records left to
// deliver (or a batch pending) while another worker's lease is live, and
// when the latest of those leases expires.
func lorryHeldUndelivered(ctx context.Context, st pillar.Store, parts []int) ([]int, time.Time, error) {
	ls, err := lorry.Status(ctx, st, time.Now())
	if err != nil {
		return nil, time.Time{}, err
	}
	want := map[int]bool{}
	for _, p := range parts {
		want[p] = true
	}
	var held []int
	var latest time.Time
	for _, s := range ls {
		if !want[s.Partition] || (s.Depth == 0 && s.Pending == nil && s.FreshPending == nil) || s.Owner == "" {
			continue
		}
		held = append(held, s.Partition)
		if s.LeaseExpires.After(latest) {
			latest = s.LeaseExpires
		}
	}
	return held, latest, nil
}
