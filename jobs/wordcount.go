package jobs

import (
	"fmt"
	"strings"
	"unicode"

	"go.ytsaurus.tech/yt/go/mapreduce"

	"github.com/pillarkit/pillar/pillar"
)

// The word count pair is the example every runner test and the job-protocol
// conformance test use: a mapper with two outputs and a reducer that relies
// on key switches.

func init() {
	Register("wordcount", "docs → (word, count per page) and (page, words): the example mapper", &WordCountMapper{})
	Register("wordsum", "(word, count) grouped by word → (word, total): the example reducer", &WordSumReducer{})
}

// WordCount is a row of (word, count).
type WordCount struct {
	Word  string `yson:"word" parquet:"word"`
	Count int64  `yson:"count" parquet:"count"`
}

// DocWords is the number of words of one page.
type DocWords struct {
	PageKey string `yson:"page_key" parquet:"page_key"`
	Host    string `yson:"host" parquet:"host"`
	Words   int64  `yson:"words" parquet:"words"`
	Table   int64  `yson:"table" parquet:"table"` // input table index
}

// WordCountMapper reads pillar.Doc rows and writes, for every page, one
// WordCount per distinct word (in order of first occurrence) to output 0
// and, when there is a second output, a DocWords row to output 1. Words are
// lower-cased runs of letters and digits at least MinLen long.
type WordCountMapper struct {
	// MinLen is the shortest word counted. The default value is 1.
	MinLen int
	// FailOn makes the job fail on a page whose title equals it (tests).
	FailOn string
	// PanicOn makes the job panic on a page whose title equals it (tests).
	PanicOn string
	// VaultHost, when set, names a secret (Op.Secrets, the secure vault on
	// YTsaurus) whose value replaces DocWords.Host (tests the vault).
	VaultHost string
}

func (*WordCountMapper) InputTypes() []any  { return []any{&pillar.Doc{}} }
func (*WordCountMapper) OutputTypes() []any { return []any{&WordCount{}, &DocWords{}} }

// Do implements mapreduce.Job.
func (m *WordCountMapper) Do(ctx mapreduce.JobContext, in mapreduce.Reader, out []mapreduce.Writer) error {
	minLen := max(m.MinLen, 1)
	host := ""
	if m.VaultHost != "" {
		var ok bool
		if host, ok = ctx.LookupVault(m.VaultHost); !ok {
			return fmt.Errorf("wordcount: secret %q is not in the vault", m.VaultHost)
		}
	}
	var d pillar.Doc
	counts := map[string]int64{}
	var order []string
	for in.Next() {
		d = pillar.Doc{}
		if err := in.Scan(&d); err != nil {
			return err
		}
		if m.FailOn != "" && d.Title == m.FailOn {
			return fmt.Errorf("wordcount: page %s: refusing title %q", d.PageKey, d.Title)
		}
		if m.PanicOn != "" && d.Title == m.PanicOn {
			panic("wordcount: panic on title " + d.Title)
		}
		clear(counts)
		order = order[:0]
		var total int64
		for _, w := range strings.FieldsFunc(d.Text, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
			if len(w) < minLen {
				continue
			}
			w = strings.ToLower(w)
			if counts[w] == 0 {
				order = append(order, w)
			}
			counts[w]++
			total++
		}
		for _, w := range order {
			if err := out[0].Write(&WordCount{Word: w, Count: counts[w]}); err != nil {
				return err
			}
		}
		if len(out) > 1 {
			dw := &DocWords{PageKey: d.PageKey, Host: d.Host, Words: total, Table: int64(in.TableIndex())}
			if host != "" {
				dw.Host = host
			}
			if err := out[1].Write(dw); err != nil {
				return err
			}
		}
	}
	return nil
}

// WordSumReducer reads WordCount rows grouped by word and writes one
// WordCount per word with the total; with a second output, it also writes
// there the words whose total is at least Frequent.
type WordSumReducer struct {
	// Frequent is the total from which a word goes to output 1. The default
	// value 0 means 2.
	Frequent int64
}

func (*WordSumReducer) InputTypes() []any  { return []any{&WordCount{}} }
func (*WordSumReducer) OutputTypes() []any { return []any{&WordCount{}, &WordCount{}} }

// Do implements mapreduce.Job.
func (r *WordSumReducer) Do(ctx mapreduce.JobContext, in mapreduce.Reader, out []mapreduce.Writer) error {
	frequent := r.Frequent
	if frequent == 0 {
		frequent = 2
	}
	return mapreduce.GroupKeys(in, func(g mapreduce.Reader) error {
		var sum WordCount
		for g.Next() {
			var wc WordCount
			if err := g.Scan(&wc); err != nil {
				return err
			}
			if sum.Word != "" && wc.Word != sum.Word {
				return fmt.Errorf("wordsum: group of %q contains %q: input not grouped", sum.Word, wc.Word)
			}
			sum.Word = wc.Word
			sum.Count += wc.Count
		}
		if err := out[0].Write(&sum); err != nil {
			return err
		}
		if len(out) > 1 && sum.Count >= frequent {
			return out[1].Write(&sum)
		}
		return nil
	})
}
