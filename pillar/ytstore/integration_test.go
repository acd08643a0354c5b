package ytstore

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"go.ytsaurus.tech/yt/go/guid"
	"go.ytsaurus.tech/yt/go/ypath"
	"go.ytsaurus.tech/yt/go/yt"
	"go.ytsaurus.tech/yt/go/yt/ythttp"

	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/storetest"
)

// TestConformanceOnCluster runs the Store conformance suite against a real
// YTsaurus cluster: YT_PROXY names it, the token comes from YT_TOKEN (or
// YT_TOKEN_FILE). Each subtest gets a fresh store under YT_TEST_ROOT
// (default //tmp/pillar-storetest-<guid>), removed afterwards. Without
// YT_PROXY the test is skipped: no cluster can run on the development
// machines.
func TestConformanceOnCluster(t *testing.T) {
	if os.Getenv("YT_PROXY") == "" {
		t.Skip("ytstore: YT_PROXY is not set: skipping the conformance suite on a real YTsaurus cluster " +
			"(set YT_PROXY and YT_TOKEN to run it; TestConformanceOnFake covers the store's logic without one)")
	}
	yc, err := ythttp.NewClient(&yt.Config{ReadTokenFromFile: true}) // YT_TOKEN, else YT_TOKEN_FILE or ~/.yt/token
	if err != nil {
		t.Fatalf("ytstore: client for YT_PROXY=%s: %v", os.Getenv("YT_PROXY"), err)
	}
	base := ypath.Path(os.Getenv("YT_TEST_ROOT"))
	if base == "" {
		base = ypath.Path("//tmp/pillar-storetest-" + guid.New().String())
	}
	t.Cleanup(func() {
		_ = yc.RemoveNode(context.Background(), base, &yt.RemoveNodeOptions{Recursive: true, Force: true})
	})
	var n atomic.Int64
	storetest.Run(t, func(t *testing.T) pillar.Store {
		root := base.Child(fmt.Sprintf("s%03d", n.Add(1)))
		s, err := Create(context.Background(), yc, root, &Options{Partitions: 4})
		if err != nil {
			t.Fatalf("ytstore: create %s: %v", root, err)
		}
		return s
	})
}
