// Package netns runs the Pillar serving tier across Linux network
// namespaces, one per host, and checks its promises under network faults:
// cuts between zones, a router losing its own zone, a node losing only the
// object store, the control plane or its PostgreSQL going away, random
// packet loss, and a host vanishing.
//
// # The cluster
//
// A bridge (pn<id>br, 10.<id>.0.1/24, the harness's own address in the
// root namespace) links the hosts, each a namespace pn<id>-<name> with one
// veth link and one address: ctl (the control plane and a PostgreSQL of its
// own: initdb in the run's folder as the postgres user, listening on that
// address only), s3 (versitygw), proc (Lorry and the one-shot commands:
// sst build, promote, remove-node), rt (the router, zone a), cl (the
// reader, zone a: the harness dials from it with setns on a locked OS
// thread), and n1, n2, n3 (cobbled nodes of zones a, b and c; n4 is the
// spare that replaces a vanished host). Components reach each other only
// at those addresses, never over loopback; every gRPC hop is mutual TLS
// with certificates from a local CA (tlsconf.DevCerts) and per-role
// control-plane tokens; the metrics ports are plaintext (--insecure).
//
// Faults are iptables rules in a chain PILLAR that each namespace hooks
// into INPUT and OUTPUT: DROP to and from a peer's address (a cut: the
// other side sees silence and must time out), or DROP with the statistic
// match (random loss). A heal flushes the chain. tc netem is not used.
//
// # Data and history
//
// The harness publishes snapshots itself (a snapshot export of every key,
// built, uploaded and registered by `pillar sst build` on the proc host)
// and a writer commits puts and deletes as export-queue records of the
// live publication to the embedded store Lorry delivers from. Every value
// names its publication (ChunkerVersion) and its write (UpdatedAtMs); the
// history keeps, per publication and key, every write with its SHA-256
// and whether its commit is known to have succeeded. The reader reads
// batches of 12 keys through the router. The checks:
//
//  1. every answer is a value published for that key in the publication
//     the response names (an absent key needs a delete of it there);
//  2. no batch mixes versions: every value of a response belongs to the
//     publication the response names;
//  3. after the heals, every replica of a partition holding a publication
//     that is not retired has the checksum of the whole key range
//     (cobbled's GET /checksum, over one RocksDB snapshot) that the
//     committed writes give, and the same as every other replica; a
//     replica that differs is read key by key and the partition, the
//     replica and the differing keys' range are named;
//  4. per partition the registered delta batches cover the queue offsets
//     [0, end) exactly once in order and end is what the writer committed:
//     with check 3, every Lorry record is applied on every replica exactly
//     once in effect;
//  5. each scenario's own promise (no failed read where it promises none,
//     a bounded catch-up, the p99 bound under loss, ...), and a scenario
//     that exercised nothing fails it.
//
// # Invariants
//
// Run needs root, ip and iptables (Available says what is missing). Every
// process runs in its own process group, is killed before Run returns and
// dies with the harness (Pdeathsig); the namespaces and the bridge are
// deleted on return, on failure too, and a later run with the same NetID
// first removes what a killed run left. Scenarios run one at a time, each
// healed and converged before the next; all waits are bounded. Run is not
// safe to call twice concurrently with the same NetID or Dir.
package netns
