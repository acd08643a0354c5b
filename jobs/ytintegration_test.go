package jobs_test

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"go.ytsaurus.tech/yt/go/guid"
	"go.ytsaurus.tech/yt/go/ypath"
	"go.ytsaurus.tech/yt/go/yt"
	"go.ytsaurus.tech/yt/go/yt/ythttp"

	"github.com/pillarkit/pillar/jobs"
)

// ytIntegration runs the word count map and map_reduce on the cluster at
// YT_PROXY and compares them with the local runner. The token comes from
// YT_TOKEN (or YT_TOKEN_FILE); the tables live under YT_TEST_ROOT (default
// //tmp/pillar-test-<guid>), removed afterwards.
func ytIntegration(t *testing.T, bin string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	yc, err := ythttp.NewClient(&yt.Config{Proxy: os.Getenv("YT_PROXY")})
	if err != nil {
		t.Fatal(err)
	}
	root := ypath.Path(os.Getenv("YT_TEST_ROOT"))
	if root == "" {
		root = ypath.Path("//tmp/pillar-test-" + guid.New().String())
	}
	if _, err := yc.CreateNode(ctx, root, yt.NodeMap, &yt.CreateNodeOptions{Recursive: true, IgnoreExisting: true}); err != nil {
		t.Fatal(err)
	}
	defer yc.RemoveNode(context.Background(), root, &yt.RemoveNodeOptions{Recursive: true, Force: true})

	e := newEnv(t)
	docs := makeDocs(31, 300)
	writeTable(e, "docs", docs)
	w, err := yt.WriteTable(ctx, yc, root.Child("docs"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range docs {
		if err := w.Write(&docs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	r, err := jobs.NewYT(yc, &jobs.YTOptions{Root: root, JobBinary: bin})
	if err != nil {
		t.Fatal(err)
	}
	op := func() *jobs.Op {
		return &jobs.Op{Inputs: []string{"docs"}, Outputs: []jobs.Output{{Table: "totals"}}, ReduceBy: []string{"word"}, MemoryLimit: 256 << 20}
	}
	if err := e.runner.MapReduce(ctx, &jobs.WordCountMapper{}, &jobs.WordSumReducer{}, op()); err != nil {
		t.Fatal(err)
	}
	if err := r.MapReduce(ctx, &jobs.WordCountMapper{}, &jobs.WordSumReducer{}, op()); err != nil {
		t.Fatal(err)
	}
	local := readTable[jobs.WordCount](e, "totals")
	rr, err := yc.ReadTable(ctx, root.Child("totals"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	var remote []jobs.WordCount
	for rr.Next() {
		var wc jobs.WordCount
		if err := rr.Scan(&wc); err != nil {
			t.Fatal(err)
		}
		remote = append(remote, wc)
	}
	if err := rr.Err(); err != nil {
		t.Fatal(err)
	}
	// Reduce output order across jobs is the cluster's; compare as sets.
	slices.SortFunc(remote, func(a, b jobs.WordCount) int {
		if a.Word < b.Word {
			return -1
		} else if a.Word > b.Word {
			return 1
		}
		return 0
	})
	if !slices.Equal(local, remote) {
		t.Fatalf("cluster output (%d rows) differs from the local runner's (%d rows)", len(remote), len(local))
	}
}
