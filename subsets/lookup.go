package subsets

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/pillarkit/pillar/pillar"
)

// Lookups of single pages in tables sorted by page_key (docs, signals, a
// subset's members): a binary search over row indexes, so finding a page
// reads O(log N) rows instead of scanning the table. A table that does not
// record the order is scanned (and the scan stops past the key when it is
// sorted after all).

// keyHead is the page_key projection of a row.
type keyHead struct {
	PageKey string `yson:"page_key" parquet:"page_key"`
}

// findKey returns the index of the first row of table whose page_key is >=
// key, the table's row count, and whether the table is sorted by page_key.
func findKey(ctx context.Context, sn pillar.Snapshot, table, key string) (first, rows int64, sorted bool, err error) {
	ti, err := sn.Table(ctx, table)
	if err != nil {
		return 0, 0, false, err
	}
	if len(ti.SortedBy) == 0 || ti.SortedBy[0] != "page_key" {
		return 0, ti.Rows, false, nil
	}
	var serr error
	i := sort.Search(int(ti.Rows), func(i int) bool {
		if serr != nil {
			return true
		}
		var h keyHead
		if serr = readRow(ctx, sn, table, int64(i), &h); serr != nil {
			return true
		}
		return h.PageKey >= key
	})
	if serr != nil {
		return 0, 0, false, serr
	}
	return int64(i), ti.Rows, true, nil
}

func readRow(ctx context.Context, sn pillar.Snapshot, table string, i int64, dst any) error {
	rr, err := sn.ReadTable(ctx, table, &pillar.Range{Start: i, End: i + 1})
	if err != nil {
		return err
	}
	defer rr.Close()
	if !rr.Next() {
		if err := rr.Err(); err != nil {
			return err
		}
		return fmt.Errorf("table %q: no row %d", table, i)
	}
	return rr.Scan(dst)
}

// eachRowOf calls fn with every row of table whose page_key is key, decoded
// by scan into a new value; fn returns false to stop.
func eachRowOf(ctx context.Context, sn pillar.Snapshot, table, key string, decode func(pillar.RowReader) (string, error)) error {
	first, rows, sorted, err := findKey(ctx, sn, table, key)
	if err != nil {
		return err
	}
	rr, err := sn.ReadTable(ctx, table, &pillar.Range{Start: first, End: rows})
	if err != nil {
		return err
	}
	defer rr.Close()
	for rr.Next() {
		k, err := decode(rr)
		if err != nil {
			return err
		}
		if k > key && sorted {
			break
		}
	}
	return rr.Err()
}

// LoadPage reads one page's docs row and signals into a Page (what Explain
// evaluates). An absent page is an error wrapping pillar.ErrNotFound; an
// absent signals table means no signals.
func LoadPage(ctx context.Context, sn pillar.Snapshot, key string) (*Page, error) {
	var doc *pillar.Doc
	err := eachRowOf(ctx, sn, pillar.TableDocs, key, func(rr pillar.RowReader) (string, error) {
		var d pillar.Doc
		if err := rr.Scan(&d); err != nil {
			return "", err
		}
		if d.PageKey == key && doc == nil {
			doc = &d
		}
		return d.PageKey, nil
	})
	if err != nil {
		if errors.Is(err, pillar.ErrNotFound) {
			return nil, fmt.Errorf("subsets: %w (run `pillar ingest` first)", err)
		}
		return nil, fmt.Errorf("subsets: docs: %w", err)
	}
	if doc == nil {
		return nil, fmt.Errorf("subsets: page %s is not in the docs table: %w", key, pillar.ErrNotFound)
	}
	var sigs []pillar.Signal
	err = eachRowOf(ctx, sn, pillar.TableSignals, key, func(rr pillar.RowReader) (string, error) {
		var s pillar.Signal
		if err := rr.Scan(&s); err != nil {
			return "", err
		}
		if s.PageKey == key {
			sigs = append(sigs, s)
		}
		return s.PageKey, nil
	})
	if err != nil && !errors.Is(err, pillar.ErrNotFound) { // no signals table: no signals imported
		return nil, fmt.Errorf("subsets: signals: %w", err)
	}
	p, err := NewPage(doc, sigs)
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// FindMember returns the page's row in a member table (a subset
// generation's pillar.SubsetMember rows), or nil when the page is not a
// member.
func FindMember(ctx context.Context, sn pillar.Snapshot, table, key string) (*pillar.SubsetMember, error) {
	var found *pillar.SubsetMember
	err := eachRowOf(ctx, sn, table, key, func(rr pillar.RowReader) (string, error) {
		var m pillar.SubsetMember
		if err := rr.Scan(&m); err != nil {
			return "", err
		}
		if m.PageKey == key && found == nil {
			found = &m
		}
		return m.PageKey, nil
	})
	if err != nil {
		return nil, fmt.Errorf("subsets: members %s: %w", table, err)
	}
	return found, nil
}

// urlHead is the (page_key, url) projection of a docs row.
type urlHead struct {
	PageKey string `yson:"page_key" parquet:"page_key"`
	URL     string `yson:"url" parquet:"url"`
}

// PageURLs returns the URLs of the given pages (a listing, not the corpus)
// from the docs table; a page not in docs (deleted since) has no entry. A
// few keys are looked up one by one; many are found in one pass over docs
// that stops once all are found.
func PageURLs(ctx context.Context, sn pillar.Snapshot, keys []string) (map[string]string, error) {
	out := make(map[string]string, len(keys))
	if len(keys) > 64 {
		want := make(map[string]bool, len(keys))
		for _, k := range keys {
			want[k] = true
		}
		rr, err := sn.ReadTable(ctx, pillar.TableDocs, nil)
		if err != nil {
			return nil, fmt.Errorf("subsets: docs: %w", err)
		}
		defer rr.Close()
		for len(out) < len(want) && rr.Next() {
			var d urlHead
			if err := rr.Scan(&d); err != nil {
				return nil, fmt.Errorf("subsets: docs: %w", err)
			}
			if want[d.PageKey] {
				out[d.PageKey] = d.URL
			}
		}
		return out, rr.Err()
	}
	for _, k := range keys {
		if _, ok := out[k]; ok {
			continue
		}
		err := eachRowOf(ctx, sn, pillar.TableDocs, k, func(rr pillar.RowReader) (string, error) {
			var d urlHead
			if err := rr.Scan(&d); err != nil {
				return "", err
			}
			if d.PageKey == k {
				out[k] = d.URL
			}
			return d.PageKey, nil
		})
		if err != nil {
			return nil, fmt.Errorf("subsets: docs: %w", err)
		}
	}
	return out, nil
}
