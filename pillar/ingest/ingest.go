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
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pillarkit/pillar/internal/progress"
	"github.com/pillarkit/pillar/pillar"
)

// DefaultMaxPageBytes is the largest input file ingest accepts (32 MiB).
const DefaultMaxPageBytes = 32 << 20

// Options configure one ingest run.
type Options struct {
	// From is the folder of .html/.htm/.xhtml and .txt/.md files (walked
	// recursively). Required.
	From string
	// BaseURL is the URL prefix for files without <link rel=canonical>: a
	// file's URL is BaseURL + its path relative to From. The default value
	// is "http://corpus.local/".
	BaseURL string
	// MaxPageBytes rejects larger files, naming them. The default value is
	// DefaultMaxPageBytes.
	MaxPageBytes int64
	// Workers clean pages in parallel. The default value is GOMAXPROCS.
	Workers int
	// Logger receives warnings about skipped files. The default value
	// discards.
	Logger *slog.Logger
	// Progress shows a progress bar (or log lines) over the files.
	// The default value (false) shows nothing.
	Progress bool
	// Now returns the ingest time. The default value is time.Now.
	Now func() time.Time
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
}

// Stats summarize an ingest run.
type Stats struct {
	Files      int   `json:"files"`       // candidate files seen
	Pages      int   `json:"pages"`       // pages read and cleaned
	New        int   `json:"new"`         // pages not in the store before
	Changed    int   `json:"changed"`     // pages whose content hash changed
	Unchanged  int   `json:"unchanged"`   // same content hash: no new version
	Empty      int   `json:"empty"`       // pages with no text after cleaning (kept)
	Binary     int   `json:"binary"`      // skipped: binary or invalid UTF-8
	Unreadable int   `json:"unreadable"`  // skipped: could not be read
	TooLarge   int   `json:"too_large"`   // rejected: over MaxPageBytes
	Duplicates int   `json:"duplicates"`  // skipped: URL already seen in this run
	BadURL     int   `json:"bad_url"`     // skipped: no valid URL could be derived
	NotRegular int   `json:"not_regular"` // skipped: not a regular file (named pipe, socket, device)
	HTMLBytes  int64 `json:"html_bytes"`  // bytes of the files read
	TextBytes  int64 `json:"text_bytes"`  // bytes of clean text
	Generation int64 `json:"generation"`  // store generation committed (0: nothing changed)
	DurationMS int64 `json:"duration_ms"` // wall time
	// Rejected names the files rejected as too large.
	Rejected []string `json:"rejected,omitempty"`
}

// ChangedPages is New + Changed.
func (s Stats) ChangedPages() int { return s.New + s.Changed }

type page struct {
	path string
	doc  pillar.Doc
	err  error
	kind string // "", "binary", "unreadable", "too_large", "bad_url"
}

// Run ingests every page under opts.From into the docs table of st in one
// transaction. Pages whose content hash is unchanged keep their row (same
// version); a changed page gets a new version; a run that changes nothing
// commits nothing.
func Run(ctx context.Context, st pillar.Store, opts Options) (Stats, error) {
	opts.ensureDefaults()
	start := time.Now()
	var stats Stats
	if opts.From == "" {
		return stats, errors.New("ingest: no input folder (--from)")
	}
	fi, err := os.Stat(opts.From)
	if err != nil {
		return stats, fmt.Errorf("ingest: input %s: %w", opts.From, err)
	}
	if !fi.IsDir() {
		return stats, fmt.Errorf("ingest: input %s: not a directory", opts.From)
	}
	if _, err := url.Parse(opts.BaseURL); err != nil {
		return stats, fmt.Errorf("ingest: --base-url %q: %w", opts.BaseURL, err)
	}
	var paths []string
	err = filepath.WalkDir(opts.From, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			opts.Logger.Warn("ingest: skipping unreadable path", "path", p, "err", err)
			stats.Unreadable++
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
			opts.Logger.Warn("ingest: skipping a path that is not a regular file", "path", p, "why", why)
			stats.NotRegular++
			return nil
		}
		paths = append(paths, p)
		return nil
	})
	if err != nil {
		return stats, fmt.Errorf("ingest: walk %s: %w", opts.From, err)
	}
	sort.Strings(paths)
	stats.Files = len(paths)

	bar := progress.New(int64(len(paths)), "ingest", &progress.Options{Quiet: !opts.Progress, Logger: opts.Logger})
	pages := make([]page, len(paths))
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < opts.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				pages[i] = readPage(paths[i], &opts)
				bar.Add(1)
			}
		}()
	}
feed:
	for i := range paths {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	bar.Done()
	if err := ctx.Err(); err != nil {
		return stats, fmt.Errorf("ingest: %w", err)
	}

	// Dedupe by key (first path wins: paths are sorted) and count.
	byKey := map[string]*pillar.Doc{}
	firstPath := map[string]string{}
	for i := range pages {
		p := &pages[i]
		switch p.kind {
		case "binary":
			stats.Binary++
			opts.Logger.Warn("ingest: skipping non-text file", "path", p.path, "why", p.err)
			continue
		case "unreadable":
			stats.Unreadable++
			opts.Logger.Warn("ingest: skipping unreadable file", "path", p.path, "err", p.err)
			continue
		case "too_large":
			stats.TooLarge++
			stats.Rejected = append(stats.Rejected, p.path)
			opts.Logger.Warn("ingest: rejecting page over the size limit", "path", p.path, "err", p.err)
			continue
		case "not_regular":
			stats.NotRegular++
			opts.Logger.Warn("ingest: skipping a path that is not a regular file", "path", p.path, "why", p.err)
			continue
		case "bad_url":
			stats.BadURL++
			opts.Logger.Warn("ingest: skipping page without a valid URL", "path", p.path, "err", p.err)
			continue
		}
		if prev, dup := firstPath[p.doc.PageKey]; dup {
			stats.Duplicates++
			opts.Logger.Warn("ingest: duplicate URL in this run; keeping the first file", "url", p.doc.URL, "kept", prev, "skipped", p.path)
			continue
		}
		firstPath[p.doc.PageKey] = p.path
		stats.Pages++
		stats.HTMLBytes += p.doc.HTMLBytes
		stats.TextBytes += int64(len(p.doc.Text))
		if p.doc.Text == "" {
			stats.Empty++
		}
		byKey[p.doc.PageKey] = &p.doc
	}

	tx, err := st.Begin(ctx)
	if err != nil {
		return stats, fmt.Errorf("ingest: %w", err)
	}
	defer tx.Abort()
	// Merge with the existing docs table (sorted by page_key).
	existing := map[string]pillar.Doc{}
	rr, err := tx.ReadTable(ctx, pillar.TableDocs, nil)
	switch {
	case errors.Is(err, pillar.ErrNotFound):
	case err != nil:
		return stats, fmt.Errorf("ingest: read docs: %w", err)
	default:
		for rr.Next() {
			var d pillar.Doc
			if err := rr.Scan(&d); err != nil {
				rr.Close()
				return stats, fmt.Errorf("ingest: read docs: %w", err)
			}
			existing[d.PageKey] = d
		}
		rr.Close()
		if err := rr.Err(); err != nil {
			return stats, fmt.Errorf("ingest: read docs: %w", err)
		}
	}
	nowMS := opts.Now().UnixMilli()
	for k, d := range byKey {
		old, ok := existing[k]
		switch {
		case !ok:
			stats.New++
			d.Version, d.UpdatedAt = 1, nowMS
			existing[k] = *d
		case old.ContentHash != d.ContentHash:
			stats.Changed++
			d.Version, d.UpdatedAt = old.Version+1, nowMS
			existing[k] = *d
		default:
			stats.Unchanged++
		}
	}
	if stats.ChangedPages() == 0 {
		stats.DurationMS = time.Since(start).Milliseconds()
		return stats, nil
	}
	keys := make([]string, 0, len(existing))
	for k := range existing {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	w, err := tx.WriteTable(ctx, pillar.TableDocs, pillar.Doc{}, &pillar.WriteOptions{SortedBy: []string{"page_key"}})
	if err != nil {
		return stats, fmt.Errorf("ingest: %w", err)
	}
	for _, k := range keys {
		d := existing[k]
		if err := w.Write(&d); err != nil {
			w.Close()
			return stats, fmt.Errorf("ingest: write docs: %w", err)
		}
	}
	if err := w.Close(); err != nil {
		return stats, fmt.Errorf("ingest: write docs: %w", err)
	}
	stats.DurationMS = time.Since(start).Milliseconds()
	if err := tx.SetAttr(ctx, "ingest/last", stats); err != nil {
		return stats, err
	}
	if err := tx.Commit(ctx); err != nil {
		return stats, fmt.Errorf("ingest: commit: %w", err)
	}
	stats.Generation = st.Info().Generation
	return stats, nil
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

func readPage(path string, o *Options) page {
	p := page{path: path}
	// O_NONBLOCK: a path that became a named pipe after the walk must not
	// block the open; it has no effect on a regular file.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		p.kind, p.err = "unreadable", err
		return p
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		p.kind, p.err = "unreadable", err
		return p
	}
	if why := modeReason(st.Mode()); why != "" {
		p.kind, p.err = "not_regular", errors.New(why)
		return p
	}
	if st.Size() > o.MaxPageBytes {
		p.kind, p.err = "too_large", fmt.Errorf("ingest: page %s: %d bytes exceeds the limit of %d bytes (--max-page-bytes)", path, st.Size(), o.MaxPageBytes)
		return p
	}
	b, err := io.ReadAll(io.LimitReader(f, o.MaxPageBytes+1))
	if err != nil {
		p.kind, p.err = "unreadable", err
		return p
	}
	if int64(len(b)) > o.MaxPageBytes {
		p.kind, p.err = "too_large", fmt.Errorf("ingest: page %s: exceeds the limit of %d bytes", path, o.MaxPageBytes)
		return p
	}
	if bin, why := looksBinary(b); bin {
		p.kind, p.err = "binary", errors.New(why)
		return p
	}
	rel, _ := filepath.Rel(o.From, path)
	rel = filepath.ToSlash(rel)
	var c Cleaned
	switch strings.ToLower(filepath.Ext(path)) {
	case ".txt", ".md", ".text":
		text := strings.TrimSpace(strings.ReplaceAll(string(b), "\r\n", "\n"))
		c = Cleaned{Text: text}
		if line, _, _ := strings.Cut(text, "\n"); len(line) < 200 {
			c.Title = strings.TrimSpace(strings.TrimLeft(line, "# "))
		}
	default:
		c = CleanHTML(b)
	}
	raw := o.BaseURL + rel
	if c.Canonical != "" {
		if u, err := url.Parse(c.Canonical); err == nil {
			if base, err := url.Parse(o.BaseURL + rel); err == nil {
				raw = base.ResolveReference(u).String()
			}
		}
	}
	key, norm, err := pillar.KeyOfURL(raw)
	if err != nil {
		p.kind, p.err = "bad_url", err
		return p
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
		FetchedAt:   st.ModTime().UnixMilli(),
		ContentHash: hex.EncodeToString(sum[:16]),
		Title:       c.Title,
		Text:        c.Text,
		Lang:        lang,
		TextLen:     int64(len(c.Text)),
		OutLinks:    int64(c.OutLinks),
		HTMLBytes:   int64(len(b)),
	}
	return p
}
