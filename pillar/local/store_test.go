package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pillarkit/pillar/pillar"
)

var ctx = context.Background()

func mustCreate(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Create(dir, &Options{Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// snapshotOf takes a snapshot of s, released when the test ends.
func snapshotOf(t testing.TB, s *Store) pillar.Snapshot {
	t.Helper()
	sn, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sn.Release)
	return sn
}

func writeDocs(t testing.TB, tx pillar.Tx, table string, mode pillar.WriteMode, keys ...string) {
	t.Helper()
	w, err := tx.WriteTable(ctx, table, pillar.Doc{}, &pillar.WriteOptions{Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if err := w.Write(&pillar.Doc{PageKey: k, URL: "http://x/" + k, Text: "text of " + k}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func readKeys(t testing.TB, sn pillar.Snapshot, table string, r *pillar.Range) []string {
	t.Helper()
	rr, err := sn.ReadTable(ctx, table, r)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	var out []string
	for rr.Next() {
		var d pillar.Doc
		if err := rr.Scan(&d); err != nil {
			t.Fatal(err)
		}
		out = append(out, d.PageKey)
	}
	if err := rr.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestWriteReadReplaceAppend(t *testing.T) {
	s := mustCreate(t, t.TempDir())
	tx, _ := s.Begin(ctx)
	writeDocs(t, tx, "docs", pillar.Replace, "a", "b")
	writeDocs(t, tx, "docs", pillar.Replace, "c") // second file of the same table
	if err := tx.SetAttr(ctx, "answer", 42); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	sn, _ := s.Snapshot(ctx)
	if got := strings.Join(readKeys(t, sn, "docs", nil), ","); got != "a,b,c" {
		t.Fatalf("docs = %s", got)
	}
	if got := strings.Join(readKeys(t, sn, "docs", &pillar.Range{Start: 1, End: 3}), ","); got != "b,c" {
		t.Fatalf("range = %s", got)
	}
	var v int
	if err := sn.Attr(ctx, "answer", &v); err != nil || v != 42 {
		t.Fatalf("attr = %d %v", v, err)
	}
	tx, _ = s.Begin(ctx)
	writeDocs(t, tx, "docs", pillar.Append, "d")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	sn2, _ := s.Snapshot(ctx)
	if got := strings.Join(readKeys(t, sn2, "docs", nil), ","); got != "a,b,c,d" {
		t.Fatalf("after append = %s", got)
	}
	// The old snapshot still reads the old state.
	if got := strings.Join(readKeys(t, sn, "docs", nil), ","); got != "a,b,c" {
		t.Fatalf("old snapshot = %s", got)
	}
	// Skipping Scan still advances.
	rr, _ := sn2.ReadTable(ctx, "docs", nil)
	n := 0
	for rr.Next() {
		n++
	}
	rr.Close()
	if n != 4 {
		t.Fatalf("Next-only count %d", n)
	}
	info, err := sn2.Table(ctx, "docs")
	if err != nil || info.Rows != 4 || info.Files != 3 || !strings.Contains(info.Schema, "page_key:") {
		t.Fatalf("table info %+v %v", info, err)
	}
	if _, err := sn2.Table(ctx, "nope"); !errors.Is(err, pillar.ErrNotFound) {
		t.Fatalf("missing table: %v", err)
	}
	// Wrong row type on append is refused with the table named.
	tx, _ = s.Begin(ctx)
	if _, err := tx.WriteTable(ctx, "docs", pillar.Chunk{}, &pillar.WriteOptions{Mode: pillar.Append}); err == nil || !strings.Contains(err.Error(), `"docs"`) {
		t.Fatalf("append of other type: %v", err)
	}
	tx.Abort()
}

func TestQueueAndConsumed(t *testing.T) {
	s := mustCreate(t, t.TempDir())
	k, _, _ := pillar.KeyOfURL("http://example.com/")
	p := k.Partition(4)
	for i := 0; i < 3; i++ {
		tx, _ := s.Begin(ctx)
		if err := tx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(p), PageKey: k.String(), Op: pillar.OpPut, Value: []byte{byte(i)}},
			pillar.ExportRecord{Partition: int32(p), PageKey: k.String(), Op: pillar.OpDelete}); err != nil {
			t.Fatal(err)
		}
		tx.MarkConsumed(ctx, fmt.Sprintf("run-%d", i))
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sn, _ := s.Snapshot(ctx)
	end, _ := sn.QueueEnd(ctx, p)
	if end != 6 {
		t.Fatalf("queue end %d", end)
	}
	recs, err := sn.ReadQueue(ctx, p, 3, 2)
	if err != nil || len(recs) != 2 || recs[0].Offset != 3 || recs[1].Offset != 4 || recs[1].Value[0] != 2 {
		t.Fatalf("read queue: %+v %v", recs, err)
	}
	if ok, _ := sn.Consumed(ctx, "run-1"); !ok {
		t.Fatal("run-1 not consumed")
	}
	if ok, _ := sn.Consumed(ctx, "run-9"); ok {
		t.Fatal("run-9 consumed")
	}
	tx, _ := s.Begin(ctx)
	bad := []pillar.ExportRecord{
		{Partition: 9, PageKey: k.String(), Op: pillar.OpPut},
		{Partition: int32((p + 1) % 4), PageKey: k.String(), Op: pillar.OpPut},
		{Partition: int32(p), PageKey: "xyz", Op: pillar.OpPut},
		{Partition: int32(p), PageKey: k.String(), Op: "upsert"},
	}
	for _, r := range bad {
		if err := tx.Enqueue(ctx, r); err == nil {
			t.Errorf("bad record accepted: %+v", r)
		}
	}
	tx.Abort()
}

func TestConflictingWritersRefused(t *testing.T) {
	s := mustCreate(t, t.TempDir())
	a, _ := s.Begin(ctx)
	b, _ := s.Begin(ctx)
	writeDocs(t, a, "docs", pillar.Replace, "a")
	writeDocs(t, b, "docs", pillar.Replace, "b")
	if err := a.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	err := b.Commit(ctx)
	if !errors.Is(err, pillar.ErrConflict) || !strings.Contains(err.Error(), `"docs"`) {
		t.Fatalf("second writer: %v", err)
	}
	// Attributes: a compare-and-swap via ExpectAttr.
	c, _ := s.Begin(ctx)
	d, _ := s.Begin(ctx)
	c.SetAttr(ctx, "offset", 1)
	d.ExpectAttr(ctx, "offset")
	d.Enqueue(ctx)
	if err := c.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.Commit(ctx); !errors.Is(err, pillar.ErrConflict) {
		t.Fatalf("expect attr: %v", err)
	}
	// Disjoint changes both commit: queue appends never conflict.
	e, _ := s.Begin(ctx)
	f, _ := s.Begin(ctx)
	writeDocs(t, e, "chunks/x", pillar.Replace, "a")
	f.MarkConsumed(ctx, "id")
	if err := e.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	sn, _ := s.Snapshot(ctx)
	if got := strings.Join(readKeys(t, sn, "docs", nil), ","); got != "a" {
		t.Fatalf("docs = %s (the loser must not be merged)", got)
	}
	// No staging left behind.
	if ents, _ := os.ReadDir(filepath.Join(s.dir, "tx")); len(ents) != 0 {
		t.Fatalf("staging left: %v", ents)
	}
}

func TestConcurrentProcessesRefused(t *testing.T) {
	// Two processes write the same table from the same base: exactly one wins.
	if os.Getenv("PILLAR_LOCAL_CHILD") == "writer" {
		s, err := Open(os.Getenv("PILLAR_LOCAL_DIR"), nil)
		if err != nil {
			fmt.Println("open:", err)
			os.Exit(3)
		}
		tx, _ := s.Begin(ctx)
		writeDocs(t, tx, "docs", pillar.Replace, os.Getenv("PILLAR_LOCAL_KEY"))
		// Wait until the parent says go, so both began from the same base.
		for {
			if _, err := os.Stat(filepath.Join(os.Getenv("PILLAR_LOCAL_DIR"), "GO")); err == nil {
				break
			}
			syscall.Nanosleep(&syscall.Timespec{Nsec: 1e6}, nil) // don't spin: the sibling needs the CPU to begin
		}
		err = tx.Commit(ctx)
		if errors.Is(err, pillar.ErrConflict) {
			os.Exit(10)
		}
		if err != nil {
			fmt.Println(err)
			os.Exit(4)
		}
		os.Exit(0)
	}
	dir := t.TempDir()
	mustCreate(t, dir)
	var cmds []*exec.Cmd
	for _, k := range []string{"p1", "p2"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestConcurrentProcessesRefused$")
		cmd.Env = append(os.Environ(), "PILLAR_LOCAL_CHILD=writer", "PILLAR_LOCAL_DIR="+dir, "PILLAR_LOCAL_KEY="+k)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	// Give both time to begin, then release them together.
	waitFor(t, func() bool { ents, _ := os.ReadDir(filepath.Join(dir, "tx")); return len(ents) == 2 })
	os.WriteFile(filepath.Join(dir, "GO"), nil, 0o644)
	codes := map[int]int{}
	for _, c := range cmds {
		c.Wait()
		codes[c.ProcessState.ExitCode()]++
	}
	if codes[0] != 1 || codes[10] != 1 {
		t.Fatalf("exit codes %v: want one success and one conflict", codes)
	}
}

func waitFor(t *testing.T, f func() bool) {
	t.Helper()
	// Polled, not timed: two child test binaries (race-built) may take long to
	// start on a loaded 2-core machine; 3 minutes only bounds a hang.
	for i := 0; i < 36000; i++ {
		if f() {
			return
		}
		syscall.Nanosleep(&syscall.Timespec{Nsec: 5e6}, nil)
	}
	t.Fatal("timed out waiting")
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "missing"), nil); !errors.Is(err, pillar.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	if _, err := Open(dir, nil); !errors.Is(err, pillar.ErrNotStore) {
		t.Fatalf("not a store: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "STORE"), []byte(`{"format":99,"partitions":4}`), 0o644)
	if _, err := Open(dir, nil); !errors.Is(err, pillar.ErrNewerFormat) {
		t.Fatalf("newer: %v", err)
	}
	d2 := t.TempDir()
	mustCreate(t, d2)
	if _, err := Open(d2, &Options{Partitions: 8}); !errors.Is(err, pillar.ErrPartitions) {
		t.Fatalf("partitions: %v", err)
	}
	if _, err := Create(d2, &Options{Partitions: 4}); err == nil {
		t.Fatal("create over an existing store")
	}
}

// fullFS fails writes once more than limit bytes were written: a full disk.
type fullFS struct {
	OSFS
	limit   int64
	written *int64
}

type fullFile struct {
	*os.File
	fs fullFS
}

func (f fullFile) Write(b []byte) (int, error) {
	if *f.fs.written+int64(len(b)) > f.fs.limit {
		return 0, syscall.ENOSPC
	}
	*f.fs.written += int64(len(b))
	return f.File.Write(b)
}

func (fs fullFS) Create(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	return fullFile{f, fs}, nil
}

func TestFullDiskDuringCommit(t *testing.T) {
	dir := t.TempDir()
	s := mustCreate(t, dir)
	tx, _ := s.Begin(ctx)
	writeDocs(t, tx, "docs", pillar.Replace, "a", "b")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Every possible point: the disk fills after n bytes of the next commit.
	for limit := int64(0); limit < 200000; limit += 397 {
		var written int64
		fs := fullFS{limit: limit, written: &written}
		s2, err := Open(dir, &Options{FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		tx, _ := s2.Begin(ctx)
		w, err := tx.WriteTable(ctx, "docs", pillar.Doc{}, nil)
		if err == nil {
			w.Write(&pillar.Doc{PageKey: "z", Text: strings.Repeat("x", 3000)})
			err = w.Close()
		}
		tx.Enqueue(ctx)
		if err == nil {
			err = tx.Commit(ctx)
		} else {
			tx.Abort()
		}
		s3, oerr := Open(dir, nil)
		if oerr != nil {
			t.Fatalf("limit %d: reopen: %v", limit, oerr)
		}
		sn, _ := s3.Snapshot(ctx)
		got := strings.Join(readKeys(t, sn, "docs", nil), ",")
		if err != nil {
			if got != "a,b" {
				t.Fatalf("limit %d: commit failed (%v) but state is %q", limit, err, got)
			}
			if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "no space left on device") {
				t.Fatalf("limit %d: error does not say (and wrap) that the disk is full: %v", limit, err)
			}
			if ents, _ := os.ReadDir(filepath.Join(dir, "tx")); len(ents) != 0 {
				t.Fatalf("limit %d: staging left behind after a failed commit: %d dirs", limit, len(ents))
			}
			continue
		}
		if got != "z" {
			t.Fatalf("limit %d: commit succeeded but state is %q", limit, got)
		}
		return // the commit fit: done
	}
	t.Fatal("commit never fit in 200000 bytes")
}

// A commit waiting for the commit lock gives up when its context ends, and
// the error says why (errors.Is finds the context's error).
func TestCommitLockWaitCanceled(t *testing.T) {
	s := mustCreate(t, t.TempDir())
	tx, _ := s.Begin(ctx)
	unlock, err := s.lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writeDocs(t, tx, "docs", pillar.Replace, "a")
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err = tx.Commit(cctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("commit while another holds the lock: %v, want context.DeadlineExceeded", err)
	}
	unlock()
	sn, _ := s.Snapshot(ctx)
	if _, err := sn.Table(ctx, "docs"); !errors.Is(err, pillar.ErrNotFound) {
		t.Fatalf("docs after a canceled commit: %v", err)
	}
}

// The kill -9 test: a child process commits and SIGKILLs itself at the n-th
// step of the commit; the parent reopens and checks the state is the old or
// the new one, whole, and that cleanup leaves no unreferenced files.
func TestKillDuringCommit(t *testing.T) {
	if os.Getenv("PILLAR_LOCAL_CHILD") == "crash" {
		s, err := Open(os.Getenv("PILLAR_LOCAL_DIR"), &Options{crashAt: crashChild()})
		if err != nil {
			os.Exit(3)
		}
		commitGeneration(t, s, "new")
		os.Exit(0)
	}
	tmpl := t.TempDir()
	commitGeneration(t, mustCreate(t, tmpl), "old")
	sawOld, sawNew := false, false
	steps := crashPoints(t, "TestKillDuringCommit", "crash", tmpl, 30, func(n int, dir string, killed bool, out []byte) {
		s2, err := Open(dir, nil)
		if err != nil {
			t.Fatalf("step %d: reopen: %v\n%s", n, err, out)
		}
		state := checkGeneration(t, s2)
		if state == "new" {
			sawNew = true
		} else {
			sawOld = true
		}
		checkNoOrphans(t, dir)
		if !killed && state != "new" {
			t.Fatalf("step %d: child finished but state is %s", n, state)
		}
	})
	if !sawOld || !sawNew {
		t.Fatalf("crash points covered old=%v new=%v", sawOld, sawNew)
	}
	t.Logf("killed at %d commit steps; both outcomes seen", steps)
}

// commitGeneration writes tag into a table (two files), an attribute and the
// queue, in one transaction.
func commitGeneration(t *testing.T, s *Store, tag string) {
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writeDocs(t, tx, "docs", pillar.Replace, tag+"1", tag+"2")
	writeDocs(t, tx, "chunks/v", pillar.Replace, tag)
	tx.SetAttr(ctx, "tag", tag)
	k, _, _ := pillar.KeyOfURL("http://example.com/" + tag)
	tx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(k.Partition(4)), PageKey: k.String(), Op: pillar.OpPut, Cause: tag})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

func checkGeneration(t *testing.T, s *Store) string {
	sn, _ := s.Snapshot(ctx)
	var tag string
	if err := sn.Attr(ctx, "tag", &tag); err != nil {
		t.Fatal(err)
	}
	docs := strings.Join(readKeys(t, sn, "docs", nil), ",")
	chunks := strings.Join(readKeys(t, sn, "chunks/v", nil), ",")
	if docs != tag+"1,"+tag+"2" || chunks != tag {
		t.Fatalf("mixed state: attr %s, docs %s, chunks %s", tag, docs, chunks)
	}
	return tag
}

func checkNoOrphans(t *testing.T, dir string) {
	t.Helper()
	ents, _ := os.ReadDir(filepath.Join(dir, "tx"))
	if len(ents) != 0 {
		t.Fatalf("staging dirs left after reopen: %d", len(ents))
	}
	// Opening runs cleanup; what it leaves must all be referenced.
	if _, err := Open(dir, nil); err != nil {
		t.Fatal(err)
	}
	keep := map[string]bool{}
	mans, _ := os.ReadDir(filepath.Join(dir, "manifests"))
	for _, m := range mans {
		b, _ := os.ReadFile(filepath.Join(dir, "manifests", m.Name()))
		mf, err := decodeManifest(b, m.Name())
		if err != nil {
			t.Fatalf("manifest %s: %v", m.Name(), err)
		}
		for _, f := range namedFiles(t, dir, mf) {
			keep[f] = true
		}
	}
	data, _ := os.ReadDir(filepath.Join(dir, "data"))
	for _, d := range data {
		if !keep[d.Name()] {
			t.Fatalf("unreferenced data file %s survived cleanup", d.Name())
		}
	}
}

// namedFiles is every data file m names, the segments its index files
// list included (read with a Store of its own).
func namedFiles(t testing.TB, dir string, m *manifest) []string {
	t.Helper()
	s := &Store{dir: dir}
	s.opts.ensureDefaults()
	keep := map[string]bool{}
	for _, f := range m.files() {
		keep[f] = true
	}
	if err := s.indexedFiles(ctx, []*manifest{m}, keep); err != nil {
		t.Fatal(err)
	}
	out := make([]string, 0, len(keep))
	for f := range keep {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// BenchmarkSmallCommit measures a Lorry-sized commit (one attribute, one
// queue record) against a store with a few tables, next to the floor: the
// fsyncs a commit needs (data dir, manifest, CURRENT, store dir).
func BenchmarkSmallCommit(b *testing.B) {
	dir := b.TempDir()
	s, _ := Create(dir, &Options{Partitions: 8})
	tx, _ := s.Begin(ctx)
	for i := 0; i < 20; i++ {
		writeDocs(b, tx, fmt.Sprintf("t/%d", i), pillar.Replace, "a", "b")
	}
	tx.Commit(ctx)
	k, _, _ := pillar.KeyOfURL("http://example.com/")
	b.Run("commit", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			tx, _ := s.Begin(ctx)
			tx.SetAttr(ctx, "lorry/p", i)
			tx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(k.Partition(8)), PageKey: k.String(), Op: pillar.OpPut})
			if err := tx.Commit(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("floor-4-fsyncs", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			for j := 0; j < 4; j++ {
				f, _ := os.Create(filepath.Join(dir, "floor"))
				f.Write([]byte("x"))
				f.Sync()
				f.Close()
			}
		}
	})
}

// TestClosedStoreRefuses: after Close, Begin and Snapshot fail with
// ErrClosed naming the store; a snapshot taken before stays readable and a
// transaction begun before still commits.
func TestClosedStoreRefuses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s := mustCreate(t, dir)
	commitDocs(t, s, "a", 2)
	sn := snapshotOf(t, s)
	tx2, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writeDocs(t, tx2, "docs", pillar.Append, "c")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func() error{
		"Begin":    func() error { _, err := s.Begin(ctx); return err },
		"Snapshot": func() error { _, err := s.Snapshot(ctx); return err },
	} {
		err := f()
		if !errors.Is(err, ErrClosed) || !strings.Contains(fmt.Sprint(err), dir) {
			t.Errorf("%s after Close: %v, want ErrClosed naming %s", name, err, dir)
		}
	}
	if err := tx2.Commit(ctx); err != nil {
		t.Fatalf("a transaction begun before Close: %v", err)
	}
	if n := len(readKeys(t, sn, "docs", nil)); n != 2 {
		t.Fatalf("snapshot taken before Close reads %d rows, want 2", n)
	}
	r, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if n := len(readKeys(t, snapshotOf(t, r), "docs", nil)); n != 3 {
		t.Fatalf("reopened: %d rows, want 3", n)
	}
}
