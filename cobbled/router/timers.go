package router

import (
	"container/heap"
	"sync"
	"time"

	"github.com/pillarkit/pillar/internal/clock"
)

// Hedge timers: on Linux, when the router runs on the wall clock, they are
// armed on a timerfd instead of the Go runtime's timers.
//
// The runtime's timers are exact while the process is busy, but an idle
// process waits for its next timer in epoll_wait, whose timeout is in whole
// milliseconds (runtime/netpoll_epoll.go truncates the wait, and rounds a
// wait under 1 ms up to 1 ms). A 1.5 ms hedge timer in an idle process fired
// a mean 0.70 ms late, a 2.3 ms one 0.88 ms late (a 400-timer loop on this
// machine; 1.06 ms: mean 0.15, p90 1.09 ms). With one client, a router is
// idle whenever its only request waits on a stalled node, which is exactly
// when its hedge timer runs: on a quiet machine, hedges went out a mean
// 0.4–0.6 ms after their delay, on a delay of 1.1–1.7 ms, and the hedged
// p99 missed its target by about that much (1.77–2.41 × healthy). A timerfd
// expires with nanosecond resolution (timer slack: ~50 µs) and wakes the
// netpoller like any readable file, so the same loop fired a mean 80–110 µs
// late. See timers_linux.go.

// stopFunc cancels a timer; it reports whether the call was prevented.
type stopFunc func() bool

// afterFunc runs f in its own goroutine once d has passed: on the precise
// timers when the router has them, on Options.Clock otherwise (tests: a
// clock.Fake).
func (r *Router) afterFunc(d time.Duration, f func()) stopFunc {
	if r.timers != nil {
		return r.timers.afterFunc(d, f)
	}
	return r.opts.Clock.AfterFunc(d, f).Stop
}

// newTimers returns precise timers for a router on clock c, or nil when the
// router uses c's own (not the wall clock, or no timerfd here).
func newTimers(c clock.Clock) *timers {
	if _, ok := c.(clock.Real); !ok {
		return nil
	}
	w, err := newWaker()
	if err != nil {
		return nil // the runtime's timers, less precise on an idle process
	}
	t := &timers{w: w}
	go t.loop()
	return t
}

// timers is a heap of pending calls and a waker (one kernel timer, armed for
// the earliest of them) that a single goroutine waits on.
type timers struct {
	w waker

	mu     sync.Mutex
	h      timerHeap
	armed  time.Time // the deadline w is armed for (zero: disarmed)
	closed bool
}

// waker is a one-shot kernel timer the loop can block on.
type waker interface {
	arm(d time.Duration) error // d > 0: fire d from now; d == 0: disarm
	wait() error               // block until it fires (or close)
	close() error
}

type pending struct {
	when time.Time
	f    func()
	idx  int // in the heap; -1 once fired or stopped
}

type timerHeap []*pending

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].when.Before(h[j].when) }
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *timerHeap) Push(x any) {
	p := x.(*pending)
	p.idx = len(*h)
	*h = append(*h, p)
}
func (h *timerHeap) Pop() any {
	old := *h
	p := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	p.idx = -1
	return p
}

func (t *timers) afterFunc(d time.Duration, f func()) stopFunc {
	p := &pending{when: time.Now().Add(d), f: f}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return func() bool { return false } // the router is closing: no hedges
	}
	heap.Push(&t.h, p)
	if t.armed.IsZero() || p.when.Before(t.armed) {
		t.arm(p.when)
	}
	t.mu.Unlock()
	return func() bool {
		t.mu.Lock()
		defer t.mu.Unlock()
		if p.idx < 0 {
			return false
		}
		heap.Remove(&t.h, p.idx)
		if len(t.h) == 0 && !t.armed.IsZero() {
			// Nothing left: disarm, so the kernel timer does not wake the
			// loop for nothing in the middle of the next request (one
			// client: every request's timer is stopped before the next is
			// armed, and each stale wake was a thread woken, a read and a
			// re-arm). With timers still pending the waker stays armed: a
			// wake with nothing due re-arms it for the next.
			t.armed = time.Time{}
			_ = t.w.arm(0)
		}
		return true
	}
}

// arm sets the waker for when (t.mu held).
func (t *timers) arm(when time.Time) {
	t.armed = when
	// At least 1 ns: 0 would disarm it. An error (none is expected for a
	// valid timerfd) leaves the timer to the next arm or wake.
	_ = t.w.arm(max(time.Until(when), time.Nanosecond))
}

func (t *timers) loop() {
	var due []func()
	for {
		err := t.w.wait()
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return
		}
		if err != nil {
			// Not expected; do not spin: fall back to polling at 1 ms.
			t.mu.Unlock()
			time.Sleep(time.Millisecond)
			t.mu.Lock()
		}
		now := time.Now()
		for len(t.h) > 0 && !t.h[0].when.After(now) {
			due = append(due, heap.Pop(&t.h).(*pending).f)
		}
		t.armed = time.Time{}
		if len(t.h) > 0 {
			t.arm(t.h[0].when)
		}
		t.mu.Unlock()
		for i, f := range due {
			go f()
			due[i] = nil
		}
		due = due[:0]
	}
}

// close stops the loop; pending calls never run.
func (t *timers) close() {
	t.mu.Lock()
	t.closed = true
	t.h = nil
	t.mu.Unlock()
	t.w.close()
}
