// Package ytstore is the YTsaurus backend of the Pillar store: the
// pillar.Store interface over a yt.Client (go.ytsaurus.tech/yt/go v0.0.33),
// in one Cypress directory, the store root.
//
// Layout under the root R:
//
//	R                                  map node; @pillar_format, @pillar_partitions, @pillar_created
//	R/<table>                          a store table ("docs", "chunks/<cv>", "embeddings/<cv>/<model>",
//	                                   "subsets/<name>", "tmp/…"): a static table whose schema is
//	                                   schema.Infer of the row type (SchemaFor), strict, sorted by
//	                                   WriteOptions.SortedBy when given (key columns first);
//	                                   @pillar_row_type (Go type) and @pillar_generation (the commit
//	                                   that last changed it). '/' in a name makes map nodes.
//	R/_pillar/generation               document node: the generation of the last commit; the commit lock
//	R/_pillar/attrs/<name>             one document node per pillar attribute: a string holding its JSON
//	                                   (the name %-escaped: "lorry/partition/p00001" is
//	                                   "lorry%2Fpartition%2Fp00001")
//	R/_pillar/queue/p<partition:05d>   the export queue: one static table of ExportRecord per partition;
//	                                   row index = offset
//	R/_pillar/consumed/<id>            one document node per consumed input id (opaque map node)
//	R/_pillar/staging/<tx id>/w<n>     the rows of one RowWriter of an open transaction (opaque)
//
// Table names "_pillar" and "_pillar/…" are reserved. jobs.YTOptions with
// Root R names the same Cypress paths for the jobs' inputs and outputs.
//
// Transactions. A Tx is two YTsaurus master transactions: a snapshot
// transaction its reads go through (the state at Begin, below) and the
// master transaction every change is made in, which jobs.YT runs operations
// in (Tx.YTTx, jobs.YTTxer). A RowWriter writes its own staging table inside
// the master transaction, so writers never contend for a lock and keep
// their open order. Commit then:
//
//  1. takes an exclusive, waitable lock on R/_pillar/generation in the
//     master transaction (the commit lock: commits of one store run one at
//     a time from here to their end) and reads the generation g;
//  2. checks conflicts: every table the Tx writes or drops, or that an
//     operation in its master transaction wrote (its id or
//     @content_revision differs from the committed one), and every
//     attribute it sets, deletes or expects, must still be the node it was
//     at Begin at the same @revision; otherwise ErrConflict naming it.
//     Under the commit lock the committed state cannot move meanwhile;
//  3. puts tables in place: a single replacing writer's staging table is
//     moved over the table; several writers, or an append, are joined by
//     an ordered merge operation (writers in open order, after the old rows
//     for an append); drops remove the table; sets @pillar_row_type and
//     @pillar_generation = g+1;
//  4. creates or replaces (or removes) the attribute documents;
//  5. appends each partition's records to its queue table, offsets from the
//     table's row count read under the commit lock (dense, in commit order;
//     appends never conflict);
//  6. creates the consumed-id documents, removes the staging directory,
//     sets the generation to g+1 and commits the master transaction.
//
// Everything of a commit becomes visible at the master transaction's commit
// or not at all; an aborted or crashed Tx (the transaction times out when
// its pings stop) leaves nothing, operation outputs included. Lock
// conflicts YTsaurus reports (an operation of another transaction holding a
// table) are returned as ErrConflict naming the node.
//
// Snapshots. Snapshot starts a transaction, reads the whole store state in
// one `get` of R with attributes (tables, attribute values, queue row
// counts, the generation: the master answers a get atomically), takes
// snapshot locks on every table and on the consumed-id directory, then
// reads the tree again: a node whose committed @revision did not move was
// not changed before its lock, so the lock pinned what the first read saw
// (else it starts over, Options.SnapshotAttempts times; commits that only
// change attributes or the queue never force a retry). Tables are read by node id inside
// the snapshot transaction, so a table replaced or dropped since still
// reads as it was. Queue tables are append-only: rows below the snapshot's
// row count are read outside the transaction. Release aborts the snapshot
// transaction. Changes made to the store's nodes other than through a
// Commit (by hand, or an operation in a transaction of its own) do not move
// the generation and are outside these guarantees.
//
// Observability: Options.Logger (debug lines per commit and snapshot
// retry) and Store.Stats (snapshots, retries, commits, conflicts, merges,
// commit-lock waits).
//
// Concurrency: a Store and its Snapshots may be used from many goroutines.
// A Tx is for one goroutine, except that its RowWriters may be written
// concurrently, one writer per goroutine.
//
// What YTsaurus checks that the embedded store does not: rows written
// under WriteOptions.SortedBy must be sorted (the write fails otherwise),
// also across the writers of one table and after the rows an append keeps
// (the ordered merge at commit fails with a sort order violation), and an
// operation that appends unsorted rows to a table with a sorted schema
// fails. Schemas are strict (SchemaFor): a column of a nil-able Go type
// ([]byte, slices, maps, pointers) is optional, every other one required.
// The tests run the store on the FAKE cluster jobs/ytfake, which enforces
// these rules, the implicit locks and their conflicts (a lock conflict
// becomes ErrConflict through conflictErr) and transaction timeouts. The
// job binary: see jobs/cmd/pillar-job and docs/ytsaurus.md.
package ytstore
