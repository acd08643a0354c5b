package bytesize

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		// The inputs of issue 21, where three parsers disagreed.
		{"2M", 2 << 20}, {"2MB", 2_000_000}, {"512mib", 512 << 20},
		{"1.5GiB", 3 << 29}, {"1048576", 1 << 20}, {"0", 0},
		{"16KiB", 16 << 10}, {"16kib", 16 << 10}, {"16KIB", 16 << 10}, {"16k", 16 << 10}, {"16K", 16 << 10},
		{"16kb", 16_000}, {"16KB", 16_000}, {"1gb", 1e9}, {"1G", 1 << 30}, {"1g", 1 << 30},
		{"2TiB", 2 << 40}, {"2tb", 2e12}, {"1P", 1 << 50}, {"1pb", 1e15},
		{"100B", 100}, {"100b", 100}, {" 64 MiB ", 64 << 20}, {"1.5MB", 1_500_000},
		{".5KiB", 512}, {"1.9", 1}, {"0.3B", 0},
	} {
		got, err := Parse(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ in, msg string }{
		{"", "want a number"}, {"MiB", "want a number"}, {"-1MiB", "unknown unit"}, {"2X", `unknown unit "X"`},
		{"2 mibs", "unknown unit"}, {"1.2.3", "want a number"}, {"1e3", "unknown unit"},
		{"9999999PiB", "too large"}, {"9223372036854775807", "too large"}, {"two", "unknown unit"},
	} {
		got, err := Parse(tc.in)
		if err == nil {
			t.Errorf("Parse(%q) = %d, want an error", tc.in, got)
			continue
		}
		if !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), "\""+tc.in+"\"") {
			t.Errorf("Parse(%q) error %q: want it to quote the value and say %q", tc.in, err, tc.msg)
		}
	}
}

func TestParseFlagNamesFlag(t *testing.T) {
	_, err := ParseFlag("cache", "2X")
	if err == nil || !strings.HasPrefix(err.Error(), `--cache: size "2X"`) {
		t.Fatalf("ParseFlag error = %v", err)
	}
	if n, err := ParseFlag("--block-size", "4KiB"); err != nil || n != 4096 {
		t.Fatalf("ParseFlag = %d, %v", n, err)
	}
}

func TestFormatRoundTrips(t *testing.T) {
	for _, n := range []int64{0, 1, 1000, 1024, 16 << 10, 3 << 29, 1 << 30, 5 << 40, 1e9} {
		s := Format(n)
		if back, err := Parse(s); err != nil || back != n {
			t.Errorf("Parse(Format(%d)=%q) = %d, %v", n, s, back, err)
		}
	}
	if Format(16<<10) != "16KiB" || Format(1000) != "1000" {
		t.Errorf("Format: %q %q", Format(16<<10), Format(1000))
	}
}
