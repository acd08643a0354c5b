package ingest

import (
	"bytes"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// Cleaned is the result of cleaning one HTML page.
type Cleaned struct {
	Title     string
	Text      string // paragraphs separated by "\n\n", headings on their own paragraph
	Canonical string // href of <link rel="canonical">, if any
	Lang      string // <html lang> if present
	OutLinks  int    // <a href> that leave the page (not "#…")
}

// dropped elements: their whole subtree is boilerplate.
var dropped = map[atom.Atom]bool{
	atom.Script: true, atom.Style: true, atom.Noscript: true, atom.Nav: true, atom.Template: true,
	atom.Svg: true, atom.Iframe: true, atom.Object: true, atom.Canvas: true, atom.Header: true,
	atom.Footer: true, atom.Aside: true, atom.Form: true, atom.Button: true, atom.Select: true,
	atom.Head: true,
}

// boilerplate classes/ids (navigation bars of generated docs, cookie banners).
var boilerplateMarks = []string{"navheader", "navfooter", "breadcrumb", "cookie", "sidebar", "skip-link", "menu"}

// block elements end a paragraph.
var block = map[atom.Atom]bool{
	atom.P: true, atom.Div: true, atom.Section: true, atom.Article: true, atom.Main: true,
	atom.H1: true, atom.H2: true, atom.H3: true, atom.H4: true, atom.H5: true, atom.H6: true,
	atom.Ul: true, atom.Ol: true, atom.Li: true, atom.Dl: true, atom.Dt: true, atom.Dd: true,
	atom.Table: true, atom.Tr: true, atom.Blockquote: true, atom.Pre: true, atom.Hr: true,
	atom.Figure: true, atom.Figcaption: true, atom.Caption: true, atom.Details: true, atom.Summary: true,
	atom.Address: true, atom.Body: true,
}

func isBoilerplate(attrs []html.Attribute) bool {
	for _, a := range attrs {
		if a.Key != "class" && a.Key != "id" && a.Key != "role" {
			continue
		}
		v := strings.ToLower(a.Val)
		if a.Key == "role" && (v == "navigation" || v == "banner" || v == "contentinfo") {
			return true
		}
		for _, m := range boilerplateMarks {
			for _, f := range strings.Fields(v) {
				if f == m {
					return true
				}
			}
		}
	}
	return false
}

// CleanHTML strips markup to clean text: scripts, styles, navigation and
// other boilerplate are dropped; headings and paragraph breaks are kept
// (blank line between blocks); whitespace inside a paragraph is collapsed
// except inside <pre>. Invalid UTF-8 sequences are replaced with U+FFFD.
func CleanHTML(src []byte) Cleaned {
	var c Cleaned
	z := html.NewTokenizer(bytes.NewReader(src))
	var (
		out       strings.Builder
		para      strings.Builder
		title     strings.Builder
		skipDepth int // >0 while inside a dropped subtree
		skipTag   []atom.Atom
		inTitle   bool
		preDepth  int
		tdCount   int
	)
	flush := func() {
		p := strings.TrimSpace(para.String())
		para.Reset()
		if p == "" {
			return
		}
		if out.Len() > 0 {
			out.WriteString("\n\n")
		}
		out.WriteString(p)
	}
	appendText := func(s string) {
		if preDepth > 0 {
			para.WriteString(s)
			return
		}
		// Collapse runs of whitespace to one space.
		lastSpace := para.Len() == 0 || strings.HasSuffix(para.String(), " ")
		for _, r := range s {
			if unicode.IsSpace(r) {
				if !lastSpace {
					para.WriteByte(' ')
					lastSpace = true
				}
				continue
			}
			para.WriteRune(r)
			lastSpace = false
		}
	}
	for {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			flush()
			c.Text = strings.ToValidUTF8(out.String(), "\uFFFD")
			c.Title = strings.ToValidUTF8(strings.Join(strings.Fields(title.String()), " "), "\uFFFD")
			return c
		case html.StartTagToken, html.SelfClosingTagToken:
			tn, hasAttr := z.TagName()
			a := atom.Lookup(tn)
			var attrs []html.Attribute
			for hasAttr {
				var k, v []byte
				k, v, hasAttr = z.TagAttr()
				attrs = append(attrs, html.Attribute{Key: string(k), Val: string(v)})
			}
			switch a {
			case atom.Html:
				for _, at := range attrs {
					if at.Key == "lang" || at.Key == "xml:lang" {
						c.Lang = strings.ToLower(at.Val)
					}
				}
			case atom.Link:
				rel, href := "", ""
				for _, at := range attrs {
					switch at.Key {
					case "rel":
						rel = strings.ToLower(at.Val)
					case "href":
						href = at.Val
					}
				}
				if rel == "canonical" && href != "" && c.Canonical == "" {
					c.Canonical = strings.TrimSpace(href)
				}
			case atom.Title:
				if tt == html.StartTagToken {
					inTitle = true
				}
				continue
			case atom.A:
				for _, at := range attrs {
					if at.Key == "href" && at.Val != "" && !strings.HasPrefix(at.Val, "#") {
						c.OutLinks++
					}
				}
			}
			if skipDepth > 0 {
				if tt == html.StartTagToken && a == skipTag[len(skipTag)-1] {
					skipDepth++
				}
				continue
			}
			if tt == html.StartTagToken && (dropped[a] || isBoilerplate(attrs)) && !voidElement(a) {
				skipDepth = 1
				skipTag = append(skipTag, a)
				continue
			}
			switch {
			case a == atom.Br:
				if preDepth > 0 {
					para.WriteByte('\n')
				} else {
					appendText(" ")
				}
			case a == atom.Td || a == atom.Th:
				if tdCount > 0 {
					appendText(" ")
				}
				tdCount++
			case block[a]:
				flush()
				if a == atom.Tr {
					tdCount = 0
				}
				if a == atom.Pre && tt == html.StartTagToken {
					preDepth++
				}
			}
		case html.EndTagToken:
			tn, _ := z.TagName()
			a := atom.Lookup(tn)
			if a == atom.Title {
				inTitle = false
				continue
			}
			if skipDepth > 0 {
				if a == skipTag[len(skipTag)-1] {
					skipDepth--
					if skipDepth == 0 {
						skipTag = skipTag[:len(skipTag)-1]
					}
				}
				continue
			}
			if a == atom.Pre && preDepth > 0 {
				preDepth--
			}
			if block[a] {
				flush()
			}
		case html.TextToken:
			if inTitle {
				title.Write(z.Text())
				continue
			}
			if skipDepth > 0 {
				continue
			}
			appendText(string(z.Text()))
		}
	}
}

func voidElement(a atom.Atom) bool {
	switch a {
	case atom.Br, atom.Hr, atom.Img, atom.Input, atom.Link, atom.Meta, atom.Area, atom.Base, atom.Col, atom.Embed, atom.Source, atom.Track, atom.Wbr:
		return true
	}
	return false
}

// looksBinary reports whether b is not text: it has NUL bytes or is not
// valid UTF-8 (checked on the first 64 KiB).
func looksBinary(b []byte) (bool, string) {
	head := b
	if len(head) > 64<<10 {
		head = head[:64<<10]
		// Don't cut a rune in half at the boundary.
		for i := 0; i < utf8.UTFMax && !utf8.Valid(head); i++ {
			head = head[:len(head)-1]
		}
	}
	if bytes.IndexByte(head, 0) >= 0 {
		return true, "contains NUL bytes"
	}
	if !utf8.Valid(head) {
		return true, "not valid UTF-8"
	}
	return false, ""
}

var englishStop = map[string]bool{"the": true, "and": true, "of": true, "to": true, "is": true, "in": true, "a": true, "that": true, "for": true, "it": true, "with": true, "as": true, "be": true, "this": true, "are": true, "on": true}

// guessLang returns "en" when English stop words make up a clear share of
// the first words of text, "" when it can't tell. It is deliberately crude:
// the lang attribute wins when present.
func guessLang(text string) string {
	words, stops := 0, 0
	for _, w := range strings.FieldsFunc(text, func(r rune) bool { return !unicode.IsLetter(r) }) {
		words++
		if englishStop[strings.ToLower(w)] {
			stops++
		}
		if words == 400 {
			break
		}
	}
	if words >= 20 && stops*100/words >= 8 {
		return "en"
	}
	return ""
}
