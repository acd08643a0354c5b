package ingest

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha1"
	"encoding/base32"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go"

	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/local"
)

func newStore(t *testing.T) pillar.Store {
	t.Helper()
	st, err := local.Create(filepath.Join(t.TempDir(), "store"), &local.Options{Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func ingestInto(t *testing.T, st pillar.Store, o Options) Stats {
	t.Helper()
	s, err := Run(context.Background(), st, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// outcome is the count and examples of one outcome in s.
func outcome(s Stats, name string) (int, []string) {
	for _, o := range s.Outcomes {
		if o.Outcome == name {
			return o.Files, o.Examples
		}
	}
	return 0, nil
}

// TestWARCFromARealCrawler ingests the crawl wget wrote of
// testdata/crawl/site (make-warc.sh): its four HTML responses become
// pages; the two 404s, the PDF and the PNG, and the warcinfo, request,
// metadata and resource records are counted, with offsets.
func TestWARCFromARealCrawler(t *testing.T) {
	st := newStore(t)
	s := ingestInto(t, st, Options{From: "testdata/crawl/site.warc.gz"})
	for _, c := range []struct {
		outcome string
		n       int
	}{{OutcomeNew, 4}, {OutcomeStatus4xx, 2}, {OutcomeNonHTML, 2}, {OutcomeNotAPage, 11}} {
		if n, ex := outcome(s, c.outcome); n != c.n {
			t.Errorf("%s: %d, want %d (e.g. %v)\n%s", c.outcome, n, c.n, ex, s.Summary())
		}
	}
	if s.Skipped() != 15 || s.Files != 19 {
		t.Errorf("%d records, %d skipped; want 19 and 15", s.Files, s.Skipped())
	}
	if n, ex := outcome(s, OutcomeStatus4xx); n > 0 && !strings.HasPrefix(ex[0], "site.warc.gz@") {
		t.Errorf("a 404's example %q does not name the file and offset", ex[0])
	}
	for _, d := range storeDocs(t, st) {
		if d.FetchedAt < time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli() || !strings.HasPrefix(d.URL, "http://127.0.0.1:8765/") {
			t.Errorf("page %s fetched at %d: want the crawl's URL and WARC-Date", d.URL, d.FetchedAt)
		}
	}
}

// TestWARCMatchesTheFolder: the crawl of site/ and site/ itself (with the
// crawl's base URL) give the same pages: same URLs, titles and clean text.
func TestWARCMatchesTheFolder(t *testing.T) {
	a, b := newStore(t), newStore(t)
	ingestInto(t, a, Options{From: "testdata/crawl/site", BaseURL: "http://127.0.0.1:8765/"})
	ingestInto(t, b, Options{From: "testdata/crawl/site.warc.gz"})
	page := func(d pillar.Doc) string { return d.URL + "\n" + d.Title + "\n" + d.Text }
	var fromFolder, fromWARC []string
	for _, d := range storeDocs(t, a) {
		fromFolder = append(fromFolder, page(d))
	}
	for _, d := range storeDocs(t, b) {
		fromWARC = append(fromWARC, page(d))
	}
	sort.Strings(fromFolder)
	sort.Strings(fromWARC)
	if len(fromFolder) != 4 || strings.Join(fromFolder, "\n--\n") != strings.Join(fromWARC, "\n--\n") {
		t.Fatalf("folder:\n%s\n\nWARC:\n%s", strings.Join(fromFolder, "\n--\n"), strings.Join(fromWARC, "\n--\n"))
	}
}

// warcRec is a WARC record to write in a test.
type warcRec struct {
	typ, uri, date string
	http           string // the HTTP response (status line, headers, body), for response records
	headers        []string
	badDigest      bool
	contentLength  int // a lying Content-Length when not 0
}

func (r warcRec) bytes() []byte {
	block := r.http
	var h strings.Builder
	fmt.Fprintf(&h, "WARC/1.1\r\nWARC-Type: %s\r\nWARC-Record-ID: <urn:uuid:%x>\r\nWARC-Date: %s\r\n", r.typ, sha1.Sum([]byte(r.uri+r.date+r.typ)), r.date)
	if r.uri != "" {
		fmt.Fprintf(&h, "WARC-Target-URI: %s\r\n", r.uri)
	}
	if r.typ == "response" {
		h.WriteString("Content-Type: application/http; msgtype=response\r\n")
		if _, body, ok := strings.Cut(block, "\r\n\r\n"); ok {
			sum := sha1.Sum([]byte(body))
			if r.badDigest {
				sum[0] ^= 0xff
			}
			fmt.Fprintf(&h, "WARC-Payload-Digest: sha1:%s\r\n", base32.StdEncoding.EncodeToString(sum[:]))
		}
	}
	for _, x := range r.headers {
		h.WriteString(x + "\r\n")
	}
	n := len(block)
	if r.contentLength != 0 {
		n = r.contentLength
	}
	fmt.Fprintf(&h, "Content-Length: %d\r\n\r\n%s\r\n\r\n", n, block)
	return []byte(h.String())
}

func httpOK(body string) string {
	return "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\n\r\n" + body
}

func htmlPage(title, text string) string {
	return "<html><head><title>" + title + "</title></head><body><p>" + text + "</p></body></html>"
}

// writeWARC writes recs as one file, each record its own gzip member when
// gz; it returns the path and each record's offset.
func writeWARC(t *testing.T, name string, gz bool, recs ...warcRec) (string, []int64) {
	t.Helper()
	var out bytes.Buffer
	var offs []int64
	for _, r := range recs {
		offs = append(offs, int64(out.Len()))
		if gz {
			zw := gzip.NewWriter(&out)
			zw.Write(r.bytes())
			zw.Close()
		} else {
			out.Write(r.bytes())
		}
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p, offs
}

const day1, day2 = "2026-03-01T10:00:00Z", "2026-03-02T10:00:00Z"

// TestWARCRecordKinds: each kind of record has its outcome; the same URL
// fetched twice keeps the newest fetch whatever the order.
func TestWARCRecordKinds(t *testing.T) {
	p, _ := writeWARC(t, "kinds.warc.gz", true,
		warcRec{typ: "warcinfo", date: day1, http: "software: test\r\n"},
		warcRec{typ: "request", uri: "https://ex.test/a", date: day1, http: "GET /a HTTP/1.1\r\nHost: ex.test\r\n\r\n"},
		warcRec{typ: "response", uri: "https://ex.test/a", date: day2, http: httpOK(htmlPage("A", "The newer fetch of page a."))},
		warcRec{typ: "response", uri: "https://ex.test/a", date: day1, http: httpOK(htmlPage("A", "The older fetch of page a."))},
		warcRec{typ: "response", uri: "https://ex.test/moved", date: day1, http: "HTTP/1.1 301 Moved Permanently\r\nLocation: https://ex.test/a\r\nContent-Length: 0\r\n\r\n"},
		warcRec{typ: "response", uri: "https://ex.test/gone", date: day1, http: "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"},
		warcRec{typ: "response", uri: "https://ex.test/err", date: day1, http: "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"},
		warcRec{typ: "response", uri: "https://ex.test/doc.pdf", date: day1, http: "HTTP/1.1 200 OK\r\nContent-Type: application/pdf\r\nContent-Length: 8\r\n\r\n%PDF-1.4"},
		warcRec{typ: "revisit", uri: "https://ex.test/a", date: day2, headers: []string{"WARC-Refers-To-Date: " + day1, "WARC-Profile: http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"}, http: "HTTP/1.1 200 OK\r\n\r\n"},
		warcRec{typ: "response", uri: "https://ex.test/forged", date: day1, http: httpOK(htmlPage("F", "Payload that does not match its digest.")), badDigest: true},
		warcRec{typ: "response", uri: "https://ex.test/big", date: day1, http: httpOK(htmlPage("Big", strings.Repeat("big page ", 400)))},
		warcRec{typ: "response", uri: "https://ex.test/latin", date: day1, http: "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=iso-8859-1\r\n\r\n<html><title>L</title><p>caf\xe9 cr\xe8me</p></html>"},
		warcRec{typ: "metadata", uri: "https://ex.test/a", date: day1, http: "outlinks: none\r\n"},
	)
	st := newStore(t)
	s := ingestInto(t, st, Options{From: p, MaxPageBytes: 2000})
	for _, c := range []struct {
		outcome, detail string
		n               int
	}{
		{OutcomeNew, "", 2}, {OutcomeDuplicate, "", 1}, {OutcomeRedirect, "HTTP 301 to https://ex.test/a", 1},
		{OutcomeStatus4xx, "HTTP 404", 1}, {OutcomeStatus5xx, "HTTP 503", 1}, {OutcomeNonHTML, "application/pdf", 1},
		{OutcomeRevisit, "", 1}, {OutcomeBadDigest, "WARC-Payload-Digest", 1}, {OutcomeTooLarge, "", 1},
		{OutcomeNotAPage, "", 3}, {OutcomeTranscoded, "Content-Type text/html; charset=iso-8859-1", 1},
	} {
		n, ex := outcome(s, c.outcome)
		if n != c.n || c.detail != "" && !strings.Contains(strings.Join(ex, " "), c.detail) {
			t.Errorf("%s: %d %v, want %d mentioning %q\n%s", c.outcome, n, ex, c.n, c.detail, s.Summary())
		}
	}
	docs := storeDocs(t, st)
	texts := map[string]string{}
	for _, d := range docs {
		texts[d.URL] = d.Text
	}
	if !strings.Contains(texts["https://ex.test/a"], "newer fetch") {
		t.Errorf("page a: %q, want the newer fetch", texts["https://ex.test/a"])
	}
	if texts["https://ex.test/latin"] != "café crème" {
		t.Errorf("latin page: %q, want the header's charset decoded", texts["https://ex.test/latin"])
	}
}

// TestWARCRevisits: a revisit refreshes the stored page's fetch time
// without a new version; one newer than a response of the same run lends
// that page its fetch time; one of a URL never stored is counted.
func TestWARCRevisits(t *testing.T) {
	revisit := func(uri, date string) warcRec {
		return warcRec{typ: "revisit", uri: uri, date: date, headers: []string{"WARC-Refers-To-Date: " + day1,
			"WARC-Profile: http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"}, http: "HTTP/1.1 200 OK\r\n\r\n"}
	}
	first, _ := writeWARC(t, "day1.warc.gz", true,
		warcRec{typ: "response", uri: "https://rv.test/a", date: day1, http: httpOK(htmlPage("A", "Page a, unchanged between crawls."))})
	st := newStore(t)
	ingestInto(t, st, Options{From: first})
	before := storeDocs(t, st)[0]
	const day3 = "2026-03-03T10:00:00Z"
	second, _ := writeWARC(t, "day3.warc.gz", true,
		revisit("https://rv.test/a", day3),
		revisit("https://rv.test/never-stored", day3),
		revisit("https://rv.test/b", day3),
		warcRec{typ: "response", uri: "https://rv.test/b", date: day1, http: httpOK(htmlPage("B", "Page b, first seen with its revisit."))})
	s := ingestInto(t, st, Options{From: second})
	if s.Refreshed != 1 || s.New != 1 || s.Changed != 0 {
		t.Errorf("refreshed %d, new %d, changed %d; want 1, 1, 0\n%s", s.Refreshed, s.New, s.Changed, s.Summary())
	}
	n, ex := outcome(s, OutcomeRevisit)
	joined := strings.Join(ex, " ")
	if n != 3 || !strings.Contains(joined, "no stored page of https://rv.test/never-stored") || !strings.Contains(joined, "refreshed") || !strings.Contains(joined, "applied") {
		t.Errorf("revisits %d %v", n, ex)
	}
	want3, _ := time.Parse(time.RFC3339, day3)
	for _, d := range storeDocs(t, st) {
		switch d.URL {
		case "https://rv.test/a":
			if d.FetchedAt != want3.UnixMilli() || d.Version != before.Version || d.ContentHash != before.ContentHash || d.Text != before.Text {
				t.Errorf("page a after its revisit: fetched %d version %d; want the revisit's time and version %d, content kept", d.FetchedAt, d.Version, before.Version)
			}
		case "https://rv.test/b":
			if d.FetchedAt != want3.UnixMilli() {
				t.Errorf("page b fetched at %d, want its revisit's time", d.FetchedAt)
			}
		}
	}
	// The same revisit again changes nothing: no commit.
	if s := ingestInto(t, st, Options{From: second}); s.Refreshed != 0 || s.Generation != 0 {
		t.Errorf("re-run: refreshed %d, generation %d; want nothing committed", s.Refreshed, s.Generation)
	}
}

// TestWARCOddHeaders: a huge HTTP header block, an unknown charset label
// and header bytes that are not UTF-8: each record is read or counted,
// never the run's end, and the records after it are read.
func TestWARCOddHeaders(t *testing.T) {
	huge := "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n" + strings.Repeat("X-Padding: "+strings.Repeat("p", 1000)+"\r\n", 300) + "\r\n" + htmlPage("H", "Huge headers.")
	p, _ := writeWARC(t, "odd.warc.gz", true,
		warcRec{typ: "response", uri: "https://odd.test/huge", date: day1, http: huge},
		warcRec{typ: "response", uri: "https://odd.test/bogus", date: day1, http: "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=no-such-charset\r\n\r\n" + htmlPage("B", "Unknown charset label.")},
		warcRec{typ: "response", uri: "https://odd.test/latin-header", date: day1, http: "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nX-Caf\xe9: cr\xe8me\r\n\r\n" + htmlPage("L", "Header bytes in Latin-1.")},
		warcRec{typ: "response", uri: "https://odd.test/after", date: day1, http: httpOK(htmlPage("A", "The record after the odd ones."))},
	)
	st := newStore(t)
	s := ingestInto(t, st, Options{From: p})
	if s.Files != 4 || s.New+s.Skipped() != 4 {
		t.Fatalf("%d records, %d new, %d skipped; want all 4 accounted for\n%s", s.Files, s.New, s.Skipped(), s.Summary())
	}
	found := false
	for _, d := range storeDocs(t, st) {
		found = found || d.URL == "https://odd.test/after"
	}
	if !found {
		t.Errorf("the record after the odd ones is missing\n%s", s.Summary())
	}
	if n, ex := outcome(s, OutcomeMalformed); n != 1 || !strings.Contains(ex[0], "do not parse") {
		t.Errorf("the Latin-1 header: malformed %d %v, want it counted as not parsing", n, ex)
	}
}

// TestWARCLargePayload: payloads of every size up to the limit come back
// whole (their digests match and the text is complete).
func TestWARCLargePayload(t *testing.T) {
	var recs []warcRec
	for i, n := range []int{100, 3000, 3800, 4096, 5000, 70000, 1 << 20} {
		text := strings.Repeat("x", n-1) + "!"
		recs = append(recs, warcRec{typ: "response", uri: fmt.Sprintf("https://big.test/%d", i), date: day1, http: httpOK("<html><title>T</title><p>" + text + "</p></html>")})
	}
	p, _ := writeWARC(t, "big.warc.gz", true, recs...)
	st := newStore(t)
	s := ingestInto(t, st, Options{From: p})
	if s.New != len(recs) {
		t.Fatalf("%d of %d pages\n%s", s.New, len(recs), s.Summary())
	}
	for _, d := range storeDocs(t, st) {
		if !strings.HasSuffix(d.Text, "!") {
			t.Errorf("%s: text of %d bytes cut short", d.URL, len(d.Text))
		}
	}
}

// TestWARCDamage: a truncated file, a corrupt gzip member and lying
// Content-Lengths: the good records are ingested, each bad one named by
// its offset.
func TestWARCDamage(t *testing.T) {
	good := func(i int) warcRec {
		return warcRec{typ: "response", uri: fmt.Sprintf("https://ex.test/p%d", i), date: day1, http: httpOK(htmlPage(fmt.Sprint("P", i), fmt.Sprintf("Page %d of the damaged crawl.", i)))}
	}
	t.Run("truncated", func(t *testing.T) {
		p, offs := writeWARC(t, "t.warc.gz", true, good(1), good(2), good(3))
		b, _ := os.ReadFile(p)
		os.WriteFile(p, b[:offs[2]+(int64(len(b))-offs[2])/2], 0o644)
		s := ingestInto(t, newStore(t), Options{From: p})
		n, ex := outcome(s, OutcomeTruncated)
		if s.New != 2 || n != 1 || !strings.Contains(ex[0], fmt.Sprintf("t.warc.gz@%d", offs[2])) {
			t.Errorf("new %d, truncated %d %v; want 2 and one at @%d\n%s", s.New, n, ex, offs[2], s.Summary())
		}
	})
	t.Run("corrupt gzip member", func(t *testing.T) {
		p, offs := writeWARC(t, "c.warc.gz", true, good(1), good(2), good(3))
		b, _ := os.ReadFile(p)
		for i := offs[1] + 20; i < offs[1]+40; i++ {
			b[i] ^= 0x55
		}
		os.WriteFile(p, b, 0o644)
		s := ingestInto(t, newStore(t), Options{From: p})
		n, ex := outcome(s, OutcomeMalformed)
		if s.New != 2 || n != 1 || !strings.Contains(ex[0], fmt.Sprintf("c.warc.gz@%d", offs[1])) {
			t.Errorf("new %d, malformed %d %v; want pages 1 and 3 and member @%d named\n%s", s.New, n, ex, offs[1], s.Summary())
		}
	})
	// A Content-Length that lies makes the record's payload wrong (its
	// digest fails) and, too long, swallows the start of the next record.
	for _, c := range []struct {
		name    string
		n, want int
	}{{"Content-Length too short", -10, 2}, {"Content-Length too long", +25, 1}} {
		t.Run(c.name, func(t *testing.T) {
			bad := good(2)
			bad.contentLength = len(bad.http) + c.n
			p, _ := writeWARC(t, "l.warc", false, good(1), bad, good(3))
			s := ingestInto(t, newStore(t), Options{From: p})
			if s.New != c.want || s.BadDigest != 1 {
				t.Errorf("new %d, bad digest %d; want %d pages in and the lying record counted\n%s", s.New, s.BadDigest, c.want, s.Summary())
			}
		})
	}
}

// TestDatasets: JSONL (plain, gzip, zstd) and Parquet page datasets, with
// a column mapping; bad lines and a missing column are named.
func TestDatasets(t *testing.T) {
	dir := t.TempDir()
	lines := []string{
		`{"u": "https://ds.test/1", "body": "<html><title>One</title><p>First dataset page.</p></html>", "ts": "2026-01-02T03:04:05Z"}`,
		`{"u": "https://ds.test/2", "plain": "Second dataset page, plain text.", "ts": 1767000000}`,
		`not json at all`,
		`{"body": "<p>no url</p>"}`,
	}
	plain := strings.Join(lines, "\n") + "\n"
	write(t, dir, "a.jsonl", []byte(plain))
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(strings.ReplaceAll(plain, "ds.test/", "ds.test/gz")))
	zw.Close()
	write(t, dir, "b.jsonl.gz", gz.Bytes())
	enc, _ := zstd.NewWriter(nil)
	write(t, dir, "c.jsonl.zst", enc.EncodeAll([]byte(strings.ReplaceAll(plain, "ds.test/", "ds.test/zst")), nil))
	cols, err := ParseColumns("url=u,html=body,text=plain,fetched_at=ts")
	if err != nil {
		t.Fatal(err)
	}
	st := newStore(t)
	s := ingestInto(t, st, Options{From: dir, Columns: cols})
	n, ex := outcome(s, OutcomeMalformed)
	if s.New != 6 || n != 6 || !strings.Contains(strings.Join(ex, " "), "a.jsonl:3") {
		t.Errorf("new %d, malformed %d %v; want 6 pages and 6 bad lines, a.jsonl:3 named\n%s", s.New, n, ex, s.Summary())
	}
	for _, d := range storeDocs(t, st) {
		if d.URL == "https://ds.test/1" && d.FetchedAt != time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli() {
			t.Errorf("fetched_at %d, want the row's", d.FetchedAt)
		}
	}

	type row struct {
		URL       string `parquet:"url"`
		HTML      string `parquet:"html"`
		FetchedAt int64  `parquet:"fetched_at"`
	}
	pq := filepath.Join(t.TempDir(), "pages.parquet")
	if err := parquet.WriteFile(pq, []row{{"https://pq.test/1", htmlPage("P1", "Parquet page one."), 1767000000000}, {"https://pq.test/2", htmlPage("P2", "Parquet page two."), 0}}); err != nil {
		t.Fatal(err)
	}
	s = ingestInto(t, newStore(t), Options{From: pq})
	if s.New != 2 {
		t.Errorf("parquet: %d new pages, want 2\n%s", s.New, s.Summary())
	}
	type noURL struct {
		Link string `parquet:"link"`
		HTML string `parquet:"html"`
	}
	bad := filepath.Join(t.TempDir(), "bad.parquet")
	parquet.WriteFile(bad, []noURL{{"https://pq.test/x", "<p>x</p>"}})
	if _, err := Run(context.Background(), newStore(t), Options{From: bad}); err == nil || !strings.Contains(err.Error(), "bad.parquet") || !strings.Contains(err.Error(), `"url"`) {
		t.Errorf("a Parquet shard without the url column: %v, want an error naming the file and the column", err)
	}
	if _, err := ParseColumns("link=u"); err == nil || !strings.Contains(err.Error(), "link") {
		t.Errorf("--columns link=u: %v", err)
	}
	if _, err := json.Marshal(s); err != nil {
		t.Fatal(err)
	}
}
