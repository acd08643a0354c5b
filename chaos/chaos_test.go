package chaos

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestChaos runs the whole system under the seeded fault schedule. It runs
// only when $PILLAR_CHAOS is set to the fault-phase duration (e.g. "1m", as
// `make test` sets it; `make chaos` runs 5 minutes for three seeds).
// $PILLAR_CHAOS_SEED picks the seed (default 1).
func TestChaos(t *testing.T) {
	d := os.Getenv("PILLAR_CHAOS")
	if d == "" {
		t.Skip("set PILLAR_CHAOS=1m (the fault-phase duration) to run the chaos test")
	}
	dur, err := time.ParseDuration(d)
	if err != nil {
		t.Fatalf("PILLAR_CHAOS=%q: %v", d, err)
	}
	seed := int64(1)
	if s := os.Getenv("PILLAR_CHAOS_SEED"); s != "" {
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("PILLAR_CHAOS_SEED=%q: %v", s, err)
		}
	}
	bin := filepath.Join(t.TempDir(), "pillar")
	if out, err := exec.Command("go", "build", "-o", bin, "../cli").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var out bytes.Buffer
	sum, err := Run(context.Background(), Options{Pillar: bin, Seed: seed, Duration: dur, Stdout: &out,
		ConvergeTimeout: 5 * time.Minute})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Passed() {
		t.Fatalf("seed %d: checks failed", seed)
	}
	for _, k := range AllFaults {
		if sum.Faults[k] == 0 && !strings.Contains(sum.FaultsSkipped[k], "tmpfs") {
			t.Errorf("fault kind %s was never injected", k)
		}
	}
}
