// Package router reads batches of page keys from the cobbled serving tier:
// it fans a BatchGet out to the nodes holding the keys' partitions, prefers
// replicas in the caller's zone, hedges slow sub-requests within a budget,
// fails over on errors, and honours the caller's deadline. grpc-go has no
// hedging of its own; this is it. The same logic runs as a library
// (New, (*Router).BatchGet) and as a stateless gRPC server speaking cobbled's
// servepb Serve API (NewServer; `pillar router serve`) for callers in other
// languages.
//
// # Routing
//
// New fetches the routing table (partition → replicas with address, zone,
// state and applied sequence number) from the control plane and fails with
// ErrNoRouting when it cannot. Afterwards the table is re-fetched every
// Options.RefreshInterval (also long-polled for a new version when the
// source is a RoutingWatcher, as *control.Client is) and at once, at most
// every MinRefreshGap, when a node answers "not my partition" or cannot be
// reached. A failing control plane leaves the cached table in use; a table
// with a different partition count is refused. A replica whose node is not
// "up", or which lags its partition's newest batch by more than
// MaxLagBatches, is never chosen.
//
// # Versions
//
// Every request reads exactly one publication (version): Read resolves
// ReadOptions.Version ("" = Options.Version, by default "live"; also
// "candidate", "previous" or an id) once, against the one routing table
// the request uses, to a concrete publication id, sends that id with every
// sub-request (hedges and failovers included) only to replicas that hold
// it (not retired, BaseSeq[p] > 0, AppliedSeq >= BaseSeq[p]), and refuses
// an answer naming another version. Options.CandidateFraction sends that
// fraction of live reads (or of callers, by a hash of ReadOptions.Caller)
// to the candidate while it is ready. A version that cannot be served
// fails each key with ErrVersion naming it. A promote or rollback changes
// the routing version; the watch long-poll installs it at once, so reads
// switch within the control plane's notification delay. Details and the
// stale-table fallback: versions.go. Metrics are labelled by version and
// role (router_batchget_duration_seconds, router_version_requests_total),
// and Stats().Versions counts requests per version.
//
// # One BatchGet
//
//	keys ──group by partition──▶ pick a replica per partition ──group by node──▶ one sub-request per node, in parallel
//	                                                                               │
//	  answer ◀── results in request order ◀── first answer per partition ◀────────┤ timer: HedgeQuantile (p99) of the node's
//	                                                                               │ latencies for this size (stalls left
//	                                                                               │ unhedged count as their delay; ≥ 2× its median,
//	                                                                               │ ≥ HedgeMinDelay) passed: an outlier; and a
//	                                                                               │ budget token: same partitions to another
//	                                                                               │ replica; the loser is cancelled (a timer
//	                                                                               │ late by over half its delay, this process
//	                                                                               │ stalled, waits once more, delay/4)
//	                                                                               └ error / "not my partition": next replica
//
// Picking: among the usable replicas not tried yet for the partition, those
// in Options.Zone first, then the others, then degraded nodes, then nodes
// that failed with a transport error in the last EjectFor. A node is
// degraded when its latency level (the lower of its recent median and its
// EWMA, so one stall does not count and a healed node is trusted again
// within a few answers) is above 1.5 × the best candidate's + 1 ms, both
// with MinSamples answers: slower on every request (a failing disk), which
// replica choice, not hedging, steers away from, even in the caller's zone;
// nodes of comparable latency keep the zone preference. A node is stalling,
// and tiered with the degraded ones, when more than Options.StallRatio of
// its recent primaries (an EWMA over about 128, halving every 2 s without
// one) outlasted their hedge delay: more outliers than the budget can hedge
// (a lossy link, each lost last packet a 200 ms retransmission timeout),
// which would otherwise set the p99 once the tokens run out; the decay
// returns it to its tier, and it is re-measured. Within a tier, the better of two
// random choices by recent latency × (outstanding sub-requests + 1), where
// the latency estimate of a node that has not answered for a while decays
// (halving every second) so a node once slow is tried again. A
// request's partitions go to as few nodes as the replicas allow (a node
// already chosen for the request is preferred when it is in a partition's
// best tier), unless Options.Spread; hedges and failovers always group so.
//
// Budget: each primary sub-request earns HedgeBudget tokens (at most
// HedgeBurst banked) and each hedge spends one, so hedges stay below
// HedgeBudget × primaries + HedgeBurst however slow the cluster gets.
// Failovers do not spend tokens: they replace a failed sub-request. A
// primary whose hedge the budget refused and that is still unanswered at
// half the time left to the deadline is presumed lost (a node or link gone
// silent gives no error to fail over on), resent as a failover outside the
// budget, and its node avoided as after a transport error: the budget caps tail trimming, never turns a silent replica
// into a failed read while another could answer.
//
// Results: duplicate keys are asked for once and answered at every
// position; an absent key is Found=false without error. A key gets an error
// only when its partition has no usable replica (ErrNoReplica), every
// replica failed (ErrUnavailable, wrapping the last node's error), or the
// deadline passed first (context.DeadlineExceeded); BatchGet then also
// returns an error wrapping the first of them, next to all results. A
// request without a deadline gets Options.Timeout.
//
// # Transport
//
// Options.Transport picks how sub-requests reach the nodes: gRPC (the
// default; the Serve API other languages use too) or the lean wire
// protocol (package wire: length-prefixed frames over TCP on the node's
// own port, WireConns pipelined connections per node, the same request and
// response encoding, version included). Over wire a sub-request costs no
// goroutine of its own: the answer is posted to the request's event loop
// from the connection's reader. Nor a context: a sub-request is sent with
// wire.Client.Send (the request's context gives its deadline) and the
// event loop cancels every call it leaves in flight (wire.Call.Cancel), so
// a Read over wire registers nothing on its caller's context. Errors keep gRPC's codes either way, so
// failover, ejection and the deadline rules are the same.
//
// # Buffers
//
// Both transports read a node's answer into one buffer from servepb's pool
// (not zeroed) that the values alias. Response.Release gives every buffer a
// response's values alias back; answers nobody uses (a loser arriving
// after its request ended, a response refused) go back at once. Release is
// optional: an unreleased response is the garbage collector's, and
// BatchGet (which returns only the results) never releases. The gRPC
// Server encodes each answer into a pooled buffer and releases at once. Measured with BenchmarkReadWireCPU (4 callers, router, nodes and
// callers in one process on the shared 2-core machine at load 12-16):
// 450-500 CPU-µs per 12-key request with Release against 670-760 before
// pooling: the fresh 600 KB per request cost its zeroing, its page faults
// and the collections it brought on.
//
// # Concurrency
//
// A Router is safe for concurrent use. Each BatchGet runs its decisions on
// the calling goroutine; its sub-requests and hedge timers only post events
// to it, and every sub-request still in flight when BatchGet returns is
// cancelled. Routing tables are immutable once published and swapped
// atomically; nodes (connections, latency windows, outstanding counts) are
// shared by successive tables while their id and address stay the same, and
// a node that leaves the table is closed after Options.Timeout. Close stops
// the refresh loops and closes every connection.
//
// # Time
//
// Every wait and measurement (hedge delays, request timeouts, refresh
// ticks, ejections, latencies) reads Options.Clock, the wall clock by
// default. Tests run the router and its cobbled nodes (cobbled.Options.Clock)
// on one clock.Fake, so hedging, budget, deadline and refresh rules are
// checked at exact instants, not against a loaded machine's wall clock.
// On the wall clock under Linux, hedge timers are armed on a timerfd rather
// than the runtime's timers: an idle Go process sleeps in epoll_wait with a
// whole-millisecond timeout, and a 1.5 ms hedge timer fired a mean 0.7 ms
// late, when the router was idle waiting on a stalled node (timers.go).
// Stopping the last pending timer disarms the timerfd (with one client every
// request's timer is stopped before the next is armed: armed for the
// stopped one, it woke the loop for nothing during the next request).
//
// # Observability
//
// Stats() returns counters (primaries, hedges sent, won and denied,
// failovers, cancelled losers, extra-request ratio) and per-node latency;
// Metrics holds the same as Prometheus collectors, which the binary
// registers.
package router
