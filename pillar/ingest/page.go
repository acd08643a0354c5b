package ingest

import (
	"fmt"
	"net/url"
	"path"
	"path/filepath"
	"strings"

	"github.com/pillarkit/pillar/pillar"
)

// Canonical link policies (Options.Canonical).
const (
	// CanonicalPrefer takes a page's <link rel=canonical> when it is an
	// http(s) URL (relative links resolve against BaseURL + the file's
	// path); a canonical link of another scheme (file://, about:, …) is
	// ignored in favour of BaseURL + the path, and counted.
	CanonicalPrefer = "prefer"
	// CanonicalIgnore always uses BaseURL + the file's path.
	CanonicalIgnore = "ignore"
	// CanonicalRequire skips pages without an http(s) canonical link.
	CanonicalRequire = "require"
)

// Outcomes of a file, as named in Stats.Outcomes. The first three are the
// pages that went in; the notes (transcoded, canonical_ignored, empty) are
// pages that went in with something worth knowing; the rest are skipped.
const (
	OutcomeNew              = "new"
	OutcomeChanged          = "changed"
	OutcomeUnchanged        = "unchanged"
	OutcomeTranscoded       = "transcoded"
	OutcomeCanonicalIgnored = "canonical_ignored"
	OutcomeEmpty            = "empty"
	OutcomeExcluded         = "excluded"
	OutcomeDuplicate        = "duplicate"
	OutcomeRedirect         = "redirect"
	OutcomeNoCanonical      = "no_canonical"
	OutcomeTooLarge         = "too_large"
	OutcomeBinary           = "binary"
	OutcomeUnreadable       = "unreadable"
	OutcomeNotRegular       = "not_regular"
	OutcomeBadURL           = "bad_url"
)

// outcomeInfo is the fixed order and wording of the summary.
var outcomeInfo = []struct {
	name   string
	kept   bool
	reason string
}{
	{OutcomeNew, true, "not in the store before"},
	{OutcomeChanged, true, "content hash changed: a new version"},
	{OutcomeUnchanged, true, "same content hash: no new version"},
	{OutcomeTranscoded, true, "not UTF-8 (byte-order mark, <meta charset> or neither): decoded to UTF-8"},
	{OutcomeCanonicalIgnored, true, "<link rel=canonical> is not an http(s) URL (e.g. file://): used --base-url + the file's path instead (--canonical ignore|require to change)"},
	{OutcomeEmpty, true, "no text after cleaning: gets no chunks downstream"},
	{OutcomeExcluded, false, "left out by --include/--exclude"},
	{OutcomeDuplicate, false, "same URL as another page of the run: in a folder the first file in walk order wins, in a crawl the newest fetch"},
	{OutcomeRedirect, false, "<meta http-equiv=refresh> redirect: the target is a page of its own"},
	{OutcomeNoCanonical, false, "no http(s) <link rel=canonical> (--canonical require)"},
	{OutcomeTooLarge, false, "over the size limit (--max-page-bytes)"},
	{OutcomeBinary, false, "not text (NUL bytes) or not decodable"},
	{OutcomeUnreadable, false, "could not be read"},
	{OutcomeNotRegular, false, "not a regular file (named pipe, socket, device)"},
	{OutcomeBadURL, false, "no valid URL could be derived"},
	{OutcomeStatus4xx, false, "HTTP status 4xx"},
	{OutcomeStatus5xx, false, "HTTP status 5xx"},
	{OutcomeHTTPStatus, false, "HTTP status neither 2xx, 3xx, 4xx nor 5xx"},
	{OutcomeNonHTML, false, "payload neither HTML nor plain text (PDF, images, …), by Content-Type"},
	{OutcomeRevisit, false, "WARC revisit record (payload unchanged since an earlier fetch): refreshes the page's fetch time, no new version"},
	{OutcomeNotAPage, false, "WARC request, metadata, warcinfo or other record that is no page"},
	{OutcomeBadDigest, false, "WARC-Payload-Digest does not match the payload"},
	{OutcomeTruncated, false, "the input ends inside a record (the crawler was stopped): the tail is not read"},
	{OutcomeMalformed, false, "a record that does not parse (reading resumed at the next record)"},
}

// MaxExamples is how many example paths the summary keeps per outcome.
const MaxExamples = 3

// Outcome is one line of the end-of-run summary: how many files had this
// outcome, whether they are in the store, why, and a few example paths
// (relative to From, some with a detail after ": ").
type Outcome struct {
	Outcome  string   `json:"outcome"`
	Files    int      `json:"files"`
	Kept     bool     `json:"kept"`
	Reason   string   `json:"reason"`
	Examples []string `json:"examples,omitempty"`
}

// count records one file under outcome in the summary and in its counter.
// The caller serializes calls.
func (s *Stats) count(outcome, rel, detail string) {
	switch outcome {
	case OutcomeNew, OutcomeChanged, OutcomeUnchanged:
		// New, Changed and Unchanged are counted where the merge decides.
	case OutcomeTranscoded:
		s.Transcoded++
	case OutcomeCanonicalIgnored:
		s.CanonicalIgnored++
	case OutcomeEmpty:
		s.Empty++
	case OutcomeExcluded:
		s.Excluded++
	case OutcomeDuplicate:
		s.Duplicates++
	case OutcomeRedirect:
		s.Redirects++
	case OutcomeNoCanonical:
		s.NoCanonical++
	case OutcomeTooLarge:
		s.TooLarge++
		s.Rejected = append(s.Rejected, rel)
	case OutcomeBinary:
		s.Binary++
	case OutcomeUnreadable:
		s.Unreadable++
	case OutcomeNotRegular:
		s.NotRegular++
	case OutcomeBadURL:
		s.BadURL++
	case OutcomeStatus4xx:
		s.Status4xx++
	case OutcomeStatus5xx:
		s.Status5xx++
	case OutcomeHTTPStatus:
		s.OtherStatus++
	case OutcomeNonHTML:
		s.NonHTML++
	case OutcomeRevisit:
		s.Revisits++
	case OutcomeNotAPage:
		s.NotAPage++
	case OutcomeBadDigest:
		s.BadDigest++
	case OutcomeTruncated:
		s.Truncated++
	case OutcomeMalformed:
		s.Malformed++
	}
	i := 0
	for ; i < len(s.Outcomes) && s.Outcomes[i].Outcome != outcome; i++ {
	}
	if i == len(s.Outcomes) {
		o := Outcome{Outcome: outcome}
		for _, in := range outcomeInfo {
			if in.name == outcome {
				o.Kept, o.Reason = in.kept, in.reason
			}
		}
		s.Outcomes = append(s.Outcomes, o)
		// Keep the summary in outcomeInfo's order.
		rank := func(n string) int {
			for j, in := range outcomeInfo {
				if in.name == n {
					return j
				}
			}
			return len(outcomeInfo)
		}
		for ; i > 0 && rank(s.Outcomes[i-1].Outcome) > rank(outcome); i-- {
			s.Outcomes[i], s.Outcomes[i-1] = s.Outcomes[i-1], s.Outcomes[i]
		}
	}
	o := &s.Outcomes[i]
	o.Files++
	if len(o.Examples) < MaxExamples && rel != "" {
		ex := rel
		if detail != "" {
			ex += ": " + detail
		}
		o.Examples = append(o.Examples, ex)
	}
}

// Skipped is the number of candidate files that are not in the store.
func (s Stats) Skipped() int {
	return s.Binary + s.Unreadable + s.TooLarge + s.Duplicates + s.BadURL + s.NotRegular + s.Excluded + s.Redirects + s.NoCanonical +
		s.Status4xx + s.Status5xx + s.OtherStatus + s.NonHTML + s.Revisits + s.NotAPage + s.BadDigest + s.Truncated + s.Malformed
}

// Summary is the end-of-run summary as text: one line per outcome with a
// few example paths.
func (s Stats) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d files: %d pages in the store (%d new, %d changed, %d unchanged), %d skipped\n",
		s.Files, s.Pages, s.New, s.Changed, s.Unchanged, s.Skipped())
	for _, o := range s.Outcomes {
		what := "skipped"
		if o.Kept {
			what = "kept"
		}
		fmt.Fprintf(&b, "  %-17s %6d  %s: %s\n", o.Outcome, o.Files, what, o.Reason)
		for _, e := range o.Examples {
			fmt.Fprintf(&b, "  %-17s         e.g. %s\n", "", e)
		}
	}
	return b.String()
}

// accept counts a read page's outcome and notes; it reports whether the page
// goes on to the merge (duplicates are found later, after sorting by key).
// The caller serializes calls.
func (s *Stats) accept(p *page) bool {
	for _, n := range p.notes {
		s.count(n.outcome, p.rel, n.detail)
	}
	if p.kind == "" {
		return true
	}
	detail := ""
	if p.err != nil {
		detail = p.err.Error()
	}
	s.count(p.kind, p.rel, detail)
	return false
}

// kept counts a page that goes into the merge (after the duplicate check).
func (s *Stats) kept(rel string, d *pillar.Doc) {
	s.Pages++
	s.HTMLBytes += d.HTMLBytes
	s.TextBytes += int64(len(d.Text))
	if d.Text == "" {
		s.count(OutcomeEmpty, rel, "")
	}
}

type note struct{ outcome, detail string }

// relPath is path relative to From, with forward slashes.
func relPath(o *Options, p string) string {
	base := o.relBase
	if base == "" {
		if strings.Contains(o.From, "://") {
			return filepath.ToSlash(filepath.Base(p)) // a downloaded object: its name
		}
		base = o.From
	}
	rel, err := filepath.Rel(base, p)
	if err != nil {
		return filepath.ToSlash(p)
	}
	return filepath.ToSlash(rel)
}

// File is what ingest makes of one file, without a store: the page it
// would write, or the outcome that skips it.
type File struct {
	// Rel is the path relative to Options.From, with forward slashes.
	Rel string
	// Outcome is "" for a page, else why the file is skipped (OutcomeBinary,
	// …); Detail says more.
	Outcome, Detail string
	// Notes are the outcomes noted on a page (OutcomeTranscoded,
	// OutcomeCanonicalIgnored).
	Notes []string
	// Doc is the page (when Outcome is ""), without Version and UpdatedAt.
	Doc pillar.Doc
}

// ReadFile cleans one file as Run would (opts.From is the folder its URL is
// relative to) and says what Run would make of it. Duplicates are not known
// here: they need the whole run.
func ReadFile(path string, opts Options) File {
	opts.ensureDefaults()
	p := readPage(path, &opts)
	f := File{Rel: p.rel, Outcome: p.kind, Doc: p.doc}
	if p.err != nil {
		f.Detail = p.err.Error()
	}
	for _, n := range p.notes {
		f.Notes = append(f.Notes, n.outcome)
	}
	return f
}

// validate checks the options ingest adds for real corpora.
func (o *Options) validate() error {
	switch o.Canonical {
	case CanonicalPrefer, CanonicalIgnore, CanonicalRequire:
	default:
		return fmt.Errorf("ingest: --canonical %q: want prefer, ignore or require", o.Canonical)
	}
	for _, g := range append(append([]string(nil), o.Include...), o.Exclude...) {
		if _, err := path.Match(strings.ReplaceAll(g, "**", "*"), ""); err != nil {
			return fmt.Errorf("ingest: glob %q: %w", g, err)
		}
	}
	return nil
}

// selected reports whether rel passes --include/--exclude, and if not why.
func (o *Options) selected(rel string) (bool, string) {
	for _, g := range o.Exclude {
		if matchGlob(g, rel) {
			return false, "matches --exclude " + g
		}
	}
	if len(o.Include) == 0 {
		return true, ""
	}
	for _, g := range o.Include {
		if matchGlob(g, rel) {
			return true, ""
		}
	}
	return false, "matches no --include"
}

// matchGlob matches a slash-separated relative path against a glob. A
// pattern without "/" matches the file's name or any folder on its path
// ("*.txt", "drafts"); a pattern with "/" matches the whole path, where "**"
// stands for any number of folders ("api/**/*.html", "old/**").
func matchGlob(pattern, rel string) bool {
	pattern = strings.TrimPrefix(pattern, "./")
	segs := strings.Split(rel, "/")
	if !strings.Contains(pattern, "/") {
		for _, s := range segs {
			if ok, _ := path.Match(pattern, s); ok {
				return true
			}
		}
		return false
	}
	return matchSegs(strings.Split(pattern, "/"), segs)
}

func matchSegs(pat, segs []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(segs); i++ {
				if matchSegs(pat[1:], segs[i:]) {
					return true
				}
			}
			return false
		}
		if len(segs) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], segs[0]); !ok {
			return false
		}
		pat, segs = pat[1:], segs[1:]
	}
	return len(segs) == 0
}

// pageURL derives a page's URL from its own URL (BaseURL + its path, or
// the URL it was crawled from) and its canonical link under the canonical
// policy: the URL, a note (OutcomeCanonicalIgnored) or a skip outcome
// (OutcomeNoCanonical) with its detail.
func pageURL(o *Options, own, canonical string) (raw, outcome, detail string) {
	if o.Canonical == CanonicalIgnore {
		return own, "", ""
	}
	if canonical == "" {
		if o.Canonical == CanonicalRequire {
			return "", OutcomeNoCanonical, "no canonical link"
		}
		return own, "", ""
	}
	u, err := url.Parse(canonical)
	if err == nil {
		r, _ := url.Parse(own)
		u = r.ResolveReference(u)
		if (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
			return u.String(), "", ""
		}
	}
	if o.Canonical == CanonicalRequire {
		return "", OutcomeNoCanonical, canonical
	}
	return own, OutcomeCanonicalIgnored, canonical
}

type page struct {
	path  string
	rel   string
	doc   pillar.Doc
	err   error
	kind  string // "" (a page) or the Outcome that skips it
	notes []note
}

// Candidate reports whether ingest reads the file at path (by its name:
// .html, .htm, .xhtml, .txt, .md, .text).
func Candidate(path string) bool { return isCandidate(path) }
