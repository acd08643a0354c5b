// Pinned MultiGet over a database opened through RocksDB's C API (as
// grocksdb does): the values stay pinned in the block cache (or in one
// buffer per value when they are not in a block) until mget_free, instead
// of being copied into malloc'd strings as rocksdb_multi_get does.
#include <cstdlib>
#include <cstring>
#include <string>
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

// malloced_status copies a status's text into malloc'd memory (the Go side
// frees it).
static char* malloced_status(const rocksdb::Status& st) {
  std::string s = st.ToString();
  char* out = static_cast<char*>(malloc(s.size() + 1));
  memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

// pillar_mget_single_get: read a database asked for one key with DB::Get
// (1, the default) or with MultiGet like the others (0: the benchmark's
// comparison, set through setSingleKeyGet before any read).
int pillar_mget_single_get = 1;  // C linkage: declared in mget.h

// pillar_mget_multi reads counts[j] keys from dbps[j], for j < ndb, one
// database after the other in one call from Go (a node's request spans a
// dozen partition databases: one cgo transition, one allocation, not one
// of each per database). Keys are back to back, database by database; the
// outcome of key i is st[i] (1 found, 0 absent, 2 failed), data[i] and
// sizes[i]; errs[j] is the first failure of database j (malloc'd), or
// null. A null dbps[j] (closed) is skipped, its keys absent.
extern "C" void* pillar_mget_multi(size_t ndb, void** dbps, const size_t* counts, void* rop, const char* keys,
                                   size_t keylen, void** data, size_t* sizes, int* st, char** errs) {
  auto& ro = static_cast<rocksdb_readoptions_t*>(rop)->rep;
  size_t n = 0;
  for (size_t j = 0; j < ndb; j++) n += counts[j];
  std::vector<rocksdb::Slice> ks;
  ks.reserve(n);
  for (size_t i = 0; i < n; i++) ks.emplace_back(keys + i * keylen, keylen);
  auto* vals = new rocksdb::PinnableSlice[n];
  std::vector<rocksdb::Status> sts(n);
  size_t off = 0;
  for (size_t j = 0; j < ndb; j++) {
    errs[j] = nullptr;
    size_t c = counts[j];
    if (c == 0) continue;
    if (dbps[j] == nullptr) {  // nil or closed (the Go side reports it): its keys read as absent
      for (size_t i = off; i < off + c; i++) {
        st[i] = 0;
        data[i] = nullptr;
        sizes[i] = 0;
      }
      off += c;
      continue;
    }
    auto* db = static_cast<rocksdb_t*>(dbps[j])->rep;
    if (c == 1 && pillar_mget_single_get) {
      // One key (a 12-key batch over a dozen partitions gives most
      // databases one): DB::Get skips the batched MultiGet's set-up
      // (sorting, per-batch contexts), and pins its value the same way.
      sts[off] = db->Get(ro, db->DefaultColumnFamily(), ks[off], &vals[off]);
    } else {
      db->MultiGet(ro, db->DefaultColumnFamily(), c, ks.data() + off, vals + off, sts.data() + off, false);
    }
    for (size_t i = off; i < off + c; i++) {
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
        if (errs[j] == nullptr) errs[j] = malloced_status(sts[i]);
      }
    }
    off += c;
  }
  return vals;
}

extern "C" void* pillar_mget(void* dbp, void* rop, size_t n, const char* keys, size_t keylen, void** data,
                             size_t* sizes, int* st, char** err) {
  return pillar_mget_multi(1, &dbp, &n, rop, keys, keylen, data, sizes, st, err);
}

extern "C" void pillar_mget_free(void* h) { delete[] static_cast<rocksdb::PinnableSlice*>(h); }
