package bulkexport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/clock"
	"github.com/pillarkit/pillar/internal/objstore"
	"github.com/pillarkit/pillar/internal/s3test"
	"github.com/pillarkit/pillar/jobs/pipeline"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/local"
	"github.com/pillarkit/pillar/sstbuilder"
	"github.com/pillarkit/pillar/subsets"
)

const parts = 4

// world is a real store with a published pair and queued export records,
// a real control plane (SQLite, gRPC on loopback) and a local object store.
type world struct {
	st      *local.Store
	objs    objstore.Store
	cl      *control.Client
	dir     string
	queued  []int64    // queue end per partition
	pending [][]string // queued page keys per partition
}

func newWorld(t *testing.T) *world {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := local.Create(filepath.Join(dir, "store"), &local.Options{Partitions: parts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	// 24 pages, chunked, embedded, in one exported subset, published.
	tx, _ := st.Begin(ctx)
	w, err := tx.WriteTable(ctx, pillar.TableDocs, pillar.Doc{}, &pillar.WriteOptions{SortedBy: []string{"page_key"}})
	if err != nil {
		t.Fatal(err)
	}
	var docs []pillar.Doc
	for i := range 24 {
		k, u, _ := pillar.KeyOfURL(fmt.Sprintf("https://example.org/page/%d", i))
		text := strings.Repeat(fmt.Sprintf("Page %d is about topic %d. ", i, i%3), 30)
		docs = append(docs, pillar.Doc{PageKey: k.String(), URL: u, Host: "example.org", Text: text, ContentHash: fmt.Sprintf("h%d", i)})
	}
	sort.Slice(docs, func(i, j int) bool { return docs[i].PageKey < docs[j].PageKey })
	for i := range docs {
		if err := w.Write(&docs[i]); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	o := pipeline.Options{}
	r, err := pipeline.Rechunk(ctx, st, "tokens:size=40,overlap=8", o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pipeline.Embed(ctx, st, r.Version, "hash:dim=8", o); err != nil {
		t.Fatal(err)
	}
	set, err := subsets.Parse("p.yaml", []byte("policies:\n  - name: all\n    exported: true\n    where: url ~ \"/page/\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pipeline.Recompute(ctx, st, set, time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), o); err != nil {
		t.Fatal(err)
	}
	o.BulkMinPages = 1
	if _, err := pipeline.Publish(ctx, st, r.Version, "hash:dim=8", o); err != nil {
		t.Fatal(err)
	}
	wd := &world{st: st, dir: dir}
	// Queue end per partition as the export will see it, and the keys of
	// records Lorry has not delivered.
	sn, _ := st.Snapshot(ctx)
	for p := range parts {
		end, err := sn.QueueEnd(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		wd.queued = append(wd.queued, end)
	}
	sn.Release()
	if wd.queued[0]+wd.queued[1]+wd.queued[2]+wd.queued[3] == 0 {
		// Make sure the ordering check has something to refuse.
		tx, _ := st.Begin(ctx)
		for i := range 8 {
			k := pillar.KeyOfNormalized(fmt.Sprintf("https://example.org/q/%d", i))
			p := k.Partition(parts)
			if err := tx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(p), PageKey: k.String(), Op: pillar.OpDelete}); err != nil {
				t.Fatal(err)
			}
			wd.queued[p]++
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if wd.objs, err = objstore.Open(ctx, "file://"+filepath.Join(dir, "objects"), nil); err != nil {
		t.Fatal(err)
	}
	db, err := control.OpenStore(ctx, "sqlite:"+filepath.Join(dir, "control.db"), &control.StoreOptions{Partitions: parts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	srv, err := control.NewServer(&control.Options{Store: db, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := srv.GRPCServer()
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	if wd.cl, err = control.Dial(lis.Addr().String(), &control.ClientOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wd.cl.Close() })
	return wd
}

func (wd *world) opts() *Options {
	return &Options{Store: wd.st, Dir: filepath.Join(wd.dir, "exports", "bulk1"), Objects: wd.objs, Control: wd.cl, Parallelism: 2}
}

// deliver registers, per partition, a delta carrying the queued records
// [0, queued) — what Lorry's ordinary lane does.
func (wd *world) deliver(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for p := range parts {
		if wd.queued[p] == 0 {
			continue
		}
		k := pillar.KeyOfNormalized(fmt.Sprintf("https://example.org/delivered/%d", p))
		for i := 0; k.Partition(parts) != p; i++ {
			k = pillar.KeyOfNormalized(fmt.Sprintf("https://example.org/delivered/%d/%d", p, i))
		}
		m, paths, err := sstbuilder.BuildPartition(ctx, sstbuilder.SliceRows([]sstbuilder.Row{{Key: k[:], Delete: true}}), &sstbuilder.BuildOptions{
			Dir: t.TempDir(), Partition: p, Partitions: parts, Kind: batch.KindDelta, BatchID: fmt.Sprintf("lorry-p%d", p),
			QueueFirst: 0, QueueEnd: wd.queued[p]})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sstbuilder.Upload(ctx, wd.objs, m, paths); err != nil {
			t.Fatal(err)
		}
		if _, err := wd.cl.RegisterBatch(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
}

// snapshots returns the registered snapshot batches of every partition.
func (wd *world) snapshots(t *testing.T) map[int][]batch.Manifest {
	t.Helper()
	out := map[int][]batch.Manifest{}
	for p := range parts {
		es, err := wd.cl.ListBatches(context.Background(), p, 0, 1000, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if e.Manifest.Kind == batch.KindSnapshot {
				out[p] = append(out[p], e.Manifest)
			}
		}
	}
	return out
}

// checkDone: exactly one snapshot per partition, carrying the queue end.
func (wd *world) checkDone(t *testing.T, res *Result) {
	t.Helper()
	snaps := wd.snapshots(t)
	for p := range parts {
		if len(snaps[p]) != 1 {
			t.Fatalf("partition %d: %d snapshots registered, want 1: %+v", p, len(snaps[p]), snaps[p])
		}
		if s := snaps[p][0]; s.Supersedes != wd.queued[p] || s.ID != sstbuilder.BatchID("bulk1", p) {
			t.Fatalf("partition %d: snapshot %s supersedes %d, want %d", p, s.ID, s.Supersedes, wd.queued[p])
		}
		if res.Build.Partitions[p].Seq == 0 {
			t.Fatalf("partition %d not registered: %+v", p, res.Build.Partitions[p])
		}
	}
}

func TestRunRefusedUntilDeliveredThenWaits(t *testing.T) {
	ctx := context.Background()
	wd := newWorld(t)
	// Not delivered, no waiting: the control plane's retryable refusal.
	_, err := Run(ctx, wd.opts())
	if !errors.Is(err, control.ErrNotDelivered) || !strings.Contains(err.Error(), "run Lorry") {
		t.Fatalf("register before delivery: %v", err)
	}
	if n := len(wd.snapshots(t)); n != 0 {
		t.Fatalf("%d partitions got a snapshot before delivery", n)
	}
	// Waiting on a fake clock: refused, sleeps, Lorry delivers, accepted.
	fake := clock.NewFake(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	o := wd.opts()
	o.Clock, o.WaitDelivered, o.RetryInterval = fake, time.Minute, time.Second
	done := make(chan error, 1)
	var res *Result
	go func() {
		var err error
		res, err = Run(ctx, o)
		done <- err
	}()
	bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := fake.BlockUntil(bctx, 1); err != nil {
		t.Fatalf("Run never waited: %v", err)
	}
	wd.deliver(t)
	for {
		fake.Advance(5 * time.Second)
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			if !res.Resumed || res.Export != nil {
				t.Fatalf("second run re-exported a committed export: %+v", res)
			}
			wd.checkDone(t, res)
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func TestRunWaitDeadline(t *testing.T) {
	wd := newWorld(t)
	fake := clock.NewFake(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	o := wd.opts()
	o.Clock, o.WaitDelivered, o.RetryInterval, o.Parallelism = fake, 10*time.Second, time.Second, 1
	done := make(chan error, 1)
	go func() { _, err := Run(context.Background(), o); done <- err }()
	for {
		fake.Advance(time.Second)
		select {
		case err := <-done:
			if !errors.Is(err, control.ErrNotDelivered) || !strings.Contains(err.Error(), "after waiting 10s") {
				t.Fatalf("past the deadline: %v", err)
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A run stopped after any step is completed by running it again: one
// export, one snapshot per partition, nothing duplicated.
func TestRunCrashAndRetry(t *testing.T) {
	for _, step := range []string{"exported", "committed", "registered"} {
		t.Run(step, func(t *testing.T) {
			ctx := context.Background()
			wd := newWorld(t)
			wd.deliver(t)
			crash := errors.New("crash at " + step)
			n := 0
			testHook = func(s string) error {
				if s == step {
					if n++; n == 2 || step != "registered" {
						return crash // "registered": after the second partition
					}
				}
				return nil
			}
			_, err := Run(ctx, wd.opts())
			testHook = nil
			if !errors.Is(err, crash) {
				t.Fatalf("crash run: %v", err)
			}
			res, err := Run(ctx, wd.opts())
			if err != nil {
				t.Fatal(err)
			}
			// Only an export never committed is made again.
			if res.Resumed != (step != "exported") {
				t.Fatalf("after a crash at %s: resumed=%v", step, res.Resumed)
			}
			wd.checkDone(t, res)
			// And once more: nothing new.
			res, err = Run(ctx, wd.opts())
			if err != nil || !res.Resumed {
				t.Fatalf("third run: %v %+v", err, res)
			}
			for _, p := range res.Build.Partitions {
				if p.Status != sstbuilder.StatusUploaded {
					t.Fatalf("third run rebuilt partition %d: %s", p.Partition, p.Status)
				}
			}
			wd.checkDone(t, res)
		})
	}
}

func TestRunRefusesBadInput(t *testing.T) {
	wd := newWorld(t)
	ctx := context.Background()
	if _, err := Run(ctx, &Options{Store: wd.st}); err == nil || !strings.Contains(err.Error(), "required") {
		t.Fatalf("missing options: %v", err)
	}
	o := wd.opts()
	o.Partitions = parts + 1
	if _, err := Run(ctx, o); !errors.Is(err, pillar.ErrPartitions) {
		t.Fatalf("partition mismatch: %v", err)
	}
	o = wd.opts()
	o.ID = "Bad ID"
	if _, err := Run(ctx, o); err == nil || !strings.Contains(err.Error(), "Bad ID") {
		t.Fatalf("bad id: %v", err)
	}
}

// Against S3 (versitygw): the object store fails every upload during the
// first run; once it heals, the same call completes with one snapshot per
// partition.
func TestRunS3OutageAndRetry(t *testing.T) {
	ctx := context.Background()
	wd := newWorld(t)
	wd.deliver(t) // its deltas go to the local store; the snapshots to S3
	srv := s3test.Start(t)
	proxy := s3test.NewFaultProxy(t, srv.Endpoint)
	s3, err := objstore.Open(ctx, srv.URL("pillar"), &objstore.Options{
		S3Endpoint: proxy.Endpoint, S3AccessKeyID: s3test.AccessKey, S3SecretAccessKey: s3test.SecretKey,
		S3MaxAttempts: 2, S3MaxBackoff: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	o := wd.opts()
	o.Objects = s3
	proxy.FailAll(503, "PUT")
	if _, err := Run(ctx, o); err == nil {
		t.Fatal("run during an S3 outage succeeded")
	}
	if n := len(wd.snapshots(t)); n != 0 {
		t.Fatalf("%d snapshots registered during the outage", n)
	}
	proxy.Heal()
	res, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Resumed {
		t.Fatal("the committed export was made again")
	}
	wd.checkDone(t, res)
	for p := range parts {
		if _, err := sstbuilder.ReadManifest(ctx, s3, p, sstbuilder.BatchID("bulk1", p)); err != nil {
			t.Fatalf("partition %d manifest on S3: %v", p, err)
		}
	}
}

// An export a newer one has replaced is not made again under its old id
// (that would give two exports one set of batch ids).
func TestRunRefusesReplacedExport(t *testing.T) {
	ctx := context.Background()
	wd := newWorld(t)
	wd.deliver(t)
	if _, err := Run(ctx, wd.opts()); err != nil {
		t.Fatal(err)
	}
	o2 := wd.opts()
	o2.Dir = filepath.Join(wd.dir, "exports", "bulk2")
	if _, err := Run(ctx, o2); err != nil {
		t.Fatal(err)
	}
	_, err := Run(ctx, wd.opts())
	if !errors.Is(err, ErrIDUsed) || !strings.Contains(err.Error(), "bulk1") {
		t.Fatalf("rerun of a replaced export: %v", err)
	}
}
