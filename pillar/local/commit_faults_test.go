package local

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pillarkit/pillar/pillar"
)

// A commit killed in another process leaves its files in data/ (and,
// killed after the manifest, a manifest past CURRENT). A Store that stays
// open (a daemon) collects them with its cleanup every few commits, which
// does not list data/: the dead commit's staging lists what it moved.
func TestOrphansOfAKilledCommitWhileOpen(t *testing.T) {
	for _, step := range []int{3, 4} { // 3: killed at data-synced; 4: at manifest-written
		t.Run(fmt.Sprintf("step%d", step), func(t *testing.T) {
			s, dir, c := newQueueStore(t, 4)
			want := map[int][]queued{}
			enqueueCommit(t, s, c, 0, 1, "a", want)
			// The daemon's Store is open; another process's commit is killed.
			cmd := exec.Command(os.Args[0], "-test.run=^TestKillDuringQueueCompaction$")
			cmd.Env = append(os.Environ(), "PILLAR_LOCAL_CHILD=compact", "PILLAR_LOCAL_DIR="+dir, fmt.Sprintf("PILLAR_LOCAL_STEP=%d", step))
			out, _ := cmd.CombinedOutput()
			if !cmd.ProcessState.Sys().(syscall.WaitStatus).Signaled() {
				t.Fatalf("child was not killed:\n%s", out)
			}
			orphans := unnamed(t, dir)
			if len(orphans) == 0 {
				t.Fatal("setup: the killed commit left no file")
			}
			// 40 commits: the periodic cleanup runs (every 16 commits) at least twice.
			for i := 0; i < 40; i++ {
				enqueueCommit(t, s, c, 0, 1, fmt.Sprintf("b%d", i), want)
			}
			if left := unnamed(t, dir); len(left) > 0 {
				t.Errorf("after 40 commits of the open Store, %d files of the killed commit remain: %v", len(left), left)
			}
			sn, _ := s.Snapshot(ctx)
			checkQueue(t, sn, want)
			sn.Release()
		})
	}
}

// unnamed lists data files no manifest on disk names (index-listed
// segments included).
func unnamed(t *testing.T, dir string) []string {
	t.Helper()
	keep := map[string]bool{}
	ms, _ := os.ReadDir(filepath.Join(dir, "manifests"))
	cur, _ := os.ReadFile(filepath.Join(dir, "CURRENT"))
	for _, e := range ms {
		if !strings.HasSuffix(e.Name(), ".json") || e.Name() > strings.TrimSpace(string(cur)) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, "manifests", e.Name()))
		if err != nil {
			continue
		}
		m, err := decodeManifest(b, e.Name())
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range namedFiles(t, dir, m) {
			keep[f] = true
		}
	}
	var out []string
	ents, _ := os.ReadDir(filepath.Join(dir, "data"))
	for _, e := range ents {
		if !keep[e.Name()] {
			out = append(out, e.Name())
		}
	}
	return out
}

// One damaged index file does not stop later enqueues to its partition:
// a merge that would read it is skipped. Reads of the damaged
// range fail; the records after it read back.
func TestDamagedIndexDoesNotBlockEnqueues(t *testing.T) {
	s, dir, c := newQueueStore(t, 4)
	want := map[int][]queued{}
	for i := 0; i < 4; i++ { // the first level-0 index file
		enqueueCommit(t, s, c, 0, 1, fmt.Sprintf("c%d", i), want)
	}
	m, _ := s.current()
	flipAt(t, filepath.Join(dir, "data", m.Queue[0].Index[0].File), 10)
	s, err := Open(dir, &Options{Now: c.Now, queueFanout: 4}) // no cached copy
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	for i := 4; i < 24; i++ {
		c.advance(time.Second)
		tx, _ := s.Begin(ctx)
		if err := tx.Enqueue(ctx, pillar.ExportRecord{Partition: 0, PageKey: keyOfPartition(0, 1), Op: pillar.OpPut, Cause: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			if !errors.Is(err, pillar.ErrCorrupt) {
				t.Fatal(err)
			}
			failed++
		}
	}
	if failed > 0 {
		t.Fatalf("%d of the 20 enqueue commits after the damage failed (ErrCorrupt from the merge)", failed)
	}
	sn, _ := s.Snapshot(ctx)
	defer sn.Release()
	got, err := sn.ReadQueue(ctx, 0, 4, 100)
	if err != nil || len(got) != 20 || got[19].Cause != "23" {
		t.Fatalf("the records after the damaged range: %d, %v", len(got), err)
	}
	if _, err := sn.ReadQueue(ctx, 0, 0, 1); !errors.Is(err, pillar.ErrCorrupt) {
		t.Fatalf("a read of the damaged range: %v, want ErrCorrupt", err)
	}
}

// syncFailFS fails the SyncDir of one directory, once.
type syncFailFS struct {
	OSFS
	dir  string
	done bool
}

func (f *syncFailFS) SyncDir(name string) error {
	if name == f.dir && !f.done {
		f.done = true
		return &os.PathError{Op: "sync", Path: name, Err: syscall.EIO}
	}
	return f.OSFS.SyncDir(name)
}

// The store directory's fsync after CURRENT's rename fails: the commit is
// decided (CURRENT names it), so nothing it wrote is removed; the error
// says it is committed (removing the manifest and the moved files here
// would leave a store that no longer opens).
func TestCurrentSyncFailureKeepsCommit(t *testing.T) {
	c := newFakeClock()
	dir := t.TempDir()
	fs := &syncFailFS{dir: "-"}
	s, err := Create(dir, &Options{Partitions: 1, Now: c.Now, FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	fs.dir = dir
	tx, _ := s.Begin(ctx)
	if err := tx.Enqueue(ctx, pillar.ExportRecord{Partition: 0, PageKey: keyOfPartition(0, 1), Op: pillar.OpPut, Cause: "x"}); err != nil {
		t.Fatal(err)
	}
	cerr := tx.Commit(ctx)
	if cerr == nil || !errors.Is(cerr, syscall.EIO) || !strings.Contains(cerr.Error(), "is committed") {
		t.Fatalf("commit: %v, want an error saying it is committed and wrapping EIO", cerr)
	}
	s2, err := Open(dir, nil)
	if err != nil {
		t.Fatalf("after a failed fsync of the store directory the store does not open: %v", err)
	}
	sn, err := s2.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	if got, err := sn.ReadQueue(ctx, 0, 0, 10); err != nil || len(got) != 1 || got[0].Cause != "x" {
		t.Fatalf("queue: %v %v", got, err)
	}
}
