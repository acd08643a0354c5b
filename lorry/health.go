package lorry

import (
	"context"

	"github.com/pillarkit/pillar/internal/health"
)

// HealthDetail is the "detail" of a worker's /healthz and /readyz. The
// queue depth and the age of the oldest undelivered record are the gauges
// lorry_backlog_records and lorry_oldest_undelivered_seconds (per held
// partition and priority), and `pillar lorry status` for every partition.
type HealthDetail struct {
	ID            string `json:"id"`
	Held          []int  `json:"held_partitions"`
	BufferedBytes int64  `json:"buffered_bytes"`
	Batches       int64  `json:"batches"`
	Records       int64  `json:"records"`
	Retries       int64  `json:"retries"`
	// LastError is the last failed attempt's error (it stays after later
	// successes; Retries counts them).
	LastError string `json:"last_error,omitempty"`
}

// Health reports the worker's health (internal/health): Unavailable
// (waiting on the store) while the store gives no snapshot, OK otherwise.
func (w *Worker) Health(ctx context.Context) health.Status {
	st := w.Stats()
	d := HealthDetail{ID: w.o.ID, Held: st.Held, BufferedBytes: st.Buffered, Batches: st.Batches, Records: st.Records,
		Retries: st.Retries, LastError: st.LastError}
	if d.Held == nil {
		d.Held = []int{}
	}
	sn, err := w.o.Store.Snapshot(ctx)
	if err != nil {
		return health.Status{Status: health.Unavailable, WaitingOn: []string{"store: " + err.Error()}, Detail: d}
	}
	sn.Release()
	return health.Status{Status: health.OK, Detail: d}
}
