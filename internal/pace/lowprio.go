package pace

import (
	"context"
	"runtime"
)

// RunLow runs f on an OS thread of its own whose CPU priority is nice 19
// and whose I/O class is idle (Linux; elsewhere at normal priority), waits
// for it and returns f's error, or ctx's error as soon as ctx ends: f then
// runs on to its end on its thread (a C call cannot be interrupted) and
// its result is dropped, so f must not use anything the caller frees once
// RunLow has returned. A node shutting down thus does not wait for a
// deprioritised verification that a busy machine may keep waiting. The thread is never handed back to the Go
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
func RunLow(ctx context.Context, f func() error) error {
	done := make(chan error, 1) // buffered: an abandoned f still ends
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		lowerThread()
		done <- f()
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		select {
		case err := <-done: // finished meanwhile: its result stands
			return err
		default:
			return ctx.Err()
		}
	}
}
