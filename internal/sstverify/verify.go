// Package sstverify checks an SST file's integrity before it is ingested:
// RocksDB's SstFileReader opens the file (footer, index, filter and
// properties blocks) and reads every data block, verifying its checksum.
// RocksDB's IngestExternalFile does not do this, and a file whose bytes
// were damaged before its SHA-256 was taken (or whose manifest lies) would
// otherwise be ingested and fail, or answer wrongly, at read time.
//
// Verify is safe for concurrent use. It reads the file once, sequentially,
// without the block cache.
package sstverify

// #cgo CXXFLAGS: -std=c++17 -O2
// #cgo LDFLAGS: -lrocksdb -lstdc++
// #include <stdlib.h>
// char* pillar_sst_verify(const char* path, unsigned long long* entries);
// char* pillar_sst_check(const char* path, unsigned long long* entries, const char* skip, size_t skip_len, char** first, size_t* first_len, char** last, size_t* last_len);
import "C"

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"
)

// ErrCorrupt marks a file that fails verification.
var ErrCorrupt = errors.New("sst corrupt")

// Verify opens the SST at path and verifies every block checksum. It
// returns the table's entry count (from its properties block). A failure
// wraps ErrCorrupt and names path and RocksDB's reason, e.g. "x.sst:
// Corruption: block checksum mismatch: stored = 1, computed = 2 ... in x.sst
// offset 0 size 4109" (RocksDB names the file only in some of its reasons).
func Verify(path string) (entries uint64, err error) {
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	var n C.ulonglong
	msg := C.pillar_sst_verify(cs, &n)
	if msg != nil {
		return 0, verifyError(path, msg)
	}
	return uint64(n), nil
}

// Info is what Check learns of an SST file.
type Info struct {
	// Entries is the table's entry count (its properties block).
	Entries uint64
	// First and Last are the file's first and last visible keys other
	// than the key Check skips: a key whose entry is a deletion is not
	// seen. Both nil when there is none.
	First, Last []byte
}

// Check is Verify, also reading the file's first and last keys (other
// than skip, when it is the first: a batch's meta key) from the same
// open file, for a check of what the file holds before it is ingested.
func Check(path string, skip []byte) (Info, error) {
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	var cskip *C.char
	if len(skip) > 0 {
		cskip = (*C.char)(C.CBytes(skip))
		defer C.free(unsafe.Pointer(cskip))
	}
	var n C.ulonglong
	var first, last *C.char
	var firstLen, lastLen C.size_t
	msg := C.pillar_sst_check(cs, &n, cskip, C.size_t(len(skip)), &first, &firstLen, &last, &lastLen)
	if msg != nil {
		return Info{}, verifyError(path, msg)
	}
	info := Info{Entries: uint64(n)}
	if first != nil {
		info.First = C.GoBytes(unsafe.Pointer(first), C.int(firstLen))
		C.free(unsafe.Pointer(first))
	}
	if last != nil {
		info.Last = C.GoBytes(unsafe.Pointer(last), C.int(lastLen))
		C.free(unsafe.Pointer(last))
	}
	return info, nil
}

// verifyError is the error of a failed verification of path (msg, which
// it frees): ErrCorrupt unless the disk or the path failed.
func verifyError(path string, msg *C.char) error {
	defer C.free(unsafe.Pointer(msg))
	reason := C.GoString(msg)
	if strings.HasPrefix(reason, "IO error") {
		// Not the file's content: the disk or the path.
		return fmt.Errorf("sstverify: %s: %s", path, reason)
	}
	return fmt.Errorf("%w: %s: %s", ErrCorrupt, path, reason)
}
