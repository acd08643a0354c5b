package ingestbench

import (
	"os"
	"runtime"
	"testing"
	"time"
)

// TestSampleCPU: spinning for 100 ms shows in the process's CPU and the
// machine's busy time, and a /proc stat line with spaces in its command
// name parses.
func TestSampleCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux-only")
	}
	a := sampleCPU()
	for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end); {
	}
	b := sampleCPU()
	if b.proc-a.proc < 20*time.Millisecond || b.busy <= a.busy {
		t.Fatalf("after 100 ms of spinning: process CPU +%v, machine busy +%v", b.proc-a.proc, b.busy-a.busy)
	}
	if c := cores(a, b, func(s cpuSample) time.Duration { return s.proc }); c <= 0 || c > float64(runtime.NumCPU())+0.5 {
		t.Fatalf("process cores %v", c)
	}
	path := t.TempDir() + "/stat"
	if err := os.WriteFile(path, []byte("42 (rocksdb:low 0) S 1 1 1 0 -1 4194560 10 0 0 0 7 3 0 0 20 0 1 0 100 0 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := statCPU(path); got != 10*clockTick {
		t.Fatalf("statCPU %v, want %v", got, 10*clockTick)
	}
}

// TestSampleGC: two forced collections between two samples count as two
// cycles with a pause and some GC CPU; a window without samples' change
// reports none.
func TestSampleGC(t *testing.T) {
	a := sampleGC()
	runtime.GC()
	runtime.GC()
	b := sampleGC()
	cycles, cores, pause := gcWindow(a, b, 100*time.Millisecond)
	if cycles < 2 || cores <= 0 || pause <= 0 {
		t.Fatalf("after two runtime.GC: cycles %d, cores %v, max pause %v; want ≥ 2, > 0, > 0", cycles, cores, pause)
	}
	if c, _, p := gcWindow(b, b, time.Second); c != 0 || p != 0 {
		t.Fatalf("an empty window: cycles %d, max pause %v", c, p)
	}
}
