package control

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/pillarkit/pillar/internal/health"
)

// TestHealthShape: /healthz and /readyz answer the one health shape
// (internal/health): ok with the database and partitions as detail, then
// unavailable (503 on both, waiting on the database) once the database is
// gone.
func TestHealthShape(t *testing.T) {
	e := startEnv(t, "sqlite:"+filepath.Join(t.TempDir(), "c.db"), 4, nil)
	mux := http.NewServeMux()
	e.srv.HealthHandler().Register(mux)
	get := func(path string) (int, health.Report) {
		t.Helper()
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		r, err := health.DecodeBody(rec.Body.Bytes())
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return rec.Code, r
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		code, r := get(p)
		d, _ := r.Detail.(map[string]any)
		if code != 200 || r.Component != "control" || r.Status != health.OK || len(r.WaitingOn) != 0 || d["partitions"] != 4.0 || d["database"] == "" {
			t.Fatalf("%s: %d %+v", p, code, r)
		}
	}
	e.store.Close()
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, r := get(p); code != 503 || r.Status != health.Unavailable || len(r.WaitingOn) != 1 {
			t.Fatalf("%s with the database closed: %d %+v", p, code, r)
		}
	}
}
