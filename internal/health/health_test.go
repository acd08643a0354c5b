package health

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pillarkit/pillar/internal/clock"
)

func TestShapeAndCodes(t *testing.T) {
	fc := clock.NewFake(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	var cur Status
	h := New(Options{Component: "test", Version: "v9", Clock: fc}, func(context.Context) Status { return cur })
	fc.Advance(1500 * time.Millisecond)
	for _, tc := range []struct {
		st                 Status
		status             string
		healthz, readyz    int
		waiting, hasDetail bool
	}{
		{Status{}, OK, 200, 200, false, false},
		{Status{WaitingOn: []string{"routing"}}, Starting, 200, 503, true, false},
		{Status{Status: Degraded, Detail: map[string]int{"faults": 1}}, Degraded, 200, 200, false, true},
		{Status{Status: Unavailable, WaitingOn: []string{"database"}}, Unavailable, 503, 503, true, false},
		{Status{Status: Closing}, Closing, 503, 503, false, false},
	} {
		cur = tc.st
		for path, want := range map[string]int{"/healthz": tc.healthz, "/readyz": tc.readyz} {
			rec := httptest.NewRecorder()
			mux := http.NewServeMux()
			h.Register(mux)
			mux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
			if rec.Code != want {
				t.Errorf("%s %s: %d, want %d", tc.status, path, rec.Code, want)
			}
			r, err := DecodeBody(rec.Body.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != tc.status || r.Version != "v9" || r.UptimeMS != 1500 || r.Component != "test" ||
				(len(r.WaitingOn) > 0) != tc.waiting || (r.Detail != nil) != tc.hasDetail {
				t.Errorf("%s %s: %+v", tc.status, path, r)
			}
		}
	}
}

func TestVersion(t *testing.T) {
	if v := Version(); v == "" || strings.ContainsAny(v, " \n") {
		t.Fatalf("Version() = %q", v)
	}
}

// A check that outlives the timeout sees its context end.
func TestCheckTimeout(t *testing.T) {
	h := New(Options{Component: "slow", Timeout: time.Millisecond}, func(ctx context.Context) Status {
		<-ctx.Done()
		return Status{Status: Unavailable, WaitingOn: []string{"store: " + ctx.Err().Error()}}
	})
	if r := h.Report(context.Background()); r.Status != Unavailable || !strings.Contains(r.WaitingOn[0], "deadline") {
		t.Fatalf("%+v", r)
	}
}

func TestCheckBodyRefuses(t *testing.T) {
	for _, bad := range []string{`ok`, `{"status":"ok"}`, `{"component":"x","status":"fine","version":"v","uptime_ms":1,"waiting_on":[]}`,
		`{"component":"x","status":"ok","version":"v","uptime_ms":1,"waiting_on":[],"Extra":1}`} {
		if _, err := DecodeBody([]byte(bad)); err == nil {
			t.Errorf("DecodeBody(%s) passed", bad)
		}
	}
	var r Report
	b, _ := json.Marshal(New(Options{Component: "x"}, nil).Report(context.Background()))
	if err := json.Unmarshal(b, &r); err != nil || r.Status != OK {
		t.Fatal(err, string(b))
	}
}
