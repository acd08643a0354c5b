package clock

import (
	"context"
	"errors"
	"testing"
	"time"
)

func wait(t *testing.T, f *Fake, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.BlockUntil(ctx, n); err != nil {
		t.Fatal(err)
	}
}

func TestFakeOrderAndStop(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := NewFake(start)
	got := make(chan time.Duration, 8)
	f.AfterFunc(30*time.Millisecond, func() { got <- 30 * time.Millisecond })
	stopped := f.AfterFunc(20*time.Millisecond, func() { got <- 20 * time.Millisecond })
	tm := f.NewTimer(10 * time.Millisecond)
	if f.Waiters() != 3 {
		t.Fatalf("%d waiters, want 3", f.Waiters())
	}
	if !stopped.Stop() || stopped.Stop() {
		t.Fatal("Stop of a pending timer should report true once")
	}
	f.Advance(5 * time.Millisecond)
	select {
	case <-tm.C:
		t.Fatal("timer fired early")
	default:
	}
	f.Advance(5 * time.Millisecond)
	if at := <-tm.C; !at.Equal(start.Add(10 * time.Millisecond)) {
		t.Errorf("timer fired at %v", at.Sub(start))
	}
	f.Advance(time.Second)
	if d := <-got; d != 30*time.Millisecond {
		t.Errorf("got %v", d)
	}
	select {
	case d := <-got:
		t.Errorf("stopped AfterFunc fired (%v)", d)
	case <-time.After(20 * time.Millisecond):
	}
	if f.Waiters() != 0 || !f.Now().Equal(start.Add(1010*time.Millisecond)) {
		t.Errorf("after: %d waiters, now +%v", f.Waiters(), f.Now().Sub(start))
	}
}

func TestFakeTicker(t *testing.T) {
	f := NewFake(time.Time{})
	tk := f.NewTicker(10 * time.Millisecond)
	f.Advance(35 * time.Millisecond) // three ticks; the channel keeps one
	<-tk.C
	select {
	case <-tk.C:
		t.Fatal("missed ticks were queued")
	default:
	}
	f.Advance(10 * time.Millisecond)
	<-tk.C
	tk.Stop()
	f.Advance(time.Second)
	select {
	case <-tk.C:
		t.Fatal("tick after Stop")
	default:
	}
}

func TestFakeWithTimeout(t *testing.T) {
	f := NewFake(time.Time{})
	ctx, cancel := f.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	child, cc := context.WithCancel(ctx)
	defer cc()
	if d, ok := child.Deadline(); !ok || time.Until(d) > 100*time.Millisecond || time.Until(d) < 50*time.Millisecond {
		t.Errorf("deadline in %v (%v), want 100ms of wall time from now", time.Until(d), ok)
	}
	if !Sleep(context.Background(), f, 0) {
		t.Fatal("zero sleep")
	}
	f.Advance(99 * time.Millisecond)
	if ctx.Err() != nil {
		t.Fatal("done early")
	}
	f.Advance(time.Millisecond)
	<-child.Done()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) || !errors.Is(child.Err(), context.DeadlineExceeded) || context.Cause(child) != context.DeadlineExceeded {
		t.Errorf("errors: %v, child %v, cause %v", ctx.Err(), child.Err(), context.Cause(child))
	}
	// Cancelled before the deadline: Canceled, and the timer is gone.
	ctx2, cancel2 := f.WithTimeout(context.Background(), time.Second)
	cancel2()
	<-ctx2.Done()
	if !errors.Is(ctx2.Err(), context.Canceled) || f.Waiters() != 0 {
		t.Errorf("cancelled: %v, %d waiters", ctx2.Err(), f.Waiters())
	}
}

func TestSleepAndBlockUntil(t *testing.T) {
	f := NewFake(time.Time{})
	done := make(chan bool)
	go func() { done <- Sleep(context.Background(), f, time.Hour) }()
	wait(t, f, 1)
	f.Advance(time.Hour)
	if !<-done {
		t.Fatal("sleep reported cancellation")
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- Sleep(ctx, f, time.Hour) }()
	wait(t, f, 1)
	cancel()
	if <-done {
		t.Fatal("cancelled sleep reported success")
	}
	short, c2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer c2()
	if err := f.BlockUntil(short, 5); err == nil {
		t.Fatal("BlockUntil returned without the waiters")
	}
}

// Jump fires every due waiter late: Now, and the time a timer delivers,
// read the new instant, not each waiter's own (Advance's).
func TestFakeJumpFiresLate(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := NewFake(start)
	seen := make(chan time.Time, 1)
	f.AfterFunc(10*time.Millisecond, func() { seen <- f.Now() })
	tm := f.NewTimer(20 * time.Millisecond)
	later := f.NewTimer(time.Second)
	f.Jump(50 * time.Millisecond)
	want := start.Add(50 * time.Millisecond)
	if at := <-seen; !at.Equal(want) {
		t.Errorf("AfterFunc saw +%v, want +50ms", at.Sub(start))
	}
	if at := <-tm.C; !at.Equal(want) {
		t.Errorf("timer delivered +%v, want +50ms", at.Sub(start))
	}
	select {
	case <-later.C:
		t.Fatal("a timer not yet due fired")
	default:
	}
	if f.Waiters() != 1 || !f.Now().Equal(want) {
		t.Errorf("after: %d waiters, now +%v", f.Waiters(), f.Now().Sub(start))
	}
}
