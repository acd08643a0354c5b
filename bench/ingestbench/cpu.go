package ingestbench

import (
	"math"
	"os"
	"path/filepath"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Where a window's CPU went: the bench process (the measured node, its
// RocksDB threads, the delta producer; the reader and the reference node
// are processes of their own), its RocksDB background threads alone, and
// the whole machine. Linux only (/proc); elsewhere the figures are zero.

// cpuSample is one reading of the counters.
type cpuSample struct {
	at                time.Time
	proc, rocks, busy time.Duration // busy: the machine's non-idle time, all CPUs
	kernel            time.Duration // the machine's kernel threads (writeback, journal, kworkers)
	// Pressure stall totals (/proc/pressure): time some task waited for a
	// CPU, and some (or every) task waited for I/O.
	cpuSome, ioSome, ioFull time.Duration
}

// clockTick is USER_HZ, the unit of /proc's CPU times: 100 on every Linux
// architecture Go supports.
const clockTick = 10 * time.Millisecond

func sampleCPU() cpuSample {
	s := cpuSample{at: time.Now()}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.proc = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	s.rocks = rocksThreadsCPU()
	s.busy = machineBusy()
	s.kernel = kernelThreadsCPU()
	s.cpuSome, _ = pressure("cpu")
	s.ioSome, s.ioFull = pressure("io")
	return s
}

// pressure reads the "some" and "full" stall totals of /proc/pressure/<res>.
func pressure(res string) (some, full time.Duration) {
	b, err := os.ReadFile("/proc/pressure/" + res)
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || !strings.HasPrefix(f[4], "total=") {
			continue
		}
		us, _ := strconv.ParseInt(strings.TrimPrefix(f[4], "total="), 10, 64)
		switch f[0] {
		case "some":
			some = time.Duration(us) * time.Microsecond
		case "full":
			full = time.Duration(us) * time.Microsecond
		}
	}
	return some, full
}

// pfKthread is the kernel-thread bit of a task's flags (/proc/<pid>/stat
// field 9).
const pfKthread = 0x00200000

// kernelThreadsCPU sums the CPU time of the machine's kernel threads:
// the writeback, journal and I/O completion work that ingest and
// compaction cause lands there, outside any process.
func kernelThreadsCPU() time.Duration {
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	var total time.Duration
	for _, p := range procs {
		f := statFields(p)
		if len(f) < 13 {
			continue
		}
		if flags, _ := strconv.ParseUint(f[6], 10, 64); flags&pfKthread == 0 {
			continue
		}
		total += fieldsCPU(f)
	}
	return total
}

// rocksThreadsCPU sums the CPU time of the process's threads RocksDB named
// "rocksdb:<pool>" (compaction and flush).
func rocksThreadsCPU() time.Duration {
	tasks, _ := filepath.Glob("/proc/self/task/*")
	var total time.Duration
	for _, t := range tasks {
		comm, err := os.ReadFile(filepath.Join(t, "comm"))
		if err != nil || !strings.HasPrefix(string(comm), "rocksdb:") {
			continue
		}
		total += statCPU(filepath.Join(t, "stat"))
	}
	return total
}

// statCPU reads utime+stime (fields 14 and 15) of a /proc stat file.
func statCPU(path string) time.Duration { return fieldsCPU(statFields(path)) }

// statFields returns a /proc stat file's fields from the third on (f[0] is
// field 3, the state), or nil.
func statFields(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	// The command name (field 2) may hold spaces: count from its ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

func fieldsCPU(f []string) time.Duration {
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+k) * clockTick
}

// machineBusy is the machine's CPU time spent neither idle nor waiting for
// I/O, summed over CPUs (/proc/stat).
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, v := range f[1:8] { // user nice system idle iowait irq softirq
		if i == 3 || i == 4 {
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		busy += n
	}
	return time.Duration(busy) * clockTick
}

// cores turns the CPU time between two samples into cores busy.
func cores(a, b cpuSample, f func(cpuSample) time.Duration) float64 {
	wall := b.at.Sub(a.at)
	if wall <= 0 {
		return 0
	}
	return float64(f(b)-f(a)) / float64(wall)
}

// schedHist is the Go runtime's histogram of the time goroutines of this
// process (the node's read handlers among them) spent runnable before
// they ran (/sched/latencies:seconds), cumulative.
type schedHist struct {
	counts  []uint64
	buckets []float64
}

func sampleSched() schedHist {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return schedHist{}
	}
	h := s[0].Value.Float64Histogram()
	return schedHist{counts: slices.Clone(h.Counts), buckets: h.Buckets}
}

// schedQuantile is the q-quantile of the scheduling latencies between two
// samples (a bucket's upper bound; 0 with none).
func schedQuantile(a, b schedHist, q float64) time.Duration {
	if len(a.counts) != len(b.counts) || len(b.counts) == 0 {
		return 0
	}
	var total uint64
	d := make([]uint64, len(b.counts))
	for i := range d {
		d[i] = b.counts[i] - a.counts[i]
		total += d[i]
	}
	if total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i, c := range d {
		if seen += c; seen >= rank {
			hi := b.buckets[i+1]
			if math.IsInf(hi, 1) {
				hi = b.buckets[i]
			}
			return time.Duration(hi * 1e9)
		}
	}
	return 0
}

// gcSample is this process's Go collector, cumulative: cycles, CPU time
// (/cpu/classes/gc/total: mark workers, assists, pauses) and the
// stop-the-world pause histogram (/sched/pauses/total/gc:seconds).
type gcSample struct {
	cycles uint64
	cpu    float64 // seconds
	pauses schedHist
}

func sampleGC() gcSample {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/sched/pauses/total/gc:seconds"}}
	metrics.Read(s)
	var g gcSample
	if s[0].Value.Kind() == metrics.KindUint64 {
		g.cycles = s[0].Value.Uint64()
	}
	if s[1].Value.Kind() == metrics.KindFloat64 {
		g.cpu = s[1].Value.Float64()
	}
	if s[2].Value.Kind() == metrics.KindFloat64Histogram {
		h := s[2].Value.Float64Histogram()
		g.pauses = schedHist{counts: slices.Clone(h.Counts), buckets: h.Buckets}
	}
	return g
}

// gcWindow is the collector's work between two samples taken wall apart:
// cycles, cores busy with GC, and the longest stop-the-world pause (a
// bucket's upper bound).
func gcWindow(a, b gcSample, wall time.Duration) (cycles uint64, cores float64, maxPause time.Duration) {
	if wall > 0 {
		cores = (b.cpu - a.cpu) / wall.Seconds()
	}
	return b.cycles - a.cycles, cores, schedQuantile(a.pauses, b.pauses, 1)
}
