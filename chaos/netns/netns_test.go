package netns

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// need skips unless $PILLAR_NETNS is set (make test-netns sets it), and
// fails instead of skipping where namespaces are unavailable under
// $PILLAR_REQUIRE_NETNS=1 (as .ci/run sets it).
func need(t *testing.T) {
	t.Helper()
	if os.Getenv("PILLAR_NETNS") == "" {
		t.Skip("set PILLAR_NETNS=1 (make test-netns) to run the cluster across network namespaces")
	}
	if why := Available(); why != "" {
		if os.Getenv("PILLAR_REQUIRE_NETNS") == "1" {
			t.Fatalf("PILLAR_REQUIRE_NETNS=1 but %s", why)
		}
		t.Skip(why)
	}
}

func buildPillar(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pillar")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/pillar").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestNetnsScenarios runs the short version of every scenario on one
// cluster of network namespaces and requires every check to hold.
func TestNetnsScenarios(t *testing.T) {
	need(t)
	var out bytes.Buffer
	sum, err := Run(context.Background(), Options{Pillar: buildPillar(t), Seed: 1, Stdout: &out, NetID: 201})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Scenarios) != len(Scenarios) {
		t.Fatalf("%d scenarios ran, want %d", len(sum.Scenarios), len(Scenarios))
	}
	if sum.ChecksumsCompared == 0 || sum.Batches == 0 {
		t.Fatalf("checks exercised nothing: %d checksums compared, %d batches", sum.ChecksumsCompared, sum.Batches)
	}
}

// TestNetnsCatchesLostRange shows check 3 is not vacuous: a replica that
// lost a key range after catching up must fail the run, naming the
// partition and the key range; the other checks hold.
func TestNetnsCatchesLostRange(t *testing.T) {
	need(t)
	var out bytes.Buffer
	sum, err := Run(context.Background(), Options{Pillar: buildPillar(t), Seed: 2, Stdout: &out, NetID: 202,
		Scenarios: []string{ScenarioZoneCut}, Sabotage: SabotageLoseRange, Dir: t.TempDir()})
	t.Log("\n" + out.String())
	if err == nil || sum == nil || sum.Passed() {
		t.Fatalf("a run with a replica missing a key range passed (err %v)", err)
	}
	if sum.Error != "" || sum.Sabotaged == "" {
		t.Fatalf("the run did not get as far as its checks: %s", sum.Error)
	}
	c := sum.Check(CheckIdentical)
	if c.OK {
		t.Fatalf("check 3 held: %+v", c)
	}
	got := strings.Join(c.Examples, "\n")
	// "deleted keys [first, last] of partition 0": the check must name both.
	i := strings.Index(sum.Sabotaged, "key range [")
	if i < 0 || !strings.Contains(got, "partition 0 ") || !strings.Contains(got, "5 keys differ, "+sum.Sabotaged[i:]) {
		t.Fatalf("check 3 does not name partition 0 and %q:\n%s", sum.Sabotaged, got)
	}
	for _, name := range []string{CheckPublished, CheckOneVersion, CheckOnce, CheckScenario} {
		if x := sum.Check(name); !x.OK {
			t.Errorf("check %s failed: %v", name, x.Examples)
		}
	}
}

// TestNetnsOne runs the scenarios named in $PILLAR_NETNS_SCENARIOS (comma
// separated), for working on one.
func TestNetnsOne(t *testing.T) {
	need(t)
	names := os.Getenv("PILLAR_NETNS_SCENARIOS")
	if names == "" {
		t.Skip("set PILLAR_NETNS_SCENARIOS=zone-cut,... to run some scenarios")
	}
	var out bytes.Buffer
	_, err := Run(context.Background(), Options{Pillar: buildPillar(t), Seed: 3, Stdout: &out, NetID: 203, Scenarios: strings.Split(names, ",")})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
}
