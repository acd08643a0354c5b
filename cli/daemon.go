package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pillarkit/pillar/internal/health"
)

// daemonHTTP is a server's --http listener: Prometheus /metrics (the Go
// and process collectors plus the component's), /healthz and /readyz
// (internal/health). The one start-up of it for control serve, cobbled
// serve, router serve and lorry run.
type daemonHTTP struct {
	srv  *http.Server
	mux  *http.ServeMux
	Addr net.Addr // where it listens (a :0 address resolved)
}

// Handle adds a path to the running server (a ServeMux may grow while it
// serves).
func (d *daemonHTTP) Handle(path string, h http.Handler) {
	if d != nil {
		d.mux.Handle(path, h)
	}
}

// startDaemonHTTP listens on addr and serves in the background; a serve
// error after the start is logged. Close stops it.
func startDaemonHTTP(component, addr string, h *health.Handler, cs ...prometheus.Collector) (*daemonHTTP, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(cs...)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	h.Register(mux)
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: --http %s: %w", component, addr, err)
	}
	d := &daemonHTTP{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, mux: mux, Addr: lis.Addr()}
	go func() {
		if err := d.srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger().Warn(component+": http server", "err", err)
		}
	}()
	return d, nil
}

// Close stops the listener and open connections.
func (d *daemonHTTP) Close() error {
	if d == nil {
		return nil
	}
	return d.srv.Close()
}

// Shutdown stops it gracefully within ctx.
func (d *daemonHTTP) Shutdown(ctx context.Context) error {
	if d == nil {
		return nil
	}
	return d.srv.Shutdown(ctx)
}
