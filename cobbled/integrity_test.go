package cobbled

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/status"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/objstore"
)

// corruptWithValidSHA flips a byte inside the first data block of the
// batch's first SST in the object store and rewrites the manifest with the
// damaged file's size and SHA-256: a batch that passes every check a
// manifest allows (a file damaged before it was hashed, or a lying
// manifest).
func corruptWithValidSHA(t *testing.T, objects string, m batch.Manifest) batch.Manifest {
	t.Helper()
	dir := filepath.Join(objects, filepath.FromSlash(batch.Prefix(m.Partition, m.ID)))
	path := filepath.Join(dir, m.Files[0].Name)
	b, err := os.ReadFile(path)
	must(t, err)
	b[60] ^= 0x20
	must(t, os.WriteFile(path, b, 0o644))
	sum := sha256.Sum256(b)
	m.Files = append([]batch.File(nil), m.Files...)
	m.Files[0].SHA256 = hex.EncodeToString(sum[:])
	enc, err := m.Encode()
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, "manifest.json"), enc, 0o644))
	return m
}

func gaugeValue(g prometheus.Gauge) float64 {
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		panic(err)
	}
	return m.GetGauge().GetValue()
}

func heldStats(n *Node, p int) PartitionStats {
	for _, s := range n.Stats().Held {
		if s.Partition == p {
			return s
		}
	}
	return PartitionStats{Partition: -1}
}

// runNode opens node id on the real control plane cc and runs it until the
// test ends or stop is called.
func runNode(t *testing.T, ctx context.Context, id, dir, objects string, cc *control.Client) *Node {
	n, _ := runNodeStop(t, ctx, id, dir, objects, cc)
	return n
}

func runNodeStop(t *testing.T, ctx context.Context, id, dir, objects string, cc *control.Client) (*Node, func()) {
	t.Helper()
	objs, err := objstore.Open(ctx, objects, nil)
	must(t, err)
	n, err := Open(ctx, Options{ID: id, Zone: "a", Addr: "127.0.0.1:1", Dir: dir, CacheBytes: 1 << 20,
		Control: FromControlClient(cc), Objects: objs,
		LongPoll: 200 * time.Millisecond, Heartbeat: 20 * time.Millisecond,
		RetryBackoff: 5 * time.Millisecond, RetryBackoffMax: 50 * time.Millisecond, DownloadAttempts: 2})
	must(t, err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- n.Run(rctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			<-done
			n.Close()
		})
	}
	t.Cleanup(stop)
	return n, stop
}

func replicaOf(t *testing.T, ctx context.Context, cc *control.Client, p int, node string) control.Replica {
	r, err := cc.GetRouting(ctx)
	if err != nil {
		return control.Replica{}
	}
	for _, rep := range r.Replicas[p] {
		if rep.NodeID == node {
			return rep
		}
	}
	return control.Replica{}
}

// TestCorruptSSTWithValidSHA: fault injection. A snapshot whose SST fails
// its block checksums but matches the manifest's size and SHA-256 is
// refused before the swap: the previous snapshot keeps serving, the
// replica reports "corrupt batch <id>: …" in Stats (/healthz), the fault
// metric and the control plane (pillar status), and does not claim to have
// caught up. Retracting the batch lets the partition move on with the
// batches after it and a replacement; nothing else is lost and no wrong
// record is served at any point.
func TestCorruptSSTWithValidSHA(t *testing.T) {
	const parts, p = 2, 1
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tmp := t.TempDir()
	objects := filepath.Join(tmp, "objects")
	_, cc := startControl(t, ctx, tmp, parts)
	steps, universe := testSteps(p, parts)
	bs, models := writeSteps(t, objects, parts, p, "v", steps[:5]) // snapshot, delta, delta, snapshot, delta
	bad := corruptWithValidSHA(t, objects, bs[3].Manifest)         // the second snapshot
	for i, b := range bs {
		m := b.Manifest
		if i == 3 {
			m = bad
		}
		_, err := cc.RegisterBatch(ctx, &m)
		must(t, err)
	}
	n := runNode(t, ctx, "n1", filepath.Join(tmp, "n1"), objects, cc)
	waitFor(t, "the corrupt batch to be reported to the control plane", 20*time.Second, func() bool {
		return strings.Contains(replicaOf(t, ctx, cc, p, "n1").Fault, "corrupt batch "+bad.ID)
	})
	rep := replicaOf(t, ctx, cc, p, "n1")
	if !strings.Contains(rep.Fault, "block checksum mismatch") || rep.AppliedSeq != 3 || rep.LagBatches != 2 || rep.State != control.StateUp {
		t.Fatalf("routing replica %+v: want fault naming the block checksum, seq 3, lag 2, up", rep)
	}
	st := heldStats(n, p)
	if !strings.HasPrefix(st.Fault, "corrupt batch "+bad.ID+": ") || !st.Serving || st.AppliedSeq != 3 {
		t.Fatalf("stats %+v", st)
	}
	rec := httptest.NewRecorder()
	n.HealthHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if body := rec.Body.String(); rec.Code != 200 || !strings.Contains(body, `"status": "degraded"`) || !strings.Contains(body, fmt.Sprintf("partition %d: corrupt batch %s: ", p, bad.ID)) {
		t.Fatalf("/healthz %d:\n%s", rec.Code, body)
	}
	if g := gaugeValue(n.opts.Metrics.fault.WithLabelValues(fmt.Sprint(p), "batch")); g != 1 {
		t.Fatalf("fault gauge %v", g)
	}
	if c := counterValue(n.opts.Metrics.ingestErrors.WithLabelValues("corrupt_sst")); c < 1 {
		t.Fatalf("corrupt_sst errors %v", c)
	}
	checkModel(t, n, p, universe, models[3]) // the previous data serves

	// Repair: retract it. The replica skips it and applies seq 5 (a delta
	// built on the bad snapshot: its keys land on top of model 3), then a
	// replacement snapshot.
	r, err := cc.RetractBatch(ctx, bad.ID, "block checksum mismatch in 000001.sst")
	must(t, err)
	if r.Seq != 4 {
		t.Fatalf("retracted seq %d", r.Seq)
	}
	waitFor(t, "seq 5 after the retraction", 20*time.Second, func() bool { return replicaOf(t, ctx, cc, p, "n1").AppliedSeq == 5 })
	checkModel(t, n, p, universe, models[3].apply(steps[4].kind, steps[4].ops))
	repl := writeBatch(t, objects, parts, p, "v-04-replacement", steps[3].kind, steps[3].ops, 0)
	_, err = cc.RegisterBatch(ctx, &repl)
	must(t, err)
	waitFor(t, "the replacement applied and the fault cleared", 20*time.Second, func() bool {
		rep := replicaOf(t, ctx, cc, p, "n1")
		return rep.AppliedSeq == 6 && rep.Fault == ""
	})
	checkModel(t, n, p, universe, models[4])
	if st := heldStats(n, p); st.Fault != "" || st.LastError != "" {
		t.Fatalf("fault not cleared: %+v", st)
	}
}

// liveSSTs returns the SST files of partition p's live database, oldest
// (lowest file number) first.
func liveSSTs(t *testing.T, n *Node, p int) []string {
	t.Helper()
	pp := n.part(p)
	pp.applyMu.Lock()
	db := pp.st.Pubs[""].DB
	pp.applyMu.Unlock()
	files, err := filepath.Glob(filepath.Join(pp.dir, db, "*.sst"))
	must(t, err)
	sort.Strings(files)
	return files
}

// TestCorruptReplicaRebuild: fault injection on a replica's own disk. A
// block of a live SST goes bad; a BatchGet touching it answers every other
// key (per-key errors only for the keys in the bad block), the replica then
// stops serving the partition (reads KEY_NOT_SERVED, the control plane
// marks it corrupt so routers skip it), rebuilds it from the object store,
// and serves the right data again.
func TestCorruptReplicaRebuild(t *testing.T) {
	const parts, p = 2, 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tmp := t.TempDir()
	objects := filepath.Join(tmp, "objects")
	_, cc := startControl(t, ctx, tmp, parts)
	ks := keysIn(6, p, parts)
	snap := writeBatch(t, objects, parts, p, "r1", batch.KindSnapshot, []op{{key: ks[0], val: "a"}, {key: ks[1], val: "b"}, {key: ks[2], val: "c"}}, 0)
	delta := writeBatch(t, objects, parts, p, "r2", batch.KindDelta, []op{{key: ks[3], val: "d"}, {key: ks[4], val: "e"}}, 0)
	for _, m := range []batch.Manifest{snap, delta} {
		_, err := cc.RegisterBatch(ctx, &m)
		must(t, err)
	}
	n, stop := runNodeStop(t, ctx, "n1", filepath.Join(tmp, "n1"), objects, cc)
	waitFor(t, "seq 2", 20*time.Second, func() bool { return replicaOf(t, ctx, cc, p, "n1").AppliedSeq == 2 })
	files := liveSSTs(t, n, p)
	if len(files) != 2 {
		t.Fatalf("live SSTs %v, want the snapshot's and the delta's", files)
	}
	// Damage the snapshot's data block while the node is down (so no
	// block cache holds a good copy; a long-running node finds it once the
	// block is evicted).
	stop()
	b, err := os.ReadFile(files[0])
	must(t, err)
	b[60] ^= 0x20
	must(t, os.WriteFile(files[0], b, 0o644))
	n = runNode(t, ctx, "n1", filepath.Join(tmp, "n1"), objects, cc)

	keys := [][]byte{[]byte(ks[3]), []byte(ks[0]), []byte(ks[4]), []byte(ks[5])}
	out, err := n.batchGet(ctx, &servepb.BatchGetRequest{Keys: keys})
	must(t, err)
	var resp servepb.BatchGetResponse
	enc := out.(*servepb.Encoded)
	must(t, unmarshal(enc, &resp))
	enc.Buf.Free()
	want := []struct {
		status servepb.KeyStatus
		val    string
		found  bool
	}{{servepb.KeyStatus_KEY_OK, "d", true}, {servepb.KeyStatus_KEY_ERROR, "", false}, {servepb.KeyStatus_KEY_OK, "e", true}, {servepb.KeyStatus_KEY_OK, "", false}}
	for i, w := range want {
		r := resp.Results[i]
		if r.Status != w.status || r.Found != w.found || string(r.Value) != w.val {
			t.Errorf("key %d: %v, want %v found=%v %q", i, r, w.status, w.found, w.val)
		}
	}
	if msg := resp.Results[1].Error; !strings.Contains(msg, "Corruption") || len(msg) > 400 {
		t.Errorf("per-key error %q", msg)
	}
	// Out of service at once on this node ...
	out, err = n.batchGet(ctx, &servepb.BatchGetRequest{Keys: keys[:1]})
	must(t, err)
	enc = out.(*servepb.Encoded)
	must(t, unmarshal(enc, &resp))
	enc.Buf.Free()
	if r := resp.Results[0]; r.Status != servepb.KeyStatus_KEY_NOT_SERVED && r.Status != servepb.KeyStatus_KEY_OK {
		t.Fatalf("after corruption: %v", r)
	}
	// ... rebuilt from the object store, and serving the right data again.
	waitFor(t, "the rebuild to finish and the fault to clear", 20*time.Second, func() bool {
		rep := replicaOf(t, ctx, cc, p, "n1")
		st := heldStats(n, p)
		return rep.AppliedSeq == 2 && rep.Fault == "" && rep.State == control.StateUp && st.Serving && st.AppliedSeq == 2
	})
	if c := counterValue(n.opts.Metrics.rebuilds); c != 1 {
		t.Fatalf("rebuilds %v", c)
	}
	checkModel(t, n, p, ks, model{ks[0]: "a", ks[1]: "b", ks[2]: "c", ks[3]: "d", ks[4]: "e"})
}

// TestStagingClearedAfterENOSPC: a download that fails on a full disk
// leaves no partial staging files behind, and the partition serves what it
// had.
func TestStagingClearedAfterENOSPC(t *testing.T) {
	const parts, p = 2, 1
	objects, dir := t.TempDir(), t.TempDir()
	steps, universe := testSteps(p, parts)
	bs, models := writeSteps(t, objects, parts, p, "e", steps[:2])
	n := openTestNode(t, dir, objects, parts, nil)
	defer n.Close()
	ctx := context.Background()
	must(t, n.Apply(ctx, bs[0]))
	n.create = func(path string) (stagedFile, error) {
		f, err := os.Create(path)
		if err != nil {
			return nil, err
		}
		return &enospcFile{f: f, limit: 100}, nil
	}
	err := n.Apply(ctx, bs[1])
	if err == nil || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("apply on a full disk: %v", err)
	}
	staging := filepath.Join(dir, partDirName(p), "staging")
	if _, err := os.Stat(staging); !os.IsNotExist(err) {
		t.Fatalf("staging %s left behind after ENOSPC: %v", staging, err)
	}
	checkModel(t, n, p, universe, models[1])
}

// TestHugeKeyErrorIsShort: a malformed 8 MiB key gets an error quoting a
// short prefix of it, not the whole key.
func TestHugeKeyErrorIsShort(t *testing.T) {
	n := openTestNode(t, t.TempDir(), t.TempDir(), 1, nil)
	defer n.Close()
	_, err := n.batchGet(context.Background(), &servepb.BatchGetRequest{Keys: [][]byte{make([]byte, 8<<20)}})
	msg := status.Convert(err).Message()
	if err == nil || len(msg) > 200 || !strings.Contains(msg, "8388608 bytes") {
		t.Fatalf("error (%d bytes): %.300s", len(msg), msg)
	}
}

// TestRunExitsOnUnauthenticated: a node whose token the control plane
// refuses exits with an error saying so instead of retrying forever.
func TestRunExitsOnUnauthenticated(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := control.OpenStore(ctx, "sqlite:"+filepath.Join(t.TempDir(), "c.db"), &control.StoreOptions{Partitions: 2})
	must(t, err)
	defer st.Close()
	srv, err := control.NewServer(&control.Options{Store: st, Token: "right"})
	must(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	g := srv.GRPCServer()
	go g.Serve(lis)
	defer g.Stop()
	cc, err := control.Dial(lis.Addr().String(), &control.ClientOptions{Token: "wrong"})
	must(t, err)
	defer cc.Close()
	n := openTestNode(t, t.TempDir(), t.TempDir(), 2, func(o *Options) { o.Control = FromControlClient(cc); fastRun(o) })
	defer n.Close()
	err = n.Run(ctx)
	if !errors.Is(err, control.ErrUnauthenticated) || !strings.Contains(err.Error(), "token") || ctx.Err() != nil {
		t.Fatalf("run with a wrong token: %v (ctx %v)", err, ctx.Err())
	}
}

// TestNodeReportsAgainWhenForgotten: a control plane that lost its node
// records (a rebuilt database, or remove-node) gets the node back on its
// next heartbeat, with its applied progress re-reported.
func TestNodeReportsAgainWhenForgotten(t *testing.T) {
	const parts, p = 2, 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tmp := t.TempDir()
	objects := filepath.Join(tmp, "objects")
	_, cc := startControl(t, ctx, tmp, parts)
	m := writeBatch(t, objects, parts, p, "fg1", batch.KindSnapshot, []op{{key: keysIn(1, p, parts)[0], val: "v"}}, 0)
	_, err := cc.RegisterBatch(ctx, &m)
	must(t, err)
	runNode(t, ctx, "n1", filepath.Join(tmp, "n1"), objects, cc)
	waitFor(t, "seq 1", 20*time.Second, func() bool { return replicaOf(t, ctx, cc, p, "n1").AppliedSeq == 1 })
	must(t, cc.RemoveNode(ctx, "n1", true))
	waitFor(t, "the node registered again with its progress", 20*time.Second, func() bool {
		return replicaOf(t, ctx, cc, p, "n1").AppliedSeq == 1
	})
}
