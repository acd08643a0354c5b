// Package pace paces a serving node's ingest so that bulk loads do not
// disturb its reads: a byte-rate limiter with two classes of traffic and an
// adaptive mode driven by the node's own read latency.
//
// # Classes and buckets
//
// Every ingested byte passes Wait (or a Reader) with a Class. Two token
// buckets, each allowing debt (a request larger than the burst waits in
// proportion, never fails):
//
//	cap       Options.Rate, every byte (deltas and snapshots), node-wide;
//	          unlimited when Rate is 0
//	adaptive  the adaptive rate, for Bulk bytes (snapshots); unlimited
//	          unless the adaptive mode has slowed it
//
// Fresh bytes (deltas: they carry the freshness the serving tier promises)
// wait only for the cap; they are charged to the adaptive bucket too, so
// bulk loads yield to them, but that debt is bounded by one 256 KiB read
// chunk, so under a steady delta stream a snapshot still moves at about
// half the adaptive rate or more (each of its chunks waits at most one
// extra chunk's time).
//
// # Adaptive mode
//
// With Options.TargetP99 set, the node reports every read's latency to
// Observe (a lock-free log-linear histogram, ±6%), and every
// Options.Interval, Step takes the p99 of the last Options.Windows
// intervals together (a sliding window, 2 s by default) and of the last
// interval alone:
//
//	p99 > target, last > target,        rate = max(MinRate, rate × 1/2)
//	bulk bytes passed                   (from unlimited: half the bulk
//	                                    bytes/s of the interval)
//	p99 > target, last ≤ target         hold (the slow reads in the window
//	                                    were blamed once already)
//	p99 ≤ target, bulk bytes passed     rate × 1.25 (× 2 when p99 ≤ target/2
//	                                    and no ambient p99 is in force);
//	                                    at MaxRate (or Rate when set) back
//	                                    to unlimited
//	fewer than MinSamples reads, or     hold (and with no bulk, forget the
//	no bulk bytes in the interval       ambient p99, below)
//
// so the controller never blames bulk ingest for a slow interval it took
// no part in (deltas alone once drove the rate to the floor before any
// snapshot came), and keeps what it learnt across idle spells (ingest comes in
// bursts); from the floor, doubling reaches 1 GiB/s in 9 intervals. The
// sliding window is there because at a few hundred reads a second one
// interval's p99 is its slowest read or two: judged alone, every such
// read halved the rate, and on a quiet machine a paced 1 GiB snapshot
// moved at 45 MB/s for 24 s where unpaced it took 2 s and cost the reads
// less (`pillar bench ingest`, 20:03 UTC, load 2.9).
//
// A floor that does not help is left: after Options.FloorWindows windows
// in a row at MinRate with the p99 still over the target, bulk ingest is
// not what keeps the p99 up (the machine is busy, or deltas, which are
// never slowed, are). The median of those windows' own p99s (not the
// sliding ones: a single stall would be in several) becomes the ambient
// p99 (Stats.Ambient), and the rules above judge by max(target, 1.25 ×
// ambient) instead of the target, so bulk grows back while it adds less
// than a quarter to the p99 the node has anyway and is halved again when
// it adds more; the first window whose p99 is back at the target, or with no
// bulk bytes, forgets the ambient p99. Without this, a snapshot during a delta stream crawled
// at the floor for as long as the stream lasted (155 s for 1 GiB in one
// `pillar bench ingest` run).
// While an ambient p99 is in force, the rate grows no higher than
// Options.AmbientMaxRate (4 × MinRate by default) and never back to
// unlimited: within 1.25 × ambient is a loose test on a p99 that other work
// already raises and that moves ±50% between windows, and it let a 1 GiB
// snapshot beside a delta stream climb back to 360 MB/s, where the reads'
// p50 doubled (`pillar bench ingest`, 23:02 UTC).
//
// # CPU, not only bytes
//
// Bytes per second bound the download's CPU (copy, SHA-256) but not every
// burst: a snapshot file's block verification is one long C call over the
// whole file. While the adaptive mode is on, Bulk work is deprioritised
// (LowPriority): the caller runs such a call under RunLow (a thread of its
// own at nice 19 and idle I/O class, destroyed afterwards), and a paced
// Reader of class Bulk yields its P after every read. Go code is never run
// at a lowered thread priority: a thread the kernel keeps waiting would
// hold one of the process's Ps (GOMAXPROCS) and delay the reads.
//
// Ps, not only threads: while the adaptive mode is on, bulk ingest's CPU
// work (each snapshot chunk's copy and hash) holds one of
// Options.CPUSlots slots (CPU; GOMAXPROCS − 1 by default), so a snapshot
// never keeps every P busy: Go's scheduler picks up a request that has
// arrived on the network only when a P looks for work, or from sysmon
// every 10 ms at most. Fresh work takes no slot: bounded as well, four
// partitions' deltas sharing one slot on a CPU-starved machine fell 4.8 s
// behind during a snapshot.
//
// # Time and concurrency
//
// All waiting and the control loop use Options.Clock (internal/clock; the
// wall clock by default), so tests drive them with clock.Fake. A Limiter is safe for
// concurrent use; Observe is wait-free. Nothing here knows about RocksDB
// or Prometheus: the node reads Stats.
package pace
