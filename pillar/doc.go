// Package pillar is the document model of the toolkit and the interface of
// its versioned store.
//
// Contracts (the same in every component; see DESIGN.md):
//
//   - Page key: the first 16 bytes of SHA-256 of the normalized URL
//     (NormalizeURL: lower-case scheme and host, no fragment, no default
//     port, "/" for an empty path). A normal form is its own normal form.
//     People see keys as 32 lower-case hex characters (Key.String); tables
//     store them that way (they sort like the bytes); SSTs hold the raw 16
//     bytes.
//   - Partition: BigEndian.Uint64(key[0:8]) % P. P is fixed for a store and a
//     deployment; components refuse another P (ErrPartitions).
//   - Tables: docs, signals, chunks/<cv>, embeddings/<cv>/<model>,
//     subsets/<name>, each typed by a row struct of rows.go (yson and parquet
//     tags name the same columns, except that no Parquet column is an SQL
//     reserved word: start_offset, end_offset, queue_offset; Parquet times
//     are TIMESTAMP(MILLIS)). A page with no text has one chunk (and
//     embedding) row with chunk_no -1, meaning "processed, no chunks".
//   - Versions: one registry attribute per version ("versions/<id>"); a
//     chunk or embedding version never overwrites another; exactly one pair
//     is published (AttrPublished).
//
// Store semantics (every backend passes pillar/storetest):
//
//   - A Snapshot is a consistent, read-only view of one generation; it stays
//     valid while commits happen, for as long as it is held, until Release.
//     No cleanup or compaction removes a file a live snapshot reads. In the
//     embedded store a snapshot holds a lease (a reference count in the
//     process, a flock'ed lease file across processes) with no expiry and
//     no renewal: it ends at Release or when its process dies (see
//     pillar/local's doc.go); unleased readers of older binaries get
//     local.Options.RetainFor (10 minutes after their generation was
//     replaced). On YTsaurus a snapshot is a master transaction holding
//     snapshot locks, which the SDK pings while it is open
//     (ytstore.Options.TxTimeout is the cluster's lease on it).
//   - The embedded store's data files carry checksums in its manifest: a
//     read of a damaged file fails with an error wrapping ErrCorrupt that
//     names the table and file (`pillar verify` checks a whole store).
//     YTsaurus checks its chunks itself.
//   - A Tx commits new table contents, attribute changes, export-queue
//     appends and consumed-input marks atomically, also across a crash.
//     Reads inside a Tx see the state it began from.
//   - A Tx that writes a table or sets (or expects) an attribute that another
//     commit changed since it began fails with ErrConflict naming it; the
//     loser's changes are never merged. Queue appends and consumed marks never
//     conflict: offsets are assigned at commit, dense per partition.
//   - Errors wrap the sentinels of store.go where callers branch on them.
//
// # Corpus scale
//
// What holds (jobs/pipeline, pillar/ingest, jobs.Local):
//
//   - No driver holds a map keyed by page. Every step over the corpus is an
//     operation on the runner — a reduce by page_key over tables sorted by
//     page_key (a sorted merge): the backfill plan and completion, subset
//     evaluation, top-K and membership, the export records, and the
//     reconcile of publish, rollback and recompute (see jobs/pipeline's
//     doc.go). On YTsaurus these are YTsaurus operations; the driver reads
//     row counts, per-job summaries and the rows of the change it enqueues.
//     The local runner merges inputs already sorted by the reduce key as
//     they are, as a YTsaurus reduce does, and sorts the rest within
//     --memory-limit (internal/extsort).
//   - Ingest streams the files through the external sort and merges the
//     sorted pages with docs read in key order (pillar/ingest's doc.go).
//     On YTsaurus the merge still runs in the client, which reads docs
//     through the proxy: the files are local to the client. Moving it to an
//     operation means uploading the sorted pages first.
//   - The bulk export streams the desired records from the runner's table
//     into the local export sink (which is on the client by design).
//
// What does not hold yet: sorted delta layers. Every table is still
// rewritten whole when it changes: ingest rewrites docs, publish and
// recompute rewrite export/state (a reduce of the desired records) and the
// changed subset tables, and a backfill's completion rewrites its version
// table. Memory stays bounded, but an ingest of k pages into N still writes
// O(N) rows. The design chosen for it, not built:
//
//   - A layered table T (docs, export/state, subsets/<name>, and the
//     version tables) is its base table T plus delta tables
//     T@delta/<seq>, each sorted by page_key, holding the rows that
//     changed and, in a sibling T@delta/<seq>-deletes, the keys removed.
//     Deltas are ordinary tables written in the same transaction as the
//     change, so the layering sits on top of the Store interface and works
//     on both backends with the same code; the transaction still covers
//     state, export intents and consumed input.
//   - A read of T is one sorted stream: a reduce (or the driver's streaming
//     merge) over the base and its deltas in which, per key, the newest
//     layer wins and a delete hides the key. Jobs that read a layered input
//     take the layers as consecutive inputs and resolve them by table
//     index.
//   - Compaction (`pillar compact`, and automatically once a table has more
//     than a configured number of deltas) is one more reduce of the same
//     kind, writing a new base in a transaction that drops the folded
//     deltas; readers keep their snapshot (a lease: cleanup never removes a
//     file a live snapshot reads) and are not blocked.
//   - The YTsaurus equivalent is a sorted dynamic table per layered table.
package pillar
