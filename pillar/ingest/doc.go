// Package ingest loads HTML and plain-text files as pages into the docs
// table of a Pillar store.
//
// Per file: markup is stripped to clean text (CleanHTML: scripts, styles,
// navigation and other boilerplate dropped; headings and paragraph breaks
// kept), the title is taken from <title> (or a text file's first line), the
// URL is the page's <link rel=canonical> if it is an http(s) URL, else
// BaseURL + the path relative to the input folder (nested folders keep their
// path), and the page key is derived from the normalized URL
// (pillar.KeyOfURL). fetched_at is the file's modification time.
//
// Real documentation folders, as Debian and others install them:
//   - a canonical link that is not http(s) (file:// links to the installed
//     folder) is ignored in favour of BaseURL + the path and counted once in
//     the summary (Options.Canonical: prefer, ignore, require);
//   - pages in other encodings are decoded to UTF-8: a byte-order mark first
//     (UTF-8, UTF-16), then a <meta charset> in the first 1024 bytes, then
//     valid UTF-8 as is, else windows-1252 (the HTML default);
//   - meta-refresh redirect stubs are skipped (their target is a page of its
//     own); pages with no text are kept and counted;
//   - Include/Exclude globs select files by relative path.
//
// Every file ends in one outcome (Stats.Outcomes, Outcome* constants), and
// the end-of-run summary lists the outcomes with a few example paths each;
// nothing is logged per file. The per-file work (ReadFile: read, decode,
// clean, derive the URL) is in page.go and clean.go, the walk and the merge
// in ingest.go.
//
// The content hash is SHA-256 (first 16 bytes, hex) of title + NUL + clean
// text: a change to markup only (navigation, styling) is not a new version,
// a change to what a reader sees is.
//
// Invariants:
//   - A run is one transaction: either every accepted page lands or none.
//   - Re-running on unchanged files commits nothing (0 changed pages).
//   - Bad files never fail the run: binary files, unreadable files, files
//     over MaxPageBytes (named in Stats.Rejected), duplicate URLs (the first
//     file in walk order wins: lexical within each folder) and redirects are
//     skipped and counted.
//     Empty pages are kept (text ""); they get zero chunks downstream.
//   - Memory is bounded by Options.MemoryLimit, not by the corpus: the walk
//     streams paths to the cleaners, cleaned pages are spilled through an
//     external sort by page key (internal/extsort, runs under TempDir,
//     removed at the end), and the sorted stream is merged with the docs
//     table read in key order into the new docs table. Only the merge's
//     current rows are in memory. The sort buffers a quarter of the limit
//     (SortShare): with the whole limit the buffer
//     alone would fill it at a large N, the cleaners, the merge and the
//     writer coming on top (peak RSS 166 → 206 MB from 10k to 160k pages at
//     64 MiB, `pillar bench scale`).
package ingest
