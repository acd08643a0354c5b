package clock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Fake is a clock that moves only through Advance: timers, tickers,
// AfterFuncs and WithTimeout contexts registered on it fire, in time order,
// as Advance passes their instant. Tests wait for the code under test to
// register what they are about to fire with BlockUntil. Safe for concurrent
// use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	seq     int64
	waiters map[int64]*waiter
	changed chan struct{} // closed and replaced whenever waiters change
}

type waiter struct {
	at     time.Time
	period time.Duration // > 0 for tickers
	seq    int64
	fire   func(now time.Time)
}

// NewFake returns a fake clock reading start (time.Now() when zero).
func NewFake(start time.Time) *Fake {
	if start.IsZero() {
		start = time.Now()
	}
	return &Fake{now: start, waiters: map[int64]*waiter{}, changed: make(chan struct{})}
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// add registers a waiter at now+d; remove, the function it returns, reports
// whether the waiter was still pending.
func (f *Fake) add(d, period time.Duration, fire func(time.Time)) (remove func() bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	w := &waiter{at: f.now.Add(d), period: period, seq: f.seq, fire: fire}
	f.waiters[w.seq] = w
	f.notifyLocked()
	return func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.waiters[w.seq] != w {
			return false
		}
		delete(f.waiters, w.seq)
		f.notifyLocked()
		return true
	}
}

func (f *Fake) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// AfterFunc calls f in its own goroutine once the clock passes now+d.
func (f *Fake) AfterFunc(d time.Duration, fn func()) *Timer {
	return &Timer{stop: f.add(d, 0, func(time.Time) { go fn() })}
}

// NewTimer returns a timer whose C receives the fake time once the clock
// passes now+d.
func (f *Fake) NewTimer(d time.Duration) *Timer {
	c := make(chan time.Time, 1)
	return &Timer{C: c, stop: f.add(d, 0, func(now time.Time) { c <- now })}
}

// NewTicker returns a ticker firing every d of fake time (a tick the reader
// has not taken yet is not doubled).
func (f *Fake) NewTicker(d time.Duration) *Ticker {
	if d <= 0 {
		panic(fmt.Sprintf("clock: NewTicker(%v): non-positive interval", d))
	}
	c := make(chan time.Time, 1)
	stop := f.add(d, d, func(now time.Time) {
		select {
		case c <- now:
		default:
		}
	})
	return &Ticker{C: c, stop: func() { stop() }}
}

// WithTimeout returns a context done when the fake clock passes now+d (or
// when ctx is). Its Err, and that of contexts derived from it, is then
// context.DeadlineExceeded, as with context.WithTimeout.
//
// Its Deadline is on the wall clock, as every reader of a context deadline
// (gRPC's grpc-timeout header, time.Until) expects: the wall time now plus
// the fake time left, so a remote server gets the time that is left. (A
// fixed wall instant would expire while a test holds the fake clock still.)
func (f *Fake) WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	inner, cancel := context.WithCancelCause(ctx)
	c := &deadlineCtx{Context: inner, f: f, at: f.Now().Add(d), done: make(chan struct{})}
	t := f.AfterFunc(d, func() { cancel(context.DeadlineExceeded) })
	// A Done channel of its own (closed once inner is done) keeps derived
	// contexts from attaching to inner directly, which would give them
	// inner's Err (Canceled) instead of DeadlineExceeded.
	context.AfterFunc(inner, func() { close(c.done) })
	return c, func() { t.Stop(); cancel(context.Canceled) }
}

type deadlineCtx struct {
	context.Context
	f    *Fake
	at   time.Time // on the fake clock
	done chan struct{}
}

func (c *deadlineCtx) Deadline() (time.Time, bool) {
	d := time.Now().Add(c.at.Sub(c.f.Now()))
	if pd, ok := c.Context.Deadline(); ok && pd.Before(d) {
		d = pd
	}
	return d, true
}
func (c *deadlineCtx) Done() <-chan struct{} { return c.done }
func (c *deadlineCtx) Err() error {
	select {
	case <-c.done:
	default:
		return nil
	}
	if cause := context.Cause(c.Context); cause == context.DeadlineExceeded {
		return cause
	}
	return c.Context.Err()
}

// Advance moves the clock forward by d, firing every waiter due on the way
// in time order (ties in registration order), with Now reading each one's
// instant as it fires. AfterFunc callbacks run in their own goroutines, so
// their effects may land after Advance returns.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	target := f.now.Add(d)
	for {
		var next *waiter
		for _, w := range f.waiters {
			if !w.at.After(target) && (next == nil || w.at.Before(next.at) || (w.at.Equal(next.at) && w.seq < next.seq)) {
				next = w
			}
		}
		if next == nil {
			break
		}
		if next.at.After(f.now) {
			f.now = next.at
		}
		if next.period > 0 {
			next.at = next.at.Add(next.period)
		} else {
			delete(f.waiters, next.seq)
		}
		f.notifyLocked()
		now := f.now
		f.mu.Unlock()
		next.fire(now)
		f.mu.Lock()
	}
	if target.After(f.now) {
		f.now = target
	}
	f.mu.Unlock()
}

// Jump moves the clock forward by d at once, then fires every waiter due
// in time order (ties in registration order), with Now reading the new
// instant throughout: what a process that stalled for d sees when it runs
// again, its timers all late. Advance, by contrast, fires each waiter at its
// own instant (though an AfterFunc's goroutine may still run after Now has
// moved on, so only Jump makes lateness certain).
func (f *Fake) Jump(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
	f.Advance(0)
}

// Waiters returns how many timers, tickers, AfterFuncs and timeouts are
// pending.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}

// BlockUntil waits until at least n waiters are pending, or ctx is done
// (then it returns an error naming how many there were).
func (f *Fake) BlockUntil(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		have, ch := len(f.waiters), f.changed
		f.mu.Unlock()
		if have >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("clock: waiting for %d pending timers, have %d: %w", n, have, ctx.Err())
		}
	}
}
