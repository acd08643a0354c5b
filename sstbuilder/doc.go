// Package sstbuilder turns a partition-sorted export into RocksDB SST batches
// (SST files plus a manifest) in an object store, and registers them with the
// control plane.
//
// # Export format
//
// An export is a directory:
//
//	<export>/
//	  export.json       ExportMeta, written last (its presence marks the export complete)
//	  p00000.parquet    rows of partition 0
//	  p00007.parquet    rows of partition 7 (a partition without rows may have no file)
//	  ...
//
// export.json:
//
//	{
//	  "format": 1,
//	  "id": "emb-20261130-a1b2",          // valid batch id, at most 120 characters
//	  "partitions": 16,                   // must equal the deployment's partition count
//	  "kind": "snapshot" | "delta",
//	  "source": "embeddings/recursive-1a2b/minilm@42",   // free text for people
//	  "created_at_ms": 1764460800000,
//	  "queue_ends": [40, 0, 12, ...],     // snapshot: required, one per partition (below)
//	  "files": [                          // sorted by partition, one per file present
//	    {"partition": 7, "name": "p00007.parquet", "rows": 1234,
//	     "bytes": 56789012, "sha256": "<64 hex>"}
//	  ]
//	}
//
// Each Parquet file holds ExportRow rows, sorted by (page_key, seq):
//
//	page_key  string  32 lower-case hex characters of the 16-byte page key
//	                  (hex sorts like the raw bytes, and matches the Pillar tables)
//	seq       int64   version order; when a key repeats, the highest seq wins
//	op        string  "put" or "delete"
//	value     bytes   the prepared page record (internal/record) for a put; empty for a delete
//
// Every row's key belongs to the file's partition
// (BigEndian.Uint64(key[0:8]) % partitions). Write exports with ExportWriter
// (all partitions from one process) or PartitionWriter plus WriteExportMeta
// (one partition per task, as the export MapReduce does: each task writes
// its p<NNNNN>.parquet and returns the ExportFile entry; the job writes
// export.json once every task has succeeded). Parquet files are
// snappy-compressed; a row group holds at most 256 rows (RowGroupRows) or
// 64 MiB of values. The open row group's pages wait in a temporary file, so
// a writer's memory is its RowGroupBytes (default 4 MiB), however large the
// row group. Row groups are not cut at that memory share, because a Parquet
// writer keeps every row group's metadata until Close: small row groups
// would make memory grow with the file. The record column's data pages
// carry no statistics.
//
// A snapshot export must carry queue_ends: per partition, the export-queue
// end when the export was taken, which its snapshots supersede
// (batch.Manifest.Supersedes; the control plane refuses a snapshot until
// the deltas before it are delivered). BuildExport refuses a snapshot export
// without them (ErrNoSupersedes), so no bulk snapshot escapes ordering; 0 is
// stated explicitly for a partition whose queue held nothing (Synth writes
// zeros: a synthetic export has no queue). pipeline.Export records them;
// bulkexport.Run is the whole protocol (export, build, upload, register) in
// one call.
//
// An export may also live in an object store under a prefix (same layout;
// UploadExport copies a local one there, export.json last). BuildExport then
// downloads one partition file at a time into its work directory.
//
// # Batches
//
// BuildPartition (or a Builder fed row by row) writes one partition's rows into
// SST files with the serving node's table options (internal/rocks), rolling to
// a new file at BuildOptions.TargetFileSize. The first file of every batch
// starts with batch.MetaKey → batch id. Keys are the raw 16-byte page keys;
// values are the prepared page records; a delete in a delta is a RocksDB
// tombstone. A snapshot drops deletes (the partition is replaced); a snapshot
// of an empty partition is one file holding only the meta key; an empty delta
// is ErrEmpty and produces no file (RocksDB refuses an empty SST).
//
// SST file names are "<n:06d>-<sha256[:12]>.sst": unique by content, so an
// upload retried after a crash never replaces an object another manifest may
// name. Batch ids are derived from the input ("<export-id>-p00007"), so a rerun
// of the same export maps to the same batch; Upload writes files first and
// manifest.json last, each with a conditional create, and a manifest already
// present for the same source counts as done.
//
// # Concurrency
//
// A Builder is used by one goroutine. BuildExport builds partitions in
// parallel (ExportBuildOptions.Parallelism), each with its own Builder; one
// BuildExport at a time may use a work directory (an flock; ErrBusy
// otherwise). While
// a Builder writes, a goroutine decodes the next Parquet rows and another
// hashes the SST file as it grows, so the build costs little more wall time
// than the SST writing itself when cores are free.
//
// # Resume
//
// BuildExport records each partition's progress in <work-dir>/state.json
// (input checksum, manifest, local files, uploaded, sequence). A rerun:
//   - skips a partition whose manifest is already in the store with the same
//     source ("export:<id>:p<NNNNN>:sha256=<input checksum>"), and only
//     registers it again (registration is idempotent by batch id);
//   - uploads, without rebuilding, a partition built from the same input
//     whose files are still in the work directory;
//   - rebuilds anything else. A different input under the same batch id is
//     ErrBatchExists, never an overwrite.
//
// A batch is registered only after its manifest is stored; when the store is
// down (retries exhausted) BuildExport fails and registers nothing more.
package sstbuilder
