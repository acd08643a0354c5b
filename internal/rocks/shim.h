// C entry points of the package's C++ shim: warm.cc (warm.go) and
// ingest.cc (ingest.go).
#ifndef PILLAR_ROCKS_SHIM_H
#define PILLAR_ROCKS_SHIM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pillar_warmer pillar_warmer;

typedef struct pillar_warm_stats {
  unsigned long long files, bytes, failed;
  unsigned long long compaction_files, compaction_bytes, compaction_skipped,
      compaction_failed;
  unsigned long long erased_blocks, tracked_files;
} pillar_warm_stats;

pillar_warmer* pillar_warmer_create(void* opts, int compactions,
                                    unsigned long long max_file);
void pillar_warmer_destroy(pillar_warmer* w);
void pillar_warmer_drop(pillar_warmer* w, const char* prefix);
// Returns 1, or 0 with the reason in msg (msg_len > 0 bytes, NUL-ended).
int pillar_warmer_warm_file(pillar_warmer* w, const char* path,
                            unsigned long long* bytes, char* msg,
                            size_t msg_len);
void pillar_warmer_stats(pillar_warmer* w, pillar_warm_stats* out);
unsigned long long pillar_options_l0_trigger(void* opts);
// Sets the options' statistics to StatsLevel::kAll (DB mutex waits timed);
// 0 when the options have no statistics.
int pillar_options_time_mutex(void* opts);
// The options' StatsLevel, or -1 without statistics (for tests).
int pillar_options_stats_level(void* opts);

// The first bools of IngestExternalFileOptions, as bits: move_files 1,
// snapshot_consistency 2, allow_global_seqno 4, allow_blocking_flush 8,
// ingest_behind 16, write_global_seqno 32, verify_checksums_before_ingest
// 64, fail_if_not_bottommost_level 128.
unsigned pillar_ingest_flags(void* opts);
void pillar_ingest_set(void* opts, int write_global_seqno,
                       int fail_if_not_bottommost_level);

#ifdef __cplusplus
}
#endif

#endif
