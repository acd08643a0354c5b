package progress

import (
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Bar counts units of work (rows, bytes, files) towards a total.
type Bar struct {
	desc    string
	total   int64
	done    atomic.Int64
	start   time.Time
	bar     *progressbar.ProgressBar
	log     *slog.Logger
	every   time.Duration
	mu      sync.Mutex
	lastLog time.Time
}

// Options for New. The zero value draws a bar on a terminal and logs every
// 5 seconds through slog.Default() otherwise.
type Options struct {
	// Logger for the non-terminal case. The default value is slog.Default().
	Logger *slog.Logger
	// Every is the interval between log lines. The default value is 5s.
	Every time.Duration
	// Bytes formats counts as bytes. The default value counts items.
	Bytes bool
	// Quiet disables all output (tests). The default value is false.
	Quiet bool
}

// New starts a progress display for total units (-1 when unknown).
func New(total int64, desc string, opts *Options) *Bar {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Every == 0 {
		o.Every = 5 * time.Second
	}
	b := &Bar{desc: desc, total: total, start: time.Now(), log: o.Logger, every: o.Every, lastLog: time.Now()}
	if !o.Quiet && term.IsTerminal(int(os.Stderr.Fd())) {
		popts := []progressbar.Option{
			progressbar.OptionSetDescription(desc),
			progressbar.OptionSetWriter(os.Stderr),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(100 * time.Millisecond),
			progressbar.OptionOnCompletion(func() { os.Stderr.WriteString("\n") }),
		}
		if o.Bytes {
			popts = append(popts, progressbar.OptionShowBytes(true))
		}
		b.bar = progressbar.NewOptions64(total, popts...)
	} else if o.Quiet {
		b.log = nil
	}
	return b
}

// Add records n more units done.
func (b *Bar) Add(n int64) {
	if b == nil {
		return
	}
	d := b.done.Add(n)
	if b.bar != nil {
		_ = b.bar.Add64(n)
		return
	}
	if b.log == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if time.Since(b.lastLog) >= b.every {
		b.lastLog = time.Now()
		b.logLine(d, "progress")
	}
}

func (b *Bar) logLine(d int64, msg string) {
	el := time.Since(b.start)
	rate := float64(d) / el.Seconds()
	args := []any{"task", b.desc, "done", d, "rate_per_s", int64(rate), "elapsed", el.Round(time.Second)}
	if b.total > 0 {
		args = append(args, "total", b.total, "pct", int(100*d/b.total))
		if rate > 0 && d < b.total {
			args = append(args, "eta", (time.Duration(float64(b.total-d)/rate) * time.Second).Round(time.Second))
		}
	}
	b.log.Info(msg, args...)
}

// Done finishes the display.
func (b *Bar) Done() {
	if b == nil {
		return
	}
	if b.bar != nil {
		_ = b.bar.Finish()
		return
	}
	if b.log != nil {
		b.logLine(b.done.Load(), "done")
	}
}

// Count returns the units done so far.
func (b *Bar) Count() int64 { return b.done.Load() }
