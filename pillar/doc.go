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
// # Layered tables
//
// Tables that change a little at a time are layered, so that a small
// change costs the change, not the corpus (layers.go, compact.go). The
// form chosen is sorted delta tables on a sorted base, as an LSM tree
// keeps immutable files; it is built on the Store interface, so both
// backends run the same code (YTsaurus sorted dynamic tables are not
// used: static tables keep one transaction model and are what the strict
// fake, jobs/ytfake, models).
//
//   - A layered table T is its base table T plus, per delta seq, the
//     tables _layers/<T>/delta-<seq> (T's row type: the rows that changed)
//     and _layers/<T>/deletes-<seq> (DeletedKey: the keys removed), each
//     sorted by page_key, and the attribute layers/<T> (LayerMeta: the next
//     seq and the merged row count). '@' (T@delta/<seq>, the first sketch)
//     is attribute syntax in YPath, hence the folder.
//   - A delta is written inside the Tx of the change (WriteDelta, or
//     ReserveDelta for a runner operation's outputs), so the one
//     transaction still covers state, export intents and consumed input.
//     The first delta of a table that does not exist is its base.
//   - Resolution, the one rule every reader applies: order the layers
//     oldest first (base; then per seq its deletes, then its delta); for a
//     key, the layer of the highest index holding it decides — a deletes
//     layer hides the key, another layer supplies all its rows of the key
//     (a page's rows are replaced as a whole).
//   - Reads see one merged, sorted stream: Snapshot.ReadTable, Table and
//     Tables resolve a layered table on both backends (a streaming merge
//     of one key reader and one row reader per layer: memory is a row
//     group per layer, never the table), so every existing reader is
//     unchanged. A Range selects merged rows (by skipping; the local
//     runner's splits read this way). Jobs may instead take the layers as
//     consecutive inputs (LayerInputs) and resolve by table index; the YT
//     runner resolves any other layered input with one reduce
//     (jobs.LayersMergeJob) into a temporary table first.
//   - Concurrency: two deltas of T from one Begin state conflict (the
//     second committer gets ErrConflict, on layers/<T>). A Replace of T
//     drops every layer of its Begin state and expects layers/<T>
//     unchanged, so a rewrite racing a delta fails instead of dropping it;
//     DropTable(T) drops the layers; Append onto a layered T is refused.
//   - Compaction (Compact; `pillar compact`) streams T's merged rows into
//     a Replace of T in one transaction, which drops the deltas folded.
//     It does not block readers: a snapshot keeps its manifest (embedded:
//     a lease) or its snapshot locks (YTsaurus), so no file it reads goes,
//     and the store collects the superseded files after the commit once no
//     live snapshot uses them. A delta committed meanwhile makes the
//     compaction start over (CompactOptions.Retries); it is never lost.
//     Writers call AutoCompact after committing a delta: it compacts once
//     T has more than CompactOptions.MaxLayers deltas (DefaultMaxLayers,
//     8). A crash (kill -9) at any point of a delta write or a compaction
//     leaves the store before or after: each is one commit.
//   - What is layered: docs (pillar/ingest writes one delta per run: k
//     rows for k new or changed pages); export/state (the reconcile of a
//     publish, rollback or subsets recompute writes its puts and deletes as
//     one delta; a bulk `pillar export` rewrites it); the chunk and
//     embedding version tables (an incremental backfill of a complete
//     version writes the changed pages' rows and the removed pages as one
//     delta; a first build writes the base); subset member tables (a
//     recompute writes the members that entered, left or changed as one
//     delta; a change of more than half the table rewrites it).
//   - Where the merge runs: by default in the client (a streaming merge
//     through the store's readers, bounded memory). With
//     CompactOptions.Merge = jobs.CompactMerge(runner) — what `pillar
//     compact` does for a yt:// store — it is one reduce of the layers on
//     the cluster (jobs.LayersMergeJob) inside the compacting transaction,
//     and no row passes through the client. AutoCompact after an ingest
//     into YTsaurus still merges in the client (ingest has no runner).
//   - A merged TableInfo.Rows is LayerMeta.Rows when the writer knew it,
//     else it is counted once per state (a key-only merge).
package pillar
