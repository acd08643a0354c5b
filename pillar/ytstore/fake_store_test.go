package ytstore

import (
	"context"
	"testing"
	"time"

	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/storetest"
)

// newFakeStore creates a store with 4 partitions on a FAKE cluster.
func newFakeStore(t *testing.T) (*Store, *fakeYT) {
	t.Helper()
	yc := newFakeYT()
	s, err := Create(context.Background(), yc, "//tmp/pillar", &Options{Partitions: 4, PollInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return s, yc
}

// TestConformanceOnFake runs the Store conformance suite against the store
// over the FAKE cluster of fake_test.go. It checks the store's own logic
// (layout, staging and merges, conflict checks, the queue, pinned reads)
// against the documented YTsaurus behaviour the fake models; only
// TestConformanceOnCluster checks it against YTsaurus itself.
func TestConformanceOnFake(t *testing.T) {
	storetest.Run(t, func(t *testing.T) pillar.Store {
		s, _ := newFakeStore(t)
		return s
	})
}
