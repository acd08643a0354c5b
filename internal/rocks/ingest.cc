// IngestExternalFileOptions fields that RocksDB 7.8's C API has no setter
// for (see ingest.go).
#include "rocksdb/options.h"

#include "shim.h"

namespace {

// The layout of c.cc's rocksdb_ingestexternalfileoptions_t in RocksDB
// 7.8.3: a struct holding one IngestExternalFileOptions. ingest.go reads
// back the fields grocksdb set before it sets any through this.
struct c_ingest_options {
  rocksdb::IngestExternalFileOptions rep;
};

}  // namespace

extern "C" unsigned pillar_ingest_flags(void* opts) {
  const auto& o = static_cast<c_ingest_options*>(opts)->rep;
  return (o.move_files ? 1u : 0u) | (o.snapshot_consistency ? 2u : 0u) |
         (o.allow_global_seqno ? 4u : 0u) | (o.allow_blocking_flush ? 8u : 0u) |
         (o.ingest_behind ? 16u : 0u) | (o.write_global_seqno ? 32u : 0u) |
         (o.verify_checksums_before_ingest ? 64u : 0u) |
         (o.fail_if_not_bottommost_level ? 128u : 0u);
}

extern "C" void pillar_ingest_set(void* opts, int write_global_seqno,
                                  int fail_if_not_bottommost_level) {
  auto& o = static_cast<c_ingest_options*>(opts)->rep;
  o.write_global_seqno = write_global_seqno != 0;
  o.fail_if_not_bottommost_level = fail_if_not_bottommost_level != 0;
}
