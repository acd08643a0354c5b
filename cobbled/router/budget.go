package router

import "sync"

// budget is the hedge token bucket: every primary sub-request earns ratio
// tokens (up to burst), every hedge spends one. Over any stretch of time,
// hedges ≤ ratio × primaries + burst, so a cluster-wide slowdown, where every
// sub-request crosses its hedge delay, adds at most ratio extra load instead
// of doubling it.
type budget struct {
	mu     sync.Mutex
	tokens float64
	ratio  float64
	burst  float64
}

func newBudget(ratio, burst float64) *budget {
	return &budget{tokens: burst, ratio: ratio, burst: burst}
}

// earn credits one primary sub-request.
func (b *budget) earn() {
	b.mu.Lock()
	b.tokens = min(b.tokens+b.ratio, b.burst)
	b.mu.Unlock()
}

// take spends one token if there is one.
func (b *budget) take() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

func (b *budget) level() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tokens
}
