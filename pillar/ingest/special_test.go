package ingest

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/pillarkit/pillar/pillar/local"
)

// A named pipe in the corpus (directly, or behind a symbolic link) is
// skipped and counted, not opened: opening it would block until a writer
// came, which is forever.
func TestIngestSkipsNamedPipes(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a.html", []byte("<html><head><title>A</title></head><body><p>page a</p></body></html>"))
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe.html"), 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	if err := os.Symlink("pipe.html", filepath.Join(dir, "link.txt")); err != nil {
		t.Fatal(err)
	}
	st, err := local.Create(filepath.Join(t.TempDir(), "store"), &local.Options{Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// A hang fails the test in 20 s instead of the package's 10 minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan struct{})
	var stats Stats
	go func() {
		defer close(done)
		stats, err = Run(ctx, st, Options{From: dir})
	}()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("ingest hung on a named pipe")
	}
	if err != nil {
		t.Fatal(err)
	}
	if stats.Pages != 1 || stats.NotRegular != 2 || stats.Unreadable != 0 {
		t.Fatalf("stats %+v, want 1 page and 2 paths skipped as not regular files", stats)
	}
}

// A path that turns into a named pipe between the walk and the read is not
// opened blocking either.
func TestReadPageOfNamedPipe(t *testing.T) {
	p := filepath.Join(t.TempDir(), "late.html")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	done := make(chan page, 1)
	go func() { done <- readPage(p, &Options{MaxPageBytes: DefaultMaxPageBytes}) }()
	select {
	case pg := <-done:
		if pg.kind != "not_regular" {
			t.Fatalf("readPage of a FIFO: kind %q (%v), want not_regular", pg.kind, pg.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("readPage blocked on a named pipe")
	}
}
