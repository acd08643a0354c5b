package cli

import (
	"os"
	"runtime/debug"

	"github.com/pillarkit/pillar/internal/bytesize"

	"github.com/urfave/cli/v2"
)

// memoryLimitFlag is the --memory-limit of every corpus-wide command
// (ingest, backfills, subsets recompute, publish, rollback, export): the
// bytes its sorts and spill buffers may hold before spilling to disk, and
// the memory of one job on YTsaurus.
// A bad size fails the command before it starts.
var memoryLimitFlag = &cli.StringFlag{Name: "memory-limit",
	Usage: "memory for sorts and buffers before spilling, e.g. 64MiB, 2GiB, or bytes (default: 512MiB for operations, 256MiB for ingest; the sorts buffer an eighth of it, ingest's a quarter)",
	Action: func(c *cli.Context, v string) error {
		n, err := memoryLimit(c)
		if err == nil && n > 0 {
			setRuntimeLimit(n)
		}
		return err
	}}

// setRuntimeLimit gives the Go runtime a soft memory limit that follows
// --memory-limit: the sorts hold up to the limit, the writers, readers and
// job batches about as much again at most, plus a fixed allowance for the
// runtime and cgo. Without it the collector lets the heap grow to twice the
// live data (GOGC=100) before it runs, so a process bounded at 64 MiB of
// sort buffers would still reach ~300 MB. GOMEMLIMIT (and GOGC) in the
// environment win.
func setRuntimeLimit(n int64) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	debug.SetMemoryLimit(2*n + 64<<20)
	if os.Getenv("GOGC") == "" {
		// Collect when the heap has grown by half its live data, not by
		// all of it: with the sort buffers bounded by the limit, what the
		// process holds then follows what it uses (peak RSS flat in the
		// corpus size, `pillar bench scale`), for some more GC work.
		debug.SetGCPercent(50)
	}
}

// memoryLimit parses --memory-limit; 0 when unset (the default applies).
// The flag's Action has already refused a bad value.
func memoryLimit(c *cli.Context) (int64, error) {
	if !c.IsSet("memory-limit") || c.String("memory-limit") == "" {
		return 0, nil
	}
	return bytesize.ParseFlag("memory-limit", c.String("memory-limit"))
}
