package router

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are a router's Prometheus collectors. Create them with NewMetrics,
// pass them in Options.Metrics and register Collectors() with the binary's
// registry. One Metrics belongs to one Router.
type Metrics struct {
	requests       *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	keys           prometheus.Counter
	rpcs           *prometheus.CounterVec
	rpcErrors      *prometheus.CounterVec
	nodeLatency    *prometheus.HistogramVec
	nodeStalls     *prometheus.GaugeVec
	hedgesWon      prometheus.Counter
	hedgesDenied   prometheus.Counter
	failovers      prometheus.Counter
	cancelled      prometheus.Counter
	routingErrors  prometheus.Counter
	routingKicks   prometheus.Counter
	routingVersion prometheus.Gauge
	extraRatio     prometheus.GaugeFunc
	hedgeRatio     prometheus.GaugeFunc

	versionRequests *prometheus.CounterVec

	rpcsBy [3]prometheus.Counter // rpcs by attempt kind, looked up once
	okReqs prometheus.Counter    // requests{result="ok"}

	router atomic.Pointer[Router]
}

// NewMetrics returns a fresh, unregistered set of router metrics.
func NewMetrics() *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "router_batchget_requests_total", Help: "BatchGet requests by outcome: ok, partial (some keys failed), failed, invalid, busy (refused: too many in flight).",
		}, []string{"result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "router_batchget_duration_seconds", Help: "BatchGet latency through the router, by the publication read (version) and its role (live, candidate, previous; \"\" when the request could not be served).",
			Buckets: prometheus.ExponentialBuckets(100e-6, 2, 16), // 100µs … 3.3s
		}, []string{"version", "role"}),
		versionRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "router_version_requests_total", Help: "BatchGet requests by the publication read, its role, and outcome (ok, partial, failed).",
		}, []string{"version", "role", "result"}),
		keys: prometheus.NewCounter(prometheus.CounterOpts{Name: "router_batchget_keys_total", Help: "Keys requested."}),
		rpcs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "router_subrequests_total", Help: "Sub-requests sent to nodes, by kind: primary, hedge, failover.",
		}, []string{"kind"}),
		rpcErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "router_subrequest_errors_total", Help: "Sub-requests that failed, by node and gRPC code (not counting ones the router cancelled).",
		}, []string{"node", "code"}),
		nodeLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "router_node_latency_seconds", Help: "Latency of answered sub-requests, per node.",
			Buckets: prometheus.ExponentialBuckets(100e-6, 2, 16),
		}, []string{"node"}),
		nodeStalls: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "router_node_stall_ratio", Help: "Smoothed share of a node's recent primary sub-requests that crossed their hedge delay; above the stall ratio (--stall-ratio) the node is read from after the other replicas.",
		}, []string{"node"}),
		hedgesWon:      prometheus.NewCounter(prometheus.CounterOpts{Name: "router_hedges_won_total", Help: "Hedged sub-requests that answered before their primary."}),
		hedgesDenied:   prometheus.NewCounter(prometheus.CounterOpts{Name: "router_hedges_denied_total", Help: "Hedges not sent because the hedge budget was spent."}),
		failovers:      prometheus.NewCounter(prometheus.CounterOpts{Name: "router_failovers_total", Help: "Sub-requests re-sent to another replica after an error or 'not my partition'."}),
		cancelled:      prometheus.NewCounter(prometheus.CounterOpts{Name: "router_subrequests_cancelled_total", Help: "Sub-requests cancelled by the router (hedge losers, leftovers at the deadline)."}),
		routingErrors:  prometheus.NewCounter(prometheus.CounterOpts{Name: "router_routing_errors_total", Help: "Failed routing fetches (control plane unreachable or bad table)."}),
		routingKicks:   prometheus.NewCounter(prometheus.CounterOpts{Name: "router_routing_refresh_triggered_total", Help: "Routing fetches triggered by routing errors."}),
		routingVersion: prometheus.NewGauge(prometheus.GaugeOpts{Name: "router_routing_version", Help: "Version of the routing table in use."}),
	}
	for k, name := range kindNames {
		m.rpcsBy[k] = m.rpcs.WithLabelValues(name)
	}
	m.okReqs = m.requests.WithLabelValues("ok")
	ratio := func(hedgesOnly bool) func() float64 {
		return func() float64 {
			r := m.router.Load()
			if r == nil {
				return 0
			}
			s := r.primaries.Load()
			if s == 0 {
				return 0
			}
			x := r.hedges.Load()
			if !hedgesOnly {
				x += r.failovers.Load()
			}
			return float64(x) / float64(s)
		}
	}
	m.extraRatio = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "router_extra_request_ratio", Help: "(hedges + failovers) / primary sub-requests since start."}, ratio(false))
	m.hedgeRatio = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "router_hedge_ratio", Help: "hedges / primary sub-requests since start (bounded by the hedge budget)."}, ratio(true))
	return m
}

func (m *Metrics) bind(r *Router) { m.router.Store(r) }

// Collectors returns every collector, for the binary to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.duration, m.keys, m.rpcs, m.rpcErrors, m.nodeLatency, m.nodeStalls, m.hedgesWon,
		m.hedgesDenied, m.failovers, m.cancelled, m.routingErrors, m.routingKicks, m.routingVersion, m.extraRatio, m.hedgeRatio, m.versionRequests}
}
