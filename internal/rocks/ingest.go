package rocks

import (
	"fmt"

	"github.com/linxGnu/grocksdb"
)

// Keeping ingest off the read path: what RocksDB 7.8.3 (through grocksdb
// v1.7.15's C API) offers, what the serving node uses, and why. Sources:
// the installed /usr/include/rocksdb/options.h (7.8.3), RocksDB's
// db/external_sst_file_ingestion_job.cc (AssignLevelAndSeqnoForIngestedFile,
// AssignGlobalSeqnoForIngestedFile), its c.cc (rocksdb_options_set_ratelimiter),
// util/threadpool_imp.cc (a lowered pool's threads call ioprio_set with
// class 3, IOPRIO_CLASS_IDLE) and port/port_posix.cc (SetCpuPriority: kLow
// is nice 19), and the wiki pages "Creating and Ingesting SST files" and
// "Rate Limiter" (github.com/facebook/rocksdb/wiki). The idle I/O class only
// matters under an I/O scheduler that honours it (BFQ; not "none").
//
//	option                          snapshot  delta  why
//	move_files                      true      true   the staged, verified file is linked into the DB,
//	                                                 not copied: no second write of the batch. RocksDB
//	                                                 reopens and fsyncs the linked file itself
//	                                                 (Prepare), so the file is durable whatever the
//	                                                 caller did; the node's own fsync of the staged
//	                                                 file makes that second sync cheap
//	allow_blocking_flush            false     false  the node writes nothing through the memtable, so
//	                                                 a flush is never needed; should one ever be, the
//	                                                 ingest fails (and is retried) instead of
//	                                                 stalling behind a flush
//	allow_global_seqno              false     true   a snapshot goes into a fresh, empty generation:
//	                                                 no overlap, so RocksDB places its files at the
//	                                                 lowest level that fits (Lmax) with seqno 0;
//	                                                 needing a global seqno would mean the generation
//	                                                 was not empty, which must fail. A delta
//	                                                 overwrites keys and needs one.
//	snapshot_consistency            default   default the node takes no snapshots, so ingest never
//	                                                 has to force a global seqno because of one
//	ingest_behind                   not used         requires allow_ingest_behind since the DB's
//	                                                 creation, which reserves Lmax for ingest-behind
//	                                                 files and disables some compression
//	                                                 optimizations; it keeps existing values over
//	                                                 ingested ones, the opposite of a delta's
//	                                                 meaning. A fresh generation already gets the
//	                                                 same placement (Lmax, seqno 0) for a snapshot.
//	fail_if_not_bottommost_level    n/a              7.8 has it, the C API (so grocksdb) does not;
//	                                                 allow_global_seqno=false gives the snapshot
//	                                                 check that matters
//	write_global_seqno              n/a (true)       7.8's default writes a delta's seqno into the
//	                                                 moved file (8 bytes and an fsync per file); no
//	                                                 C API setter
//	verify_checksums_before_ingest  n/a              no C API setter in 7.8; block checksums are
//	                                                 the node's own verification step
//	prepopulate_block_cache         n/a              7.8 warms flushed blocks only (kFlushOnly):
//	(table option)                                   ingested and compacted files start cold, so a
//	                                                 delta that overwrites hot keys moves them into
//	                                                 uncached blocks, and each L0 compaction does it
//	                                                 again for the whole partition. Measured with
//	                                                 `pillar bench ingest`: MultiGet time per read
//	                                                 doubles while deltas stream; nothing in 7.8's
//	                                                 ingest options avoids it
//
// Compaction after ingest: a snapshot at Lmax in its own generation never
// needs compacting. Deltas land in L0 (they overlap the data) and RocksDB
// schedules automatic compaction after each ingest once L0 reaches its
// trigger. Background configures that compaction: RocksDB's
// GenericRateLimiter caps flush and compaction writes (the only I/O it
// limits in 7.8; compaction requests are low priority in it), shared by
// every partition database of the node because they share one Options;
// the LOW thread pool (compactions) runs at nice 19 and I/O class idle;
// bytes_per_sync smooths write-back so compaction output does not arrive
// at the disk in one burst. Not available in 7.8's C API: per-call
// priorities for manual compaction, runtime changes of the rate limiter
// (SetBytesPerSecond), an auto-tuned limiter.

// IngestOptions returns the IngestExternalFile options for a snapshot
// (into a fresh, empty database) or a delta (into the live one), as the
// table above says. The caller destroys them.
func IngestOptions(snapshot bool) *grocksdb.IngestExternalFileOptions {
	o := grocksdb.NewDefaultIngestExternalFileOptions()
	o.SetMoveFiles(true)
	o.SetAllowBlockingFlush(false)
	o.SetAllowGlobalSeqNo(!snapshot)
	return o
}

// Background configures the background work (compaction) of serving
// databases.
type Background struct {
	// CompactionRate caps flush and compaction writes, in bytes per second,
	// of every database opened with the options (RocksDB's rate limiter,
	// one for all of them). The default value 0 is unlimited.
	CompactionRate int64
	// NormalPriority keeps compaction threads at normal CPU and I/O
	// priority. The default value false lowers them (nice 19, I/O class
	// idle). Priorities belong to the process's default Env: every database
	// of the process that uses it is affected.
	NormalPriority bool
	// BytesPerSync makes compaction output written back every this many
	// bytes. The default value is 1 MiB.
	BytesPerSync uint64
	// L0CompactionTrigger, when positive, is the number of L0 files (one
	// per ingested delta) that starts a compaction, instead of the
	// caller's setting (cobbled: 8). A compaction of L0 rewrites the whole
	// small partition into new, uncached files, so a higher trigger means
	// fewer such rewrites and less write amplification, at the cost of a
	// bloom-filter probe per L0 file per read key. It must stay below the
	// slowdown trigger (cobbled: 40).
	L0CompactionTrigger int
}

// Validate checks the configuration.
func (b Background) Validate() error {
	if b.CompactionRate < 0 {
		return fmt.Errorf("rocks: compaction rate %d is negative", b.CompactionRate)
	}
	if b.L0CompactionTrigger < 0 || b.L0CompactionTrigger >= 40 {
		return fmt.Errorf("rocks: L0 compaction trigger %d: want 1..39 (below the slowdown trigger), or 0 for the default", b.L0CompactionTrigger)
	}
	return nil
}

// Apply sets the configuration on o. Nothing is left for the caller to
// free: the options hold the rate limiter by shared pointer (c.cc's
// rocksdb_options_set_ratelimiter copies it), so the Go-side handle is
// destroyed here; the Env wrapper moves into o (grocksdb's SetEnv), which
// frees it in Destroy, and the default Env itself is never freed.
func (b Background) Apply(o *grocksdb.Options) {
	if b.BytesPerSync == 0 {
		b.BytesPerSync = 1 << 20
	}
	o.SetBytesPerSync(b.BytesPerSync)
	if b.L0CompactionTrigger > 0 {
		o.SetLevel0FileNumCompactionTrigger(b.L0CompactionTrigger)
	}
	if b.CompactionRate > 0 {
		rl := grocksdb.NewRateLimiter(b.CompactionRate, 100_000, 10)
		o.SetRateLimiter(rl)
		rl.Destroy()
	}
	if !b.NormalPriority {
		env := grocksdb.NewDefaultEnv()
		env.LowerThreadPoolCPUPriority()
		env.LowerThreadPoolIOPriority()
		o.SetEnv(env)
	}
}
