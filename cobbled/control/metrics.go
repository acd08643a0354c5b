package control

import (
	"context"
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
	faults     *prometheus.CounterVec
	switches   *prometheus.CounterVec
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
		faults: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pillar_control_replica_faults_total",
			Help: "Replica fault reports (kind: reported, cleared)."}, []string{"kind"}),
		switches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pillar_control_publication_changes_total",
			Help: "Publication changes (kind: register, promote, auto_promote, rollback, retire)."}, []string{"kind"}),
	}
}

func (m *Metrics) all() []prometheus.Collector {
	return []prometheus.Collector{m.rpcs, m.rpcSeconds, m.registered, m.collected, m.longPolls, m.version, m.nodes, m.faults, m.switches}
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

func (m *Metrics) replicaFault(reported bool) {
	if m == nil {
		return
	}
	kind := "cleared"
	if reported {
		kind = "reported"
	}
	m.faults.WithLabelValues(kind).Inc()
}

func (m *Metrics) publicationChange(kind string) {
	if m != nil {
		m.switches.WithLabelValues(kind).Inc()
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

// lagCollector reads the routing table at scrape time and exports the
// worst replica lag, so alerting needs no per-replica series.
type lagCollector struct {
	s                                 *Server
	maxBatches, maxSeconds, behind    *prometheus.Desc
	downReplicas, unassigned, scrape  *prometheus.Desc
	pubHolding, pubAssigned, pubReady *prometheus.Desc
}

// LagCollector returns a Prometheus collector that, at each scrape, reads
// the routing table and reports the largest replica lag (batches and
// seconds), how many replicas are behind or down, and how many partitions
// have no replica. Register it with the binary's registry next to Metrics.
func (s *Server) LagCollector() prometheus.Collector {
	return &lagCollector{s: s,
		maxBatches:   prometheus.NewDesc("pillar_control_max_replica_lag_batches", "Largest number of batches any assigned replica is behind its partition's newest.", nil, nil),
		maxSeconds:   prometheus.NewDesc("pillar_control_max_replica_lag_seconds", "Age of the oldest batch some assigned replica has not applied.", nil, nil),
		behind:       prometheus.NewDesc("pillar_control_replicas_behind", "Assigned replicas that have not applied their partition's newest batch.", nil, nil),
		downReplicas: prometheus.NewDesc("pillar_control_replicas_down", "Assigned replicas on nodes that are down.", nil, nil),
		unassigned:   prometheus.NewDesc("pillar_control_partitions_without_replicas", "Partitions with no assigned replica.", nil, nil),
		scrape:       prometheus.NewDesc("pillar_control_lag_scrape_ok", "1 when the lag figures could be read from the database.", nil, nil),
		pubHolding:   prometheus.NewDesc("pillar_control_publication_replicas_holding", "Assigned replicas holding each retained publication.", []string{"publication", "role"}, nil),
		pubAssigned:  prometheus.NewDesc("pillar_control_publication_replicas_assigned", "Assigned replicas (all partitions), per retained publication.", []string{"publication", "role"}, nil),
		pubReady:     prometheus.NewDesc("pillar_control_publication_ready", "1 when every assigned replica holds the publication.", []string{"publication", "role"}, nil),
	}
}

func (l *lagCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{l.maxBatches, l.maxSeconds, l.behind, l.downReplicas, l.unassigned, l.scrape, l.pubHolding, l.pubAssigned, l.pubReady} {
		ch <- d
	}
}

func (l *lagCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := l.s.store.Routing(ctx, l.s.o.Now())
	if err != nil {
		ch <- prometheus.MustNewConstMetric(l.scrape, prometheus.GaugeValue, 0)
		return
	}
	var maxB int64
	var maxLag time.Duration
	var behind, down, unassigned int
	for _, reps := range r.Replicas {
		if len(reps) == 0 {
			unassigned++
		}
		for _, rep := range reps {
			maxB = max(maxB, rep.LagBatches)
			maxLag = max(maxLag, rep.Lag)
			if rep.LagBatches > 0 {
				behind++
			}
			if rep.State != StateUp {
				down++
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(l.scrape, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(l.maxBatches, prometheus.GaugeValue, float64(maxB))
	ch <- prometheus.MustNewConstMetric(l.maxSeconds, prometheus.GaugeValue, maxLag.Seconds())
	ch <- prometheus.MustNewConstMetric(l.behind, prometheus.GaugeValue, float64(behind))
	ch <- prometheus.MustNewConstMetric(l.downReplicas, prometheus.GaugeValue, float64(down))
	ch <- prometheus.MustNewConstMetric(l.unassigned, prometheus.GaugeValue, float64(unassigned))
	pubs, _, err := l.s.store.Publications(ctx)
	if err != nil {
		return
	}
	for _, p := range pubs {
		if p.Role == RoleRetired {
			continue
		}
		ready := 0.0
		if p.Ready {
			ready = 1
		}
		ch <- prometheus.MustNewConstMetric(l.pubHolding, prometheus.GaugeValue, float64(p.Holding), p.ID, p.Role)
		ch <- prometheus.MustNewConstMetric(l.pubAssigned, prometheus.GaugeValue, float64(p.Assigned), p.ID, p.Role)
		ch <- prometheus.MustNewConstMetric(l.pubReady, prometheus.GaugeValue, ready, p.ID, p.Role)
	}
}
