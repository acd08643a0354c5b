package cobbled

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
)

// Metrics are a node's Prometheus collectors. Create them with NewMetrics,
// pass them in Options.Metrics and register Collectors() with the binary's
// registry. One Metrics belongs to one Node.
type Metrics struct {
	requestDuration  prometheus.Histogram
	inflight         prometheus.Gauge
	requests         *prometheus.CounterVec
	keys             *prometheus.CounterVec
	bytes            prometheus.Counter
	appliedSeq       *prometheus.GaugeVec
	lag              *prometheus.GaugeVec
	ingestDuration   *prometheus.HistogramVec
	downloadDuration prometheus.Histogram
	downloadBytes    prometheus.Counter
	ingestErrors     *prometheus.CounterVec
	batchesApplied   *prometheus.CounterVec
	reconciled       prometheus.Counter
	fault            *prometheus.GaugeVec
	corruptReads     prometheus.Counter
	rebuilds         prometheus.Counter
	retracted        prometheus.Counter
	passed           prometheus.Counter
	pubBytes         *prometheus.GaugeVec
	pubsDropped      prometheus.Counter
	versionReads     *prometheus.CounterVec

	// The read path's fixed series, looked up once (a WithLabelValues per
	// request hashes the labels and takes the vector's lock).
	requestsOK                                        prometheus.Counter
	keysFound, keysMissing, keysNotServed, keysFailed prometheus.Counter

	node atomic.Pointer[Node] // set by Open, for the cache gauges
}

// NewMetrics returns a fresh, unregistered set of node metrics.
func NewMetrics() *Metrics {
	m := &Metrics{
		requestDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "cobbled_batchget_duration_seconds",
			Help:    "BatchGet handling time on the node (decode to encoded response).",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16), // 50µs … 1.6s
		}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cobbled_batchget_inflight", Help: "BatchGet requests being handled.",
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cobbled_batchget_requests_total", Help: "BatchGet requests by outcome (grpc code).",
		}, []string{"code"}),
		keys: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cobbled_batchget_keys_total", Help: "Keys looked up, by result: found, missing, not_served, error.",
		}, []string{"result"}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cobbled_batchget_value_bytes_total", Help: "Value bytes returned.",
		}),
		appliedSeq: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cobbled_partition_applied_seq", Help: "Applied batch sequence number per held partition.",
		}, []string{"partition"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cobbled_partition_lag_batches", Help: "Registered batches not yet applied, per held partition.",
		}, []string{"partition"}),
		ingestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cobbled_ingest_apply_duration_seconds", Help: "Time to apply a verified batch (ingest, swap), by kind.",
			Buckets: prometheus.ExponentialBuckets(1e-3, 2, 16),
		}, []string{"kind"}),
		downloadDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "cobbled_ingest_download_duration_seconds", Help: "Time to download and verify a batch.",
			Buckets: prometheus.ExponentialBuckets(1e-3, 2, 18),
		}),
		downloadBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cobbled_ingest_download_bytes_total", Help: "Verified batch bytes downloaded.",
		}),
		ingestErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cobbled_ingest_errors_total", Help: "Failed batch attempts by reason.",
		}, []string{"reason"}),
		batchesApplied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cobbled_ingest_batches_total", Help: "Batches applied, by kind.",
		}, []string{"kind"}),
		reconciled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cobbled_ingest_reconciled_total", Help: "Batches found applied after a restart and recorded without re-applying.",
		}),
		fault: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cobbled_partition_fault", Help: "1 while a held partition has a fault: kind batch (a corrupt batch refused; the previous data serves) or replica (own data corrupt; not serving, rebuilding).",
		}, []string{"partition", "kind"}),
		corruptReads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cobbled_corrupt_reads_total", Help: "Reads that found a replica's own data corrupt (each takes the partition out of service for a rebuild).",
		}),
		rebuilds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cobbled_partition_rebuilds_total", Help: "Partition rebuilds from the batch log after corruption.",
		}),
		retracted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cobbled_ingest_retracted_skipped_total", Help: "Retracted batches skipped.",
		}),
		passed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cobbled_ingest_passed_total", Help: "Batches recorded as passed without applying them: their publication is retired, or a delta of a publication without a database on the replica (its later snapshot supersedes it).",
		}),
		pubBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cobbled_publication_bytes", Help: "Bytes on disk of each publication's database, per held partition (publication \"\" is the legacy unnamed one).",
		}, []string{"partition", "publication"}),
		pubsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cobbled_publication_drops_total", Help: "Publication databases dropped after their publication was retired for RetireGrace.",
		}),
		versionReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cobbled_batchget_version_requests_total", Help: "BatchGet requests by the publication they read (after resolving \"\" to the live one); \"(not held)\" when no partition of the request holds it here.",
		}, []string{"publication"}),
	}
	m.requestsOK = m.requests.WithLabelValues(codes.OK.String())
	m.keysFound, m.keysMissing = m.keys.WithLabelValues("found"), m.keys.WithLabelValues("missing")
	m.keysNotServed, m.keysFailed = m.keys.WithLabelValues("not_served"), m.keys.WithLabelValues("error")
	return m
}

// Collectors returns every collector, including block-cache gauges read from
// the node at scrape time, for registration by the binary.
func (m *Metrics) Collectors() []prometheus.Collector {
	cache := func(f func(Stats) float64) func() float64 {
		return func() float64 {
			n := m.node.Load()
			if n == nil {
				return 0
			}
			return f(n.Stats())
		}
	}
	return append([]prometheus.Collector{
		m.requestDuration, m.inflight, m.requests, m.keys, m.bytes, m.appliedSeq, m.lag,
		m.ingestDuration, m.downloadDuration, m.downloadBytes, m.ingestErrors,
		m.batchesApplied, m.reconciled, m.fault, m.corruptReads, m.rebuilds, m.retracted,
		m.passed, m.pubBytes, m.pubsDropped, m.versionReads,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cobbled_block_cache_hit_ratio", Help: "Block cache hits / (hits + misses) since start, all partitions (data blocks only since 2026-12-02: index and filter blocks live in the table readers).",
		}, cache(func(s Stats) float64 {
			if s.CacheHits+s.CacheMisses == 0 {
				return 0
			}
			return float64(s.CacheHits) / float64(s.CacheHits+s.CacheMisses)
		})),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cobbled_block_cache_usage_bytes", Help: "Block cache memory in use.",
		}, cache(func(s Stats) float64 { return float64(s.CacheUsage) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cobbled_block_cache_capacity_bytes", Help: "Block cache capacity (--cache).",
		}, cache(func(s Stats) float64 { return float64(s.CacheCapacity) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cobbled_table_readers_memory_bytes", Help: "Memory of the open table readers, outside the block cache: their index and filter blocks (~25-30 bytes a ~50 KB page, per publication held).",
		}, cache(func(s Stats) float64 { return float64(s.TableReadersBytes) })),
	}, m.paceCollectors()...) // ingest pacing and compaction backlog (pace.go)
}
