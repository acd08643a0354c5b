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
//     process, sliced by row ranges; for a version that exists it runs on
//     the source's (page, content hash) projection and the todo pages'
//     rows are then selected, as the incremental reconcile selects) and
//     its completion (FinishJob, then
//     CopyJob into the version table), subset evaluation, the export
//     records (ExportJob), and the reconcile of publish, rollback and
//     recompute (ReconcileJob → puts and deletes tables, applied as a delta
//     of export/state; StateJob rewrites it for a bulk export or a return
//     to a saved state). Drivers read row counts, small summaries, and the
//     rows of the change itself (the puts and deletes they enqueue, and
//     the keys of the deltas an incremental reconcile looks at).
//   - A subset recompute writes each member table's change as a delta
//     (SubsetDiffJob compares the new generation with the current one by
//     page_key and writes one MemberChange row per subset and page that
//     entered, left or changed, all subsets in one table: the delta and
//     its undo are read from it); when the change is over half the table (and over
//     minMemberRewrite/2 pages), or the table is new, it is rewritten.
//     The generation replaced is kept in history as the undo of the change
//     (MemberUndo rows, SubsetGen.Undo): `subsets diff` rebuilds it from
//     the current members and the undo, so no recompute copies a whole
//     generation. History from before undo tables is read as full copies.
//   - A backfill is up to date, and a re-run commits nothing, when its
//     version is complete and its source table has not changed since the
//     generation its last plan read.
//
// # Watermark: the incremental reconcile
//
// A small change costs the change in publish and recompute too.
// export/state carries a
// watermark (the attribute export/watermark, Watermark): the pair,
// encoding, partition count and exported member tables its rows were
// computed for, and per input table (docs, the chunk and embedding
// tables, the member tables) the layers reflected — the base's generation
// and the first delta seq not seen (LayerMark) — plus export/state's own
// next delta seq. Re-publishing the live pair reads the watermark and,
// when it applies, reconciles only the pages of the delta and deletes
// layers written since (a subset recompute: and the pages whose membership
// changed, its membership deltas; it reads the members from its new
// generations):
//
//  1. the keys of those layers (small tables) are read, sorted and
//     deduplicated (at most MaxIncrementalPages, else the full path);
//  2. the rows of those pages are selected from docs, chunks,
//     embeddings, the member tables and export/state — on the local
//     runner in this process with pillar.ReadKeys (a merge that scans only
//     the selected rows and reads the others' key column only), on another
//     runner (YTsaurus) by one SelectJob reduce on the cluster;
//  3. ExportJob and ReconcileJob run over those small tables as they run
//     over the whole ones, so the puts and deletes, the queued records and
//     the delta of export/state are the full reconcile's, and the number
//     of pages export/state holds is its row count adjusted by the change.
//
// Everything in 1–2 reads one transaction's state, and the new watermark
// names those layers, so a delta committed meanwhile is picked up by the
// next publish. The watermark is written in the transaction that writes
// export/state (reconcile, the bulk export's commit) and removed in the
// one that leaves export/state stale (a bulk mark). A watermark may name
// older layers than export/state reflects — a recompute's names the member
// tables as they were before its own deltas — which costs a later
// reconcile those pages again, never a missed one. It does not apply — the full reconcile runs — when
// there is none, for another pair, encoding, partition count or set of
// exported subsets, when export/state has another delta than the one it
// names, when an input's base was replaced (a compaction folds the deltas
// it counts on, a rewrite or a first build replaces them), for a return
// to a saved state, and with Options.FullReconcile. ExportPlan.Incremental
// and Changed say which path ran; an incremental plan's Skipped counts the
// changed pages only.
package pipeline
