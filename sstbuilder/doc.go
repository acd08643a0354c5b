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
// (one partition per task, as the export MapReduce does).
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
// parallel (BuildExportOptions.Parallelism), each with its own Builder; it is
// resumable: a partition whose batch manifest already exists for the same
// input checksum, or which the local state file records as built from it, is
// not rebuilt.
package sstbuilder
