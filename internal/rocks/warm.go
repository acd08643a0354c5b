package rocks

// #cgo CXXFLAGS: -std=c++17 -O2
// #cgo LDFLAGS: -lrocksdb -lstdc++
// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"unsafe"

	"github.com/linxGnu/grocksdb"
)

// Warming new files into the block cache. RocksDB 7.8 starts every
// ingested and every compacted file cold (prepopulate_block_cache warms
// flushes only): a delta that overwrites served keys moves their newest
// versions into uncached blocks, and an L0 compaction rewrites the whole
// partition into new files, so the reads after it miss the cache. The
// Warmer reads such a file through a table reader that shares the
// database's table factory (so its block cache) before readers can see
// it. Block cache keys in 7.8 are derived from the file's own table
// properties (the writer's session id and file number), not from where the
// file lives, so blocks read from a staged file are hits once the file is
// ingested (TestWarmer checks it).
//
// It needs two things the C API does not have (a C++ shim, warm.cc):
// rocksdb::SstFileReader with a chosen table factory, and an
// EventListener (OnTableFileCreated runs on the compaction thread once an
// output file is written and before the compaction is installed).
//
// Warmed blocks are taken back when their file goes: the warming reader's
// block cache is a wrapper that records the keys of the blocks it inserts
// or finds, and when RocksDB deletes the file (OnTableFileDeleted: a
// compaction's input; a staged delta is followed to its ingested name
// through OnExternalFileIngested) those keys are erased. 7.8 leaves a
// deleted file's blocks in the cache until LRU evicts them: with four
// partitions compacted every ~2 s and the data filling most of the cache,
// stale blocks pushed out the warm ones (data-block hit ratio 0.65 with
// warming, 0.55 without, in `pillar bench ingest` at its 256 MiB cache). The
// shim reaches the C++ Options through grocksdb's handle, whose layout
// (c.cc's rocksdb_options_t) NewWarmer checks against grocksdb's own
// getter before using it.

// Warmer warms SST files into the block cache of the databases opened with
// the options it was created for. It is safe for concurrent use.
type Warmer struct {
	mu      sync.RWMutex // guards c: Destroy takes it exclusively
	c       *C.pillar_warmer
	maxFile int64
}

// WarmStats count the Warmer's work.
type WarmStats struct {
	// Files, Bytes and Failed count WarmFile calls (bytes of keys and values
	// read).
	Files, Bytes, Failed uint64
	// CompactionFiles and CompactionBytes count warmed compaction outputs;
	// CompactionSkipped those over the size limit, CompactionFailed those
	// that could not be read.
	CompactionFiles, CompactionBytes, CompactionSkipped, CompactionFailed uint64
	// ErasedBlocks counts the blocks of warmed files erased from the cache
	// when RocksDB deleted the file (or DropDir dropped it); TrackedFiles
	// is how many warmed files' blocks are known now.
	ErasedBlocks, TrackedFiles uint64
}

// NewWarmer returns a Warmer for databases opened with o, whose table
// factory (block cache included) must already be set; it reads as o's
// databases do (o's Env and direct-reads setting). It adds a listener to o
// (o must not have opened a database yet; call it once per Options) that
// erases warmed files' blocks when RocksDB deletes the files and, with
// compactions, warms each compaction's output files before the compaction
// is installed while their total stays within maxFile bytes (a budget per
// compaction: one that rewrites a large partition writes many files). The caller destroys the Warmer after the
// databases are closed (o keeps its listener until o is destroyed).
func NewWarmer(o *grocksdb.Options, compactions bool, maxFile int64) (*Warmer, error) {
	if maxFile < 0 {
		return nil, fmt.Errorf("rocks: warm: max file %d is negative", maxFile)
	}
	h, err := optionsHandle(o)
	if err != nil {
		return nil, err
	}
	var flag C.int
	if compactions {
		flag = 1
	}
	c := C.pillar_warmer_create(h, flag, C.ulonglong(maxFile))
	if c == nil {
		return nil, errors.New("rocks: warm: could not create the warmer (out of memory)")
	}
	return &Warmer{c: c, maxFile: maxFile}, nil
}

// optionsHandle returns o's rocksdb_options_t: grocksdb keeps it as the
// unexported first field of Options. The field is checked by name and type,
// and the C++ struct behind it by reading back a setting grocksdb reports
// through its own getter.
func optionsHandle(o *grocksdb.Options) (unsafe.Pointer, error) {
	f, ok := reflect.TypeOf(grocksdb.Options{}).FieldByName("c")
	if !ok || f.Offset != 0 || f.Type.Kind() != reflect.Pointer || f.Type.Elem().Name() != "_Ctype_struct_rocksdb_options_t" {
		return nil, errors.New("rocks: warm: grocksdb.Options no longer starts with its rocksdb_options_t handle (grocksdb upgraded?)")
	}
	h := *(*unsafe.Pointer)(unsafe.Pointer(o))
	if h == nil {
		return nil, errors.New("rocks: warm: options already destroyed")
	}
	if got, want := uint64(C.pillar_options_l0_trigger(h)), uint64(o.GetLevel0FileNumCompactionTrigger()); got != want {
		return nil, fmt.Errorf("rocks: warm: the C++ options read L0 trigger %d, grocksdb says %d: rocksdb_options_t's layout differs from RocksDB 7.8's", got, want)
	}
	return h, nil
}

// TimeDBMutex makes the statistics of o (EnableStatistics must have been
// called) time every DB mutex acquisition of the databases opened with it
// (StatsLevel kAll: the ticker rocksdb.db.mutex.wait.micros), at the cost
// of a clock read around each one. A diagnostic: whether reads wait on the
// mutex that IngestExternalFile and compaction installs hold. The C API of
// 7.8 has no setter for the level.
func TimeDBMutex(o *grocksdb.Options) error {
	h, err := optionsHandle(o)
	if err != nil {
		return err
	}
	if C.pillar_options_time_mutex(h) == 0 {
		return errors.New("rocks: time DB mutex: the options have no statistics (EnableStatistics first)")
	}
	return nil
}

// statsLevel returns o's StatsLevel (-1 without statistics), for tests.
func statsLevel(o *grocksdb.Options) int {
	h, err := optionsHandle(o)
	if err != nil {
		return -2
	}
	return int(C.pillar_options_stats_level(h))
}

// WarmFile reads every block of the SST at path into the block cache,
// verifying block checksums on the way, and returns the bytes of keys and
// values read. Call it for a file about to be ingested, so that its blocks
// are hits from the moment the data is visible.
func (w *Warmer) WarmFile(path string) (int64, error) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.c == nil {
		return 0, errors.New("rocks: warm: warmer destroyed")
	}
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	var n C.ulonglong
	var msg [512]C.char
	if C.pillar_warmer_warm_file(w.c, cs, &n, &msg[0], C.size_t(len(msg))) == 0 {
		return 0, fmt.Errorf("rocks: warm %s: %s", path, C.GoString(&msg[0]))
	}
	return int64(n), nil
}

// MaxFile is the Warmer's budget per compaction; callers of WarmFile apply
// it as the largest file they warm.
func (w *Warmer) MaxFile() int64 { return w.maxFile }

// Stats returns the Warmer's counters (zero once destroyed).
func (w *Warmer) Stats() WarmStats {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.c == nil {
		return WarmStats{}
	}
	var s C.pillar_warm_stats
	C.pillar_warmer_stats(w.c, &s)
	return WarmStats{Files: uint64(s.files), Bytes: uint64(s.bytes), Failed: uint64(s.failed),
		CompactionFiles: uint64(s.compaction_files), CompactionBytes: uint64(s.compaction_bytes),
		CompactionSkipped: uint64(s.compaction_skipped), CompactionFailed: uint64(s.compaction_failed),
		ErasedBlocks: uint64(s.erased_blocks), TrackedFiles: uint64(s.tracked_files)}
}

// DropDir erases from the cache the blocks of every warmed file under dir
// (a database generation the caller closed and is deleting: RocksDB sends
// no deletion events for files it does not delete itself). It does nothing
// once the Warmer is destroyed.
func (w *Warmer) DropDir(dir string) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.c == nil {
		return
	}
	cs := C.CString(strings.TrimSuffix(dir, "/") + "/")
	defer C.free(unsafe.Pointer(cs))
	C.pillar_warmer_drop(w.c, cs)
}

// Destroy frees the Warmer; it is safe to call more than once, and
// concurrently with the other methods (which then do nothing, or fail).
// Options (and databases) that hold its listener keep it alive until they
// are destroyed themselves.
func (w *Warmer) Destroy() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.c != nil {
		C.pillar_warmer_destroy(w.c)
		w.c = nil
	}
}
