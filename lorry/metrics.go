package lorry

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are a worker's Prometheus collectors. Create them with NewMetrics,
// pass them in Options.Metrics and register Collectors() with the binary's
// registry. A nil *Metrics records nothing.
type Metrics struct {
	batches  *prometheus.CounterVec
	records  prometheus.Counter
	keys     prometheus.Counter
	bytes    prometheus.Counter
	retries  *prometheus.CounterVec
	duration prometheus.Histogram
	delay    prometheus.Histogram
	offset   *prometheus.GaugeVec
}

// NewMetrics returns a fresh, unregistered set of worker metrics.
func NewMetrics() *Metrics {
	return &Metrics{
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lorry_batches_total", Help: "Batches delivered (uploaded, registered, committed), by partition.",
		}, []string{"partition"}),
		records: prometheus.NewCounter(prometheus.CounterOpts{Name: "lorry_records_total", Help: "Queue records delivered."}),
		keys:    prometheus.NewCounter(prometheus.CounterOpts{Name: "lorry_keys_total", Help: "Keys written into batches (after last-write-wins)."}),
		bytes:   prometheus.NewCounter(prometheus.CounterOpts{Name: "lorry_uploaded_bytes_total", Help: "SST bytes uploaded."}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lorry_retries_total", Help: "Failed attempts that were retried, by step.",
		}, []string{"step"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "lorry_batch_duration_seconds", Help: "Time from closing a batch to committing its offset.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
		delay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "lorry_delivery_delay_seconds", Help: "Time from the store commit of a batch's oldest record to the batch's registration.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}),
		offset: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lorry_committed_records", Help: "Records committed by this worker, by partition.",
		}, []string{"partition"}),
	}
}

// Collectors returns every collector, for registration.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.batches, m.records, m.keys, m.bytes, m.retries, m.duration, m.delay, m.offset}
}

func (m *Metrics) delivered(p int, records, keys, bytes int64, took time.Duration, oldest, now time.Time) {
	if m == nil {
		return
	}
	ps := strconv.Itoa(p)
	m.batches.WithLabelValues(ps).Inc()
	m.records.Add(float64(records))
	m.keys.Add(float64(keys))
	m.bytes.Add(float64(bytes))
	m.duration.Observe(took.Seconds())
	if !oldest.IsZero() {
		m.delay.Observe(now.Sub(oldest).Seconds())
	}
	m.offset.WithLabelValues(ps).Add(float64(records))
}

func (m *Metrics) retried(step string) {
	if m == nil {
		return
	}
	m.retries.WithLabelValues(step).Inc()
}
