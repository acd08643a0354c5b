// SstFileReader::VerifyChecksum is not in RocksDB 7.8's C API; this is the
// one C++ entry point the package needs.
#include <cstdlib>
#include <cstring>
#include <string>

#include "rocksdb/options.h"
#include "rocksdb/sst_file_reader.h"

extern "C" char* pillar_sst_verify(const char* path, unsigned long long* entries) {
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
  if (s.ok()) {
    return nullptr;
  }
  std::string msg = s.ToString();
  char* out = static_cast<char*>(std::malloc(msg.size() + 1));
  std::memcpy(out, msg.c_str(), msg.size() + 1);
  return out;
}
