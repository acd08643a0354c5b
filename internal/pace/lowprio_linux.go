//go:build linux

package pace

import "syscall"

const (
	ioprioClassIdle  = 3
	ioprioClassShift = 13
	ioprioWhoProcess = 1
)

// lowerThread sets the calling thread (not the process) to nice 19 and the
// idle I/O class: on Linux both calls take a thread id.
func lowerThread() {
	tid := syscall.Gettid()
	_ = syscall.Setpriority(syscall.PRIO_PROCESS, tid, 19)
	_, _, _ = syscall.Syscall(syscall.SYS_IOPRIO_SET, ioprioWhoProcess, uintptr(tid), ioprioClassIdle<<ioprioClassShift)
}

// threadPriority returns the calling thread's nice value and I/O priority
// (for tests).
func threadPriority() (nice, ioprio int, err error) {
	tid := syscall.Gettid()
	// getpriority returns 20 - nice (the raw syscall avoids libc's
	// translation, and Go's syscall.Getpriority is that raw call).
	p, err := syscall.Getpriority(syscall.PRIO_PROCESS, tid)
	if err != nil {
		return 0, 0, err
	}
	r, _, e := syscall.Syscall(syscall.SYS_IOPRIO_GET, ioprioWhoProcess, uintptr(tid), 0)
	if e != 0 {
		return 0, 0, e
	}
	return 20 - p, int(r), nil
}
