// Package cobbled is the serving node: one RocksDB database per assigned
// partition replica, an ingest loop that applies the control plane's batches
// in order, and the BatchGet read server.
//
// # Ingest
//
// Run long-polls the control plane, per held partition, for batches after
// the replica's applied sequence number; downloads each into the replica's
// staging directory, verifying every file's size and SHA-256 against the
// manifest (RocksDB's ingest does not); and applies it: a delta with
// IngestExternalFile (files moved, not copied), a snapshot by building a new
// database generation, recording it, swapping it in for readers and closing
// and deleting the old one. A batch that fails is retried and, after
// Options.DownloadAttempts, reported (log, metric, Stats, /healthz); the
// replica never skips it and keeps serving what it has. At most
// Options.IngestConcurrency partitions download or apply at a time.
//
// # Crash safety
//
// Each partition directory holds state.json {db generation, seq, batch id},
// replaced atomically; it is the only commit point. Every batch's SST holds
// batch.MetaKey → batch id, so a delta's data and its id land atomically.
// After a crash between a delta's ingest and its state write the database's
// meta key equals the id of batch seq+1 and the loop records it without
// ingesting it again; re-ingesting it would be harmless too (a delta sets
// and deletes whole keys). A snapshot not yet recorded is discarded on open
// (its generation directory is removed) and downloaded again: moved files
// are gone after ingest, so nothing staged is ever reused.
//
// # Concurrency
//
// MultiGet and BatchGet are safe for concurrent use with each other, with
// ingestion and with snapshot swaps: readers hold a partition's read lock
// while they use its database; a swap or drop takes the write lock to
// replace it, so a database is closed only when no reader uses it, and a
// read sees exactly one generation. BatchGet takes the read locks of the
// request's partitions in increasing partition order. Apply must not be used
// for a partition while Run ingests it. Close after Run has returned and
// after the gRPC server has stopped; every grocksdb handle is freed exactly
// once, in Close (or, for an old generation, in the swap).
package cobbled
