package subsets

import (
	"fmt"
	"math"

	"github.com/pillarkit/pillar/pillar"
)

// Page is what a policy sees of one page: the basic signals ingest records on
// every docs row, and the named signals of the signals table.
type Page struct {
	Key       string // 32 lower-case hex characters; orders and identifies members
	URL       string
	Host      string
	Title     string
	Lang      string
	FetchedAt int64 // unix milliseconds; 0 means unknown
	UpdatedAt int64 // unix milliseconds; 0 means unknown
	TextLen   int64
	OutLinks  int64
	HTMLBytes int64
	// Signals holds the page's named signals by name. A policy sees a signal
	// only if the policy file declares it, and only with the declared type:
	// a value of the other type, or a NaN, reads as missing.
	Signals map[string]SignalValue
}

// SignalValue is one named signal's value: a number (IsNum) or a string.
type SignalValue struct {
	Num   float64
	Str   string
	IsNum bool
}

// NewPage builds the Page of a docs row and that page's signals rows. It
// fails if a signal belongs to another page or a signal name repeats. A row
// without a host takes the host of its URL; a row with text but no text_len
// takes the text's length in bytes.
func NewPage(d *pillar.Doc, sigs []pillar.Signal) (Page, error) {
	p := Page{
		Key: d.PageKey, URL: d.URL, Host: d.Host, Title: d.Title, Lang: d.Lang,
		FetchedAt: d.FetchedAt, UpdatedAt: d.UpdatedAt,
		TextLen: d.TextLen, OutLinks: d.OutLinks, HTMLBytes: d.HTMLBytes,
	}
	if p.Host == "" && p.URL != "" {
		p.Host = pillar.HostOf(p.URL)
	}
	if p.TextLen == 0 && d.Text != "" {
		p.TextLen = int64(len(d.Text))
	}
	if len(sigs) > 0 {
		p.Signals = make(map[string]SignalValue, len(sigs))
		for i := range sigs {
			s := &sigs[i]
			if s.PageKey != d.PageKey {
				return Page{}, fmt.Errorf("subsets: page %s: signal %q belongs to page %s", d.PageKey, s.Name, s.PageKey)
			}
			if _, dup := p.Signals[s.Name]; dup {
				return Page{}, fmt.Errorf("subsets: page %s: signal %q: %w", d.PageKey, s.Name, ErrDuplicateSignal)
			}
			p.Signals[s.Name] = SignalValue{Num: s.Num, Str: s.Str, IsNum: s.IsNum}
		}
	}
	return p, nil
}

// num returns a numeric signal, or false if absent, not a number, or NaN.
func (p *Page) num(name string) (float64, bool) {
	v, ok := p.Signals[name]
	if !ok || !v.IsNum || math.IsNaN(v.Num) {
		return 0, false
	}
	return v.Num, true
}

// str returns a string signal, or false if absent or a number.
func (p *Page) str(name string) (string, bool) {
	v, ok := p.Signals[name]
	if !ok || v.IsNum {
		return "", false
	}
	return v.Str, true
}
