// Package pipeline holds the toolkit's MapReduce jobs (rechunk, embed,
// subset evaluation, export) and the drivers that run them against a store:
// backfills, publish/rollback, subset recompute and the bulk export.
//
// Jobs implement mapreduce.Job and are registered with jobs.Register, so
// the same job value runs on the local runner and on YTsaurus (the cgo-free
// job binary jobs/cmd/pillar-job imports this package).
//
// Invariants:
//   - A chunk or embedding version never overwrites another: each has its
//     own table (chunks/<cv>, embeddings/<cv>/<model>) and registry entry.
//   - Backfills are incremental: a page is processed only when its content
//     hash has no rows in the version. Work is committed in slices of
//     Options.SlicePages pages, so an interrupted run loses at most one
//     slice; the final step drops rows of old content, sorts the table by
//     (page_key, chunk_no) and marks the version complete, in one commit.
//   - A version is complete only when every source page has rows of its
//     current content; a failing job (a bad vector, a dead model server)
//     leaves it building.
//   - A page whose text is empty has one marker row with chunk_no -1 in the
//     chunks and embeddings tables ("processed, no chunks").
//   - The compaction step holds one version's rows in memory (fine for the
//     embedded store's scale; on YTsaurus it is a sort operation).
package pipeline
