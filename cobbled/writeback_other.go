//go:build !linux

package cobbled

// startWriteback does nothing off Linux: the fsync writes the whole file.
func startWriteback(f any, off, n int64) {}
