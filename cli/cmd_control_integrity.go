package cli

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/cobbled/control"
)

func controlRetractCommand() *cli.Command {
	return &cli.Command{
		Name:      "retract",
		Usage:     "mark a bad batch: replicas skip it and the partition moves on",
		UsageText: "pillar control retract --batch ID --why TEXT [--token-file F]",
		Description: `Retracts a registered batch (one that replicas refuse as corrupt, or one that should
never have been registered). It keeps its sequence number, is listed as retracted, and
every replica advances past it without applying it, then applies the batches after it.
A retracted snapshot is never a garbage-collection floor. The reason is recorded in the
control plane and next to the batch in the object store (so a rebuilt log keeps it).

Then register a replacement: a new snapshot of the partition (pillar export, then
pillar sst build --control), or a re-built delta under a new id. Nothing else of the
partition is lost. 'pillar status' shows each replica's fault until it has moved on.

Examples:
   pillar control retract --token-file control.token --batch exp7-p00012 --why "block checksum mismatch in 000001.sst"
   pillar control retract --control 10.0.0.5:7000 --token-file control.token --batch lorry-p00003-000042 --why "built from a bad queue range"`,
		Flags: controlClientFlags(
			&cli.StringFlag{Name: "batch", Required: true, Usage: "the batch id"},
			&cli.StringFlag{Name: "why", Required: true, Usage: "the reason, recorded and shown to operators"},
			controlJSONFlag,
		),
		Action: func(c *cli.Context) error {
			if strings.TrimSpace(c.String("why")) == "" {
				return errors.New("control retract: --why must say why")
			}
			cl, err := dialControl(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			r, err := cl.RetractBatch(c.Context, c.String("batch"), c.String("why"))
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, map[string]any{"batch": c.String("batch"), "partition": r.Partition, "seq": r.Seq, "already": r.Already})
			}
			if r.Already {
				fmt.Fprintf(c.App.Writer, "batch %s (partition %d seq %d) was already retracted\n", c.String("batch"), r.Partition, r.Seq)
				return nil
			}
			fmt.Fprintf(c.App.Writer, "retracted batch %s (partition %d seq %d); replicas skip it.\n"+
				"next: register a replacement (a new snapshot of partition %d, or a re-built delta) and watch `pillar status --partition %d`\n",
				c.String("batch"), r.Partition, r.Seq, r.Partition, r.Partition)
			return nil
		},
	}
}

func controlRebuildCommand() *cli.Command {
	return &cli.Command{
		Name:      "rebuild",
		Usage:     "rebuild the batch log of a fresh control-plane database from the object store",
		UsageText: "pillar control rebuild --db DSN --from-objstore URL [--partitions P]",
		Description: `For a lost or damaged control-plane database (the control plane refuses to start
on a damaged SQLite file). Every manifest.json in the object store carries its
partition sequence number and its parent batch (the control plane writes them in
after registration), so the per-partition batch log is rebuilt exactly: same ids,
same seqs, same retractions, from each partition's last unbroken chain (batches
before a garbage-collected gap are marked collected). Manifests without a seq are
listed and skipped (their producers register them again, idempotently). Nodes and
replica progress are not in the object store: start the control plane on the
rebuilt database, and the nodes register again and report what they have applied.

The database must be new (or hold no batches). Stop the old control plane first.

Examples:
   pillar control rebuild --db sqlite:data/control-new.db --from-objstore data/objects --partitions 64
   pillar control rebuild --db postgres://postgres@127.0.0.1:5432/control2 --from-objstore s3://pillar-batches/prod --partitions 64`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "db", Required: true, Usage: "the new database: sqlite:PATH or postgres://…"},
			&cli.StringFlag{Name: "from-objstore", Required: true, Usage: "object store holding batches/ (a path, file:///dir or s3://bucket/prefix)"},
			s3EndpointFlag, s3RegionFlag, s3PathStyleFlag,
			&cli.IntFlag{Name: "partitions", Usage: "partition count P (required for a new database)"},
			controlJSONFlag,
		},
		Action: func(c *cli.Context) error {
			ctx := c.Context
			objs, err := sstOpenStore(c, c.String("from-objstore"))
			if err != nil {
				return fmt.Errorf("--from-objstore: %w", err)
			}
			st, err := control.OpenStore(ctx, c.String("db"), &control.StoreOptions{Partitions: c.Int("partitions"), Logger: logger()})
			if err != nil {
				return err
			}
			defer st.Close()
			start := time.Now()
			rep, err := st.RebuildFromObjects(ctx, objs, time.Now())
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, rep)
			}
			fmt.Fprintf(c.App.Writer, "read %d manifests; rebuilt %d batches of %d partitions in %s\n",
				rep.Manifests, rep.Registered, rep.Partitions, time.Since(start).Round(time.Millisecond))
			for _, s := range rep.Skipped {
				fmt.Fprintf(c.App.Writer, "  skipped: %s\n", s)
			}
			fmt.Fprintf(c.App.Writer, "next: pillar control serve --db %s … (nodes register again and report their progress)\n", c.String("db"))
			return nil
		},
	}
}
