// Pinned MultiGet over a database opened through RocksDB's C API (as
// grocksdb does): the values stay pinned in the block cache (or in one
// buffer per value when they are not in a block) until mget_free, instead
// of being copied into malloc'd strings as rocksdb_multi_get does.
#include <vector>

#include <rocksdb/c.h>
#include <rocksdb/db.h>

#include "mget.h"

// The leading members of the C API's handle types (rocksdb c.cc): the
// wrapped C++ objects. Only rep is read.
struct rocksdb_t {
  rocksdb::DB* rep;
};
struct rocksdb_readoptions_t {
  rocksdb::ReadOptions rep;
};

extern "C" void* pillar_mget(void* dbp, void* rop, size_t n, const char* keys, size_t keylen,
                             void** data, size_t* sizes, int* st, char** err) {
  auto* db = static_cast<rocksdb_t*>(dbp)->rep;
  auto& ro = static_cast<rocksdb_readoptions_t*>(rop)->rep;
  std::vector<rocksdb::Slice> ks;
  ks.reserve(n);
  for (size_t i = 0; i < n; i++) ks.emplace_back(keys + i * keylen, keylen);
  auto* vals = new rocksdb::PinnableSlice[n];
  std::vector<rocksdb::Status> sts(n);
  db->MultiGet(ro, db->DefaultColumnFamily(), n, ks.data(), vals, sts.data(), false);
  *err = nullptr;
  for (size_t i = 0; i < n; i++) {
    if (sts[i].ok()) {
      st[i] = 1;
      data[i] = const_cast<char*>(vals[i].data());
      sizes[i] = vals[i].size();
    } else if (sts[i].IsNotFound()) {
      st[i] = 0;
      data[i] = nullptr;
      sizes[i] = 0;
    } else {
      st[i] = 2;
      data[i] = nullptr;
      sizes[i] = 0;
      if (*err == nullptr) {
        std::string s = sts[i].ToString();
        *err = static_cast<char*>(malloc(s.size() + 1));
        memcpy(*err, s.c_str(), s.size() + 1);
      }
    }
  }
  return vals;
}

extern "C" void pillar_mget_free(void* h) { delete[] static_cast<rocksdb::PinnableSlice*>(h); }
