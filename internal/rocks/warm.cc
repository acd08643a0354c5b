// Block-cache warming of new SST files: RocksDB 7.8 warms flushed blocks
// only (prepopulate_block_cache=kFlushOnly), and its C API has neither an
// event listener nor an SST reader. See warm.go.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "rocksdb/iterator.h"
#include "rocksdb/listener.h"
#include "rocksdb/options.h"
#include "rocksdb/sst_file_reader.h"
#include "rocksdb/table.h"

#include "shim.h"

namespace {

// The layout of c.cc's rocksdb_options_t in RocksDB 7.8.3 (the installed
// librocksdb-dev): a struct holding one Options. warm.go checks that the
// handle it passes is grocksdb's, and TestWarmer that the options read
// through it are the ones grocksdb set.
struct c_options {
  rocksdb::Options rep;
};

char* dup_status(const rocksdb::Status& s) {
  std::string msg = s.ToString();
  char* out = static_cast<char*>(std::malloc(msg.size() + 1));
  std::memcpy(out, msg.c_str(), msg.size() + 1);
  return out;
}

// warm_file reads every block of the SST at path through a table reader of
// factory tf, filling its block cache. Block cache keys come from the
// file's table properties (the writer's session id and file number), so
// they are the keys the database's own reader uses once the file is
// ingested or installed.
rocksdb::Status warm_file(const std::shared_ptr<rocksdb::TableFactory>& tf,
                          const std::string& path, uint64_t* bytes) {
  rocksdb::Options o;
  o.table_factory = tf;
  rocksdb::SstFileReader r(o);
  rocksdb::Status s = r.Open(path);
  if (!s.ok()) {
    return s;
  }
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  ro.fill_cache = true;
  std::unique_ptr<rocksdb::Iterator> it(r.NewIterator(ro));
  uint64_t n = 0;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    n += it->key().size() + it->value().size();
  }
  if (bytes != nullptr) {
    *bytes = n;
  }
  return it->status();
}

struct Counters {
  std::atomic<uint64_t> files{0}, bytes{0}, skipped{0}, failed{0};
};

// WarmListener warms each compaction output file when RocksDB has finished
// writing it: OnTableFileCreated runs on the compaction thread (the LOW
// pool, nice 19 / idle I/O unless Background.NormalPriority) before the
// compaction's result is installed, so readers never see the file cold.
class WarmListener : public rocksdb::EventListener {
 public:
  WarmListener(std::shared_ptr<rocksdb::TableFactory> tf, uint64_t max_file)
      : tf_(std::move(tf)), max_file_(max_file) {}

  const char* Name() const override { return "PillarWarmListener"; }

  void OnTableFileCreated(const rocksdb::TableFileCreationInfo& info) override {
    if (info.reason != rocksdb::TableFileCreationReason::kCompaction ||
        !info.status.ok()) {
      return;
    }
    if (info.file_size > max_file_) {
      c.skipped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    uint64_t n = 0;
    if (!warm_file(tf_, info.file_path, &n).ok()) {
      // Only the cache misses out: the file itself is RocksDB's to judge.
      c.failed.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    c.files.fetch_add(1, std::memory_order_relaxed);
    c.bytes.fetch_add(info.file_size, std::memory_order_relaxed);
  }

  Counters c;

 private:
  std::shared_ptr<rocksdb::TableFactory> tf_;
  uint64_t max_file_;
};

}  // namespace

struct pillar_warmer {
  std::shared_ptr<rocksdb::TableFactory> tf;
  std::shared_ptr<WarmListener> listener;  // null: compactions not warmed
  Counters files;                          // WarmFile calls
};

extern "C" pillar_warmer* pillar_warmer_create(void* opts, int compactions,
                                               unsigned long long max_file) {
  auto* o = static_cast<c_options*>(opts);
  auto* w = new pillar_warmer;
  w->tf = o->rep.table_factory;
  if (compactions) {
    w->listener = std::make_shared<WarmListener>(w->tf, max_file);
    o->rep.listeners.push_back(w->listener);
  }
  return w;
}

extern "C" void pillar_warmer_destroy(pillar_warmer* w) { delete w; }

extern "C" char* pillar_warmer_warm_file(pillar_warmer* w, const char* path,
                                         unsigned long long* bytes) {
  uint64_t n = 0;
  rocksdb::Status s = warm_file(w->tf, path, &n);
  if (!s.ok()) {
    w->files.failed.fetch_add(1, std::memory_order_relaxed);
    return dup_status(s);
  }
  w->files.files.fetch_add(1, std::memory_order_relaxed);
  w->files.bytes.fetch_add(n, std::memory_order_relaxed);
  if (bytes != nullptr) {
    *bytes = n;
  }
  return nullptr;
}

extern "C" void pillar_warmer_stats(pillar_warmer* w, pillar_warm_stats* out) {
  out->files = w->files.files.load(std::memory_order_relaxed);
  out->bytes = w->files.bytes.load(std::memory_order_relaxed);
  out->failed = w->files.failed.load(std::memory_order_relaxed);
  if (w->listener) {
    const Counters& c = w->listener->c;
    out->compaction_files = c.files.load(std::memory_order_relaxed);
    out->compaction_bytes = c.bytes.load(std::memory_order_relaxed);
    out->compaction_skipped = c.skipped.load(std::memory_order_relaxed);
    out->compaction_failed = c.failed.load(std::memory_order_relaxed);
  }
}

extern "C" unsigned long long pillar_options_l0_trigger(void* opts) {
  return static_cast<c_options*>(opts)->rep.level0_file_num_compaction_trigger;
}
