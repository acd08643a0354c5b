package cli

import (
	"os"
	"strconv"
	"testing"
)

func TestProfilePath(t *testing.T) {
	pid := strconv.Itoa(os.Getpid())
	for _, c := range []struct {
		pattern, want string
		args          []string
	}{
		{"", "", []string{"pillar", "ingest"}},
		{"/p/cpu-%c-%p.pprof", "/p/cpu-backfill-embed-" + pid + ".pprof", []string{"pillar", "--log-level", "warn", "backfill", "embed", "--store", "s"}},
		{"cpu-%c.pprof", "cpu-bench-scale.pprof", []string{"pillar", "bench", "scale", "--out", "x"}},
		{"cpu-%c.pprof", "cpu-tables.pprof", []string{"pillar", "--log-format=json", "tables"}},
	} {
		if got := profilePath(c.pattern, c.args, newApp().Flags); got != c.want {
			t.Errorf("profilePath(%q, %q) = %q, want %q", c.pattern, c.args, got, c.want)
		}
	}
}
