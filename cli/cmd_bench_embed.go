package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/bench/embedbench"
)

func benchEmbedCommand() *cli.Command {
	return &cli.Command{
		Name:  "embed",
		Usage: "the embed step around a slow model: chunks/s against the model's own limit and a bare client loop",
		Description: `Writes --pages synthetic pages into a fresh store, chunks them, and starts a fake model
server (jobs/embedder/fakemodel, labelled as a fake: an OpenAI-format HTTP server on 127.0.0.1
with --concurrency slots, each request holding one for --latency). Each of --rounds rounds
embeds every chunk twice: a bare loop keeping --concurrency batches of --batch chunks at the
model through the openai embedder and writing nothing, and pillar backfill embed's pipeline
(--embed-concurrency --concurrency, --batch) up to its committed version. It reports chunks/s
for both, the model's limit (concurrency × batch / latency) and the ratios; the target is the
pipeline at ≥ 0.9× the model's limit. Results go to --out (results.md, results.json); the
store to --dir (removed at the end unless --keep).

Examples:
   pillar bench embed --out bench-out/embed
   pillar bench embed --out bench-out/embed --pages 8000 --batch 64 --concurrency 8 --latency 50ms`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Value: "bench-out/embed", Usage: "folder for results.md and results.json"},
			&cli.StringFlag{Name: "dir", Usage: "folder for the store (default: a temporary folder)"},
			&cli.BoolFlag{Name: "keep", Usage: "keep --dir afterwards"},
			&cli.IntFlag{Name: "pages", Value: 4000, Usage: "synthetic pages (about 2 KB of text each)"},
			&cli.IntFlag{Name: "batch", Value: 64, Usage: "chunks per model request"},
			&cli.IntFlag{Name: "concurrency", Value: 4, Usage: "the model's slots and the pipeline's --embed-concurrency"},
			&cli.DurationFlag{Name: "latency", Value: 50 * time.Millisecond, Usage: "how long the model holds a slot per request"},
			&cli.IntFlag{Name: "rounds", Value: 3, Usage: "rounds (bare loop and pipeline once each)"},
		},
		Action: func(c *cli.Context) error {
			for _, f := range []string{"pages", "batch", "concurrency", "rounds"} {
				if c.Int(f) < 1 {
					return fmt.Errorf("--%s %d: must be at least 1", f, c.Int(f))
				}
			}
			if c.Duration("latency") <= 0 {
				return fmt.Errorf("--latency %s: must be positive", c.Duration("latency"))
			}
			dir := c.String("dir")
			var err error
			if dir == "" {
				if dir, err = os.MkdirTemp("", "pillar-bench-embed-"); err != nil {
					return err
				}
			} else if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
				return fmt.Errorf("--dir %s: not empty (the benchmark creates its store there)", dir)
			}
			if !c.Bool("keep") {
				defer os.RemoveAll(dir)
			}
			rep, err := embedbench.Measure(c.Context, embedbench.Options{Dir: dir, Pages: c.Int("pages"), Batch: c.Int("batch"),
				Concurrency: c.Int("concurrency"), Latency: c.Duration("latency"), Rounds: c.Int("rounds"), Log: c.App.ErrWriter})
			if err != nil {
				return err
			}
			return writeBenchResults(c, rep.Markdown(), rep)
		},
	}
}

// writeBenchResults writes a benchmark's report as results.md (md) and
// results.json (rep) into the folder --out names, and prints md.
func writeBenchResults(c *cli.Context, md string, rep any) error {
	out := c.String("out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "results.md"), []byte(md), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "results.json"), js, 0o644); err != nil {
		return err
	}
	fmt.Fprint(c.App.Writer, md)
	return nil
}
