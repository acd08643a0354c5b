package chaos

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Ops counts the writer's work.
type Ops struct {
	Commits, Adds, Updates, Deletes, WriteErrors int
}

// CheckResult is the outcome of one check.
type CheckResult struct {
	Name       string
	OK         bool
	Violations int      // how many were found
	Examples   []string // the first few
}

// Summary is the outcome of a run.
type Summary struct {
	Seed     int64
	Duration time.Duration
	Schedule []Fault
	Ops      Ops
	// Reads counts read requests and per-key outcomes by kind; ReadErrors
	// holds the first error of each failed kind.
	Reads      map[string]int
	ReadErrors map[string]string
	// Faults counts injected faults by kind; FaultsSkipped says why a kind
	// could not be injected.
	Faults        map[string]int
	FaultsSkipped map[string]string
	// Crashes counts exits of child processes nobody asked for (each was
	// restarted); Starts counts every start.
	Crashes, Starts map[string]int
	// S3Injected counts object-store requests the proxies faulted.
	S3Requests, S3Injected int64
	// CorruptDetected counts replicas that reported a FaultCorruptObject
	// batch as corrupt before it was retracted; CorruptApplied lists
	// replicas that applied one (must stay empty).
	CorruptDetected int
	CorruptApplied  []string
	// LorryKills describes each kill-lorry fault: whether its bulk
	// backlog was queued, what was undelivered when Lorry died, and how
	// many fresh commits the writer made until Lorry ran again.
	LorryKills   []LorryKill
	Converge     time.Duration
	Batches      int
	FinalChecked int
	Checks       []CheckResult
	Error        string
}

// LorryKill is one kill-lorry fault (see Summary.LorryKills).
type LorryKill struct {
	BacklogQueued                     bool
	BulkUndelivered, FreshUndelivered int64
	FreshCommitsWhileDown             int64
}

func newSummary(o Options) *Summary {
	return &Summary{Seed: o.Seed, Duration: o.Duration, Reads: map[string]int{}, Faults: map[string]int{},
		FaultsSkipped: map[string]string{}, Crashes: map[string]int{}, Starts: map[string]int{}}
}

func (s *Summary) check(name string, bad []string, n int) {
	for i := range s.Checks {
		if s.Checks[i].Name == name {
			s.Checks[i].OK = s.Checks[i].OK && n == 0
			s.Checks[i].Violations += n
			s.Checks[i].Examples = append(s.Checks[i].Examples, bad...)
			return
		}
	}
	s.Checks = append(s.Checks, CheckResult{Name: name, OK: n == 0, Violations: n, Examples: bad})
}

// checkFromHistory records checks 2 and 3 from what the readers found.
func (s *Summary) checkFromHistory(h *history) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range []string{CheckNoPhantom, CheckMonotonic} {
		s.check(c, append([]string(nil), h.violations[c]...), h.counts[c])
	}
}

// Passed reports whether the run completed and all four checks passed.
func (s *Summary) Passed() bool {
	if s.Error != "" || len(s.Checks) < 4 {
		return false
	}
	for _, c := range s.Checks {
		if !c.OK {
			return false
		}
	}
	return true
}

func (r *run) collectCounts() {
	r.sum.Reads = r.hist.snapshotReads()
	r.sum.ReadErrors = r.hist.firstReadErrs()
	for _, p := range r.procs() {
		if p == nil {
			continue
		}
		p.mu.Lock()
		r.sum.Crashes[p.name], r.sum.Starts[p.name] = p.crashes, p.starts
		p.mu.Unlock()
	}
	add := func(p *S3Proxy) {
		if p != nil {
			q, i := p.Counts()
			r.sum.S3Requests += q
			r.sum.S3Injected += i
		}
	}
	add(r.lorryS3)
	for _, n := range r.nodes {
		add(n.s3)
	}
}

// Write prints the summary.
func (s *Summary) Write(w io.Writer) {
	fmt.Fprintf(w, "\n=== chaos summary (seed %d, %s of faults) ===\n", s.Seed, s.Duration)
	fmt.Fprintf(w, "operations: %d commits, %d changes (%d adds, %d updates, %d deletes), %d commit errors\n",
		s.Ops.Commits, s.Ops.Adds+s.Ops.Updates+s.Ops.Deletes, s.Ops.Adds, s.Ops.Updates, s.Ops.Deletes, s.Ops.WriteErrors)
	fmt.Fprintf(w, "faults injected:")
	total := 0
	for _, k := range AllFaults {
		if n := s.Faults[k]; n > 0 {
			fmt.Fprintf(w, " %s=%d", k, n)
			total += n
		}
	}
	fmt.Fprintf(w, " (total %d; %d of %d object-store requests faulted)\n", total, s.S3Injected, s.S3Requests)
	for _, k := range sortedKeys(s.FaultsSkipped) {
		fmt.Fprintf(w, "  NOT injected %s: %s\n", k, s.FaultsSkipped[k])
	}
	fmt.Fprintf(w, "process starts / unexpected exits:")
	for _, k := range sortedKeys(s.Starts) {
		fmt.Fprintf(w, " %s=%d/%d", k, s.Starts[k], s.Crashes[k])
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "reads by outcome:\n")
	for _, k := range sortedKeys(s.Reads) {
		fmt.Fprintf(w, "  %-48s %d\n", k, s.Reads[k])
		if e, ok := s.ReadErrors[k]; ok {
			fmt.Fprintf(w, "      first: %s\n", tail(e, 300))
		}
	}
	fmt.Fprintf(w, "batches registered: %d; time to converge after the faults stopped: %s; final state checked on %d (node, key) pairs\n",
		s.Batches, s.Converge.Round(time.Millisecond), s.FinalChecked)
	for i, k := range s.LorryKills {
		fmt.Fprintf(w, "lorry kill %d: bulk backlog queued %v; at the kill %d bulk and %d fresh records undelivered; %d fresh-only commits until it ran again\n",
			i+1, k.BacklogQueued, k.BulkUndelivered, k.FreshUndelivered, k.FreshCommitsWhileDown)
	}
	for _, c := range s.Checks {
		res := "PASS"
		if !c.OK {
			res = fmt.Sprintf("FAIL (%d violations, seed %d)", c.Violations, s.Seed)
		}
		fmt.Fprintf(w, "check %-40s %s\n", c.Name, res)
		for _, e := range c.Examples {
			fmt.Fprintf(w, "    %s\n", e)
		}
	}
	if s.Error != "" {
		fmt.Fprintf(w, "run error: %s\n", s.Error)
	}
	verdict := "PASSED"
	if !s.Passed() {
		verdict = fmt.Sprintf("FAILED — replay with: pillar chaos --seed %d --duration %s", s.Seed, s.Duration)
	}
	fmt.Fprintf(w, "result: %s\n", strings.TrimSpace(verdict))
}
