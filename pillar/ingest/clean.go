package ingest

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
	"golang.org/x/net/html/charset"
	"golang.org/x/text/encoding/charmap"
	xunicode "golang.org/x/text/encoding/unicode"
)

// Cleaned is the result of cleaning one HTML page.
type Cleaned struct {
	Title     string
	Text      string // paragraphs separated by "\n\n", headings on their own paragraph
	Canonical string // href of <link rel="canonical">, if any
	Lang      string // <html lang> if present
	OutLinks  int    // <a href> that leave the page (not "#…")
	Refresh   string // target of <meta http-equiv="refresh" content="N; url=…">, if any
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
			case atom.Meta:
				equiv, content := "", ""
				for _, at := range attrs {
					switch at.Key {
					case "http-equiv":
						equiv = strings.ToLower(strings.TrimSpace(at.Val))
					case "content":
						content = at.Val
					}
				}
				if equiv == "refresh" && c.Refresh == "" {
					c.Refresh = refreshTarget(content)
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

// refreshTarget returns the URL of a meta refresh's content ("5; url=x"),
// or "" when it only reloads the page.
func refreshTarget(content string) string {
	_, rest, ok := strings.Cut(content, ";")
	if !ok {
		_, rest, ok = strings.Cut(content, ",")
	}
	if !ok {
		return ""
	}
	rest = strings.TrimSpace(rest)
	if len(rest) >= 3 && strings.EqualFold(rest[:3], "url") {
		rest = strings.TrimSpace(rest[3:])
		rest = strings.TrimSpace(strings.TrimPrefix(rest, "="))
	}
	return strings.Trim(rest, `"' `)
}

// decodeText returns b as UTF-8. A byte-order mark decides first (UTF-8,
// UTF-16LE/BE); then, for HTML, a charset declared in a <meta> in the first
// 1024 bytes (the HTML standard's prescan); bytes that are valid UTF-8 are
// taken as they are (also when a <meta> claims another charset: the file was
// converted and the declaration left behind); anything else is decoded as
// windows-1252, the HTML standard's default. how says what was done ("" when
// b was UTF-8 already). NUL bytes (outside UTF-16) mean the file is not text.
func decodeText(b []byte, isHTML bool) (out []byte, how string, err error) {
	return decodeTextAs(b, isHTML, "")
}

// decodeTextAs is decodeText for a page served with the HTTP Content-Type
// contentType ("" for a file): a charset there is declared as a <meta
// charset> is, and wins over it.
func decodeTextAs(b []byte, isHTML bool, contentType string) (out []byte, how string, err error) {
	switch {
	case bytes.HasPrefix(b, []byte{0xEF, 0xBB, 0xBF}):
		b = b[3:]
		if !utf8.Valid(b) {
			return nil, "", errors.New("UTF-8 byte-order mark, but not valid UTF-8")
		}
		return b, "", nil
	case bytes.HasPrefix(b, []byte{0xFF, 0xFE}), bytes.HasPrefix(b, []byte{0xFE, 0xFF}):
		order, name := xunicode.LittleEndian, "utf-16le"
		if b[0] == 0xFE {
			order, name = xunicode.BigEndian, "utf-16be"
		}
		out, err := xunicode.UTF16(order, xunicode.ExpectBOM).NewDecoder().Bytes(b)
		if err != nil {
			return nil, "", fmt.Errorf("%s byte-order mark: %w", name, err)
		}
		return out, name + " (byte-order mark)", nil
	}
	head := b[:min(len(b), 64<<10)]
	if bytes.IndexByte(head, 0) >= 0 {
		return nil, "", errors.New("contains NUL bytes")
	}
	high := false
	for _, c := range b {
		if c >= 0x80 {
			high = true
			break
		}
	}
	if !high {
		return b, "", nil // ASCII reads the same in every charset we decode
	}
	valid := utf8.Valid(b)
	if isHTML || contentType != "" {
		e, name, certain := charset.DetermineEncoding(b[:min(len(b), 1024)], contentType)
		declared := name != "windows-1252" || bytes.Contains(bytes.ToLower(b[:min(len(b), 1024)]), []byte("charset")) ||
			certain && strings.Contains(strings.ToLower(contentType), "charset")
		if declared && name != "utf-8" && !valid {
			out, err := e.NewDecoder().Bytes(b)
			if err != nil {
				return nil, "", fmt.Errorf("declared charset %s: %w", name, err)
			}
			from := "<meta charset>"
			if certain && contentType != "" {
				from = "Content-Type " + contentType
			}
			return out, name + " (" + from + ")", nil
		}
	}
	if valid {
		return b, "", nil
	}
	out, err = charmap.Windows1252.NewDecoder().Bytes(b)
	if err != nil {
		return nil, "", err
	}
	return out, "windows-1252 (not valid UTF-8 and no other charset declared: the HTML default)", nil
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
