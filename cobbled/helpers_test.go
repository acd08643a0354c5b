package cobbled

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"

	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/objstore"
	"github.com/pillarkit/pillar/internal/rocks"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/sstbuilder"
)

// op is one SST entry: a put, or a delete when del is set.
type op struct {
	key string // raw 16 bytes
	val string
	del bool
}

// writeBatch builds a batch with the real SST builder and uploads it to the
// local object store at root (perFile 0), or, to get several files per
// batch from little data, writes perFile ops per SST by hand the way the
// builder does (MetaKey → id first, then sorted page keys). It returns the
// manifest.
func writeBatch(t testing.TB, root string, parts, partition int, id, kind string, ops []op, perFile int) batch.Manifest {
	t.Helper()
	return writePubBatch(t, root, parts, partition, id, kind, "", ops, perFile)
}

// writePubBatch is writeBatch for a batch of publication pub.
func writePubBatch(t testing.TB, root string, parts, partition int, id, kind, pub string, ops []op, perFile int) batch.Manifest {
	t.Helper()
	sort.Slice(ops, func(i, j int) bool { return ops[i].key < ops[j].key })
	if perFile == 0 {
		rows := make([]sstbuilder.Row, len(ops))
		for i, o := range ops {
			rows[i] = sstbuilder.Row{Key: []byte(o.key), Delete: o.del, Value: []byte(o.val)}
		}
		ctx := context.Background()
		m, paths, err := sstbuilder.BuildPartition(ctx, sstbuilder.SliceRows(rows), &sstbuilder.BuildOptions{
			Dir: t.TempDir(), Partition: partition, Partitions: parts, Kind: kind, BatchID: id, Source: "test"})
		must(t, err)
		m.Publication = pub
		st, err := objstore.OpenLocal(root)
		must(t, err)
		up, err := sstbuilder.Upload(ctx, st, m, paths)
		must(t, err)
		return *up
	}
	if perFile <= 0 {
		perFile = len(ops) + 1
	}
	m := batch.Manifest{Format: batch.FormatVersion, ID: id, Partition: partition, Partitions: parts, Kind: kind,
		Source: "test", CreatedAtMS: time.Now().UnixMilli(), Publication: pub}
	dir := filepath.Join(root, filepath.FromSlash(batch.Prefix(partition, id)))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	opts, err := rocks.TableConfig{}.Options(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer opts.Destroy()
	env := grocksdb.NewDefaultEnvOptions()
	defer env.Destroy()
	for start, fileNo := 0, 1; start < len(ops) || fileNo == 1; fileNo++ {
		end := min(start+perFile, len(ops))
		name := fmt.Sprintf("%06d.sst", fileNo)
		path := filepath.Join(dir, name)
		w := grocksdb.NewSSTFileWriter(env, opts)
		must(t, w.Open(path))
		if fileNo == 1 {
			must(t, w.Put(batch.MetaKey, []byte(id)))
		}
		var keys int64
		for _, o := range ops[start:end] {
			if o.del {
				must(t, w.Delete([]byte(o.key)))
				m.Deletes++
			} else {
				must(t, w.Put([]byte(o.key), []byte(o.val)))
			}
			keys++
		}
		must(t, w.Finish())
		w.Destroy()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		m.Files = append(m.Files, batch.File{Name: name, Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:]), Keys: keys})
		m.Keys += keys
		start = end
		if start >= len(ops) {
			break
		}
	}
	if len(ops) > 0 {
		m.Smallest, m.Largest = hex.EncodeToString([]byte(ops[0].key)), hex.EncodeToString([]byte(ops[len(ops)-1].key))
	}
	must(t, m.Validate())
	enc, _ := m.Encode()
	must(t, os.WriteFile(filepath.Join(dir, "manifest.json"), enc, 0o644))
	return m
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// keysIn returns n distinct random raw keys of partition p among parts.
func keysIn(n, p, parts int) []string {
	var out []string
	for len(out) < n {
		var k [16]byte
		rand.Read(k[:])
		if pillar.Partition(k[:], parts) == p {
			out = append(out, string(k[:]))
		}
	}
	return out
}

// model is the expected contents of a partition.
type model map[string]string

func (m model) apply(kind string, ops []op) model {
	next := model{}
	if kind == batch.KindDelta {
		for k, v := range m {
			next[k] = v
		}
	}
	for _, o := range ops {
		if o.del {
			delete(next, o.key)
		} else {
			next[o.key] = o.val
		}
	}
	return next
}

// checkModel reads every key in universe from partition p and compares with want.
func checkModel(t testing.TB, n *Node, p int, universe []string, want model) {
	t.Helper()
	keys := make([][]byte, len(universe))
	for i, k := range universe {
		keys[i] = []byte(k)
	}
	err := n.MultiGet(p, keys, func(i int, v []byte, found bool) {
		w, ok := want[universe[i]]
		if found != ok || string(v) != w {
			t.Errorf("partition %d key %x: got (%q, %v), want (%q, %v)", p, universe[i], v, found, w, ok)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

// fakeControl is an in-memory FAKE of the control plane (the real service
// lives in cobbled/control): a per-partition batch log with long-polling,
// a routing table the test edits, and a record of reported progress.
type fakeControl struct {
	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every change
	parts    int
	log      map[int][]Batch
	replicas [][]Replica
	reports  []string         // "node/partition/seq"
	faults   map[string]Fault // "node/partition" -> last reported fault
}

func newFakeControl(parts int) *fakeControl {
	return &fakeControl{changed: make(chan struct{}), parts: parts, log: map[int][]Batch{}, replicas: make([][]Replica, parts)}
}

func (f *fakeControl) notify() { close(f.changed); f.changed = make(chan struct{}) }

func (f *fakeControl) register(m batch.Manifest) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	seq := int64(len(f.log[m.Partition]) + 1)
	f.log[m.Partition] = append(f.log[m.Partition], Batch{Seq: seq, Manifest: m})
	f.notify()
	return seq
}

func (f *fakeControl) assign(p int, nodes ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.replicas[p]
	f.replicas[p] = nil
	for _, id := range nodes {
		r := Replica{NodeID: id, State: "up"}
		for _, o := range old {
			if o.NodeID == id {
				r.AppliedSeq = o.AppliedSeq
			}
		}
		f.replicas[p] = append(f.replicas[p], r)
	}
}

func (f *fakeControl) ListBatches(ctx context.Context, p int, after int64, limit int, wait time.Duration) ([]Batch, error) {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		var out []Batch
		for _, b := range f.log[p] {
			if b.Seq > after && len(out) < limit {
				out = append(out, b)
			}
		}
		ch := f.changed
		f.mu.Unlock()
		if len(out) > 0 || wait <= 0 {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline.C:
			return nil, nil
		case <-ch:
		}
	}
}

func (f *fakeControl) ReportApplied(ctx context.Context, node string, p int, seq int64, pubBytes map[string]int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reports = append(f.reports, fmt.Sprintf("%s/%d/%d", node, p, seq))
	for i := range f.replicas[p] {
		if f.replicas[p][i].NodeID == node {
			f.replicas[p][i].AppliedSeq = seq
		}
	}
	return nil
}

// setApplied records progress of another (simulated) replica.
func (f *fakeControl) setApplied(node string, p int, seq int64) {
	f.ReportApplied(context.Background(), node, p, seq, nil)
}

func (f *fakeControl) GetRouting(ctx context.Context) (*Routing, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := &Routing{Partitions: f.parts, Replicas: make([][]Replica, f.parts), NewestSeq: make([]int64, f.parts)}
	for p := range f.parts {
		r.Replicas[p] = append([]Replica(nil), f.replicas[p]...)
		r.NewestSeq[p] = int64(len(f.log[p]))
	}
	return r, nil
}

func (f *fakeControl) ReportFault(ctx context.Context, fl Fault) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.faults == nil {
		f.faults = map[string]Fault{}
	}
	f.faults[fmt.Sprintf("%s/%d", fl.NodeID, fl.Partition)] = fl
	if !fl.Serving {
		for i := range f.replicas[fl.Partition] {
			if f.replicas[fl.Partition][i].NodeID == fl.NodeID {
				f.replicas[fl.Partition][i].AppliedSeq = 0
			}
		}
	}
	return nil
}

// fault returns node's last reported fault for partition p.
func (f *fakeControl) fault(node string, p int) Fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.faults[fmt.Sprintf("%s/%d", node, p)]
}

// retract marks the batch at seq of partition p retracted.
func (f *fakeControl) retract(p int, seq int64, why string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log[p][seq-1].Retracted = why
	f.notify()
}

func (f *fakeControl) RegisterNode(ctx context.Context, id, addr, zone string) error { return nil }
func (f *fakeControl) Heartbeat(ctx context.Context, id string) error                { return nil }

func (f *fakeControl) applied(node string, p int) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.replicas[p] {
		if r.NodeID == node {
			return r.AppliedSeq
		}
	}
	return -1
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
