package pace

import "runtime"

// RunLow runs f on an OS thread of its own whose CPU priority is nice 19
// and whose I/O class is idle (Linux; elsewhere at normal priority), waits
// for it and returns f's error. The thread is never handed back to the Go
// scheduler: its goroutine exits still locked to it, so Go destroys it,
// and no other goroutine ever runs at that priority.
//
// Meant for one long cgo call, such as verifying every block of a
// snapshot's SST file: while C code runs, the thread holds no Go P (sysmon
// hands the P on), so the kernel can deprioritise it freely. Go code run
// under RunLow would hold a P while the kernel keeps the thread waiting,
// delaying the goroutines that need that P (the reads): keep f to the C
// call.
//
// A nice 19 thread on a machine busy with other nice-0 work gets little
// CPU (weight 15 against 1024 per competing thread): the work is
// deprioritised, not paced, and can take much longer than at normal
// priority. Lowering fails quietly (f then runs at normal priority).
func RunLow(f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		lowerThread()
		done <- f()
	}()
	return <-done
}
