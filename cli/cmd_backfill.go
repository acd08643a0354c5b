package cli

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/jobs/chunker"
	"github.com/pillarkit/pillar/jobs/pipeline"
	"github.com/pillarkit/pillar/pillar"
)

var runFlags = []cli.Flag{
	&cli.IntFlag{Name: "workers", Usage: "parallel jobs (default: number of CPUs)"},
	memoryLimitFlag,
	&cli.IntFlag{Name: "slice-pages", Value: 5000, Usage: "pages per committed slice: an interrupted run loses at most one slice"},
	&cli.BoolFlag{Name: "dry-run", Usage: "say what would be read and written, write nothing"},
	&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
}

func pipelineOptions(c *cli.Context) pipeline.Options {
	mem, _ := memoryLimit(c) // checked by the flag's Action
	return pipeline.Options{
		Workers: c.Int("workers"), MemoryLimit: mem, SlicePages: c.Int("slice-pages"),
		DryRun: c.Bool("dry-run"), Priority: c.String("priority"), Logger: logger(), Progress: jobs.NewProgress(os.Stderr, logger(), 5*time.Second),
		Runner: ytRunner(c), // nil (the local runner) unless --store is yt:// (cli/store_yt.go)
	}
}

func printResult(c *cli.Context, verb string, r *pipeline.Result) error {
	if c.Bool("json") {
		return printJSON(c.App.Writer, r)
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
			previewCommand(),
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
openai:url=…,model=…,dim=N[,batch=64,concurrency=4,rate=R] (any OpenAI-compatible /v1/embeddings
server; API key from PILLAR_EMBED_API_KEY or OPENAI_API_KEY; rate= caps requests per second).
Each embed job keeps --embed-concurrency batches in flight while it reads the next chunks and
writes the answered ones, so a slow model is kept busy; 429 and 5xx answers are retried with
backoff (Retry-After honoured).

Examples:
   pillar backfill embed --store data/store --chunks recursive-s512-o64-… --model hash:dim=384
   pillar backfill embed --store data/store --chunks <cv> --model openai:url=http://127.0.0.1:8000/v1,model=bge-small,dim=384
   pillar backfill embed --store data/store --chunks <cv> --model openai:url=https://api.example.com/v1,model=m,dim=768,rate=50 --embed-concurrency 16`,
				Flags: append([]cli.Flag{storeFlag,
					&cli.StringFlag{Name: "chunks", Required: true, Usage: "chunk version id (see `pillar versions`)"},
					&cli.StringFlag{Name: "model", Required: true, Usage: "model spec, e.g. hash:dim=384"},
					&cli.IntFlag{Name: "batch", Usage: "texts per model call (default: the model's batch, batch= for openai, else 64)"},
					&cli.IntFlag{Name: "embed-concurrency", Usage: "model calls each embed job keeps in flight while it reads and writes the others; for openai also its requests in flight (concurrency=; not part of the version id) (default: the model's concurrency=, else 2)"},
				}, runFlags...),
				Action: func(c *cli.Context) error {
					st, err := openStore(c, false, 0)
					if err != nil {
						return err
					}
					defer st.Close()
					o := pipelineOptions(c)
					o.Batch = c.Int("batch")
					o.EmbedConcurrency = c.Int("embed-concurrency")
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
		Description: `With --control it also shows the serving publications: each one's role (live, candidate,
previous, retired), whether it is ready, how many replicas hold it and its bytes on each node.

Examples:
   pillar versions --store data/store
   pillar versions --store data/store --json
   pillar versions --store data/store --control 127.0.0.1:7000`,
		Flags: []cli.Flag{storeFlag, &cli.BoolFlag{Name: "json", Usage: "print as JSON"}, versionsControlFlag, controlTLSCAFlag},
		Action: func(c *cli.Context) error {
			sn, done, err := openSnapshot(c)
			if err != nil {
				return err
			}
			defer done()
			vs, err := pillar.Versions(c.Context, sn)
			if err != nil {
				return err
			}
			pub, _ := pillar.LoadPublished(c.Context, sn)
			serving, live, err := versionsServing(c) // cmd_publication.go; nil without --control
			if err != nil {
				return err
			}
			if c.Bool("json") {
				out := map[string]any{"versions": vs, "published": pub}
				if serving != nil {
					out["serving"] = map[string]any{"publications": serving, "live": live}
				}
				return printJSON(c.App.Writer, out)
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
			if c.String("control") != "" {
				fmt.Println()
				return printPublications(os.Stdout, serving, live)
			}
			return nil
		},
	}
}

func previewCommand() *cli.Command {
	return &cli.Command{
		Name:  "preview",
		Usage: "compare a chunker with the published one on a sample of pages (writes nothing)",
		Description: `Chunks a deterministic sample of pages with the candidate chunker and with the published
chunk version's chunker (or --baseline), and shows chunks per page, the token-length
distribution, how many pages get different boundaries, and one page side by side.

Examples:
   pillar backfill preview --store data/store --chunker recursive:size=512,overlap=64 --sample 200
   pillar backfill preview --store data/store --chunker tokens:size=256,overlap=32 --baseline recursive:size=512,overlap=64`,
		Flags: []cli.Flag{storeFlag,
			&cli.StringFlag{Name: "chunker", Required: true, Usage: "candidate chunker spec"},
			&cli.StringFlag{Name: "baseline", Usage: "baseline chunker spec (default: the published chunk version's)"},
			&cli.IntFlag{Name: "sample", Value: 200, Usage: "pages to sample (0: all)"},
			&cli.Int64Flag{Name: "seed", Value: 1, Usage: "sample seed"},
			&cli.IntFlag{Name: "show", Value: 3, Usage: "chunks of the example page to show side by side"},
			&cli.BoolFlag{Name: "json", Usage: "print as JSON"},
		},
		Action: func(c *cli.Context) error {
			st, err := openStore(c, false, 0)
			if err != nil {
				return err
			}
			defer st.Close()
			p, err := pipeline.RunPreview(c.Context, st, c.String("chunker"), c.String("baseline"), c.Int("sample"), c.Int64("seed"))
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, p)
			}
			fmt.Printf("preview on %d sampled pages: %d get different chunk boundaries\n\n", p.Sample, p.ChangedPages)
			tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "\tCANDIDATE\tBASELINE")
			fmt.Fprintf(tw, "spec\t%s\t%s\n", p.Candidate, p.Baseline)
			fmt.Fprintf(tw, "version id\t%s\t%s\n", p.CandidateID, p.BaselineID)
			fmt.Fprintf(tw, "chunks\t%d\t%d\n", p.Cand.Chunks, p.Base.Chunks)
			fmt.Fprintf(tw, "chunks per page\t%.2f\t%.2f\n", p.Cand.ChunksPerPage, p.Base.ChunksPerPage)
			fmt.Fprintf(tw, "pages with no chunks\t%d\t%d\n", p.Cand.EmptyPages, p.Base.EmptyPages)
			fmt.Fprintf(tw, "tokens min / p50 / p90 / max\t%d / %d / %d / %d\t%d / %d / %d / %d\n",
				p.Cand.TokensMin, p.Cand.TokensP50, p.Cand.TokensP90, p.Cand.TokensMax,
				p.Base.TokensMin, p.Base.TokensP50, p.Base.TokensP90, p.Base.TokensMax)
			tw.Flush()
			fmt.Printf("\ntoken-length distribution (buckets of %d tokens):\n", pipeline.HistogramBucket)
			nb := max(len(p.Cand.TokenHistogram), len(p.Base.TokenHistogram))
			peak := 1
			for _, h := range [][]int{p.Cand.TokenHistogram, p.Base.TokenHistogram} {
				for _, v := range h {
					peak = max(peak, v)
				}
			}
			at := func(h []int, i int) int {
				if i < len(h) {
					return h[i]
				}
				return 0
			}
			for i := 0; i < nb; i++ {
				cv, bv := at(p.Cand.TokenHistogram, i), at(p.Base.TokenHistogram, i)
				fmt.Printf("  %4d-%-4d cand %-30s %5d | base %-30s %5d\n", i*pipeline.HistogramBucket, (i+1)*pipeline.HistogramBucket-1,
					strings.Repeat("#", cv*30/peak), cv, strings.Repeat("#", bv*30/peak), bv)
			}
			if ex := p.Example; ex != nil {
				fmt.Printf("\nside by side: %s (%d vs %d chunks)\n", ex.URL, len(ex.Cand), len(ex.Base))
				for i := 0; i < c.Int("show") && (i < len(ex.Cand) || i < len(ex.Base)); i++ {
					show := func(name string, cs []chunker.Chunk) {
						if i >= len(cs) {
							fmt.Printf("  %s #%d: (none)\n", name, i)
							return
						}
						t := strings.Join(strings.Fields(cs[i].Text), " ")
						if len(t) > 160 {
							t = t[:157] + "..."
						}
						fmt.Printf("  %s #%d [%d:%d, %d tokens] %s\n", name, i, cs[i].Start, cs[i].End, cs[i].Tokens, t)
					}
					show("cand", ex.Cand)
					show("base", ex.Base)
				}
			}
			return nil
		},
	}
}
