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
//     valid while commits happen.
//   - A Tx commits new table contents, attribute changes, export-queue
//     appends and consumed-input marks atomically, also across a crash.
//     Reads inside a Tx see the state it began from.
//   - A Tx that writes a table or sets (or expects) an attribute that another
//     commit changed since it began fails with ErrConflict naming it; the
//     loser's changes are never merged. Queue appends and consumed marks never
//     conflict: offsets are assigned at commit, dense per partition.
//   - Errors wrap the sentinels of store.go where callers branch on them.
package pillar
