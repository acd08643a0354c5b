// Package lorry delivers Pillar's export queue to the serving tier: it reads
// each partition's queue records, accumulates them into a delta batch (one
// SST, newest record of a key wins, deletes become tombstones), uploads the
// batch to the object store, registers it with the control plane and only
// then advances the partition's committed offset.
//
// # State
//
// Everything Lorry remembers lives in store attributes it alone writes, so
// its commits never conflict with backfills or publishes:
//
//	lorry/store-id             random id, set once; part of every batch id
//	lorry/partition/p00007     PartitionState: offset, pending batch, lease
//	lorry/worker/<id>          WorkerState: a live worker's heartbeat
//
// # Delivery
//
// A batch of partition p covers queue offsets [first, last] and is named
// BatchID(store-id, p, first, last) = "lorry-<sid>-p00007-<first>-<last>".
// It moves through four steps, each a retried, idempotent operation:
//
//	1 pending   CAS  {offset: first, pending: nil} → {offset: first, pending: [first,last]}
//	2 upload    manifest already there? use it. Else build the SST, upload its
//	            files, then manifest.json, each as a conditional create
//	3 register  control plane RegisterBatch(manifest): idempotent by id
//	4 commit    CAS  {pending: [first,last]} → {offset: last+1, pending: next}
//
// where next is the following batch when the records read meanwhile already
// make one (the queue is busy): it is then recorded in the same commit, which
// replaces its step 1, and its SST files are built and uploaded while that
// commit runs (its manifest.json only after). A busy partition thus costs one
// store commit per batch, and building overlaps committing. A batch planned
// when no commit runs (no follow-up) likewise builds and uploads its files
// while its step 1 commits; a failed background upload counts as the first
// attempt of step 2 (retried after the backoff).
//
// Invariants:
//
//   - The committed offset moves only after the batch covering the offsets
//     below it is registered (at-least-once), and a batch id is always the
//     same offsets, so a retry after a crash at any point registers the same
//     batch again, which the control plane answers with the original
//     sequence number (exactly-once in effect).
//   - Step 1 fixes the batch's range before its manifest is written: a worker
//     that takes a partition over finishes the recorded pending batch first,
//     so two registered batches never cover the same offsets, whichever
//     worker was slow. A worker that lost its lease (Owner or Token changed)
//     fails every later CAS and stops; at worst it registers the pending id
//     again, which is a no-op.
//   - An object is never replaced: SST names are unique by content and every
//     Put is a conditional create. Files of a crashed upload that a retry
//     rebuilt under new names are orphans; Cleanup removes them after a grace
//     period.
//   - Backpressure: besides the batch in flight, a partition holds at most
//     MaxBatchBytes (or MaxBatchRecords) of records read ahead, all
//     partitions of a worker together at most MaxBufferedBytes (plus one
//     record each), and a partition reads nothing more while a step is being
//     retried; a failing step is retried with exponential backoff forever
//     (while the lease is kept alive), so records are delayed, never dropped.
//
// # Priority lanes
//
// Export records carry a priority (pillar.PriorityFresh: crawl updates and
// policy deletes; PriorityBulk: republishes; "" counts as fresh). Per
// partition, Lorry keeps two positions: Offset (every record below it is
// delivered, or superseded) and Fresh (every fresh record below it is
// delivered). A head scan reads the records' heads without their values
// (pillar.QueueHeadReader) past any bulk backlog, so fresh records behind
// 200k bulk ones are found at once. Batches are of three lanes:
//
//	ordinary  [O, Last]: the bulk records of the range (minus those a
//	          fresh record of the same key supersedes: one delivered, or
//	          one queued and not delivered yet — it lies beyond the range,
//	          so it is newer) and any fresh record not delivered yet.
//	          Commit: O = Last+1, F = max(F, Last+1). Manifest queue range
//	          [O, Last+1). A range with nothing left (only delivered fresh
//	          records, superseded bulk ones) becomes a refresh: the newest
//	          delivered record of each of its keys again. A bulk batch may
//	          carry FreshLast: the fresh records of [max(F, Last+1),
//	          FreshLast] ride along (FreshRideWait, below); its commit
//	          moves F past them.
//	fresh     the fresh records of [F, Last]. Commit: F = Last+1. No queue
//	          range: the bulk records around them are not delivered.
//	replay    `pillar lorry replay`: for each key of a delivered range, its
//	          newest delivered record. Commit: no position moves.
//
// The fresh lane has a slot of its own (FreshPending beside Pending), so
// fresh delivery never waits for bulk work: an ordinary batch's SST is
// built and uploaded in the background while the partition's loop goes on
// building, uploading, registering and committing fresh batches; once its
// files are up and its pending record is committed, the background upload
// writes its manifest and registers it too (the loop retries what failed),
// and the loop commits it (before the next fresh batch). A fresh commit
// records the next due fresh batch as FreshPending (its files upload
// meanwhile), so steady fresh traffic costs one store commit per batch.
// The loop itself (reads, plans, state commits) is one goroutine per
// partition.
//
// Per-key order (no replica ever sees a key go back to an older record):
//
//   - A bulk batch never reaches past the first undelivered fresh record,
//     so it never holds a bulk record newer than an undelivered fresh one
//     of its key.
//   - A bulk record older than a fresh record of its key, delivered or
//     queued, is left out (the fresh one supersedes it).
//   - A fresh batch holds no key of the ordinary batch in flight until
//     that batch is registered: it ends before the first fresh record of
//     such a key, which waits for the registration. So an ordinary batch
//     and a fresh batch in flight together never share a key, and their
//     registration order does not matter. No fresh batch is planned while
//     one is recorded (FreshPending): the fresh position does not count
//     its records yet, and the bulk lane stops at its range.
//   - Within a batch the newest record of a key wins.
//   - A worker that takes a partition over (or restarts) delivers a
//     recorded FreshPending first, then the recorded Pending: an ordinary
//     batch whose manifest is not written yet is read again by the rule
//     above (its supersession then includes the fresh batch, committed);
//     one whose manifest is written was built without the fresh batch's
//     keys.
//
// What was delivered out of order is learnt again at takeover by scanning
// the heads of [O, F).
//
// Bulk slows first: while a replica of the partition lags more than
// MaxReplicaLag batches (read from the control plane every ReplicaPoll),
// bulk batches wait and fresh ones continue, except that bulk keeps
// BulkMinShare of the recently delivered bytes, so it never starves. While
// fresh records flow, bulk also waits while MaxBulkUnapplied (2) of the
// partition's bulk batches are registered and not applied on every replica:
// a replica applies a partition's batches in order, so a fresh record waits
// there behind every bulk batch registered before it, and this keeps that
// queue short. MaxBulkUnappliedTotal (off by default) bounds the same over
// all the worker's partitions together: a replica applies a few batches at
// a time across its partitions, so a fresh record also waits behind other
// partitions' bulk batches.
//
// Fresh records ride along with bulk batches (FreshRideWait): while the
// bulk lane is delivering records of their publication, fetched fresh
// records wait (at most FreshRideWait after their commit) for the next bulk
// batch, which carries every fetched fresh record, recorded as
// Pending.FreshLast (batch id CombinedBatchID); its commit moves F past
// them. Every batch costs a build, an upload, a registration and an apply
// on each replica, so fresh traffic then adds bytes, not batches. The
// riders are a prefix of the undelivered fresh records (nothing rides while
// a fresh batch is recorded), beyond the bulk range and so newer than its
// records of their keys; no fresh batch is planned while a batch carrying
// fresh records flies — for at most twice the ride wait, or twice the time
// a bulk batch now takes to be uploaded (Stats.FlightTime; at most 8 times
// the ride wait): a bulk batch not uploaded by then (a hanging upload,
// build slots busy with other partitions' bulk work) gives its riders back
// to the fresh lane (its
// Pending becomes the plain batch of the same range, the flight restarts
// without them, the bulk lane is cut back before them). Latency and loss
// are still accounted by each record's priority. While
// fresh records flow, bulk batches close at FreshBulkBatchBytes and the
// bulk lane reads at most ~1 MiB between two looks at the fresh lane. The
// worker follows its batches until every replica applied them: latency by
// priority to registration and to application everywhere, and the loss
// counter (a record not applied everywhere LossAfter, or BulkLossAfter for
// bulk, after its commit counts once).
//
// # Leases
//
// Each partition has one writer at a time: the worker named in its state
// while ExpiresMS lies ahead. Every state write renews the lease, and an idle
// partition renews it every LeaseTTL/3. Workers heartbeat under
// lorry/worker/<id>; each takes free or lapsed partitions up to
// ceil(partitions / live workers) and gives back any above that share, so
// work spreads as workers come and go. A worker that dies loses its leases
// LeaseTTL after its last renewal; a clean stop gives them back at once.
//
// # Concurrency
//
// A Worker runs one goroutine per held partition (plus, while one is in
// flight, the background upload of its ordinary batch), a balancer and a group
// committer (the state changes of all its partitions that are queued while
// one store commit runs go into the next one); at most Options.Parallelism
// partitions build and upload at the same time, and the loops share one
// store snapshot per half poll interval. Run and Drain are each called at
// most once per Worker; Stats may be called from any goroutine. Several
// workers, in one process or many, may share a store, object store and
// control plane.
package lorry
