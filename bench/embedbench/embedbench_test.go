package embedbench

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A small run embeds every chunk in both loops and reports both ratios.
func TestMeasureSmall(t *testing.T) {
	rep, err := Measure(context.Background(), Options{Dir: t.TempDir(), Pages: 60, PageBytes: 1024, Latency: 5 * time.Millisecond, Rounds: 2, Batch: 16, Concurrency: 2, Dim: 8})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Chunks < 60 || len(rep.Rounds) != 2 {
		t.Fatalf("report %+v", rep)
	}
	for i, rd := range rep.Rounds {
		if rd.Bare <= 0 || rd.Pipeline <= 0 || rd.MaxInFlight < 1 {
			t.Fatalf("round %d: %+v", i, rd)
		}
	}
	if !(rep.VsCapacity > 0) || !(rep.VsBare > 0) {
		t.Fatalf("ratios %+v", rep)
	}
	md := rep.Markdown()
	for _, want := range []string{"pillar bench embed", "pipeline ÷ model limit", "Target ≥ 0.9×"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}
