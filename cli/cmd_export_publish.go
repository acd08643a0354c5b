package cli

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/bulkexport"
	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/internal/objstore"
	"github.com/pillarkit/pillar/internal/progress"
	"github.com/pillarkit/pillar/internal/rocks"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/sstbuilder"
)

// exportPublishFlags turn `pillar export` into the whole bulk-export
// protocol (bulkexport.Run) when --objstore is given.
// --objstore takes no environment variable: PILLAR_OBJSTORE set for other
// commands must not turn a plain `pillar export` into a registration.
var exportPublishFlags = []cli.Flag{
	&cli.StringFlag{Name: "objstore", Usage: "with --control: also build the SST batches, upload them here (a directory, file:///abs/dir or s3://bucket/prefix) and register them"},
	s3EndpointFlag, s3RegionFlag, s3PathStyleFlag,
	&cli.StringFlag{Name: "control", EnvVars: []string{envControl}, Usage: "control-plane address host:port to register the batches with (required with --objstore)"},
	&cli.DurationFlag{Name: "wait-delivered", Usage: "with --control: keep retrying a snapshot the control plane refuses until Lorry has delivered the older queue records, up to this long (default: fail at once; rerun the same command after `pillar lorry run --once`)"},
	controlTokenFileFlag,
	controlTLSCAFlag,
	&cli.StringFlag{Name: "compression", Value: "lz4", Usage: "with --objstore: SST block compression: lz4, zstd or none"},
	&cli.IntFlag{Name: "parallel", Value: 2, Usage: "with --objstore: partitions built at once"},
}

const exportPublishHelp = `
With --objstore and --control it is the whole bulk-export protocol in one command: export,
build the snapshot SST batches, upload them and register them with the control plane. Each
snapshot carries the queue end it supersedes; the control plane refuses it until Lorry has
delivered the older records (--wait-delivered waits that out). Rerun the same command after
any failure or crash: a committed export is not redone, batches are not duplicated.

   pillar export --store data/store --out data/exports/exp2 --objstore data/objects \
       --control 127.0.0.1:7000 --token-file control.token --wait-delivered 10m`

// runExportPublish is `pillar export --objstore … --control …`.
func runExportPublish(c *cli.Context) error {
	if c.String("control") == "" {
		return fmt.Errorf("export: --objstore needs --control (to upload without registering, run `pillar export` then `pillar sst build`)")
	}
	st, err := openExportStore(c)
	if err != nil {
		return err
	}
	defer st.Close()
	objs, err := sstOpenStore(c, c.String("objstore"))
	if err != nil {
		return fmt.Errorf("--objstore: %w", err)
	}
	addr := c.String("control")
	client, err := dialControl(c)
	if err != nil {
		return err
	}
	defer client.Close()
	cp, err := client.Partitions(c.Context)
	if err != nil {
		return fmt.Errorf("--control %s: %w", addr, err)
	}
	out := c.String("out")
	id := c.String("id")
	if id == "" {
		id = strings.ToLower(filepath.Base(out))
	}
	res, err := runBulkExport(c, st, objs, client, cp, out, id)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, res)
	}
	if res.Resumed {
		fmt.Printf("export %s was committed by an earlier run; completed its batches\n", id)
	} else {
		fmt.Printf("exported %d pages (%s of records, %d member pages skipped) in %s to %s\n",
			res.Export.Pages, humanBytes(res.Export.Bytes), res.Export.Skipped, res.Export.Duration, out)
	}
	var bytes, files int64
	for _, pr := range res.Build.Partitions {
		if pr.Manifest != nil {
			for _, f := range pr.Manifest.Files {
				bytes += f.Size
				files++
			}
		}
	}
	fmt.Printf("  %d snapshot batches (%d SST files, %s) uploaded to %s and registered with %s in %s\n",
		len(res.Build.Partitions), files, humanBytes(bytes), c.String("objstore"), addr, res.Build.Elapsed.Round(1e6))
	// The batches belong to the published pair's publication; a first
	// batch of one registers it (see cobbled/control).
	if res.Export != nil {
		if ps, err := findPublication(c.Context, client, res.Export.Publication); err == nil {
			note := ""
			if ps.PromoteWhenReady {
				note = " (live once every replica holds it)"
			}
			fmt.Printf("  serving: publication %s is %s%s\n", pubLabel(ps.ID), ps.Role, note)
		}
	}
	return nil
}

// runBulkExport runs the bulk export protocol (bulkexport.Run) for the
// store's published pair into dir as export id, with the command's
// pipeline, compression, parallelism and wait flags and a progress bar:
// `pillar export --objstore` and `pillar publish --serve` share it.
func runBulkExport(c *cli.Context, st pillar.Store, objs objstore.Store, cl *control.Client, cp int, dir, id string) (*bulkexport.Result, error) {
	opts := pipelineOptions(c)
	opts.Encoding = c.String("encoding")
	log := logger()
	var bar *progress.Bar
	res, err := bulkexport.Run(c.Context, &bulkexport.Options{
		Store: st, Pipeline: opts, Dir: dir, ID: id, Objects: objs, Control: cl, Partitions: cp,
		WaitDelivered: c.Duration("wait-delivered"), Table: rocks.TableConfig{Compression: c.String("compression")},
		Parallelism: c.Int("parallel"), Logger: log,
		Progress: func(rows int64, id string) sstbuilder.Progress {
			bar = progress.New(rows, "sst build "+id, &progress.Options{Logger: log})
			return bar
		},
	})
	if bar != nil {
		bar.Done()
	}
	return res, err
}
