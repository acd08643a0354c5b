// Package readbench is the read-path benchmark behind `pillar bench read`:
// it starts a loopback cobbled cluster (package cluster: real nodes, each its
// own gRPC server and RocksDB directories, synthetic 12-key batches with
// values of 100 B–100 KiB), drives it through the router with closed-loop
// clients for a fixed duration per scenario, and compares with Redis MGET
// over the same values as the peer a user would otherwise pick. With
// Options.NodeExec (pillar bench read's default) every node and the bare
// floor is a process of its own, as Redis's server is; without it they run
// in this process beside the router and the clients.
//
// Scenarios, in order: healthy (hedging on); redis (the same batches,
// loaded under a per-run key prefix and deleted afterwards; with
// Options.Interleave also healthy/interleaved and redis/interleaved, where
// every client sends each batch through the router and to Redis in turn,
// so both see the same moments of a shared machine, then, in a phase of
// their own and interleaved the same way, direct/interleaved (straight to
// one node over gRPC), bare/interleaved (a grpc-go unary call with a raw
// codec around the same MultiGet per partition on a copy of the same
// SSTs, the floor under the node's BatchGet) and wire/interleaved (the same
// BatchGet straight to the node over cobbled's lean wire protocol): in one
// mix, the gRPC getters took this process's CPU from the router, whose
// work is all in-process, and not from Redis's server); Options.Transport picks the
// router's own node transport (gRPC or wire); slow-nohedge and slow-hedge (one node restarted with
// cobbled's fault delay, delaying 3% of its requests, with the router in its zone so it is
// every request's primary; the fault's reach,
// the share of requests it touched, is reported); degraded (one node adds
// 5 ms to every request: replica choice must steer away; p50 from 2 s on), compared with
// degraded/reference, a router whose routing table marks that node down,
// interleaved batch by batch in the same clients);
// kill (a node's gRPC server and listener stopped, or its process killed,
// a third of the way in,
// then marked down in routing DownAfter later, as the control plane would);
// saturation (16 clients on the router and on Redis in alternating
// SaturationSlice slices, so both see the same stretches of the machine:
// MB/s over each one's own slices). Each router scenario uses a fresh router with a
// warm-up, and reports the router's counters over the measured part only.
//
// The report (Report.Markdown, results.json, a latency-by-percentile PNG)
// includes the targets, evaluated. Interleaved getters take turns
// in an order that rotates batch by batch, so none always runs first. Run is not safe for concurrent
// use with another Run on the same Dir.
package readbench
