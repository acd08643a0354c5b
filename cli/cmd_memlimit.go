package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

// memoryLimitFlag is the --memory-limit of every corpus-wide command
// (ingest, backfills, subsets recompute, publish, rollback, export): the
// bytes its sorts and spill buffers may hold before spilling to disk, and
// the memory of one job on YTsaurus.
// A bad size fails the command before it starts.
var memoryLimitFlag = &cli.StringFlag{Name: "memory-limit",
	Usage: "memory for sorts and buffers before spilling, e.g. 64MiB, 2GiB, or bytes (default: 512MiB for operations, 64MiB for ingest's page spill)",
	Action: func(c *cli.Context, v string) error {
		_, err := memoryLimit(c)
		return err
	}}

// memoryLimit parses --memory-limit; 0 when unset (the default applies).
// The flag's Action has already refused a bad value.
func memoryLimit(c *cli.Context) (int64, error) {
	if !c.IsSet("memory-limit") || c.String("memory-limit") == "" {
		return 0, nil
	}
	n, err := parseBytes(c.String("memory-limit"))
	if err != nil {
		return 0, fmt.Errorf("--memory-limit: %w", err)
	}
	return n, nil
}
