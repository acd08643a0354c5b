package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pillarkit/pillar/pillar"
)

// TestCompactionKeepsLeasedFiles: with retention cut to nothing but
// leases, a snapshot opened before a compaction — and a reader in the
// middle of its rows — keeps reading the folded layers after the
// compaction, more commits and cleanups; once it is released, the next
// cleanup removes the superseded files.
func TestCompactionKeepsLeasedFiles(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "store")
	st, err := Create(dir, &Options{Partitions: 4, RetainManifests: 1, RetainFor: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	keys := make([]string, 300)
	for i := range keys {
		k, _, _ := pillar.KeyOfURL(fmt.Sprintf("http://lease.example/%d", i))
		keys[i] = k.String()
	}
	slices.Sort(keys)
	delta := func(tag string, puts []string, dels []string) {
		tx, err := st.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w, err := pillar.WriteDelta(ctx, tx, "docs", pillar.Doc{}, -1)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range puts {
			if err := w.Put(&pillar.Doc{PageKey: k, Title: tag}); err != nil {
				t.Fatal(err)
			}
		}
		for _, k := range dels {
			if err := w.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	delta("base", keys[:250], nil)
	delta("d1", keys[240:260], keys[:10])
	delta("d2", keys[100:110], keys[260:262])

	sn, err := st.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var layerFiles []string
	for name, te := range sn.(*snapshot).m.Tables {
		if _, _, _, ok := pillar.IsLayerTable(name); ok {
			for _, f := range te.Files {
				layerFiles = append(layerFiles, filepath.Join(dir, "data", f.Name))
			}
		}
	}
	if len(layerFiles) < 3 {
		t.Fatalf("layer files: %v", layerFiles)
	}
	read := func(rr pillar.RowReader, n int) []string {
		var out []string
		for (n < 0 || len(out) < n) && rr.Next() {
			var d pillar.Doc
			if err := rr.Scan(&d); err != nil {
				t.Fatal(err)
			}
			out = append(out, d.PageKey+" "+d.Title)
		}
		if err := rr.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	all, _ := sn.ReadTable(ctx, "docs", nil)
	want := read(all, -1)
	all.Close()
	if len(want) != 250 { // 250 + 10 new - 10 deleted; 2 deleted keys were never there
		t.Fatalf("merged rows: %d, want 250", len(want))
	}
	mid, err := sn.ReadTable(ctx, "docs", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mid.Close()
	got := read(mid, 100)

	cs, err := pillar.Compact(ctx, st, "docs", nil)
	if err != nil || cs.Layers != 2 || cs.Rows != 250 {
		t.Fatalf("compact: %+v %v", cs, err)
	}
	for i := 0; i < 3; i++ {
		tx, _ := st.Begin(ctx)
		tx.SetAttr(ctx, "churn", i)
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	for _, f := range layerFiles {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("a file of a leased snapshot was removed: %v", err)
		}
	}
	// The reader in the middle goes on; the snapshot reads as before.
	got = append(got, read(mid, -1)...)
	if !slices.Equal(got, want) {
		t.Fatal("a reader across the compaction read other rows")
	}
	again, _ := sn.ReadTable(ctx, "docs", nil)
	if g := read(again, -1); !slices.Equal(g, want) {
		t.Fatal("the old snapshot reads other rows after the compaction")
	}
	again.Close()
	// The new state reads the same rows from one base.
	now, _ := st.Snapshot(ctx)
	nr, _ := now.ReadTable(ctx, "docs", nil)
	if g := read(nr, -1); !slices.Equal(g, want) {
		t.Fatal("the compacted docs read other rows")
	}
	nr.Close()
	now.Release()

	mid.Close()
	sn.Release()
	if _, err := st.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	for _, f := range layerFiles {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Fatalf("superseded layer file %s is still there after release and cleanup (%v)", f, err)
		}
	}
}

// layeredStore makes a store whose docs has a 300-row base and two deltas
// (puts and deletes) and returns the merged rows.
func layeredStore(t *testing.T, dir string, opts *Options) (*Store, []string) {
	t.Helper()
	st, err := Create(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 320)
	for i := range keys {
		k, _, _ := pillar.KeyOfURL(fmt.Sprintf("http://crash.example/%d", i))
		keys[i] = k.String()
	}
	slices.Sort(keys)
	for i, d := range []struct {
		puts, dels []string
	}{{keys[:300], nil}, {keys[290:310], keys[:20]}, {keys[50:60], keys[305:307]}} {
		tx, err := st.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w, err := pillar.WriteDelta(ctx, tx, "docs", pillar.Doc{}, -1)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range d.puts {
			if err := w.Put(&pillar.Doc{PageKey: k, Title: fmt.Sprint("layer ", i)}); err != nil {
				t.Fatal(err)
			}
		}
		for _, k := range d.dels {
			if err := w.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return st, mergedDocs(t, st)
}

func mergedDocs(t *testing.T, st *Store) []string {
	t.Helper()
	sn, err := st.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	rr, err := sn.ReadTable(ctx, "docs", nil)
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
		out = append(out, d.PageKey+" "+d.Title)
	}
	if err := rr.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func docsDeltas(t *testing.T, st *Store) int {
	t.Helper()
	sn, err := st.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	ls, err := pillar.Layers(ctx, sn, "docs")
	if err != nil {
		t.Fatal(err)
	}
	return pillar.Deltas(ls)
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.Walk(from, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if fi.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCompactCrashPoints kills (SIGKILL) a compaction in a child process at
// each of its named points and at each step of its commit, and checks that
// the store is then either as before (base + 2 deltas) or as after (one
// base), reads the same rows either way, verifies clean, keeps no orphan
// file after the next open's cleanup, and that a re-run completes.
func TestCompactCrashPoints(t *testing.T) {
	if spec := os.Getenv("PILLAR_COMPACT_CRASH"); spec != "" {
		var dir, point string
		var step int
		fmt.Sscanf(spec, "%s %s %d", &dir, &point, &step)
		n := 0
		st, err := Open(dir, &Options{crashAt: func(s string) {
			if n++; step > 0 && n == step {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		}})
		if err != nil {
			os.Exit(3)
		}
		pillar.Compact(ctx, st, "docs", &pillar.CompactOptions{Point: func(p string) {
			if p == point {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		}})
		os.Exit(4) // not killed
	}
	base := filepath.Join(t.TempDir(), "base")
	st, want := layeredStore(t, base, &Options{Partitions: 4})
	st.Close()
	type crash struct {
		point string
		step  int
	}
	var crashes []crash
	for _, p := range []string{"begun", "writing", "written", "committed", "collected"} {
		crashes = append(crashes, crash{p, 0})
	}
	for s := 1; s <= 8; s++ {
		crashes = append(crashes, crash{"-", s})
	}
	sawBefore, sawAfter := false, false
	for _, c := range crashes {
		name := c.point
		if c.step > 0 {
			name = fmt.Sprintf("commit-step-%d", c.step)
		}
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "store")
			copyTree(t, base, dir)
			cmd := exec.Command(os.Args[0], "-test.run=^TestCompactCrashPoints$")
			cmd.Env = append(os.Environ(), fmt.Sprintf("PILLAR_COMPACT_CRASH=%s %s %d", dir, c.point, c.step))
			out, _ := cmd.CombinedOutput()
			ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if !ws.Signaled() {
				if c.step > 0 && ws.ExitStatus() == 4 {
					t.Skipf("the compaction's commit has fewer than %d steps", c.step)
				}
				t.Fatalf("child was not killed at %s: %v\n%s", name, cmd.ProcessState, out)
			}
			st, err := Open(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			switch d := docsDeltas(t, st); {
			case d == 2:
				sawBefore = true
				if c.point == "committed" || c.point == "collected" {
					t.Fatalf("killed after the commit (%s), but docs still has its deltas", name)
				}
			case d == 0:
				sawAfter = true
				if c.point == "begun" || c.point == "writing" || c.point == "written" {
					t.Fatalf("killed before the commit (%s), but docs is compacted", name)
				}
			default:
				t.Fatalf("killed at %s: docs has %d deltas, want 2 (before) or 0 (after)", name, d)
			}
			if got := mergedDocs(t, st); !slices.Equal(got, want) {
				t.Fatalf("killed at %s: docs reads %d rows, other than the %d before", name, len(got), len(want))
			}
			rep, err := st.Verify(ctx, nil)
			if err != nil || len(rep.Problems) != 0 {
				t.Fatalf("verify after the kill at %s: %+v %v", name, rep, err)
			}
			checkNoOrphans(t, dir)
			if _, err := pillar.Compact(ctx, st, "docs", nil); err != nil {
				t.Fatalf("re-run after the kill at %s: %v", name, err)
			}
			if d := docsDeltas(t, st); d != 0 {
				t.Fatalf("after the re-run docs has %d deltas", d)
			}
			if got := mergedDocs(t, st); !slices.Equal(got, want) {
				t.Fatal("after the re-run docs reads other rows")
			}
		})
	}
	if !sawBefore || !sawAfter {
		t.Errorf("crash outcomes seen: before %v, after %v; want both", sawBefore, sawAfter)
	}
}

// TestCompactDiskFull: a disk that fills during a compaction — at any
// point of the new base's write or the commit — gives an error naming the
// table and the space needed; docs reads as before (still layered) and
// the compaction succeeds once there is room.
func TestCompactDiskFull(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	st, want := layeredStore(t, dir, &Options{Partitions: 4})
	st.Close()
	for limit := int64(0); ; limit += 1531 {
		var written int64
		s, err := Open(dir, &Options{FS: fullFS{limit: limit, written: &written}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = pillar.Compact(ctx, s, "docs", nil)
		s.Close()
		s, oerr := Open(dir, nil)
		if oerr != nil {
			t.Fatalf("limit %d: reopen: %v", limit, oerr)
		}
		if got := mergedDocs(t, s); !slices.Equal(got, want) {
			t.Fatalf("limit %d: docs reads %d rows after a compaction on a full disk, want %d", limit, len(got), len(want))
		}
		if err == nil {
			if d := docsDeltas(t, s); d != 0 {
				t.Fatalf("limit %d: compaction succeeded, %d deltas left", limit, d)
			}
			s.Close()
			t.Logf("the compaction fit in %d bytes", limit)
			return
		}
		if d := docsDeltas(t, s); d != 2 {
			t.Fatalf("limit %d: a failed compaction left %d deltas, want 2", limit, d)
		}
		s.Close()
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("limit %d: %v, want ENOSPC", limit, err)
		}
		for _, w := range []string{"disk full", "table docs", "needs about", dir} {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("limit %d: the error does not say %q: %v", limit, w, err)
			}
		}
		if limit == 0 {
			t.Logf("the error: %v", err)
		}
		if limit > 1<<20 {
			t.Fatal("the compaction never fit")
		}
	}
}

// TestAutoCompactMissingTable: the pipeline calls AutoCompact after every
// operation, on tables the operation may not have written yet (the demo's
// first round has no export/state); a table that does not exist has
// nothing to fold, which is not a failure. A store that cannot be read
// (its directory gone) still is.
func TestAutoCompactMissingTable(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "store")
	st := mustCreate(t, dir)
	defer st.Close()
	cs, err := pillar.AutoCompact(ctx, st, "export/state", nil)
	if err != nil || cs != nil {
		t.Fatalf("AutoCompact of a missing table = %v, %v; want nil, nil", cs, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := pillar.AutoCompact(ctx, st, "export/state", nil); err == nil || errors.Is(err, pillar.ErrNotFound) {
		t.Fatalf("AutoCompact on a store whose directory is gone: %v; want an error other than ErrNotFound", err)
	}
}
