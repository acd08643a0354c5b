package lorry

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pillarkit/pillar/internal/health"
	"github.com/pillarkit/pillar/pillar"
)

// unreadableStore is a FAKE store whose snapshots fail.
type unreadableStore struct{ pillar.Store }

func (unreadableStore) Snapshot(context.Context) (pillar.Snapshot, error) {
	return nil, errors.New("disk gone")
}

// TestHealthShape: a worker's /healthz and /readyz answer the one health
// shape (internal/health): ok while the store is readable, unavailable
// (503 on both, waiting on the store) once it is not.
func TestHealthShape(t *testing.T) {
	e := newEnv(t, 2)
	get := func(w *Worker, path string) (int, health.Report) {
		t.Helper()
		mux := http.NewServeMux()
		health.New(health.Options{Component: "lorry"}, w.Health).Register(mux)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		r, err := health.DecodeBody(rec.Body.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		return rec.Code, r
	}
	w := e.worker(e.opts("w1"))
	o := e.opts("w2")
	o.Store = unreadableStore{e.store}
	broken := e.worker(o)
	for _, p := range []string{"/healthz", "/readyz"} {
		code, r := get(w, p)
		d, _ := r.Detail.(map[string]any)
		if code != 200 || r.Status != health.OK || d["id"] != "w1" || d["held_partitions"] == nil {
			t.Fatalf("%s: %d %+v", p, code, r)
		}
		if code, r := get(broken, p); code != 503 || r.Status != health.Unavailable || len(r.WaitingOn) != 1 || r.WaitingOn[0] != "store: disk gone" {
			t.Fatalf("%s, store unreadable: %d %+v", p, code, r)
		}
	}
}

// The queue-depth and oldest-undelivered gauges are among the collectors.
func TestBacklogGaugesRegistered(t *testing.T) {
	ch := make(chan *prometheus.Desc, 64)
	for _, c := range NewMetrics().Collectors() {
		c.Describe(ch)
	}
	close(ch)
	seen := map[string]bool{}
	for d := range ch {
		for _, name := range []string{"lorry_backlog_records", "lorry_oldest_undelivered_seconds"} {
			if strings.Contains(d.String(), `"`+name+`"`) {
				seen[name] = true
			}
		}
	}
	if !seen["lorry_backlog_records"] || !seen["lorry_oldest_undelivered_seconds"] {
		t.Fatalf("gauges registered: %v", seen)
	}
}
