//go:build linux

package cobbled

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// startWriteback starts the kernel's writeback of n bytes of f from off
// (sync_file_range SYNC_FILE_RANGE_WRITE: it queues the dirty pages for
// writing and returns; the fsync later waits for them). f that is not a
// file (a test's fake) is left alone; an error only leaves the work to
// the fsync.
func startWriteback(f any, off, n int64) {
	sc, ok := f.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) { _ = unix.SyncFileRange(int(fd), off, n, unix.SYNC_FILE_RANGE_WRITE) })
}
