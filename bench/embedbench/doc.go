// Package embedbench measures the embed step's overhead around a slow
// model: how many chunks per second `pillar backfill embed` gets out of a
// model server against what the model alone allows at that concurrency.
//
// The model is jobs/embedder/fakemodel, a labelled fake OpenAI-format
// server with Concurrency slots, each request holding its slot for Latency
// (50 ms per batch of 64 chunks by default). Three figures come out of one
// run, on the same chunks:
//
//   - capacity: the model's own limit, Concurrency × Batch / Latency;
//   - bare: a loop that reads the chunks table and keeps Concurrency
//     batches at the model through the same openai embedder, writing
//     nothing (no job, no rows, no commit): what a client can get;
//   - pipeline: pipeline.Embed with EmbedConcurrency and Batch, timed from
//     call to committed version, its rows counted in the version.
//
// # Invariants
//
//   - Every round embeds every chunk: a pipeline version with fewer rows
//     than the chunks table, or a bare loop that sent fewer inputs, fails
//     the run. Each round's pipeline embeds under a model name of its own,
//     so no round finds the previous one's version complete.
//   - Ratios are taken within a round (the same machine load); the
//     report gives the median over rounds.
//   - No figure is asserted in code: the report states the ≥ 0.9× target
//     and whether the run met it.
package embedbench
