package rocks

// #include "shim.h"
import "C"

import (
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"unsafe"

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
//	fail_if_not_bottommost_level    true      false  not in 7.8's C API; set through the C++ shim
//	                                                 (ingest.cc): a snapshot that would not land
//	                                                 at the bottom level fails instead of being
//	                                                 placed above it
//	write_global_seqno              false     false  not in 7.8's C API; set through the shim. A
//	                                                 delta's global seqno is then kept in the
//	                                                 MANIFEST only, instead of also being written
//	                                                 into the moved file (an in-place write and one
//	                                                 more fsync per file, at every ingest); such
//	                                                 files need RocksDB ≥ 5.16 to be read, which
//	                                                 every reader of a serving database is
//	verify_checksums_before_ingest  false     false  RocksDB's own check reads every block again;
//	                                                 the node verifies every block itself before
//	                                                 ingest (internal/sstverify)
//	prepopulate_block_cache         n/a              7.8 warms flushed blocks only (kFlushOnly):
//	(table option)                                   ingested and compacted files start cold, so a
//	                                                 delta that overwrites hot keys moves them into
//	                                                 uncached blocks, and each L0 compaction does it
//	                                                 again for the whole partition (measured with
//	                                                 `pillar bench ingest`: MultiGet time per read
//	                                                 doubled while deltas streamed). Warmer
//	                                                 (warm.go, a C++ shim) reads a staged delta
//	                                                 into the cache before ingest (7.8's cache keys
//	                                                 come from the file's properties, so they stay
//	                                                 valid once the file is ingested) and each
//	                                                 compaction output before it is installed
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
	if h := ingestHandle(o, snapshot); h != nil {
		var bottom C.int
		if snapshot {
			bottom = 1
		}
		C.pillar_ingest_set(h, 0, bottom)
	}
	return o
}

// Bits of pillar_ingest_flags (shim.h).
const (
	ingestMove               = 1
	ingestSnapshotConsist    = 2
	ingestAllowGlobalSeqno   = 4
	ingestAllowBlocking      = 8
	ingestBehind             = 16
	ingestWriteGlobalSeqno   = 32
	ingestVerifyBeforeIngest = 64
	ingestFailIfNotBottom    = 128
)

// ingestHandle returns o's rocksdb_ingestexternalfileoptions_t, the
// unexported first field of grocksdb's struct, once the C++ struct behind
// it reads back every flag IngestOptions and RocksDB 7.8's defaults set;
// nil otherwise (a grocksdb or RocksDB that lays it out differently: the
// shim's fields are then left at their defaults, and TestIngestOptions
// fails).
func ingestHandle(o *grocksdb.IngestExternalFileOptions, snapshot bool) unsafe.Pointer {
	f, ok := reflect.TypeOf(grocksdb.IngestExternalFileOptions{}).FieldByName("c")
	if !ok || f.Offset != 0 || f.Type.Kind() != reflect.Pointer || f.Type.Elem().Name() != "_Ctype_struct_rocksdb_ingestexternalfileoptions_t" {
		return nil
	}
	h := *(*unsafe.Pointer)(unsafe.Pointer(o))
	want := C.uint(ingestMove | ingestSnapshotConsist | ingestWriteGlobalSeqno)
	if !snapshot {
		want |= ingestAllowGlobalSeqno
	}
	if h == nil || C.pillar_ingest_flags(h) != want {
		layoutWarning.Do(func() {
			slog.Warn("rocks: IngestExternalFileOptions read back differently through the C++ shim (grocksdb or RocksDB upgraded?): " +
				"write_global_seqno stays true (one more write and fsync per ingested file) and fail_if_not_bottommost_level false")
		})
		return nil
	}
	return h
}

var layoutWarning sync.Once

// ingestFlags reads o's flags back through the shim (for tests).
func ingestFlags(o *grocksdb.IngestExternalFileOptions) uint {
	return uint(C.pillar_ingest_flags(*(*unsafe.Pointer)(unsafe.Pointer(o))))
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
	// NoWarm leaves new files cold in the block cache. By default (NewWarmer)
	// a delta's staged files are read into the cache before they are
	// ingested, and each compaction output file before the compaction is
	// installed (on the compaction thread): reads of overwritten keys and
	// of a freshly compacted partition then hit the cache (warm.go).
	NoWarm bool
	// TimeDBMutex times the databases' DB mutex waits in their statistics
	// (TimeDBMutex; a diagnostic). The default value false does not.
	TimeDBMutex bool
	// WarmMaxFile is the most bytes warmed per compaction, and the largest
	// delta file warmed: more would evict more hot blocks than it brings
	// in. The default value 0 is a quarter of the block cache.
	WarmMaxFile int64
}

// Validate checks the configuration.
func (b Background) Validate() error {
	if b.CompactionRate < 0 {
		return fmt.Errorf("rocks: compaction rate %d is negative", b.CompactionRate)
	}
	if b.L0CompactionTrigger < 0 || b.L0CompactionTrigger >= 40 {
		return fmt.Errorf("rocks: L0 compaction trigger %d: want 1..39 (below the slowdown trigger), or 0 for the default", b.L0CompactionTrigger)
	}
	if b.WarmMaxFile < 0 {
		return fmt.Errorf("rocks: warm max file %d is negative", b.WarmMaxFile)
	}
	return nil
}

// NewWarmer returns the Warmer b asks for on o, whose table factory uses a
// block cache of cacheBytes: compaction outputs and WarmFile's files up to
// WarmMaxFile (default cacheBytes/4) are warmed. With NoWarm it returns
// nil. Call it after Apply and before o opens a database; the caller
// destroys the Warmer after closing the databases.
func (b Background) NewWarmer(o *grocksdb.Options, cacheBytes int64) (*Warmer, error) {
	if b.NoWarm {
		return nil, nil
	}
	limit := b.WarmMaxFile
	if limit == 0 {
		limit = cacheBytes / 4
	}
	return NewWarmer(o, true, limit)
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
