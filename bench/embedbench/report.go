package embedbench

import (
	"fmt"
	"strings"
)

// Markdown is the report as a table, with the command that made it.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Embed step around a slow model\n\n")
	fmt.Fprintf(&b, "`pillar bench embed --pages %d --batch %d --concurrency %d --latency %s --rounds %d`: %d chunks; the model (fakemodel, a labelled fake) answers a batch of %d in %s with %d slots, a limit of %.0f chunks/s.\n\n",
		r.Pages, r.Batch, r.Conc, r.Latency, len(r.Rounds), r.Chunks, r.Batch, r.Latency, r.Conc, r.Capacity)
	fmt.Fprintf(&b, "| round | bare loop chunks/s | pipeline chunks/s | pipeline ÷ bare | pipeline ÷ model limit | requests in flight |\n|---|---|---|---|---|---|\n")
	for i, rd := range r.Rounds {
		fmt.Fprintf(&b, "| %d | %.0f | %.0f | %.2f× | %.2f× | %d |\n", i+1, rd.Bare, rd.Pipeline, rd.Pipeline/rd.Bare, rd.Pipeline/r.Capacity, rd.MaxInFlight)
	}
	verdict := "met"
	if r.VsCapacity < Target {
		verdict = "NOT met"
	}
	fmt.Fprintf(&b, "\nMedian: pipeline %.2f× the bare loop, %.2f× the model's limit (bare loop %.2f× the limit). Target ≥ %.1f× the model's limit: %s.\n",
		r.VsBare, r.VsCapacity, r.BareVsCap, Target, verdict)
	return b.String()
}
