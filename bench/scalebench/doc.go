// Package scalebench is the corpus-scale benchmark behind `pillar bench
// scale` (make bench-scale): it generates N synthetic HTML pages of a given
// size, runs the full round (ingest → rechunk → embed → subsets recompute →
// publish → export) and then the incremental round (edit a fraction of the
// pages, re-ingest them, rechunk, embed, publish: the queue is then ready for
// Lorry), for each N and page size, and reports per step the peak RSS, the
// pages per second and the bytes written.
//
// Measurement:
//   - Every step is its own child process (the pillar binary, with the
//     benchmark's --memory-limit), so its peak RSS is the child's
//     ru_maxrss from wait4 — the whole process, Go runtime and cgo
//     included, not a heap estimate.
//   - Bytes written are the sizes of the files the step created or changed
//     in the store (and the export folder), found by comparing the folders'
//     listings before and after; I/O written is the child's ru_oublock ×
//     512 (spill files included).
//   - Pages per second: the pages the step handled (all of them in the full
//     round, the edited ones in the incremental round) over its wall time.
//     This is the target. On a shared machine the wall time of a long round
//     depends on the load it met, so every step also records the child's
//     CPU seconds (rusage user + system; pages per CPU-second) and the
//     1-minute load average at its start and end, and a size and N may be
//     run more than once (`--n 10000,160000,10000`, or runs of one N merged
//     with --from-json): the big round must keep its rate against every
//     round of the small N, so bracketing it with small rounds shows the
//     load's effect without choosing the round that passes.
//
// Floors (Options.Floors, --floors): after each step of the full round the
// step's floor runs as a child of its own (`pillar bench scale floor`,
// package bench/scalefloor: the step's input read with parquet-go, its own
// transformation, the same rows written to a scratch folder, no framework),
// measured as the step is. The report gives per step pages per CPU-second of
// both and their ratio, and each one's CPU utilisation (CPU-seconds over wall
// seconds: wall pages/s over the single-core rate). A floor that wrote no
// rows, or another count than its step (table rows, publish's desired
// records, the export's file rows), fails the run.
//
// The harness is a driver of CLI commands: it links none of the component
// packages, so what it measures is what a user runs.
package scalebench
