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
	lat      *prometheus.HistogramVec
	lost     prometheus.Counter
	lag      *prometheus.GaugeVec
	backlogs *prometheus.GaugeVec
	oldest   *prometheus.GaugeVec
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
		lat: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "lorry_delivery_latency_seconds",
			Help:    "Per record, from its commit to the queue to its batch's registration (stage=registered) or application on every replica (stage=applied), by priority.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 16),
		}, []string{"priority", "stage"}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lorry_lost_records_total",
			Help: "Records committed to the queue but not applied on every replica LossAfter (fresh) or BulkLossAfter (bulk) later, each counted once. It should stay 0: alert on any increase.",
		}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lorry_replica_lag_batches", Help: "Batches between the newest registered and the slowest replica's applied, by partition (bulk pauses above MaxReplicaLag).",
		}, []string{"partition"}),
		backlogs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lorry_backlog_records", Help: "Undelivered records the held partition's scan has seen, by partition and priority.",
		}, []string{"partition", "priority"}),
		oldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lorry_oldest_undelivered_seconds", Help: "Age of the oldest undelivered record the held partition's scan has seen, by partition and priority (0: none).",
		}, []string{"partition", "priority"}),
	}
}

// Collectors returns every collector, for registration.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.batches, m.records, m.keys, m.bytes, m.retries, m.duration, m.delay, m.offset,
		m.lat, m.lost, m.lag, m.backlogs, m.oldest}
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

func (m *Metrics) latency(priority, stage string, d time.Duration) {
	if m == nil {
		return
	}
	m.lat.WithLabelValues(priority, stage).Observe(d.Seconds())
}

func (m *Metrics) lostRecords(n int64) {
	if m == nil {
		return
	}
	m.lost.Add(float64(n))
}

func (m *Metrics) replicaLag(p int, lag int64) {
	if m == nil {
		return
	}
	m.lag.WithLabelValues(strconv.Itoa(p)).Set(float64(lag))
}

func (m *Metrics) backlog(p int, b *backlogSample) {
	if m == nil {
		return
	}
	ps := strconv.Itoa(p)
	for pr, name := range prNames {
		if b == nil {
			m.backlogs.DeleteLabelValues(ps, name)
			m.oldest.DeleteLabelValues(ps, name)
			continue
		}
		m.backlogs.WithLabelValues(ps, name).Set(float64(b.records[pr]))
		age := 0.0
		if b.oldest[pr] > 0 {
			age = max(0, b.now.Sub(time.UnixMilli(b.oldest[pr])).Seconds())
		}
		m.oldest.WithLabelValues(ps, name).Set(age)
	}
}
