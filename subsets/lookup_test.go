package subsets

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/local"
)

// TestLookups: LoadPage, FindMember and PageURLs find pages in sorted
// tables by binary search (every key, the first and last, absent keys
// between and past them) and in an unsorted table by a scan.
func TestLookups(t *testing.T) {
	ctx := context.Background()
	st, err := local.Create(t.TempDir(), &local.Options{Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tx, err := st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	key := func(i int) string { return fmt.Sprintf("%032x", 2*i+2) } // even: absent odd keys between
	write := func(table string, row any, sorted bool, rows func(w pillar.RowWriter)) {
		t.Helper()
		o := &pillar.WriteOptions{}
		if sorted {
			o.SortedBy = []string{"page_key"}
		}
		w, err := tx.WriteTable(ctx, table, row, o)
		if err != nil {
			t.Fatal(err)
		}
		rows(w)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	const n = 90 // more than 64: PageURLs of every key takes the one-pass path
	write(pillar.TableDocs, pillar.Doc{}, true, func(w pillar.RowWriter) {
		for i := 0; i < n; i++ {
			w.Write(&pillar.Doc{PageKey: key(i), URL: fmt.Sprintf("https://ex.org/%d", i), TextLen: int64(i)})
		}
	})
	write(pillar.TableSignals, pillar.Signal{}, true, func(w pillar.RowWriter) {
		for i := 0; i < n; i += 3 {
			w.Write(&pillar.Signal{PageKey: key(i), Name: "a", Num: 1, IsNum: true})
			w.Write(&pillar.Signal{PageKey: key(i), Name: "b", Num: 2, IsNum: true})
		}
	})
	write("subsets/s@1", pillar.SubsetMember{}, true, func(w pillar.RowWriter) {
		for i := 0; i < n; i += 2 {
			w.Write(&pillar.SubsetMember{PageKey: key(i), Score: float64(i)})
		}
	})
	write("subsets/unsorted@1", pillar.SubsetMember{}, false, func(w pillar.RowWriter) {
		for i := n - 1; i >= 0; i-- {
			w.Write(&pillar.SubsetMember{PageKey: key(i), Score: float64(i)})
		}
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	sn, err := st.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	var keys []string
	for i := 0; i < n; i++ {
		k := key(i)
		keys = append(keys, k)
		p, err := LoadPage(ctx, sn, k)
		if err != nil {
			t.Fatal(err)
		}
		if p.URL != fmt.Sprintf("https://ex.org/%d", i) || p.TextLen != int64(i) || (len(p.Signals) == 2) != (i%3 == 0) {
			t.Errorf("page %d: %+v", i, p)
		}
		for _, table := range []string{"subsets/s@1", "subsets/unsorted@1"} {
			m, err := FindMember(ctx, sn, table, k)
			if err != nil {
				t.Fatal(err)
			}
			want := table == "subsets/unsorted@1" || i%2 == 0
			if (m != nil) != want || (m != nil && m.Score != float64(i)) {
				t.Errorf("%s page %d: member %+v, want %v", table, i, m, want)
			}
		}
	}
	for _, absent := range []string{fmt.Sprintf("%032x", 1), fmt.Sprintf("%032x", 7), fmt.Sprintf("%032x", 2*n+5)} {
		if _, err := LoadPage(ctx, sn, absent); !errors.Is(err, pillar.ErrNotFound) {
			t.Errorf("absent page %s: %v", absent, err)
		}
		if m, err := FindMember(ctx, sn, "subsets/s@1", absent); m != nil || err != nil {
			t.Errorf("absent member %s: %+v %v", absent, m, err)
		}
	}
	for _, ks := range [][]string{keys[:3], append(keys, fmt.Sprintf("%032x", 9))} {
		urls, err := PageURLs(ctx, sn, ks)
		if err != nil {
			t.Fatal(err)
		}
		if len(urls) != min(len(ks), n) || urls[keys[2]] != "https://ex.org/2" {
			t.Errorf("PageURLs(%d keys): %d urls", len(ks), len(urls))
		}
	}
}
