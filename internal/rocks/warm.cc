// Block-cache warming of new SST files: RocksDB 7.8 warms flushed blocks
// only (prepopulate_block_cache=kFlushOnly), and its C API has neither an
// event listener nor an SST reader. See warm.go.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "rocksdb/cache.h"
#include "rocksdb/iterator.h"
#include "rocksdb/listener.h"
#include "rocksdb/options.h"
#include "rocksdb/sst_file_reader.h"
#include "rocksdb/statistics.h"
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

// copy_status writes s's message, cut to fit, into buf (n > 0 bytes).
void copy_status(const rocksdb::Status& s, char* buf, size_t n) {
  std::string msg;
  try {
    msg = s.ToString();
  } catch (...) {
    msg = "error (no memory for its message)";
  }
  size_t m = std::min(msg.size(), n - 1);
  std::memcpy(buf, msg.data(), m);
  buf[m] = 0;
}

// RecordingCache is the block cache a warming reader sees: every call goes
// to the real cache, and the keys of the blocks it inserts or finds are
// recorded, so the file's blocks can be erased once RocksDB deletes it.
class RecordingCache : public rocksdb::Cache {
 public:
  explicit RecordingCache(std::shared_ptr<rocksdb::Cache> t) : t_(std::move(t)) {}

  std::vector<std::string> Take() {
    std::lock_guard<std::mutex> l(mu_);
    return std::move(keys_);
  }

  const char* Name() const override { return t_->Name(); }
  rocksdb::Status Insert(const rocksdb::Slice& key, void* value, size_t charge,
                         DeleterFn deleter, Handle** handle,
                         Priority priority) override {
    Record(key);
    return t_->Insert(key, value, charge, deleter, handle, priority);
  }
  rocksdb::Status Insert(const rocksdb::Slice& key, void* value,
                         const CacheItemHelper* helper, size_t charge,
                         Handle** handle, Priority priority) override {
    Record(key);
    return t_->Insert(key, value, helper, charge, handle, priority);
  }
  Handle* Lookup(const rocksdb::Slice& key, rocksdb::Statistics* stats) override {
    Handle* h = t_->Lookup(key, stats);
    if (h != nullptr) {
      Record(key);
    }
    return h;
  }
  Handle* Lookup(const rocksdb::Slice& key, const CacheItemHelper* helper,
                 const CreateCallback& create_cb, Priority priority, bool wait,
                 rocksdb::Statistics* stats) override {
    Handle* h = t_->Lookup(key, helper, create_cb, priority, wait, stats);
    if (h != nullptr) {
      Record(key);
    }
    return h;
  }
  bool Ref(Handle* h) override { return t_->Ref(h); }
  bool Release(Handle* h, bool erase_if_last_ref) override {
    return t_->Release(h, erase_if_last_ref);
  }
  bool Release(Handle* h, bool useful, bool erase_if_last_ref) override {
    return t_->Release(h, useful, erase_if_last_ref);
  }
  void* Value(Handle* h) override { return t_->Value(h); }
  void Erase(const rocksdb::Slice& key) override { t_->Erase(key); }
  uint64_t NewId() override { return t_->NewId(); }
  void SetCapacity(size_t c) override { t_->SetCapacity(c); }
  void SetStrictCapacityLimit(bool s) override { t_->SetStrictCapacityLimit(s); }
  bool HasStrictCapacityLimit() const override { return t_->HasStrictCapacityLimit(); }
  size_t GetCapacity() const override { return t_->GetCapacity(); }
  size_t GetUsage() const override { return t_->GetUsage(); }
  size_t GetOccupancyCount() const override { return t_->GetOccupancyCount(); }
  size_t GetTableAddressCount() const override { return t_->GetTableAddressCount(); }
  size_t GetUsage(Handle* h) const override { return t_->GetUsage(h); }
  size_t GetPinnedUsage() const override { return t_->GetPinnedUsage(); }
  size_t GetCharge(Handle* h) const override { return t_->GetCharge(h); }
  DeleterFn GetDeleter(Handle* h) const override { return t_->GetDeleter(h); }
  void DisownData() override { t_->DisownData(); }
  void ApplyToAllEntries(
      const std::function<void(const rocksdb::Slice& key, void* value,
                               size_t charge, DeleterFn deleter)>& callback,
      const ApplyToAllEntriesOptions& opts) override {
    t_->ApplyToAllEntries(callback, opts);
  }
  void EraseUnRefEntries() override { t_->EraseUnRefEntries(); }
  std::string GetPrintableOptions() const override { return t_->GetPrintableOptions(); }
  bool IsReady(Handle* h) override { return t_->IsReady(h); }
  void Wait(Handle* h) override { t_->Wait(h); }
  void WaitAll(std::vector<Handle*>& hs) override { t_->WaitAll(hs); }

 private:
  void Record(const rocksdb::Slice& key) {
    std::lock_guard<std::mutex> l(mu_);
    keys_.emplace_back(key.data(), key.size());
  }

  std::shared_ptr<rocksdb::Cache> t_;
  std::mutex mu_;
  std::vector<std::string> keys_;
};

// Tracker holds the block cache keys of every warmed file by path, so that
// RocksDB deleting the file (a compaction's input) erases its blocks: 7.8
// leaves a deleted file's blocks in the cache until LRU evicts them, and a
// partition compacted every few seconds would otherwise fill the cache with
// stale blocks that push the warm ones out.
class Tracker {
 public:
  explicit Tracker(std::shared_ptr<rocksdb::Cache> cache) : cache_(std::move(cache)) {}

  void Add(const std::string& path, std::vector<std::string> keys) {
    std::lock_guard<std::mutex> l(mu_);
    auto& v = files_[path];
    v.insert(v.end(), std::make_move_iterator(keys.begin()),
             std::make_move_iterator(keys.end()));
  }

  // Rename follows a staged file that RocksDB ingested under a new name.
  void Rename(const std::string& from, const std::string& to) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = files_.find(from);
    if (it == files_.end()) {
      return;
    }
    auto keys = std::move(it->second);
    files_.erase(it);
    auto& v = files_[to];
    v.insert(v.end(), std::make_move_iterator(keys.begin()),
             std::make_move_iterator(keys.end()));
  }

  // Drop erases the blocks of the files whose path starts with prefix (one
  // file, or every file under a directory ending in '/').
  void Drop(const std::string& prefix) {
    std::vector<std::string> keys;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto it = files_.begin(); it != files_.end();) {
        if (it->first.compare(0, prefix.size(), prefix) == 0) {
          keys.insert(keys.end(), std::make_move_iterator(it->second.begin()),
                      std::make_move_iterator(it->second.end()));
          it = files_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (const auto& k : keys) {
      cache_->Erase(k);
    }
    erased.fetch_add(keys.size(), std::memory_order_relaxed);
  }

  size_t Files() {
    std::lock_guard<std::mutex> l(mu_);
    return files_.size();
  }

  const std::shared_ptr<rocksdb::Cache>& cache() const { return cache_; }

  std::atomic<uint64_t> erased{0};

 private:
  std::shared_ptr<rocksdb::Cache> cache_;
  std::mutex mu_;
  std::unordered_map<std::string, std::vector<std::string>> files_;
};

// warm_file reads every block of the SST at path through a table reader of
// factory tf, filling its block cache. Block cache keys come from the
// file's table properties (the writer's session id and file number), so
// they are the keys the database's own reader uses once the file is
// ingested or installed. With a tracker, the reader's cache records the
// keys and the tracker keeps them under path.
rocksdb::Status warm_file(const rocksdb::Options& src, Tracker* tracker,
                          const std::string& path, uint64_t* bytes) {
  const std::shared_ptr<rocksdb::TableFactory>& tf = src.table_factory;
  rocksdb::Options o;
  o.table_factory = tf;
  // Read as the databases do: their Env (file system) and direct reads.
  o.env = src.env;
  o.use_direct_reads = src.use_direct_reads;
  std::shared_ptr<RecordingCache> rec;
  if (tracker != nullptr) {
    const auto* bbto = tf->GetOptions<rocksdb::BlockBasedTableOptions>();
    if (bbto != nullptr && bbto->block_cache == tracker->cache()) {
      rocksdb::BlockBasedTableOptions copy = *bbto;
      rec = std::make_shared<RecordingCache>(tracker->cache());
      copy.block_cache = rec;
      o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(copy));
    }
  }
  rocksdb::Status s;
  {
    rocksdb::SstFileReader r(o);
    s = r.Open(path);
    if (s.ok()) {
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
      s = it->status();
    }
  }  // the reader (and its handles on rec) is gone before rec's keys are taken
  if (rec) {
    std::vector<std::string> keys = rec->Take();
    if (!keys.empty()) {
      tracker->Add(path, std::move(keys));
    }
  }
  return s;
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
  WarmListener(const rocksdb::Options& src, std::shared_ptr<Tracker> tracker,
               bool compactions, uint64_t max_bytes)
      : tracker_(std::move(tracker)), compactions_(compactions),
        max_bytes_(max_bytes) {
    src_.table_factory = src.table_factory;
    src_.env = src.env;
    src_.use_direct_reads = src.use_direct_reads;
  }

  const char* Name() const override { return "PillarWarmListener"; }

  void OnExternalFileIngested(rocksdb::DB*,
                              const rocksdb::ExternalFileIngestionInfo& info) override {
    try {
      if (tracker_) {
        tracker_->Rename(info.external_file_path, info.internal_file_path);
      }
    } catch (...) {
    }
  }

  void OnTableFileDeleted(const rocksdb::TableFileDeletionInfo& info) override {
    try {
      if (tracker_ && info.status.ok()) {
        tracker_->Drop(info.file_path);
      }
    } catch (...) {
    }
  }

  // The budget is per compaction, not per file: a compaction that
  // rewrites a large partition writes many files each under the limit.
  void OnCompactionBegin(rocksdb::DB*, const rocksdb::CompactionJobInfo& ci) override {
    try {
      std::lock_guard<std::mutex> l(mu_);
      budget_[ci.job_id] = max_bytes_;
    } catch (...) {
    }
  }

  void OnCompactionCompleted(rocksdb::DB*, const rocksdb::CompactionJobInfo& ci) override {
    try {
      std::lock_guard<std::mutex> l(mu_);
      budget_.erase(ci.job_id);
    } catch (...) {
    }
  }

  void OnTableFileCreated(const rocksdb::TableFileCreationInfo& info) override {
    if (!compactions_ ||
        info.reason != rocksdb::TableFileCreationReason::kCompaction ||
        !info.status.ok()) {
      return;
    }
    try {
      {
        std::lock_guard<std::mutex> l(mu_);
        auto it = budget_.find(info.job_id);
        uint64_t left = it == budget_.end() ? max_bytes_ : it->second;
        if (info.file_size > left) {
          c.skipped.fetch_add(1, std::memory_order_relaxed);
          if (it != budget_.end()) {
            it->second = 0;  // this compaction's later files stay cold too
          }
          return;
        }
        if (it != budget_.end()) {
          it->second = left - info.file_size;
        }
      }
      uint64_t n = 0;
      if (!warm_file(src_, tracker_.get(), info.file_path, &n).ok()) {
        // Only the cache misses out: the file itself is RocksDB's to judge.
        c.failed.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      c.files.fetch_add(1, std::memory_order_relaxed);
      c.bytes.fetch_add(info.file_size, std::memory_order_relaxed);
    } catch (...) {
      c.failed.fetch_add(1, std::memory_order_relaxed);
    }
  }

  Counters c;

 private:
  rocksdb::Options src_;  // table factory, env and direct reads of the databases
  std::shared_ptr<Tracker> tracker_;  // null: no block cache to track
  bool compactions_;
  uint64_t max_bytes_;  // warmed per compaction at most
  std::mutex mu_;
  std::unordered_map<int, uint64_t> budget_;  // by compaction job id
};

}  // namespace

struct pillar_warmer {
  rocksdb::Options src;  // table factory, env and direct reads of the databases
  std::shared_ptr<Tracker> tracker;  // null when the factory has no block cache
  std::shared_ptr<WarmListener> listener;
  Counters files;  // WarmFile calls
};

extern "C" pillar_warmer* pillar_warmer_create(void* opts, int compactions,
                                               unsigned long long max_bytes) {
  try {
    auto* o = static_cast<c_options*>(opts);
    std::unique_ptr<pillar_warmer> w(new pillar_warmer);
    w->src.table_factory = o->rep.table_factory;
    w->src.env = o->rep.env;
    w->src.use_direct_reads = o->rep.use_direct_reads;
    const auto* bbto = w->src.table_factory
                           ? w->src.table_factory->GetOptions<rocksdb::BlockBasedTableOptions>()
                           : nullptr;
    if (bbto != nullptr && bbto->block_cache) {
      w->tracker = std::make_shared<Tracker>(bbto->block_cache);
    }
    w->listener = std::make_shared<WarmListener>(w->src, w->tracker, compactions != 0, max_bytes);
    o->rep.listeners.push_back(w->listener);
    return w.release();
  } catch (...) {
    return nullptr;
  }
}

extern "C" void pillar_warmer_drop(pillar_warmer* w, const char* prefix) {
  try {
    if (w->tracker) {
      w->tracker->Drop(prefix);
    }
  } catch (...) {
  }
}

extern "C" void pillar_warmer_destroy(pillar_warmer* w) { delete w; }

extern "C" int pillar_warmer_warm_file(pillar_warmer* w, const char* path,
                                       unsigned long long* bytes, char* msg,
                                       size_t msg_len) {
  rocksdb::Status s;
  uint64_t n = 0;
  try {
    s = warm_file(w->src, w->tracker.get(), path, &n);
  } catch (...) {
    s = rocksdb::Status::Aborted("out of memory while warming");
  }
  if (!s.ok()) {
    w->files.failed.fetch_add(1, std::memory_order_relaxed);
    copy_status(s, msg, msg_len);
    return 0;
  }
  w->files.files.fetch_add(1, std::memory_order_relaxed);
  w->files.bytes.fetch_add(n, std::memory_order_relaxed);
  if (bytes != nullptr) {
    *bytes = n;
  }
  return 1;
}

extern "C" void pillar_warmer_stats(pillar_warmer* w, pillar_warm_stats* out) {
  out->files = w->files.files.load(std::memory_order_relaxed);
  out->bytes = w->files.bytes.load(std::memory_order_relaxed);
  out->failed = w->files.failed.load(std::memory_order_relaxed);
  const Counters& c = w->listener->c;
  out->compaction_files = c.files.load(std::memory_order_relaxed);
  out->compaction_bytes = c.bytes.load(std::memory_order_relaxed);
  out->compaction_skipped = c.skipped.load(std::memory_order_relaxed);
  out->compaction_failed = c.failed.load(std::memory_order_relaxed);
  out->erased_blocks = w->tracker ? w->tracker->erased.load(std::memory_order_relaxed) : 0;
  try {
    out->tracked_files = w->tracker ? w->tracker->Files() : 0;
  } catch (...) {
    out->tracked_files = 0;
  }
}

extern "C" unsigned long long pillar_options_l0_trigger(void* opts) {
  return static_cast<c_options*>(opts)->rep.level0_file_num_compaction_trigger;
}

extern "C" int pillar_options_time_mutex(void* opts) {
  auto* o = static_cast<c_options*>(opts);
  if (!o->rep.statistics) {
    return 0;
  }
  o->rep.statistics->set_stats_level(rocksdb::StatsLevel::kAll);
  return 1;
}

extern "C" int pillar_options_stats_level(void* opts) {
  auto* o = static_cast<c_options*>(opts);
  if (!o->rep.statistics) {
    return -1;
  }
  return static_cast<int>(o->rep.statistics->get_stats_level());
}
