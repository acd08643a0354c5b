package ingestbench

import "testing"

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
