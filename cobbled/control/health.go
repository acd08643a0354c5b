package control

import (
	"context"
	"net/http"
	"time"

	"github.com/pillarkit/pillar/internal/health"
)

// HealthDetail is the "detail" of the control plane's /healthz and /readyz.
type HealthDetail struct {
	Database   string `json:"database"` // the database backend
	Partitions int    `json:"partitions"`
}

// Health reports the control plane's health (internal/health): OK while its
// database answers a ping, Unavailable (waiting on the database) otherwise.
func (s *Server) Health(ctx context.Context) health.Status {
	d := HealthDetail{Database: s.store.Backend(), Partitions: s.store.Partitions()}
	if err := s.store.Ping(ctx); err != nil {
		return health.Status{Status: health.Unavailable, WaitingOn: []string{"database: " + err.Error()}, Detail: d}
	}
	return health.Status{Status: health.OK, Detail: d}
}

// HealthHandler returns the /healthz and /readyz handler (mount it with
// Register); its uptime counts from this call.
func (s *Server) HealthHandler() *health.Handler {
	return health.New(health.Options{Component: "control", Timeout: 2 * time.Second}, s.Health)
}

// Healthz serves /healthz: 200 when the database answers, 503 otherwise.
func (s *Server) Healthz() http.Handler { return s.HealthHandler().Healthz() }
