package local

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pillarkit/pillar/pillar"
)

// queued is what a test expects at one queue offset.
type queued struct {
	cause       string
	committedAt int64
}

// enqueueCommit commits n records of partition p (causes tag-0…), with an
// attribute, and appends what it expects to want.
func enqueueCommit(t testing.TB, s *Store, c *fakeClock, p, n int, tag string, want map[int][]queued) {
	t.Helper()
	c.advance(time.Second)
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := tx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(p), PageKey: keyOfPartition(p, s.meta.Partitions), Op: pillar.OpPut,
			Cause: fmt.Sprintf("%s-%d", tag, i), Value: []byte(tag)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.SetAttr(ctx, "tag", tag); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		want[p] = append(want[p], queued{fmt.Sprintf("%s-%d", tag, i), c.Now().UnixMilli()})
	}
}

func keyOfPartition(p, parts int) string {
	for i := 0; ; i++ {
		k := pillar.KeyOfNormalized(fmt.Sprintf("https://q.example/%d", i))
		if k.Partition(parts) == p {
			return k.String()
		}
	}
}

// checkQueue reads every partition from every offset (with two limits,
// values and heads) and compares with want.
func checkQueue(t *testing.T, sn pillar.Snapshot, want map[int][]queued) {
	t.Helper()
	for p, recs := range want {
		end, err := sn.QueueEnd(ctx, p)
		if err != nil || end != int64(len(recs)) {
			t.Fatalf("partition %d: end %d (%v), want %d", p, end, err, len(recs))
		}
		for from := 0; from <= len(recs); from++ {
			limits := []int{1, 7}
			if from == 0 || from == len(recs)/2 {
				limits = append(limits, len(recs)+1)
			}
			for _, limit := range limits {
				got, err := sn.ReadQueue(ctx, p, int64(from), limit)
				if err != nil {
					t.Fatalf("partition %d from %d: %v", p, from, err)
				}
				heads, err := sn.(pillar.QueueHeadReader).ReadQueueHeads(ctx, p, int64(from), limit)
				if err != nil {
					t.Fatalf("partition %d from %d heads: %v", p, from, err)
				}
				n := min(limit, len(recs)-from)
				if len(got) != n || len(heads) != n {
					t.Fatalf("partition %d from %d limit %d: %d records, %d heads, want %d", p, from, limit, len(got), len(heads), n)
				}
				for i, r := range got {
					w := recs[from+i]
					h := heads[i]
					if r.Offset != int64(from+i) || r.Cause != w.cause || r.CommittedAt != w.committedAt ||
						h.Offset != r.Offset || h.CommittedAt != w.committedAt || h.Value != nil {
						t.Fatalf("partition %d offset %d: got %d %q at %d (head %d at %d), want %q at %d",
							p, from+i, r.Offset, r.Cause, r.CommittedAt, h.Offset, h.CommittedAt, w.cause, w.committedAt)
					}
				}
			}
		}
	}
}

// Many small enqueuing commits: the manifest names a bounded number of
// entries (tiered index files), every record reads back at its offset
// with its own commit's time, from a Store that decoded the index itself
// and from a fresh one; merged-away index files are removed, and a
// snapshot taken early keeps reading through the merges.
func TestQueueIndexTiers(t *testing.T) {
	c := newFakeClock()
	dir := t.TempDir()
	opts := &Options{Partitions: 2, Now: c.Now, RetainManifests: 1, RetainFor: time.Nanosecond, queueFanout: 4}
	s, err := Create(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int][]queued{}
	var early pillar.Snapshot
	var earlyWant map[int][]queued
	for i := 0; i < 150; i++ {
		enqueueCommit(t, s, c, i%2, 1+i%3, fmt.Sprintf("c%d", i), want)
		if i == 20 {
			early, _ = s.Snapshot(ctx)
			earlyWant = map[int][]queued{0: append([]queued(nil), want[0]...), 1: append([]queued(nil), want[1]...)}
		}
	}
	m, _ := s.current()
	if m.Format != formatQueueIndex {
		t.Fatalf("manifest format %d, want %d", m.Format, formatQueueIndex)
	}
	for p, q := range m.Queue {
		levels := map[int]int{}
		for _, r := range q.Index {
			levels[r.Level]++
		}
		// 75 segments at fanout 4: 1 of level 2 (64), 2 of level 1, 2 of level 0, 3 in the tail.
		if len(q.Index)+len(q.Segments) > 3*(queueMaxLevel+1)+3 || levels[2] != 1 {
			t.Fatalf("partition %d: %d index files %v and %d tail segments", p, len(q.Index), levels, len(q.Segments))
		}
	}
	sn, _ := s.Snapshot(ctx)
	checkQueue(t, sn, want)
	sn.Release()
	checkQueue(t, early, earlyWant) // its index files (and tail) were merged away since
	early.Release()

	// The regular cleanup removes index files no retained manifest names.
	enqueueCommit(t, s, c, 0, 1, "last", want)
	if _, err := s.cleanupLocked(ctx, nil); err != nil {
		t.Fatal(err)
	}
	cur, _ := s.current()
	named := map[string]bool{}
	for _, f := range namedFiles(t, dir, cur) {
		named[f] = true
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "data"))
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".qidx") && !named[e.Name()] {
			t.Fatalf("index file %s survived the cleanup after commits", e.Name())
		}
	}
	s2, err := Open(dir, nil) // no cache: reads and checks the index files
	if err != nil {
		t.Fatal(err)
	}
	sn2, _ := s2.Snapshot(ctx)
	checkQueue(t, sn2, want)
	sn2.Release()
	checkNoOrphans(t, dir)
	rep, err := s2.Verify(ctx, nil)
	if err != nil || !rep.OK() {
		t.Fatalf("verify: %v %+v", err, rep)
	}
	if rep.Files < 150 {
		t.Fatalf("verify read %d files, want every segment (150) and the index files", rep.Files)
	}
}

// A store written before the index (a long tail) is compacted by its next
// commit; reads are unchanged.
func TestQueueIndexLegacyTail(t *testing.T) {
	s, dir, c := newQueueStore(t, 1000)
	want := map[int][]queued{}
	for i := 0; i < 40; i++ {
		enqueueCommit(t, s, c, 0, 1, fmt.Sprintf("c%d", i), want)
	}
	if m, _ := s.current(); m.Format != formatVersion || len(m.Queue[0].Segments) != 40 {
		t.Fatalf("setup: format %d, %d segments", m.Format, len(m.Queue[0].Segments))
	}
	s, err := Open(dir, &Options{Now: c.Now, queueFanout: 4})
	if err != nil {
		t.Fatal(err)
	}
	enqueueCommit(t, s, c, 0, 2, "after", want)
	m, _ := s.current()
	if len(m.Queue[0].Index) != 1 || m.Queue[0].Index[0].Level != 1 || m.Queue[0].Index[0].Segments != 41 || len(m.Queue[0].Segments) != 0 {
		t.Fatalf("after the first commit: index %+v, tail %d", m.Queue[0].Index, len(m.Queue[0].Segments))
	}
	sn, _ := s.Snapshot(ctx)
	defer sn.Release()
	checkQueue(t, sn, want)
}

// A damaged index file is refused by a queue read (ErrCorrupt, naming the
// file) and listed by Verify; cleanup then removes no data file.
func TestQueueIndexCorrupt(t *testing.T) {
	s, dir, c := newQueueStore(t, 4)
	want := map[int][]queued{}
	for i := 0; i < 5; i++ {
		enqueueCommit(t, s, c, 0, 1, fmt.Sprintf("c%d", i), want)
	}
	m, _ := s.current()
	ix := m.Queue[0].Index[0].File
	before, _ := os.ReadDir(filepath.Join(dir, "data"))
	flipAt(t, filepath.Join(dir, "data", ix), 10)
	s2, err := Open(dir, nil) // its cleanup fails (logged): it removes nothing
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Cleanup(ctx); !errors.Is(err, pillar.ErrCorrupt) || !strings.Contains(err.Error(), ix) {
		t.Fatalf("cleanup over a damaged index file: %v, want ErrCorrupt naming %s", err, ix)
	}
	after, _ := os.ReadDir(filepath.Join(dir, "data"))
	if len(after) != len(before) {
		t.Fatalf("cleanup removed files: %d before, %d after", len(before), len(after))
	}
	sn, _ := s2.Snapshot(ctx)
	defer sn.Release()
	if _, err := sn.ReadQueue(ctx, 0, 0, 10); !errors.Is(err, pillar.ErrCorrupt) || !strings.Contains(err.Error(), ix) || !strings.Contains(err.Error(), "partition 0") {
		t.Fatalf("queue read through a damaged index file: %v, want ErrCorrupt naming partition 0 and %s", err, ix)
	}
	if got, err := sn.ReadQueue(ctx, 0, 4, 10); err != nil || len(got) != 1 || got[0].Cause != "c4-0" {
		t.Fatalf("the tail past the damaged index: %v %v", got, err)
	}
	rep, err := s2.Verify(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) != 1 || rep.Problems[0].File != ix || !rep.Problems[0].Corrupt {
		t.Fatalf("verify problems %+v, want %s corrupt", rep.Problems, ix)
	}
}

// Readers of the queue while commits append and merge index files (-race).
func TestQueueIndexConcurrentReaders(t *testing.T) {
	c := newFakeClock()
	s, err := Create(t.TempDir(), &Options{Partitions: 1, Now: c.Now, RetainManifests: 1, RetainFor: time.Nanosecond, queueFanout: 4})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int][]queued{}
	var wg sync.WaitGroup
	done := make(chan struct{})
	errs := make(chan error, 4)
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				sn, err := s.Snapshot(ctx)
				if err != nil {
					errs <- err
					return
				}
				end, _ := sn.QueueEnd(ctx, 0)
				got, err := sn.ReadQueue(ctx, 0, 0, int(end)+1)
				sn.Release()
				if err != nil || int64(len(got)) != end {
					errs <- fmt.Errorf("read %d of %d: %v", len(got), end, err)
					return
				}
			}
		}()
	}
	for i := 0; i < 60; i++ {
		enqueueCommit(t, s, c, 0, 1, fmt.Sprintf("c%d", i), want)
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// The kill -9 test of compaction: from the same store (63 one-record
// segments at fanout 4: the next commit's tail becomes an index file that
// merges up two levels), a child commits one record and kills itself at
// the n-th commit step. The reopened store holds the old queue or the new
// one, whole, every record at its offset, and no unnamed file.
func TestKillDuringQueueCompaction(t *testing.T) {
	if os.Getenv("PILLAR_LOCAL_CHILD") == "compact" {
		c := newFakeClock()
		c.advance(time.Hour)
		s, err := Open(os.Getenv("PILLAR_LOCAL_DIR"), &Options{queueFanout: 4, Now: c.Now, crashAt: crashChild()})
		if err != nil {
			os.Exit(3)
		}
		enqueueCommit(t, s, c, 0, 1, "new", map[int][]queued{})
		os.Exit(0)
	}
	c := newFakeClock()
	tmpl := filepath.Join(t.TempDir(), "template")
	s, err := Create(tmpl, &Options{Partitions: 1, Now: c.Now, queueFanout: 4})
	if err != nil {
		t.Fatal(err)
	}
	old := map[int][]queued{}
	for i := 0; i < 63; i++ {
		enqueueCommit(t, s, c, 0, 1, fmt.Sprintf("c%d", i), old)
	}
	if m, _ := s.current(); len(m.Queue[0].Segments) != 3 {
		t.Fatalf("setup: tail of %d segments, want 3", len(m.Queue[0].Segments))
	}
	sawOld, sawNew := false, false
	steps := crashPoints(t, "TestKillDuringQueueCompaction", "compact", tmpl, 20, func(n int, dir string, killed bool, out []byte) {
		s2, err := Open(dir, &Options{queueFanout: 4})
		if err != nil {
			t.Fatalf("step %d: reopen: %v\n%s", n, err, out)
		}
		sn, _ := s2.Snapshot(ctx)
		var tag string
		if err := sn.Attr(ctx, "tag", &tag); err != nil {
			t.Fatal(err)
		}
		want := map[int][]queued{0: append([]queued(nil), old[0]...)}
		if tag == "new" {
			sawNew = true
			recs, err := sn.ReadQueue(ctx, 0, 63, 2)
			if err != nil || len(recs) != 1 {
				t.Fatalf("step %d: the new record: %v %v", n, recs, err)
			}
			want[0] = append(want[0], queued{"new-0", recs[0].CommittedAt})
			if m := sn.(*snapshot).m; len(m.Queue[0].Index) != 1 || m.Queue[0].Index[0].Level != 2 {
				t.Fatalf("step %d: new state's index %+v, want one file of level 2", n, m.Queue[0].Index)
			}
		} else {
			sawOld = true
		}
		checkQueue(t, sn, want)
		sn.Release()
		checkNoOrphans(t, dir)
		if !killed && tag != "new" {
			t.Fatalf("step %d: child finished but state is %s", n, tag)
		}
	})
	if !sawOld || !sawNew {
		t.Fatalf("crash points covered old=%v new=%v", sawOld, sawNew)
	}
	t.Logf("killed at %d commit steps; both outcomes seen", steps)
}

// A transaction that enqueues more than the spill threshold writes its
// records to staging as they come (memory holds at most the threshold),
// and the commit delivers them all in order with their offsets; an
// aborted one leaves nothing.
func TestEnqueueSpills(t *testing.T) {
	c := newFakeClock()
	dir := t.TempDir()
	s, err := Create(dir, &Options{Partitions: 3, Now: c.Now, spillBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int][]queued{}
	enqueueCommit(t, s, c, 1, 2, "before", want)
	ptx, _ := s.Begin(ctx)
	c.advance(time.Second)
	for i := 0; i < 600; i++ {
		p := i % 3
		cause := fmt.Sprintf("big-%d", i)
		if err := ptx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(p), PageKey: keyOfPartition(p, 3), Op: pillar.OpPut, Cause: cause, Value: make([]byte, 200)}); err != nil {
			t.Fatal(err)
		}
		want[p] = append(want[p], queued{cause, c.Now().UnixMilli()})
		if q := &ptx.(*tx).queue; q.pendingBytes > 4<<10 {
			t.Fatalf("record %d: %d bytes pending in memory, threshold 4096", i, q.pendingBytes)
		}
	}
	if n := len(ptx.(*tx).queue.spools); n != 3 {
		t.Fatalf("%d partitions spooled to staging, want 3", n)
	}
	if err := ptx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	sn, _ := s.Snapshot(ctx)
	checkQueue(t, sn, want)
	sn.Release()

	ptx, _ = s.Begin(ctx)
	for i := 0; i < 100; i++ {
		if err := ptx.Enqueue(ctx, pillar.ExportRecord{Partition: 0, PageKey: keyOfPartition(0, 3), Op: pillar.OpPut, Value: make([]byte, 200)}); err != nil {
			t.Fatal(err)
		}
	}
	ptx.Abort()
	if ents, _ := os.ReadDir(filepath.Join(dir, "tx")); len(ents) != 0 {
		t.Fatalf("an aborted spilled transaction left %d staging dirs", len(ents))
	}
	sn, _ = s.Snapshot(ctx)
	defer sn.Release()
	checkQueue(t, sn, want)
}

// The kill -9 test of cleanup: a child replaces a table and queues
// records in a few commits (garbage: old manifests, table files, merged
// index files), then runs Cleanup and kills itself at its n-th removal.
// The reopened store holds the child's last state, whole, and no unnamed
// file (manifests go before the files they name: a kill leaves orphans,
// never a manifest naming a missing file).
func TestKillDuringCleanup(t *testing.T) {
	if os.Getenv("PILLAR_LOCAL_CHILD") == "cleanup" {
		c := newFakeClock()
		s, err := Open(os.Getenv("PILLAR_LOCAL_DIR"), &Options{queueFanout: 4, Now: c.Now, RetainManifests: 1, RetainFor: time.Nanosecond})
		if err != nil {
			os.Exit(3)
		}
		for i := 0; i < 6; i++ {
			c.advance(time.Second)
			commitGeneration(t, s, fmt.Sprintf("g%d", i))
		}
		c.advance(time.Second)
		s.opts.crashAtCleanup = crashChild()
		if _, err := s.Cleanup(ctx); err != nil {
			os.Exit(4)
		}
		os.Exit(0)
	}
	tmpl := filepath.Join(t.TempDir(), "template")
	s := mustCreate(t, tmpl)
	commitGeneration(t, s, "old")
	steps := crashPoints(t, "TestKillDuringCleanup", "cleanup", tmpl, 200, func(n int, dir string, killed bool, out []byte) {
		s2, err := Open(dir, nil)
		if err != nil {
			t.Fatalf("step %d: reopen: %v\n%s", n, err, out)
		}
		if tag := checkGeneration(t, s2); tag != "g5" {
			t.Fatalf("step %d: state %s after a killed cleanup, want g5", n, tag)
		}
		sn, _ := s2.Snapshot(ctx)
		if end, _ := sn.QueueEnd(ctx, 0); end < 0 {
			t.Fatal(end)
		}
		for p := 0; p < 4; p++ {
			end, _ := sn.QueueEnd(ctx, p)
			if _, err := sn.ReadQueue(ctx, p, 0, int(end)+1); err != nil {
				t.Fatalf("step %d: queue partition %d: %v", n, p, err)
			}
		}
		sn.Release()
		checkNoOrphans(t, dir)
	})
	if steps < 2 {
		t.Fatalf("the cleanup removed only %d things", steps)
	}
	t.Logf("killed at %d cleanup removals", steps)
}

// newQueueStore creates a one-partition store in a temporary folder on a
// fake clock, with queue index files of fanout segments.
func newQueueStore(t *testing.T, fanout int) (*Store, string, *fakeClock) {
	t.Helper()
	c := newFakeClock()
	dir := t.TempDir()
	s, err := Create(dir, &Options{Partitions: 1, Now: c.Now, queueFanout: fanout})
	if err != nil {
		t.Fatal(err)
	}
	return s, dir, c
}
