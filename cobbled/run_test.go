package cobbled

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/objstore"
)

func fastRun(o *Options) {
	o.LongPoll, o.Heartbeat = 200*time.Millisecond, 20*time.Millisecond
	o.RetryBackoff, o.RetryBackoffMax = 5*time.Millisecond, 50*time.Millisecond
}

// TestRunAssignIngestDrop: the node opens assigned partitions, ingests their
// batches in order, reports progress, and drops a partition it lost only
// after the new owner reports it caught up.
func TestRunAssignIngestDrop(t *testing.T) {
	const parts = 3
	objects, dir := t.TempDir(), t.TempDir()
	ctl := newFakeControl(parts)
	ctl.assign(0, "n1")
	ctl.assign(1, "n1", "n2")
	ctl.assign(2, "n2")
	steps, universe := testSteps(1, parts)
	bs, models := writeSteps(t, objects, parts, 1, "p1", steps)
	for _, b := range bs[:4] {
		ctl.register(b.Manifest)
	}
	n := openTestNode(t, dir, objects, parts, func(o *Options) { o.Control = ctl; fastRun(o) })
	defer n.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	defer func() { cancel(); <-done }()

	waitFor(t, "partition 1 at seq 4", 10*time.Second, func() bool { return ctl.applied("n1", 1) == 4 })
	if got := n.Held(); fmt.Sprint(got) != "[0 1]" {
		t.Fatalf("held %v, want [0 1]", got)
	}
	checkModel(t, n, 1, universe, models[4])
	for _, b := range bs[4:] {
		ctl.register(b.Manifest)
	}
	waitFor(t, "partition 1 at seq 8", 10*time.Second, func() bool { return ctl.applied("n1", 1) == 8 })
	checkModel(t, n, 1, universe, models[8])

	// Partition 1 moves to n2 and n3 alone; n1 keeps serving it until both
	// report they are caught up.
	ctl.assign(1, "n2", "n3")
	ctl.setApplied("n2", 1, 8)
	time.Sleep(100 * time.Millisecond) // several ticks
	if got := n.Held(); fmt.Sprint(got) != "[0 1]" {
		t.Fatalf("dropped before the new owners caught up: held %v", got)
	}
	ctl.setApplied("n3", 1, 8)
	waitFor(t, "partition 1 dropped and its files deleted", 5*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(dir, partDirName(1)))
		return fmt.Sprint(n.Held()) == "[0]" && os.IsNotExist(err)
	})
	resp, err := n.batchGet(ctx, &servepb.BatchGetRequest{Keys: [][]byte{[]byte(universe[0])}})
	must(t, err)
	var vals [][]byte = make([][]byte, 1)
	if err := decodeCheck(resp, vals, func([][]byte) error { return nil }); err == nil {
		t.Fatalf("dropped partition still served")
	}
}

// TestRunWithControlPlane runs the node against the real control plane
// (cobbled/control over SQLite, on 127.0.0.1) and reads through BatchGet.
func TestRunWithControlPlane(t *testing.T) {
	const parts = 4
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tmp := t.TempDir()
	objects := filepath.Join(tmp, "objects")
	_, cc := startControl(t, ctx, tmp, parts)
	objs, err := objstore.Open(ctx, objects, nil)
	must(t, err)
	n, err := Open(ctx, Options{ID: "n1", Zone: "a", Addr: "127.0.0.1:1", Dir: filepath.Join(tmp, "n1"),
		CacheBytes: 8 << 20, Control: FromControlClient(cc), Objects: objs,
		LongPoll: 200 * time.Millisecond, Heartbeat: 20 * time.Millisecond})
	must(t, err)
	defer n.Close()
	if n.Partitions() != parts {
		t.Fatalf("learned %d partitions, want %d", n.Partitions(), parts)
	}
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	defer func() { cancel(); <-done }()

	want := map[string]string{}
	var all []string
	for p := range parts {
		ks := keysIn(3, p, parts)
		ops := []op{{key: ks[0], val: fmt.Sprintf("v%d", p)}, {key: ks[1], val: "old"}}
		m := writeBatch(t, objects, parts, p, fmt.Sprintf("cp-%d-1", p), batch.KindSnapshot, ops, 0)
		_, err := cc.RegisterBatch(ctx, &m)
		must(t, err)
		m2 := writeBatch(t, objects, parts, p, fmt.Sprintf("cp-%d-2", p), batch.KindDelta, []op{{key: ks[1], del: true}}, 0)
		_, err = cc.RegisterBatch(ctx, &m2)
		must(t, err)
		want[ks[0]] = fmt.Sprintf("v%d", p)
		all = append(all, ks...)
	}
	waitFor(t, "all partitions applied and reported", 20*time.Second, func() bool {
		r, err := cc.GetRouting(ctx)
		if err != nil || len(r.Replicas) != parts {
			return false
		}
		for p := range parts {
			if len(r.Replicas[p]) == 0 || r.Replicas[p][0].AppliedSeq != 2 {
				return false
			}
		}
		return true
	})
	keys := make([][]byte, len(all))
	for i, k := range all {
		keys[i] = []byte(k)
	}
	out, err := n.batchGet(ctx, &servepb.BatchGetRequest{Keys: keys})
	must(t, err)
	vals := make([][]byte, len(all))
	enc := out.(*servepb.Encoded)
	defer enc.Buf.Free()
	var resp servepb.BatchGetResponse
	must(t, unmarshal(enc, &resp))
	for i, k := range all {
		r := resp.Results[i]
		w, ok := want[k]
		if r.Status != servepb.KeyStatus_KEY_OK || r.Found != ok || string(r.Value) != w {
			t.Errorf("key %d: %v, want found=%v %q", i, r, ok, w)
		}
		vals[i] = r.Value
	}
}

// TestRunStopsAtCorruptBatch: a batch whose download does not match its
// manifest is retried, then reported, and never skipped: the batches after it
// wait until it can be applied.
func TestRunStopsAtCorruptBatch(t *testing.T) {
	const parts, p = 2, 0
	objects, dir := t.TempDir(), t.TempDir()
	ctl := newFakeControl(parts)
	ctl.assign(p, "n1")
	steps, universe := testSteps(p, parts)
	bs, models := writeSteps(t, objects, parts, p, "cc", steps[:3])
	f := bs[1].Manifest.Files[0]
	path := filepath.Join(objects, batch.Prefix(p, bs[1].Manifest.ID), f.Name)
	good, err := os.ReadFile(path)
	must(t, err)
	bad := append([]byte(nil), good...)
	bad[len(bad)-1] ^= 1
	must(t, os.WriteFile(path, bad, 0o644))
	for _, b := range bs {
		ctl.register(b.Manifest)
	}
	n := openTestNode(t, dir, objects, parts, func(o *Options) { o.Control = ctl; fastRun(o); o.DownloadAttempts = 3 })
	defer n.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "the checksum failure to be reported", 10*time.Second, func() bool {
		st := n.Stats()
		return len(st.Held) == 1 && st.Held[0].LastError != ""
	})
	if e := n.Stats().Held[0].LastError; !containsAll(e, "sha256", "cc-02", "does not match") {
		t.Fatalf("reported error %q", e)
	}
	if got := counterValue(n.opts.Metrics.ingestErrors.WithLabelValues("checksum")); got < 3 {
		t.Fatalf("%v checksum failures counted, want >= 3", got)
	}
	time.Sleep(100 * time.Millisecond)
	if got := ctl.applied("n1", p); got != 1 {
		t.Fatalf("applied %d while batch 2 is corrupt; want 1 (no skipping)", got)
	}
	checkModel(t, n, p, universe, models[1])
	must(t, os.WriteFile(path, good, 0o644))
	waitFor(t, "seq 3 once batch 2 is repaired", 10*time.Second, func() bool { return ctl.applied("n1", p) == 3 })
	checkModel(t, n, p, universe, models[3])
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// startControl serves the real control plane (SQLite under dir) on
// 127.0.0.1 and returns its address and a client.
func startControl(t testing.TB, ctx context.Context, dir string, parts int) (string, *control.Client) {
	t.Helper()
	st, err := control.OpenStore(ctx, "sqlite:"+filepath.Join(dir, "control.db"), &control.StoreOptions{Partitions: parts})
	must(t, err)
	t.Cleanup(func() { st.Close() })
	srv, err := control.NewServer(&control.Options{Store: st, NoAuth: true, ReconcileInterval: 20 * time.Millisecond})
	must(t, err)
	rctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	go srv.Run(rctx)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	g := srv.GRPCServer()
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	cc, err := control.Dial(lis.Addr().String(), nil)
	must(t, err)
	t.Cleanup(func() { cc.Close() })
	return lis.Addr().String(), cc
}

// slowObjects counts concurrent Gets of an object getter. Each Get takes at
// least delay; with waitFor > 1 it also waits (up to 5s) until that many
// Gets are in flight, so parallelism shows even on a loaded machine.
type slowObjects struct {
	ObjectGetter
	delay         time.Duration
	waitFor       int64
	inflight, max atomic.Int64
}

func (s *slowObjects) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	n := s.inflight.Add(1)
	defer s.inflight.Add(-1)
	for {
		m := s.max.Load()
		if n <= m || s.max.CompareAndSwap(m, n) {
			break
		}
	}
	time.Sleep(s.delay)
	for deadline := time.Now().Add(5 * time.Second); s.max.Load() < s.waitFor && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	return s.ObjectGetter.Get(ctx, key)
}

// TestIngestConcurrencyBound: partitions download and apply in parallel, at
// most IngestConcurrency at a time.
func TestIngestConcurrencyBound(t *testing.T) {
	const parts = 6
	for _, limit := range []int{1, 2} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			objects, dir := t.TempDir(), t.TempDir()
			ctl := newFakeControl(parts)
			for p := range parts {
				ctl.assign(p, "n1")
				ctl.register(writeBatch(t, objects, parts, p, fmt.Sprintf("c%d", p), batch.KindSnapshot, []op{{key: keysIn(1, p, parts)[0], val: "v"}}, 0))
			}
			st, err := objstore.OpenLocal(objects)
			must(t, err)
			slow := &slowObjects{ObjectGetter: st, delay: 30 * time.Millisecond, waitFor: int64(limit)}
			n := openTestNode(t, dir, objects, parts, func(o *Options) {
				o.Control, o.Objects, o.IngestConcurrency = ctl, slow, limit
				fastRun(o)
			})
			defer n.Close()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- n.Run(ctx) }()
			waitFor(t, "every partition applied", 20*time.Second, func() bool {
				for p := range parts {
					if ctl.applied("n1", p) != 1 {
						return false
					}
				}
				return true
			})
			cancel()
			must(t, <-done)
			if m := slow.max.Load(); m > int64(limit) || (limit > 1 && m < 2) {
				t.Fatalf("max concurrent downloads %d with IngestConcurrency %d", m, limit)
			}
		})
	}
}
