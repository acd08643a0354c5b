package cli

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/bulkexport"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/bytesize"
	"github.com/pillarkit/pillar/internal/objstore"
	"github.com/pillarkit/pillar/internal/progress"
	"github.com/pillarkit/pillar/internal/record"
	"github.com/pillarkit/pillar/internal/rocks"
	"github.com/pillarkit/pillar/sstbuilder"
)

func sstCommand() *cli.Command {
	return &cli.Command{
		Name:  "sst",
		Usage: "build RocksDB SST batches from a partition-sorted export, upload, register, inspect",
		Description: `The SST builder turns a partition-sorted export (export.json + p<NNNNN>.parquet, see
"go doc ./sstbuilder") into one batch per partition: SST files with the serving nodes'
table options plus manifest.json, stored under batches/p<NNNNN>/<batch-id>/ in the
object store, then registered with the control plane.

Examples:
   pillar sst synth-export --out data/exports/synth1 --partitions 8 --pages 2000
   pillar sst build --export data/exports/synth1 --objstore file:///srv/pillar/objects
   pillar sst build --export data/exports/synth1 --objstore s3://pillar-batches/prod \
       --control 127.0.0.1:7000 --token-file control.token
   pillar sst ls file:///srv/pillar/objects
   pillar sst inspect file:///srv/pillar/objects/batches/p00007/synth1-p00007`,
		Subcommands: []*cli.Command{sstBuildCommand(), sstLsCommand(), sstInspectCommand(), sstSynthCommand(), sstUploadExportCommand()},
	}
}

// sstOpenStore opens an object-store URL with the command's S3 flags.
func sstOpenStore(c *cli.Context, url string) (objstore.Store, error) {
	return openObjstore(c, "", url)
}

func sstBuildCommand() *cli.Command {
	return &cli.Command{
		Name:      "build",
		Usage:     "build, upload and register one batch per partition of an export",
		UsageText: "pillar sst build --export DIR --objstore URL [--control HOST:PORT] [options]",
		Description: `Builds each partition of the export into SST files (rolling at --target-file-size),
checks the row order (an out-of-order key is an error naming the partition and key;
of several versions of one key only the newest is written), uploads the files and
then manifest.json (conditional creates: a batch is never overwritten), and registers
the batch with the control plane at --control (without it nothing is registered,
and the log says so). A snapshot is registered only after the deltas it supersedes
(the export's queue ends): until Lorry has delivered them the control plane refuses
it (retryable; rerun the command after ` + "`pillar lorry run --once`" + `). The partition count must match the deployment's: --partitions,
or the control plane's when --control is given.

Resumable: a partition whose batch is already in the object store from the same
input (checksum in the manifest's source), or which an earlier run built from it
(state in --work-dir), is not rebuilt. Rerun the same command after a failure.

Examples:
   pillar sst build --export data/exports/e1 --objstore file:///srv/pillar/objects
   pillar sst build --export data/exports/e1 --objstore s3://pillar-batches/prod \
       --s3-endpoint http://127.0.0.1:7070 --control 127.0.0.1:7000 --token-file control.token
   pillar sst build --export data/exports/e1 --objstore data/objects --partition 3 --partition 7 --compression zstd
   pillar sst build --export s3://pillar-exports/e1 --objstore s3://pillar-batches/prod`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "export", Required: true, Usage: "export: a directory holding export.json, or an object-store URL (s3://bucket/exports/e1)"},
			&cli.StringFlag{Name: "objstore", Required: true, EnvVars: []string{"PILLAR_OBJSTORE"}, Usage: "object store: a directory, file:///abs/dir or s3://bucket/prefix"},
			s3EndpointFlag, s3RegionFlag, s3PathStyleFlag,
			&cli.StringFlag{Name: "control", EnvVars: []string{envControl}, Usage: "control-plane address host:port to register batches with (default: do not register)"},
			// Kept so existing scripts still parse: the control plane now
			// enforces the delivery order for every caller.
			&cli.DurationFlag{Name: "wait-delivered", Usage: "with --control: keep retrying a snapshot the control plane refuses because Lorry has not delivered the older queue records yet, up to this long (default: fail at once)"},
			&cli.StringFlag{Name: "store", Hidden: true, Usage: "ignored (the control plane refuses a snapshot registered before the deltas it supersedes)"},
			controlTokenFileFlag,
			controlTLSCAFlag,
			&cli.IntFlag{Name: "partitions", Usage: "the deployment's partition count (default: the control plane's with --control, else the export's)"},
			&cli.IntSliceFlag{Name: "partition", Usage: "build only this partition (repeatable)"},
			&cli.StringFlag{Name: "work-dir", Usage: "local directory for SST files and resume state (default <export>/.sst-build, or $TMPDIR/pillar-sst-<export-id> for a remote export)"},
			&cli.StringFlag{Name: "compression", Value: "lz4", Usage: "SST block compression: lz4, zstd or none (must match what the serving nodes expect to read fast)"},
			&cli.StringFlag{Name: "block-size", Value: "16KiB", Usage: "SST block size"},
			&cli.Float64Flag{Name: "bloom-bits", Value: 10, Usage: "bloom filter bits per key"},
			&cli.StringFlag{Name: "target-file-size", Value: "256MiB", Usage: "start a new SST file past this size"},
			&cli.StringFlag{Name: "max-value-size", Value: "16MiB", Usage: "reject a value larger than this (the error names the key)"},
			&cli.IntFlag{Name: "parallel", Value: 2, Usage: "partitions built at once"},
			&cli.BoolFlag{Name: "keep-files", Usage: "keep the local SST files after upload"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
		},
		Action: runSSTBuild,
	}
}

func runSSTBuild(c *cli.Context) error {
	ctx := c.Context
	log := logger()
	var table rocks.TableConfig
	var err error
	table.Compression = c.String("compression")
	table.BloomBitsPerKey = c.Float64("bloom-bits")
	bs, err := bytesize.ParseFlag("block-size", c.String("block-size"))
	if err != nil {
		return err
	}
	table.BlockSize = int(bs)
	if err := table.Validate(); err != nil {
		return err
	}
	target, err := bytesize.ParseFlag("target-file-size", c.String("target-file-size"))
	if err != nil {
		return err
	}
	maxVal, err := bytesize.ParseFlag("max-value-size", c.String("max-value-size"))
	if err != nil {
		return err
	}
	// Credentials and buckets are checked here, before any work.
	exportDir, exportStore, err := sstOpenExport(c, c.String("export"))
	if err != nil {
		return err
	}
	var meta *sstbuilder.ExportMeta
	if exportStore != nil {
		meta, err = sstbuilder.ReadExportMetaFrom(ctx, exportStore, "")
	} else {
		meta, err = sstbuilder.ReadExportMeta(exportDir)
	}
	if err != nil {
		return err
	}
	store, err := sstOpenStore(c, c.String("objstore"))
	if err != nil {
		return err
	}
	partitions := c.Int("partitions")
	var reg sstbuilder.Registerer = sstbuilder.NopRegisterer{Logger: log}
	if addr := c.String("control"); addr != "" {
		client, err := dialControl(c)
		if err != nil {
			return err
		}
		defer client.Close()
		cp, err := client.Partitions(ctx)
		if err != nil {
			return fmt.Errorf("--control %s: %w", addr, err)
		}
		if partitions != 0 && partitions != cp {
			return fmt.Errorf("--partitions %d, but the control plane at %s has %d: %w", partitions, addr, cp, sstbuilder.ErrPartitions)
		}
		partitions = cp
		reg = client
		if d := c.Duration("wait-delivered"); d > 0 {
			reg = bulkexport.WaitDelivered(client, &bulkexport.Options{WaitDelivered: d, Logger: log})
		}
	}
	only := map[int]bool{}
	for _, p := range c.IntSlice("partition") {
		only[p] = true
	}
	var total int64
	for _, f := range meta.Files {
		if len(only) == 0 || only[f.Partition] {
			total += f.Rows
		}
	}
	bar := progress.New(total, "sst build "+meta.ID, &progress.Options{Logger: log})
	res, err := sstbuilder.BuildExport(ctx, &sstbuilder.ExportBuildOptions{
		Export: exportDir, ExportStore: exportStore, Store: store, Partitions: partitions, Only: c.IntSlice("partition"),
		Registerer: reg, WorkDir: c.String("work-dir"), Table: table, TargetFileSize: target, MaxValueSize: int(maxVal),
		Parallelism: c.Int("parallel"), KeepFiles: c.Bool("keep-files"), Progress: bar, Logger: log,
	})
	bar.Done()
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, res) // jsonshape.go: snake_case, _ms, RFC 3339
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tBATCH\tSTATUS\tKEYS\tDELETES\tFILES\tBYTES\tSEQ")
	var bytes int64
	for _, p := range res.Partitions {
		if p.Manifest == nil {
			fmt.Fprintf(tw, "%d\t%s\t%s\t0\t0\t0\t0\t-\n", p.Partition, p.BatchID, p.Status)
			continue
		}
		var size int64
		for _, f := range p.Manifest.Files {
			size += f.Size
		}
		bytes += size
		seq := "-"
		if p.Seq > 0 {
			seq = strconv.FormatInt(p.Seq, 10)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", p.Partition, p.BatchID, p.Status, p.Manifest.Keys, p.Manifest.Deletes, len(p.Manifest.Files), size, seq)
	}
	tw.Flush()
	fmt.Fprintf(c.App.Writer, "%d batches, %d SST bytes, %s\n", len(res.Partitions), bytes, res.Elapsed.Round(time.Millisecond))
	if c.String("control") == "" {
		fmt.Fprintln(c.App.Writer, "not registered (no --control given)")
	}
	return nil
}

// sstOpenExport returns a local export directory, or the store holding a
// remote export (s3://bucket/exports/e1) at its root.
func sstOpenExport(c *cli.Context, u string) (string, objstore.Store, error) {
	if strings.HasPrefix(u, "file://") {
		return strings.TrimPrefix(u, "file://"), nil, nil
	}
	if !strings.Contains(u, "://") {
		return u, nil, nil
	}
	st, err := sstOpenStore(c, u)
	if err != nil {
		return "", nil, fmt.Errorf("--export: %w", err)
	}
	return "", st, nil
}

func sstInspectCommand() *cli.Command {
	return &cli.Command{
		Name:      "inspect",
		Usage:     "show and verify one batch: manifest, checksums, key range, sample records",
		UsageText: "pillar sst inspect [--samples N] [--json] <objstore-url>/batches/p<NNNNN>/<batch-id>",
		Description: `Downloads the batch, verifies every file's size and SHA-256 against manifest.json,
ingests the files into a scratch RocksDB, checks the meta key (the batch id) and the key
count and range, and decodes sample values as prepared page records.

Examples:
   pillar sst inspect file:///srv/pillar/objects/batches/p00007/e1-p00007
   pillar sst inspect --samples 10 data/objects/batches/p00000/e1-p00000
   pillar sst inspect --json s3://pillar-batches/prod/batches/p00007/e1-p00007`,
		Flags: []cli.Flag{
			s3EndpointFlag, s3RegionFlag, s3PathStyleFlag,
			&cli.IntFlag{Name: "samples", Value: 5, Usage: "number of keys to decode"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return errors.New("want one argument: <objstore-url>/batches/p<NNNNN>/<batch-id>")
			}
			storeURL, p, id, err := sstbuilder.ParseBatchURL(c.Args().First())
			if err != nil {
				return err
			}
			store, err := sstOpenStore(c, storeURL)
			if err != nil {
				return err
			}
			in, err := sstbuilder.InspectBatch(c.Context, store, p, id, &sstbuilder.InspectOptions{Samples: c.Int("samples")})
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, in)
			}
			in.WriteText(c.App.Writer)
			return nil
		},
	}
}

func sstSynthCommand() *cli.Command {
	return &cli.Command{
		Name:      "synth-export",
		Usage:     "write a synthetic partition-sorted export (to try or benchmark the builder)",
		UsageText: "pillar sst synth-export --out DIR --pages N [options]",
		Description: `Writes an export in the format "pillar sst build" reads, with synthetic prepared page
records (random text and embeddings, ~48 KB each by default).

Examples:
   pillar sst synth-export --out data/exports/synth1 --partitions 8 --pages 2000
   pillar sst synth-export --out data/exports/d1 --id d1 --kind delta --pages 500 --delete-every 5 --versions 2`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Required: true, Usage: "new export directory"},
			&cli.StringFlag{Name: "id", Usage: "export id (default: the directory name, else \"synth\")"},
			&cli.IntFlag{Name: "partitions", Value: 8, Usage: "partition count"},
			&cli.IntFlag{Name: "pages", Required: true, Usage: "distinct pages"},
			&cli.StringFlag{Name: "kind", Value: batch.KindSnapshot, Usage: "snapshot or delta"},
			&cli.IntFlag{Name: "chunks", Value: 16, Usage: "chunks per page"},
			&cli.IntFlag{Name: "text-bytes", Value: 2200, Usage: "text bytes per chunk"},
			&cli.IntFlag{Name: "dims", Value: 384, Usage: "embedding dimensions"},
			&cli.StringFlag{Name: "encoding", Value: "float16", Usage: "embedding encoding: float16, float32 or int8"},
			&cli.IntFlag{Name: "versions", Value: 1, Usage: "versions per page (older ones are superseded)"},
			&cli.IntFlag{Name: "delete-every", Usage: "delta only: every Nth page is a delete"},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "random seed"},
			&cli.StringFlag{Name: "compression", Value: "snappy", Usage: "Parquet compression: snappy, zstd or none"},
			&cli.BoolFlag{Name: "json", Usage: "print the export's export.json as JSON"},
		},
		Action: func(c *cli.Context) error {
			enc, err := record.ParseEncoding(c.String("encoding"))
			if err != nil {
				return err
			}
			id := c.String("id")
			if id == "" {
				id = strings.ToLower(baseName(c.String("out")))
				if !sstbuilder.ValidExportID(id) {
					id = "synth"
				}
			}
			meta, err := sstbuilder.SynthExport(c.String("out"), &sstbuilder.SynthOptions{
				ID: id, Partitions: c.Int("partitions"), Pages: c.Int("pages"), Kind: c.String("kind"),
				Chunks: c.Int("chunks"), TextBytes: c.Int("text-bytes"), Dims: c.Int("dims"), Encoding: enc,
				Versions: c.Int("versions"), DeleteEvery: c.Int("delete-every"), Seed: c.Uint64("seed"),
				Compression: c.String("compression"),
			})
			if err != nil {
				return err
			}
			var rows, bytes int64
			for _, f := range meta.Files {
				rows += f.Rows
				bytes += f.Bytes
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, map[string]any{"dir": c.String("out"), "rows": rows, "bytes": bytes, "export": meta})
			}
			fmt.Fprintf(c.App.Writer, "export %s: %d partitions (%d with rows), %d rows, %d Parquet bytes in %s\n",
				meta.ID, meta.Partitions, len(meta.Files), rows, bytes, c.String("out"))
			return nil
		},
	}
}

func baseName(p string) string {
	p = strings.TrimRight(p, "/")
	if i := strings.LastIndex(p, "/"); i >= 0 {
		return p[i+1:]
	}
	return p
}

func sstUploadExportCommand() *cli.Command {
	return &cli.Command{
		Name:      "upload-export",
		Usage:     "copy a local export into an object store (partition files first, export.json last)",
		UsageText: "pillar sst upload-export --export DIR --to URL",
		Description: `Examples:
   pillar sst upload-export --export data/exports/e1 --to s3://pillar-exports/e1
   pillar sst upload-export --export data/exports/e1 --to file:///srv/pillar/exports/e1`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "export", Required: true, Usage: "local export directory"},
			&cli.StringFlag{Name: "to", Required: true, Usage: "object-store URL the export goes to"},
			s3EndpointFlag, s3RegionFlag, s3PathStyleFlag,
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
		},
		Action: func(c *cli.Context) error {
			st, err := sstOpenStore(c, c.String("to"))
			if err != nil {
				return err
			}
			if err := sstbuilder.UploadExport(c.Context, st, c.String("export"), ""); err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, map[string]any{"export": c.String("export"), "to": c.String("to"), "uploaded": true})
			}
			fmt.Fprintf(c.App.Writer, "uploaded %s to %s\n", c.String("export"), c.String("to"))
			return nil
		},
	}
}

func sstLsCommand() *cli.Command {
	return &cli.Command{
		Name:      "ls",
		Usage:     "list the complete batches (those with a manifest) in an object store",
		UsageText: "pillar sst ls [--partition N] [--json] <objstore-url>",
		Description: `Examples:
   pillar sst ls file:///srv/pillar/objects
   pillar sst ls --partition 7 s3://pillar-batches/prod`,
		Flags: []cli.Flag{
			s3EndpointFlag, s3RegionFlag, s3PathStyleFlag,
			&cli.IntFlag{Name: "partition", Value: -1, Usage: "only this partition (default: all)"},
			&cli.BoolFlag{Name: "json", Usage: "print the manifests as JSON"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return errors.New("want one argument: the object-store URL")
			}
			store, err := sstOpenStore(c, c.Args().First())
			if err != nil {
				return err
			}
			ms, err := sstbuilder.ListBatches(c.Context, store, c.Int("partition"))
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, ms)
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PARTITION\tBATCH\tKIND\tKEYS\tDELETES\tFILES\tBYTES\tCREATED\tSOURCE")
			for _, m := range ms {
				var size int64
				for _, f := range m.Files {
					size += f.Size
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", m.Partition, m.ID, m.Kind, m.Keys, m.Deletes, len(m.Files), size,
					time.UnixMilli(m.CreatedAtMS).UTC().Format(time.RFC3339), m.Source)
			}
			return tw.Flush()
		},
	}
}
