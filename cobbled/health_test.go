package cobbled

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/pillarkit/pillar/internal/health"
)

// TestHealthStarting: a node holding a replica that has no data yet is
// alive but not ready: starting, waiting on the partition's first batch.
func TestHealthStarting(t *testing.T) {
	n := openTestNode(t, t.TempDir(), t.TempDir(), 4, nil)
	defer n.Close()
	p, err := n.addPartition(3)
	if err != nil {
		t.Fatal(err)
	}
	p.newest.Store(2) // the control plane has batches 1 and 2; none applied
	mux := http.NewServeMux()
	n.HealthHandler().Register(mux)
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 503} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		r, err := health.DecodeBody(rec.Body.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if rec.Code != want || r.Status != health.Starting || len(r.WaitingOn) != 1 || r.WaitingOn[0] != "partition 3: first batch (seq 2 registered)" {
			t.Fatalf("%s: %d %s", path, rec.Code, rec.Body)
		}
	}
}
