package pace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pillarkit/pillar/internal/clock"
)

// Class is the kind of ingest traffic a byte belongs to.
type Class int

const (
	// Fresh traffic (deltas) waits only for the hard cap.
	Fresh Class = iota
	// Bulk traffic (snapshots) also waits for the adaptive rate.
	Bulk
	numClasses
)

func (c Class) String() string {
	switch c {
	case Fresh:
		return "fresh"
	case Bulk:
		return "bulk"
	}
	return fmt.Sprintf("class(%d)", int(c))
}

// Options configure a Limiter. The zero value of every field means its
// default; the zero Options is an unlimited, non-adaptive limiter.
type Options struct {
	// Rate caps every ingest byte, in bytes per second. The default value 0
	// is unlimited.
	Rate int64
	// Burst is how many bytes may pass at once after an idle spell. The
	// default value is an eighth of the rate (125 ms of ingest), at least
	// 256 KiB.
	Burst int64
	// TargetP99 turns the adaptive mode on: while the p99 of the reads
	// reported to Observe exceeds it, bulk ingest slows down (see the
	// package comment). The default value 0 is off.
	TargetP99 time.Duration
	// MinRate is the adaptive rate's floor in bytes per second. The default
	// value is 2 MiB/s.
	MinRate int64
	// MaxRate is where a growing adaptive rate returns to unlimited (or to
	// Rate, when that is lower). The default value is 1 GiB/s.
	MaxRate int64
	// Interval is the control period of the adaptive mode (Run). The
	// default value is 500ms.
	Interval time.Duration
	// MinSamples is the fewest reads a window needs to change the rate. The
	// default value is 20.
	MinSamples int
	// Windows is how many control intervals, the last one included, the
	// judged p99 is taken over (a sliding window): at a few hundred reads
	// per second one 500 ms interval's p99 is its one or two slowest
	// reads, so a single slow read halved the rate. The rate is halved
	// only when the latest interval is over the target too (the slow
	// reads that caused one halving are not blamed for the next ones). The
	// default value is 4 (2 s at the default Interval); 1 judges each
	// interval alone.
	Windows int
	// FloorWindows is how many control windows in a row the adaptive rate
	// may sit at MinRate with the p99 still over the target before the
	// limiter concludes that bulk ingest is not what keeps the p99 up (the
	// machine, or deltas, are): it then takes the median p99 of those
	// windows as the node's ambient p99 and judges by max(target, 1.25 ×
	// ambient) until a window's p99 is back at the target (see the package
	// comment). The default value is 6 (3 s at the default Interval); a
	// negative value holds bulk at the floor for as long as the p99 is over
	// the target.
	FloorWindows int
	// AmbientMaxRate caps the adaptive rate, bytes/s, while an ambient p99
	// is in force (FloorWindows): other work (deltas, the machine) already
	// keeps the p99 over the target, and growing bulk by a quarter a window
	// while the p99 stayed within 1.25 × ambient let a 1 GiB snapshot beside
	// a delta stream climb back to 360 MB/s, where it doubled the reads' p50
	// and took the client-side p99 to 1.40 × idle (`pillar bench ingest`,
	// 23:02 UTC). The default value 0 is 4 × MinRate; a negative value caps
	// nothing (growth is then bounded by MaxRate and Rate only).
	AmbientMaxRate int64
	// StartRate bounds the adaptive rate bulk ingest starts at, bytes/s:
	// when the adaptive mode is turned on (New, SetTarget), and after every
	// control interval in which no bulk bytes passed (Step), an adaptive
	// rate that is unlimited or above StartRate is set to it; a lower one
	// is kept. Without it a paced snapshot's first interval ran unlimited,
	// or at whatever rate the previous snapshot had grown to, until the
	// first Step halved it: 271 MB/s for the first 500 ms of a paced 1 GiB
	// snapshot, and 7–11 of the window's ~45 reads over its p99 fell in
	// its first 2 s (`pillar bench ingest`, 19:16 and 20:15 UTC). From
	// StartRate the rate doubles each interval the p99 is under half the
	// target. The default value 0 is 4 × MinRate; a negative value bounds
	// nothing (the rate starts unlimited and is kept across idle spells).
	StartRate int64
	// CPUSlots is how many goroutines may run bulk ingest's CPU work at
	// once (CPU: a snapshot chunk's copy or hash) while the adaptive mode is
	// on. The default value 0 is GOMAXPROCS − 1 (at least 1), so
	// one P stays free for reads: Go notices a read that has arrived on
	// the network only when a P looks for work (or from sysmon, every 10
	// ms at most), so while ingest keeps every P busy a read waits for one.
	// A negative value bounds nothing.
	CPUSlots int
	// Clock is the time source of waits and of the control loop. The
	// default value is the wall clock (clock.Real).
	Clock clock.Clock
}

func (o *Options) ensureDefaults() {
	if o.MinRate == 0 {
		o.MinRate = 2 << 20
	}
	if o.MaxRate == 0 {
		o.MaxRate = 1 << 30
	}
	if o.Interval == 0 {
		o.Interval = 500 * time.Millisecond
	}
	if o.MinSamples == 0 {
		o.MinSamples = 20
	}
	if o.Windows == 0 {
		o.Windows = 4
	}
	if o.FloorWindows == 0 {
		o.FloorWindows = 6
	}
	if o.AmbientMaxRate == 0 {
		o.AmbientMaxRate = 4 * o.MinRate
	}
	if o.StartRate == 0 {
		o.StartRate = 4 * o.MinRate
	}
	if o.CPUSlots == 0 {
		o.CPUSlots = max(1, runtime.GOMAXPROCS(0)-1)
	}
	o.Clock = clock.Or(o.Clock)
}

// Validate checks the options, with defaults applied.
func (o Options) Validate() error {
	o.ensureDefaults()
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf("pace: options: "+format, a...)) }
	if o.Rate < 0 || o.Burst < 0 || o.MinRate < 0 || o.MaxRate < 0 {
		fail("Rate %d, Burst %d, MinRate %d and MaxRate %d must not be negative", o.Rate, o.Burst, o.MinRate, o.MaxRate)
	}
	if o.TargetP99 < 0 || o.Interval < 0 || o.MinSamples < 0 {
		fail("TargetP99 %v, Interval %v and MinSamples %d must not be negative", o.TargetP99, o.Interval, o.MinSamples)
	}
	if o.Windows < 1 || o.Windows > maxWindows {
		fail("Windows %d: want 1..%d", o.Windows, maxWindows)
	}
	if o.MaxRate < o.MinRate {
		fail("MaxRate %d is below MinRate %d", o.MaxRate, o.MinRate)
	}
	if o.AmbientMaxRate > 0 && o.AmbientMaxRate < o.MinRate {
		fail("AmbientMaxRate %d is below MinRate %d", o.AmbientMaxRate, o.MinRate)
	}
	if o.StartRate > 0 && o.StartRate < o.MinRate {
		fail("StartRate %d is below MinRate %d", o.StartRate, o.MinRate)
	}
	if o.Rate > 0 && o.TargetP99 > 0 && o.Rate < o.MinRate {
		fail("Rate %d is below the adaptive floor MinRate %d", o.Rate, o.MinRate)
	}
	return errors.Join(errs...)
}

// ClassStats count one class's traffic.
type ClassStats struct {
	Bytes  int64         // bytes that passed (or are waiting to)
	Waits  int64         // Wait calls that had to sleep
	Waited time.Duration // total sleep those calls were given
	// LowRuns counts the calls RunClass ran deprioritised (RunLow).
	LowRuns int64
}

// CPUStats count CPU slot use (Limiter.CPU).
type CPUStats struct {
	Slots int   // the bound; 0 = none
	Takes int64 // slots taken
	Waits int64 // takes that found every slot in use
}

// Stats is a snapshot of a Limiter.
type Stats struct {
	Class [numClasses]ClassStats // by Class
	// Rate is the hard cap and AdaptiveRate the bulk rate, bytes/s; 0 is
	// unlimited.
	Rate, AdaptiveRate int64
	Target             time.Duration // adaptive target; 0 = off
	// ReadP99 and ReadSamples describe the reads the last Step judged: the
	// last Options.Windows control intervals. LastP99 is the p99 of the
	// last interval alone.
	ReadP99     time.Duration
	ReadSamples int64
	LastP99     time.Duration
	// CPU is the CPU slots' use.
	CPU CPUStats
	// Slowdowns and Speedups count the adaptive rate's changes.
	Slowdowns, Speedups int64
	// Ambient is the p99 the node had with bulk ingest held at the floor
	// (Options.FloorWindows), which the adaptive mode now judges by; 0 when
	// it judges by the target alone. Releases counts the times the floor
	// was left because of it.
	Ambient  time.Duration
	Releases int64
}

// Limiter paces ingest bytes; see the package comment.
type Limiter struct {
	o Options

	mu          sync.Mutex
	capB        bucket
	adaptB      bucket
	target      time.Duration
	windowBytes int64 // bulk bytes in the current interval
	lastStep    time.Time
	stats       Stats
	atFloor     []time.Duration // p99s of the over-target windows spent at the floor in a row

	adaptive atomic.Bool // target > 0 (LowPriority reads it without mu)

	cpu cpuSlots // CPU slots; bound 0 = unbounded

	cur  atomic.Uint32 // interval Observe writes to (hist[cur % len(hist)])
	hist [maxWindows + 1]histogram
}

// maxWindows bounds Options.Windows.
const maxWindows = 16

// New returns a Limiter, or an error naming the bad option.
func New(opts Options) (*Limiter, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.ensureDefaults()
	l := &Limiter{o: opts, target: opts.TargetP99}
	l.adaptive.Store(opts.TargetP99 > 0)
	l.cpu.bound = max(opts.CPUSlots, 0)
	l.cpu.free = l.cpu.bound
	now := opts.Clock.Now()
	l.capB.set(now, float64(opts.Rate), opts.Burst)
	l.adaptB.set(now, 0, opts.Burst)
	l.startBound(now)
	l.lastStep = now
	return l, nil
}

// Wait accounts n bytes of class c and sleeps until the buckets allow them,
// or until ctx ends (its error). A sleeping Wait keeps its wake-up time if
// the rate changes meanwhile, so callers pace in chunks (see Reader).
func (l *Limiter) Wait(ctx context.Context, c Class, n int) error {
	if n <= 0 {
		return nil
	}
	if c < 0 || c >= numClasses {
		return fmt.Errorf("pace: unknown %v", c)
	}
	l.mu.Lock()
	now := l.o.Clock.Now()
	d := l.capB.take(now, float64(n))
	if c == Bulk {
		d = max(d, l.adaptB.take(now, float64(n)))
	} else {
		l.adaptB.charge(now, float64(n))
	}
	if c == Bulk {
		l.windowBytes += int64(n)
	}
	cs := &l.stats.Class[c]
	cs.Bytes += int64(n)
	if d > 0 {
		cs.Waits++
		cs.Waited += d
	}
	l.mu.Unlock()
	if d <= 0 {
		return nil
	}
	if !clock.Sleep(ctx, l.o.Clock, d) {
		return ctx.Err()
	}
	return nil
}

// LowPriority reports whether work of class c runs deprioritised: Bulk
// work while the adaptive mode is on. The caller runs its long C calls
// (SST verification) under RunLow, and a paced Reader of that class
// yields its P after every read (runtime.Gosched), so that reads waiting
// to run go first. With pacing off nothing is deprioritised, so an
// unpaced snapshot runs at full speed.
func (l *Limiter) LowPriority(c Class) bool { return c == Bulk && l.adaptive.Load() }

// RunClass runs f as work of class c: under RunLow when LowPriority(c)
// (counted in Stats.Class[c].LowRuns; it returns when ctx ends, leaving f
// to finish on its own), otherwise on the caller's thread. f should be one
// long C call (see RunLow).
func (l *Limiter) RunClass(ctx context.Context, c Class, f func() error) error {
	if c < 0 || c >= numClasses {
		return fmt.Errorf("pace: unknown %v", c)
	}
	if !l.LowPriority(c) {
		return f()
	}
	l.mu.Lock()
	l.stats.Class[c].LowRuns++
	l.mu.Unlock()
	return RunLow(ctx, f)
}

// CPU takes a CPU slot for one piece of Bulk ingest work (a snapshot
// chunk's copy or hash) while the adaptive mode is on, and returns the
// function that gives it back; Fresh work, work with the mode off, or with
// CPUSlots negative takes nothing. It returns ctx's error if ctx ends while
// it waits. Hold a slot only while computing: never while waiting for the
// rate, the network or a channel.
//
// Fresh work is not bounded: deltas carry the freshness the node promises,
// and on a CPU-starved machine one slot shared by four partitions' deltas
// let them fall 4.8 s behind during a snapshot (`go test -bench Ingest
// ./bench/ingestbench/`, paced (c); 0.6 s unpaced in the same run).
func (l *Limiter) CPU(ctx context.Context, c Class) (release func(), err error) {
	if c < 0 || c >= numClasses {
		return func() {}, fmt.Errorf("pace: unknown %v", c)
	}
	if c != Bulk || l.cpu.bound == 0 || !l.adaptive.Load() {
		return func() {}, nil
	}
	if err := l.cpu.take(ctx); err != nil {
		return func() {}, err
	}
	return l.cpu.give, nil
}

// cpuSlots hands out CPU slots in the order they were asked for.
type cpuSlots struct {
	bound        int
	takes, waits atomic.Int64 // waits: takes that found no free slot

	mu   sync.Mutex
	free int
	wait []chan struct{}
}

func (s *cpuSlots) take(ctx context.Context) error {
	s.takes.Add(1)
	s.mu.Lock()
	if s.free > 0 {
		s.free--
		s.mu.Unlock()
		return nil
	}
	ch := make(chan struct{}, 1)
	s.wait = append(s.wait, ch)
	s.waits.Add(1)
	s.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	if i := slices.Index(s.wait, ch); i >= 0 {
		s.wait = slices.Delete(s.wait, i, i+1)
		s.mu.Unlock()
		return ctx.Err()
	}
	s.mu.Unlock()
	<-ch // handed a slot as ctx ended: give it on
	s.give()
	return ctx.Err()
}

func (s *cpuSlots) give() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.wait) > 0 {
		ch := s.wait[0]
		s.wait = s.wait[1:]
		ch <- struct{}{}
		return
	}
	s.free++
}

// readChunk bounds one paced read, so that a rate change takes effect
// within one chunk's time.
const readChunk = 256 << 10

// Reader returns r paced as class c: every Read is at most 256 KiB and is
// followed by a Wait for the bytes read. A Wait that ends with ctx is the
// Read's error.
func (l *Limiter) Reader(ctx context.Context, r io.Reader, c Class) io.Reader {
	return &pacedReader{ctx: ctx, r: r, l: l, c: c}
}

type pacedReader struct {
	ctx context.Context
	r   io.Reader
	l   *Limiter
	c   Class
}

func (p *pacedReader) Read(b []byte) (int, error) {
	if len(b) > readChunk {
		b = b[:readChunk]
	}
	n, err := p.r.Read(b)
	if n > 0 {
		if werr := p.l.Wait(p.ctx, p.c, n); werr != nil {
			return n, werr
		}
		if p.l.LowPriority(p.c) {
			runtime.Gosched()
		}
	}
	return n, err
}

// Observe records one read's latency for the adaptive mode. It is
// wait-free and safe for concurrent use.
func (l *Limiter) Observe(d time.Duration) {
	l.hist[l.cur.Load()%uint32(len(l.hist))].add(int64(d))
}

// SetRate changes the hard cap (bytes/s; 0 = unlimited).
func (l *Limiter) SetRate(rate int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.o.Clock.Now()
	l.o.Rate = max(rate, 0)
	l.capB.set(now, float64(l.o.Rate), l.o.Burst)
}

// SetTarget changes the adaptive target (0 turns the mode off and lifts the
// adaptive rate).
func (l *Limiter) SetTarget(target time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.target = max(target, 0)
	l.adaptive.Store(l.target > 0)
	l.stats.Ambient, l.atFloor = 0, l.atFloor[:0]
	if l.target == 0 {
		l.adaptB.set(l.o.Clock.Now(), 0, l.o.Burst)
	}
	l.startBound(l.o.Clock.Now())
}

// startBound lowers an unlimited adaptive rate, or one above
// Options.StartRate, to StartRate while the adaptive mode is on: where
// bulk ingest starts (New, SetTarget, an interval without bulk bytes).
// The caller holds mu, or owns l.
func (l *Limiter) startBound(now time.Time) {
	if l.target <= 0 || l.o.StartRate <= 0 {
		return
	}
	if r := l.adaptB.rate; r == 0 || r > float64(l.o.StartRate) {
		l.adaptB.set(now, float64(l.o.StartRate), l.o.Burst)
	}
}

// Stats returns a snapshot of the limiter.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats
	s.Rate, s.AdaptiveRate, s.Target = int64(l.capB.rate), int64(l.adaptB.rate), l.target
	s.CPU = CPUStats{Slots: l.cpu.bound, Takes: l.cpu.takes.Load(), Waits: l.cpu.waits.Load()}
	return s
}

// Run calls Step every Options.Interval until ctx ends.
func (l *Limiter) Run(ctx context.Context) {
	t := l.o.Clock.NewTicker(l.o.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			l.Step()
		}
	}
}

// Step ends the current control window: it takes the window's read p99 and,
// in the adaptive mode, moves the adaptive rate (see the package comment).
// Run calls it; tests call it directly.
func (l *Limiter) Step() {
	l.mu.Lock()
	defer l.mu.Unlock()
	// Intervals old, old−1, … are judged; the one written next is the
	// oldest of the ring, outside the sliding window: cleared before use.
	n := uint32(len(l.hist))
	old := l.cur.Load()
	l.hist[(old+1)%n].reset()
	l.cur.Store(old + 1)
	_, last := quantile(0.99, &l.hist[old%n])
	judged := make([]*histogram, 0, l.o.Windows)
	for i := range uint32(l.o.Windows) {
		judged = append(judged, &l.hist[(old+n-i)%n])
	}
	count, p99 := quantile(0.99, judged...)

	now := l.o.Clock.Now()
	elapsed := now.Sub(l.lastStep)
	l.lastStep = now
	bytes := l.windowBytes
	l.windowBytes = 0
	l.stats.ReadP99, l.stats.ReadSamples, l.stats.LastP99 = p99, count, last
	if bytes == 0 {
		// No bulk ingest to blame (deltas alone are never slowed): hold
		// the rate (no higher than StartRate: the next bulk bytes start
		// there), and forget an ambient p99, which was the cost of what
		// else ran beside bulk.
		l.stats.Ambient, l.atFloor = 0, l.atFloor[:0]
		l.startBound(now)
		return
	}
	if l.target <= 0 || count < int64(l.o.MinSamples) {
		return // off, or too few reads to judge
	}
	cur := l.adaptB.rate
	ceiling := float64(l.o.MaxRate)
	if l.o.Rate > 0 {
		ceiling = min(ceiling, float64(l.o.Rate))
	}
	if p99 <= l.target {
		l.stats.Ambient = 0 // the node is fine again: judge by the target
	}
	target := max(l.target, l.stats.Ambient*5/4)
	if p99 > target && cur == float64(l.o.MinRate) && l.o.FloorWindows > 0 {
		// Held at the floor and still over: after FloorWindows of that,
		// bulk ingest is not what keeps the p99 up.
		// Each interval's own p99: one stall sits in Windows sliding
		// p99s in a row, and would be taken for the ambient level.
		l.atFloor = append(l.atFloor, last)
		if len(l.atFloor) >= l.o.FloorWindows {
			slices.Sort(l.atFloor)
			l.stats.Ambient = l.atFloor[len(l.atFloor)/2]
			l.stats.Releases++
			l.atFloor = l.atFloor[:0]
			target = max(l.target, l.stats.Ambient*5/4)
		}
	} else {
		l.atFloor = l.atFloor[:0]
	}
	switch {
	case p99 > target && last <= target:
		// Over because of reads already blamed, or recovering: hold.
	case p99 > target:
		if cur == 0 {
			cur = ceiling
			if elapsed > 0 {
				cur = min(cur, float64(bytes)/elapsed.Seconds())
			}
		}
		l.adaptB.set(now, max(float64(l.o.MinRate), cur/2), l.o.Burst)
		l.stats.Slowdowns++
	case cur != 0:
		next := cur * 1.25
		if p99 <= target/2 && l.stats.Ambient == 0 {
			// Far under the target: double. Not while judged by an
			// ambient p99 (deltas or the machine already cost the reads
			// that much; bulk grows by a quarter a window then).
			next = cur * 2
		}
		switch {
		case l.stats.Ambient > 0 && l.o.AmbientMaxRate > 0 && next >= min(ceiling, float64(l.o.AmbientMaxRate)):
			// Judged by an ambient p99: grow no further than the cap
			// (Options.AmbientMaxRate), never back to unlimited.
			next = min(ceiling, float64(l.o.AmbientMaxRate))
		case next >= ceiling:
			next = 0
		}
		l.adaptB.set(now, next, l.o.Burst)
		l.stats.Speedups++
	}
}

// bucket is a token bucket that allows debt: take always succeeds and
// returns how long the debt takes to repay. rate 0 is unlimited.
type bucket struct {
	rate   float64 // bytes/s
	burst  float64
	tokens float64
	last   time.Time
}

func (b *bucket) set(now time.Time, rate float64, burst int64) {
	b.advance(now)
	wasUnlimited := b.rate == 0
	b.rate = rate
	b.burst = float64(burst)
	if burst == 0 {
		b.burst = max(256<<10, rate/8)
		if rate == 0 {
			b.burst = 4 << 20
		}
	}
	if wasUnlimited {
		b.tokens = b.burst
	}
	b.tokens = min(b.tokens, b.burst)
}

func (b *bucket) advance(now time.Time) {
	if dt := now.Sub(b.last).Seconds(); dt > 0 && b.rate > 0 {
		b.tokens = min(b.burst, b.tokens+dt*b.rate)
	}
	if now.After(b.last) {
		b.last = now
	}
}

func (b *bucket) take(now time.Time, n float64) time.Duration {
	if b.rate == 0 {
		return 0
	}
	b.advance(now)
	b.tokens -= n
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(math.Ceil(-b.tokens / b.rate * 1e9))
}

// charge debits n without waiting, down to a debt of one read chunk at
// most; it never forgives debt already taken (by a waiting bulk read).
func (b *bucket) charge(now time.Time, n float64) {
	if b.rate == 0 {
		return
	}
	b.advance(now)
	if b.tokens > -readChunk {
		b.tokens = max(b.tokens-n, -readChunk)
	}
}

// histogram is a lock-free log-linear histogram of nanoseconds: exact below
// 16 ns, then 8 buckets per power of two (a bucket's midpoint is within
// ±6% of any value in it).
type histogram struct{ counts [nBuckets]atomic.Int64 }

const (
	subBits  = 3
	nBuckets = 64 << subBits
)

func bucketOf(ns int64) int {
	if ns < 1<<(subBits+1) {
		return int(max(ns, 0))
	}
	e := bits.Len64(uint64(ns)) - 1
	m := (ns >> (e - subBits)) & (1<<subBits - 1)
	return (e-subBits+1)<<subBits + int(m)
}

// bucketMid is the midpoint of bucket i's values.
func bucketMid(i int) int64 {
	if i < 1<<(subBits+1) {
		return int64(i)
	}
	e := i>>subBits + subBits - 1
	m := int64(i & (1<<subBits - 1))
	lo := (1<<subBits + m) << (e - subBits)
	hi := (1<<subBits + m + 1) << (e - subBits)
	return (lo + hi - 1) / 2
}

func (h *histogram) add(ns int64) { h.counts[bucketOf(ns)].Add(1) }

func (h *histogram) reset() {
	for i := range h.counts {
		h.counts[i].Store(0)
	}
}

// quantile returns the sample count and the q-quantile (0 when empty) of
// the histograms' reads together.
func quantile(q float64, hs ...*histogram) (int64, time.Duration) {
	var snap [nBuckets]int64
	var total int64
	for _, h := range hs {
		for i := range h.counts {
			c := h.counts[i].Load()
			snap[i] += c
			total += c
		}
	}
	if total == 0 {
		return 0, 0
	}
	rank := int64(math.Ceil(q * float64(total)))
	var seen int64
	for i, c := range snap {
		if seen += c; seen >= rank {
			return total, time.Duration(bucketMid(i))
		}
	}
	return total, time.Duration(bucketMid(nBuckets - 1))
}
