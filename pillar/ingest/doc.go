// Package ingest loads HTML and plain-text files as pages into the docs
// table of a Pillar store.
//
// Per file: markup is stripped to clean text (CleanHTML: scripts, styles,
// navigation and other boilerplate dropped; headings and paragraph breaks
// kept), the title is taken from <title> (or a text file's first line), the
// URL is the page's <link rel=canonical> if present, else BaseURL + the path
// relative to the input folder, and the page key is derived from the
// normalized URL (pillar.KeyOfURL). fetched_at is the file's modification
// time.
//
// The content hash is SHA-256 (first 16 bytes, hex) of title + NUL + clean
// text: a change to markup only (navigation, styling) is not a new version,
// a change to what a reader sees is.
//
// Invariants:
//   - A run is one transaction: either every accepted page lands or none.
//   - Re-running on unchanged files commits nothing (0 changed pages).
//   - Bad files never fail the run: binary or invalid UTF-8 files, unreadable
//     files, files over MaxPageBytes (named in Stats.Rejected) and duplicate
//     URLs (the first file in walk order wins: lexical within each folder)
//     are skipped, logged and counted.
//     Empty pages are kept (text ""); they get zero chunks downstream.
//   - Memory is bounded by Options.MemoryLimit, not by the corpus: the walk
//     streams paths to the cleaners, cleaned pages are spilled through an
//     external sort by page key (internal/extsort, runs under TempDir,
//     removed at the end), and the sorted stream is merged with the docs
//     table read in key order into the new docs table. Only the merge's
//     current rows are in memory.
package ingest
