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
//     tags name the same columns). A page with no text has one chunk (and
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
package pillar
