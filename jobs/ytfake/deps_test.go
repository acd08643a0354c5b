package ytfake

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNotLinkedIntoBinaries: the FAKE cluster is for tests; neither the
// pillar command nor the job binary may link it.
func TestNotLinkedIntoBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "github.com/pillarkit/pillar/cmd/pillar", "github.com/pillarkit/pillar/jobs/cmd/pillar-job").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "github.com/pillarkit/pillar/jobs/ytfake" {
			t.Fatal("a binary links jobs/ytfake, the FAKE cluster")
		}
	}
}
