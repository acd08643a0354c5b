package jobs_test

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"go.ytsaurus.tech/yt/go/mapreduce/spec"
	"go.ytsaurus.tech/yt/go/yson"

	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/pillar"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

func specText(t *testing.T, s *spec.Spec) []byte {
	t.Helper()
	b, err := yson.MarshalFormat(s, yson.FormatPretty)
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte("# type: "+string(s.Type)+"\n"), append(b, '\n')...)
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "spec", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs (go test -run %s -update rewrites it):\n--- got\n%s\n--- want\n%s", path, t.Name(), got, want)
	}
}

// TestSpecGolden checks the specs BuildSpec makes, as values.
func TestSpecGolden(t *testing.T) {
	o := &jobs.YTOptions{Root: "//home/pillar", Pool: "backfill", MaxFailedJobs: 3}
	for _, tc := range []struct {
		name string
		kind jobs.Kind
		op   *jobs.Op
	}{
		{"map.yson", jobs.KindMap, &jobs.Op{
			Title:       "rechunk v3",
			Inputs:      []string{"docs", "docs_extra"},
			Outputs:     []jobs.Output{{Table: "chunks/v3", Append: true}, {Table: "docwords"}},
			Workers:     16,
			MemoryLimit: 1 << 30,
			Secrets:     map[string]string{"EMBED_API_KEY": "s3cr3t"},
		}},
		{"reduce.yson", jobs.KindReduce, &jobs.Op{
			Inputs:   []string{"wc"},
			Outputs:  []jobs.Output{{Table: "sums", SortedBy: []string{"word"}}, {Table: "frequent"}},
			ReduceBy: []string{"word"},
			Workers:  4,
		}},
		{"map_reduce.yson", jobs.KindMapReduce, &jobs.Op{
			Inputs:        []string{"docs"},
			Outputs:       []jobs.Output{{Table: "docwords"}, {Table: "totals"}},
			MapperOutputs: 1,
			ReduceBy:      []string{"word"},
			SortBy:        []string{"word", "count"},
		}},
		{"sort.yson", jobs.KindSort, &jobs.Op{
			Inputs:  []string{"docs"},
			Outputs: []jobs.Output{{Table: "docs_by_host", RowType: pillar.Doc{}}},
			SortBy:  []string{"host", "page_key"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := jobs.BuildSpec(tc.kind, tc.op, o)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name, specText(t, s))
			again, _ := jobs.BuildSpec(tc.kind, tc.op, o)
			if string(specText(t, again)) != string(specText(t, s)) {
				t.Fatal("BuildSpec is not deterministic")
			}
		})
	}
	if _, err := jobs.BuildSpec(jobs.KindReduce, &jobs.Op{Inputs: []string{"a"}, Outputs: []jobs.Output{{Table: "b"}}}, o); err == nil {
		t.Fatal("reduce without reduce_by must not build")
	}
}

var (
	reGUID  = regexp.MustCompile(`[0-9a-f]{1,8}-[0-9a-f]{1,8}-[0-9a-f]{1,8}-[0-9a-f]{1,8}`)
	reMD5   = regexp.MustCompile(`[0-9a-f]{32}`)
	reVault = regexp.MustCompile(`"job_state_key"="(?:[^"\\]|\\.)*"`)
	reShard = regexp.MustCompile(`(go_job_state|bin_cache)/[0-9a-f]{2}/`)
)

// TestRecordedSpecGolden checks the spec as the SDK hands it to the
// cluster (recorded by the fake client): BuildSpec's spec plus the job
// command, GOMAXPROCS, the binary and job-state files and the job-state
// key. Random parts (ids, the key, the binary's MD5) are masked.
func TestRecordedSpecGolden(t *testing.T) {
	c := newConformance(t)
	c.input("docs", makeDocs(41, 5))
	op := &jobs.Op{Title: "word count", Inputs: []string{"docs"}, Outputs: []jobs.Output{{Table: "wc"}, {Table: "dw"}},
		Workers: 2, Secrets: map[string]string{"crawl_host": "vault.example"}}
	if err := c.yt.Map(context.Background(), &jobs.WordCountMapper{VaultHost: "crawl_host"}, op); err != nil {
		t.Fatal(err)
	}
	s := c.fake.Specs()[0]
	s.StartedBy = nil // user, host, pid
	b := specText(t, s)
	b = reVault.ReplaceAll(b, []byte(`"job_state_key"="<tink keyset>"`))
	b = reShard.ReplaceAll(b, []byte("$1/<xx>/"))
	b = reGUID.ReplaceAll(b, []byte("<guid>"))
	b = reMD5.ReplaceAll(b, []byte("<md5>"))
	golden(t, "map.recorded.yson", b)
}
