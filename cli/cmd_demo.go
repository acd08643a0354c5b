package cli

import (
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/demo"
)

func demoCommand() *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "run the whole pipeline on embedded defaults and write a report (what `make demo` runs)",
		Description: `Ingests a corpus (default: the PostgreSQL HTML docs from Debian's postgresql-doc-15),
re-chunks and embeds it, computes subsets from the policy file, publishes, bulk-exports SST
batches into a local object store, starts a control plane (SQLite) and three cobbled nodes
in zones a/b/c as child processes, reads every exported page back through the hedging
router and checks it, re-chunks and re-publishes while a reader keeps reading, delivers
edited pages and a policy change with Lorry, and writes demo-report.md with plots.

Every check derives from the data: the pages it edits are picked from the store among the
exported ones, and the policy change removes some (not all) pages of the largest exported
subset. Any mismatch or failed read fails the demo, and so does a step that should change
something and changes nothing (no page ingested, no exported page, 0 changed pages after the
edits, 0 puts/deletes after the policy change, 0 batches delivered): the exit status is
non-zero and demo-report.md says why. The policies are embedded (written for any folder of
HTML docs); --policies overrides them. Child processes are stopped at the end.

Examples:
   pillar demo --out demo-out
   pillar demo --out demo-out --corpus ./my-html-pages --base-url https://example.org/
   pillar demo --out demo-out --synthetic 5000
   pillar demo --out demo-out --reuse          # keep the store from the last run
   pillar demo --out /tmp/xslt --corpus /usr/share/doc/libxslt1-dev/html --max-files 60
   pillar demo --out /tmp/crawl --corpus crawl.warc.gz      # a crawl (WARC, WET, JSONL, Parquet) as pillar ingest takes it`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Value: "demo-out", Usage: "output folder (store, objects, exports, logs, report)"},
			&cli.StringFlag{Name: "corpus", Value: demo.DefaultCorpus, Usage: "folder of HTML or text files, or a crawl or page dataset as pillar ingest --from takes it (step 6 then ingests a re-crawl of some pages)"},
			&cli.StringFlag{Name: "base-url", Usage: "URL prefix + the relative path, for corpus files without an http(s) canonical link"},
			&cli.IntFlag{Name: "synthetic", Usage: "generate N pages of realistic size instead of reading a corpus"},
			&cli.StringFlag{Name: "policies", Usage: "subset policy file (default: the embedded demo policies, for any corpus)"},
			&cli.IntFlag{Name: "max-files", Usage: "short mode: copy only the first N files of the corpus (default: all)"},
			&cli.StringFlag{Name: "canonical", Value: "prefer", Usage: "canonical links: prefer, ignore or require (see pillar ingest --help)"},
			&cli.StringSliceFlag{Name: "include", Usage: "ingest only files matching this glob (repeatable)"},
			&cli.StringSliceFlag{Name: "exclude", Usage: "leave out files matching this glob (repeatable)"},
			&cli.IntFlag{Name: "partitions", Value: 64, Usage: "partition count"},
			&cli.BoolFlag{Name: "reuse", Usage: "reuse the store and objects of an earlier run (default: start fresh)"},
			&cli.BoolFlag{Name: "json", Usage: "print the report's figures as JSON on stdout (progress goes to stderr)"},
		},
		Action: func(c *cli.Context) error {
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			stdout := io.Writer(os.Stdout)
			if c.Bool("json") {
				stdout = os.Stderr
			}
			rep, err := demo.Run(c.Context, demo.Options{
				Pillar: bin, Out: c.String("out"), Corpus: c.String("corpus"), BaseURL: c.String("base-url"),
				Synthetic: c.Int("synthetic"), Policies: c.String("policies"), Partitions: c.Int("partitions"),
				Reuse: c.Bool("reuse"), Stdout: stdout, Logger: logger(), MaxFiles: c.Int("max-files"),
				Canonical: c.String("canonical"), Include: c.StringSlice("include"), Exclude: c.StringSlice("exclude"),
			})
			if c.Bool("json") && rep != nil {
				if jerr := printJSON(c.App.Writer, rep); jerr != nil && err == nil {
					err = jerr
				}
			}
			return err
		},
	}
}
