package demo

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReducedDemo runs the whole demo end to end on 60 synthetic pages and 8
// partitions: three real cobbled child processes, a control plane, Lorry,
// and every check the full demo makes.
func TestReducedDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the pillar binary and runs child processes")
	}
	bin := filepath.Join(t.TempDir(), "pillar")
	build := exec.Command("go", "build", "-o", bin, "../../cli")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out := t.TempDir()
	var narrative bytes.Buffer
	rep, err := Run(context.Background(), Options{
		Pillar: bin, Out: out, Synthetic: 60, Partitions: 8,
		Policies: "../../testdata/policies.yaml", Stdout: &narrative,
	})
	t.Log(narrative.String())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Pages != 60 || rep.Exported == 0 || rep.FailedDuring != 0 || rep.Incremental.ChangedPages != 5 || rep.Incremental.Puts != 5 {
		t.Fatalf("report %+v", rep)
	}
	md, err := os.ReadFile(filepath.Join(out, "demo-report.md"))
	if err != nil || !strings.Contains(string(md), "Failed reads during the re-publish: **0**") {
		t.Fatalf("report file: %v\n%s", err, md)
	}
	for _, png := range []string{"read-latency.png", "replica-lag.png", "stage-timings.png"} {
		if fi, err := os.Stat(filepath.Join(out, png)); err != nil || fi.Size() < 1000 {
			t.Fatalf("plot %s: %v", png, err)
		}
	}
}
