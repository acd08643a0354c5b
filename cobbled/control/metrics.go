package control

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
)

// Metrics are the control plane's Prometheus collectors. Register the value
// with a registry (it is a prometheus.Collector); a nil *Metrics records
// nothing.
type Metrics struct {
	rpcs       *prometheus.CounterVec
	rpcSeconds *prometheus.HistogramVec
	registered prometheus.Counter
	collected  prometheus.Counter
	longPolls  prometheus.Gauge
	version    prometheus.Gauge
	nodes      *prometheus.GaugeVec
}

// NewMetrics returns unregistered collectors named pillar_control_*.
func NewMetrics() *Metrics {
	return &Metrics{
		rpcs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pillar_control_rpcs_total",
			Help: "Control-plane calls by method and gRPC code."}, []string{"method", "code"}),
		rpcSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pillar_control_rpc_seconds",
			Help: "Control-plane call latency (long polls include their wait).", Buckets: prometheus.ExponentialBuckets(0.0002, 4, 10)}, []string{"method"}),
		registered: prometheus.NewCounter(prometheus.CounterOpts{Name: "pillar_control_batches_registered_total",
			Help: "Batches newly registered (idempotent repeats not counted)."}),
		collected: prometheus.NewCounter(prometheus.CounterOpts{Name: "pillar_control_batches_collected_total",
			Help: "Batches whose objects garbage collection deleted."}),
		longPolls: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pillar_control_long_polls",
			Help: "ListBatches calls currently waiting for a batch."}),
		version: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pillar_control_routing_version",
			Help: "Current routing version."}),
		nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pillar_control_nodes",
			Help: "Registered nodes by state."}, []string{"state"}),
	}
}

func (m *Metrics) all() []prometheus.Collector {
	return []prometheus.Collector{m.rpcs, m.rpcSeconds, m.registered, m.collected, m.longPolls, m.version, m.nodes}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.all() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.all() {
		c.Collect(ch)
	}
}

func (m *Metrics) observeRPC(method string, code codes.Code, d time.Duration) {
	if m == nil {
		return
	}
	m.rpcs.WithLabelValues(method, code.String()).Inc()
	m.rpcSeconds.WithLabelValues(method).Observe(d.Seconds())
}

func (m *Metrics) batchRegistered() {
	if m != nil {
		m.registered.Inc()
	}
}

func (m *Metrics) batchCollected() {
	if m != nil {
		m.collected.Inc()
	}
}

func (m *Metrics) waiters(d float64) {
	if m != nil {
		m.longPolls.Add(d)
	}
}

func (m *Metrics) routingVersion(v int64) {
	if m != nil {
		m.version.Set(float64(v))
	}
}

func (m *Metrics) nodeStates(states map[string]string) {
	if m == nil {
		return
	}
	count := map[string]int{StateUp: 0, StateDown: 0, StateGone: 0}
	for _, st := range states {
		count[st]++
	}
	for st, n := range count {
		m.nodes.WithLabelValues(st).Set(float64(n))
	}
}
