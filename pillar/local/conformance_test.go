package local

import (
	"os"
	"sync"
	"testing"
	"time"

	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/storetest"
)

// TestConformance runs the Store conformance suite against the embedded
// store, with time-based retention off (one manifest, kept a nanosecond):
// only snapshot leases keep what the suite's snapshots read.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) pillar.Store {
		s, err := Create(t.TempDir(), &Options{Partitions: 4, RetainManifests: 1, RetainFor: time.Nanosecond})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestConformanceFaults runs the suite's fault cases with a file system
// whose writes, renames and syncs fail on demand.
func TestConformanceFaults(t *testing.T) {
	storetest.RunFaults(t, func(t *testing.T) (pillar.Store, func(error)) {
		fs := &faultFS{}
		s, err := Create(t.TempDir(), &Options{Partitions: 4, FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		return s, fs.set
	})
}

// faultFS is OSFS whose mutating calls fail with err while it is set.
type faultFS struct {
	OSFS
	mu  sync.Mutex
	err error
}

func (f *faultFS) set(err error) { f.mu.Lock(); f.err = err; f.mu.Unlock() }
func (f *faultFS) get() error    { f.mu.Lock(); defer f.mu.Unlock(); return f.err }

func (f *faultFS) Create(name string) (File, error) {
	if err := f.get(); err != nil {
		return nil, &os.PathError{Op: "create", Path: name, Err: err}
	}
	return f.OSFS.Create(name)
}

func (f *faultFS) Rename(o, n string) error {
	if err := f.get(); err != nil {
		return &os.LinkError{Op: "rename", Old: o, New: n, Err: err}
	}
	return f.OSFS.Rename(o, n)
}

func (f *faultFS) SyncDir(name string) error {
	if err := f.get(); err != nil {
		return &os.PathError{Op: "sync", Path: name, Err: err}
	}
	return f.OSFS.SyncDir(name)
}
