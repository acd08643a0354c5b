package local

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pillarkit/pillar/pillar"
)

// fakeClock is the Options.Now of these tests: time moves only by advance.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }
func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}
func (c *fakeClock) advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

func leaseOpts(c *fakeClock) *Options {
	return &Options{Partitions: 4, Now: c.Now, RetainManifests: 1, RetainFor: time.Minute}
}

func keysN(tag string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%04d", tag, i)
	}
	return out
}

func commitDocs(t testing.TB, s *Store, tag string, n int) {
	t.Helper()
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writeDocs(t, tx, "docs", pillar.Replace, keysN(tag, n)...)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

func filesOf(t *testing.T, s *Store, gen int64) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.dir, "manifests", manifestName(gen)))
	if err != nil {
		t.Fatalf("manifest of generation %d: %v", gen, err)
	}
	m, err := decodeManifest(b, manifestName(gen))
	if err != nil {
		t.Fatal(err)
	}
	return namedFiles(t, s.dir, m)
}

func allExist(dir string, files []string) bool {
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(dir, "data", f)); err != nil {
			return false
		}
	}
	return true
}

// churn replaces docs n times, hours apart on the fake clock, with a
// cleanup after each commit: without a lease, every older generation's
// files would go.
func churn(t *testing.T, s *Store, c *fakeClock, n int) CleanupStats {
	t.Helper()
	var cs CleanupStats
	for i := 0; i < n; i++ {
		c.advance(2 * time.Hour)
		commitDocs(t, s, fmt.Sprintf("g%d-", i), 3)
		var err error
		if cs, err = s.Cleanup(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return cs
}

// leaseStore is a store on a fake clock with n docs committed.
func leaseStore(t *testing.T, n int) (*Store, *fakeClock, string) {
	t.Helper()
	c := newFakeClock()
	dir := t.TempDir()
	s, err := Create(dir, leaseOpts(c))
	if err != nil {
		t.Fatal(err)
	}
	commitDocs(t, s, "a", n)
	return s, c, dir
}

// childCmd re-runs the test binary as a child process running test in the
// given mode on the store in dir.
func childCmd(test, mode, dir string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$")
	cmd.Env = append(os.Environ(), "PILLAR_LOCAL_CHILD="+mode, "PILLAR_LOCAL_DIR="+dir)
	return cmd
}

// countDocs reads every row of docs.
func countDocs(sn pillar.Snapshot) (int, error) {
	rr, err := sn.ReadTable(ctx, "docs", nil)
	if err != nil {
		return 0, err
	}
	defer rr.Close()
	n := 0
	for rr.Next() {
		var d pillar.Doc
		if err := rr.Scan(&d); err != nil {
			return n, err
		}
		n++
	}
	return n, rr.Err()
}

// In one process: a snapshot (and a transaction) keeps every file of its
// generation through commits and cleanups hours later on the clock; the
// snapshots of one generation share a lease, and the files go when the last
// is released.
func TestLeasedSnapshotKeepsItsFiles(t *testing.T) {
	c := newFakeClock()
	s, err := Create(t.TempDir(), leaseOpts(c))
	if err != nil {
		t.Fatal(err)
	}
	commitDocs(t, s, "a", 50)
	gen := s.Info().Generation
	files := filesOf(t, s, gen)
	sn1, _ := s.Snapshot(ctx)
	sn2, _ := s.Snapshot(ctx)
	tx, _ := s.Begin(ctx)
	if ls, _ := s.Leases(); len(ls) != 1 || ls[0].Generation != gen || ls[0].PID != os.Getpid() {
		t.Fatalf("leases %+v, want one of generation %d (shared by both snapshots and the Tx)", ls, gen)
	}

	cs := churn(t, s, c, 5)
	if cs.Leased != 1 || !allExist(s.dir, files) {
		t.Fatalf("after churn: %+v; leased files present: %v", cs, allExist(s.dir, files))
	}
	if got := readKeys(t, sn1, "docs", nil); strings.Join(got, ",") != strings.Join(keysN("a", 50), ",") {
		t.Fatalf("leased snapshot reads %d keys", len(got))
	}
	if got := readKeys(t, tx, "docs", &pillar.Range{Start: 40, End: 50}); len(got) != 10 {
		t.Fatalf("Tx reads %d keys of its Begin state", len(got))
	}
	// The generations between were not leased: gone (RetainManifests 1),
	// but for the one the last commit replaced (within RetainFor of it).
	mans, _ := os.ReadDir(filepath.Join(s.dir, "manifests"))
	if len(mans) != 3 {
		t.Fatalf("%d manifests kept, want 3 (current, just replaced, leased)", len(mans))
	}

	sn1.Release()
	sn1.Release() // twice is harmless: the other holders keep the lease
	tx.Abort()
	if _, err := s.Cleanup(ctx); err != nil || !allExist(s.dir, files) {
		t.Fatalf("files removed while sn2 still holds the lease (%v)", err)
	}
	sn2.Release()
	cs, err = s.Cleanup(ctx)
	if err != nil || cs.Leased != 0 || allExist(s.dir, files) {
		t.Fatalf("after the last release: %+v %v; files still there: %v", cs, err, allExist(s.dir, files))
	}
	if ls, _ := s.Leases(); len(ls) != 0 {
		t.Fatalf("leases after release: %+v", ls)
	}
}

// Across processes: a child process holds a snapshot while the parent
// commits and cleans up for hours of (fake) time; the child then reads
// every row. When the child is killed (kill -9) without releasing, the
// next cleanup reclaims its lease and the files.
func TestLeaseAcrossProcesses(t *testing.T) {
	if os.Getenv("PILLAR_LOCAL_CHILD") == "lease" {
		leaseChild()
		return
	}
	s, c, dir := leaseStore(t, 200)
	gen := s.Info().Generation
	files := filesOf(t, s, gen)

	cmd := childCmd("TestLeaseAcrossProcesses", "lease", dir)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(stdout)
	expect := func(prefix string) string {
		t.Helper()
		for lines.Scan() {
			if l := lines.Text(); strings.HasPrefix(l, prefix) {
				return l
			}
		}
		t.Fatalf("child ended before saying %q", prefix)
		return ""
	}
	if l := expect("ready "); l != fmt.Sprintf("ready %d", gen) {
		t.Fatalf("child: %q, want a snapshot of generation %d", l, gen)
	}
	cs := churn(t, s, c, 6)
	if cs.Leased != 1 || !allExist(dir, files) {
		t.Fatalf("cleanup with a reader in another process: %+v; its files present: %v", cs, allExist(dir, files))
	}
	fmt.Fprintln(stdin, "read")
	if l := expect("rows "); l != "rows 200" {
		t.Fatalf("child read %q after the churn, want rows 200", l)
	}
	// kill -9: the lease is never released; the kernel drops its flock.
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	cs, err := s.Cleanup(ctx)
	if err != nil || cs.DeadLeases != 1 || cs.Leased != 0 || allExist(dir, files) {
		t.Fatalf("cleanup after the reader died: %+v %v; files still there: %v", cs, err, allExist(dir, files))
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "leases")); len(ents) != 0 {
		t.Fatalf("%d lease files left", len(ents))
	}
}

// leaseChild: take a snapshot, say so, wait for "read", read every row of
// docs, say how many, and wait to be killed.
func leaseChild() {
	s, err := Open(os.Getenv("PILLAR_LOCAL_DIR"), nil)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(3)
	}
	sn, err := s.Snapshot(ctx)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(3)
	}
	fmt.Printf("ready %d\n", sn.Info().Generation)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() != "read" {
			continue
		}
		n, err := countDocs(sn)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(3)
		}
		fmt.Printf("rows %d\n", n)
	}
	select {} // hold the lease until killed
}

// The window between reading CURRENT and locking the lease file is under
// the shared LOCK, so no commit or cleanup (exclusive LOCK, any process)
// can run in it: the deterministic counterpart of TestSnapshotsRaceCleanup,
// which catches a missing lock only when the race happens to hit.
func TestLeaseWindowHoldsSharedLock(t *testing.T) {
	s, _, dir := leaseStore(t, 5)
	checked := 0
	testHookLeaseWindow = func(*Store) {
		checked++
		f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_RDWR, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		switch err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); {
		case err == nil:
			_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
			t.Error("the commit lock could be taken exclusively between reading CURRENT and taking the lease: a cleanup there removes the files of the generation being leased")
		case !errors.Is(err, syscall.EWOULDBLOCK):
			t.Errorf("flock LOCK: %v", err)
		}
	}
	defer func() { testHookLeaseWindow = nil }()
	sn, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sn.Release()
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx.Abort()
	if checked != 2 {
		t.Fatalf("the lease window ran %d times for a snapshot and a Tx, want 2", checked)
	}
}

// Snapshots taken and read in a loop by another process while this one
// commits and cleans up as fast as it can (every older generation is
// unprotected but for leases): no read ever misses a file. This is the
// window the shared LOCK closes, between reading CURRENT and locking the
// lease file.
func TestSnapshotsRaceCleanup(t *testing.T) {
	if os.Getenv("PILLAR_LOCAL_CHILD") == "race" {
		raceChild()
		return
	}
	s, c, dir := leaseStore(t, 20)
	cmd := childCmd("TestSnapshotsRaceCleanup", "race", dir)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	commits := 0
loop:
	for {
		select {
		case <-done:
			break loop
		default:
		}
		c.advance(time.Hour)
		commitDocs(t, s, fmt.Sprintf("g%d-", commits), 20)
		if _, err := s.Cleanup(ctx); err != nil {
			t.Fatal(err)
		}
		commits++
	}
	if !strings.Contains(out.String(), "reads ok") {
		t.Fatalf("reader in another process, during %d commits and cleanups:\n%s", commits, out.String())
	}
	t.Logf("%d commits and cleanups; %s", commits, strings.TrimSpace(out.String()))
}

func raceChild() {
	s, err := Open(os.Getenv("PILLAR_LOCAL_DIR"), nil)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(3)
	}
	n := 0
	for end := time.Now().Add(time.Second); time.Now().Before(end); n++ {
		sn, err := s.Snapshot(ctx)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(3)
		}
		rows, err := countDocs(sn)
		if err != nil {
			fmt.Println("error: generation", sn.Info().Generation, err)
			os.Exit(3)
		}
		sn.Release()
		if rows != 20 {
			fmt.Println("error: rows", rows)
			os.Exit(3)
		}
	}
	fmt.Printf("reads ok: %d snapshots\n", n)
	os.Exit(0)
}

// BenchmarkSnapshotLease: Snapshot + Release of a new generation each time
// (the slow path: shared LOCK, create and flock a lease file, remove it),
// of a generation this process already leases (the reference count), and
// the floor: reading CURRENT and the cached manifest, which is all a
// snapshot cost before leases.
func BenchmarkSnapshotLease(b *testing.B) {
	s, _ := Create(b.TempDir(), &Options{Partitions: 4})
	commitDocs(b, s, "a", 1)
	b.Run("first-lease", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			sn, err := s.Snapshot(ctx)
			if err != nil {
				b.Fatal(err)
			}
			sn.Release()
		}
	})
	b.Run("shared-lease", func(b *testing.B) {
		hold, _ := s.Snapshot(ctx)
		defer hold.Release()
		for i := 0; i < b.N; i++ {
			sn, _ := s.Snapshot(ctx)
			sn.Release()
		}
	})
	b.Run("floor-read-current", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := s.current(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Another process's cleanup that runs while a Begin has made its staging
// directory but not yet locked it leaves that staging alone: the
// transaction writes and commits. (Made in place under its own name, the
// staging had a free lock at that moment and was removed as a dead
// transaction's: TestSnapshotsRaceCleanup failed so now and then.)
func TestCleanupSparesStagingBeingMade(t *testing.T) {
	dir := t.TempDir()
	s := mustCreate(t, dir)
	defer s.Close()
	other, err := Open(dir, nil) // another store on the directory: its own lock files, as another process
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ran := 0
	beginMadeHook = func(string) {
		ran++
		if _, err := other.Cleanup(ctx); err != nil {
			t.Error(err)
		}
	}
	defer func() { beginMadeHook = nil }()
	commitDocs(t, s, "a-", 20)
	if ran == 0 {
		t.Fatal("the hook did not run: Begin no longer makes its staging through it")
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "tx"))
	if len(ents) != 0 {
		t.Fatalf("staging left after the commit: %v", ents)
	}
}
