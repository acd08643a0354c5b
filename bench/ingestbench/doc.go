// Package ingestbench is the benchmark behind `pillar bench ingest`: what
// bulk loads do to a serving node's read tail, with and without pacing.
//
// One cobbled node (package internal/testcluster, Nodes 1: its own RocksDB
// directories and gRPC server on loopback) holds Partitions partitions of
// the read benchmark's data (12-key batches, values 100 B–100 KiB, mean
// ≈50 KB). An open-loop reader sends ReadRate BatchGets per second over
// gRPC for the whole run, each verified (every key found, value length
// right), and records every latency on one timeline. For each mode
// (unpaced: the node's pacer off; paced: its adaptive mode on, target =
// TargetRatio × the node's own idle p99) the run measures, each preceded
// by an idle window of Phase:
//
//	(a) snapshot  a fresh snapshot of SnapshotBytes for SnapshotPartition,
//	              built with the SST builder and applied with Node.Apply
//	              (download, verify, new generation, swap)
//	(b) deltas    UpdatesPerSec updates/s as Lorry-sized delta batches (one
//	              per DeltaPartitions partition every DeltaInterval) for
//	              Phase; each batch overwrites read keys (same values, so
//	              reads stay verifiable) and adds one marker key
//	(c) both      (a) and (b) at once
//
// "During" is from the ingest's start to Settle after its end (the swap's
// cold cache and the deltas' compaction land there). A batch is visible
// when a BatchGet of its marker (a snapshot: of one of its new keys) finds
// it; the time is counted from the moment the batch is handed to the node,
// so it includes queueing, pacing and the download. The floor is a bare
// IngestExternalFile loop (RocksDB copying the same object-store files into
// a fresh database, one call per file), under the same read load.
//
// Both modes share RocksDB's background settings (cobbled.Options
// Background: compaction threads at low priority, CompactionRate); the
// modes differ only in the node's pacer. The same snapshot and the same
// pool of delta batches are applied again (under new sequence numbers)
// in each mode. Batches are built before any measurement, so the producer
// does not compete with the node.
//
// Run is not safe for concurrent use with another Run on the same Dir.
package ingestbench
