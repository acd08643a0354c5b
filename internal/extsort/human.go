package extsort

import "fmt"

// HumanBytes formats a byte count as GiB or MiB with one decimal, or as
// whole KiB (rounded up) below 1 MiB; for messages about the disk space a
// sort's runs and outputs need.
func HumanBytes(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	default:
		return fmt.Sprintf("%d KiB", (b+1023)>>10)
	}
}
