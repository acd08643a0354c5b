// Package chaos tests the whole Pillar write-and-serve path under faults, the
// way storage systems test themselves: it records what was committed,
// injects faults, and checks that every replica converges to it.
//
// Run starts on 127.0.0.1, as child processes of the pillar binary: the
// control plane on a fresh PostgreSQL database (dropped after), the S3
// server (versitygw), Options.Nodes cobbled nodes and Lorry. Each child's
// object-store traffic goes through its own S3Proxy; each node reaches the
// control plane through a TCPProxy and is reached by readers through
// another, so a node can be cut off from everything. Node data directories
// are tmpfs mounts (root only) so one can be filled up.
//
// During the fault phase a writer commits adds, updates and deletes to an
// embedded store (pillar/local) as export-queue records, logging each to
// committed.log. A put's record carries the writer's global sequence number
// in UpdatedAtMs, so every value read names the commit that wrote it.
// Readers read through the hedging router and from each node directly. The
// fault schedule comes from Schedule(seed, …): every kind once, then seeded
// picks, one fault at a time, each healed before the next. The
// corrupt-object fault registers a batch whose SST is damaged while its
// manifest's size and SHA-256 match (a file corrupted before it was hashed);
// replicas must refuse it before ingest, and its heal retracts it (the
// documented repair), after which its partition moves on.
//
// When the phase ends every fault is healed, every process is running, and
// Run waits until Lorry delivered the whole queue and every replica applied
// its partition's newest batch. Then the checks:
//
//  1. every key on every node shows its last committed state (value or
//     absent);
//  2. no read (router or direct) returned a value that was not committed
//     with exactly that content;
//  3. per (node, key), direct reads never went back to an older version
//     (absent after a value needs a later committed delete);
//  4. per partition the registered batches' queue ranges form a chain
//     [0, end) with no overlap (a batch applied twice) and no gap (skipped),
//     end equals what the writer enqueued, and every replica applied the
//     newest batch.
//
// # Invariants
//
// Run is not safe to call twice concurrently with the same Dir. Every child
// runs in its own process group and is killed (SIGKILL to the group) before
// Run returns, also on failure; mounts are unmounted and the database
// dropped. All waits are bounded. A child that exits without being killed by
// a fault is restarted by a supervisor and counted in Summary.Crashes.
// Readers against one node issue one request at a time, so their
// observations are ordered.
package chaos
