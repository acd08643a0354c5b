package cli

// The YTsaurus store and runner: --store yt://<cypress path> (or
// PILLAR_STORE=yt://…) opens pillar/ytstore on the cluster at YT_PROXY with
// the token in YT_TOKEN (or the file YT_TOKEN_FILE); the drivers then run
// their jobs as YTsaurus operations (jobs.YT) inside the store's
// transactions, with the job binary bin/pillar-job (see docs/ytsaurus.md).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"
	"go.ytsaurus.tech/yt/go/mapreduce"
	"go.ytsaurus.tech/yt/go/ypath"
	"go.ytsaurus.tech/yt/go/yt"
	"go.ytsaurus.tech/yt/go/yt/ythttp"

	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/ytstore"
)

// ytStoreKey is where openStore leaves an opened YTsaurus store in
// App.Metadata, for pipelineOptions to build the YTsaurus runner over it.
const ytStoreKey = "pillar.ytstore"

// ytRunFlags are added to runFlags: they matter only with a YTsaurus store.
var ytRunFlags = []cli.Flag{
	&cli.StringFlag{Name: "pool", EnvVars: []string{"PILLAR_YT_POOL"},
		Usage: "YTsaurus scheduler pool of the operations (yt:// stores; default: the user's default pool)"},
	&cli.StringFlag{Name: "job-binary", EnvVars: []string{"PILLAR_JOB_BINARY"},
		Usage: "job binary uploaded for YTsaurus operations, built with CGO_ENABLED=0 (yt:// stores; default: pillar-job beside this executable)"},
}

func init() { runFlags = append(runFlags, ytRunFlags...) }

// newYTClient returns the client of the cluster at proxy ("": YT_PROXY),
// with the token in YT_TOKEN, else YT_TOKEN_FILE or ~/.yt/token: the one
// YTsaurus client of the CLI (yt:// stores and `pillar jobs --yt-proxy`).
// Tests replace it with the FAKE cluster (jobs/ytfake).
var newYTClient = func(proxy string) (yt.Client, error) {
	return ythttp.NewClient(&yt.Config{Proxy: proxy, ReadTokenFromFile: true})
}

// openYTStore opens (with create: creates when missing) the store at a
// yt:// location.
func openYTStore(c *cli.Context, loc string, create bool, partitions int) (pillar.Store, error) {
	root, err := ytstore.RootFromURL(loc)
	if err != nil {
		return nil, fmt.Errorf("--store %s: %w", loc, err)
	}
	if os.Getenv("YT_PROXY") == "" {
		return nil, fmt.Errorf("--store %s: set YT_PROXY to the cluster's proxy (and YT_TOKEN or YT_TOKEN_FILE to your token); see docs/ytsaurus.md", loc)
	}
	yc, err := newYTClient("")
	if err != nil {
		return nil, fmt.Errorf("--store %s: YTsaurus client for %s: %w", loc, os.Getenv("YT_PROXY"), err)
	}
	ctx := c.Context
	if ctx == nil {
		ctx = context.Background()
	}
	opts := &ytstore.Options{Logger: logger(), Pool: c.String("pool")}
	st, err := ytstore.Open(ctx, yc, root, opts)
	if create && (errors.Is(err, pillar.ErrNotFound) || errors.Is(err, pillar.ErrNotStore) && emptyMapNode(ctx, yc, root)) {
		opts.Partitions = partitions
		st, err = ytstore.Create(ctx, yc, root, opts)
	}
	if err != nil {
		return nil, err
	}
	if create && partitions != 0 && c.IsSet("partitions") && st.Info().Partitions != partitions {
		return nil, fmt.Errorf("--store %s has %d partitions, --partitions says %d: %w", loc, st.Info().Partitions, partitions, pillar.ErrPartitions)
	}
	if c.App != nil {
		if c.App.Metadata == nil {
			c.App.Metadata = map[string]any{}
		}
		c.App.Metadata[ytStoreKey] = st
	}
	return st, nil
}

func emptyMapNode(ctx context.Context, yc yt.Client, root ypath.Path) bool {
	var kids []string
	err := yc.ListNode(ctx, root, &kids, nil)
	return err == nil && len(kids) == 0
}

// ytRunner returns the YTsaurus runner when --store opened a YTsaurus
// store, else nil (the drivers' default, the local runner). A runner that
// cannot be built (no job binary) reports why at its first operation.
func ytRunner(c *cli.Context) jobs.Runner {
	if c.App == nil {
		return nil
	}
	st, ok := c.App.Metadata[ytStoreKey].(*ytstore.Store)
	if !ok {
		return nil
	}
	bin, err := jobBinary(c)
	if err != nil {
		return errRunner{err}
	}
	r, err := jobs.NewYT(st.Client(), &jobs.YTOptions{Root: st.Root(), JobBinary: bin, Pool: c.String("pool"), Logger: logger()})
	if err != nil {
		return errRunner{err}
	}
	return r
}

// jobBinary is --job-binary, or pillar-job in the running executable's
// directory (bin/pillar → bin/pillar-job, as `make` builds them).
func jobBinary(c *cli.Context) (string, error) {
	if b := c.String("job-binary"); b != "" {
		return b, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("yt runner: --job-binary not given and the running executable is unknown: %w", err)
	}
	bin := filepath.Join(filepath.Dir(exe), "pillar-job")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("yt runner: no job binary at %s: build it with `CGO_ENABLED=0 go build -o %s ./jobs/cmd/pillar-job` or pass --job-binary", bin, bin)
	}
	return bin, nil
}

// errRunner fails every operation with the reason the YTsaurus runner could
// not be built.
type errRunner struct{ err error }

func (r errRunner) Map(context.Context, mapreduce.Job, *jobs.Op) error { return r.err }
func (r errRunner) Reduce(context.Context, mapreduce.Job, *jobs.Op) error {
	return r.err
}
func (r errRunner) MapReduce(context.Context, mapreduce.Job, mapreduce.Job, *jobs.Op) error {
	return r.err
}
func (r errRunner) Sort(context.Context, *jobs.Op) error { return r.err }
