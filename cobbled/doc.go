// Package cobbled is the serving node: one RocksDB database per assigned
// partition replica and publication, an ingest loop that applies the
// control plane's batches in order, and the BatchGet read server.
//
// # Publications
//
// A publication is a (chunk version, model) pair made servable
// (pillar.EmbedVersionID; "" is the legacy unnamed one). A replica keeps
// one database per publication side by side (the live, previous and
// candidate ones). The partition's batch log is one sequence space
// interleaving publications; a batch applies only to its manifest's
// publication: a snapshot builds that publication's new generation and
// leaves the others alone, a delta ingests into it. Batches of a retired
// publication, and deltas of one with no database here yet (its later
// snapshot supersedes them), are recorded as passed. A BatchGet reads one
// publication for all its keys: the request's version, or the live one as
// the node last saw routing; one the replica does not hold answers
// KEY_NOT_SERVED naming it. A publication the routing lists as retired is
// dropped after Options.RetireGrace; nothing else is ever dropped
// (publications.go). Each publication's bytes are reported to the control
// plane with the applied seq, in Stats and cobbled_publication_bytes.
//
// # Ingest
//
// Run long-polls the control plane, per held partition, for batches after
// the replica's applied sequence number; downloads each into the replica's
// staging directory, verifying every file's size and SHA-256 against the
// manifest and then every block checksum of each SST (internal/sstverify;
// RocksDB's ingest checks neither); and applies it: a delta with
// IngestExternalFile (files moved, not copied), a snapshot by building a new
// database generation, recording it, swapping it in for readers and closing
// and deleting the old one. A snapshot may also come after a gap (it
// replaces the contents): a replica behind the garbage-collection floor is
// listed the oldest live snapshot first. A batch that fails is retried and,
// after Options.DownloadAttempts, reported (log, metric, Stats, /healthz); a
// batch that fails verification is reported as "corrupt batch <id>:
// <reason>" (Stats.Held[].Fault, cobbled_partition_fault, and the control
// plane's routing, so `pillar status` shows it). The replica never skips a
// batch unless the control plane lists it as retracted (then it records it
// as passed without applying it), and keeps serving what it has. A staging
// directory is removed after a failed download. At most
// Options.IngestConcurrency partitions download or apply at a time, plus
// Options.SmallDeltaSlots (1) slots that only small deltas (≤ 1 MiB) take
// when the ordinary ones are all held, so a fresh delta of a few KB does not
// queue behind other partitions' bulk deltas.
//
// # Corruption of the replica's own data
//
// See corrupt.go: a read that finds a corrupt block answers the other keys,
// takes that publication's database out of service on the replica
// (KEY_NOT_SERVED; when no other publication serves there the control plane
// marks the replica "corrupt" so routers skip it), and the ingest worker
// rebuilds it into a fresh generation by replaying that publication's
// batches from the log up to the replica's seq, then serves it again.
//
// # Ingest pacing
//
// Every batch file is downloaded through the node's pace.Limiter
// (Options.Pace, pace.go): a node-wide byte-rate cap for deltas and
// snapshots together, and an adaptive mode that halves the snapshot rate
// while the node's own BatchGet p99 (handling time, over the last 2 s and
// the last 500 ms) is over a target and snapshot bytes passed, and grows
// it back when it is under (internal/pace); deltas wait only for the cap, so freshness is not traded for the
// adaptive mode. Options.SnapshotConcurrency can keep an ingest slot free
// for deltas. RocksDB's side (IngestExternalFile options, compaction rate
// limit and priority, and why those and not others in 7.8) is in
// internal/rocks (ingest.go). `pillar bench ingest` measures it.
//
// CPU, not only bytes: while the adaptive mode is on, a snapshot's SST
// verification (one C call reading the whole file again) runs on a thread
// of its own at nice 19 and idle I/O class (pace.Limiter.RunClass), and its
// paced download yields its P after every read; deltas and unpaced
// snapshots run at normal priority. The download itself (copy, SHA-256) is
// Go code and is paced by bytes only: a Go thread at lowered priority would
// hold one of the process's Ps while the kernel keeps it waiting. Instead,
// under the adaptive mode every snapshot chunk's copy and hash holds a CPU
// slot (pace.Limiter.CPU; GOMAXPROCS − 1 of them), so a snapshot leaves a
// P to the reads and the deltas; deltas take no slot (bounding them too
// let them fall seconds behind on a CPU-starved machine).
//
// Where the read tail comes from during ingest (per-window CPU profiles of
// `pillar bench ingest --cpuprofile-dir`, 2 shared cores): the node's
// MultiGet time per read doubles while deltas stream (0.12–0.28 ms idle,
// 0.27–0.39 ms during, over four runs): overwriting deltas put the read keys' newest
// versions into new L0 files, and L0 compaction rewrites the partition
// into new files every few seconds, so reads of delta partitions miss the
// block cache and read (and checksum) blocks from the page cache. That
// cost is on the read path whatever the pacer does; deltas are never
// slowed for it (freshness). So the node warms the block cache
// (Options.Background; rocks.Warmer): a delta's staged files are read into
// it before they are ingested (their cache keys survive the move), and a
// RocksDB listener reads each compaction output into it before the
// compaction is installed, and a warmed file's blocks are erased when
// RocksDB deletes the file (7.8 leaves them to LRU). With room in the
// cache the data-block hit ratio during a delta stream stays at 0.999
// (0.70 unwarmed); with the data nearly filling it, 0.67–0.79 (0.54–0.60
// unwarmed). In isolation (BenchmarkMultiGetDuringIngest, internal/rocks)
// warming keeps MultiGet's p50 during ingest at 0.93–0.96× the p50 without
// ingest (2.1–2.4× cold); on the shared machine the read tail is set by
// scheduling, and warming did not move `pillar bench ingest`'s p99. Ingest's own CPU, per GB downloaded: SHA-256
// ≈ 0.9 core-s, the copy's read and write syscalls ≈ 0.7, block
// verification ≈ 0.4, IngestExternalFile ≈ 0.05 (one paced run, 1.35 GB in
// 31 s); compaction threads (nice 19) are the rest; Go GC did not change during
// ingest, nor did the page cache (the machine had memory to spare).
//
// # Crash safety
//
// Each partition directory holds state.json {seq, batch id, and per
// publication its db generation and last batch}, replaced atomically; it is
// the only commit point. Every batch's SST holds batch.MetaKey → batch id,
// so a delta's data and its id land atomically. After a crash between a
// delta's ingest and its state write the publication's database's meta key
// equals the id of batch seq+1 and the loop records it without ingesting it
// again; re-ingesting it would be harmless too (a delta sets
// and deletes whole keys). A snapshot not yet recorded is discarded on open
// (its generation directory is removed) and downloaded again: moved files
// are gone after ingest, so nothing staged is ever reused.
//
// # Concurrency
//
// MultiGet and BatchGet are safe for concurrent use with each other, with
// ingestion and with snapshot swaps: readers hold a partition's read lock
// while they use a publication's database; a swap or drop takes the write
// lock to replace it, so a database is closed only when no reader uses it,
// and a read sees exactly one generation of one publication. BatchGet takes the read locks of the
// request's partitions in increasing partition order. Apply must not be used
// for a partition while Run ingests it. Close after Run has returned and
// after the gRPC server has stopped; every grocksdb handle is freed exactly
// once, in Close (or, for an old generation, in the swap), through closeDB;
// tests built with -tags invariants panic on a double close.
//
// # Read path and its cost
//
// BatchGet validates the request (1..MaxKeys keys of 16 bytes), groups keys
// by partition and issues one MultiGet per partition, then encodes the
// BatchGetResponse straight from RocksDB's results into a pooled wire buffer
// (one Go copy of each value) that gRPC sends without marshalling. Clients
// decode with servepb.ClientCodec (one gather copy; values alias it; Pooled
// with servepb.Release avoids a large allocation per response).
//
// BenchmarkBatchGet (12 keys, values uniform in 100 B–100 KiB, mean 50 KB,
// so ~600 KB per response; client and server in one process on the 2-core
// development machine, which other work shares, so wall-clock figures vary
// by ±30% between runs; cpu-µs/op is steadier). At the quietest (load 5):
//
//	warm block cache               p50     p90     p99   req/s (1 client)  req/s (8)  cpu-µs/op
//	in-process MultiGet (floor)    91 µs  136 µs  260 µs   9,761            18,799      104
//	BatchGet over gRPC            286 µs  438 µs  720 µs   3,169             4,922      330
//	BatchGet, 12 absent keys       36–51 µs (the per-RPC fixed cost)
//	cold (data 5× the cache; misses from the page cache)
//	floor                         162 µs  213 µs  359 µs   5,819             5,364      175
//	gRPC                          387 µs  521 µs  772 µs   2,434             1,303      412
//	cold with DirectReads (misses go to disk)
//	floor                         1.33 ms 2.5 ms  6.0 ms     617             1,305      687
//	gRPC                          1.83 ms 3.5 ms  6.9 ms     456               785     1130
//
// The node's own share of a warm gRPC request (handler, decode to encoded
// response) averages 83 µs; the rest is transport and client. gRPC's p50 ≈
// floor + the per-RPC cost + ≈0.25–0.3 µs per KB of response (≈160 µs for
// 600 KB): grpc-go sends at most 16 KB per HTTP/2 DATA frame and the bytes
// cross four more copies than in the floor (gRPC's write buffer, the
// loopback socket twice, the client's frame buffers into one message). So
// p50 is within 2× the floor plus a fixed cost only if that cost includes
// this per-byte transport cost: against the per-RPC cost alone it is 2.6×
// the floor warm (2.2× cold, 1.35× cold from disk). Throughput is above
// 2,000 requests/s on the 2 cores warm, client included; under other load
// on the machine it fell to 1,300–1,900.
//
//	go test -run '^$' -bench BatchGet -benchtime 3000x ./cobbled/
//
// The same BatchGet is served over cobbled's lean wire protocol (package
// wire) on the node's gRPC port (Node.Serve tells the two apart by a
// connection's first bytes): the same handler, limits, metrics and errors,
// and the same encoded response, written with one writev instead of being
// cut into 16 KB HTTP/2 DATA frames; over wire the values over 4 KiB are
// written from RocksDB's pinned blocks without a Go copy (the partition read
// locks are then held until the answer is written, at most the request's
// deadline + 1 s: server.go). With one client on the shared 2-core
// machine (load ~25), straight to a node over wire measured p50 0.57 ms
// against 0.99 ms over gRPC and 0.96 ms for a bare grpc-go call with a raw
// codec around the same MultiGet, and Redis MGET 0.48 ms (interleaved rows
// of one `pillar bench read --clients 1 --transport wire` run): the gap to
// Redis was gRPC's transport, not the handler.
package cobbled
