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
//   - No driver holds anything keyed by page. Every step over the corpus is
//     an operation on the runner (a reduce by page_key): a backfill's plan
//     (PlanJob: source rows + done rows → the todo table of pages to
//     process, sliced by row ranges) and its completion (FinishJob, then
//     CopyJob into the version table), subset evaluation, the export
//     records (ExportJob), and the reconcile of publish, rollback and
//     recompute (ReconcileJob → puts and deletes tables; StateJob rewrites
//     export/state). Drivers read row counts, small summaries, and the
//     rows of the change itself (the puts and deletes they enqueue).
//   - A backfill is up to date, and a re-run commits nothing, when its
//     version is complete and its source table has not changed since the
//     generation its last plan read.
package pipeline
