package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/jobs/pipeline"
	"github.com/pillarkit/pillar/pillar"
)

var runFlags = []cli.Flag{
	&cli.IntFlag{Name: "workers", Usage: "parallel jobs (default: number of CPUs)"},
	&cli.Int64Flag{Name: "memory-limit", Usage: "bytes of memory for sorts before spilling (default 512 MiB)"},
	&cli.IntFlag{Name: "slice-pages", Value: 5000, Usage: "pages per committed slice: an interrupted run loses at most one slice"},
	&cli.BoolFlag{Name: "dry-run", Usage: "say what would be read and written, write nothing"},
	&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
}

func pipelineOptions(c *cli.Context) pipeline.Options {
	return pipeline.Options{
		Workers: c.Int("workers"), MemoryLimit: c.Int64("memory-limit"), SlicePages: c.Int("slice-pages"),
		DryRun: c.Bool("dry-run"), Logger: logger(), Progress: jobs.NewProgress(os.Stderr, logger(), 5*time.Second),
		Runner: ytRunner(c), // nil (the local runner) unless --store is yt:// (cli/store_yt.go)
	}
}

func printResult(c *cli.Context, verb string, r *pipeline.Result) error {
	if c.Bool("json") {
		return json.NewEncoder(os.Stdout).Encode(r)
	}
	if r.DryRun {
		fmt.Printf("dry run: %s %s would process %d pages in %d slices, drop %d stale pages,\n  read ~%s and write ~%s into %s\n",
			verb, r.Version, r.PendingPages, r.Slices, r.StalePages, humanBytes(r.ReadBytes), humanBytes(r.WriteBytes), r.Table)
		return nil
	}
	fmt.Printf("%s %s: processed %d pages in %d slices (%d rows written, %d stale pages dropped) in %s\n",
		verb, r.Version, r.PendingPages, r.Slices, r.RowsWritten, r.StalePages, r.Duration)
	fmt.Printf("  %s now holds %d rows for %d pages\n", r.Table, r.Rows, r.Pages)
	fmt.Println(r.Version)
	return nil
}

func backfillCommand() *cli.Command {
	return &cli.Command{
		Name:  "backfill",
		Usage: "re-chunk and re-embed the corpus into new versions (incremental, resumable)",
		Subcommands: []*cli.Command{
			{
				Name:  "rechunk",
				Usage: "chunk every page whose content has no rows in the chunker version; prints the version id",
				Description: `Chunkers: tokens:size=N,overlap=M (fixed token windows) and recursive:size=N,overlap=M
(paragraph → sentence → word splitting). Same spec ⇒ same version id. Re-running processes
only new or changed pages; an interrupted run resumes without redoing committed slices.

Examples:
   pillar backfill rechunk --store data/store --chunker recursive:size=512,overlap=64
   pillar backfill rechunk --store data/store --chunker tokens:size=256,overlap=32 --dry-run`,
				Flags: append([]cli.Flag{storeFlag,
					&cli.StringFlag{Name: "chunker", Required: true, Usage: "chunker spec, e.g. recursive:size=512,overlap=64"},
				}, runFlags...),
				Action: func(c *cli.Context) error {
					st, err := openStore(c, false, 0)
					if err != nil {
						return err
					}
					defer st.Close()
					r, err := pipeline.Rechunk(c.Context, st, c.String("chunker"), pipelineOptions(c))
					if err != nil {
						return err
					}
					return printResult(c, "rechunk", r)
				},
			},
			{
				Name:  "embed",
				Usage: "embed every page of a chunk version whose content has no vectors yet; prints the version id",
				Description: `Models: hash:dim=N (feature hashing, built in, no model needed) and
openai:url=…,model=…,dim=N[,batch=64,concurrency=4] (any OpenAI-compatible /v1/embeddings server;
API key from PILLAR_EMBED_API_KEY or OPENAI_API_KEY).

Examples:
   pillar backfill embed --store data/store --chunks recursive-s512-o64-… --model hash:dim=384
   pillar backfill embed --store data/store --chunks <cv> --model openai:url=http://127.0.0.1:8000/v1,model=bge-small,dim=384`,
				Flags: append([]cli.Flag{storeFlag,
					&cli.StringFlag{Name: "chunks", Required: true, Usage: "chunk version id (see `pillar versions`)"},
					&cli.StringFlag{Name: "model", Required: true, Usage: "model spec, e.g. hash:dim=384"},
					&cli.IntFlag{Name: "batch", Usage: "texts per Embed call (default: the model's preferred batch, e.g. batch×concurrency for openai)"},
				}, runFlags...),
				Action: func(c *cli.Context) error {
					st, err := openStore(c, false, 0)
					if err != nil {
						return err
					}
					defer st.Close()
					o := pipelineOptions(c)
					o.Batch = c.Int("batch")
					r, err := pipeline.Embed(c.Context, st, c.String("chunks"), c.String("model"), o)
					if err != nil {
						return err
					}
					return printResult(c, "embed", r)
				},
			},
		},
	}
}

func versionsCommand() *cli.Command {
	return &cli.Command{
		Name:  "versions",
		Usage: "show the version registry: every chunk and embedding version, its state and counts",
		Description: `Examples:
   pillar versions --store data/store
   pillar versions --store data/store --json`,
		Flags: []cli.Flag{storeFlag, &cli.BoolFlag{Name: "json", Usage: "print as JSON"}},
		Action: func(c *cli.Context) error {
			st, err := openStore(c, false, 0)
			if err != nil {
				return err
			}
			defer st.Close()
			sn, err := st.Snapshot(c.Context)
			if err != nil {
				return err
			}
			defer sn.Release()
			vs, err := pillar.Versions(c.Context, sn)
			if err != nil {
				return err
			}
			pub, _ := pillar.LoadPublished(c.Context, sn)
			if c.Bool("json") {
				return json.NewEncoder(os.Stdout).Encode(map[string]any{"versions": vs, "published": pub})
			}
			tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KIND\tID\tSTATE\tPAGES\tROWS\tEMPTY\tSPEC\tBUILT")
			for _, v := range vs {
				built := "-"
				if !v.CompletedAt.IsZero() {
					built = v.CompletedAt.Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", v.Kind, v.ID, v.State, v.Pages, v.Rows, v.EmptyPages, v.Spec, built)
			}
			tw.Flush()
			if pub != nil {
				fmt.Printf("\npublished: chunks %s, model %s (since %s)\n", pub.ChunkVersion, pub.Model, pub.At.Format(time.RFC3339))
			} else {
				fmt.Println("\npublished: (nothing yet)")
			}
			_ = strings.TrimSpace
			return nil
		},
	}
}
