package cli

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/jobs"
)

func runPillar(t *testing.T, args ...string) error {
	t.Helper()
	app := newApp()
	var out, errb bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errb
	app.Before = nil
	return app.Run(append([]string{"pillar"}, args...))
}

// Without a cluster: a yt:// store says what it needs; the flags exist.
func TestYTStoreFlags(t *testing.T) {
	t.Setenv("YT_PROXY", "")
	err := runPillar(t, "backfill", "rechunk", "--store", "yt://pillar/prod", "--chunker", "recursive:size=512,overlap=64", "--pool", "research")
	if err == nil || !strings.Contains(err.Error(), "YT_PROXY") || !strings.Contains(err.Error(), "docs/ytsaurus.md") {
		t.Fatalf("yt:// store without YT_PROXY: %v", err)
	}
	t.Setenv("PILLAR_STORE", "yt://")
	if err := runPillar(t, "tables"); err == nil || !strings.Contains(err.Error(), "names no Cypress directory") {
		t.Fatalf("yt:// without a path: %v", err)
	}
}

func TestJobBinary(t *testing.T) {
	ctx := func(args ...string) *cli.Context {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		for _, f := range ytRunFlags {
			if err := f.Apply(fs); err != nil {
				t.Fatal(err)
			}
		}
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return cli.NewContext(&cli.App{}, fs, nil)
	}
	if b, err := jobBinary(ctx("--job-binary", "/x/pillar-job")); err != nil || b != "/x/pillar-job" {
		t.Fatalf("--job-binary: %q %v", b, err)
	}
	exe, _ := os.Executable()
	want := filepath.Join(filepath.Dir(exe), "pillar-job")
	_, err := jobBinary(ctx())
	if _, serr := os.Stat(want); serr != nil && (err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "CGO_ENABLED=0")) {
		t.Fatalf("missing default job binary: %v", err)
	}
	// No YTsaurus store opened: the drivers keep their local runner.
	if r := ytRunner(ctx()); r != nil {
		t.Fatalf("runner without a yt store: %T", r)
	}
	var _ jobs.Runner = errRunner{}
	if err := (errRunner{err: context.Canceled}).Sort(context.Background(), &jobs.Op{}); err != context.Canceled {
		t.Fatalf("errRunner: %v", err)
	}
}
