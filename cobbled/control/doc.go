// Package control is the control plane: it orders batches per partition,
// keeps the serving nodes and the partition -> replica assignment, and
// records how far every replica has applied its partition's log. Batches
// themselves live in the object store; the control plane only knows that
// they exist and in which order each partition must apply them.
//
// # Pieces
//
//   - Store: the durable state in SQL, one schema on two backends: SQLite
//     (modernc.org/sqlite, one file, the embedded default) and PostgreSQL
//     (pgx v5 via database/sql). Migrations are versioned in the code
//     (migrations.go) and recorded in schema_migrations.
//   - Server: the controlpb.Control gRPC service over a Store, with a
//     background loop (Run) that detects down nodes, reassigns, and
//     garbage-collects.
//   - Client: the Go client (Dial) used by lorry, serving nodes, the router
//     and the CLI.
//   - Assign: the pure, deterministic assignment function (rendezvous
//     hashing with zone spreading).
//
// # Invariants
//
// Batch log. RegisterBatch assigns the next sequence number of the batch's
// partition: seqs are 1, 2, 3, … with no gap, also under concurrent
// registrations, because the seq is taken from the partition row under its
// row lock in the same transaction as the insert (SQLite: every write
// transaction is BEGIN IMMEDIATE). Registration is idempotent by batch id:
// the same id and the same manifest (byte-identical canonical JSON) answer
// the original seq; the same id with another manifest fails with
// ErrConflict. The manifest is validated (batch.Manifest.Validate) and its
// partition count must equal the recorded P (ErrPartitions).
//
// Ordering. The control plane, not its callers, keeps bulk and
// incremental delivery in order: a snapshot whose manifest supersedes
// export-queue offsets beyond the highest queue_end of the partition's
// registered deltas (partitions.delivered_end) is refused with
// ErrNotDelivered, which is retryable once Lorry has delivered them. The
// stored (and listed) manifest carries its Seq and Parent, assigned here;
// identity for idempotent registration ignores those two fields.
//
// Retraction. RetractBatch marks a batch bad (with a reason); it keeps its
// seq and id, is listed with Retracted set, replicas skip it, and it is never
// a garbage-collection floor.
//
// Faults. ReportFault records a replica's fault ("corrupt batch <id>: …",
// serving; or "corrupt replica: …", not serving). A replica not serving is
// StateCorrupt in routing (routers skip it), its progress is reset (it
// rebuilds from the log), and the routing version moves.
//
// Object store record. With an Objects that can write (internal/objstore),
// the server writes Seq and Parent into each registered batch's
// manifest.json (after the commit; the GC loop finishes what a crash left)
// and a retracted.txt next to a retracted one, so Store.RebuildFromObjects
// (`pillar control rebuild --from-objstore`) can rebuild the log of a lost
// database.
//
// Integrity at open. An SQLite database's write-ahead log is inspected
// before SQLite recovers it (damage or truncation SQLite would silently
// drop committed transactions for) and PRAGMA quick_check runs; a damaged
// database is refused with ErrDamaged naming the file
// (StoreOptions.SkipIntegrityCheck skips both).
//
// P. The partition count is given on first start and recorded in the
// database; a later start with a different P is refused (ErrPartitions).
//
// Long poll. ListBatches with a wait returns as soon as a batch after the
// caller's seq exists; GetRouting with a known version and a wait returns
// as soon as the routing version moves past it. Waiters are woken by an
// in-process notifier. On PostgreSQL, Server.Run also LISTENs for the
// notifications every registration and routing change sends (pg_notify in
// the writing transaction), so several control-plane instances may share
// one database and each one's waiters hear of every instance's writes; after
// the listening connection is lost and re-established, every waiter is woken
// to re-read. An SQLite file belongs to one instance.
//
// Nodes. A node registers (id, address, zone) and heartbeats. A node whose
// last heartbeat is older than DownAfter is "down": it keeps its
// assignment but routers skip it. Older than ReassignAfter it is "gone" and
// its partitions are reassigned (Assign over the nodes that are not gone).
// Heartbeat ages count from the control plane's own start at the earliest,
// so restarting the control plane does not declare every node gone, and
// from the last time a heartbeat or a reconcile could not reach the store,
// so heartbeats lost in a database outage do not mark every node down when
// it ends. A
// heartbeat from a down or gone node makes it up again immediately.
//
// Assignment. Each partition gets min(3, nodes) replicas on distinct nodes,
// in as many distinct zones as possible, chosen by rendezvous hashing: when
// one node joins, only the new node enters replica sets (replacing at most
// one replica each); when one leaves, only the partitions it held change,
// each by one replacement. The assignment is stored and versioned: the
// routing version increases whenever the assignment, a node's address or
// zone, or a node's state changes (not when replicas report progress).
//
// Progress. ReportApplied(node, partition, seq) requires a registered node,
// an existing seq (1..newest) and a seq not below the recorded one
// (ErrBackwards); repeating the same seq is a no-op.
//
// Publications (issue 18; publications.go). A publication is a (chunk
// version, model) pair made servable, id pillar.EmbedVersionID(cv, model);
// "" is the legacy unnamed one. Every batch names its publication
// (batch.Manifest.Publication); the log stays one per partition and
// interleaves them. A publication is registered by RegisterPublication
// (`pillar publish --serve`) or by the first batch naming it: live at once
// when nothing is live, else a candidate promoted by itself once ready. At
// most one is live, one previous and one candidate: Promote makes the
// candidate (or a named retained one) live, the live one previous and
// retires the previous one; it refuses a publication not ready (ErrNotReady,
// naming the lagging replicas) unless forced. Rollback swaps live and
// previous (ErrNoPrevious lists what is retained); a second Rollback rolls
// forward. Each is one transaction that bumps the routing version.
// BaseSeq[p] is the publication's oldest retained snapshot of p and Ready
// means every assigned replica of every partition has applied it; both are
// derived from the batches and progress on every read, never stored. A
// replica HOLDS P on p iff P is not retired, BaseSeq[p] > 0 and its
// AppliedSeq >= BaseSeq[p] (Publication.Holds): routers use exactly this
// rule. The routing version also moves when a snapshot is registered and
// when a replica passes a snapshot of a publication that is not retired,
// so routers learn new holders without polling progress.
//
// Garbage collection. When every replica assigned to a partition has
// applied a snapshot batch, every earlier batch of that partition is
// collected: it is no longer listed and its objects are deleted (through
// Objects) — except what a publication that is not retired needs: for each
// one, its newest snapshot every assigned replica applied (or, with none,
// its first live batch) and everything after it stays, so collection never
// takes a live, previous or candidate publication's base snapshot or its
// later deltas (gcprop_test.go checks this against random histories). A
// retired publication's batches go once RetireGrace has passed and every
// assigned replica has moved past them, leaving holes replicas skip. Partitions without assigned replicas are not collected. A
// replica behind the collected floor (say, a new one) is listed the batches
// from the oldest live one, which is then a snapshot that replaces its
// contents. Collected rows stay (marked) so a collected id keeps its seq.
// Marking and reassignment take the same cluster lock, so a replica being
// assigned is counted before batches it needs are collected.
//
// Availability. A database that cannot be reached at start is an error
// naming it (wrapping ErrUnavailable). If it goes away while running,
// calls fail with gRPC Unavailable (ErrUnavailable on the client) and the
// server keeps running; calls succeed again once it returns (database/sql
// reconnects).
//
// Decommissioning. RemoveNode forgets a node that is not up (or any node,
// with force) and its progress, and reassigns its partitions at once.
//
// Security. RegisterBatch, RegisterNode, Heartbeat, ReportApplied,
// RemoveNode, RetractBatch, ReportFault, RegisterPublication, Promote,
// Rollback and Retire need
// "authorization: Bearer <token>"; reads do not. TLS is optional.
//
// Concurrency. Store, Server and Client are safe for concurrent use. Assign
// is a pure function.
package control
