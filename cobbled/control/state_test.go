package control

import (
	"testing"
	"time"
)

func TestNodeState(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	down, gone := 10*time.Second, time.Minute
	for _, c := range []struct {
		last, started, now time.Duration // offsets from t0
		want               string
	}{
		{0, 0, 0, StateUp},
		{0, 0, 9 * time.Second, StateUp},
		{0, 0, 10 * time.Second, StateDown},
		{0, 0, 59 * time.Second, StateDown},
		{0, 0, 60 * time.Second, StateGone},
		// Heartbeats from before the control plane started count from its start.
		{0, time.Hour, time.Hour + 5*time.Second, StateUp},
		{0, time.Hour, time.Hour + 30*time.Second, StateDown},
		{0, time.Hour, time.Hour + 2*time.Minute, StateGone},
		// A heartbeat "in the future" (clock skew between instances) is up.
		{time.Minute, 0, 0, StateUp},
	} {
		got := NodeState(t0.Add(c.last), t0.Add(c.started), t0.Add(c.now), down, gone)
		if got != c.want {
			t.Errorf("last %v started %v now %v: %s, want %s", c.last, c.started, c.now, got, c.want)
		}
	}
}
