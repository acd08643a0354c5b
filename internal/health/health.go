// Package health is the one /healthz and /readyz of every Pillar server
// (control serve, cobbled serve, router serve, lorry run): the same JSON
// body and the same status codes everywhere, so one probe configuration and
// one dashboard query fit them all.
//
// The body (Report):
//
//	{"component": "cobbled", "status": "ok", "version": "v1.2.0",
//	 "uptime_ms": 81234, "waiting_on": [], "detail": {...}}
//
// status is one of OK, Degraded, Starting, Unavailable and Closing;
// waiting_on names what the server waits for before it is ready (or what is
// down), [] when nothing; detail is the component's own small summary.
//
// Status codes: /healthz (liveness) answers 200 unless the status is
// Unavailable or Closing (503); /readyz (readiness: send traffic?) answers
// 200 only for OK and Degraded, 503 otherwise. A Check runs per request,
// under Options.Timeout; it must be cheap (no corpus-sized reads) and may be
// called concurrently.
package health

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/pillarkit/pillar/internal/clock"
)

// Statuses.
const (
	// OK: serving, nothing wrong.
	OK = "ok"
	// Degraded: serving, but something is wrong (named in WaitingOn or the
	// detail): a refused corrupt batch, an ejected node.
	Degraded = "degraded"
	// Starting: alive, not serving yet; WaitingOn says what for.
	Starting = "starting"
	// Unavailable: alive, cannot serve: a dependency is down (WaitingOn).
	Unavailable = "unavailable"
	// Closing: shutting down.
	Closing = "closing"
)

// Status is what a component's Check reports.
type Status struct {
	// Status is one of the statuses above. The default value is OK when
	// WaitingOn is empty and Starting otherwise.
	Status string
	// WaitingOn names what the server waits for or misses, one short phrase
	// each ("routing from the control plane", "partition 3: first snapshot").
	WaitingOn []string
	// Detail is the component's summary, encoded as JSON under "detail"
	// (nil: no detail). Keep it small and snake_case.
	Detail any
}

// Check reports a component's health.
type Check func(ctx context.Context) Status

// Report is the JSON body of /healthz and /readyz.
type Report struct {
	Component string   `json:"component"`
	Status    string   `json:"status"`
	Version   string   `json:"version"`
	UptimeMS  int64    `json:"uptime_ms"`
	WaitingOn []string `json:"waiting_on"`
	Detail    any      `json:"detail,omitempty"`
}

// Ready reports whether the status means "send traffic".
func (r Report) Ready() bool { return r.Status == OK || r.Status == Degraded }

// Live reports whether the status means "the process is fine" (a liveness
// probe should not restart it).
func (r Report) Live() bool { return r.Status != Unavailable && r.Status != Closing }

// Options configure a Handler.
type Options struct {
	// Component names the server: "control", "cobbled", "router", "lorry".
	Component string
	// Version is reported as is. The default value is Version().
	Version string
	// Clock measures the uptime and times out checks. The default value is
	// clock.Real.
	Clock clock.Clock
	// Timeout bounds one Check. The default value is 5 seconds.
	Timeout time.Duration
}

// Handler serves /healthz and /readyz for one server.
type Handler struct {
	o     Options
	check Check
	start time.Time
}

// New returns the handler of a server whose health check is check (nil:
// always OK). The uptime counts from here.
func New(opts Options, check Check) *Handler {
	if opts.Version == "" {
		opts.Version = Version()
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if check == nil {
		check = func(context.Context) Status { return Status{} }
	}
	return &Handler{o: opts, check: check, start: opts.Clock.Now()}
}

// Report runs the check once.
func (h *Handler) Report(ctx context.Context) Report {
	ctx, cancel := h.o.Clock.WithTimeout(ctx, h.o.Timeout)
	defer cancel()
	s := h.check(ctx)
	if s.Status == "" {
		s.Status = OK
		if len(s.WaitingOn) > 0 {
			s.Status = Starting
		}
	}
	r := Report{Component: h.o.Component, Status: s.Status, Version: h.o.Version,
		UptimeMS: h.o.Clock.Now().Sub(h.start).Milliseconds(), WaitingOn: s.WaitingOn, Detail: s.Detail}
	if r.WaitingOn == nil {
		r.WaitingOn = []string{}
	}
	return r
}

// Healthz serves liveness: 200 unless Unavailable or Closing.
func (h *Handler) Healthz() http.Handler {
	return h.serve(Report.Live)
}

// Readyz serves readiness: 200 only for OK and Degraded.
func (h *Handler) Readyz() http.Handler {
	return h.serve(Report.Ready)
}

// ServeHTTP serves /readyz for a path ending in /readyz and /healthz for
// any other, so a Handler can be mounted where one http.Handler is wanted.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.URL.Path, "/readyz") {
		h.Readyz().ServeHTTP(w, r)
		return
	}
	h.Healthz().ServeHTTP(w, r)
}

// Register mounts /healthz and /readyz on mux.
func (h *Handler) Register(mux *http.ServeMux) {
	mux.Handle("/healthz", h.Healthz())
	mux.Handle("/readyz", h.Readyz())
}

func (h *Handler) serve(pass func(Report) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rep := h.Report(r.Context())
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if !pass(rep) {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	})
}

// DecodeBody decodes a /healthz or /readyz body and checks it is the one
// shape: exactly Report's keys (detail optional), a known status, a
// version, a non-negative uptime_ms and a waiting_on array. Tests of every
// server call it; so can a probe.
func DecodeBody(b []byte) (Report, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		return Report{}, fmt.Errorf("health: body is not a JSON object: %w: %.200s", err, b)
	}
	for k := range keys {
		switch k {
		case "component", "status", "version", "uptime_ms", "waiting_on", "detail":
		default:
			return Report{}, fmt.Errorf("health: unknown key %q in %.200s", k, b)
		}
	}
	for _, k := range []string{"component", "status", "version", "uptime_ms", "waiting_on"} {
		if _, ok := keys[k]; !ok {
			return Report{}, fmt.Errorf("health: no %q in %.200s", k, b)
		}
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return Report{}, fmt.Errorf("health: %w: %.200s", err, b)
	}
	switch r.Status {
	case OK, Degraded, Starting, Unavailable, Closing:
	default:
		return Report{}, fmt.Errorf("health: unknown status %q", r.Status)
	}
	if r.Component == "" || r.Version == "" || r.UptimeMS < 0 || r.WaitingOn == nil {
		return Report{}, fmt.Errorf("health: component, version, uptime_ms or waiting_on missing or empty in %.200s", b)
	}
	return r, nil
}

var (
	versionOnce sync.Once
	version     string
)

// Version is the binary's version: the main module's version, or for a
// development build "devel" with the VCS revision (and "-dirty" for a
// modified tree) when the build recorded one.
func Version() string {
	versionOnce.Do(func() {
		version = "devel"
		bi, ok := debug.ReadBuildInfo()
		if !ok {
			return
		}
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			version = v
			return
		}
		var rev, dirty string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "-dirty"
				}
			}
		}
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if rev != "" {
			version = "devel-" + rev + dirty
		}
	})
	return version
}
