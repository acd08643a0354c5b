package ytstore

import (
	"context"
	"testing"
	"time"

	"github.com/pillarkit/pillar/jobs/ytfake"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/storetest"
)

// newFakeYT returns the shared FAKE cluster (jobs/ytfake), closed with the
// test.
func newFakeYT(t testing.TB) *ytfake.Cluster {
	c := ytfake.New(&ytfake.Options{SandboxDir: t.TempDir()})
	t.Cleanup(func() { c.Close() })
	return c
}

// newFakeStore creates a store with 4 partitions on a FAKE cluster.
func newFakeStore(t *testing.T) (*Store, *ytfake.Cluster) {
	t.Helper()
	yc := newFakeYT(t)
	s, err := Create(context.Background(), yc, "//tmp/pillar", &Options{Partitions: 4, PollInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return s, yc
}

// TestConformanceOnFake runs the Store conformance suite against the store
// over the FAKE cluster of jobs/ytfake. It checks the store's own logic
// (layout, staging and merges, conflict checks, the queue, pinned reads)
// against the documented YTsaurus behaviour the fake models; only
// TestConformanceOnCluster checks it against YTsaurus itself.
func TestConformanceOnFake(t *testing.T) {
	storetest.Run(t, func(t *testing.T) pillar.Store {
		s, _ := newFakeStore(t)
		return s
	})
}
