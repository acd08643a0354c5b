package bytesize

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Units accepted by [Parse], for error messages and help texts.
const Units = "B, KiB/MiB/GiB/TiB (x1024), KB/MB/GB/TB (x1000), K/M/G/T (= KiB/MiB/GiB/TiB), any case"

var mult = map[string]float64{
	"": 1, "b": 1,
	"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
	"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
	"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
	"t": 1 << 40, "tib": 1 << 40, "tb": 1e12,
	"p": 1 << 50, "pib": 1 << 50, "pb": 1e15,
}

// Parse reads a size such as "2M", "2MB", "512mib", "1.5GiB" or "1048576".
func Parse(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool {
		return !(r >= '0' && r <= '9' || r == '.')
	})
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	}
	m, ok := mult[unit]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q (want %s)", s, t[i:], Units)
	}
	if num == "" {
		return 0, fmt.Errorf("size %q: want a number with an optional unit, e.g. 512MiB or 2GB", s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("size %q: want a number with an optional unit, e.g. 512MiB or 2GB", s)
	}
	v := math.Floor(f * m)
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q: too large (at most 8 EiB)", s)
	}
	return int64(v), nil
}

// ParseFlag is [Parse] with an error that names the flag: `--cache "2X": ...`.
func ParseFlag(flag, s string) (int64, error) {
	n, err := Parse(s)
	if err != nil {
		return 0, fmt.Errorf("--%s: %w", strings.TrimPrefix(flag, "--"), err)
	}
	return n, nil
}

// Format writes n in the largest IEC unit that divides it exactly
// ("16KiB", "1GiB", "1000"), so that Parse(Format(n)) == n.
func Format(n int64) string {
	for _, u := range []struct {
		s string
		m int64
	}{{"PiB", 1 << 50}, {"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.m == 0 {
			return strconv.FormatInt(n/u.m, 10) + u.s
		}
	}
	return strconv.FormatInt(n, 10)
}
