package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/internal/progress"
	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/pillar"
)

func compactCommand() *cli.Command {
	return &cli.Command{
		Name:  "compact",
		Usage: "fold the delta layers of layered tables (docs, ...) into a new base",
		Description: `A layered table is a sorted base plus sorted delta layers (an ingest of k changed pages
writes a k-row delta of docs); a read merges them (the newest layer holding a key wins, a
delete hides the key). Compaction streams the merged rows into a new base in one
transaction that drops the deltas folded. Readers are not blocked: a snapshot opened before
keeps reading its layers, whose files stay until it is released (embedded store: its
lease; YTsaurus: its snapshot locks). A delta committed during a compaction is not lost:
the compaction starts over. Writers also compact on their own once a table has more than
` + fmt.Sprint(pillar.DefaultMaxLayers) + ` deltas (pillar.DefaultMaxLayers).

--table compacts the named tables (repeatable), --all every table that has deltas;
--max-layers N leaves tables with N deltas or fewer alone (default 0: compact any delta).
Memory stays bounded by one row group per layer, whatever the table's size. On a yt://
store the merge is a reduce on the cluster (the layers-merge job, --job-binary) inside
the compacting transaction; no row passes through this process.

Examples:
   pillar compact --store data/store --table docs
   pillar compact --store data/store --all --json
   pillar compact --store data/store --all --max-layers 4
   pillar compact --store yt://home/pillar/store --table docs`,
		Flags: append([]cli.Flag{
			storeFlag,
			&cli.StringSliceFlag{Name: "table", Usage: "a layered table to compact (repeatable)"},
			&cli.BoolFlag{Name: "all", Usage: "compact every table that has delta layers"},
			&cli.IntFlag{Name: "max-layers", Usage: "skip tables with this many deltas or fewer"},
			&cli.BoolFlag{Name: "json", Usage: "print one object per table compacted (snake_case keys)"},
		}, ytRunFlags...), // --pool, --job-binary for yt:// stores
		Action: func(c *cli.Context) error {
			tables, all := c.StringSlice("table"), c.Bool("all")
			if len(tables) == 0 && !all {
				return errors.New("compact: name a table (--table docs) or --all")
			}
			if len(tables) > 0 && all {
				return errors.New("compact: --table and --all exclude each other")
			}
			if c.Int("max-layers") < 0 {
				return fmt.Errorf("compact: --max-layers %d: want 0 or more", c.Int("max-layers"))
			}
			st, err := openStore(c, false, 0)
			if err != nil {
				return err
			}
			defer st.Close()
			if all {
				sn, err := st.Snapshot(c.Context)
				if err != nil {
					return err
				}
				tables, err = pillar.LayeredTables(c.Context, sn)
				sn.Release()
				if err != nil {
					return err
				}
			}
			var results []pillar.CompactStats
			for _, t := range tables {
				sn, err := st.Snapshot(c.Context)
				if err != nil {
					return err
				}
				ls, err := pillar.Layers(c.Context, sn, t)
				sn.Release()
				if errors.Is(err, pillar.ErrNotFound) {
					return fmt.Errorf("compact: table %q does not exist in the store %s (see pillar tables --store %s)", t, st.Info().Root, c.String("store"))
				}
				if err != nil {
					return err
				}
				if n := pillar.Deltas(ls); n == 0 || n <= c.Int("max-layers") {
					if !c.Bool("json") {
						fmt.Fprintf(c.App.Writer, "%s: %d deltas, left as it is\n", t, n)
					}
					continue
				}
				var rows int64
				for _, l := range ls {
					rows += l.Rows
				}
				bar := progress.New(rows, "compact "+t, &progress.Options{Logger: logger(), Quiet: c.Bool("json")})
				var last int64
				opts := &pillar.CompactOptions{Progress: func(done, _ int64) {
					bar.Add(done - last)
					last = done
				}}
				if r := ytRunner(c); r != nil {
					opts.Merge = jobs.CompactMerge(r) // a reduce on the cluster (cli/store_yt.go)
				}
				cs, err := pillar.Compact(c.Context, st, t, opts)
				bar.Done()
				if err != nil {
					return err
				}
				results = append(results, cs)
				if !c.Bool("json") {
					fmt.Fprintf(c.App.Writer, "%s: folded %d deltas into a new base of %d rows (%s → %s), generation %d, in %s\n",
						t, cs.Layers, cs.Rows, humanBytes(cs.BytesBefore), humanBytes(cs.BytesAfter), cs.Generation,
						(time.Duration(cs.DurationMS) * time.Millisecond).String())
				}
			}
			if c.Bool("json") {
				if results == nil {
					results = []pillar.CompactStats{}
				}
				return printJSON(c.App.Writer, map[string]any{"store": st.Info().Root, "compacted": results})
			}
			return nil
		},
	}
}
