package ingest

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha1"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/nlnwa/gowarc/v3"
	"github.com/parquet-go/parquet-go"

	"github.com/pillarkit/pillar/internal/objstore"
)

// Input formats (Options.Format).
const (
	FormatFolder  = "folder"  // a folder tree of HTML and text files
	FormatWARC    = "warc"    // WARC files (.warc, .warc.gz): response records are pages
	FormatWET     = "wet"     // WET files (.warc.wet.gz): conversion records are plain-text pages
	FormatJSONL   = "jsonl"   // JSON Lines page datasets (.jsonl, .jsonl.gz, .jsonl.zst)
	FormatParquet = "parquet" // Parquet page datasets
)

// Outcomes of crawl and dataset records (besides the folder's).
const (
	OutcomeStatus4xx  = "status_4xx"
	OutcomeStatus5xx  = "status_5xx"
	OutcomeNonHTML    = "non_html"
	OutcomeRevisit    = "revisit"
	OutcomeNotAPage   = "not_a_page"
	OutcomeTruncated  = "truncated"
	OutcomeMalformed  = "malformed"
	OutcomeBadDigest  = "bad_digest"
	OutcomeHTTPStatus = "http_status"
)

// crawlRecord is one record of a crawl or dataset on its way to the
// cleaners: a page's bytes with what the crawler recorded, or (kind set)
// a record that is counted and skipped.
type crawlRecord struct {
	rel         string // file@offset (WARC: byte offset; JSONL: line; Parquet: row)
	url         string
	body        []byte
	isText      bool
	contentType string
	fetchedAt   int64 // unix milliseconds
	refresh     bool  // a revisit: the fetch time of an unchanged page
	kind        string
	detail      string
}

// Columns name a dataset's columns (Options.Columns). The zero value of
// every field is its default name.
type Columns struct {
	URL       string // default "url"
	HTML      string // default "html"
	Text      string // default "text" (used when a row has no HTML)
	FetchedAt string // default "fetched_at": RFC 3339, or unix seconds or milliseconds
}

func (c Columns) withDefaults() Columns {
	if c.URL == "" {
		c.URL = "url"
	}
	if c.HTML == "" {
		c.HTML = "html"
	}
	if c.Text == "" {
		c.Text = "text"
	}
	if c.FetchedAt == "" {
		c.FetchedAt = "fetched_at"
	}
	return c
}

// ParseColumns parses --columns: "url=COL,html=COL,text=COL,fetched_at=COL"
// (any subset; the others keep their default names).
func ParseColumns(s string) (Columns, error) {
	var c Columns
	if s == "" {
		return c, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || v == "" {
			return c, fmt.Errorf("ingest: --columns %q: want name=column pairs, got %q", s, kv)
		}
		switch k {
		case "url":
			c.URL = v
		case "html":
			c.HTML = v
		case "text":
			c.Text = v
		case "fetched_at":
			c.FetchedAt = v
		default:
			return c, fmt.Errorf("ingest: --columns %q: unknown name %q (want url, html, text, fetched_at)", s, k)
		}
	}
	return c, nil
}

// Objects is where an s3:// From is read from: the object store rooted at
// From (objstore.Open of it satisfies it).
type Objects interface {
	List(ctx context.Context, prefix string) ([]objstore.Info, error)
	Get(ctx context.Context, key string) (io.ReadCloser, error)
}

// objectInputs lists the crawl and dataset objects of o.Objects, in key
// order, with their formats.
func objectInputs(ctx context.Context, o *Options) (keys, formats []string, err error) {
	if o.Objects == nil {
		return nil, nil, fmt.Errorf("ingest: --from %s: an object-store source needs the object store (Options.Objects)", o.From)
	}
	infos, err := o.Objects.List(ctx, "")
	if err != nil {
		return nil, nil, fmt.Errorf("ingest: list %s: %w", o.From, err)
	}
	for _, in := range infos {
		f := o.Format
		if f == "" || f == FormatFolder {
			f = formatOf(in.Key)
		}
		if f == "" {
			continue // not a crawl or dataset object
		}
		keys, formats = append(keys, in.Key), append(formats, f)
	}
	if len(keys) == 0 {
		return nil, nil, fmt.Errorf("ingest: %s holds no crawl or dataset objects (.warc[.gz], .wet[.gz], .jsonl[.gz|.zst], .parquet)", o.From)
	}
	return keys, formats, nil
}

// fetchObject copies object key into dir (under its base name) for the
// file readers, which seek (WARC resync) and need sizes (Parquet); one
// object is on disk at a time.
func fetchObject(ctx context.Context, o *Options, dir, key string) (string, error) {
	rc, err := o.Objects.Get(ctx, key)
	if err != nil {
		return "", fmt.Errorf("ingest: %s/%s: %w", strings.TrimSuffix(o.From, "/"), key, err)
	}
	defer rc.Close()
	p := filepath.Join(dir, filepath.Base(key))
	f, err := os.Create(p)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		os.Remove(p)
		return "", fmt.Errorf("ingest: download %s/%s: %w", strings.TrimSuffix(o.From, "/"), key, err)
	}
	return p, f.Close()
}

// formatOf is the format of an input file by its name.
func formatOf(name string) string {
	n := strings.ToLower(name)
	n = strings.TrimSuffix(strings.TrimSuffix(n, ".gz"), ".zst")
	switch {
	case strings.HasSuffix(n, ".wet") || strings.HasSuffix(n, ".warc.wet"):
		return FormatWET
	case strings.HasSuffix(n, ".warc") || strings.HasSuffix(n, ".arc"):
		return FormatWARC
	case strings.HasSuffix(n, ".jsonl") || strings.HasSuffix(n, ".ndjson") || strings.HasSuffix(n, ".json"):
		return FormatJSONL
	case strings.HasSuffix(n, ".parquet"):
		return FormatParquet
	}
	return ""
}

// crawlInputs resolves From into the input files of a crawl or dataset,
// in name order, with their format; ok false means From is a folder of
// pages (FormatFolder). A folder is a crawl when Format names one or when
// every file in it is a crawl or dataset file; a glob or a file is one by
// Format or by its name.
func crawlInputs(o *Options) (files []string, formats []string, ok bool, err error) {
	var cands []string
	if strings.ContainsAny(o.From, "*?[") {
		if cands, err = filepath.Glob(o.From); err != nil {
			return nil, nil, false, fmt.Errorf("ingest: --from %q: %w", o.From, err)
		}
		if len(cands) == 0 {
			return nil, nil, false, fmt.Errorf("ingest: --from %q matches no file", o.From)
		}
	} else {
		fi, err := os.Stat(o.From)
		if err != nil {
			return nil, nil, false, fmt.Errorf("ingest: input %s: %w", o.From, err)
		}
		if fi.IsDir() {
			if o.Format == FormatFolder {
				return nil, nil, false, nil
			}
			ents, err := os.ReadDir(o.From)
			if err != nil {
				return nil, nil, false, fmt.Errorf("ingest: input %s: %w", o.From, err)
			}
			crawl, other := 0, 0
			for _, e := range ents {
				if e.IsDir() {
					other++
					continue
				}
				if formatOf(e.Name()) != "" {
					crawl++
					cands = append(cands, filepath.Join(o.From, e.Name()))
				} else if !strings.HasPrefix(e.Name(), ".") {
					other++
				}
			}
			if o.Format == "" && (crawl == 0 || other > 0) {
				return nil, nil, false, nil // a folder of pages
			}
		} else {
			cands = []string{o.From}
		}
	}
	sort.Strings(cands)
	for _, c := range cands {
		f := o.Format
		if f == "" || f == FormatFolder {
			f = formatOf(c)
		}
		if f == "" {
			return nil, nil, false, fmt.Errorf("ingest: %s: not a crawl or dataset file (.warc[.gz], .wet[.gz], .jsonl[.gz|.zst], .parquet); give --format or a folder", c)
		}
		files, formats = append(files, c), append(formats, f)
	}
	return files, formats, true, nil
}

// readCrawlFile streams the records of one input file to emit, counting
// the bytes read with read (the progress bar). Only errors that end the
// run are returned (a missing Parquet column); bad records are emitted as
// skips naming their offset.
func readCrawlFile(o *Options, path, format string, read func(int64), emit func(*crawlRecord) error) error {
	switch format {
	case FormatWARC, FormatWET:
		return readWARC(o, path, format, read, emit)
	case FormatJSONL:
		return readJSONL(o, path, read, emit)
	case FormatParquet:
		return readParquet(o, path, read, emit)
	}
	return fmt.Errorf("ingest: %s: unknown format %q", path, format)
}

// readWARC reads the records of a WARC (or WET) file, gzipped per record
// or not. A record that does not parse is reported at its offset, and
// reading resumes at the next gzip member or "WARC/" line; a file that
// ends inside a record reports the tail as truncated.
func readWARC(o *Options, path, format string, read func(int64), emit func(*crawlRecord) error) error {
	f, err := os.Open(path)
	if err != nil {
		return emit(&crawlRecord{rel: filepath.Base(path), kind: OutcomeUnreadable, detail: err.Error()})
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return emit(&crawlRecord{rel: filepath.Base(path), kind: OutcomeUnreadable, detail: err.Error()})
	}
	size := fi.Size()
	var magic [2]byte
	f.ReadAt(magic[:], 0)
	gz := magic[0] == 0x1f && magic[1] == 0x8b
	name := filepath.Base(path)
	var offset, done int64
	for offset < size {
		// A section reader: the WARC reader closes what it reads from if it
		// can, and the file outlives it across resyncs.
		// ErrWarn, not ErrIgnore: a record with a finding is still returned
		// (its findings in Record.Validation), and gowarc 3.1 with spec
		// violations ignored cuts blocks of more than about 3.7 KB short
		// (TestWARCLargePayload). ErrWarn drops a WARC-Target-URI it cannot
		// parse, such as wget's "<http://…>": rawTargetURI reads it back.
		wr, err := gowarc.NewWarcFileReaderFromStream(io.NewSectionReader(f, 0, size), offset,
			gowarc.WithSyntaxErrorPolicy(gowarc.ErrWarn), gowarc.WithSpecViolationPolicy(gowarc.ErrWarn),
			gowarc.WithBlockErrorPolicy(gowarc.ErrWarn), gowarc.WithUnknownRecordTypePolicy(gowarc.ErrWarn),
			gowarc.WithBufferMaxMemBytes(1<<20), gowarc.WithBufferTmpDir(o.TempDir))
		if err != nil {
			return emit(&crawlRecord{rel: name, kind: OutcomeUnreadable, detail: err.Error()})
		}
		for {
			rec, err := wr.Next()
			if err == io.EOF {
				offset = size
				break
			}
			at := fmt.Sprintf("%s@%d", name, rec.Offset)
			if err != nil || rec.WarcRecord == nil {
				start := max(rec.Offset, offset)
				next := resync(f, start+1, size, gz)
				kind, detail := OutcomeMalformed, fmt.Sprint(err)
				if next < 0 && (errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || strings.Contains(fmt.Sprint(err), "EOF")) {
					kind, detail = OutcomeTruncated, fmt.Sprintf("the file ends inside a record (%d bytes from offset %d to the end not read)", size-start, start)
				}
				if rec.WarcRecord != nil {
					rec.WarcRecord.Close()
				}
				if err := emit(&crawlRecord{rel: fmt.Sprintf("%s@%d", name, start), kind: kind, detail: detail}); err != nil {
					wr.Close()
					return err
				}
				if next < 0 {
					offset = size
				} else {
					offset = next
				}
				break
			}
			cr := warcRecord(o, rec.WarcRecord, format)
			if cr.url == "" && (cr.kind == "" || cr.refresh) {
				cr.url = rawTargetURI(f, rec.Offset, rec.Size, gz)
			}
			cr.rel = at
			rec.WarcRecord.Close()
			read(rec.Offset + rec.Size - done)
			done = rec.Offset + rec.Size
			if err := emit(cr); err != nil {
				wr.Close()
				return err
			}
		}
		wr.Close()
	}
	read(size - done)
	return nil
}

// rawTargetURI reads the WARC-Target-URI of the record at offset from the
// file itself (its first header block, inflated when gz), without angle
// brackets; "" when there is none.
func rawTargetURI(f *os.File, offset, size int64, gz bool) string {
	var r io.Reader = io.NewSectionReader(f, offset, size)
	if gz {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return ""
		}
		defer zr.Close()
		r = zr
	}
	head := make([]byte, 64<<10)
	n, _ := io.ReadFull(r, head)
	head = head[:n]
	if i := bytes.Index(head, []byte("\r\n\r\n")); i >= 0 {
		head = head[:i]
	}
	for _, l := range strings.Split(string(head), "\r\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.EqualFold(strings.TrimSpace(k), "WARC-Target-URI") {
			return strings.Trim(strings.TrimSpace(v), "<>")
		}
	}
	return ""
}

// resync finds the next place a record can start at or after from: a gzip
// member header in a gzipped file, a "WARC/" at the start of a line in a
// plain one; -1 when there is none.
func resync(f *os.File, from, size int64, gz bool) int64 {
	buf := make([]byte, 64<<10)
	pat := []byte("\nWARC/1.")
	if gz {
		pat = []byte{0x1f, 0x8b, 0x08}
	}
	for pos := from; pos < size; {
		n, err := f.ReadAt(buf, pos)
		if n <= 0 {
			return -1
		}
		if i := bytes.Index(buf[:n], pat); i >= 0 {
			if gz {
				return pos + int64(i)
			}
			return pos + int64(i) + 1
		}
		if err != nil {
			return -1
		}
		pos += int64(n - len(pat) + 1)
	}
	return -1
}

// warcRecord makes a crawlRecord of a parsed WARC record.
func warcRecord(o *Options, r gowarc.WarcRecord, format string) *crawlRecord {
	h := r.WarcHeader()
	cr := &crawlRecord{url: strings.Trim(h.Get(gowarc.WarcTargetURI), "<>")}
	if t, err := r.Date(); err == nil {
		cr.fetchedAt = t.UnixMilli()
	}
	switch r.Type() {
	case gowarc.Response:
	case gowarc.Resource:
		if !strings.HasPrefix(cr.url, "http://") && !strings.HasPrefix(cr.url, "https://") {
			cr.kind, cr.detail = OutcomeNotAPage, "resource record of "+cr.url
			return cr
		}
	case gowarc.Conversion:
		if format != FormatWET {
			cr.kind, cr.detail = OutcomeNotAPage, "conversion record in a WARC (give --format wet to read it)"
			return cr
		}
		cr.isText = true
	case gowarc.Revisit:
		// The payload is that of an earlier fetch: it refreshes the stored
		// page's fetch time (or that of a fetch of the URL in this run).
		cr.refresh = true
		if cr.url == "" {
			cr.url = "" // read back from the record below, as for responses
		}
		return cr
	default:
		cr.kind, cr.detail = OutcomeNotAPage, r.Type().String()+" record"
		return cr
	}
	var payload io.Reader
	switch b := r.Block().(type) {
	case gowarc.HttpResponseBlock:
		code := b.HttpStatusCode()
		hdr := b.HttpHeader()
		switch {
		case code >= 300 && code < 400:
			loc := ""
			if hdr != nil {
				loc = hdr.Get("Location")
			}
			cr.kind, cr.detail = OutcomeRedirect, fmt.Sprintf("HTTP %d to %s", code, loc)
			return cr
		case code >= 400 && code < 500:
			cr.kind, cr.detail = OutcomeStatus4xx, fmt.Sprintf("HTTP %d", code)
			return cr
		case code >= 500:
			cr.kind, cr.detail = OutcomeStatus5xx, fmt.Sprintf("HTTP %d", code)
			return cr
		case code < 100:
			cr.kind, cr.detail = OutcomeMalformed, "the HTTP response's status line and headers do not parse"
			return cr
		case code < 200:
			cr.kind, cr.detail = OutcomeHTTPStatus, fmt.Sprintf("HTTP %d", code)
			return cr
		}
		if hdr != nil {
			cr.contentType = hdr.Get("Content-Type")
		}
		p, err := b.PayloadBytes()
		if err != nil {
			cr.kind, cr.detail = OutcomeMalformed, err.Error()
			return cr
		}
		payload = p
	case gowarc.PayloadBlock:
		cr.contentType = h.Get(gowarc.ContentType)
		p, err := b.PayloadBytes()
		if err != nil {
			cr.kind, cr.detail = OutcomeMalformed, err.Error()
			return cr
		}
		payload = p
	default:
		cr.contentType = h.Get(gowarc.ContentType)
		p, err := r.Block().RawBytes()
		if err != nil {
			cr.kind, cr.detail = OutcomeMalformed, err.Error()
			return cr
		}
		payload = p
	}
	if !cr.isText {
		mt, _, _ := mime.ParseMediaType(cr.contentType)
		switch mt {
		case "text/html", "application/xhtml+xml", "":
		case "text/plain":
			cr.isText = true
		default:
			cr.kind, cr.detail = OutcomeNonHTML, mt
			return cr
		}
	}
	sum := sha1.New()
	body, err := io.ReadAll(io.LimitReader(io.TeeReader(payload, sum), o.MaxPageBytes+1))
	if err != nil {
		cr.kind, cr.detail = OutcomeMalformed, err.Error()
		return cr
	}
	if int64(len(body)) > o.MaxPageBytes {
		cr.kind, cr.detail = OutcomeTooLarge, fmt.Sprintf("payload over the limit of %d bytes", o.MaxPageBytes)
		return cr
	}
	if want := h.Get(gowarc.WarcPayloadDigest); strings.HasPrefix(strings.ToLower(want), "sha1:") && format == FormatWARC {
		got := base32.StdEncoding.EncodeToString(sum.Sum(nil))
		if !strings.EqualFold(strings.TrimPrefix(strings.TrimPrefix(want, "sha1:"), "SHA1:"), got) {
			cr.kind, cr.detail = OutcomeBadDigest, fmt.Sprintf("WARC-Payload-Digest %s, payload sha1:%s", want, got)
			return cr
		}
	}
	cr.body = body
	return cr
}

// readJSONL reads a JSON Lines dataset (gzip or zstd by its name): one
// object per line with the Columns' fields.
func readJSONL(o *Options, path string, read func(int64), emit func(*crawlRecord) error) error {
	name := filepath.Base(path)
	f, err := os.Open(path)
	if err != nil {
		return emit(&crawlRecord{rel: name, kind: OutcomeUnreadable, detail: err.Error()})
	}
	defer f.Close()
	cols := o.Columns.withDefaults()
	var r io.Reader = &countingReader{r: f, n: read}
	switch {
	case strings.HasSuffix(path, ".gz"):
		zr, err := gzip.NewReader(r)
		if err != nil {
			return emit(&crawlRecord{rel: name, kind: OutcomeMalformed, detail: "gzip: " + err.Error()})
		}
		defer zr.Close()
		r = zr
	case strings.HasSuffix(path, ".zst"):
		zr, err := zstd.NewReader(r)
		if err != nil {
			return emit(&crawlRecord{rel: name, kind: OutcomeMalformed, detail: "zstd: " + err.Error()})
		}
		defer zr.Close()
		r = zr
	}
	br := bufio.NewReaderSize(r, 1<<20)
	for line := 1; ; line++ {
		b, err := readLine(br, o.MaxPageBytes*2)
		at := fmt.Sprintf("%s:%d", name, line)
		if errors.Is(err, errLineTooLong) {
			if err := emit(&crawlRecord{rel: at, kind: OutcomeTooLarge, detail: fmt.Sprintf("line over %d bytes", o.MaxPageBytes*2)}); err != nil {
				return err
			}
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return emit(&crawlRecord{rel: at, kind: OutcomeTruncated, detail: err.Error()})
		}
		if len(bytes.TrimSpace(b)) > 0 {
			if e := emit(jsonlRecord(o, cols, at, b)); e != nil {
				return e
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
	}
}

var errLineTooLong = errors.New("line too long")

// readLine reads one line (without its newline) of at most limit bytes;
// a longer one is skipped through its end and reported as errLineTooLong.
func readLine(br *bufio.Reader, limit int64) ([]byte, error) {
	var out []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if int64(len(out)+len(chunk)) <= limit {
			out = append(out, chunk...)
		} else if out != nil || len(chunk) > 0 {
			out = nil
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			if err == nil || errors.Is(err, io.EOF) {
				return nil, errLineTooLong
			}
			return nil, err
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimRight(out, "\r\n"), err
	}
}

func jsonlRecord(o *Options, cols Columns, at string, line []byte) *crawlRecord {
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		return &crawlRecord{rel: at, kind: OutcomeMalformed, detail: "not a JSON object: " + err.Error()}
	}
	return datasetRecord(o, cols, at, func(col string) (any, bool) { v, ok := m[col]; return v, ok })
}

// datasetRecord makes a page of one dataset row.
func datasetRecord(o *Options, cols Columns, at string, get func(string) (any, bool)) *crawlRecord {
	cr := &crawlRecord{rel: at}
	u, ok := get(cols.URL)
	s, isStr := u.(string)
	if !ok || !isStr || s == "" {
		cr.kind, cr.detail = OutcomeMalformed, fmt.Sprintf("no string column %q (the URL; --columns url=NAME)", cols.URL)
		return cr
	}
	cr.url = s
	if h, ok := get(cols.HTML); ok && h != nil {
		hs, isStr := h.(string)
		if !isStr {
			cr.kind, cr.detail = OutcomeMalformed, fmt.Sprintf("column %q is a %T, want a string", cols.HTML, h)
			return cr
		}
		cr.body = []byte(hs)
	} else if t, ok := get(cols.Text); ok && t != nil {
		ts, isStr := t.(string)
		if !isStr {
			cr.kind, cr.detail = OutcomeMalformed, fmt.Sprintf("column %q is a %T, want a string", cols.Text, t)
			return cr
		}
		cr.body, cr.isText = []byte(ts), true
	} else {
		cr.kind, cr.detail = OutcomeMalformed, fmt.Sprintf("neither column %q nor %q (--columns html=NAME or text=NAME)", cols.HTML, cols.Text)
		return cr
	}
	if int64(len(cr.body)) > o.MaxPageBytes {
		cr.kind, cr.detail, cr.body = OutcomeTooLarge, fmt.Sprintf("%d bytes, limit %d", len(cr.body), o.MaxPageBytes), nil
		return cr
	}
	if v, ok := get(cols.FetchedAt); ok && v != nil {
		ms, err := fetchTime(v)
		if err != nil {
			cr.kind, cr.detail, cr.body = OutcomeMalformed, fmt.Sprintf("column %q: %v", cols.FetchedAt, err), nil
			return cr
		}
		cr.fetchedAt = ms
	}
	return cr
}

// fetchTime reads a fetch time: RFC 3339, or unix seconds (below 1e11) or
// milliseconds, or a time.Time.
func fetchTime(v any) (int64, error) {
	num := func(f float64) int64 {
		if f < 1e11 {
			return int64(f * 1000)
		}
		return int64(f)
	}
	switch x := v.(type) {
	case time.Time:
		return x.UnixMilli(), nil
	case string:
		if t, err := time.Parse(time.RFC3339Nano, x); err == nil {
			return t.UnixMilli(), nil
		}
		if f, err := strconv.ParseFloat(x, 64); err == nil {
			return num(f), nil
		}
		return 0, fmt.Errorf("%q is neither RFC 3339 nor a unix time", x)
	case float64:
		return num(x), nil
	case int64:
		return num(float64(x)), nil
	case int32:
		return num(float64(x)), nil
	}
	return 0, fmt.Errorf("a %T, want a time", v)
}

// readParquet reads a Parquet dataset row by row. A file without the URL
// column, or without both the HTML and the text column, ends the run
// naming the file and the column.
func readParquet(o *Options, path string, read func(int64), emit func(*crawlRecord) error) error {
	name := filepath.Base(path)
	f, err := os.Open(path)
	if err != nil {
		return emit(&crawlRecord{rel: name, kind: OutcomeUnreadable, detail: err.Error()})
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return emit(&crawlRecord{rel: name, kind: OutcomeUnreadable, detail: err.Error()})
	}
	pf, err := parquet.OpenFile(f, fi.Size())
	if err != nil {
		return fmt.Errorf("ingest: %s: not a Parquet file: %w", path, err)
	}
	cols := o.Columns.withDefaults()
	have := map[string]parquet.Field{}
	for _, fl := range pf.Schema().Fields() {
		have[fl.Name()] = fl
	}
	if _, ok := have[cols.URL]; !ok {
		return fmt.Errorf("ingest: %s: no column %q (the URL; --columns url=NAME)", path, cols.URL)
	}
	if _, ok := have[cols.HTML]; !ok {
		if _, ok := have[cols.Text]; !ok {
			return fmt.Errorf("ingest: %s: neither column %q nor %q (--columns html=NAME or text=NAME)", path, cols.HTML, cols.Text)
		}
	}
	for _, c := range []string{cols.URL, cols.HTML, cols.Text} {
		if fl, ok := have[c]; ok && (!fl.Leaf() || fl.Type().Kind() != parquet.ByteArray) {
			return fmt.Errorf("ingest: %s: column %q is %s, want a string (BYTE_ARRAY)", path, c, fl.Type())
		}
	}
	r := parquet.NewReader(pf)
	defer r.Close()
	per := fi.Size() / max(pf.NumRows(), 1)
	for row := int64(1); ; row++ {
		m := map[string]any{}
		if err := r.Read(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("ingest: %s: row %d: %w", path, row, err)
		}
		read(per)
		at := fmt.Sprintf("%s#%d", name, row)
		if err := emit(datasetRecord(o, cols, at, func(c string) (any, bool) {
			v, ok := m[c]
			if b, isB := v.([]byte); isB {
				v = string(b)
			}
			return v, ok
		})); err != nil {
			return err
		}
	}
}

// countingReader reports the bytes read through it.
type countingReader struct {
	r io.Reader
	n func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n(int64(n))
	return n, err
}

// IsCrawl reports whether from names a crawl or dataset (a WARC, WET,
// JSONL or Parquet file, a folder of only such files, a glob of them, or
// an object-store URL) rather than a folder of pages.
func IsCrawl(from string) bool {
	if strings.Contains(from, "://") {
		return true
	}
	o := Options{From: from}
	_, _, ok, err := crawlInputs(&o)
	return ok && err == nil
}

// WriteWARCResponse appends one WARC/1.1 response record of an HTTP 200
// answer with body, in a gzip member of its own (as crawlers write them),
// with its WARC-Payload-Digest; for tools and tests that make crawls.
func WriteWARCResponse(w io.Writer, url string, date time.Time, contentType, body string) error {
	http := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s", contentType, len(body), body)
	sum := sha1.Sum([]byte(body))
	id := sha1.Sum([]byte(url + date.String()))
	zw := gzip.NewWriter(w)
	fmt.Fprintf(zw, "WARC/1.1\r\nWARC-Type: response\r\nWARC-Record-ID: <urn:uuid:%x-%x-%x-%x-%x>\r\nWARC-Date: %s\r\nWARC-Target-URI: %s\r\n"+
		"Content-Type: application/http; msgtype=response\r\nWARC-Payload-Digest: sha1:%s\r\nContent-Length: %d\r\n\r\n%s\r\n\r\n",
		id[0:4], id[4:6], id[6:8], id[8:10], id[10:16], date.UTC().Format(time.RFC3339), url, base32.StdEncoding.EncodeToString(sum[:]), len(http), http)
	return zw.Close()
}
