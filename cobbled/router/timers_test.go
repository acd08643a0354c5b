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

// countWaker is a waker that records how it was armed and never fires.
type countWaker struct {
	arms, disarms int
	c             chan struct{}
}

func (w *countWaker) arm(d time.Duration) error {
	if d == 0 {
		w.disarms++
	} else {
		w.arms++
	}
	return nil
}
func (w *countWaker) wait() error  { <-w.c; return nil }
func (w *countWaker) close() error { close(w.c); return nil }

// Stopping the last pending timer disarms the kernel timer, so it does not
// wake the loop for nothing during the next request (with one client every
// hedge timer is stopped before the next is armed); stopping one while
// others wait leaves it armed (the loop re-arms on its wake).
func TestTimersDisarmWhenEmpty(t *testing.T) {
	w := &countWaker{c: make(chan struct{})}
	tm := &timers{w: w}
	go tm.loop()
	defer tm.close()
	for range 3 {
		tm.afterFunc(time.Hour, func() { t.Error("fired") })()
	}
	tm.mu.Lock()
	arms, disarms := w.arms, w.disarms
	tm.mu.Unlock()
	if arms != 3 || disarms != 3 {
		t.Fatalf("3 timers each stopped before the next: %d arms, %d disarms; want 3 and 3", arms, disarms)
	}
	a := tm.afterFunc(time.Hour, func() {})
	b := tm.afterFunc(2*time.Hour, func() {})
	a()
	tm.mu.Lock()
	disarms = w.disarms
	tm.mu.Unlock()
	if disarms != 3 {
		t.Errorf("stopping one of two pending timers disarmed the waker (%d disarms, want 3)", disarms)
	}
	b()
	tm.mu.Lock()
	disarms = w.disarms
	tm.mu.Unlock()
	if disarms != 4 {
		t.Errorf("stopping the last one: %d disarms, want 4", disarms)
	}
}
