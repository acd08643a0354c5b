package cli

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/pillar/local"
)

func leasesCommand() *cli.Command {
	return &cli.Command{
		Name:  "leases",
		Usage: "list the live snapshot leases of an embedded store (the readers that keep old files)",
		Description: `Every snapshot of an embedded store holds a lease on its generation until it is released
or its process ends; cleanup and compaction never remove a file of a leased generation. This
lists the live leases of every process with their age, so an operator can see what keeps
disk in use (a long export, or a leaked snapshot in a server). Leases of processes that are
gone are not listed; the next commit's or open's cleanup removes them.

Examples:
   pillar leases --store data/store
   pillar leases --store data/store --json`,
		Flags: []cli.Flag{
			storeFlag,
			&cli.BoolFlag{Name: "json", Usage: "print the leases as JSON"},
		},
		Action: func(c *cli.Context) error {
			ls, err := openLocalStore(c, "leases", "on YTsaurus a snapshot is a master transaction: see its locks in Cypress")
			if err != nil {
				return err
			}
			defer ls.Close()
			leases, err := ls.Leases()
			if err != nil {
				return err
			}
			out := c.App.Writer
			if c.Bool("json") {
				if leases == nil {
					leases = []local.LeaseInfo{}
				}
				return printJSON(out, leases)
			}
			fmt.Fprintf(out, "%d live leases; current generation %d\n", len(leases), ls.Info().Generation)
			if len(leases) == 0 {
				return nil
			}
			tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "GENERATION\tPID\tHOST\tAGE")
			for _, l := range leases {
				fmt.Fprintf(tw, "%d\t%d\t%s\t%s\n", l.Generation, l.PID, l.Host, time.Since(l.Taken).Round(time.Second))
			}
			return tw.Flush()
		},
	}
}
