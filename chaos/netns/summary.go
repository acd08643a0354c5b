package netns

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// ScenarioResult is one scenario's outcome.
type ScenarioResult struct {
	Name, Window string
	OK           bool
	Note         string
	Took         time.Duration
	Converge     time.Duration // after the heal
	Failed       int           // failed router reads in its window
	FirstError   string
	Metrics      map[string]string
}

// CheckResult is one check's outcome.
type CheckResult struct {
	Name       string
	OK         bool
	Violations int
	Examples   []string
}

// Summary is a run's outcome.
type Summary struct {
	Seed              int64
	Started           time.Time
	Took              time.Duration
	Scenarios         []ScenarioResult
	Checks            []CheckResult
	Reads             map[string]int
	ChecksumsCompared int
	Batches           int
	Crashes           int
	Sabotaged         string
	Error             string
}

// Passed reports whether the run was carried out and every check held.
func (s *Summary) Passed() bool {
	if s.Error != "" || len(s.Checks) == 0 {
		return false
	}
	for _, c := range s.Checks {
		if !c.OK {
			return false
		}
	}
	return true
}

// Check returns the named check.
func (s *Summary) Check(name string) CheckResult {
	for _, c := range s.Checks {
		if c.Name == name {
			return c
		}
	}
	return CheckResult{Name: name}
}

func (h *history) countOf(check string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.counts[check]
}

func (s *Summary) fromHistory(h *history) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, name := range []string{CheckPublished, CheckOneVersion, CheckIdentical, CheckOnce, CheckScenario} {
		s.Checks = append(s.Checks, CheckResult{Name: name, OK: h.counts[name] == 0, Violations: h.counts[name], Examples: h.examples[name]})
	}
	s.Reads = map[string]int{}
	for k, v := range h.reads {
		s.Reads[k] = v
	}
}

// Write prints the summary.
func (s *Summary) Write(w io.Writer) {
	fmt.Fprintf(w, "\nnetns summary (seed %d, %s)\n", s.Seed, s.Took.Round(time.Second))
	if s.Error != "" {
		fmt.Fprintf(w, "  ERROR: %s\n", s.Error)
	}
	fmt.Fprintln(w, "  scenarios:")
	for _, r := range s.Scenarios {
		mark := "ok  "
		if !r.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "    %s %-22s %6s  %s\n", mark, r.Window, r.Took.Round(time.Second), r.Note)
		if r.Failed > 0 {
			fmt.Fprintf(w, "         %d failed reads; first: %s\n", r.Failed, r.FirstError)
		}
	}
	ok, failed := 0, 0
	for k, v := range s.Reads {
		if strings.HasSuffix(k, " ok") {
			ok += v
		} else {
			failed += v
		}
	}
	fmt.Fprintf(w, "  router reads: %d ok, %d failed (all windows); replica checksums compared: %d; batches: %d; unexpected exits: %d\n",
		ok, failed, s.ChecksumsCompared, s.Batches, s.Crashes)
	if failed > 0 {
		var ks []string
		for k, v := range s.Reads {
			if strings.HasSuffix(k, " failed") {
				ks = append(ks, fmt.Sprintf("%s %d", strings.TrimSuffix(k, " failed"), v))
			}
		}
		sort.Strings(ks)
		fmt.Fprintf(w, "  failed reads by window: %s\n", strings.Join(ks, "; "))
	}
	if s.Sabotaged != "" {
		fmt.Fprintf(w, "  sabotage: %s\n", s.Sabotaged)
	}
	fmt.Fprintln(w, "  checks:")
	for _, c := range s.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "    %s %s (%d violations)\n", mark, c.Name, c.Violations)
		for _, e := range c.Examples {
			fmt.Fprintf(w, "         %s\n", e)
		}
	}
	if s.Passed() {
		fmt.Fprintln(w, "  PASSED")
	} else {
		fmt.Fprintln(w, "  FAILED")
	}
}
