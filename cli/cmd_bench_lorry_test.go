package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchLorryCLI: `pillar bench lorry` at a tiny size writes its report,
// JSON and plot, with the targets table.
func TestBenchLorryCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	out := t.TempDir()
	stdout := runLorryCLI(t, context.Background(), "bench", "lorry", "--out", out, "--data", t.TempDir(),
		"--records", "80", "--value-size", "2048", "--fresh-rate", "40", "--partitions", "2", "--allow-missed")
	if !strings.Contains(stdout, "| loss counter | 0 | 0 | met |") || !strings.Contains(stdout, "bulk + fresh: records applied on all 3 replicas") ||
		!strings.Contains(stdout, "| riding batches demoted |") {
		t.Fatalf("report:\n%s", stdout)
	}
	for _, f := range []string{"results.md", "results.json", "latency.png"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", f, err)
		}
	}
}
