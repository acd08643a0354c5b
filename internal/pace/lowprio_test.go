package pace

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

func TestRunLowLowersOnlyItsThread(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("thread priorities are Linux-only")
	}
	base := make(chan int, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		n, _, _ := threadPriority()
		base <- n
	}()
	if n := <-base; n == 19 {
		t.Skip("the test process already runs at nice 19")
	}
	var nice, ioprio int
	var perr error
	want := errors.New("f's error")
	err := RunLow(context.Background(), func() error {
		nice, ioprio, perr = threadPriority()
		return want
	})
	if !errors.Is(err, want) {
		t.Fatalf("RunLow returned %v, want f's error", err)
	}
	if perr != nil {
		t.Fatal(perr)
	}
	if nice != 19 || ioprio>>ioprioClassShift != ioprioClassIdle {
		t.Fatalf("inside RunLow: nice %d, ioprio %#x; want 19 and the idle class", nice, ioprio)
	}
	// Every other goroutine's thread stays as it was: run many on
	// locked threads and look at each one's priority.
	for range 8 {
		ch := make(chan int, 1)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			n, _, _ := threadPriority()
			ch <- n
		}()
		if n := <-ch; n == 19 {
			t.Fatalf("a thread outside RunLow runs at nice %d: RunLow's thread was reused", n)
		}
	}
}

func TestLowPriorityOnlyBulkWhileAdaptive(t *testing.T) {
	l, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if l.LowPriority(Bulk) || l.LowPriority(Fresh) {
		t.Fatal("deprioritised with the adaptive mode off")
	}
	l.SetTarget(3e6)
	if !l.LowPriority(Bulk) || l.LowPriority(Fresh) {
		t.Fatalf("adaptive mode on: Bulk %v (want true), Fresh %v (want false)", l.LowPriority(Bulk), l.LowPriority(Fresh))
	}
	l.SetTarget(0)
	if l.LowPriority(Bulk) {
		t.Fatal("still deprioritised after the adaptive mode was turned off")
	}
	l2, _ := New(Options{TargetP99: 3e6})
	if !l2.LowPriority(Bulk) {
		t.Fatal("Options.TargetP99 does not turn LowPriority on")
	}
	for _, c := range []Class{Bulk, Fresh, Bulk} {
		if err := l2.RunClass(context.Background(), c, func() error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if s := l2.Stats(); s.Class[Bulk].LowRuns != 2 || s.Class[Fresh].LowRuns != 0 {
		t.Fatalf("LowRuns bulk %d fresh %d, want 2 and 0", s.Class[Bulk].LowRuns, s.Class[Fresh].LowRuns)
	}
}

// TestRunLowReturnsWhenContextEnds: a caller whose context ends stops
// waiting for f, which runs on to its end on its own thread.
func TestRunLowReturnsWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	release, finished := make(chan struct{}), make(chan struct{})
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	err := RunLow(ctx, func() error {
		defer close(finished)
		<-release
		return errors.New("late")
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("RunLow returned %v while f was still running, want context.Canceled", err)
	}
	close(release)
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		t.Fatal("f never finished after RunLow returned")
	}
}
