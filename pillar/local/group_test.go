package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pillarkit/pillar/pillar"
)

// commitInOrder commits txs concurrently, each queued after the one before
// (the first leads: it waits for the group, Options.groupMin), and returns
// their errors.
func commitInOrder(t *testing.T, s *Store, ctxs []context.Context, txs []pillar.Tx) []error {
	t.Helper()
	errs := make([]error, len(txs))
	var wg sync.WaitGroup
	s.group.mu.Lock()
	base := s.group.joined
	s.group.mu.Unlock()
	for i, tx := range txs {
		c := ctx
		if ctxs != nil && ctxs[i] != nil {
			c = ctxs[i]
		}
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = tx.Commit(c) }()
		deadline := time.Now().Add(10 * time.Second)
		for {
			s.group.mu.Lock()
			in := s.group.joined > base+int64(i)
			s.group.mu.Unlock()
			if in {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("commit %d never queued", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	wg.Wait()
	return errs
}

// groupMember writes table t/<i> (rows tag-i-a, tag-i-b), attribute a/<i>
// = tag and two queue records (causes tag-i-0, tag-i-1) to partition 0.
func groupMember(t *testing.T, s *Store, i int, tag string) pillar.Tx {
	t.Helper()
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writeDocs(t, tx, fmt.Sprintf("t/%d", i), pillar.Replace, fmt.Sprintf("%s-%d-a", tag, i), fmt.Sprintf("%s-%d-b", tag, i))
	if err := tx.SetAttr(ctx, fmt.Sprintf("a/%d", i), tag); err != nil {
		t.Fatal(err)
	}
	for j := 0; j < 2; j++ {
		if err := tx.Enqueue(ctx, pillar.ExportRecord{Partition: 0, PageKey: keyOfPartition(0, s.meta.Partitions), Op: pillar.OpPut,
			Cause: fmt.Sprintf("%s-%d-%d", tag, i, j), Value: []byte(tag)}); err != nil {
			t.Fatal(err)
		}
	}
	return tx
}

// memberState is what member i's table, attribute and queue records say
// ("" when absent), and whether they agree.
func memberState(t *testing.T, sn pillar.Snapshot, i int) string {
	t.Helper()
	var tag string
	if err := sn.Attr(ctx, fmt.Sprintf("a/%d", i), &tag); err != nil && !errors.Is(err, pillar.ErrNotFound) {
		t.Fatal(err)
	}
	var rows []string
	if _, err := sn.Table(ctx, fmt.Sprintf("t/%d", i)); err == nil {
		rows = readKeys(t, sn, fmt.Sprintf("t/%d", i), nil)
	}
	want := []string(nil)
	if tag != "" {
		want = []string{fmt.Sprintf("%s-%d-a", tag, i), fmt.Sprintf("%s-%d-b", tag, i)}
	}
	if !slices.Equal(rows, want) {
		t.Fatalf("member %d: attribute %q but table rows %v", i, tag, rows)
	}
	return tag
}

// queueCauses reads partition 0's queue causes in offset order.
func queueCauses(t *testing.T, sn pillar.Snapshot) []string {
	t.Helper()
	end, err := sn.QueueEnd(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := sn.ReadQueue(ctx, 0, 0, int(end)+1)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i, r := range recs {
		if r.Offset != int64(i) {
			t.Fatalf("queue record %d has offset %d", i, r.Offset)
		}
		out = append(out, r.Cause)
	}
	return out
}

// Concurrent commits share one store commit: one generation, one manifest,
// every member whole, queue offsets in member order.
func TestGroupCommit(t *testing.T) {
	dir := t.TempDir()
	s, err := Create(dir, &Options{Partitions: 4, groupMin: 6})
	if err != nil {
		t.Fatal(err)
	}
	before := s.Info().Generation
	var txs []pillar.Tx
	for i := 0; i < 6; i++ {
		txs = append(txs, groupMember(t, s, i, "g"))
	}
	for i, err := range commitInOrder(t, s, nil, txs) {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
	if g := s.Info().Generation; g != before+1 {
		t.Fatalf("generation %d after a group of 6 from %d, want one store commit", g, before)
	}
	if cs := s.CommitStats(); cs.Commits != 6 || cs.Groups != 1 {
		t.Fatalf("CommitStats: %d commits in %d groups, want 6 in 1", cs.Commits, cs.Groups)
	}
	s2, err := Open(dir, nil) // from disk
	if err != nil {
		t.Fatal(err)
	}
	sn, _ := s2.Snapshot(ctx)
	defer sn.Release()
	var want []string
	for i := 0; i < 6; i++ {
		if got := memberState(t, sn, i); got != "g" {
			t.Fatalf("member %d: %q", i, got)
		}
		want = append(want, fmt.Sprintf("g-%d-0", i), fmt.Sprintf("g-%d-1", i))
	}
	if got := queueCauses(t, sn); !slices.Equal(got, want) {
		t.Fatalf("queue %v, want %v (member order, each member's records together)", got, want)
	}
	checkNoOrphans(t, dir)
}

// Each member's conflict check runs in order against the state its group
// reached: of two members changing one attribute (or table) from the same
// generation the second fails with ErrConflict, alone.
func TestGroupCommitConflictFailsOnlyItsMember(t *testing.T) {
	dir := t.TempDir()
	s, err := Create(dir, &Options{Partitions: 4, groupMin: 5})
	if err != nil {
		t.Fatal(err)
	}
	var txs []pillar.Tx
	for i := 0; i < 5; i++ {
		tx := groupMember(t, s, i, "g")
		switch i {
		case 1, 3:
			tx.SetAttr(ctx, "shared", i)
		case 2, 4:
			writeDocs(t, tx, "docs", pillar.Replace, fmt.Sprint(i))
		}
		txs = append(txs, tx)
	}
	errs := commitInOrder(t, s, nil, txs)
	for i, err := range errs {
		if (i >= 3) != errors.Is(err, pillar.ErrConflict) || (i < 3 && err != nil) {
			t.Fatalf("member %d: %v (members 3 and 4 conflict, no other)", i, err)
		}
	}
	if !strings.Contains(errs[3].Error(), `attribute "shared"`) || !strings.Contains(errs[4].Error(), `table "docs"`) {
		t.Fatalf("conflicts do not name what changed: %v / %v", errs[3], errs[4])
	}
	sn, _ := s.Snapshot(ctx)
	defer sn.Release()
	for i := 0; i < 5; i++ {
		if got, want := memberState(t, sn, i), map[bool]string{true: "g", false: ""}[i < 3]; got != want {
			t.Fatalf("member %d: %q, want %q", i, got, want)
		}
	}
	var shared int
	if err := sn.Attr(ctx, "shared", &shared); err != nil || shared != 1 {
		t.Fatalf("shared = %d (%v), want 1", shared, err)
	}
	if got := readKeys(t, sn, "docs", nil); !slices.Equal(got, []string{"2"}) {
		t.Fatalf("docs %v, want member 2's", got)
	}
	if got := queueCauses(t, sn); !slices.Equal(got, []string{"g-0-0", "g-0-1", "g-1-0", "g-1-1", "g-2-0", "g-2-1"}) {
		t.Fatalf("queue %v", got)
	}
	checkNoOrphans(t, dir)
}

// failRenameFS fails the second rename out of one staging directory.
type failRenameFS struct {
	OSFS
	mu      sync.Mutex
	staging string
	n       int
}

func (f *failRenameFS) Rename(o, n string) error {
	f.mu.Lock()
	hit := f.staging != "" && strings.HasPrefix(o, f.staging+string(filepath.Separator))
	if hit {
		f.n++
	}
	fail := hit && f.n == 2
	f.mu.Unlock()
	if fail {
		return &os.LinkError{Op: "rename", Old: o, New: n, Err: syscall.EIO}
	}
	return os.Rename(o, n)
}

// A member whose files cannot be moved into data/ fails alone: what it
// moved already is removed, the others commit.
func TestGroupCommitMemberFailure(t *testing.T) {
	dir := t.TempDir()
	fs := &failRenameFS{}
	s, err := Create(dir, &Options{Partitions: 4, groupMin: 3, FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	var txs []pillar.Tx
	for i := 0; i < 3; i++ {
		txs = append(txs, groupMember(t, s, i, "g"))
	}
	writeDocs(t, txs[1], "t/1b", pillar.Replace, "x") // member 1 moves one table file, then fails
	fs.staging = txs[1].(*tx).staging
	errs := commitInOrder(t, s, nil, txs)
	if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], syscall.EIO) {
		t.Fatalf("errors %v, want only member 1's (EIO)", errs)
	}
	sn, _ := s.Snapshot(ctx)
	defer sn.Release()
	for i, want := range []string{"g", "", "g"} {
		if got := memberState(t, sn, i); got != want {
			t.Fatalf("member %d: %q, want %q", i, got, want)
		}
	}
	if _, err := sn.Table(ctx, "t/1b"); !errors.Is(err, pillar.ErrNotFound) {
		t.Fatalf("failed member's second table: %v", err)
	}
	if got := queueCauses(t, sn); !slices.Equal(got, []string{"g-0-0", "g-0-1", "g-2-0", "g-2-1"}) {
		t.Fatalf("queue %v", got)
	}
	if left := unnamed(t, dir); len(left) > 0 {
		t.Fatalf("the failed member's moved files remain: %v", left)
	}
	checkNoOrphans(t, dir)
}

// failManifestFS fails creating a manifest while on.
type failManifestFS struct {
	OSFS
	on bool
}

func (f *failManifestFS) Create(name string) (File, error) {
	if f.on && strings.Contains(name, string(filepath.Separator)+"manifests"+string(filepath.Separator)) {
		return nil, &os.PathError{Op: "open", Path: name, Err: syscall.ENOSPC}
	}
	return f.OSFS.Create(name)
}

// A failure of what the members share (the manifest) fails all of them
// and leaves the store as it was, with no file of theirs left.
func TestGroupCommitSharedFailure(t *testing.T) {
	dir := t.TempDir()
	fs := &failManifestFS{}
	s, err := Create(dir, &Options{Partitions: 4, groupMin: 3, FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	before := s.Info().Generation
	var txs []pillar.Tx
	for i := 0; i < 3; i++ {
		txs = append(txs, groupMember(t, s, i, "g"))
	}
	fs.on = true
	for i, err := range commitInOrder(t, s, nil, txs) {
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("member %d: %v, want the manifest's ENOSPC", i, err)
		}
	}
	fs.on = false
	if g := s.Info().Generation; g != before {
		t.Fatalf("generation %d, want %d", g, before)
	}
	sn, _ := s.Snapshot(ctx)
	for i := 0; i < 3; i++ {
		if got := memberState(t, sn, i); got != "" {
			t.Fatalf("member %d visible after a failed group: %q", i, got)
		}
	}
	sn.Release()
	if left := unnamed(t, dir); len(left) > 0 {
		t.Fatalf("files of the failed group remain: %v", left)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "tx")); len(ents) != 0 {
		t.Fatalf("staging left behind: %d dirs", len(ents))
	}
	// The store commits again (alone).
	s.opts.groupMin = 0
	tx := groupMember(t, s, 0, "h")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// A commit queued behind the group in progress gives up when its context
// ends, before a leader takes it; one taken into a group whose leader waits
// for LOCK fails alone when its context ends.
func TestGroupCommitCanceled(t *testing.T) {
	t.Run("queued", func(t *testing.T) {
		s := mustCreate(t, t.TempDir())
		a, b := groupMember(t, s, 0, "a"), groupMember(t, s, 1, "b")
		unlock, err := s.lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		aerr := make(chan error, 1)
		go func() { aerr <- a.Commit(ctx) }() // leads, waits for LOCK
		for {
			s.group.mu.Lock()
			busy := s.group.busy
			s.group.mu.Unlock()
			if busy {
				break
			}
			time.Sleep(time.Millisecond)
		}
		cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if err := b.Commit(cctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("queued commit: %v, want DeadlineExceeded", err)
		}
		unlock()
		if err := <-aerr; err != nil {
			t.Fatal(err)
		}
		sn, _ := s.Snapshot(ctx)
		defer sn.Release()
		if memberState(t, sn, 0) != "a" || memberState(t, sn, 1) != "" {
			t.Fatal("want a committed, b not")
		}
	})
	t.Run("in-group", func(t *testing.T) {
		dir := t.TempDir()
		s, err := Create(dir, &Options{Partitions: 4, groupMin: 2})
		if err != nil {
			t.Fatal(err)
		}
		a, b := groupMember(t, s, 0, "a"), groupMember(t, s, 1, "b")
		unlock, err := s.lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		bctx, cancel := context.WithCancel(ctx)
		go func() {
			// Both are in the group (the queue is empty again) and its
			// leader waits for LOCK: b's context ends, then LOCK frees.
			for {
				s.group.mu.Lock()
				taken := s.group.joined == 2 && len(s.group.queue) == 0
				s.group.mu.Unlock()
				if taken {
					break
				}
				time.Sleep(time.Millisecond)
			}
			time.Sleep(20 * time.Millisecond)
			cancel()
			time.Sleep(20 * time.Millisecond)
			unlock()
		}()
		errs := commitInOrder(t, s, []context.Context{nil, bctx}, []pillar.Tx{a, b})
		if errs[0] != nil || !errors.Is(errs[1], context.Canceled) {
			t.Fatalf("errors %v, want only b's context.Canceled", errs)
		}
		sn, _ := s.Snapshot(ctx)
		defer sn.Release()
		if memberState(t, sn, 0) != "a" || memberState(t, sn, 1) != "" {
			t.Fatal("want a committed, b not")
		}
		checkNoOrphans(t, dir)
	})
}

// The kill -9 test of a group: a child commits three transactions in one
// group and SIGKILLs itself at the n-th step; the reopened store holds all
// three or none, each whole, the queue the old one or the old one plus
// the six records, and no unnamed file.
func TestKillDuringGroupCommit(t *testing.T) {
	if os.Getenv("PILLAR_LOCAL_CHILD") == "group" {
		s, err := Open(os.Getenv("PILLAR_LOCAL_DIR"), &Options{queueFanout: 4, groupMin: 3, crashAt: crashChild()})
		if err != nil {
			os.Exit(3)
		}
		var txs []pillar.Tx
		for i := 0; i < 3; i++ {
			txs = append(txs, groupMember(t, s, i, "new"))
		}
		for _, err := range commitInOrder(t, s, nil, txs) {
			if err != nil {
				os.Exit(4)
			}
		}
		os.Exit(0)
	}
	tmpl := filepath.Join(t.TempDir(), "template")
	s, err := Create(tmpl, &Options{Partitions: 1, queueFanout: 4})
	if err != nil {
		t.Fatal(err)
	}
	// 14 old records in 7 commits: 3 tail segments at fanout 4, so the
	// group's three segments make an index file (index-written steps).
	for i := 0; i < 7; i++ {
		tx := groupMember(t, s, i%3, "old")
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sn, _ := s.Snapshot(ctx)
	old := queueCauses(t, sn)
	sn.Release()
	sawOld, sawNew := false, false
	steps := crashPoints(t, "TestKillDuringGroupCommit", "group", tmpl, 30, func(n int, dir string, killed bool, out []byte) {
		s2, err := Open(dir, &Options{queueFanout: 4})
		if err != nil {
			t.Fatalf("step %d: reopen: %v\n%s", n, err, out)
		}
		sn, _ := s2.Snapshot(ctx)
		states := []string{memberState(t, sn, 0), memberState(t, sn, 1), memberState(t, sn, 2)}
		causes := queueCauses(t, sn)
		sn.Release()
		switch {
		case states[0] == "new" && states[1] == "new" && states[2] == "new":
			sawNew = true
			added := append([]string(nil), causes[len(old):]...)
			slices.Sort(added)
			if !slices.Equal(causes[:len(old)], old) || !slices.Equal(added, []string{"new-0-0", "new-0-1", "new-1-0", "new-1-1", "new-2-0", "new-2-1"}) {
				t.Fatalf("step %d: new state's queue %v", n, causes)
			}
		case states[0] == "old" && states[1] == "old" && states[2] == "old":
			sawOld = true
			if !slices.Equal(causes, old) {
				t.Fatalf("step %d: old state's queue %v, want %v", n, causes, old)
			}
		default:
			t.Fatalf("step %d: members %v: a group must land whole", n, states)
		}
		checkNoOrphans(t, dir)
		if !killed && states[0] != "new" {
			t.Fatalf("step %d: child finished but state is %v", n, states)
		}
	})
	if !sawOld || !sawNew {
		t.Fatalf("crash points covered old=%v new=%v", sawOld, sawNew)
	}
	t.Logf("killed at %d group commit steps; both outcomes seen", steps)
}

// BenchmarkConcurrentCommits: writers goroutines each commit Lorry-sized
// transactions (one attribute of its own and one queue record) in a loop.
// With group commit the commits of one Store share store commits: tx/group
// is how many a store commit carried, commits/s the throughput.
//
//	go test -run '^$' -bench ConcurrentCommits ./pillar/local/
func BenchmarkConcurrentCommits(b *testing.B) {
	for _, writers := range []int{1, 2, 8} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			s, err := Create(b.TempDir(), &Options{Partitions: 8, RetainFor: time.Millisecond})
			if err != nil {
				b.Fatal(err)
			}
			key := keyOfPartition(0, 8)
			var wg sync.WaitGroup
			per := (b.N + writers - 1) / writers
			b.ResetTimer()
			start := time.Now()
			for w := 0; w < writers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < per; i++ {
						tx, err := s.Begin(ctx)
						if err != nil {
							b.Error(err)
							return
						}
						tx.SetAttr(ctx, fmt.Sprintf("w/%d", w), i)
						tx.Enqueue(ctx, pillar.ExportRecord{Partition: 0, PageKey: key, Op: pillar.OpPut, Value: []byte("v")})
						if err := tx.Commit(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			cs := s.CommitStats()
			b.ReportMetric(float64(cs.Commits)/float64(max(cs.Groups, 1)), "tx/group")
			b.ReportMetric(float64(cs.Commits)/time.Since(start).Seconds(), "commits/s")
		})
	}
}
