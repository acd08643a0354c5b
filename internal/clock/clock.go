package clock

import (
	"context"
	"time"
)

// Clock is what a component that waits or times out reads time from. Real
// is the wall clock; Fake moves only when a test advances it.
//
// Its Now has the shape of the `Now func() time.Time` option that
// cobbled/control and lorry take, so a component needing only the time of
// day keeps that smaller option; one that also waits (hedge timers, refresh
// tickers, fault delays, deadlines) takes a Clock.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed; Stop cancels
	// that call if it has not started.
	AfterFunc(d time.Duration, f func()) *Timer
	// NewTimer returns a timer that sends the time on C once d has passed.
	NewTimer(d time.Duration) *Timer
	// NewTicker returns a ticker that sends the time on C every d (dropping
	// ticks a slow reader misses, as time.Ticker does). d must be positive.
	NewTicker(d time.Duration) *Ticker
	// WithTimeout is context.WithTimeout on this clock: the context is done
	// d from Now, its Err and Cause are then context.DeadlineExceeded, and
	// its Deadline is on the wall clock (so gRPC carries the time left to the
	// server).
	WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc)
}

// Timer is a pending AfterFunc call or a NewTimer channel.
type Timer struct {
	// C receives the time when a NewTimer timer fires (nil for AfterFunc).
	C    <-chan time.Time
	stop func() bool
}

// Stop prevents the timer from firing. It reports whether it did so (false
// when the timer already fired or was stopped).
func (t *Timer) Stop() bool { return t.stop() }

// Ticker delivers ticks on C.
type Ticker struct {
	C    <-chan time.Time
	stop func()
}

// Stop turns the ticker off; no tick is sent after it returns.
func (t *Ticker) Stop() { t.stop() }

// Since is c.Now().Sub(t).
func Since(c Clock, t time.Time) time.Duration { return c.Now().Sub(t) }

// Sleep waits d on c. It returns false, early, when ctx is done first.
func Sleep(ctx context.Context, c Clock, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Or returns c, or Real when c is nil (for options' ensureDefaults).
func Or(c Clock) Clock {
	if c == nil {
		return Real{}
	}
	return c
}

// Real is the wall clock (package time).
type Real struct{}

// Now is time.Now.
func (Real) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (Real) AfterFunc(d time.Duration, f func()) *Timer {
	t := time.AfterFunc(d, f)
	return &Timer{stop: t.Stop}
}

// NewTimer is time.NewTimer.
func (Real) NewTimer(d time.Duration) *Timer {
	t := time.NewTimer(d)
	return &Timer{C: t.C, stop: t.Stop}
}

// NewTicker is time.NewTicker.
func (Real) NewTicker(d time.Duration) *Ticker {
	t := time.NewTicker(d)
	return &Ticker{C: t.C, stop: t.Stop}
}

// WithTimeout is context.WithTimeout.
func (Real) WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}
