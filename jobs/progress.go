package jobs

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Progress receives the progress of an operation. Phase starts a phase
// ("map", "sort", "reduce") with its totals (0 when unknown); Add reports
// rows and bytes done since the last call and may be called from many
// goroutines at once; Done ends the operation.
type Progress interface {
	Phase(name string, totalRows, totalBytes int64)
	Add(rows, bytes int64)
	Done()
}

// NewProgress returns a progress bar on f when f is a terminal, and
// otherwise periodic log lines on logger (every interval; 0 means 10 s).
func NewProgress(f *os.File, logger *slog.Logger, interval time.Duration) Progress {
	if f != nil && term.IsTerminal(int(f.Fd())) {
		return NewBarProgress(f)
	}
	return NewLogProgress(logger, interval)
}

// counters is the state both progress kinds share.
type counters struct {
	mu          sync.Mutex
	phase       string
	totalRows   int64
	totalBytes  int64
	start       time.Time
	rows, bytes atomic.Int64
}

func (c *counters) begin(name string, rows, bytes int64) {
	c.mu.Lock()
	c.phase, c.totalRows, c.totalBytes, c.start = name, rows, bytes, time.Now()
	c.mu.Unlock()
	c.rows.Store(0)
	c.bytes.Store(0)
}

func (c *counters) totalRowsLocked() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.totalRows
}

// line renders "rows 1200/5000 bytes 3.1 MiB/12.0 MiB 2400 rows/s 5.2 MiB/s ETA 2s".
func (c *counters) line() string {
	c.mu.Lock()
	phase, tr, tb, start := c.phase, c.totalRows, c.totalBytes, c.start
	c.mu.Unlock()
	rows, bytes := c.rows.Load(), c.bytes.Load()
	el := time.Since(start).Seconds()
	s := fmt.Sprintf("%s: rows %d/%d, %s/%s", phase, rows, tr, human(bytes), human(tb))
	if el > 0 {
		s += fmt.Sprintf(", %.0f rows/s, %s/s", float64(rows)/el, human(int64(float64(bytes)/el)))
		if rows > 0 && tr > rows {
			eta := time.Duration(float64(tr-rows) / (float64(rows) / el) * float64(time.Second))
			s += ", ETA " + eta.Round(time.Second).String()
		}
	}
	return s
}

func human(b int64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := int64(unit), 0
	for n := b / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTPE"[exp])
}

// LogProgress writes a log line at most every Interval, and one at the end
// of each phase.
type LogProgress struct {
	logger   *slog.Logger
	interval time.Duration
	counters
	last atomic.Int64 // unix nanos of the last line
}

// NewLogProgress returns a Progress that logs to logger (nil: slog.Default())
// every interval (0: 10 s).
func NewLogProgress(logger *slog.Logger, interval time.Duration) *LogProgress {
	if logger == nil {
		logger = slog.Default()
	}
	if interval <= 0 {
		interval = 10 * time.Second
	}
	return &LogProgress{logger: logger, interval: interval}
}

func (p *LogProgress) Phase(name string, rows, bytes int64) {
	p.flush()
	p.begin(name, rows, bytes)
	p.last.Store(time.Now().UnixNano())
	p.logger.Info("jobs: phase started", "phase", name, "rows", rows, "bytes", bytes)
}

func (p *LogProgress) Add(rows, bytes int64) {
	p.rows.Add(rows)
	p.bytes.Add(bytes)
	now := time.Now().UnixNano()
	last := p.last.Load()
	if now-last >= int64(p.interval) && p.last.CompareAndSwap(last, now) {
		p.logger.Info("jobs: progress " + p.line())
	}
}

func (p *LogProgress) flush() {
	p.mu.Lock()
	active := p.phase != ""
	p.mu.Unlock()
	if active {
		p.logger.Info("jobs: phase done " + p.line())
	}
}

// Done logs the end of the last phase.
func (p *LogProgress) Done() {
	p.flush()
	p.mu.Lock()
	p.phase = ""
	p.mu.Unlock()
}

// BarProgress draws a progress bar (github.com/schollz/progressbar/v3) of
// bytes done with rows, rate and ETA.
type BarProgress struct {
	w io.Writer
	counters
	barMu sync.Mutex // guards bar and name
	bar   *progressbar.ProgressBar
	name  string
}

// NewBarProgress returns a Progress that draws on w.
func NewBarProgress(w io.Writer) *BarProgress { return &BarProgress{w: w} }

func (p *BarProgress) Phase(name string, rows, bytes int64) {
	p.Done()
	p.begin(name, rows, bytes)
	p.barMu.Lock()
	defer p.barMu.Unlock()
	p.name = name
	max := bytes
	if max <= 0 {
		max = -1
	}
	p.bar = progressbar.NewOptions64(max,
		progressbar.OptionSetWriter(p.w),
		progressbar.OptionSetDescription(name),
		progressbar.OptionShowBytes(true),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionShowElapsedTimeOnFinish(),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(p.w) }),
	)
}

func (p *BarProgress) Add(rows, bytes int64) {
	n := p.rows.Add(rows)
	p.bytes.Add(bytes)
	p.barMu.Lock()
	defer p.barMu.Unlock()
	if p.bar != nil {
		p.bar.Describe(fmt.Sprintf("%s %d/%d rows", p.name, n, p.totalRowsLocked()))
		p.bar.Add64(bytes)
	}
}

func (p *BarProgress) Done() {
	p.barMu.Lock()
	defer p.barMu.Unlock()
	if p.bar != nil {
		p.bar.Finish()
		p.bar = nil
	}
}

// nopProgress is the default.
type nopProgress struct{}

func (nopProgress) Phase(string, int64, int64) {}
func (nopProgress) Add(int64, int64)           {}
func (nopProgress) Done()                      {}
