// Package local is the embedded Pillar store: tables as Parquet files in a
// directory, committed atomically.
//
// Layout of a store directory:
//
//	STORE                       {"format":1,"partitions":P,...}  written once by Create
//	CURRENT                     name of the current manifest      replaced by rename: the commit point
//	LOCK                        flock(2) held while a commit runs
//	manifests/m-<gen>.json      the state at generation gen: tables → files, attributes,
//	                            export-queue segments, consumed ids
//	data/<gen>-<n>-<rand>.parquet   immutable data files (tables and queue segments)
//	tx/<id>/                    staging of an open transaction (holds tx/<id>/.lock)
//	leases/<gen>-<pid>-<rand>.lease  a snapshot lease: flock(2) held by the reading process
//
// Invariants:
//
//   - Data files and manifests are immutable once written; a file is never
//     rewritten in place. Every file a manifest names is fsynced before the
//     manifest is written, and the manifest before CURRENT is replaced.
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
//   - Readers read a Snapshot: one manifest and the immutable files it names.
//     A snapshot stays readable while commits happen, however long it is
//     held, until Release (see "Snapshot lifetime" below).
//   - Cleanup (Store.Cleanup) is the only code that removes data files. It
//     runs under LOCK at Open, every few commits, and when called (the
//     garbage collection of a compaction is a Cleanup after the compacting
//     commit). It removes files that no retained manifest names. A manifest
//     is retained when it is current, one of the newest
//     Options.RetainManifests, replaced less than Options.RetainFor ago, or
//     leased by a live snapshot of any process.
//   - Staging directories of transactions whose process died (their .lock is
//     not held) are removed by cleanup; an aborted Tx removes its own.
//   - Checksums: every data file's size and CRC32C (Castagnoli, 8 hex
//     digits) are in the manifest entry that names it, computed while the
//     file is written. A Store checks a file (its whole content) the first
//     time it opens it for a read, for table reads and queue reads alike; a
//     mismatch is an error wrapping pillar.ErrCorrupt that names the table
//     (or queue partition) and the file, and no row of that file is
//     returned. A Store remembers the files it checked (they are
//     immutable), so damage done to a file after a Store read it is found by
//     the next Store (the next command) or by Verify (pillar verify), which
//     always reads everything and also checks the Parquet footer and row
//     counts.
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
