package cli

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/bench/formatsbench"
	"github.com/pillarkit/pillar/internal/bytesize"
)

func benchFormatsCommand() *cli.Command {
	return &cli.Command{
		Name:  "ingest-formats",
		Usage: "ingest by input format: the same pages as a folder, a WARC.gz and a Parquet dataset, pages/s and peak RSS",
		Description: `Generates --n synthetic pages of --size bytes of HTML three times over: a folder of HTML
files, a WARC (one gzip member per response record, as crawlers write it) and a Parquet
dataset (url, html, fetched_at), then ingests each into a fresh store with pillar ingest
--memory-limit in a process of its own, --rounds times with the order rotated. It reports
the median pages/s, pages per CPU-second and the peak RSS per input, and each input's pages/s
over the folder's. Every run must ingest all --n pages. Results go to --out (results.md,
results.json); the corpus and stores to --dir (removed at the end unless --keep).

Examples:
   pillar bench ingest-formats --out bench-out/formats
   pillar bench ingest-formats --out bench-out/formats --n 80000 --memory-limit 64MiB --rounds 5`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Value: "bench-out/formats", Usage: "folder for results.md and results.json"},
			&cli.StringFlag{Name: "dir", Usage: "folder for the corpus and the stores (default: a temporary folder)"},
			&cli.BoolFlag{Name: "keep", Usage: "keep --dir afterwards"},
			&cli.IntFlag{Name: "n", Value: 20000, Usage: "pages"},
			&cli.StringFlag{Name: "size", Value: "4KiB", Usage: "HTML bytes per page"},
			&cli.StringFlag{Name: "memory-limit", Value: "64MiB", Usage: "--memory-limit of each ingest"},
			&cli.IntFlag{Name: "rounds", Value: 3, Usage: "rounds (each input once per round)"},
		},
		Action: func(c *cli.Context) error {
			size, err := bytesize.Parse(c.String("size"))
			if err != nil || size < 256 {
				return fmt.Errorf("--size %q: want a size of at least 256B", c.String("size"))
			}
			if _, err := bytesize.Parse(c.String("memory-limit")); err != nil {
				return fmt.Errorf("--memory-limit %q: %v", c.String("memory-limit"), err)
			}
			if c.Int("n") < 1 || c.Int("rounds") < 1 {
				return fmt.Errorf("--n and --rounds must be at least 1")
			}
			self, err := os.Executable()
			if err != nil {
				return err
			}
			dir := c.String("dir")
			if dir == "" {
				if dir, err = os.MkdirTemp("", "pillar-bench-formats-"); err != nil {
					return err
				}
			}
			if !c.Bool("keep") {
				defer os.RemoveAll(dir)
			}
			rep, err := formatsbench.Measure(c.Context, formatsbench.Options{Pillar: self, Dir: dir, N: c.Int("n"), Size: int(size),
				MemoryLimit: c.String("memory-limit"), Rounds: c.Int("rounds"), Log: c.App.ErrWriter})
			if err != nil {
				return err
			}
			return writeBenchResults(c, rep.Markdown(), rep)
		},
	}
}
