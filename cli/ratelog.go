package cli

import (
	"log/slog"
	"sync"
	"time"
)

// rateLimitedLog writes at most one line per interval (10s) and counts
// the lines it drops in between, so an unauthenticated client cannot
// flood a server's log.
type rateLimitedLog struct {
	log        *slog.Logger
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func newRateLimitedLog(log *slog.Logger) *rateLimitedLog { return &rateLimitedLog{log: log} }

func (r *rateLimitedLog) warn(msg string, args ...any) {
	r.mu.Lock()
	now := time.Now()
	if !r.last.IsZero() && now.Sub(r.last) < 10*time.Second {
		r.suppressed++
		r.mu.Unlock()
		return
	}
	n := r.suppressed
	r.last, r.suppressed = now, 0
	r.mu.Unlock()
	r.log.Warn(msg, append(args, "suppressed", n)...)
}
