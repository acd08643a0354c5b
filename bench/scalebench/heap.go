package scalebench

import (
	"encoding/json"
	"os"
	"runtime/metrics"
	"runtime/pprof"
	"time"
)

// HeapEnv names the file a benchmark child writes its heap peaks to: when
// it is set, `pillar` samples the Go runtime's metrics (SampleHeap) for the
// whole run. The benchmark sets it for every step.
const HeapEnv = "PILLAR_BENCH_HEAP_FILE"

// ProfileEnv, set (to anything) beside HeapEnv, makes the child also write
// a heap profile (pprof, in-use = what the last collection found live) to
// the HeapEnv path + ".pprof" each time its peak live heap grows by a MiB:
// the file left holds the allocations behind the peak. For diagnosis
// (go tool pprof -sample_index=inuse_space); the benchmark does not set it.
const ProfileEnv = "PILLAR_BENCH_HEAP_PROFILE"

// HeapPeaks are a child's peaks, from runtime/metrics.
type HeapPeaks struct {
	// Live is the peak of /gc/heap/live:bytes: the heap the last
	// collection found reachable. This is what a streaming design keeps
	// flat; RSS adds the garbage the collector lets accumulate (up to the
	// runtime's soft limit) and non-Go memory.
	Live int64 `json:"live"`
	// Mapped is the peak of /memory/classes/total:bytes: all memory the Go
	// runtime has mapped (heap, stacks, metadata).
	Mapped int64 `json:"mapped"`
}

// SampleHeap records the process's heap peaks into path every 20 ms, for
// as long as the process runs; the file always holds the peaks so far
// (written again whenever one grows by a MiB), so the parent reads it after
// the child exits, however it exits.
func SampleHeap(path string) {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/total:bytes"}}
	var peak, saved HeapPeaks
	profile := os.Getenv(ProfileEnv) != ""
	var profiled int64
	for {
		metrics.Read(s)
		if s[0].Value.Kind() == metrics.KindUint64 {
			peak.Live = max(peak.Live, int64(s[0].Value.Uint64()))
		}
		if s[1].Value.Kind() == metrics.KindUint64 {
			peak.Mapped = max(peak.Mapped, int64(s[1].Value.Uint64()))
		}
		if profile && peak.Live > profiled+1<<20 {
			if f, err := os.Create(path + ".pprof.tmp"); err == nil {
				if pprof.WriteHeapProfile(f) == nil && f.Close() == nil {
					os.Rename(path+".pprof.tmp", path+".pprof")
					profiled = peak.Live
				} else {
					f.Close()
				}
			}
		}
		if peak.Live > saved.Live+1<<20 || peak.Mapped > saved.Mapped+1<<20 || saved == (HeapPeaks{}) {
			if b, err := json.Marshal(peak); err == nil && os.WriteFile(path+".tmp", b, 0o644) == nil && os.Rename(path+".tmp", path) == nil {
				saved = peak
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readHeap(path string) (HeapPeaks, bool) {
	var h HeapPeaks
	b, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(b, &h) != nil {
		return h, false
	}
	return h, true
}
