package cli

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/internal/progress"
	"github.com/pillarkit/pillar/pillar/local"
)

func verifyCommand() *cli.Command {
	return &cli.Command{
		Name:  "verify",
		Usage: "check every data file of an embedded store against the checksums in its manifest",
		Description: `Reads every data file of the store's current generation (each table's Parquet files and
the export-queue segments) and checks its size, its CRC32C against the manifest, that it
opens as Parquet and holds the rows the manifest records. Every read path checks the same
on first open, so a damaged file is refused by every command; verify finds them all at once.

Files written before the store recorded checksums are listed as "no checksum" (size and
Parquet footer are checked); the next commit to the store records their checksums.
Exits non-zero when any file fails, naming the table and file. YTsaurus stores are not
checked here: the cluster keeps its own chunk checksums.

Examples:
   pillar verify --store data/store
   pillar verify --store data/store --json | jq '.problems'`,
		Flags: []cli.Flag{
			storeFlag,
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
		},
		Action: func(c *cli.Context) error {
			ls, err := openLocalStore(c, "verify", "YTsaurus keeps its own chunk checksums")
			if err != nil {
				return err
			}
			defer ls.Close()
			_, total, err := ls.VerifyTotal()
			if err != nil {
				return err
			}
			bar := progress.New(total, "verify", &progress.Options{Bytes: true, Logger: logger()})
			rep, err := ls.Verify(c.Context, &local.VerifyOptions{Progress: bar.Add})
			bar.Done()
			if err != nil {
				return err
			}
			out := c.App.Writer
			if c.Bool("json") {
				if err := printJSON(out, rep); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(out, "verified %d files (%.1f MB) of generation %d: %d failed, %d without a checksum\n",
					rep.Files, float64(rep.Bytes)/1e6, rep.Generation, len(rep.Problems), len(rep.NoChecksum))
				for _, p := range rep.Problems {
					fmt.Fprintf(out, "  FAILED table %q file %s: %s\n", p.Table, p.File, p.Error)
				}
				for _, f := range rep.NoChecksum {
					fmt.Fprintf(out, "  no checksum: table %q file %s (the next commit records it)\n", f.Table, f.File)
				}
			}
			if !rep.OK() {
				return fmt.Errorf("verify: %d of %d files failed (first: table %q file %s)", len(rep.Problems), rep.Files, rep.Problems[0].Table, rep.Problems[0].File)
			}
			return nil
		},
	}
}

// openLocalStore opens --store for a command that only embedded stores
// have; why says what YTsaurus does instead.
func openLocalStore(c *cli.Context, cmd, why string) (*local.Store, error) {
	st, err := openStore(c, false, 0)
	if err != nil {
		return nil, err
	}
	ls, ok := st.(*local.Store)
	if !ok {
		st.Close()
		return nil, fmt.Errorf("%s: --store %s is a %s store; %s is for embedded stores (%s)", cmd, c.String("store"), st.Info().Backend, cmd, why)
	}
	return ls, nil
}
