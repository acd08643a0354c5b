package ingest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pillarkit/pillar/internal/extsort"
	"github.com/pillarkit/pillar/internal/progress"
	"github.com/pillarkit/pillar/pillar"
)

// DefaultMaxPageBytes is the largest input file ingest accepts (32 MiB).
const DefaultMaxPageBytes = 32 << 20

// Options configure one ingest run.
type Options struct {
	// From is the input. Required. A folder of .html/.htm/.xhtml and
	// .txt/.md files (walked recursively); or a crawl or page dataset: a
	// WARC (.warc, .warc.gz), WET (.wet, .warc.wet.gz), JSON Lines (.jsonl,
	// .jsonl.gz, .jsonl.zst) or Parquet file, a folder holding only such
	// files, or a glob of them ("crawl/*.warc.gz"), read in name order.
	From string
	// Format forces the input format (FormatFolder, FormatWARC, FormatWET,
	// FormatJSONL, FormatParquet). The default value "" goes by From: a
	// folder is a folder of pages unless every file in it is a crawl or
	// dataset file; a file or glob goes by its name.
	Format string
	// Columns name a dataset's columns (JSONL and Parquet). The zero
	// value takes url, html (else text) and fetched_at.
	Columns Columns
	// Objects, for an s3:// From, is the object store rooted there: its
	// crawl and dataset objects are read one at a time, each copied to
	// TempDir while it is read. The default value nil: From is local.
	Objects Objects
	// BaseURL is the URL prefix for files without <link rel=canonical>: a
	// file's URL is BaseURL + its path relative to From. The default value
	// is "http://corpus.local/".
	BaseURL string
	// MaxPageBytes rejects larger files, naming them. The default value is
	// DefaultMaxPageBytes.
	MaxPageBytes int64
	// Workers clean pages in parallel. The default value is GOMAXPROCS.
	Workers int
	// Logger receives the progress bar's log lines when stderr is not a
	// terminal. Skipped files are not logged one by one: they are counted,
	// with examples, in Stats.Outcomes. The default value discards.
	Logger *slog.Logger
	// Progress shows a progress bar (or log lines) over the files.
	// The default value (false) shows nothing.
	Progress bool
	// Now returns the ingest time. The default value is time.Now.
	Now func() time.Time
	// Canonical is the canonical link policy: CanonicalPrefer,
	// CanonicalIgnore or CanonicalRequire. The default value is
	// CanonicalPrefer.
	Canonical string
	// Include, when set, keeps only files whose path relative to From
	// matches one of these globs (see matchGlob: "*.html", "api/**").
	// The default value keeps every candidate file.
	Include []string
	// Exclude leaves out files matching any of these globs. The default
	// value leaves out none.
	Exclude []string
	// MemoryLimit is the memory of the ingest, in bytes (--memory-limit):
	// the cleaned pages are buffered in a quarter of it (SortShare) and
	// spilled, sorted, to TempDir beyond that; the rest is for the
	// cleaners, the merge's read buffers and the docs writer, as in the
	// runner's operations. The default value is DefaultMemoryLimit.
	MemoryLimit int64
	// TempDir receives the spilled runs (removed at the end). The default
	// value is os.TempDir().
	TempDir string

	// Rehash reads every file, ignoring the listing index of a folder
	// (listing.go: files of unchanged size and modification time) and the
	// crawl-file index of local crawl and dataset files (crawlindex.go:
	// files of unchanged size and modification time or digest) that let a
	// re-ingest skip unchanged files. The default value (false) uses them.
	Rehash bool

	// Rewrite writes the whole docs table (a new base, folding its delta
	// layers) instead of a delta of the new and changed pages. The default
	// value (false) writes a delta: an ingest of k changed pages writes k
	// rows.
	Rewrite bool
	// Compact is the automatic compaction of docs after a delta commits
	// (pillar.AutoCompact): its zero value compacts once docs has more than
	// pillar.DefaultMaxLayers deltas; MaxLayers < 0 turns it off.
	Compact pillar.CompactOptions

	// crashAt, in tests, is called at each named point of the run (see
	// TestIngestCrashPoints); a test kills the process there.
	crashAt func(point string)
	// relBase is the folder the summary's paths are relative to (From, or
	// the crawl files' folder).
	relBase string
}

func (o *Options) point(name string) {
	if o.crashAt != nil {
		o.crashAt(name)
	}
}

func (o *Options) ensureDefaults() {
	if o.BaseURL == "" {
		o.BaseURL = "http://corpus.local/"
	}
	if !strings.HasSuffix(o.BaseURL, "/") {
		o.BaseURL += "/"
	}
	if o.MaxPageBytes == 0 {
		o.MaxPageBytes = DefaultMaxPageBytes
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Canonical == "" {
		o.Canonical = CanonicalPrefer
	}
	if o.MemoryLimit <= 0 {
		o.MemoryLimit = DefaultMemoryLimit
	}
}

// Stats summarize an ingest run.
type Stats struct {
	Files      int `json:"files"`       // candidate files seen (records of a crawl or dataset)
	Pages      int `json:"pages"`       // pages read and cleaned
	New        int `json:"new"`         // pages not in the store before
	Changed    int `json:"changed"`     // pages whose content hash changed
	Unchanged  int `json:"unchanged"`   // same content hash: no new version
	Empty      int `json:"empty"`       // pages with no text after cleaning (kept)
	Binary     int `json:"binary"`      // skipped: binary or invalid UTF-8
	Unreadable int `json:"unreadable"`  // skipped: could not be read
	TooLarge   int `json:"too_large"`   // rejected: over MaxPageBytes
	Duplicates int `json:"duplicates"`  // skipped: URL already seen in this run
	BadURL     int `json:"bad_url"`     // skipped: no valid URL could be derived
	NotRegular int `json:"not_regular"` // skipped: not a regular file (named pipe, socket, device)
	// NotRead is the unchanged files a re-ingest did not read (the
	// listing or crawl-file index vouched for them); a folder's are among
	// Unchanged, a crawl file's winning records are.
	NotRead int `json:"not_read"`
	// Refreshed is the stored pages whose fetch time a WARC revisit
	// refreshed (same content, same version).
	Refreshed int `json:"refreshed"`
	// Skipped records of a crawl or dataset.
	Status4xx   int `json:"status_4xx"`
	Status5xx   int `json:"status_5xx"`
	OtherStatus int `json:"http_status"`
	NonHTML     int `json:"non_html"`
	Revisits    int `json:"revisit"`
	NotAPage    int `json:"not_a_page"`
	BadDigest   int `json:"bad_digest"`
	Truncated   int `json:"truncated"`
	Malformed   int `json:"malformed"`
	// Skipped as well (see the Outcome* constants for the wording).
	Excluded    int `json:"excluded"`     // left out by Include/Exclude
	Redirects   int `json:"redirects"`    // meta-refresh redirects
	NoCanonical int `json:"no_canonical"` // no http(s) canonical link under CanonicalRequire
	// Kept, with a note.
	Transcoded       int   `json:"transcoded"`        // decoded to UTF-8 from another encoding
	CanonicalIgnored int   `json:"canonical_ignored"` // non-http(s) canonical link replaced by BaseURL + path
	HTMLBytes        int64 `json:"html_bytes"`        // bytes of the files read
	TextBytes        int64 `json:"text_bytes"`        // bytes of clean text
	Generation       int64 `json:"generation"`        // store generation committed (0: nothing changed)
	// RowsWritten is the rows written to docs: the new and changed pages
	// for a delta, every row for a rewrite.
	RowsWritten int64 `json:"rows_written"`
	// Delta is true when the change went to docs as a delta layer.
	Delta bool `json:"delta"`
	// Compacted is the number of delta layers the automatic compaction
	// after the ingest folded (0: none).
	Compacted int `json:"compacted"`
	// CompactError says why the automatic compaction after a committed
	// ingest failed ("": it did not fail); the ingest stands.
	CompactError string `json:"compact_error,omitempty"`
	DurationMS   int64  `json:"duration_ms"` // wall time
	// Rejected names the files rejected as too large.
	Rejected []string `json:"rejected,omitempty"`
	// Outcomes is the end-of-run summary: files by outcome, with a few
	// example paths each (Summary prints it).
	Outcomes []Outcome `json:"outcomes"`
}

// ChangedPages is New + Changed.
func (s Stats) ChangedPages() int { return s.New + s.Changed }

// DefaultMemoryLimit is Options.MemoryLimit's default (256 MiB: a sort
// buffer of 64 MiB).
const DefaultMemoryLimit = 256 << 20

// SortShare is the part of Options.MemoryLimit the sort of cleaned pages
// buffers: a quarter (the local runner's sorts buffer an eighth,
// jobs.SortShare, as their rows are small and fill a buffer later). The
// buffer is full, and the ingest at its peak, once the cleaned text exceeds
// it (about 5,000 pages of 4 KB at --memory-limit 64MiB), so the peak does not
// grow with the corpus beyond that; the whole limit for the buffer would add
// the buffer's growth on top of everything else at large N.
func SortShare(limit int64) int64 { return limit / 4 }

// Run ingests every page under opts.From into the docs table of st in one
// transaction. Pages whose content hash is unchanged keep their row (same
// version); a changed page gets a new version; a run that changes nothing
// commits nothing.
//
// It streams: the walk feeds the cleaners, which spill the cleaned pages
// through an external sort by page key (bounded by Options.MemoryLimit);
// the sorted pages are then merged with the docs table (read in key order)
// into the new docs table. No step holds all pages in memory.
func Run(ctx context.Context, st pillar.Store, opts Options) (Stats, error) {
	opts.ensureDefaults()
	start := time.Now()
	var stats Stats
	if opts.From == "" {
		return stats, errors.New("ingest: no input (--from)")
	}
	switch opts.Format {
	case "", FormatFolder, FormatWARC, FormatWET, FormatJSONL, FormatParquet:
	default:
		return stats, fmt.Errorf("ingest: --format %q: want folder, warc, wet, jsonl or parquet", opts.Format)
	}
	var files, formats []string
	var crawl, remote bool
	var err error
	if strings.Contains(opts.From, "://") {
		if files, formats, err = objectInputs(ctx, &opts); err != nil {
			return stats, err
		}
		crawl, remote = true, true
	} else if files, formats, crawl, err = crawlInputs(&opts); err != nil {
		return stats, err
	}
	opts.relBase = opts.From
	if remote {
		opts.relBase = ""
	} else if crawl {
		opts.relBase = filepath.Dir(files[0])
	} else if fi, err := os.Stat(opts.From); err != nil {
		return stats, fmt.Errorf("ingest: input %s: %w", opts.From, err)
	} else if !fi.IsDir() {
		return stats, fmt.Errorf("ingest: input %s: not a directory", opts.From)
	}
	if _, err := url.Parse(opts.BaseURL); err != nil {
		return stats, fmt.Errorf("ingest: --base-url %q: %w", opts.BaseURL, err)
	}
	if err := opts.validate(); err != nil {
		return stats, err
	}
	// A first walk counts the files for the progress bar (directory reads
	// only; nothing is kept); a crawl's bar counts bytes.
	var total int64
	switch {
	case remote:
		total = -1
	case crawl:
		for _, f := range files {
			if fi, err := os.Stat(f); err == nil {
				total += fi.Size()
			}
		}
	case opts.Progress:
		_ = filepath.WalkDir(opts.From, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && isCandidate(p) {
				total++
			}
			return nil
		})
	}
	removeStaleSpills(opts.TempDir)
	tmp, err := os.MkdirTemp(opts.TempDir, fmt.Sprintf("pillar-ingest-%d-", os.Getpid()))
	if err != nil {
		return stats, fmt.Errorf("ingest: temp dir: %w", err)
	}
	defer os.RemoveAll(tmp)
	var in *crawlInput
	var lin *listingIn
	var lout *listingOut
	if crawl {
		in = &crawlInput{files: files, formats: formats, remote: remote}
		if !remote {
			sortByAbs(files, formats)
			in.out = newCrawlIndexOut(tmp, opts.MemoryLimit, files)
			defer in.out.close()
			if !opts.Rehash {
				sn, err := st.Snapshot(ctx)
				if err != nil {
					return stats, fmt.Errorf("ingest: %w", err)
				}
				in.index, err = openCrawlIndex(ctx, sn, &opts)
				if err != nil {
					sn.Release()
					return stats, err
				}
				defer sn.Release()
				defer in.index.close()
			}
		}
	} else {
		lout = newListingOut(tmp, opts.MemoryLimit)
		defer lout.close()
		if !opts.Rehash {
			sn, err := st.Snapshot(ctx)
			if err != nil {
				return stats, fmt.Errorf("ingest: %w", err)
			}
			lin, err = openListing(ctx, sn, &opts)
			if err != nil {
				sn.Release()
				return stats, err
			}
			defer sn.Release()
			defer lin.close()
		}
	}
	sorted, err := readAll(ctx, &opts, &stats, tmp, total, in, lin)
	if err != nil {
		return stats, err
	}
	defer sorted.close()
	sorted.listing = lout
	if in != nil {
		sorted.crawl, sorted.crawlOut = true, in.out
	}
	opts.point("spilled")

	tx, err := st.Begin(ctx)
	if err != nil {
		return stats, fmt.Errorf("ingest: %w", err)
	}
	defer tx.Abort()
	old, oldRows, err := openDocs(ctx, tx)
	if err != nil {
		return stats, err
	}
	defer old.Close()
	// The change goes to docs as one delta layer (only the new and changed
	// pages), or, with Rewrite (or into a store without docs), as the whole
	// table.
	var w pillar.RowWriter
	var dw *pillar.DeltaWriter
	if opts.Rewrite {
		w, err = tx.WriteTable(ctx, pillar.TableDocs, pillar.Doc{}, &pillar.WriteOptions{SortedBy: []string{"page_key"}})
	} else if dw, err = pillar.WriteDelta(ctx, tx, pillar.TableDocs, pillar.Doc{}, -1); err == nil {
		w = deltaRows{dw}
		stats.Delta = !dw.Delta().Base
	}
	if err != nil {
		return stats, fmt.Errorf("ingest: %w", err)
	}
	defer w.Close()
	full := dw == nil || dw.Delta().Base
	if err := merge(ctx, &opts, &stats, sorted, old, w, full); err != nil {
		return stats, diskFull(st, "merge into table docs", writeNeed(ctx, tx, full, &stats), err)
	}
	opts.point("merged")
	// A folder ingest without a usable listing commits one even when no
	// page changed, so the next re-ingest can skip the unchanged files.
	listingStale := lout != nil && lin == nil
	// Likewise a local crawl whose index is missing or that read a file.
	crawlStale := in != nil && in.out != nil && (in.index == nil || stats.NotRead < len(in.files))
	if stats.ChangedPages() == 0 && stats.Refreshed == 0 && !opts.Rewrite && !listingStale && !crawlStale {
		stats.DurationMS = time.Since(start).Milliseconds()
		return stats, nil // the deferred Abort drops what was written
	}
	if dw != nil {
		if err := dw.SetRows(ctx, oldRows+int64(stats.New)); err != nil {
			return stats, err
		}
	}
	if err := w.Close(); err != nil {
		return stats, diskFull(st, "write table docs", writeNeed(ctx, tx, full, &stats), fmt.Errorf("ingest: write docs: %w", err))
	}
	opts.point("closed")
	if lout != nil {
		if err := lout.write(ctx, tx, &opts); err != nil {
			return stats, diskFull(st, "write "+TableListing, 0, fmt.Errorf("ingest: write %s: %w", TableListing, err))
		}
	} else if err := tx.DeleteAttr(ctx, AttrListing); err != nil && !errors.Is(err, pillar.ErrNotFound) {
		return stats, err // a crawl changed pages a folder's listing vouched for
	}
	if in != nil && in.out != nil {
		if err := in.out.write(ctx, tx, &opts); err != nil {
			return stats, diskFull(st, "write "+TableCrawlFiles, 0, fmt.Errorf("ingest: write %s: %w", TableCrawlFiles, err))
		}
	} else if err := tx.DeleteAttr(ctx, AttrCrawlFiles); err != nil && !errors.Is(err, pillar.ErrNotFound) {
		return stats, err // a folder or an object store changed pages the crawl-file index vouched for
	}
	stats.DurationMS = time.Since(start).Milliseconds()
	if err := tx.SetAttr(ctx, "ingest/last", stats); err != nil {
		return stats, err
	}
	if err := tx.Commit(ctx); err != nil {
		return stats, diskFull(st, "commit table docs", 0, fmt.Errorf("ingest: commit: %w", err))
	}
	opts.point("committed")
	stats.Generation = st.Info().Generation
	// Fold the deltas once there are too many (a transaction of its own:
	// the ingest is committed whatever it does).
	if stats.Delta && opts.Compact.MaxLayers >= 0 {
		cs, err := pillar.AutoCompact(ctx, st, pillar.TableDocs, &opts.Compact)
		if err != nil {
			// The ingest is committed; the next one (or pillar compact)
			// compacts.
			stats.CompactError = err.Error()
			opts.Logger.Warn("ingest: committed, but the compaction of docs after it failed; the next ingest or `pillar compact` retries", "generation", stats.Generation, "err", err)
		}
		if cs != nil {
			stats.Compacted = cs.Layers
			stats.Generation = st.Info().Generation
		}
	}
	stats.DurationMS = time.Since(start).Milliseconds()
	return stats, nil
}

// deltaRows is a delta's Put as a RowWriter.
type deltaRows struct{ w *pillar.DeltaWriter }

func (d deltaRows) Write(row any) error { return d.w.Put(row) }
func (d deltaRows) Close() error        { return d.w.Close() }

// writeNeed is about the space the write of docs needs: the whole table and
// the new text for a rewrite, the new text for a delta.
func writeNeed(ctx context.Context, tx pillar.Tx, full bool, stats *Stats) int64 {
	if full {
		return tableBytes(ctx, tx) + stats.TextBytes
	}
	return stats.TextBytes
}

// readAll walks opts.From in lexical order, cleans the candidate files with
// opts.Workers goroutines and adds each page to its worker's sorter, keyed by
// page key, ties broken by the file's position in the walk (so among pages
// with one URL the first file wins). Skipped files are counted and logged.
func readAll(ctx context.Context, opts *Options, stats *Stats, dir string, total int64, in *crawlInput, listing *listingIn) (*sortedPages, error) {
	bar := progress.New(max(total, -1), "ingest", &progress.Options{Quiet: !opts.Progress, Logger: opts.Logger, Bytes: in != nil})
	defer bar.Done()
	type item struct {
		seq       uint64
		path      string
		rec       *crawlRecord
		unchanged *ListingRow // the listing vouches for the file: not read
		file      int         // a crawl's input file index
	}
	sorters := make([]*extsort.Sorter, opts.Workers)
	sortMem := SortShare(opts.MemoryLimit)
	for i := range sorters {
		// Read buffers of 1/512 of the sort budget keep the merge's fan-in
		// near 256 (one pass) within half the budget.
		sorters[i] = extsort.New(extsort.Options{MemoryLimit: max(sortMem/int64(opts.Workers), 64<<10), Dir: dir,
			BufferSize: int(min(max(sortMem/512, 4<<10), 256<<10))})
	}
	closeAll := func() {
		for _, s := range sorters {
			s.Close()
		}
	}
	var mu sync.Mutex
	var firstErr error
	var refreshes atomic.Int64
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	next := make(chan item, opts.Workers)
	var wg sync.WaitGroup
	for w := 0; w < opts.Workers; w++ {
		wg.Add(1)
		go func(s *extsort.Sorter) {
			defer wg.Done()
			var buf []byte
			for it := range next {
				var p page
				if it.unchanged != nil {
					u := it.unchanged
					p = page{path: it.path, rel: u.Path, doc: pillar.Doc{PageKey: u.PageKey, HTMLBytes: unchangedMark, FetchedAt: u.MTimeMS, TextLen: u.Size}}
					if in == nil {
						bar.Add(1)
					}
				} else if it.rec != nil {
					p = recordPage(it.rec, opts)
					it.path = p.path
				} else {
					p = readPage(it.path, opts)
					bar.Add(1)
				}
				if it.seq == 10 {
					opts.point("reading")
				}
				mu.Lock()
				ok := countPage(opts, stats, &p)
				mu.Unlock()
				if !ok {
					continue
				}
				if in != nil {
					setCrawlFile(&p.doc, it.file)
				}
				var err error
				if buf, err = appendDoc(buf[:0], it.path, &p.doc); err != nil {
					fail(fmt.Errorf("ingest: page %s: %w", it.path, err))
					continue
				}
				if isRefresh(&p.doc) {
					refreshes.Add(1)
				}
				tie := it.seq
				if in != nil {
					tie = newestFirst(p.doc.FetchedAt, it.seq)
				}
				if err := s.Add(&extsort.Record{Key: []byte(p.doc.PageKey), Prefix: len(p.doc.PageKey), Tie: tie, Payload: buf}); err != nil {
					fail(diskFullSpill(dir, opts.MemoryLimit, fmt.Errorf("ingest: spill cleaned pages to %s: %w", dir, err)))
				}
			}
		}(sorters[w])
	}
	var seq uint64
	send := func(it item) error {
		seq++
		it.seq = seq
		mu.Lock()
		stats.Files++
		mu.Unlock()
		select {
		case next <- it:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var walkErr error
	if in != nil {
		for i, f := range in.files {
			if in.remote {
				if f, walkErr = fetchObject(ctx, opts, dir, f); walkErr != nil {
					break
				}
			} else if in.out != nil {
				skip, err := in.take(i, f, func(w CrawlFileRow) error {
					u := ListingRow{PageKey: w.PageKey, MTimeMS: w.FetchedAt}
					return send(item{path: f + "@", unchanged: &u, file: i})
				})
				if err != nil {
					walkErr = err
					break
				}
				if skip {
					mu.Lock()
					stats.NotRead++
					mu.Unlock()
					if fi, err := os.Stat(f); err == nil {
						bar.Add(fi.Size())
					}
					continue
				}
			}
			walkErr = readCrawlFile(opts, f, in.formats[i], func(n int64) { bar.Add(n) }, func(r *crawlRecord) error {
				return send(item{rec: r, file: i})
			})
			if in.remote {
				os.Remove(f)
			}
			if walkErr != nil {
				break
			}
		}
	} else {
		walkErr = filepath.WalkDir(opts.From, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				mu.Lock()
				stats.count(OutcomeUnreadable, relPath(opts, p), err.Error())
				mu.Unlock()
				if d != nil && d.IsDir() {
					return fs.SkipDir
				}
				return nil
			}
			if d.IsDir() || !isCandidate(p) {
				return nil
			}
			// Opening a named pipe blocks until a writer comes (forever, and
			// deaf to signals); sockets and devices are not pages either.
			if why := notRegular(p, d); why != "" {
				mu.Lock()
				stats.count(OutcomeNotRegular, relPath(opts, p), why)
				mu.Unlock()
				return nil
			}
			if listing != nil {
				if row, ok := listing.lookup(relPath(opts, p)); ok {
					if fi, err := os.Stat(p); err == nil && fi.Size() == row.Size && fi.ModTime().UnixMilli() == row.MTimeMS {
						return send(item{path: p, unchanged: &row})
					}
				}
			}
			return send(item{path: p})
		})
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		closeAll()
		return nil, fmt.Errorf("ingest: %w", err)
	}
	if walkErr != nil {
		closeAll()
		if in != nil {
			return nil, walkErr
		}
		return nil, fmt.Errorf("ingest: walk %s: %w", opts.From, walkErr)
	}
	if firstErr != nil {
		closeAll()
		return nil, firstErr
	}
	it, err := extsort.Merge(sorters)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("ingest: merge cleaned pages: %w", err)
	}
	return &sortedPages{it: it, sorters: sorters, refreshes: refreshes.Load()}, nil
}

// countPage counts a read page in stats (the summary: see page.go); it
// reports whether the page goes on (duplicates are found after the sort).
func countPage(_ *Options, stats *Stats, p *page) bool {
	return stats.accept(p)
}

// sortedPages is the merged stream of cleaned pages, by page key then walk
// position.
type sortedPages struct {
	it        *extsort.Iterator
	sorters   []*extsort.Sorter
	back      *spilled       // a page pulled ahead and given back
	refreshes int64          // revisits among the pages: merge reads old rows whole
	tie       uint64         // the sort tie (walk position) of the page pulled last
	listing   *listingOut    // a folder ingest's new listing: the winners' files
	crawl     bool           // a crawl's pages: Doc.Version carries the input file (setCrawlFile)
	crawlOut  *crawlIndexOut // a local crawl's new crawl-file index: the winners
}

// won records a crawl page's win in the new crawl-file index and clears
// the file index it carried.
func (s *sortedPages) won(d *pillar.Doc, fetchedAt int64) error {
	if !s.crawl {
		return nil
	}
	i := crawlFileOf(d)
	if s.crawlOut == nil {
		return nil
	}
	return s.crawlOut.addWinner(i, d.PageKey, fetchedAt)
}

// next returns the next distinct page (the first file of each key), counting
// and logging the duplicates it skips; nil at the end.
func (s *sortedPages) next(opts *Options, stats *Stats, last *pillar.Doc, lastPath *string) (*pillar.Doc, error) {
	rel := func(p string) string { return relPath(opts, p) }
	var refresh *pillar.Doc // the newest revisit of the key at hand
	var refreshPath string
	var standKey, standPath string // a key whose stored page stands (its winning file unchanged)
	for {
		path, d, ok, err := s.pull()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		if standKey != "" && d.PageKey == standKey {
			stats.count(OutcomeDuplicate, rel(path), "same URL as "+rel(standPath))
			continue
		}
		if isUnchanged(&d) && s.crawl && refresh != nil && d.PageKey == refresh.PageKey {
			// The stored page's record, revisited since in a file read
			// this time: the revisit's fetch time.
			if err := s.won(&d, d.FetchedAt); err != nil {
				return nil, err
			}
			*lastPath = refreshPath
			crawlFileOf(refresh)
			return refresh, nil
		}
		if isUnchanged(&d) && (last == nil || d.PageKey != last.PageKey) && refresh == nil && s.crawl {
			// The newest record of its URL is in an unchanged crawl file:
			// the stored page stands.
			stats.Pages++
			stats.Unchanged++
			stats.count(OutcomeUnchanged, rel(path), "not read: the file is unchanged since the last ingest")
			if err := s.won(&d, d.FetchedAt); err != nil {
				return nil, err
			}
			standKey, standPath = d.PageKey, path
			continue
		}
		if isUnchanged(&d) && (last == nil || d.PageKey != last.PageKey) && refresh == nil {
			// The first file of its URL is unchanged: the stored page stands.
			stats.Pages++
			stats.Unchanged++
			stats.NotRead++
			stats.count(OutcomeUnchanged, rel(path), "not read: size and modification time as in the listing")
			if s.listing != nil {
				if err := s.listing.add(s.tie, ListingRow{Path: rel(path), Size: d.TextLen, MTimeMS: d.FetchedAt, PageKey: d.PageKey}); err != nil {
					return nil, err
				}
			}
			standKey, standPath = d.PageKey, path
			continue
		}
		if last != nil && d.PageKey == last.PageKey {
			if isRefresh(&d) {
				stats.count(OutcomeRevisit, rel(path), "older than the fetch of "+rel(*lastPath))
			} else {
				stats.count(OutcomeDuplicate, rel(path), "same URL as "+rel(*lastPath))
			}
			continue
		}
		if refresh != nil && d.PageKey != refresh.PageKey {
			s.unpull(path, d)
			break
		}
		if isRefresh(&d) {
			if refresh == nil {
				refresh, refreshPath = &d, path
			} else {
				stats.count(OutcomeRevisit, rel(path), "older than the revisit "+rel(refreshPath))
			}
			continue
		}
		if err := s.won(&d, d.FetchedAt); err != nil {
			return nil, err
		}
		if refresh != nil {
			// The newest fetch of the URL is a revisit of this (older)
			// fetch's payload: its content, the revisit's fetch time.
			d.FetchedAt = max(d.FetchedAt, refresh.FetchedAt)
			stats.count(OutcomeRevisit, rel(refreshPath), "fetch time applied to the page read at "+rel(path))
		}
		*lastPath = path
		stats.kept(rel(path), &d)
		if s.listing != nil {
			if err := s.listing.add(s.tie, ListingRow{Path: rel(path), Size: d.HTMLBytes, MTimeMS: d.FetchedAt, PageKey: d.PageKey}); err != nil {
				return nil, err
			}
		}
		return &d, nil
	}
	if refresh != nil {
		*lastPath = refreshPath // merge refreshes the stored page, if any
		crawlFileOf(refresh)
		return refresh, nil
	}
	return nil, nil
}

// pull returns the next spilled page (one given back by unpull first).
func (s *sortedPages) pull() (string, pillar.Doc, bool, error) {
	if s.back != nil {
		b := s.back
		s.back = nil
		s.tie = b.tie
		return b.path, b.doc, true, nil
	}
	if !s.it.Next() {
		if err := s.it.Err(); err != nil {
			return "", pillar.Doc{}, false, fmt.Errorf("ingest: read spilled pages: %w", err)
		}
		return "", pillar.Doc{}, false, nil
	}
	path, d, err := decodeDoc(s.it.Record().Payload)
	if err != nil {
		return "", pillar.Doc{}, false, fmt.Errorf("ingest: spilled page: %w", err)
	}
	s.tie = s.it.Record().Tie
	return path, d, true, nil
}

func (s *sortedPages) unpull(path string, d pillar.Doc) {
	s.back = &spilled{path, d, s.tie}
}

type spilled struct {
	path string
	doc  pillar.Doc
	tie  uint64
}

func (s *sortedPages) close() {
	s.it.Close()
	for _, so := range s.sorters {
		so.Close()
	}
}

// openDocs opens the docs table in key order (an empty reader when there is
// none yet) — a layered docs table reads as its merged rows — and returns
// its row count. A docs table not sorted by page_key is an error: every
// writer of it sorts.
func openDocs(ctx context.Context, tx pillar.Tx) (pillar.RowReader, int64, error) {
	ti, err := tx.Table(ctx, pillar.TableDocs)
	if errors.Is(err, pillar.ErrNotFound) {
		return emptyReader{}, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("ingest: read docs: %w", err)
	}
	if len(ti.SortedBy) == 0 || ti.SortedBy[0] != "page_key" {
		return nil, 0, fmt.Errorf("ingest: the docs table is not sorted by page_key (sorted by %v); it cannot be merged", ti.SortedBy)
	}
	rr, err := tx.ReadTable(ctx, pillar.TableDocs, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("ingest: read docs: %w", err)
	}
	return rr, ti.Rows, nil
}

type emptyReader struct{}

func (emptyReader) Next() bool     { return false }
func (emptyReader) Scan(any) error { return io.EOF }
func (emptyReader) Err() error     { return nil }
func (emptyReader) Close() error   { return nil }

// docHead is the part of a docs row that a delta's merge compares; the
// embedded store reads just these columns.
type docHead struct {
	PageKey     string `yson:"page_key" parquet:"page_key"`
	ContentHash string `yson:"content_hash" parquet:"content_hash"`
	Version     int64  `yson:"version" parquet:"version"`
}

// merge writes the union of the new pages and the old docs to w in key
// order: a new page replaces an old row of another content hash (version+1),
// keeps an old row of the same hash, and is version 1 when it is new. With
// full false it writes only the new and changed pages (a delta).
func merge(ctx context.Context, opts *Options, stats *Stats, pages *sortedPages, old pillar.RowReader, w pillar.RowWriter, full bool) error {
	nowMS := opts.Now().UnixMilli()
	var (
		cur     *pillar.Doc
		curPath string
		od      pillar.Doc
		haveOld bool
		prevOld string
		n       int
	)
	advanceOld := func() error {
		haveOld = old.Next()
		if !haveOld {
			if err := old.Err(); err != nil {
				return fmt.Errorf("ingest: read docs: %w", err)
			}
			return nil
		}
		if full || pages.refreshes > 0 {
			// Whole rows: a rewrite keeps them all, and a revisit writes
			// its page back with a new fetch time.
			od = pillar.Doc{}
			if err := old.Scan(&od); err != nil {
				return fmt.Errorf("ingest: read docs: %w", err)
			}
		} else {
			// A delta keeps the old rows where they are: only the
			// columns it compares are read.
			var h docHead
			if err := old.Scan(&h); err != nil {
				return fmt.Errorf("ingest: read docs: %w", err)
			}
			od = pillar.Doc{PageKey: h.PageKey, ContentHash: h.ContentHash, Version: h.Version}
		}
		if od.PageKey <= prevOld && prevOld != "" {
			return fmt.Errorf("ingest: docs table out of order at page %s (after %s)", od.PageKey, prevOld)
		}
		prevOld = od.PageKey
		return nil
	}
	write := func(d *pillar.Doc) error {
		if n++; n&1023 == 0 && ctx.Err() != nil {
			return fmt.Errorf("ingest: %w", ctx.Err())
		}
		if n == 100 {
			opts.point("merging")
		}
		stats.RowsWritten++
		if err := w.Write(d); err != nil {
			return fmt.Errorf("ingest: write docs: %w", err)
		}
		return nil
	}
	keep := func(d *pillar.Doc) error {
		if !full {
			if n++; n&1023 == 0 && ctx.Err() != nil {
				return fmt.Errorf("ingest: %w", ctx.Err())
			}
			if n == 100 {
				opts.point("merging")
			}
			return nil
		}
		return write(d)
	}
	if err := advanceOld(); err != nil {
		return err
	}
	var err error
	if cur, err = pages.next(opts, stats, nil, &curPath); err != nil {
		return err
	}
	for cur != nil || haveOld {
		if cur == nil && !full {
			break // a delta: the rest of docs stays as it is
		}
		switch {
		case cur == nil || (haveOld && od.PageKey < cur.PageKey):
			if err := keep(&od); err != nil {
				return err
			}
			if err := advanceOld(); err != nil {
				return err
			}
			continue
		case isRefresh(cur) && (!haveOld || cur.PageKey < od.PageKey):
			stats.count(OutcomeRevisit, relPath(opts, curPath), "no stored page of "+cur.URL+" to refresh")
		case isRefresh(cur): // the stored page's payload, fetched again
			if cur.FetchedAt > od.FetchedAt {
				od.FetchedAt = cur.FetchedAt
				stats.Refreshed++
				stats.count(OutcomeRevisit, relPath(opts, curPath), "fetch time of the stored page refreshed")
				if err := write(&od); err != nil {
					return err
				}
			} else {
				stats.count(OutcomeRevisit, relPath(opts, curPath), "the stored fetch is as new")
				if err := keep(&od); err != nil {
					return err
				}
			}
			if err := advanceOld(); err != nil {
				return err
			}
		case !haveOld || cur.PageKey < od.PageKey:
			stats.New++
			stats.count(OutcomeNew, relPath(opts, curPath), "")
			cur.Version, cur.UpdatedAt = 1, nowMS
			if err := write(cur); err != nil {
				return err
			}
		default: // same page
			if od.ContentHash != cur.ContentHash {
				stats.Changed++
				stats.count(OutcomeChanged, relPath(opts, curPath), "")
				cur.Version, cur.UpdatedAt = od.Version+1, nowMS
				if err := write(cur); err != nil {
					return err
				}
			} else {
				stats.Unchanged++
				stats.count(OutcomeUnchanged, relPath(opts, curPath), "")
				if err := keep(&od); err != nil {
					return err
				}
			}
			if err := advanceOld(); err != nil {
				return err
			}
		}
		last := cur
		if cur, err = pages.next(opts, stats, last, &curPath); err != nil {
			return err
		}
	}
	return nil
}

func isCandidate(p string) bool {
	switch strings.ToLower(filepath.Ext(p)) {
	case ".html", ".htm", ".xhtml", ".txt", ".md", ".text":
		return true
	}
	return false
}

// notRegular says why a walked path is not a regular file (following a
// symbolic link), or "" when it is one.
func notRegular(path string, d fs.DirEntry) string {
	m := d.Type()
	if m&fs.ModeSymlink != 0 {
		fi, err := os.Stat(path)
		if err != nil {
			return "" // a dangling link: reading it reports it as unreadable
		}
		m = fi.Mode()
	}
	return modeReason(m)
}

func modeReason(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return ""
	case m&fs.ModeNamedPipe != 0:
		return "named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	case m.IsDir():
		return "directory"
	}
	return "not a regular file (" + m.Type().String() + ")"
}

// readPage reads, decodes and cleans one file and derives its URL (the
// per-file steps are in page.go and clean.go).
func readPage(path string, o *Options) page {
	p := page{path: path, rel: relPath(o, path)}
	if ok, why := o.selected(p.rel); !ok {
		p.kind, p.err = OutcomeExcluded, errors.New(why)
		return p
	}
	// O_NONBLOCK: a path that became a named pipe after the walk must not
	// block the open; it has no effect on a regular file.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		p.kind, p.err = OutcomeUnreadable, err
		return p
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		p.kind, p.err = OutcomeUnreadable, err
		return p
	}
	if why := modeReason(st.Mode()); why != "" {
		p.kind, p.err = OutcomeNotRegular, errors.New(why)
		return p
	}
	if st.Size() > o.MaxPageBytes {
		p.kind, p.err = OutcomeTooLarge, fmt.Errorf("%d bytes, limit %d", st.Size(), o.MaxPageBytes)
		return p
	}
	b, err := io.ReadAll(io.LimitReader(f, o.MaxPageBytes+1))
	if err != nil {
		p.kind, p.err = OutcomeUnreadable, err
		return p
	}
	if int64(len(b)) > o.MaxPageBytes {
		p.kind, p.err = OutcomeTooLarge, fmt.Errorf("over the limit of %d bytes", o.MaxPageBytes)
		return p
	}
	isText := false
	switch strings.ToLower(filepath.Ext(path)) {
	case ".txt", ".md", ".text":
		isText = true
	}
	base, err := url.Parse(o.BaseURL)
	if err != nil {
		p.kind, p.err = OutcomeBadURL, err
		return p
	}
	cleanPage(&p, b, isText, "", o, base.ResolveReference(&url.URL{Path: p.rel}).String(), st.ModTime().UnixMilli())
	return p
}

// cleanPage makes p's doc of the bytes b of a page whose own URL is own
// (BaseURL + its path for a file, the crawled URL for a record), fetched
// at fetchedAt (unix milliseconds): decoded to UTF-8 (isText: plain text,
// else HTML; contentType is the HTTP header's, "" for a file), cleaned, its URL chosen under the canonical policy. A page
// that goes no further gets p.kind and p.err.
func cleanPage(p *page, b []byte, isText bool, contentType string, o *Options, own string, fetchedAt int64) {
	text, how, err := decodeTextAs(b, !isText, contentType)
	if err != nil {
		p.kind, p.err = OutcomeBinary, err
		return
	}
	if how != "" {
		p.notes = append(p.notes, note{OutcomeTranscoded, how})
	}
	var c Cleaned
	if isText {
		t := strings.TrimSpace(strings.ReplaceAll(string(text), "\r\n", "\n"))
		c = Cleaned{Text: t}
		if line, _, _ := strings.Cut(t, "\n"); len(line) < 200 {
			c.Title = strings.TrimSpace(strings.TrimLeft(line, "# "))
		}
	} else {
		c = CleanHTML(text)
	}
	if c.Refresh != "" {
		p.kind, p.err = OutcomeRedirect, errors.New("to "+c.Refresh)
		return
	}
	raw, outcome, detail := pageURL(o, own, c.Canonical)
	switch outcome {
	case "":
	case OutcomeCanonicalIgnored:
		p.notes = append(p.notes, note{outcome, detail})
	default:
		p.kind, p.err = outcome, errors.New(detail)
		return
	}
	key, norm, err := pillar.KeyOfURL(raw)
	if err != nil {
		p.kind, p.err = OutcomeBadURL, err
		return
	}
	lang := c.Lang
	if lang == "" {
		lang = guessLang(c.Text)
	}
	sum := sha256.Sum256([]byte(c.Title + "\x00" + c.Text))
	p.doc = pillar.Doc{
		PageKey:     key.String(),
		URL:         norm,
		Host:        pillar.HostOf(norm),
		FetchedAt:   fetchedAt,
		ContentHash: hex.EncodeToString(sum[:16]),
		Title:       c.Title,
		Text:        c.Text,
		Lang:        lang,
		TextLen:     int64(len(c.Text)),
		OutLinks:    int64(c.OutLinks),
		HTMLBytes:   int64(len(b)),
	}
}

// crawlInput is the files of a crawl or dataset and their formats.
type crawlInput struct {
	files, formats []string
	remote         bool           // files are keys of Options.Objects
	index          *crawlIndexIn  // the previous crawl-file index (nil: none to use)
	out            *crawlIndexOut // the new one (nil for a crawl from an object store)
}

// take records input file i (path f) in the new crawl-file index and
// reports whether it is unchanged since the previous one (size, and the
// modification time or the digest): then it sends its winners to
// placeholder and is not read.
func (in *crawlInput) take(i int, f string, placeholder func(CrawlFileRow) error) (bool, error) {
	fi, err := os.Stat(f)
	if err != nil {
		return false, nil // readCrawlFile reports it
	}
	mtime := fi.ModTime().UnixMilli()
	var digest string
	if in.index != nil {
		if row, ok := in.index.file(in.out.abs[i]); ok && row.Size == fi.Size() {
			same := row.MTimeMS == mtime && row.MTimeMS >= 0
			if !same {
				if digest, err = fileDigest(f); err != nil {
					return false, nil
				}
				same = digest == row.Digest
			}
			if same {
				in.out.setFile(i, fi.Size(), mtime, row.Digest)
				return true, in.index.winners(in.out.abs[i], placeholder)
			}
		}
	}
	if digest == "" {
		if digest, err = fileDigest(f); err != nil {
			return false, nil
		}
	}
	in.out.setFile(i, fi.Size(), mtime, digest)
	return false, nil
}

// recordPage makes the page of a crawl or dataset record: its path in the
// summary is file@offset (file:line, file#row), its own URL the one
// crawled, its fetch time the crawler's (the ingest time when it has none).
func recordPage(r *crawlRecord, o *Options) page {
	p := page{path: filepath.Join(o.relBase, r.rel), rel: r.rel}
	if r.kind != "" {
		p.kind, p.err = r.kind, errors.New(r.detail)
		return p
	}
	if r.url == "" {
		p.kind, p.err = OutcomeBadURL, errors.New("record without a target URL")
		return p
	}
	at := r.fetchedAt
	if at == 0 {
		at = o.Now().UnixMilli()
	}
	if r.refresh {
		key, norm, err := pillar.KeyOfURL(r.url)
		if err != nil {
			p.kind, p.err = OutcomeBadURL, err
			return p
		}
		p.doc = pillar.Doc{PageKey: key.String(), URL: norm, FetchedAt: at, HTMLBytes: refreshMark}
		return p
	}
	cleanPage(&p, r.body, r.isText, r.contentType, o, r.url, at)
	return p
}

// refreshMark in Doc.HTMLBytes marks a revisit on its way through the sort:
// no page, only a newer fetch time for the page of its key.
const refreshMark = -1

func isRefresh(d *pillar.Doc) bool { return d.HTMLBytes == refreshMark }

// newestFirst is the sort tie of a crawled page: among fetches of one URL
// the newest sorts first (and wins), then the first read. 42 bits of unix
// milliseconds reach the year 2109; the read position keeps 22 bits.
func newestFirst(fetchedAt int64, seq uint64) uint64 {
	const timeBits = 42
	t := uint64(max(fetchedAt, 0)) & (1<<timeBits - 1)
	return (1<<timeBits-1-t)<<(64-timeBits) | min(seq, 1<<(64-timeBits)-1)
}

// tableBytes is the size of the docs table tx read (0 when there is none).
func tableBytes(ctx context.Context, tx pillar.Tx) int64 {
	if ti, err := tx.Table(ctx, pillar.TableDocs); err == nil {
		return ti.Bytes
	}
	return 0
}

// diskFull turns a full disk (ENOSPC) while writing the store into an error
// that says what was being written and about how much space it needs; the
// transaction is aborted, so the store stays as it was and readable.
func diskFull(st pillar.Store, what string, need int64, err error) error {
	if !errors.Is(err, syscall.ENOSPC) {
		return err
	}
	dir := st.Info().Root
	return fmt.Errorf("ingest: disk full during the %s: it needs about %s free in %s (%s free now); nothing was committed, the store is as it was: %w",
		what, extsort.HumanBytes(need), dir, freeSpace(dir), err)
}

// diskFullSpill is diskFull for the spill of cleaned pages to dir: a sorted
// run is up to the memory limit.
func diskFullSpill(dir string, limit int64, err error) error {
	if !errors.Is(err, syscall.ENOSPC) {
		return err
	}
	return fmt.Errorf("ingest: disk full spilling cleaned pages: each sorted run needs up to %s free in %s (%s free now; the runs of all pages need about their clean text's size; set --memory-limit or TMPDIR): %w",
		extsort.HumanBytes(limit), dir, freeSpace(dir), err)
}

func freeSpace(dir string) string {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return "unknown"
	}
	return extsort.HumanBytes(int64(fs.Bavail) * int64(fs.Bsize))
}

// removeStaleSpills removes the spill folders (pillar-ingest-<pid>-*) under
// dir whose process is gone: a run killed with -9 cannot remove its own.
func removeStaleSpills(dir string) {
	if dir == "" {
		dir = os.TempDir()
	}
	old, _ := filepath.Glob(filepath.Join(dir, "pillar-ingest-*-*"))
	for _, p := range old {
		var pid int
		if _, err := fmt.Sscanf(filepath.Base(p), "pillar-ingest-%d-", &pid); err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(p)
		}
	}
}
