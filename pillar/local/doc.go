// Package local is the embedded Pillar store: tables as Parquet files in a
// directory, committed atomically.
//
// Layout of a store directory:
//
//	STORE                       {"format":1,"partitions":P,...}  written once by Create
//	CURRENT                     name of the current manifest      replaced by rename: the commit point
//	LOCK                        flock(2) held while a commit runs
//	manifests/m-<gen>.json      the state at generation gen: tables → files, attributes,
//	                            export-queue index files and tail segments, consumed ids
//	data/<gen>-<n>-<rand>.parquet   immutable data files (tables and queue segments)
//	data/<gen>-<rand>-q<p>-i<n>.qidx  immutable queue index files (JSON; "Queue index" below)
//	tx/<id>/                    staging of an open transaction (holds tx/<id>/.lock)
//	leases/<gen>-<pid>-<rand>.lease  a snapshot lease: flock(2) held by the reading process
//
// Invariants:
//
//   - Data files and manifests are immutable once written; a file is never
//     rewritten in place. Every file a manifest names is fsynced before the
//     manifest is written, and the manifest before CURRENT is replaced. A
//     commit issues its last fsyncs at once (the data directory's, for the
//     renames into it; the manifest's and its directory's; CURRENT.tmp's)
//     and renames CURRENT.tmp only after all of them returned, then syncs
//     the store directory: two fsync rounds under LOCK instead of five in a
//     row. The queue segments of a commit are synced in one round too,
//     before LOCK.
//   - A table file holds at most 512 column chunks (row groups × leaf
//     columns): a writer past it closes the file (footer, fsync, sidecar,
//     in that Write) and goes on in a new file of its part, whose files
//     follow each other in the table's file list. Parquet metadata (a
//     footer entry, column and offset index per chunk) is what a writer
//     keeps until it closes a file and what a reader decodes when it opens
//     one, so the bound keeps both near 1 MB however large the table (one
//     2 GB file of 160k pages held 7 MB per reader). The bound holds for
//     files written since 2026-12-02 (c6e493e); older files keep their
//     size until their table is rewritten. Queue segments are bounded the
//     same way: a transaction's spool of a partition that reaches the bound
//     closes the segment (footer, sums, fsync, in that Enqueue) and goes on
//     in a new one; the commit gives a partition's segments consecutive
//     offsets in the order written (one commit, several segments, one
//     commit time). Segments written before 2026-12-02 keep their size.
//   - Table files are ZSTD (internal/pqzstd), except the tables written
//     with WriteOptions.Scratch (an operation's intermediate tables, dropped
//     by the run that made them), which are Snappy through S2's fast encoder
//     (internal/pqsnappy). Docs, chunks and embeddings rows are encoded with
//     parquet-go's GenericWriter, other row types with the untyped Writer;
//     both encode a row before Write returns. Readers decode rows 64 at a
//     time per row type, or one at a time through a legacy view.
//   - A transaction's enqueued records stay in memory up to 64 MB; past it
//     they are written to its staging segment files as they come (so a
//     republish of 200k records of 50 KB does not hold 10 GB until its
//     commit). Staging is not read back and goes with an abort.
//   - A commit becomes visible at exactly one point: the rename of CURRENT.tmp
//     over CURRENT (followed by an fsync of the directory). A crash (kill -9,
//     power loss) at any earlier point leaves the previous state; at any later
//     point the new one. Never a mix.
//   - Commits are serialized by an flock on LOCK, across processes. Each Tx
//     remembers the generation of every table and attribute it changes as of
//     Begin; Commit refuses with ErrConflict when any of them changed since
//     (first committer wins, the loser's changes are dropped, nothing is
//     merged into a table or attribute someone else changed). Export-queue
//     appends and consumed marks never conflict: offsets are assigned under
//     the lock, after whatever committed meanwhile.
//   - Group commit: concurrent Commit calls of one Store share one store
//     commit (one manifest at one generation, one round of fsyncs, one
//     CURRENT rename). Each transaction's conflict check runs in turn
//     against the state the group has reached, and each is all or nothing:
//     a failed check or file move leaves that one out; a failure of what
//     they share fails them all (group.go has the rules).
//   - Readers read a Snapshot: one manifest and the immutable files it names.
//     A snapshot stays readable while commits happen, however long it is
//     held, until Release (see "Snapshot lifetime" below).
//   - Cleanup is the only code that removes data files. It runs under LOCK
//     at Open, every few commits, and when called (Store.Cleanup; the
//     garbage collection of a compaction is a Cleanup after the compacting
//     commit). It removes files that no retained manifest names (through
//     its index files included). A manifest is retained when it is current,
//     one of the newest Options.RetainManifests, replaced less than
//     Options.RetainFor ago, or leased by a live snapshot of any process.
//     At Open and when called it sweeps data/ (listed before LOCK is taken:
//     a listed file no retained manifest names once LOCK is held is
//     garbage, since no commit moves files in then and only cleanup makes a
//     file unnamed), which also removes the files of a commit whose process
//     died. The cleanup every few commits lists nothing: it removes the
//     table and index files that the manifests it removes named and no
//     retained one does. Queue segments are never among them (the queue
//     only grows: the current manifest names every committed segment), so
//     its cost does not grow with the queue.
//   - Staging directories of transactions whose process died (their .lock is
//     not held) are removed by cleanup; an aborted Tx removes its own.
//   - Checksums: every data file's size and CRC32C (Castagnoli, 8 hex
//     digits) are in the manifest entry that names it, computed while the
//     file is written. A mismatch is an error wrapping pillar.ErrCorrupt
//     that names the table (or queue partition) and the file, and no row
//     read from the damaged bytes is returned.
//   - Block sums: a table file also has, computed while it is written, the
//     CRC32C of each 128 KiB block in a sidecar data file (<file>.blocks,
//     4 bytes big-endian per block). The manifest entry names the sidecar,
//     its block size and its own CRC32C. The first open of a table file in
//     a Store reads the sidecar whole and checks it (CRC32C, one sum per
//     block of the file's recorded size); every open checks the file's
//     size. Each block is checked the first time the Store reads from it:
//     read whole, compared with its sum (4 bytes read from the sidecar),
//     and the read served from the checked bytes. A Store keeps one bit per
//     block of each table file it has read, and nothing per open file but
//     the sidecar's descriptor (opened at the first block to check). So
//     verification costs what a read touches (rounded up to blocks), not
//     the file: an incremental step that reads a few hundred rows of a
//     20 GB table checks a few MB. The sidecar is moved into data/ before
//     its file, under the same intent, and is removed with it by cleanup
//     (manifest.files lists both). A missing sidecar is not damage (a
//     binary from before block sums removes sidecars when it sweeps data/):
//     the file is then checked whole against its CRC32C, as before, and
//     Verify lists it under NoBlockSums; a sidecar present but wrong is
//     corrupt. A scan of a file with a damaged block returns the rows
//     before that block, then the error. A block nobody reads is not checked by
//     reads: Verify (pillar verify) always reads every file whole and
//     checks its CRC32C, its sidecar and every block sum (a queue
//     segment's footer and heads checksums, in the same read), besides
//     the Parquet footer and row counts. Queue segments and index files (small,
//     read whole) and table files written before block sums are checked
//     whole the first time a Store opens them — except that a read of queue
//     heads (ReadQueueHeads, no values) checks only a segment's footer
//     checksum (footer_crc32c, before the footer is parsed) and heads
//     checksum (heads_crc32c: the bytes outside its value column chunks;
//     both computed at staging from the bytes as they are written, like
//     the crc32c, from the running CRC32C at the writes where the value
//     chunks start and end: staging reads back a few KB around the
//     footer's start, never the values; queueheads.go, segsums.go), so
//     Lorry's head scan past a bulk backlog does not read the values;
//     segments without both are checked whole. A Store remembers what it
//     checked (files are immutable), so damage done after a Store read a
//     block is found by the next Store (the next command) or by Verify.
//   - Stores written before checksums: their manifest entries have no
//     crc32c. They read as before (size is still checked); Verify lists
//     such files as "no checksum"; the next commit, whatever it writes,
//     computes the checksums of every file its base manifest names without
//     one (before taking the commit lock) and records them. The format
//     number does not change: older binaries ignore the field. That first
//     commit therefore reads every such file once, so it takes as long as a
//     full scan of the store, and the checksums it records are those of the
//     bytes as they are then: damage already on disk is not found later.
//     Run `pillar verify` (it checks footers and row counts) before the
//     first commit of a new binary on an old store.
//
// Queue index. A partition's export queue is a run of segments, one per
// partition per enqueuing commit (more when a commit's records of the
// partition exceed a segment's 512 column chunks), never trimmed (a replay may read any
// offset). A manifest that named every segment made every commit, Lorry's
// attribute-only state changes included, encode, fsync and keep a manifest
// that grows with the queue (about 1 s a commit at 15,000 segments on a
// loaded 2-core machine). Instead a manifest names the newest segments
// itself (the tail, fewer than F = 16) and the older ones through index
// files, each listing consecutive segments (file, first offset, count,
// size, checksum, commit time), tiered by level:
//
//   - A commit whose tail reaches F segments moves them into a new index
//     file of level 0. While the newest F index files of a partition are of
//     one level L below 3, they merge into one file of level L+1 (F^(L+2)
//     segments). Only the files still named at the end are written. Level
//     3 files (65,536 segments, about 9 MB) are not merged further, so a
//     manifest names at most 15 files of each lower level, one per 65,536
//     segments beyond, and 15 tail segments: a commit's cost does not grow
//     with the queue (amortized, each segment's entry is rewritten once per
//     level; a merge reads its inputs from an in-memory cache).
//   - Index files are written and fsynced under LOCK, in the commit that
//     names them, before the data directory's sync and the manifest: a
//     kill -9 at any step leaves the old state or the new one (an unnamed
//     index file is swept at the next Open). Nothing else changes: the
//     records' files, offsets and per-record commit times (the commit time
//     of the segment's commit, which Lorry's batch age, latency metrics and
//     loss counter read) are those of the segments they list.
//   - Index files are immutable and named by the manifests that use them,
//     so a snapshot (a lease on its manifest) keeps the index files it
//     reads, and through them the segments, however many merges happen
//     since. A merged-away index file goes once no retained manifest names
//     it.
//   - An index file's size and CRC32C are in the manifest entry naming it;
//     it is checked, decoded and matched against the entry (partition,
//     offsets, segment count) the first time a Store reads it (then kept
//     decoded, up to 131,072 segments' worth, least recently used out), and
//     by Verify, which also checks every segment it lists. A mismatch wraps
//     pillar.ErrCorrupt and names the file; cleanup then removes no data
//     file.
//   - Format: a manifest with index files has format 2, which a binary
//     that reads only format 1 refuses (ErrNewerFormat) instead of seeing a
//     queue without its older records. A store written before has format-1
//     manifests with long tails; its first commit moves the tail into one
//     index file (of the level its length is worth). STORE keeps format 1.
//   - The YTsaurus backend (ytstore) keeps its queue in a table and is
//     unchanged.
//
// Snapshot lifetime. Every Snapshot, and every Tx (for its Begin state),
// holds a lease on its generation from Snapshot/Begin to Release/Commit/
// Abort:
//
//   - in a process, the snapshots of one generation share one lease with a
//     reference count;
//   - across processes, the lease is a file in leases/ that the process
//     keeps open with an exclusive flock(2); cleanup keeps every generation
//     whose lease file is locked, and removes lease files it can lock (their
//     process is gone).
//   - Lease time and renewal: a lease has no expiry and needs no renewal.
//     It lasts until the last Release in the process, or until the process
//     ends (the kernel drops its flocks, even after kill -9), so an
//     hour-long export, a paused process or a slow disk never loses a file,
//     and a crashed reader's files are freed by the next cleanup. A time
//     lease would expire under exactly those readers. The cost of a leaked
//     Snapshot (never released) is disk: its files stay until its process
//     exits; Store.Leases lists every live lease with its process and age.
//   - A lease is taken under a shared flock on LOCK, so CURRENT cannot move
//     and cleanup cannot run between reading the generation and locking its
//     lease file. Taking a snapshot waits for a commit in progress (it holds
//     LOCK exclusive for the rename and a cleanup: milliseconds).
//   - Readers without a lease (a binary from before leases, or a process
//     that cannot write the store directory: it logs a warning) are
//     protected by Options.RetainFor only: 10 minutes after their
//     generation was replaced, by default. Leases need flock on the store's
//     file system (local file systems; not every network one).
//
// Concurrency: a Store and its Snapshots may be used from many goroutines. A
// Tx is for one goroutine, except that the RowWriters it hands out may be
// written concurrently (one writer per goroutine).
package local
