// Package mget is a RocksDB MultiGet that pins its values instead of
// copying them: grocksdb's MultiGet goes through rocksdb_multi_get, which
// copies every value into a malloc'd string (and the keys into C memory)
// and uses the per-key legacy MultiGet; this calls DB::MultiGet with
// PinnableSlices (the batched implementation), and the values are read in
// place until Release. For cobbled's BatchGet (12 values of ~50 KB) that
// saves a 600 KB copy and a dozen mallocs per request.
//
// It reads the C handles out of grocksdb's *DB and *ReadOptions (their
// first field; grocksdb is pinned at v1.7.15) and the C++ objects out of
// those (the first member of RocksDB's C API structs), so it works only
// with the versions pinned in DESIGN.md; the tests compare it with
// grocksdb's MultiGet.
package mget

// #cgo CXXFLAGS: -std=c++17 -O2
// #cgo LDFLAGS: -lrocksdb -lstdc++
// #include <stdlib.h>
// #include "mget.h"
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/linxGnu/grocksdb"
)

// Result holds the pinned values of one Get or GetMulti; Release frees
// them.
type Result struct {
	h      unsafe.Pointer
	data   []unsafe.Pointer // C memory
	sizes  []C.size_t
	status []C.int

	// GetMulti's per-database arguments, reused.
	dbs    []unsafe.Pointer // C handles
	counts []C.size_t
	cerrs  []*C.char
	errs   []error
}

// Get reads keys (all of length keyLen, back to back in keys) from db's
// default column family. It returns an error (the first key's RocksDB
// status) when any key failed other than by being absent; the values
// then are not read.
func Get(db *grocksdb.DB, ro *grocksdb.ReadOptions, keys []byte, keyLen int, r *Result) error {
	errs := GetMulti([]*grocksdb.DB{db}, ro, []int{len(keys) / keyLen}, keys, keyLen, r)
	if errs[0] != nil {
		r.Release()
		return errs[0]
	}
	return nil
}

// GetMulti reads, in one call into RocksDB, counts[j] keys from dbs[j]
// for every j: keys are of length keyLen, back to back, database by
// database, and Value(i) is the i-th of them. A node's BatchGet spans a
// dozen partition databases; one call saves a cgo transition, its pointer
// checks and a C allocation per database. The j-th error (in a slice
// reused by the next call on r) is db j's first failure other than an
// absent key (read its keys again one by one to tell which failed: the
// failed ones read as absent here), or that db j is nil or closed (its
// keys then read as absent); the other databases' values are valid. A
// database asked for no keys is not touched (it may be nil). A negative
// count, counts that do not match keys, or nil read options panic.
func GetMulti(dbs []*grocksdb.DB, ro *grocksdb.ReadOptions, counts []int, keys []byte, keyLen int, r *Result) []error {
	r.Release()
	nd := len(dbs)
	if len(counts) != nd {
		panic("mget: GetMulti: counts and dbs differ in length")
	}
	n := 0
	for j, c := range counts {
		if c < 0 {
			panic(fmt.Sprintf("mget: GetMulti: database %d: negative key count %d", j, c))
		}
		n += c
	}
	if n*keyLen != len(keys) {
		panic("mget: GetMulti: keys do not match counts × keyLen")
	}
	if ro == nil || *(*unsafe.Pointer)(unsafe.Pointer(ro)) == nil {
		panic("mget: GetMulti: nil or destroyed read options")
	}
	if cap(r.data) < n {
		r.data, r.sizes, r.status = make([]unsafe.Pointer, n), make([]C.size_t, n), make([]C.int, n)
	}
	r.data, r.sizes, r.status = r.data[:n], r.sizes[:n], r.status[:n]
	if cap(r.dbs) < nd {
		r.dbs, r.counts, r.cerrs, r.errs = make([]unsafe.Pointer, nd), make([]C.size_t, nd), make([]*C.char, nd), make([]error, nd)
	}
	r.dbs, r.counts, r.cerrs, r.errs = r.dbs[:nd], r.counts[:nd], r.cerrs[:nd], r.errs[:nd]
	clear(r.errs)
	if n == 0 {
		return r.errs
	}
	for j, db := range dbs {
		r.dbs[j], r.counts[j] = nil, C.size_t(counts[j])
		if counts[j] == 0 {
			continue // skipped: the handle is never read
		}
		if db != nil {
			r.dbs[j] = *(*unsafe.Pointer)(unsafe.Pointer(db))
		}
		if r.dbs[j] == nil { // nil, or closed (grocksdb's Close clears the handle): C skips it
			r.errs[j] = fmt.Errorf("mget: database %d is nil or closed", j)
		}
	}
	r.h = C.pillar_mget_multi(C.size_t(nd), &r.dbs[0], &r.counts[0], *(*unsafe.Pointer)(unsafe.Pointer(ro)),
		(*C.char)(unsafe.Pointer(&keys[0])), C.size_t(keyLen), &r.data[0], &r.sizes[0], &r.status[0], &r.cerrs[0])
	for j, ce := range r.cerrs {
		if ce != nil {
			r.errs[j] = errors.New(C.GoString(ce))
			C.free(unsafe.Pointer(ce))
			r.cerrs[j] = nil
		}
	}
	clear(r.dbs)
	return r.errs
}

// setSingleKeyGet chooses how a database asked for one key is read: with
// DB::Get (true, the default) or with MultiGet (false). For the benchmark's
// side-by-side comparison only; not safe while reads run.
func setSingleKeyGet(on bool) {
	if on {
		C.pillar_mget_single_get = 1
	} else {
		C.pillar_mget_single_get = 0
	}
}

// Len is the number of keys read.
func (r *Result) Len() int { return len(r.status) }

// Value returns key i's value, valid until Release, and whether it exists.
func (r *Result) Value(i int) ([]byte, bool) {
	if r.status[i] != 1 {
		return nil, false
	}
	if r.sizes[i] == 0 {
		return []byte{}, true
	}
	return unsafe.Slice((*byte)(r.data[i]), int(r.sizes[i])), true
}

// Release unpins the values; safe to call more than once.
func (r *Result) Release() {
	if r.h != nil {
		C.pillar_mget_free(r.h)
		r.h = nil
	}
	clear(r.data)
	r.data, r.sizes, r.status = r.data[:0], r.sizes[:0], r.status[:0]
}
