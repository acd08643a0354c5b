package cobbled

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/objstore"
)

type step struct {
	kind string
	ops  []op
}

// testSteps is a sequence of snapshots and deltas (with deletes) over keys of
// partition p, and the universe of keys it touches.
func testSteps(p, parts int) ([]step, []string) {
	k := keysIn(12, p, parts)
	put := func(i int, v string) op { return op{key: k[i], val: v} }
	del := func(i int) op { return op{key: k[i], del: true} }
	return []step{
		{batch.KindSnapshot, []op{put(0, "a1"), put(1, "b1"), put(2, "c1"), put(3, "d1")}},
		{batch.KindDelta, []op{put(1, "b2"), del(2), put(4, "e2")}},
		{batch.KindDelta, []op{del(0), del(9), put(5, "f3"), put(2, "c3")}},
		{batch.KindSnapshot, []op{put(6, "g4"), put(1, "b4"), del(7)}},
		{batch.KindDelta, []op{put(6, "g5"), put(8, "h5"), del(1)}},
		{batch.KindDelta, []op{put(10, "i6"), put(11, "")}},
		{batch.KindSnapshot, []op{put(11, "l7"), put(0, "a7"), put(3, "d7"), put(4, "e7"), put(5, "f7")}},
		{batch.KindDelta, []op{del(11), put(3, "d8")}},
	}, k
}

// writeSteps writes steps as batches of partition p and returns them with
// the model after each (models[i] = contents after batch seq i; models[0] empty).
func writeSteps(t testing.TB, objects string, parts, p int, prefix string, steps []step) ([]Batch, []model) {
	models := []model{{}}
	var bs []Batch
	for i, s := range steps {
		m := writeBatch(t, objects, parts, p, fmt.Sprintf("%s-%02d", prefix, i+1), s.kind, s.ops, 0)
		bs = append(bs, Batch{Seq: int64(i + 1), Manifest: m})
		models = append(models, models[i].apply(s.kind, s.ops))
	}
	return bs, models
}

func openTestNode(t testing.TB, dir, objects string, parts int, mod func(*Options)) *Node {
	t.Helper()
	st, err := objstore.OpenLocal(objects)
	must(t, err)
	o := Options{ID: "n1", Addr: "127.0.0.1:1", Dir: dir, Partitions: parts, CacheBytes: 8 << 20, Objects: st}
	if mod != nil {
		mod(&o)
	}
	n, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestApplyOrderDeltasSnapshots(t *testing.T) {
	const parts, p = 4, 2
	objects, dir := t.TempDir(), t.TempDir()
	steps, universe := testSteps(p, parts)
	bs, models := writeSteps(t, objects, parts, p, "b", steps)
	ctx := context.Background()
	n := openTestNode(t, dir, objects, parts, nil)
	for i, b := range bs {
		if err := n.Apply(ctx, b); err != nil {
			t.Fatalf("apply seq %d: %v", b.Seq, err)
		}
		checkModel(t, n, p, universe, models[i+1])
		// Generations: one live database directory, no staging leftovers.
		ents, _ := filepath.Glob(filepath.Join(dir, partDirName(p), "db-*"))
		if len(ents) != 1 {
			t.Fatalf("after seq %d: %d generations on disk: %v", b.Seq, len(ents), ents)
		}
	}
	// A batch already applied is a no-op; one out of order is refused.
	if err := n.Apply(ctx, bs[2]); err != nil {
		t.Fatalf("re-apply of seq 3: %v", err)
	}
	skip := writeBatch(t, objects, parts, p, "b-skip", batch.KindDelta, []op{{key: universe[0], val: "x"}}, 0)
	if err := n.Apply(ctx, Batch{Seq: int64(len(bs) + 2), Manifest: skip}); !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("gap: got %v, want ErrOutOfOrder", err)
	}
	checkModel(t, n, p, universe, models[len(bs)])
	if got := n.Stats().Held[0].AppliedSeq; got != int64(len(bs)) {
		t.Fatalf("applied seq %d, want %d", got, len(bs))
	}
	n.Close()

	// Reopen: same state from disk.
	n = openTestNode(t, dir, objects, parts, nil)
	defer n.Close()
	if st := n.Stats(); len(st.Held) != 1 || st.Held[0].AppliedSeq != int64(len(bs)) {
		t.Fatalf("after reopen: %+v", st.Held)
	}
	checkModel(t, n, p, universe, models[len(bs)])
}

// TestReapplyDeltaHarmless proves that a delta applied but not recorded, then
// applied again (the fallback when the meta key cannot vouch for it), leaves
// the same contents: a delta sets and deletes whole keys, so it is idempotent.
func TestReapplyDeltaHarmless(t *testing.T) {
	const parts, p = 2, 1
	objects, dir := t.TempDir(), t.TempDir()
	steps, universe := testSteps(p, parts)
	bs, models := writeSteps(t, objects, parts, p, "r", steps[:3])
	ctx := context.Background()
	n := openTestNode(t, dir, objects, parts, nil)
	defer n.Close()
	for _, b := range bs {
		must(t, n.Apply(ctx, b))
	}
	// Forget that seq 3 was applied, as if state.json were never written and
	// the meta key were not consulted, then apply it again.
	pt := n.part(p)
	pt.applyMu.Lock()
	pt.st.Seq, pt.st.Batch, pt.meta[""] = 2, bs[1].Manifest.ID, bs[1].Manifest.ID
	ps := pt.st.Pubs[""]
	ps.Batch = bs[1].Manifest.ID
	pt.st.Pubs[""] = ps
	pt.applyMu.Unlock()
	must(t, n.Apply(ctx, bs[2]))
	checkModel(t, n, p, universe, models[3])
}

func TestChecksumMismatchAndMissingObject(t *testing.T) {
	const parts, p = 2, 0
	objects, dir := t.TempDir(), t.TempDir()
	steps, universe := testSteps(p, parts)
	bs, models := writeSteps(t, objects, parts, p, "c", steps[:2])
	ctx := context.Background()
	n := openTestNode(t, dir, objects, parts, nil)
	defer n.Close()
	must(t, n.Apply(ctx, bs[0]))

	f := bs[1].Manifest.Files[0]
	path := filepath.Join(objects, batch.Prefix(p, bs[1].Manifest.ID), f.Name)
	good, err := os.ReadFile(path)
	must(t, err)
	corrupt := append([]byte(nil), good...)
	corrupt[len(corrupt)/2] ^= 0xff
	cases := []struct {
		name string
		data []byte // nil: remove the object
		want error
	}{
		{"flipped byte", corrupt, ErrChecksum},
		{"truncated", good[:len(good)-7], ErrChecksum},
		{"longer", append(append([]byte(nil), good...), 0), ErrChecksum},
		{"missing object", nil, objstore.ErrNotFound},
	}
	for _, c := range cases {
		if c.data == nil {
			must(t, os.Remove(path))
		} else {
			must(t, os.WriteFile(path, c.data, 0o644))
		}
		err := n.Apply(ctx, bs[1])
		if !errors.Is(err, c.want) {
			t.Fatalf("%s: got %v, want %v", c.name, err, c.want)
		}
		// The replica stays at seq 1 and keeps serving it.
		if got := n.part(p).applied.Load(); got != 1 {
			t.Fatalf("%s: applied %d, want 1", c.name, got)
		}
		checkModel(t, n, p, universe, models[1])
	}
	must(t, os.WriteFile(path, good, 0o644))
	must(t, n.Apply(ctx, bs[1]))
	checkModel(t, n, p, universe, models[2])
}

func TestForeignManifest(t *testing.T) {
	const parts = 4
	objects, dir := t.TempDir(), t.TempDir()
	n := openTestNode(t, dir, objects, parts, nil)
	defer n.Close()
	ctx := context.Background()
	m := writeBatch(t, objects, parts, 1, "f-1", batch.KindSnapshot, []op{{key: keysIn(1, 1, parts)[0], val: "v"}}, 0)
	pt, err := n.addPartition(3)
	must(t, err)
	// Listed for partition 3, but the manifest says partition 1.
	if err := n.fetchAndApply(ctx, pt, &Batch{Seq: 1, Manifest: m}); !errors.Is(err, ErrForeignManifest) {
		t.Fatalf("got %v, want ErrForeignManifest", err)
	}
	// A manifest for another partition count.
	m8 := writeBatch(t, objects, 8, 1, "f-2", batch.KindSnapshot, []op{{key: keysIn(1, 1, 8)[0], val: "v"}}, 0)
	if err := n.Apply(ctx, Batch{Seq: 1, Manifest: m8}); !errors.Is(err, ErrForeignManifest) {
		t.Fatalf("got %v, want ErrForeignManifest", err)
	}
	// Reopening with another partition count is refused.
	n2, err := Open(ctx, Options{Dir: dir, Partitions: 8})
	if !errors.Is(err, ErrPartitions) {
		if n2 != nil {
			n2.Close()
		}
		t.Fatalf("reopen with P=8: got %v, want ErrPartitions", err)
	}
}

// enospcFile fails like a full disk after limit bytes.
type enospcFile struct {
	f     *os.File
	limit int
}

func (e *enospcFile) Write(b []byte) (int, error) {
	if len(b) > e.limit {
		n, _ := e.f.Write(b[:e.limit])
		e.limit = 0
		return n, &os.PathError{Op: "write", Path: e.f.Name(), Err: syscall.ENOSPC}
	}
	e.limit -= len(b)
	return e.f.Write(b)
}
func (e *enospcFile) Sync() error  { return e.f.Sync() }
func (e *enospcFile) Close() error { return e.f.Close() }

func TestDiskFullDuringDownload(t *testing.T) {
	const parts, p = 2, 1
	objects, dir := t.TempDir(), t.TempDir()
	steps, universe := testSteps(p, parts)
	bs, models := writeSteps(t, objects, parts, p, "d", steps[:2])
	ctl := newFakeControl(parts)
	ctl.assign(p, "n1")
	ctl.register(bs[0].Manifest)
	n := openTestNode(t, dir, objects, parts, func(o *Options) {
		o.Control, o.LongPoll, o.Heartbeat = ctl, 50e6, 20e6
		o.RetryBackoff, o.RetryBackoffMax, o.DownloadAttempts = 5e6, 20e6, 2
	})
	defer n.Close()
	var full atomic.Bool
	n.create = func(path string) (stagedFile, error) {
		f, err := os.Create(path)
		if err != nil || !full.Load() {
			return f, err
		}
		return &enospcFile{f: f, limit: 100}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	waitFor(t, "seq 1", 10e9, func() bool { return ctl.applied("n1", p) == 1 })

	full.Store(true)
	ctl.register(bs[1].Manifest)
	waitFor(t, "the error to be reported", 10e9, func() bool {
		st := n.Stats()
		return len(st.Held) == 1 && st.Held[0].LastError != ""
	})
	if e := n.Stats().Held[0].LastError; !strings.Contains(e, "no space left") {
		t.Fatalf("last error %q does not name the full disk", e)
	}
	checkModel(t, n, p, universe, models[1]) // keeps serving what it has
	full.Store(false)
	waitFor(t, "seq 2 after the disk has room", 10e9, func() bool { return ctl.applied("n1", p) == 2 })
	checkModel(t, n, p, universe, models[2])
	if e := n.Stats().Held[0].LastError; e != "" {
		t.Fatalf("error not cleared after success: %q", e)
	}
	cancel()
	must(t, <-done)
}
