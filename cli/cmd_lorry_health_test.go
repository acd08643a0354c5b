package cli

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/pillarkit/pillar/internal/health"
	"github.com/pillarkit/pillar/lorry"
)

// TestLorryHealthz: lorry run's /healthz and /readyz answer the one health
// shape; before its worker exists it is starting (alive, not ready). The
// worker's own check (store readable or not) is tested in package lorry.
func TestLorryHealthz(t *testing.T) {
	var w atomic.Pointer[lorry.Worker]
	mux := http.NewServeMux()
	health.New(health.Options{Component: "lorry"}, lorryHealth(&w)).Register(mux)
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 503} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		r, err := health.DecodeBody(rec.Body.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if rec.Code != want || r.Component != "lorry" || r.Status != health.Starting || len(r.WaitingOn) != 1 {
			t.Fatalf("%s: %d %s", path, rec.Code, rec.Body)
		}
	}
}
