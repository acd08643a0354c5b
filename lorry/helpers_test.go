package lorry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pillarkit/pillar/cobbled"
	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/internal/objstore"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/local"
	"google.golang.org/grpc"
)

// env is a real embedded store, a local-directory object store (wrapped in a
// fault injector) and a real control plane (SQLite) served on loopback.
type env struct {
	t       testing.TB
	dir     string
	parts   int
	store   *local.Store
	objDir  string
	objs    *faultObjects
	ctl     *control.Client
	ctlAddr string
	ctlSrv  *grpc.Server
	ctlDB   *control.Store
	srv     *control.Server
}

func newEnv(t testing.TB, parts int) *env {
	return newEnvRetain(t, parts, time.Second)
}

// newEnvRetain is newEnv with the store keeping old manifests for retain
// (benchmarks keep few: the store's cleanup reads every retained manifest
// after each commit).
func newEnvRetain(t testing.TB, parts int, retain time.Duration) *env {
	t.Helper()
	dir := t.TempDir()
	st, err := local.Create(filepath.Join(dir, "store"), &local.Options{Partitions: parts, RetainFor: retain})
	must(t, err)
	t.Cleanup(func() { st.Close() })
	objDir := filepath.Join(dir, "objects")
	lo, err := objstore.OpenLocal(objDir)
	must(t, err)
	e := &env{t: t, dir: dir, parts: parts, store: st, objDir: objDir, objs: &faultObjects{Store: lo}}
	db, err := control.OpenStore(context.Background(), "sqlite:"+filepath.Join(dir, "control.db"), &control.StoreOptions{Partitions: parts})
	must(t, err)
	t.Cleanup(func() { db.Close() })
	e.ctlDB = db
	e.startControl("127.0.0.1:0")
	t.Cleanup(func() { e.ctlSrv.Stop() })
	c, err := control.Dial(e.ctlAddr, nil)
	must(t, err)
	t.Cleanup(func() { c.Close() })
	e.ctl = c
	return e
}

// startControl serves the control plane on addr (a fixed address restarts
// it where clients expect it).
func (e *env) startControl(addr string) {
	srv, err := control.NewServer(&control.Options{Store: e.ctlDB, NoAuth: true, ReconcileInterval: 50 * time.Millisecond})
	must(e.t, err)
	var lis net.Listener
	for i := 0; ; i++ {
		lis, err = net.Listen("tcp", addr)
		if err == nil || i > 50 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	must(e.t, err)
	g := srv.GRPCServer()
	go g.Serve(lis)
	e.srv, e.ctlSrv, e.ctlAddr = srv, g, lis.Addr().String()
}

// opts returns worker options for this env with test-sized defaults.
func (e *env) opts(id string) Options {
	return Options{
		Store: e.store, Objects: e.objs, Registry: e.ctl, ID: id,
		MaxBatchAge: 50 * time.Millisecond, PollInterval: 10 * time.Millisecond,
		LeaseTTL: 600 * time.Millisecond, RetryMin: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond,
		TempDir: filepath.Join(e.dir, "tmp-"+id), CleanupInterval: -1,
	}
}

func (e *env) worker(o Options) *Worker {
	w, err := New(o)
	must(e.t, err)
	return w
}

// rec is an export record to enqueue: a put of val, or a delete.
type rec struct {
	key string // 32 hex
	val string
	del bool
	pri string // priority ("": fresh)
	pub string // publication ("": the legacy one)
}

// enqueue commits recs in one transaction.
func (e *env) enqueue(recs ...rec) {
	e.t.Helper()
	ctx := context.Background()
	tx, err := e.store.Begin(ctx)
	must(e.t, err)
	for _, r := range recs {
		k, err := pillar.ParseKey(r.key)
		must(e.t, err)
		er := pillar.ExportRecord{Partition: int32(k.Partition(e.parts)), PageKey: r.key, Op: pillar.OpPut, Value: []byte(r.val), Cause: "test", Priority: r.pri, Publication: r.pub}
		if r.del {
			er.Op, er.Value = pillar.OpDelete, nil
		}
		must(e.t, tx.Enqueue(ctx, er))
	}
	must(e.t, tx.Commit(ctx))
}

// keysIn returns n distinct random page keys (hex) of partition p.
func keysIn(n, p, parts int) []string {
	var out []string
	for len(out) < n {
		var k [16]byte
		rand.Read(k[:])
		if pillar.Partition(k[:], parts) == p {
			out = append(out, hex.EncodeToString(k[:]))
		}
	}
	return out
}

func (e *env) state(p int) PartitionState {
	e.t.Helper()
	sn, err := e.store.Snapshot(context.Background())
	must(e.t, err)
	defer sn.Release()
	st, err := readPartition(context.Background(), sn, p)
	must(e.t, err)
	return st
}

// registered returns partition p's registered batches in seq order.
func (e *env) registered(p int) []control.BatchEntry {
	e.t.Helper()
	var out []control.BatchEntry
	after := int64(0)
	for {
		bs, err := e.ctl.ListBatches(context.Background(), p, after, 1000, 0)
		must(e.t, err)
		if len(bs) == 0 {
			return out
		}
		out = append(out, bs...)
		after = bs[len(bs)-1].Seq
	}
}

// checkChain asserts that partition p's registered batches are Lorry
// batches covering offsets [0, end) exactly once, in order, and returns
// their ranges.
func (e *env) checkChain(p int, end int64) [][2]int64 {
	e.t.Helper()
	var ranges [][2]int64
	next := int64(0)
	seen := map[string]bool{}
	for _, b := range e.registered(p) {
		if seen[b.Manifest.ID] {
			e.t.Fatalf("partition %d: batch %s registered twice", p, b.Manifest.ID)
		}
		seen[b.Manifest.ID] = true
		var first, last int64
		var pp int
		if _, err := fmt.Sscanf(b.Manifest.Source, "lorry:p%d:%d-%d", &pp, &first, &last); err != nil || pp != p {
			e.t.Fatalf("partition %d: batch %s source %q", p, b.Manifest.ID, b.Manifest.Source)
		}
		if first != next {
			e.t.Fatalf("partition %d: batch %s covers [%d,%d], want it to start at %d (chain %v)", p, b.Manifest.ID, first, last, next, ranges)
		}
		if b.Manifest.Kind != "delta" {
			e.t.Fatalf("batch %s kind %q", b.Manifest.ID, b.Manifest.Kind)
		}
		ranges = append(ranges, [2]int64{first, last})
		next = last + 1
	}
	if next != end {
		e.t.Fatalf("partition %d: registered batches cover [0,%d), want [0,%d)", p, next, end)
	}
	if st := e.state(p); st.Offset != end || st.Pending != nil {
		e.t.Fatalf("partition %d: committed state %+v, want offset %d and nothing pending", p, st, end)
	}
	return ranges
}

// served applies every registered batch of every partition to a fresh
// cobbled node (as a replica would) and returns key → value of the given
// keys (absent when not found).
func (e *env) served(keys []string) map[string]string {
	e.t.Helper()
	ctx := context.Background()
	n, err := cobbled.Open(ctx, cobbled.Options{Dir: filepath.Join(e.t.TempDir(), "node"), Partitions: e.parts,
		CacheBytes: 8 << 20, Objects: e.objs.Store})
	must(e.t, err)
	defer n.Close()
	for p := 0; p < e.parts; p++ {
		for _, b := range e.registered(p) {
			must(e.t, n.Apply(ctx, cobbled.Batch{Seq: b.Seq, Manifest: b.Manifest}))
		}
	}
	out := map[string]string{}
	for _, k := range keys {
		raw, _ := hex.DecodeString(k)
		p := pillar.Partition(raw, e.parts)
		err := n.MultiGet(p, [][]byte{raw}, func(i int, v []byte, found bool) {
			if found {
				out[k] = string(v)
			}
		})
		if err != nil && !errors.Is(err, cobbled.ErrNotServed) {
			e.t.Fatal(err)
		}
	}
	return out
}

func (e *env) checkServed(want map[string]string, universe []string) {
	e.t.Helper()
	got := e.served(universe)
	for _, k := range universe {
		w, ok := want[k]
		g, gok := got[k]
		if ok != gok || w != g {
			e.t.Errorf("key %s: served (%q, %v), want (%q, %v)", k, g, gok, w, ok)
		}
	}
}

// faultObjects wraps an object store: down makes every call fail (an
// outage); crashAfterPuts makes the Put after n successful ones under a key
// prefix fail with errCrash (the process dies mid-upload).
type faultObjects struct {
	objstore.Store
	down       atomic.Bool
	mu         sync.Mutex
	crashAfter int    // 0: off
	crashIn    string // key prefix the crash applies to
	puts       int
	failed     atomic.Int64
	// gate, when set, holds every Put into an ordinary batch's prefix
	// until it is closed; blocked counts the Puts held.
	gate    atomic.Pointer[chan struct{}]
	blocked atomic.Int64
	// ordinaryPuts counts the Puts into ordinary batches' prefixes done.
	ordinaryPuts atomic.Int64
}

var ordinaryPrefix = regexp.MustCompile(`^batches/p\d{5}/lorry-[0-9a-f]+-p\d{5}-\d+-\d+/`)

// blockOrdinary holds the uploads of ordinary batches until gate is closed.
func (f *faultObjects) blockOrdinary(gate chan struct{}) { f.gate.Store(&gate) }

var errDown = errors.New("faultObjects: object store unreachable (injected)")

func (f *faultObjects) check() error {
	if f.down.Load() {
		f.failed.Add(1)
		return errDown
	}
	return nil
}

func (f *faultObjects) crashAfterPuts(prefix string, n int) {
	f.mu.Lock()
	f.crashAfter, f.crashIn, f.puts = n, prefix, 0
	f.mu.Unlock()
}

func (f *faultObjects) Put(ctx context.Context, key string, r io.Reader, size int64, opts *objstore.PutOptions) error {
	if err := f.check(); err != nil {
		return err
	}
	if g := f.gate.Load(); g != nil && ordinaryPrefix.MatchString(key) {
		f.blocked.Add(1)
		select {
		case <-*g:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if ordinaryPrefix.MatchString(key) {
		defer f.ordinaryPuts.Add(1)
	}
	f.mu.Lock()
	if f.crashAfter > 0 && strings.HasPrefix(key, f.crashIn) {
		if f.puts >= f.crashAfter {
			f.crashAfter = 0
			f.mu.Unlock()
			return fmt.Errorf("faultObjects: put %s: %w", key, errCrash)
		}
		f.puts++
	}
	f.mu.Unlock()
	return f.Store.Put(ctx, key, r, size, opts)
}

func (f *faultObjects) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return f.Store.Get(ctx, key)
}

func (f *faultObjects) Stat(ctx context.Context, key string) (objstore.Info, error) {
	if err := f.check(); err != nil {
		return objstore.Info{}, err
	}
	return f.Store.Stat(ctx, key)
}

func (f *faultObjects) List(ctx context.Context, prefix string) ([]objstore.Info, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return f.Store.List(ctx, prefix)
}

// objectKeys lists every object under batches/.
func (e *env) objectKeys() []string {
	infos, err := e.objs.Store.List(context.Background(), "batches/")
	must(e.t, err)
	var out []string
	for _, i := range infos {
		out = append(out, i.Key)
	}
	sort.Strings(out)
	return out
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func waitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runWorker runs w.Run in the background; the returned stop cancels it and
// waits.
func runWorker(t testing.TB, w *Worker) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("worker %s: %v", w.ID(), err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// sources returns partition p's registered batches' sources, in seq order.
func (e *env) sources(p int) []string {
	var out []string
	for _, b := range e.registered(p) {
		out = append(out, b.Manifest.Source)
	}
	return out
}
