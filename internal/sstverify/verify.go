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
		defer C.free(unsafe.Pointer(msg))
		reason := C.GoString(msg)
		if strings.HasPrefix(reason, "IO error") {
			// Not the file's content: the disk or the path.
			return 0, fmt.Errorf("sstverify: %s: %s", path, reason)
		}
		return 0, fmt.Errorf("%w: %s: %s", ErrCorrupt, path, reason)
	}
	return uint64(n), nil
}
