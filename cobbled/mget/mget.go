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
	"unsafe"

	"github.com/linxGnu/grocksdb"
)

// Result holds the pinned values of one Get; Release frees them.
type Result struct {
	h      unsafe.Pointer
	data   []unsafe.Pointer // C memory
	sizes  []C.size_t
	status []C.int
}

// Get reads keys (all of length keyLen, back to back in keys) from db's
// default column family. It returns an error (the first key's RocksDB
// status) when any key failed other than by being absent; the values
// then are not read.
func Get(db *grocksdb.DB, ro *grocksdb.ReadOptions, keys []byte, keyLen int, r *Result) error {
	n := len(keys) / keyLen
	r.Release()
	if cap(r.data) < n {
		r.data, r.sizes, r.status = make([]unsafe.Pointer, n), make([]C.size_t, n), make([]C.int, n)
	}
	r.data, r.sizes, r.status = r.data[:n], r.sizes[:n], r.status[:n]
	if n == 0 {
		return nil
	}
	var cerr *C.char
	r.h = C.pillar_mget(*(*unsafe.Pointer)(unsafe.Pointer(db)), *(*unsafe.Pointer)(unsafe.Pointer(ro)), C.size_t(n),
		(*C.char)(unsafe.Pointer(&keys[0])), C.size_t(keyLen), &r.data[0], &r.sizes[0], &r.status[0], &cerr)
	if cerr != nil {
		msg := C.GoString(cerr)
		C.free(unsafe.Pointer(cerr))
		r.Release()
		return errors.New(msg)
	}
	return nil
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
