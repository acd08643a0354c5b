package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/local"
)

var fixedNow = func() time.Time { return time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC) }

// crashCorpus writes the base corpus (200 pages) and an update folder (20
// changed pages, 10 new) and returns their folders.
func crashCorpus(t *testing.T) (base, update string) {
	base, update = t.TempDir(), t.TempDir()
	body := strings.Repeat("the quick brown fox jumps over the lazy dog ", 40)
	for i := 0; i < 200; i++ {
		write(t, base, fmt.Sprintf("d%d/p%03d.txt", i%5, i), []byte(fmt.Sprintf("# Page %d\n\n%s %d", i, body, i)))
		if i%10 == 3 {
			write(t, update, fmt.Sprintf("d%d/p%03d.txt", i%5, i), []byte(fmt.Sprintf("# Page %d\n\nchanged %d", i, i)))
		}
	}
	for i := 200; i < 210; i++ {
		write(t, update, fmt.Sprintf("d%d/p%03d.txt", i%5, i), []byte(fmt.Sprintf("# Page %d\n\nnew %d %s", i, i, body)))
	}
	return base, update
}

func docsOf(t *testing.T, dir string) []pillar.Doc {
	t.Helper()
	st, err := local.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	return storeDocs(t, st)
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		out, err := os.Create(dst)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, src); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestIngestCrashPoints kills (SIGKILL) an ingest in a child process at each
// point of the run — while reading and cleaning, after the spill, in the
// middle of the merge, after the new docs table is written, after the
// commit — and checks that the store holds exactly the state before or
// after the ingest, that a re-run completes to the state after, and that
// the kill left no spill files behind once the re-run is done.
func TestIngestCrashPoints(t *testing.T) {
	if spec := os.Getenv("PILLAR_INGEST_CRASH"); spec != "" {
		parts := strings.Split(spec, "|")
		dir, from, point := parts[0], parts[1], parts[2]
		st, err := local.Open(dir, nil)
		if err != nil {
			os.Exit(3)
		}
		opts := Options{From: from, Now: fixedNow, MemoryLimit: 1, Workers: 2, TempDir: os.Getenv("PILLAR_INGEST_TMP"),
			crashAt: func(p string) {
				if p == point {
					syscall.Kill(os.Getpid(), syscall.SIGKILL)
				}
			}}
		Run(context.Background(), st, opts)
		os.Exit(4) // the point was not reached
	}
	base, update := crashCorpus(t)
	crashPoints(t, base, update)
}

// TestIngestCrashPointsWARC is TestIngestCrashPoints with the pages in
// WARC files: a kill at any point leaves the store as before or as after,
// and a re-run completes.
func TestIngestCrashPointsWARC(t *testing.T) {
	base, update := crashCorpus(t)
	crashPoints(t, warcOfFolder(t, base), warcOfFolder(t, update))
}

// warcOfFolder writes the text files of dir as one gzipped WARC of
// response records and returns its path.
func warcOfFolder(t *testing.T, dir string) string {
	var recs []warcRec
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		body := string(b)
		recs = append(recs, warcRec{typ: "response", uri: "https://crash.test/" + filepath.ToSlash(rel), date: day1,
			http: "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\n\r\n" + body})
		return nil
	})
	p, _ := writeWARC(t, "crawl.warc.gz", true, recs...)
	return p
}

// crashPoints kills an ingest of update into a store holding base at each
// crash point and checks the store and a re-run.
func crashPoints(t *testing.T, base, update string) {
	before := filepath.Join(t.TempDir(), "before")
	st, err := local.Create(before, &local.Options{Partitions: 8})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), st, Options{From: base, Now: fixedNow}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	wantBefore := docsOf(t, before)
	after := filepath.Join(t.TempDir(), "after")
	copyDir(t, before, after)
	st, err = local.Open(after, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := Run(context.Background(), st, Options{From: update, Now: fixedNow}); err != nil || s.Changed != 20 || s.New != 10 {
		t.Fatalf("clean update: %+v %v", s, err)
	}
	st.Close()
	wantAfter := docsOf(t, after)

	for _, point := range []string{"reading", "spilled", "merging", "merged", "closed", "committed"} {
		t.Run(point, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "store")
			copyDir(t, before, dir)
			tmp := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestIngestCrashPoints$")
			cmd.Env = append(os.Environ(), "PILLAR_INGEST_CRASH="+dir+"|"+update+"|"+point, "PILLAR_INGEST_TMP="+tmp)
			out, _ := cmd.CombinedOutput()
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
				t.Fatalf("child was not killed at %q: %v\n%s", point, cmd.ProcessState, out)
			}
			got := docsOf(t, dir)
			switch {
			case slices.Equal(got, wantBefore):
				if point == "committed" {
					t.Fatal("killed after the commit, but the store is as before")
				}
			case slices.Equal(got, wantAfter):
				if point != "committed" {
					t.Fatalf("killed at %q, before the commit, but the store holds the update", point)
				}
			default:
				t.Fatalf("killed at %q: the docs table (%d rows) is neither the state before (%d) nor after (%d)", point, len(got), len(wantBefore), len(wantAfter))
			}
			st, err := local.Open(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			s, err := Run(context.Background(), st, Options{From: update, Now: fixedNow, TempDir: tmp})
			st.Close()
			if err != nil {
				t.Fatalf("re-run after the kill at %q: %v", point, err)
			}
			if point == "committed" && s.ChangedPages() != 0 {
				t.Fatalf("re-run after a committed ingest changed %d pages", s.ChangedPages())
			}
			if got := docsOf(t, dir); !slices.Equal(got, wantAfter) {
				t.Fatalf("after the re-run the docs table differs from a clean update's")
			}
			// The killed run's spill folder stays (a dead process cannot
			// clean up), but the re-run removes stale ones of dead
			// processes.
			left, _ := filepath.Glob(filepath.Join(tmp, "pillar-ingest-*"))
			if len(left) != 0 {
				t.Fatalf("spill folders left behind: %v", left)
			}
		})
	}
}

// fullFS is a local.FS whose files fail with ENOSPC once budget bytes have
// been written through it: a disk that fills up.
type fullFS struct {
	local.OSFS
	budget atomic.Int64
}

type fullFile struct {
	*os.File
	fs *fullFS
}

func (f *fullFS) Create(name string) (local.File, error) {
	file, err := f.OSFS.Create(name)
	if err != nil {
		return nil, err
	}
	return &fullFile{File: file.(*os.File), fs: f}, nil
}

func (f *fullFile) Write(b []byte) (int, error) {
	if f.fs.budget.Add(-int64(len(b))) < 0 {
		return 0, &fs.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	return f.File.Write(b)
}

// TestIngestDiskFull: a disk that fills up during the merge into docs gives
// an error naming the table and the space it needs; the store stays as it
// was and readable, and the ingest succeeds once there is room.
func TestIngestDiskFull(t *testing.T) {
	base, update := crashCorpus(t)
	dir := filepath.Join(t.TempDir(), "store")
	ffs := &fullFS{}
	ffs.budget.Store(1 << 40)
	st, err := local.Create(dir, &local.Options{Partitions: 8, FS: ffs})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := Run(context.Background(), st, Options{From: base, Now: fixedNow}); err != nil {
		t.Fatal(err)
	}
	wantBefore := storeDocs(t, st)
	ffs.budget.Store(1 << 10) // 1 KiB left: less than the delta of docs
	_, err = Run(context.Background(), st, Options{From: update, Now: fixedNow})
	if err == nil || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("ingest onto a full disk: %v, want ENOSPC", err)
	}
	t.Logf("the error: %v", err)
	for _, want := range []string{"disk full", "table docs", "needs about", dir} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("the error does not say %q: %v", want, err)
		}
	}
	if got := storeDocs(t, st); !slices.Equal(got, wantBefore) {
		t.Fatal("a failed ingest changed the docs table")
	}
	ffs.budget.Store(1 << 40)
	if s, err := Run(context.Background(), st, Options{From: update, Now: fixedNow}); err != nil || s.ChangedPages() != 30 {
		t.Fatalf("ingest with room again: %+v %v", s, err)
	}
}
