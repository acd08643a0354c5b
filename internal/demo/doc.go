// Package demo runs the whole Pillar pipeline on embedded defaults: ingest a
// corpus, backfill, compute subsets, publish, bulk export to SST batches in a
// local object store, serve them from three cobbled nodes (child processes)
// under a control plane (SQLite), read every page back through the hedging
// router, re-chunk and re-publish while reading, deliver incremental changes
// with Lorry, and write a report with plots.
//
// Every check is real: a content-hash mismatch, a failed read during the
// re-publish, or a change that is not readable after Lorry fails the run.
// Child processes are stopped when Run returns, whatever happened.
package demo
