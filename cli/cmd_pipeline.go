package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/jobs/pipeline"
	"github.com/pillarkit/pillar/lorry"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/ingest"
	"github.com/pillarkit/pillar/sstbuilder"
	"github.com/pillarkit/pillar/subsets"
)

func printPlan(p *pipeline.ExportPlan) {
	if p == nil {
		fmt.Println("  export: nothing published yet, so no export work (publish exports the members)")
		return
	}
	if p.Bulk {
		fmt.Printf("  export: bulk rebuild marked: %s\n", p.Reason)
		return
	}
	if p.Incremental {
		fmt.Printf("  export: incremental: %d pages changed since export/state's watermark; %d pages desired; queued %d puts and %d deletes; %d unchanged; %d changed member pages skipped (no current chunks/vectors)\n",
			p.Changed, p.Desired, p.Puts, p.Deletes, p.Unchanged, p.Skipped)
		return
	}
	fmt.Printf("  export: %d pages desired; queued %d puts and %d deletes; %d unchanged; %d member pages skipped (no current chunks/vectors)\n",
		p.Desired, p.Puts, p.Deletes, p.Unchanged, p.Skipped)
}

func publishCommand() *cli.Command {
	return &cli.Command{
		Name:  "publish",
		Usage: "atomically publish a (chunk version, model) pair and queue the export work it causes",
		Description: `Sets the published pair in one transaction together with its export work: puts for
exported pages whose record changes and deletes for pages that can no longer be served, or,
when most pages change (a new pair), a bulk-rebuild mark that ` + "`pillar export`" + ` carries out.
Both versions must be complete. Re-publishing the same pair after an incremental backfill
queues just the changed pages for Lorry.

Examples:
   pillar publish --store data/store --chunks recursive-s512-o64-54906c2d --model hash:dim=384
   pillar publish --store data/store --chunks recursive-s512-o64-54906c2d --model hash-d384-ea4b8133 --dry-run
   pillar publish --store data/store --chunks recursive-s512-o64-54906c2d --model hash:dim=384 --priority bulk
   pillar publish --store data/store --chunks recursive-s512-o64-54906c2d --model hash:dim=384 --full-reconcile

Re-publishing the live pair reconciles only the pages changed since export/state's watermark
(the deltas written since the last publish or export) when it applies, else every page;
--full-reconcile always compares every page.
` + publishServeHelp, // serving publications: cmd_publication.go
		Flags: append(append([]cli.Flag{storeFlag,
			&cli.StringFlag{Name: "chunks", Required: true, Usage: "chunk version id"},
			&cli.StringFlag{Name: "model", Required: true, Usage: "model id or spec (e.g. hash:dim=384)"}, priorityFlag,
			&cli.BoolFlag{Name: "full-reconcile", Usage: "compute every exported page's record and compare all of export/state, ignoring its watermark (default: only the pages changed since it, when it applies)"},
		}, runFlags...), publishServeFlags...),
		Action: func(c *cli.Context) error {
			if c.Bool("serve") || c.Bool("live") || c.IsSet("wait") {
				return runPublishServe(c) // cmd_publication.go
			}
			st, err := openStore(c, false, 0)
			if err != nil {
				return err
			}
			defer st.Close()
			o := pipelineOptions(c)
			o.FullReconcile = c.Bool("full-reconcile")
			r, err := pipeline.Publish(c.Context, st, c.String("chunks"), c.String("model"), o)
			if err != nil {
				return err
			}
			return printPublish(c, "published", r)
		},
	}
}

func printPublish(c *cli.Context, verb string, r *pipeline.PublishResult) error {
	if c.Bool("json") {
		return printJSON(c.App.Writer, r)
	}
	if r.DryRun {
		fmt.Printf("dry run: would publish chunks %s, model %s; %s\n", r.Published.ChunkVersion, r.Published.Model, r.Export.Reason)
		return nil
	}
	fmt.Printf("%s chunks %s, model %s\n", verb, r.Published.ChunkVersion, r.Published.Model)
	if r.Previous != nil && r.RollbackTo != r.Previous {
		fmt.Printf("  previous: chunks %s, model %s (the same pair: re-published)\n", r.Previous.ChunkVersion, r.Previous.Model)
	}
	if r.RollbackTo != nil {
		fmt.Printf("  `pillar rollback` returns to: chunks %s, model %s\n", r.RollbackTo.ChunkVersion, r.RollbackTo.Model)
	} else {
		fmt.Println("  `pillar rollback`: nothing to return to yet (no other pair was published before)")
	}
	printPlan(r.Export)
	return nil
}

func rollbackCommand() *cli.Command {
	return &cli.Command{
		Name:        "rollback",
		Usage:       "make the previous publication live again: in the serving tier (--control) and the store, in one step",
		Description: rollbackHelp, // cmd_publication.go
		Flags:       append(append([]cli.Flag{rollbackStoreFlag, priorityFlag}, runFlags...), rollbackServeFlags...),
		Action: func(c *cli.Context) error {
			if c.String("control") != "" {
				return runRollbackServe(c) // cmd_publication.go
			}
			if c.String("store") == "" {
				return fmt.Errorf("rollback: give --store (the store's published pair), --control (the serving tier), or both")
			}
			st, err := openStore(c, false, 0)
			if err != nil {
				return err
			}
			defer st.Close()
			r, err := pipeline.Rollback(c.Context, st, pipelineOptions(c))
			if err != nil {
				return err
			}
			return printPublish(c, "rolled back to", r)
		},
	}
}

func exportCommand() *cli.Command {
	return &cli.Command{
		Name:  "export",
		Usage: "bulk rebuild: write every exported page's record as a partition-sorted snapshot export",
		Description: `Joins the exported subsets' members with the published chunk and embedding versions into
prepared page records (protobuf; vectors float16 by default) and writes Parquet files per
partition, rows sorted by page key, plus export.json. Then build SST batches from it with
` + "`pillar sst build`" + `. Every partition gets a snapshot (an empty one deletes everything), so
pages that left every exported subset disappear from the serving tier.

Examples:
   pillar export --store data/store --partitions 64 --out data/exports/exp1
   pillar sst build --export data/exports/exp1 --objstore file://$PWD/data/objects --control 127.0.0.1:7000
` + exportPublishHelp,
		Flags: append([]cli.Flag{storeFlag,
			&cli.IntFlag{Name: "partitions", Usage: "the deployment's partition count (must equal the store's)"},
			&cli.StringFlag{Name: "out", Required: true, Usage: "export directory (must not exist or be empty)"},
			&cli.StringFlag{Name: "id", Usage: "export id (default: the --out folder's name)"},
			&cli.StringFlag{Name: "encoding", Value: "float16", Usage: "vector encoding in records: float16, float32 or int8"},
			&cli.IntFlag{Name: "workers", Usage: "parallel jobs (default: number of CPUs)"},
			memoryLimitFlag,
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
		}, append(append([]cli.Flag{}, ytRunFlags...), exportPublishFlags...)...), // --pool, --job-binary for yt:// stores
		Action: func(c *cli.Context) error {
			if c.String("objstore") != "" {
				return runExportPublish(c) // the whole protocol: bulkexport.Run
			}
			st, err := openExportStore(c)
			if err != nil {
				return err
			}
			defer st.Close()
			p := st.Info().Partitions
			out := c.String("out")
			id := c.String("id")
			if id == "" {
				id = strings.ToLower(filepath.Base(out))
			}
			if !sstbuilder.ValidExportID(id) {
				return fmt.Errorf("export: id %q: lower-case letters, digits, '.', '_' and '-' only (use --id)", id)
			}
			opts := pipelineOptions(c)
			w, err := sstbuilder.NewExportWriter(out, p, batch.KindSnapshot, &sstbuilder.ExportOptions{ID: id, Source: "pillar export " + st.Info().Root,
				RowGroupBytes: sstbuilder.ExportRowGroupBytes(opts.MemoryLimit, p), Workers: sstbuilder.ExportWorkers(opts.Workers)})
			if err != nil {
				return err
			}
			opts.Encoding = c.String("encoding")
			res, pending, err := pipeline.Export(c.Context, st, w, opts)
			if err != nil {
				w.Abort()
				return err
			}
			meta, err := w.Close()
			if err != nil {
				pending.Abort()
				return err
			}
			if err := pending.Commit(meta.ID, out); err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, map[string]any{"export": meta, "result": res})
			}
			fmt.Printf("exported %d pages (%s of records, %d member pages skipped) in %s to %s\n",
				res.Pages, humanBytes(res.Bytes), res.Skipped, res.Duration, out)
			fmt.Printf("  export id %s, %d partitions (%d with rows)\n", meta.ID, meta.Partitions, len(meta.Files))
			// Queue records older than the export must reach the serving tier
			// before its snapshots, or an older delta could land after them.
			if behind, err := lorry.UndeliveredBefore(c.Context, st, res.QueueEnds); err == nil && len(behind) > 0 {
				fmt.Printf("  NOTE: %d partitions have export-queue records older than this export that Lorry has not\n"+
					"  delivered yet: run `pillar lorry run --once` BEFORE registering this export's batches.\n", len(behind))
			}
			fmt.Printf("  next: pillar sst build --export %s --objstore <url> --control <control addr>\n", out)
			return nil
		},
	}
}

func subsetsStoreCommands() []*cli.Command {
	return []*cli.Command{
		{
			Name:  "recompute",
			Usage: "evaluate every policy over the store, write new generations and queue the export work",
			Description: `One pass over docs (and signals) evaluates every policy; a new generation of each subset
is written together with the export work (puts for pages entering an exported subset or
whose record changed, deletes for pages that left every exported subset) in one
transaction. A re-run with the same inputs and --as-of does nothing. Each member table gets
its change as a delta; the export work covers only the pages whose membership changed and
those changed since export/state's watermark, when it applies (--full-reconcile: every page).

Examples:
   pillar subsets recompute --store data/store --policies testdata/policies.yaml
   pillar subsets recompute --store data/store --policies testdata/policies.yaml --as-of 2026-11-30T00:00:00Z
   pillar subsets recompute --store data/store --policies testdata/policies.yaml --full-reconcile`,
			Flags: append([]cli.Flag{storeFlag,
				&cli.StringFlag{Name: "policies", Required: true, Usage: "policy file (YAML or JSON)", EnvVars: []string{"PILLAR_POLICIES"}},
				&cli.TimestampFlag{Name: "as-of", Layout: time.RFC3339, Usage: "evaluation time for age() (default: now)"}, priorityFlag,
				&cli.BoolFlag{Name: "full-reconcile", Usage: "compute every exported page's record and compare all of export/state, ignoring its watermark"},
			}, runFlags...),
			Action: func(c *cli.Context) error {
				set, err := subsets.ReadFile(c.String("policies"))
				if err != nil {
					return err
				}
				asOf := time.Now()
				if t := c.Timestamp("as-of"); t != nil {
					asOf = *t
				}
				st, err := openStore(c, false, 0)
				if err != nil {
					return err
				}
				defer st.Close()
				o := pipelineOptions(c)
				o.FullReconcile = c.Bool("full-reconcile")
				r, err := pipeline.Recompute(c.Context, st, set, asOf, o)
				if err != nil {
					return err
				}
				if c.Bool("json") {
					return printJSON(c.App.Writer, r)
				}
				if r.Skipped {
					fmt.Printf("subsets recompute: these inputs were already processed (run %s): nothing to do\n", r.RunID)
					return nil
				}
				if r.DryRun {
					fmt.Printf("dry run: would evaluate %d policies over %d pages as of %s, reading ~%s (docs, signals and,\n"+
						"  when something is published, its chunks and vectors), write a new generation of each subset\n"+
						"  and queue the export work in one transaction\n", len(r.Subsets), r.Docs, r.AsOf.Format(time.RFC3339), humanBytes(r.ReadBytes))
					return nil
				}
				fmt.Printf("recomputed %d subsets over %d pages as of %s in %s\n", len(r.Subsets), r.Docs, r.AsOf.Format(time.RFC3339), r.Duration)
				tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "  SUBSET\tEXPORTED\tGEN\tSIZE\tADDS\tREMOVES")
				for _, s := range r.Subsets {
					fmt.Fprintf(tw, "  %s\t%v\t%d\t%d\t%d\t%d\n", s.Name, s.Exported, s.Generation, s.Size, s.Adds, s.Removes)
				}
				tw.Flush()
				printPlan(r.Export)
				return nil
			},
		},
		{
			Name:  "show",
			Usage: "list subsets with size, exported flag and generation history",
			Description: `Examples:
   pillar subsets show --store data/store`,
			Flags: []cli.Flag{storeFlag, &cli.BoolFlag{Name: "json", Usage: "print as JSON"}},
			Action: func(c *cli.Context) error {
				sn, done, err := openSnapshot(c)
				if err != nil {
					return err
				}
				defer done()
				ms, err := pipeline.SubsetInfo(c.Context, sn)
				if err != nil {
					return err
				}
				if c.Bool("json") {
					return printJSON(c.App.Writer, ms)
				}
				if len(ms) == 0 {
					fmt.Println("no subsets yet: run `pillar subsets recompute --policies FILE`")
					return nil
				}
				tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "SUBSET\tEXPORTED\tSIZE\tGEN\tAS OF\tHISTORY (gen: size +adds -removes)")
				for _, m := range ms {
					var h []string
					for _, g := range m.History {
						h = append(h, fmt.Sprintf("%d: %d +%d -%d", g.Generation, g.Size, g.Adds, g.Removes))
					}
					fmt.Fprintf(tw, "%s\t%v\t%d\t%d\t%s\t%s\n", m.Name, m.Exported, m.Size, m.Generation, m.AsOf.Format(time.RFC3339), strings.Join(h, "; "))
				}
				return tw.Flush()
			},
		},
		{
			Name:  "diff",
			Usage: "the pages that entered and left a subset in its last recompute",
			Description: `Examples:
   pillar subsets diff --store data/store --subset fresh
   pillar subsets diff --store data/store --subset long-pages --all
   pillar subsets diff --store data/store --subset fresh --limit 0 --json`,
			Flags: []cli.Flag{storeFlag,
				&cli.StringFlag{Name: "subset", Required: true, Usage: "subset name"},
				&cli.BoolFlag{Name: "all", Usage: "also list pages that stayed"},
				&cli.IntFlag{Name: "limit", Value: 50, Usage: "list at most this many pages per kind (0: all)"},
				&cli.BoolFlag{Name: "json", Usage: "print the counts and the listed pages (key, URL, scores) as JSON"},
			},
			Action: func(c *cli.Context) error {
				sn, done, err := openSnapshot(c)
				if err != nil {
					return err
				}
				defer done()
				// One streaming pass: count every change, keep only those
				// listed (at most --limit per kind), so memory follows the
				// output, not the subset.
				count := map[subsets.ChangeKind]int{}
				shown := map[subsets.ChangeKind]int{}
				var list []subsets.Change
				var keys []string
				meta, err := pipeline.EachSubsetChange(c.Context, sn, c.String("subset"), func(ch subsets.Change) error {
					count[ch.Kind]++
					if ch.Kind == subsets.Stay && !c.Bool("all") {
						return nil
					}
					if l := c.Int("limit"); l > 0 && shown[ch.Kind] >= l {
						return nil
					}
					shown[ch.Kind]++
					list, keys = append(list, ch), append(keys, ch.PageKey)
					return nil
				})
				if err != nil {
					return err
				}
				urls, err := subsets.PageURLs(c.Context, sn, keys)
				if err != nil {
					return fmt.Errorf("subsets diff: %w", err)
				}
				if c.Bool("json") {
					return printSubsetDiffJSON(c, meta, count, list, urls)
				}
				fmt.Fprintf(c.App.Writer, "subset %s, generation %d (as of %s): %d entered, %d left, %d stayed\n", meta.Name, meta.Generation,
					meta.AsOf.Format(time.RFC3339), count[subsets.Enter], count[subsets.Leave], count[subsets.Stay])
				for _, ch := range list {
					fmt.Fprintf(c.App.Writer, "  %-5s %s %s\n", ch.Kind, ch.PageKey, urls[ch.PageKey])
				}
				return nil
			},
		},
	}
}

func signalsCommand() *cli.Command {
	return &cli.Command{
		Name:  "signals",
		Usage: "per-page signals (quality scores, …) that policies can use",
		Subcommands: []*cli.Command{{
			Name:  "import",
			Usage: "load signals from a CSV or Parquet file: url or page_key, then named columns",
			Description: `A .parquet file is read as Parquet, anything else as CSV with a header row.
The first column is "url" (normalized and hashed to the page key) or "page_key" (32 hex
characters); every other column is a signal of that name, numeric where the value parses
as a number, else a string. Rows for pages not in the store are counted and skipped. An
imported signal replaces the same page's signal of the same name. The file streams into
the store and is joined with docs by an operation on the runner (--memory-limit bounds it).

Examples:
   pillar signals import --store data/store --from scores.csv
   printf 'url,score\nhttps://www.postgresql.org/docs/15/sql-select.html,0.93\n' > s.csv`,
			Flags: []cli.Flag{storeFlag, &cli.StringFlag{Name: "from", Required: true, Usage: "CSV or .parquet file"},
				&cli.IntFlag{Name: "workers", Usage: "parallel jobs (default: number of CPUs)"}, memoryLimitFlag,
				&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"}},
			Action: func(c *cli.Context) error {
				st, err := openStore(c, false, 0)
				if err != nil {
					return err
				}
				defer st.Close()
				n, unknown, err := importSignals(c, st, c.String("from"))
				if err != nil {
					return err
				}
				if c.Bool("json") {
					return printJSON(c.App.Writer, map[string]any{"imported": n, "unknown_rows": unknown})
				}
				fmt.Printf("imported %d signals; %d rows named pages not in the store (skipped)\n", n, unknown)
				return nil
			},
		}},
	}
}

// importSignals streams the file's signals (ingest.ReadSignals parses it)
// into pipeline.ImportSignals, which joins them with docs on the runner:
// neither the file nor the store's pages are held in memory.
func importSignals(c *cli.Context, st pillar.Store, path string) (int, int, error) {
	res, err := pipeline.ImportSignals(c.Context, st, func(emit func(pipeline.ImportedSignal) error) error {
		return ingest.ReadSignals(path, func(line int64, s pillar.Signal) error {
			return emit(pipeline.ImportedSignal{PageKey: s.PageKey, Name: s.Name, Num: s.Num, Str: s.Str, IsNum: s.IsNum, Row: line})
		})
	}, pipelineOptions(c))
	if err != nil {
		return 0, 0, err
	}
	return int(res.Imported), int(res.UnknownRows), nil
}

// openExportStore opens --store for `pillar export` and, when --partitions
// is set, checks it against the store's partition count.
func openExportStore(c *cli.Context) (pillar.Store, error) {
	st, err := openStore(c, false, 0)
	if err != nil {
		return nil, err
	}
	if p := st.Info().Partitions; c.IsSet("partitions") && c.Int("partitions") != p {
		st.Close()
		return nil, fmt.Errorf("export: --partitions %d, but the store has %d partitions: %w", c.Int("partitions"), p, pillar.ErrPartitions)
	}
	return st, nil
}
