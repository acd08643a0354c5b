package formatsbench

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/ingest"
	"github.com/pillarkit/pillar/pillar/local"
)

// TestInputsHoldTheSamePages: the folder, the WARC and the Parquet file
// Generate writes ingest to the same pages (URLs, titles, text), all n of
// them, so the benchmark compares like with like.
func TestInputsHoldTheSamePages(t *testing.T) {
	const n = 50
	paths, sizes, err := Generate(filepath.Join(t.TempDir(), "corpus"), n, 2048)
	if err != nil {
		t.Fatal(err)
	}
	var want string
	for _, f := range Formats {
		if sizes[f] < n*1000 {
			t.Errorf("%s input: %d bytes for %d pages of 2 KB", f, sizes[f], n)
		}
		st, err := local.Create(filepath.Join(t.TempDir(), "store"), &local.Options{Partitions: 4})
		if err != nil {
			t.Fatal(err)
		}
		s, err := ingest.Run(context.Background(), st, ingest.Options{From: paths[f]})
		if err != nil {
			t.Fatal(err)
		}
		if s.New != n {
			t.Fatalf("%s input: %d new pages, want %d\n%s", f, s.New, n, s.Summary())
		}
		got := pagesOf(t, st)
		st.Close()
		if want == "" {
			want = got
		} else if got != want {
			t.Errorf("%s input's pages differ from the folder's", f)
		}
	}
}

func pagesOf(t *testing.T, st pillar.Store) string {
	sn, err := st.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	r, err := sn.ReadTable(context.Background(), pillar.TableDocs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var b strings.Builder
	for r.Next() {
		var d pillar.Doc
		if err := r.Scan(&d); err != nil {
			t.Fatal(err)
		}
		b.WriteString(d.URL + "\n" + d.Title + "\n" + d.Text + "\n")
	}
	return b.String()
}
