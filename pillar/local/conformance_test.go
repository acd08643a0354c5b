package local

import (
	"testing"

	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/storetest"
)

// TestConformance runs the Store conformance suite against the embedded
// store.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) pillar.Store {
		s, err := Create(t.TempDir(), &Options{Partitions: 4})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
