// Package scalefloor is the floor of each step of `pillar bench scale
// --floors`: a bare loop that does a step's I/O and its transformation and
// nothing else, run on the real input the step read, so that the step's
// pages per CPU-second can be read as a ratio to what the same work costs
// without the framework.
//
// For each step the floor reads the step's input rows with parquet-go from
// the files of the input tables (or, for ingest, the corpus files), applies
// the project's own transformation (ingest.ReadFile; pipeline.ChunkRows; the
// embedder of the model spec in the EmbedJob's batches, with
// embedder.CheckVector; subsets.NewPage, Set.AppendEval and TopK; and
// pipeline.PageRecord for publish and export), and writes the same output
// rows with the same schema, codec and row-group bounds as the step's
// writers into a scratch folder:
//
//	step               input                                  output rows (codec, row group)
//	ingest             corpus files                           pillar.Doc (ZSTD, 8,192 rows / RowGroupShare)
//	rechunk            docs                                   pillar.Chunk (same)
//	embed              chunks/<cv>                            pillar.Embedding (same)
//	subsets recompute  docs                                   pillar.SubsetMember per policy (same)
//	publish            docs, chunks, embeddings, members      pipeline.Desired (a new pair's records: ZSTD,
//	                                                          as ingest) + export/state rows
//	export             docs, chunks, embeddings, members      sstbuilder.ExportRow per partition (Snappy,
//	                                                          256 rows) + export/state rows
//
// What a floor leaves out is what the framework adds: no sort, merge,
// transaction, layering, planning, checksums, fsync or bookkeeping tables.
//
// Invariants:
//   - A floor does at least the work of its step: every input row is read
//     and transformed, and Result.RowsOut is the number of rows the step
//     writes for the same input (the benchmark fails a run where they
//     differ, and a floor that wrote no rows fails).
//   - Work is split into units (a row group of an input file, a batch of
//     corpus files) handed to Options.Workers goroutines (GOMAXPROCS by
//     default), each with its own transformation state and output files.
//     Publish and export join four sorted tables by page key: one goroutine
//     per input table decodes it, one walks them in key order, and the
//     workers build and write the records.
//   - The floor reads the store only through its files (TableFiles of one
//     snapshot, held until it returns) and writes only under
//     Options.Scratch.
package scalefloor
