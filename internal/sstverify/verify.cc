// SstFileReader::VerifyChecksum is not in RocksDB 7.8's C API, nor is
// SstFileReader; these are the C++ entry points the package needs.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "rocksdb/iterator.h"
#include "rocksdb/options.h"
#include "rocksdb/sst_file_reader.h"

static char* copy_out(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  std::memcpy(out, s.data(), s.size());
  out[s.size()] = 0;
  return out;
}

// pillar_sst_check opens the SST at path, reports its entry count and
// verifies every block checksum; with first non-null it also copies out
// (malloc'd, *first_len/*last_len bytes) the file's first and last
// visible keys other than skip (skip_len bytes), both null when there are
// none. It returns null, or the error's text (malloc'd).
extern "C" char* pillar_sst_check(const char* path, unsigned long long* entries,
                                  const char* skip, size_t skip_len,
                                  char** first, size_t* first_len,
                                  char** last, size_t* last_len) {
  rocksdb::Options options;
  rocksdb::SstFileReader reader(options);
  rocksdb::Status s = reader.Open(path);
  if (s.ok()) {
    auto props = reader.GetTableProperties();
    if (props != nullptr && entries != nullptr) {
      *entries = props->num_entries;
    }
    rocksdb::ReadOptions ro;
    ro.verify_checksums = true;
    ro.fill_cache = false;
    s = reader.VerifyChecksum(ro);
  }
  if (s.ok() && first != nullptr && last != nullptr) {
    *first = nullptr;
    *last = nullptr;
    rocksdb::ReadOptions ro;
    ro.verify_checksums = true;
    ro.fill_cache = false;
    std::unique_ptr<rocksdb::Iterator> it(reader.NewIterator(ro));
    rocksdb::Slice skipped(skip, skip_len);
    it->SeekToFirst();
    if (it->Valid() && skip != nullptr && it->key() == skipped) {
      it->Next();
    }
    if (it->Valid()) {
      *first_len = it->key().size();
      *first = copy_out(it->key().ToString());
      it->SeekToLast();
      if (it->Valid()) {
        *last_len = it->key().size();
        *last = copy_out(it->key().ToString());
      }
    }
    if (s.ok()) {
      s = it->status();
    }
    if (!s.ok()) {
      std::free(*first);
      std::free(*last);
      *first = nullptr;
      *last = nullptr;
    }
  }
  if (s.ok()) {
    return nullptr;
  }
  return copy_out(s.ToString());
}

extern "C" char* pillar_sst_verify(const char* path, unsigned long long* entries) {
  return pillar_sst_check(path, entries, nullptr, 0, nullptr, nullptr, nullptr, nullptr);
}
