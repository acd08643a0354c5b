// Package demo runs the whole Pillar pipeline on embedded defaults: ingest a
// corpus, backfill, compute subsets, publish, bulk export to SST batches in a
// local object store, serve them from three cobbled nodes (child processes)
// under a control plane (SQLite), read every page back through the hedging
// router, re-chunk and re-publish while reading, deliver incremental changes
// with Lorry, and write a report with plots.
//
// Every check is real: a content-hash mismatch, a failed read during the
// re-publish, or a change that is not readable after Lorry fails the run.
//
// Every check derives from the data, so the demo runs on any folder of HTML
// documentation: its policies (assets/policies.yaml, embedded) use only what
// every page has; the pages it edits are picked from the store among the
// exported ones; its policy change removes a few, never all, pages of the
// largest exported subset from every exported subset. A step that should
// change something and changes nothing fails the run, with the reason at
// the top of demo-report.md: no page ingested, no exported page, nothing
// read back, no read during the re-publish, changed pages ≠ edited files,
// no puts for the edits, no puts/deletes (or fewer deletes than removed
// pages) for the policy change, 0 batches from Lorry. The report's numbers
// are the fields the narrative prints.
//
// Child processes are stopped when Run returns, whatever happened; an error
// names their logs only when they were started.
package demo
