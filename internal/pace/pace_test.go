package pace

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pillarkit/pillar/internal/clock"
)

// fakeClock is clock.Fake with the count of pending waits the tests poll.
type fakeClock struct{ *clock.Fake }

func (c fakeClock) pending() int { return c.Waiters() }

// newLimiter builds a limiter on a fake clock. The control-loop tests pass
// StartRate: -1, so that bulk starts unlimited and only the loop moves it.
func newLimiter(t *testing.T, o Options) (*Limiter, fakeClock) {
	t.Helper()
	clk := fakeClock{clock.NewFake(time.Unix(1_000_000, 0))}
	o.Clock = clk
	l, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return l, clk
}

// waitAsync runs Wait in a goroutine; the channel receives its error.
func waitAsync(l *Limiter, c Class, n int) chan error {
	done := make(chan error, 1)
	go func() { done <- l.Wait(context.Background(), c, n) }()
	return done
}

// blocked waits (in real time) until the clock has k sleepers.
func blocked(t *testing.T, clk fakeClock, k int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for clk.pending() != k {
		if time.Now().After(deadline) {
			t.Fatalf("%d sleepers, want %d", clk.pending(), k)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestUnlimitedNeverWaits(t *testing.T) {
	l, _ := newLimiter(t, Options{})
	for range 100 {
		if err := l.Wait(context.Background(), Bulk, 64<<20); err != nil {
			t.Fatal(err)
		}
	}
	s := l.Stats()
	if s.Class[Bulk].Waits != 0 || s.Class[Bulk].Bytes != 100*64<<20 || s.Rate != 0 || s.AdaptiveRate != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestRateCapWaitsForDebt(t *testing.T) {
	// 1 MB/s, burst 256 KiB: a burst passes at once, the next 1 MB waits 1 s.
	l, clk := newLimiter(t, Options{Rate: 1_000_000})
	if err := l.Wait(context.Background(), Fresh, 256<<10); err != nil {
		t.Fatal(err)
	}
	if s := l.Stats(); s.Class[Fresh].Waits != 0 {
		t.Fatalf("the burst waited: %+v", s)
	}
	done := waitAsync(l, Fresh, 1_000_000)
	blocked(t, clk, 1)
	clk.Advance(999 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("returned after 999ms of a 1s debt: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	clk.Advance(time.Millisecond)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s := l.Stats()
	if s.Class[Fresh].Waits != 1 || s.Class[Fresh].Waited != time.Second {
		t.Fatalf("waits %d, waited %v; want 1, 1s", s.Class[Fresh].Waits, s.Class[Fresh].Waited)
	}
	// After 10 idle seconds only one burst is banked, not 10 MB.
	clk.Advance(10 * time.Second)
	done = waitAsync(l, Bulk, 256<<10+500_000)
	blocked(t, clk, 1)
	clk.Advance(500 * time.Millisecond)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestWaitEndsWithContext(t *testing.T) {
	l, clk := newLimiter(t, Options{Rate: 1 << 20})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Wait(ctx, Bulk, 10<<20) }()
	blocked(t, clk, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

// window reports reads of latency d, ingests bytes of class c (advancing
// the fake clock as the wait needs, at least one 500 ms window) and steps.
func window(t *testing.T, l *Limiter, clk fakeClock, reads int, d time.Duration, c Class, bytes int) {
	t.Helper()
	for range reads {
		l.Observe(d)
	}
	if bytes > 0 {
		done := waitAsync(l, c, bytes)
		// The wait may or may not sleep (a debt can outlast the window).
		for elapsed := time.Duration(0); ; {
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				if elapsed < 500*time.Millisecond {
					clk.Advance(500*time.Millisecond - elapsed)
				}
				l.Step()
				return
			case <-time.After(time.Millisecond):
				if clk.pending() > 0 {
					clk.Advance(50 * time.Millisecond)
					elapsed += 50 * time.Millisecond
				}
			}
		}
	} else {
		clk.Advance(500 * time.Millisecond)
	}
	l.Step()
}

func TestAdaptiveSlowsBulkAndRecovers(t *testing.T) {
	l, clk := newLimiter(t, Options{StartRate: -1, TargetP99: time.Millisecond, MinRate: 1 << 20, Windows: 1})
	// Reads fast, ingest flowing: nothing changes.
	window(t, l, clk, 100, 200*time.Microsecond, Bulk, 8<<20)
	if s := l.Stats(); s.AdaptiveRate != 0 || s.ReadSamples != 100 || s.ReadP99 < 190*time.Microsecond || s.ReadP99 > 210*time.Microsecond {
		t.Fatalf("after a fast window: %+v", s)
	}
	// Reads slow while 8 MiB passed in 0.5 s (16 MiB/s): half of that.
	window(t, l, clk, 100, 5*time.Millisecond, Bulk, 8<<20)
	s := l.Stats()
	if s.AdaptiveRate != 8<<20 || s.Slowdowns != 1 {
		t.Fatalf("after a slow window: adaptive rate %d (want %d), %+v", s.AdaptiveRate, 8<<20, s)
	}
	// Still slow: halves again, down to the floor and no further.
	for range 5 {
		window(t, l, clk, 100, 5*time.Millisecond, Bulk, 1<<20)
	}
	if s := l.Stats(); s.AdaptiveRate != 1<<20 {
		t.Fatalf("adaptive rate %d, want the floor %d", s.AdaptiveRate, 1<<20)
	}
	// Slow reads but no ingest in the window: ingest is not blamed.
	window(t, l, clk, 100, 5*time.Millisecond, Bulk, 0)
	// Too few reads to judge: hold.
	window(t, l, clk, 5, 100*time.Microsecond, Bulk, 1<<19)
	if s := l.Stats(); s.AdaptiveRate != 1<<20 || s.Slowdowns != 6 {
		t.Fatalf("held windows changed the rate: %+v", s)
	}
	// Fresh bytes are never held back by the adaptive rate, only charged.
	done := waitAsync(l, Fresh, 64<<20)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s := l.Stats(); s.Class[Fresh].Waits != 0 {
		t.Fatalf("fresh bytes waited for the adaptive rate: %+v", s)
	}
	// ... but bulk yields to them, by at most one read chunk (256 KiB at 1 MiB/s).
	done = waitAsync(l, Bulk, 1)
	blocked(t, clk, 1)
	clk.Advance(249 * time.Millisecond)
	select {
	case <-done:
		t.Fatal("bulk did not yield to fresh bytes")
	case <-time.After(20 * time.Millisecond):
	}
	clk.Advance(2 * time.Millisecond)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Fast reads with ingest flowing: ×2 per window (p99 under half the
	// target) until the ceiling, then unlimited again.
	rates := []int64{}
	for range 12 {
		window(t, l, clk, 100, 200*time.Microsecond, Bulk, 1<<10)
		rates = append(rates, l.Stats().AdaptiveRate)
		if rates[len(rates)-1] == 0 {
			break
		}
	}
	if want := []int64{2 << 20, 4 << 20, 8 << 20, 16 << 20, 32 << 20, 64 << 20, 128 << 20, 256 << 20, 512 << 20, 0}; !slices.Equal(rates, want) {
		t.Fatalf("recovery %v, want %v", rates, want)
	}
}

// TestFreshNeverForgivesBulkDebt: a fresh charge after a large bulk
// reservation leaves the bulk debt as it is.
func TestFreshNeverForgivesBulkDebt(t *testing.T) {
	var b bucket
	now := time.Unix(0, 0)
	b.set(now, 1<<20, 0)
	if d := b.take(now, 4<<20); d <= 0 {
		t.Fatal("a 4 MiB take at 1 MiB/s did not wait")
	}
	before := b.tokens
	b.charge(now, 1)
	if b.tokens != before {
		t.Fatalf("fresh charge moved a bulk debt from %v to %v", before, b.tokens)
	}
	b.set(now, 1<<20, 0)
	b.tokens = 0
	b.charge(now, 10<<20)
	if b.tokens != -readChunk {
		t.Fatalf("fresh debt %v, want one read chunk", b.tokens)
	}
}

func TestAdaptiveRespectsCap(t *testing.T) {
	l, clk := newLimiter(t, Options{StartRate: -1, Rate: 4 << 20, TargetP99: time.Millisecond, MinRate: 1 << 20, Windows: 1})
	// From unlimited, the slowdown starts from the cap, not the 1 GiB ceiling.
	l.Observe(0) // one window of fast reads that saw nothing
	l.Step()
	for range 30 {
		l.Observe(5 * time.Millisecond)
	}
	if err := l.Wait(context.Background(), Bulk, 1<<10); err != nil {
		t.Fatal(err)
	}
	clk.Advance(500 * time.Millisecond)
	l.Step()
	if s := l.Stats(); s.AdaptiveRate != 1<<20 {
		// 1 KiB passed in 0.5 s: half of 2 KiB/s is under the floor.
		t.Fatalf("adaptive rate %d, want the floor", s.AdaptiveRate)
	}
	if s := l.Stats(); s.Rate != 4<<20 {
		t.Fatalf("cap changed: %+v", s)
	}
	l.SetTarget(0)
	if s := l.Stats(); s.AdaptiveRate != 0 || s.Target != 0 {
		t.Fatalf("SetTarget(0) kept the adaptive rate: %+v", s)
	}
	l.SetRate(0)
	if err := l.Wait(context.Background(), Bulk, 1<<30); err != nil {
		t.Fatal(err)
	}
}

func TestRunSteps(t *testing.T) {
	l, clk := newLimiter(t, Options{Interval: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.Run(ctx)
	blocked(t, clk, 1)
	for range 7 {
		l.Observe(3 * time.Millisecond)
	}
	clk.Advance(time.Second)
	for deadline := time.Now().Add(5 * time.Second); l.Stats().ReadSamples != 7; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("samples %d after one tick, want 7", l.Stats().ReadSamples)
		}
	}
}

func TestReaderPaces(t *testing.T) {
	l, clk := newLimiter(t, Options{Rate: 1 << 20, Burst: 1 << 20})
	src := bytes.Repeat([]byte("x"), 3<<20)
	var got bytes.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(&got, l.Reader(context.Background(), bytes.NewReader(src), Bulk))
		done <- err
	}()
	// 1 MiB of burst, then 2 MiB at 1 MiB/s: about 2 s of fake time.
	var slept time.Duration
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), src) {
				t.Fatal("paced reader changed the bytes")
			}
			if slept < 1900*time.Millisecond || slept > 2100*time.Millisecond {
				t.Fatalf("3 MiB took %v of fake time, want ≈2s", slept)
			}
			return
		case <-time.After(time.Millisecond):
			if clk.pending() > 0 {
				clk.Advance(10 * time.Millisecond)
				slept += 10 * time.Millisecond
			}
		}
	}
}

func TestHistogramQuantile(t *testing.T) {
	var h histogram
	rng := rand.New(rand.NewPCG(1, 2))
	var vals []int64
	for range 20000 {
		v := int64(rng.ExpFloat64() * 1e6) // mean 1 ms
		vals = append(vals, v)
		h.add(v)
	}
	slices.Sort(vals)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		n, got := quantile(q, &h)
		want := vals[int(q*float64(len(vals)))-1]
		if n != 20000 {
			t.Fatalf("count %d", n)
		}
		if r := float64(got) / float64(want); r < 0.93 || r > 1.07 {
			t.Fatalf("q%.3f: got %v, want %v (±7%%)", q, got, time.Duration(want))
		}
	}
	for ns := int64(0); ns < 1<<20; ns = ns*9/8 + 1 {
		if mid := bucketMid(bucketOf(ns)); float64(mid) < 0.93*float64(ns) || float64(mid) > 1.07*float64(ns)+1 {
			t.Fatalf("value %d lands in a bucket with midpoint %d", ns, mid)
		}
	}
	h.reset()
	if n, q := quantile(0.99, &h); n != 0 || q != 0 {
		t.Fatal("reset kept samples")
	}
}

func TestValidate(t *testing.T) {
	for _, o := range []Options{{Rate: -1}, {TargetP99: -time.Second}, {MinRate: 10, MaxRate: 5}, {Rate: 1 << 10, TargetP99: time.Millisecond}, {Windows: -1}, {Windows: maxWindows + 1}} {
		if _, err := New(o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	if err := (&Limiter{}).Wait(context.Background(), Class(7), 1); err == nil {
		t.Error("unknown class accepted")
	}
}

// TestAdaptiveLeavesAFutileFloor: held at the floor with the p99 still over
// the target for FloorWindows windows, the limiter takes that p99 as the
// node's ambient p99 and lets bulk grow back while the p99 stays within
// 1.25 × of it; it slows again above that, and judges by the target alone
// once the p99 is back at it. With FloorWindows negative it holds the
// floor.
func TestAdaptiveLeavesAFutileFloor(t *testing.T) {
	l, clk := newLimiter(t, Options{StartRate: -1, TargetP99: time.Millisecond, MinRate: 1 << 20, FloorWindows: 3, Windows: 1})
	slow := func(d time.Duration) { window(t, l, clk, 100, d, Bulk, 64<<10) }
	for l.Stats().AdaptiveRate != 1<<20 {
		slow(5 * time.Millisecond)
	}
	slow(5 * time.Millisecond)
	slow(5 * time.Millisecond)
	if s := l.Stats(); s.AdaptiveRate != 1<<20 || s.Ambient != 0 || s.Releases != 0 {
		t.Fatalf("after two windows at the floor: %+v", s)
	}
	slow(5 * time.Millisecond) // the third: the floor is futile
	s := l.Stats()
	if s.Releases != 1 || s.Ambient < 4700*time.Microsecond || s.Ambient > 5300*time.Microsecond || s.AdaptiveRate != 5<<18 {
		t.Fatalf("after three windows at the floor: ambient %v, rate %d (want ≈5ms and %d), %+v", s.Ambient, s.AdaptiveRate, 5<<18, s)
	}
	slow(5 * time.Millisecond) // within 1.25 × ambient: grows on
	if r := l.Stats().AdaptiveRate; r <= 5<<18 {
		t.Fatalf("rate %d did not grow with the p99 at the ambient level", r)
	}
	before := l.Stats().AdaptiveRate
	slow(8 * time.Millisecond) // over 1.25 × ambient: the snapshot is to blame again
	if r := l.Stats().AdaptiveRate; r != max(1<<20, before/2) {
		t.Fatalf("rate %d after a window over 1.25 × ambient, want %d", r, max(1<<20, before/2))
	}
	slow(500 * time.Microsecond) // back under the target: ambient forgotten
	if s := l.Stats(); s.Ambient != 0 {
		t.Fatalf("ambient %v kept after a window under the target", s.Ambient)
	}

	h, hclk := newLimiter(t, Options{StartRate: -1, TargetP99: time.Millisecond, MinRate: 1 << 20, FloorWindows: -1, Windows: 1})
	for range 12 {
		window(t, h, hclk, 100, 5*time.Millisecond, Bulk, 64<<10)
	}
	if s := h.Stats(); s.AdaptiveRate != 1<<20 || s.Releases != 0 || s.Ambient != 0 {
		t.Fatalf("FloorWindows -1 left the floor: %+v", s)
	}
}

// TestAdaptiveAmbientCap: judged by an ambient p99, bulk grows back to
// AmbientMaxRate (4 × MinRate by default) and no further, however long the
// p99 stays within 1.25 × ambient; with the cap off (negative) the same
// windows take it past that, back to unlimited; once the p99 is back at the
// target the cap no longer applies. A cap below MinRate is refused.
func TestAdaptiveAmbientCap(t *testing.T) {
	run := func(o Options) (*Limiter, func(time.Duration)) {
		l, clk := newLimiter(t, o)
		return l, func(d time.Duration) { window(t, l, clk, 100, d, Bulk, 64<<10) }
	}
	base := Options{TargetP99: time.Millisecond, MinRate: 1 << 20, FloorWindows: 3, Windows: 1}
	l, slow := run(base)
	for l.Stats().AdaptiveRate != 1<<20 {
		slow(5 * time.Millisecond)
	}
	for range 3 {
		slow(5 * time.Millisecond)
	}
	if s := l.Stats(); s.Releases != 1 || s.Ambient == 0 {
		t.Fatalf("the floor was not left: %+v", s)
	}
	for range 30 {
		slow(5 * time.Millisecond)
		if r := l.Stats().AdaptiveRate; r == 0 || r > 4<<20 {
			t.Fatalf("adaptive rate %d under an ambient p99, want ≤ the default cap %d", r, 4<<20)
		}
	}
	if s := l.Stats(); s.AdaptiveRate != 4<<20 || s.Ambient == 0 {
		t.Fatalf("after 30 windows at the ambient level: rate %d (want the cap %d), ambient %v", s.AdaptiveRate, 4<<20, s.Ambient)
	}
	slow(100 * time.Microsecond) // back under the target: the ambient and its cap are gone
	if s := l.Stats(); s.Ambient != 0 || s.AdaptiveRate <= 4<<20 && s.AdaptiveRate != 0 {
		t.Fatalf("under the target the rate stayed capped: %+v", s)
	}

	off := base
	off.AmbientMaxRate = -1
	u, uslow := run(off)
	for u.Stats().AdaptiveRate != 1<<20 {
		uslow(5 * time.Millisecond)
	}
	for range 3 {
		uslow(5 * time.Millisecond)
	}
	for range 30 {
		uslow(5 * time.Millisecond)
	}
	if s := u.Stats(); s.Ambient == 0 || (s.AdaptiveRate != 0 && s.AdaptiveRate <= 4<<20) {
		t.Fatalf("AmbientMaxRate -1: rate %d after 30 windows at the ambient level, want past %d (ambient %v)", s.AdaptiveRate, 4<<20, s.Ambient)
	}

	bad := base
	bad.AmbientMaxRate = 1 << 19
	if _, err := New(bad); err == nil || !strings.Contains(err.Error(), "AmbientMaxRate") {
		t.Fatalf("AmbientMaxRate below MinRate: err %v, want one naming AmbientMaxRate", err)
	}
}

// TestAdaptiveJudgesASlidingWindow: with Windows 4 the p99 is taken over
// the last four intervals, so one interval's slow reads among many fast
// ones halve nothing, and the intervals after a halving, still holding the
// reads it was for, hold the rate instead of halving it again; growth
// resumes once the window is under the target.
func TestAdaptiveJudgesASlidingWindow(t *testing.T) {
	l, clk := newLimiter(t, Options{StartRate: -1, TargetP99: time.Millisecond, MinRate: 1 << 20, Windows: 4})
	slowFor := func(fast, slow int) {
		for range slow {
			l.Observe(5 * time.Millisecond)
		}
		window(t, l, clk, fast, 200*time.Microsecond, Bulk, 8<<20)
	}
	for range 3 {
		slowFor(100, 0)
	}
	// One interval with 2 slow reads in 100: over the target alone, but
	// not over 400 reads (2 of 400 is under 1%).
	slowFor(98, 2)
	if s := l.Stats(); s.AdaptiveRate != 0 || s.Slowdowns != 0 || s.ReadSamples != 400 || s.LastP99 < 4*time.Millisecond {
		t.Fatalf("one slow interval in four slowed bulk: %+v", s)
	}
	// Slow reads in bulk: halved once (from the 16 MiB/s that passed) …
	slowFor(50, 50)
	if s := l.Stats(); s.AdaptiveRate != 8<<20 || s.Slowdowns != 1 {
		t.Fatalf("after a slow interval: %+v", s)
	}
	// … and while the slow interval stays in the window but the latest is
	// fast, held.
	for i := range 3 {
		slowFor(100, 0)
		if s := l.Stats(); s.AdaptiveRate != 8<<20 || s.Slowdowns != 1 || s.Speedups != 0 {
			t.Fatalf("fast interval %d after a halving: %+v", i, s)
		}
	}
	// Then the window is fast: bulk grows again.
	slowFor(100, 0)
	if s := l.Stats(); s.AdaptiveRate <= 8<<20 || s.Speedups != 1 {
		t.Fatalf("a fast window did not grow bulk: %+v", s)
	}
}

// TestAdaptiveIgnoresFreshOnly: intervals in which only fresh bytes passed
// do not move the adaptive rate however slow the reads, and forget an
// ambient p99; the floor's ambient p99 is the median of the intervals' own
// p99s, so one stall does not become it.
func TestAdaptiveIgnoresFreshOnly(t *testing.T) {
	l, clk := newLimiter(t, Options{StartRate: -1, TargetP99: time.Millisecond, MinRate: 1 << 20, FloorWindows: 3, Windows: 4})
	for range 8 {
		window(t, l, clk, 100, 5*time.Millisecond, Fresh, 1<<20)
	}
	if s := l.Stats(); s.AdaptiveRate != 0 || s.Slowdowns != 0 {
		t.Fatalf("fresh-only intervals moved the rate: %+v", s)
	}
	for l.Stats().AdaptiveRate != 1<<20 {
		window(t, l, clk, 100, 3*time.Millisecond, Bulk, 64<<10)
	}
	// One stall among the floor's intervals: ambient ≈ 3 ms, not 200 ms.
	for _, d := range []time.Duration{200 * time.Millisecond, 3 * time.Millisecond, 3 * time.Millisecond} {
		window(t, l, clk, 100, d, Bulk, 64<<10)
	}
	if s := l.Stats(); s.Releases != 1 || s.Ambient < 2800*time.Microsecond || s.Ambient > 3200*time.Microsecond {
		t.Fatalf("ambient %v after one stall at the floor, want ≈3ms: %+v", s.Ambient, s)
	}
	window(t, l, clk, 100, 3*time.Millisecond, Fresh, 1<<20)
	if s := l.Stats(); s.Ambient != 0 {
		t.Fatalf("ambient %v kept through an interval without bulk", s.Ambient)
	}
}

// TestCPUSlots: under the adaptive mode at most CPUSlots Bulk takers hold
// a slot, a waiting taker gets one when it is given back or fails with its
// context; with the mode off, CPUSlots negative, or for Fresh work,
// nothing is taken.
func TestCPUSlots(t *testing.T) {
	l, _ := newLimiter(t, Options{CPUSlots: 1})
	r1, err := l.CPU(context.Background(), Bulk)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := l.CPU(context.Background(), Bulk) // adaptive mode off: no bound
	if err != nil {
		t.Fatal(err)
	}
	r1()
	r2()
	if s := l.Stats().CPU; s.Takes != 0 {
		t.Fatalf("slots taken with the adaptive mode off: %+v", s)
	}
	l.SetTarget(time.Millisecond)
	hold, err := l.CPU(context.Background(), Bulk)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		release, err := l.CPU(context.Background(), Bulk)
		if err == nil {
			release()
		}
		got <- err
	}()
	select {
	case <-got:
		t.Fatal("a second taker got the only slot")
	case <-time.After(20 * time.Millisecond):
	}
	hold()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	hold, _ = l.CPU(context.Background(), Bulk)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.CPU(ctx, Bulk); !errors.Is(err, context.Canceled) {
		t.Fatalf("taking a slot with an ended context: %v", err)
	}
	hold()
	if s := l.Stats().CPU; s.Slots != 1 || s.Takes != 4 || s.Waits != 2 {
		t.Fatalf("CPU stats %+v, want 1 slot, 4 takes, 2 waits", s)
	}
	u, _ := newLimiter(t, Options{CPUSlots: -1, TargetP99: time.Millisecond})
	for range 3 {
		if _, err := u.CPU(ctx, Bulk); err != nil {
			t.Fatal(err)
		}
	}
	if s := u.Stats().CPU; s.Slots != 0 || s.Takes != 0 {
		t.Fatalf("CPUSlots -1: %+v", s)
	}
	// Fresh work is never bounded.
	hold, _ = l.CPU(context.Background(), Bulk)
	for range 3 {
		if _, err := l.CPU(ctx, Fresh); err != nil {
			t.Fatalf("fresh work waited for a CPU slot: %v", err)
		}
	}
	hold()
	if s := l.Stats().CPU; s.Takes != 5 {
		t.Fatalf("CPU stats %+v: fresh takes counted", s)
	}
	if d, _ := New(Options{}); d.Stats().CPU.Slots != max(1, runtime.GOMAXPROCS(0)-1) {
		t.Fatalf("default slots %d, want GOMAXPROCS-1", d.Stats().CPU.Slots)
	}
}

// TestAdaptiveStartRate: with StartRate, bulk ingest never starts unlimited
// in the adaptive mode: the rate is StartRate when the mode is turned on,
// falls back to it after an interval without bulk bytes once it had grown
// past it, keeps a lower rate; the zero value is 4 × MinRate, and a
// negative StartRate starts unlimited.
func TestAdaptiveStartRate(t *testing.T) {
	const start = 4 << 20
	l, clk := newLimiter(t, Options{TargetP99: time.Millisecond, MinRate: 1 << 20, StartRate: start, Windows: 1})
	if s := l.Stats(); s.AdaptiveRate != start {
		t.Fatalf("adaptive mode on: rate %d, want StartRate %d", s.AdaptiveRate, start)
	}
	// The first bulk bytes wait for the rate: 4 MiB beyond the burst take
	// about a second, not nothing.
	done := waitAsync(l, Bulk, 4<<20)
	blocked(t, clk, 1)
	clk.Advance(2 * time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s := l.Stats(); s.Class[Bulk].Waits != 1 {
		t.Fatalf("the first bulk bytes did not wait: %+v", s)
	}
	l.Step()
	// Fast reads: the rate doubles past StartRate …
	for l.Stats().AdaptiveRate <= 2*start && l.Stats().AdaptiveRate != 0 {
		window(t, l, clk, 100, 100*time.Microsecond, Bulk, 64<<10)
	}
	// … and an interval without bulk bytes brings it back to StartRate.
	window(t, l, clk, 100, 100*time.Microsecond, Fresh, 64<<10)
	if s := l.Stats(); s.AdaptiveRate != start {
		t.Fatalf("after an idle interval: rate %d, want StartRate %d", s.AdaptiveRate, start)
	}
	// A rate below StartRate is kept across the idle interval.
	for l.Stats().AdaptiveRate != 1<<20 {
		window(t, l, clk, 100, 5*time.Millisecond, Bulk, 64<<10)
	}
	window(t, l, clk, 100, 100*time.Microsecond, Fresh, 64<<10)
	if s := l.Stats(); s.AdaptiveRate != 1<<20 {
		t.Fatalf("a rate below StartRate was not kept: %d", s.AdaptiveRate)
	}
	// Off lifts the rate; on again starts at StartRate.
	l.SetTarget(0)
	if s := l.Stats(); s.AdaptiveRate != 0 {
		t.Fatalf("mode off: rate %d", s.AdaptiveRate)
	}
	l.SetTarget(time.Millisecond)
	if s := l.Stats(); s.AdaptiveRate != start {
		t.Fatalf("mode on again: rate %d, want %d", s.AdaptiveRate, start)
	}
	// The zero value is 4 × MinRate; a negative value bounds nothing.
	l2, _ := newLimiter(t, Options{TargetP99: time.Millisecond, MinRate: 1 << 20})
	if s := l2.Stats(); s.AdaptiveRate != 4<<20 {
		t.Fatalf("StartRate 0: rate %d, want 4 × MinRate", s.AdaptiveRate)
	}
	l3, _ := newLimiter(t, Options{TargetP99: time.Millisecond, MinRate: 1 << 20, StartRate: -1})
	if s := l3.Stats(); s.AdaptiveRate != 0 {
		t.Fatalf("StartRate -1: rate %d, want unlimited", s.AdaptiveRate)
	}
	if err := (Options{MinRate: 2 << 20, StartRate: 1 << 20}).Validate(); err == nil {
		t.Fatal("StartRate below MinRate validated")
	}
}
