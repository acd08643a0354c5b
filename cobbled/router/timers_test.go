package router

import (
	"testing"
	"time"

	"github.com/pillarkit/pillar/internal/clock"
)

// The precise timers (timerfd on Linux) run every call not stopped, once,
// including one armed after an earlier call was stopped (the waker was
// armed for the stopped one and must re-arm for the rest).
func TestPreciseTimers(t *testing.T) {
	tm := newTimers(clock.Real{})
	if tm == nil {
		t.Skip("no precise timers on this system: the router uses the runtime's")
	}
	defer tm.close()
	fired := make(chan int, 8)
	stopEarly := tm.afterFunc(5*time.Millisecond, func() { fired <- 1 })
	tm.afterFunc(20*time.Millisecond, func() { fired <- 2 })
	never := tm.afterFunc(time.Hour, func() { fired <- 3 })
	if !stopEarly() {
		t.Fatal("stopping a pending timer: reported not stopped")
	}
	if stopEarly() {
		t.Error("stopping it twice: reported stopped again")
	}
	select {
	case i := <-fired:
		if i != 2 {
			t.Fatalf("timer %d fired, want 2 (1 was stopped)", i)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the 20 ms timer never fired after the earlier one was stopped")
	}
	late := tm.afterFunc(time.Millisecond, func() { fired <- 4 })
	select {
	case i := <-fired:
		if i != 4 {
			t.Fatalf("timer %d fired, want 4", i)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the 1 ms timer never fired")
	}
	if late() {
		t.Error("stopping a timer that fired: reported stopped")
	}
	if !never() {
		t.Error("stopping the hour timer: reported not stopped")
	}
	select {
	case i := <-fired:
		t.Errorf("timer %d fired after the others", i)
	case <-time.After(30 * time.Millisecond):
	}
	tm.close()
	if tm.afterFunc(time.Millisecond, func() { fired <- 5 })() {
		t.Error("a timer armed after close: reported stopped (it must never be pending)")
	}
}
