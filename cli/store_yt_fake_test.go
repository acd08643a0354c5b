package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.ytsaurus.tech/yt/go/yt"

	"github.com/pillarkit/pillar/jobs/chunker"
	"github.com/pillarkit/pillar/jobs/ytfake"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/ytstore"
)

// fakeYTForCLI builds the job binary and points the CLI's YTsaurus client
// at a FAKE cluster (jobs/ytfake) for the test; it returns the cluster and
// the binary's path (for --job-binary).
func fakeYTForCLI(t *testing.T) (*ytfake.Cluster, string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pillar-job")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/pillarkit/pillar/jobs/cmd/pillar-job")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build pillar-job: %v\n%s", err, out)
	}
	fake := ytfake.New(&ytfake.Options{SandboxDir: t.TempDir()})
	t.Cleanup(func() { fake.Close() })
	old := newYTClient
	newYTClient = func(string) (yt.Client, error) { return fake, nil }
	t.Cleanup(func() { newYTClient = old })
	t.Setenv("YT_PROXY", "fake.invalid")
	return fake, bin
}

// TestYTStoreOnFakeCluster runs the README's commands with --store yt://…
// against the FAKE cluster (jobs/ytfake) in place of YT_PROXY's: ingest,
// backfill rechunk and embed (operations of the job binary), subsets
// recompute, publish, export, a second pair, rollback.
func TestYTStoreOnFakeCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the job binary")
	}
	fake, bin := fakeYTForCLI(t)
	// Flags, not PILLAR_STORE / PILLAR_JOB_BINARY: urfave/cli stores an
	// environment value in the (package-level) flag itself, where it would
	// outlive this test.
	store := []string{"--store", "yt://home/pillar/cli"}
	jobsArgs := append(store, "--job-binary", bin)

	pages := t.TempDir()
	for i := 0; i < 20; i++ {
		html := fmt.Sprintf("<html><head><title>Page %d</title></head><body><p>%s</p></body></html>", i, strings.Repeat(fmt.Sprintf("Page %d is about topic %d. ", i, i%3), 12))
		if err := os.WriteFile(filepath.Join(pages, fmt.Sprintf("p%02d.html", i)), []byte(html), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pol := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(pol, []byte("policies:\n  - name: all\n    exported: true\n    where: text_len > 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		out, _, err := runSubsets(t, args...)
		if err != nil {
			t.Fatalf("pillar %s: %v", strings.Join(args, " "), err)
		}
		return out
	}
	version := func(spec string) string {
		t.Helper()
		ch, err := chunker.Parse(spec)
		if err != nil {
			t.Fatal(err)
		}
		return ch.ID()
	}
	run(append([]string{"ingest"}, append(store, "--from", pages, "--base-url", "https://ex.org/", "--partitions", "4")...)...)
	cv := version("tokens:size=40,overlap=8")
	run(append([]string{"backfill", "rechunk", "--chunker", "tokens:size=40,overlap=8"}, jobsArgs...)...)
	run(append([]string{"backfill", "embed", "--chunks", cv, "--model", "hash:dim=8"}, jobsArgs...)...)
	run(append([]string{"subsets", "recompute", "--policies", pol, "--as-of", "2026-11-30T00:00:00Z"}, jobsArgs...)...)
	run(append([]string{"publish", "--chunks", cv, "--model", "hash:dim=8"}, jobsArgs...)...)
	exp := filepath.Join(t.TempDir(), "exp1")
	run(append([]string{"export", "--out", exp}, jobsArgs...)...)
	if _, err := os.Stat(filepath.Join(exp, "export.json")); err != nil {
		t.Fatalf("export on yt://: %v", err)
	}
	cv2 := version("tokens:size=64,overlap=4")
	run(append([]string{"backfill", "rechunk", "--chunker", "tokens:size=64,overlap=4"}, jobsArgs...)...)
	run(append([]string{"backfill", "embed", "--chunks", cv2, "--model", "hash:dim=8"}, jobsArgs...)...)
	run(append([]string{"publish", "--chunks", cv2, "--model", "hash:dim=8"}, jobsArgs...)...)
	run(append([]string{"rollback"}, jobsArgs...)...)
	st, err := ytstore.Open(context.Background(), fake, "//home/pillar/cli", nil)
	if err != nil {
		t.Fatal(err)
	}
	sn, err := st.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	pub, err := pillar.LoadPublished(context.Background(), sn)
	if err != nil || pub.ChunkVersion != cv {
		t.Fatalf("published after rollback: %+v %v; want %s", pub, err, cv)
	}
	var ops int
	for _, s := range fake.Specs() {
		if s.Type == yt.OperationMap || s.Type == yt.OperationReduce {
			ops++
		}
	}
	if ops < 6 || len(fake.Jobs()) == 0 {
		t.Fatalf("%d map/reduce operations and %d jobs on the fake: the commands did not run as operations", ops, len(fake.Jobs()))
	}
}
