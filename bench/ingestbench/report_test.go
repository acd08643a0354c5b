package ingestbench

import (
	"strings"
	"testing"
	"time"
)

// TestEvaluateMissingIsMissed: a run whose scenarios measured nothing
// reports every target of the modes it ran as missed, not as skipped.
func TestEvaluateMissingIsMissed(t *testing.T) {
	r := &Report{Options: Options{Modes: []string{Unpaced, Paced}}, Reference: true}
	r.evaluate()
	if len(r.Checks) != 11 {
		t.Fatalf("%d checks, want 11: %+v", len(r.Checks), r.Checks)
	}
	for _, c := range r.Checks {
		if c.Pass {
			t.Errorf("passed with nothing measured: %+v", c)
		}
	}
	r = &Report{Options: Options{Modes: []string{Paced}}}
	r.evaluate()
	if len(r.Checks) != 5 { // 3 read-tail targets + 2 visibility targets; no unpaced, no reference
		t.Fatalf("paced only: %d checks, want 5: %+v", len(r.Checks), r.Checks)
	}
}

// TestIdleNoise: the noise line reads only idle windows, counts those whose
// p99 is over 1.25 × the reference's, and is empty without idle windows.
func TestIdleNoise(t *testing.T) {
	if n := (&Report{}).IdleNoise(); n != "" {
		t.Fatalf("no windows: %q", n)
	}
	ms := time.Millisecond
	r := &Report{Results: []*Result{
		{Scenario: Idle, Reads: 100, P99: 10 * ms, RefReads: 100, RefP99: 10 * ms},
		{Scenario: Idle, Reads: 100, P99: 13 * ms, RefReads: 100, RefP99: 10 * ms},
		{Scenario: Idle, Reads: 100, P99: 8 * ms, RefReads: 100, RefP99: 10 * ms},
		{Scenario: Deltas, Reads: 100, P99: 90 * ms, RefReads: 100, RefP99: 10 * ms}, // not idle: left out
	}}
	got := r.IdleNoise()
	for _, want := range []string{"3 idle windows", "8.00–13.00 ms (median 10.00)", "0.80–1.30× (median 1.00×), 1 of 3 over 1.25×"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
	if !strings.Contains(r.Markdown(), got) {
		t.Error("the noise line is not in the report")
	}
}
