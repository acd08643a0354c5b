package jobs

import (
	"strings"
	"sync"
	"testing"

	"github.com/pillarkit/pillar/pillar"
)

// closeCounter is a store writer that counts its rows and closes.
type closeCounter struct {
	pillar.RowWriter
	rows, closes int
}

func (c *closeCounter) Write(any) error { c.rows++; return nil }
func (c *closeCounter) Close() error    { c.closes++; return nil }

// A finished output lets go of its store writer: the run keeps every
// tableWriter to the end of the operation, and a closed writer still holds
// its buffers (one set per job of the operation).
func TestFinishedOutputDropsItsStoreWriter(t *testing.T) {
	cc := &closeCounter{}
	w := &tableWriter{mu: &sync.Mutex{}, w: cc, name: "out"}
	if err := w.Write(struct{}{}); err != nil {
		t.Fatal(err)
	}
	if err := w.finish(); err != nil {
		t.Fatal(err)
	}
	if w.w != nil {
		t.Fatal("the finished output still references its store writer")
	}
	if err := w.finish(); err != nil || cc.closes != 1 {
		t.Fatalf("second finish: %v, %d closes, want nil and 1", err, cc.closes)
	}
	if err := w.Write(struct{}{}); err == nil || !strings.Contains(err.Error(), "Write after Close") {
		t.Fatalf("Write after finish: %v, want a Write after Close error", err)
	}
	if w.rows != 1 || cc.rows != 1 {
		t.Fatalf("rows %d (store %d), want 1", w.rows, cc.rows)
	}
}
