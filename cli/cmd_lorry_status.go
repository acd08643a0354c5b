package cli

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/pillarkit/pillar/internal/health"
	"github.com/pillarkit/pillar/lorry"
	"github.com/pillarkit/pillar/pillar"
	"github.com/urfave/cli/v2"
)

func lorryStatusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show per-partition backlog by priority, oldest undelivered records, leases, latencies and the loss counter",
		Description: `Reads the store (read-only, safe beside running workers; it reads the undelivered
records' heads, not their values). Per partition: the queue end, the committed offset
(everything below it is delivered), the fresh lane's position (every fresh record below it
is delivered), the fresh and bulk backlog, the age of the oldest undelivered fresh and bulk
record, the last batch's control-plane seq, a pending batch, and the lease holder. Then,
from the live workers' last heartbeats (every lease-ttl/3): delivery-latency percentiles by
priority, from the commit to the queue to registration and to application on every
replica, and the loss counter (records not applied everywhere after --loss-after; it
should be 0). --json prints the same with snake_case keys and _ms durations.

Examples:
   pillar lorry status --store data/store
   pillar lorry status --store data/store --all --json`,
		Flags: []cli.Flag{
			storeFlag,
			&cli.BoolFlag{Name: "all", Usage: "also list partitions with an empty queue"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		},
		Action: func(c *cli.Context) error {
			st, err := openStore(c, false, 0)
			if err != nil {
				return err
			}
			defer st.Close()
			now := time.Now()
			r, err := lorry.Report(c.Context, st, now)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, r)
			}
			ms := func(v int64) string {
				if v == 0 {
					return "-"
				}
				return (time.Duration(v) * time.Millisecond).String()
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PARTITION\tQUEUE END\tCOMMITTED\tFRESH AT\tFRESH\tBULK\tOLDEST FRESH\tOLDEST BULK\tSEQ\tPENDING\tLEASE")
			for _, s := range r.Partitions {
				if !c.Bool("all") && s.QueueEnd == 0 && s.Owner == "" {
					continue
				}
				pend, lease := "-", "free"
				var pends []string
				for _, pd := range []*lorry.Pending{s.Pending, s.FreshPending} {
					if pd != nil {
						one := fmt.Sprintf("%d-%d", pd.First, pd.Last)
						if pd.Lane != "" {
							one += " " + pd.Lane
						}
						pends = append(pends, one)
					}
				}
				if len(pends) > 0 {
					pend = strings.Join(pends, ", ")
				}
				if s.Owner != "" {
					if s.LeaseExpires.After(now) {
						lease = fmt.Sprintf("%s (%s left)", s.Owner, s.LeaseExpires.Sub(now).Round(time.Second))
					} else {
						lease = s.Owner + " (lapsed)"
					}
				}
				fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%d\t%s\t%s\n", s.Partition, s.QueueEnd, s.Committed, s.FreshOffset,
					s.FreshBacklog, s.BulkBacklog, ms(s.FreshOldestMS), ms(s.BulkOldestMS), s.Seq, pend, lease)
			}
			tw.Flush()
			fmt.Fprintf(c.App.Writer, "backlog: %d fresh (oldest %s), %d bulk (oldest %s)\n", r.FreshBacklog, ms(r.FreshOldestMS), r.BulkBacklog, ms(r.BulkOldestMS))
			if len(r.Workers) == 0 {
				fmt.Fprintln(c.App.Writer, "no live worker (latencies and the loss counter come from running workers)")
				return nil
			}
			fmt.Fprintf(c.App.Writer, "loss counter: %d (live workers: %d)\n", r.Lost, len(r.Workers))
			tw = tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "WORKER\tPRIORITY\tRECORDS\tREGISTERED p50/p90/p99/max\tAPPLIED ON ALL REPLICAS p50/p90/p99/max\tLOST")
			for _, w := range r.Workers {
				for _, pr := range []string{pillar.PriorityFresh, pillar.PriorityBulk} {
					l := w.Latency[pr]
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s/%s/%s/%s\t%s/%s/%s/%s\t%d\n", w.ID, pr, l.Samples,
						ms(l.RegisteredP50), ms(l.RegisteredP90), ms(l.RegisteredP99), ms(l.RegisteredMax),
						ms(l.AppliedP50), ms(l.AppliedP90), ms(l.AppliedP99), ms(l.AppliedMax), w.Lost)
				}
			}
			return tw.Flush()
		},
	}
}

// lorryHealth is lorry run's health check (internal/health): the
// worker's, or Starting before there is one.
func lorryHealth(w *atomic.Pointer[lorry.Worker]) health.Check {
	return func(ctx context.Context) health.Status {
		if wk := w.Load(); wk != nil {
			return wk.Health(ctx)
		}
		return health.Status{Status: health.Starting, WaitingOn: []string{"worker start"}}
	}
}

func lorryReplayCommand() *cli.Command {
	return &cli.Command{
		Name:  "replay",
		Usage: "re-deliver a range of a partition's delivered queue offsets (idempotent in effect)",
		Description: `Records a replay request in the partition's Lorry state; the worker holding the
partition delivers it after its batch in flight, as one batch holding, for each key with a
record in [--from, --to], the newest record of that key delivered so far (so replicas end up
serving what they served: a replay never brings back an older value, and may be repeated).
When no worker holds the partition, this command delivers it itself (as 'lorry run --once'
would for that partition). --to defaults to the last delivered offset.

Examples:
   pillar lorry replay --store data/store --objstore data/objects --control 127.0.0.1:7000 --partition 7 --from 1200 --to 1299
   pillar lorry replay --store data/store --objstore data/objects --control 127.0.0.1:7000 --partition 0 --from 0`,
		Flags: controlClientFlags(
			storeFlag,
			&cli.StringFlag{Name: "objstore", Required: true, EnvVars: []string{"PILLAR_OBJSTORE"}, Usage: "object store: a directory, file:///abs/dir or s3://bucket/prefix"},
			s3EndpointFlag, s3RegionFlag, s3PathStyleFlag,
			&cli.IntFlag{Name: "partition", Required: true, Usage: "partition to replay"},
			&cli.Int64Flag{Name: "from", Required: true, Usage: "first queue offset"},
			&cli.Int64Flag{Name: "to", Value: -1, Usage: "last queue offset, inclusive (default: the last delivered)"},
			&cli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, Usage: "give up waiting for the replay after this long"},
			&cli.BoolFlag{Name: "json", Usage: "print the delivered replay as JSON (and no progress lines)"},
		),
		Action: func(c *cli.Context) error {
			st, err := openStore(c, false, 0)
			if err != nil {
				return err
			}
			defer st.Close()
			p, to := c.Int("partition"), c.Int64("to")
			if to < 0 {
				ss, err := lorry.Status(c.Context, st, time.Now())
				if err != nil {
					return err
				}
				if p < 0 || p >= len(ss) {
					return fmt.Errorf("lorry replay: partition %d out of range [0,%d)", p, len(ss))
				}
				to = ss[p].Committed - 1
			}
			req, err := lorry.RequestReplay(c.Context, st, p, c.Int64("from"), to, time.Now())
			if err != nil {
				return err
			}
			say := func(format string, a ...any) {
				if !c.Bool("json") {
					fmt.Fprintf(c.App.Writer, format, a...)
				}
			}
			say("lorry: replay %d of partition %d, offsets [%d,%d], requested\n", req.N, p, req.From, req.To)
			objs, err := sstOpenStore(c, c.String("objstore"))
			if err != nil {
				return err
			}
			ctl, err := dialControl(c)
			if err != nil {
				return err
			}
			defer ctl.Close()
			ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
			defer cancel()
			w, err := lorry.New(lorry.Options{Store: st, Objects: objs, Registry: ctl, Partitions: []int{p}, CleanupInterval: -1, Logger: logger()})
			if err != nil {
				return err
			}
			res, err := w.Drain(ctx)
			if err != nil {
				return err
			}
			if len(res.Skipped) > 0 {
				say("lorry: partition %d is held by a running worker; waiting for it to deliver the replay\n", p)
			}
			if err := lorry.WaitReplay(ctx, st, p, req.N, 200*time.Millisecond); err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, map[string]any{"partition": p, "replay": req.N, "from": req.From, "to": req.To, "delivered": true})
			}
			say("lorry: replay %d of partition %d delivered\n", req.N, p)
			return nil
		},
	}
}
