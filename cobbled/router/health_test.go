package router

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/internal/health"
)

// TestHealthShape: the router's /healthz and /readyz answer the one health
// shape (internal/health); a partition without an eligible replica makes it
// degraded (it is named in waiting_on), no eligible replica at all makes it
// starting (not ready).
func TestHealthShape(t *testing.T) {
	var mu sync.Mutex
	states := []string{control.StateUp, control.StateUp}
	version := int64(1)
	src := &routingSource{fetches: make(chan struct{}, 16), get: func() (*control.Routing, error) {
		mu.Lock()
		defer mu.Unlock()
		rt := &control.Routing{Version: version, Partitions: 2, NewestSeq: []int64{1, 1}, NewestAt: make([]time.Time, 2)}
		for _, s := range states {
			rt.Replicas = append(rt.Replicas, []control.Replica{{NodeID: "n0", Addr: "127.0.0.1:1", Zone: "a", State: s, AppliedSeq: 1}})
		}
		return rt, nil
	}}
	r := newRouter(t, src, func(o *Options) { o.RefreshInterval = time.Hour })
	mux := http.NewServeMux()
	r.HealthHandler().Register(mux)
	check := func(status string, ready int, waiting ...string) {
		t.Helper()
		for path, want := range map[string]int{"/healthz": 200, "/readyz": ready} {
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
			rep, err := health.DecodeBody(rec.Body.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			d, _ := rep.Detail.(map[string]any)
			if rec.Code != want || rep.Component != "router" || rep.Status != status || len(rep.WaitingOn) != len(waiting) || d["partitions"] != 2.0 {
				t.Fatalf("%s: %d %s, want %d %s %q", path, rec.Code, rec.Body, want, status, waiting)
			}
			for i := range waiting {
				if rep.WaitingOn[i] != waiting[i] {
					t.Fatalf("%s: waiting_on %q, want %q", path, rep.WaitingOn, waiting)
				}
			}
		}
	}
	check(health.OK, 200)
	refresh := func(s0, s1 string) {
		mu.Lock()
		states[0], states[1] = s0, s1
		version++
		mu.Unlock()
		if err := r.Refresh(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	refresh(control.StateUp, control.StateDown)
	check(health.Degraded, 200, "partition 1: no eligible replica")
	refresh(control.StateDown, control.StateDown)
	check(health.Starting, 503, "partition 0: no eligible replica", "partition 1: no eligible replica")
}
