package sstbuilder

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/objstore"
	"github.com/pillarkit/pillar/internal/s3test"
	"github.com/pillarkit/pillar/pillar"
)

type countProgress struct{ n atomic.Int64 }

func (c *countProgress) Add(n int64) { c.n.Add(n) }

// checkBatches inspects every partition's batch in the store and checks the
// live keys against the newest export rows.
func checkBatches(t *testing.T, store objstore.Store, res *ExportBuildResult, newest map[string]ExportRow) {
	t.Helper()
	ctx := context.Background()
	for _, pr := range res.Partitions {
		if pr.Status == StatusEmpty {
			continue
		}
		in, err := InspectBatch(ctx, store, pr.Partition, pr.BatchID, &InspectOptions{Samples: 3})
		if err != nil {
			t.Fatal(err)
		}
		var live, deletes int64
		for hk, row := range newest {
			k, _ := pillar.ParseKey(hk)
			if k.Partition(res.Export.Partitions) != pr.Partition {
				continue
			}
			if row.Op == pillar.OpDelete {
				deletes++
			} else {
				live++
			}
		}
		if in.LiveKeys != live || in.MetaValue != pr.BatchID {
			t.Fatalf("partition %d: %d live keys (meta %q), want %d", pr.Partition, in.LiveKeys, in.MetaValue, live)
		}
		if res.Export.Kind == batch.KindDelta && in.Manifest.Deletes != deletes {
			t.Fatalf("partition %d: %d deletes, want %d", pr.Partition, in.Manifest.Deletes, deletes)
		}
		for _, s := range in.Samples {
			if s.Error != "" || !strings.HasSuffix(s.URL, s.Key) || s.Chunks != 2 || s.Dims != 32 || s.Encoding != "float16" {
				t.Fatalf("sample %+v", s)
			}
		}
	}
}

func TestBuildExportLocal(t *testing.T) {
	ctx := context.Background()
	exp := t.TempDir()
	meta, newest := writeExport(t, exp, 4, 30, batch.KindSnapshot, map[int]bool{2: true})
	store, err := objstore.Open(ctx, "file://"+t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := &recordingRegisterer{}
	prog := &countProgress{}
	opts := &ExportBuildOptions{Export: exp, Store: store, Partitions: 4, Registerer: reg, Progress: prog, Now: fixedNow}
	res, err := BuildExport(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, f := range meta.Files {
		total += f.Rows
	}
	if prog.n.Load() != total {
		t.Fatalf("progress counted %d rows, export has %d", prog.n.Load(), total)
	}
	for _, pr := range res.Partitions {
		if pr.Status != StatusBuilt || pr.Seq != 1 || pr.BatchID != BatchID("exp-test", pr.Partition) {
			t.Fatalf("partition %d: %+v", pr.Partition, pr)
		}
	}
	// The empty partition of a snapshot is a batch too: it empties the partition.
	if m := res.Partitions[2].Manifest; m.Keys != 0 || len(m.Files) != 1 {
		t.Fatalf("empty snapshot partition: %+v", m)
	}
	if reg.registered() != 4 {
		t.Fatalf("%d batches registered", reg.registered())
	}
	checkBatches(t, store, res, newest)
	// Local SST files are gone after upload.
	if ents, _ := os.ReadDir(filepath.Join(exp, ".sst-build", "p00000")); len(ents) != 0 {
		t.Fatalf("local files kept: %d", len(ents))
	}
	// A rerun rebuilds nothing and re-registers idempotently.
	res2, err := BuildExport(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i, pr := range res2.Partitions {
		if pr.Status != StatusUploaded || pr.Seq != res.Partitions[i].Seq || pr.Manifest.CreatedAtMS != res.Partitions[i].Manifest.CreatedAtMS {
			t.Fatalf("rerun partition %d: %+v", pr.Partition, pr)
		}
	}
	if reg.registered() != 4 || reg.calls != 8 {
		t.Fatalf("rerun: %d batches, %d calls", reg.registered(), reg.calls)
	}
	// The wrong partition count is refused before anything happens.
	opts.Partitions = 8
	if _, err := BuildExport(ctx, opts); !errors.Is(err, ErrPartitions) || !strings.Contains(err.Error(), "4 partitions") {
		t.Fatalf("partition mismatch: %v", err)
	}
}

func TestBuildExportDeltaNoRegisterer(t *testing.T) {
	ctx := context.Background()
	exp := t.TempDir()
	_, newest := writeExport(t, exp, 3, 25, batch.KindDelta, map[int]bool{0: true})
	store, err := objstore.Open(ctx, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := BuildExport(ctx, &ExportBuildOptions{Export: exp, Store: store, KeepFiles: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Partitions[0].Status != StatusEmpty || res.Partitions[0].Manifest != nil {
		t.Fatalf("empty delta partition: %+v", res.Partitions[0])
	}
	if list, _ := store.List(ctx, "batches/p00000/"); len(list) != 0 {
		t.Fatalf("empty delta uploaded %d objects", len(list))
	}
	for _, pr := range res.Partitions[1:] {
		if pr.Seq != 0 || pr.Manifest.Deletes == 0 {
			t.Fatalf("partition %d: %+v", pr.Partition, pr)
		}
	}
	checkBatches(t, store, res, newest)
	// KeepFiles left the SSTs.
	if ents, _ := os.ReadDir(filepath.Join(exp, ".sst-build", "p00001")); len(ents) == 0 {
		t.Fatal("KeepFiles: local files removed")
	}
}

// A corrupted export file or a wrong row count stops the build with an error
// naming the partition; nothing is uploaded for it.
func TestBuildExportCorrupt(t *testing.T) {
	ctx := context.Background()
	exp := t.TempDir()
	meta, _ := writeExport(t, exp, 2, 10, batch.KindSnapshot, nil)
	meta.Files[1].Rows++ // export.json now disagrees with the file
	b, _ := json.Marshal(meta)
	os.WriteFile(filepath.Join(exp, ExportMetaName), b, 0o644)
	store, _ := objstore.Open(ctx, t.TempDir(), nil)
	reg := &recordingRegisterer{}
	_, err := BuildExport(ctx, &ExportBuildOptions{Export: exp, Store: store, Registerer: reg, Parallelism: 1})
	if !errors.Is(err, ErrCorruptExport) || !strings.Contains(err.Error(), "partition 1") {
		t.Fatalf("row count mismatch: %v", err)
	}
	if list, _ := store.List(ctx, "batches/p00001/"); len(list) != 0 {
		t.Fatalf("corrupt partition uploaded %d objects", len(list))
	}
	if reg.seqs[BatchID("exp-test", 1)] != 0 {
		t.Fatal("corrupt partition registered")
	}
}

// S3 end to end through a fault-injecting proxy: transient 500/503 are
// retried; a persistent outage fails with a clear error and registers
// nothing; the rerun reuses the built files and finishes.
func TestBuildExportS3Faults(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	proxy := s3test.NewFaultProxy(t, srv.Endpoint)
	store, err := objstore.Open(ctx, srv.URL("pillar"), &objstore.Options{
		S3Endpoint: proxy.Endpoint, S3AccessKeyID: s3test.AccessKey, S3SecretAccessKey: s3test.SecretKey,
		S3MaxAttempts: 3, S3MaxBackoff: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	exp := t.TempDir()
	_, newest := writeExport(t, exp, 3, 20, batch.KindSnapshot, nil)
	reg := &recordingRegisterer{}
	opts := &ExportBuildOptions{Export: exp, Store: store, Partitions: 3, Registerer: reg, Parallelism: 1, Now: fixedNow}

	proxy.FailAll(503, "PUT")
	_, err = BuildExport(ctx, opts)
	if err == nil || !strings.Contains(err.Error(), "attempts") || !strings.Contains(err.Error(), "exp-test-p0000") {
		t.Fatalf("S3 outage: %v", err)
	}
	t.Log(err)
	if reg.registered() != 0 {
		t.Fatalf("%d batches registered during an outage", reg.registered())
	}
	proxy.FailNext(2, 500, "PUT") // still flaky, within the retry budget
	res, err := BuildExport(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Partitions[0].Status != StatusReused {
		t.Fatalf("partition 0 after the outage: %s, want %s", res.Partitions[0].Status, StatusReused)
	}
	if reg.registered() != 3 {
		t.Fatalf("%d registered", reg.registered())
	}
	checkBatches(t, store, res, newest)
	// The objects really are in the bucket, under the prefix.
	if _, err := os.Stat(filepath.Join(srv.Dir, srv.Bucket, "pillar", batch.ManifestKey(1, "exp-test-p00001"))); err != nil {
		t.Fatal(err)
	}
}

// Upload never replaces a batch: a different source under the same id is
// ErrBatchExists, the same one is accepted (a retry after a crash).
func TestUploadConflicts(t *testing.T) {
	ctx := context.Background()
	store, _ := objstore.Open(ctx, t.TempDir(), nil)
	keys := pageKeys(3, 0, 1)
	build := func(id, src, val string) (*batch.Manifest, []string) {
		var rows []Row
		for _, k := range keys {
			rows = append(rows, Row{Key: k, Value: []byte(val)})
		}
		m, paths, err := BuildPartition(ctx, SliceRows(rows), &BuildOptions{Dir: t.TempDir(), Partition: 0, Partitions: 1, BatchID: id, Source: src})
		if err != nil {
			t.Fatal(err)
		}
		return m, paths
	}
	m1, p1 := build("b1", "src-a", "one")
	got, err := Upload(ctx, store, m1, p1)
	if err != nil || got != m1 {
		t.Fatal(err)
	}
	// Same source, rebuilt (different file bytes): the stored batch wins.
	m2, p2 := build("b1", "src-a", "one")
	got, err = Upload(ctx, store, m2, p2)
	if err != nil || got.Files[0].SHA256 != m1.Files[0].SHA256 {
		t.Fatalf("re-upload: %v", err)
	}
	// Different source under the same id.
	m3, p3 := build("b1", "src-b", "two")
	if _, err := Upload(ctx, store, m3, p3); !errors.Is(err, ErrBatchExists) {
		t.Fatalf("conflicting upload: %v", err)
	}
	// A crash after the files but before the manifest: the retry uploads the
	// manifest; files already there with equal bytes are accepted.
	m4, p4 := build("b2", "src-c", "three")
	if err := objstore.PutFile(ctx, store, batch.Prefix(0, "b2")+m4.Files[0].Name, p4[0], nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Upload(ctx, store, m4, p4); err != nil {
		t.Fatalf("retry after partial upload: %v", err)
	}
	raw, _ := objstore.ReadAll(ctx, store, batch.ManifestKey(0, "b2"))
	if !bytes.Contains(raw, []byte(`"b2"`)) {
		t.Fatal("manifest not uploaded")
	}
}

// An export written by another tool with rows out of order is refused with
// an error naming the partition and the key; nothing is uploaded.
func TestBuildExportOutOfOrder(t *testing.T) {
	ctx := context.Background()
	exp := t.TempDir()
	keys := pageKeys(3, 1, 2)
	hk := func(i int) string { return hexKey(keys[i]) }
	rows := []ExportRow{
		{PageKey: hk(0), Seq: 1, Op: "put", Value: []byte("a")},
		{PageKey: hk(2), Seq: 1, Op: "put", Value: []byte("c")},
		{PageKey: hk(1), Seq: 1, Op: "put", Value: []byte("b")},
	}
	f, err := os.Create(filepath.Join(exp, PartitionFileName(1)))
	if err != nil {
		t.Fatal(err)
	}
	pw := parquet.NewGenericWriter[ExportRow](f)
	if _, err := pw.Write(rows); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	f.Close()
	sum, size, _ := fileSHA256(f.Name())
	if err := WriteExportMeta(exp, &ExportMeta{Format: 1, ID: "bad", Partitions: 2, Kind: "delta",
		Files: []ExportFile{{Partition: 1, Name: PartitionFileName(1), Rows: 3, Bytes: size, SHA256: sum}}}); err != nil {
		t.Fatal(err)
	}
	store, _ := objstore.Open(ctx, t.TempDir(), nil)
	_, err = BuildExport(ctx, &ExportBuildOptions{Export: exp, Store: store, Partitions: 2})
	if !errors.Is(err, ErrOutOfOrder) || !strings.Contains(err.Error(), "partition 1: key "+hk(1)) {
		t.Fatalf("out-of-order export: %v", err)
	}
	if list, _ := store.List(ctx, ""); len(list) != 0 {
		t.Fatalf("%d objects uploaded", len(list))
	}
}

func TestBuildExportOnly(t *testing.T) {
	ctx := context.Background()
	exp := t.TempDir()
	writeExport(t, exp, 3, 5, batch.KindSnapshot, nil)
	store, _ := objstore.Open(ctx, t.TempDir(), nil)
	res, err := BuildExport(ctx, &ExportBuildOptions{Export: exp, Store: store, Only: []int{2, 1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Partitions) != 2 || res.Partitions[0].Partition != 1 || res.Partitions[1].Partition != 2 {
		t.Fatalf("only 1,2: %+v", res.Partitions)
	}
	if list, _ := store.List(ctx, "batches/p00000/"); len(list) != 0 {
		t.Fatal("partition 0 built")
	}
	if _, err := BuildExport(ctx, &ExportBuildOptions{Export: exp, Store: store, Only: []int{3}}); err == nil {
		t.Fatal("partition 3 of 3 accepted")
	}
}

// An export kept in an object store (S3 here) is downloaded partition by
// partition, checked against export.json, built and cleaned up.
func TestBuildExportFromS3(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	s3, err := objstore.Open(ctx, srv.URL(""), &objstore.Options{S3Endpoint: srv.Endpoint, S3AccessKeyID: s3test.AccessKey, S3SecretAccessKey: s3test.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	exp := t.TempDir()
	_, newest := writeExport(t, exp, 2, 15, batch.KindDelta, nil)
	if err := UploadExport(ctx, s3, exp, "exports/e1/"); err != nil {
		t.Fatal(err)
	}
	out, _ := objstore.Open(ctx, t.TempDir(), nil)
	work := t.TempDir()
	res, err := BuildExport(ctx, &ExportBuildOptions{ExportStore: s3, Export: "exports/e1", Store: out, WorkDir: work, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	checkBatches(t, out, res, newest)
	if ents, _ := os.ReadDir(filepath.Join(work, "input")); len(ents) != 0 {
		t.Fatalf("%d downloaded files left", len(ents))
	}
	if _, err := BuildExport(ctx, &ExportBuildOptions{ExportStore: s3, Export: "exports/none", Store: out, WorkDir: work}); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("missing remote export: %v", err)
	}
}

func TestBuildExportWorkDirLock(t *testing.T) {
	work := t.TempDir()
	unlock, err := lockWorkDir(work)
	if err != nil {
		t.Fatal(err)
	}
	exp := t.TempDir()
	writeExport(t, exp, 1, 3, batch.KindSnapshot, nil)
	store, _ := objstore.Open(context.Background(), t.TempDir(), nil)
	opts := &ExportBuildOptions{Export: exp, Store: store, WorkDir: work}
	if _, err := BuildExport(context.Background(), opts); !errors.Is(err, ErrBusy) {
		t.Fatalf("second builder on one work dir: %v", err)
	}
	unlock()
	if _, err := BuildExport(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
}

// Resume decisions: files of an earlier build that are gone are rebuilt; an
// export rewritten under the same id (different input) is refused, never
// overwriting the stored batches.
func TestBuildExportResumeEdges(t *testing.T) {
	ctx := context.Background()
	exp := t.TempDir()
	writeExport(t, exp, 2, 10, batch.KindSnapshot, nil)
	objs := t.TempDir()
	store, _ := objstore.Open(ctx, objs, nil)
	work := t.TempDir()
	opts := &ExportBuildOptions{Export: exp, Store: store, WorkDir: work, KeepFiles: true}
	if _, err := BuildExport(ctx, opts); err != nil {
		t.Fatal(err)
	}
	// Forget the upload of partition 1 (as if the run died before its
	// manifest) and lose its local files: it is rebuilt.
	os.RemoveAll(filepath.Join(objs, "batches", "p00001"))
	os.RemoveAll(filepath.Join(work, "p00001"))
	res, err := BuildExport(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Partitions[0].Status != StatusUploaded || res.Partitions[1].Status != StatusBuilt {
		t.Fatalf("statuses %s %s", res.Partitions[0].Status, res.Partitions[1].Status)
	}
	// Same again, but the local files survive: they are reused, not rebuilt.
	os.RemoveAll(filepath.Join(objs, "batches", "p00001"))
	if res, err = BuildExport(ctx, opts); err != nil || res.Partitions[1].Status != StatusReused {
		t.Fatalf("reuse: %v %+v", err, res)
	}
	// A different export under the same id.
	exp2 := t.TempDir()
	w, _ := NewExportWriter(exp2, 2, batch.KindSnapshot, &ExportOptions{ID: "exp-test"})
	w.SetQueueEnds([]int64{0, 0})
	k := pageKeys(1, 0, 2)[0]
	w.Write(ExportRow{PageKey: hexKey(k), Op: "put", Value: []byte("other")})
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = BuildExport(ctx, &ExportBuildOptions{Export: exp2, Store: store})
	if !errors.Is(err, ErrBatchExists) {
		t.Fatalf("different input under the same batch id: %v", err)
	}
}

func TestListBatches(t *testing.T) {
	ctx := context.Background()
	exp := t.TempDir()
	writeExport(t, exp, 3, 4, batch.KindSnapshot, nil)
	store, _ := objstore.Open(ctx, t.TempDir(), nil)
	if _, err := BuildExport(ctx, &ExportBuildOptions{Export: exp, Store: store}); err != nil {
		t.Fatal(err)
	}
	// An incomplete upload (files, no manifest) is not a batch.
	store.Put(ctx, "batches/p00001/partial/000001-abc.sst", strings.NewReader("x"), 1, nil)
	all, err := ListBatches(ctx, store, -1)
	if err != nil || len(all) != 3 || all[0].Partition != 0 || all[2].ID != "exp-test-p00002" {
		t.Fatalf("all: %v %+v", err, all)
	}
	one, err := ListBatches(ctx, store, 1)
	if err != nil || len(one) != 1 || one[0].ID != "exp-test-p00001" {
		t.Fatalf("partition 1: %v %+v", err, one)
	}
}

// Lost responses: every other PUT (files and manifests) reaches the server
// but the client hears 500 and retries into 412 (If-None-Match). Upload
// recognises its own objects (same checksum, same source) and the build
// completes.
func TestBuildExportLostResponses(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	proxy := s3test.NewFaultProxy(t, srv.Endpoint)
	store, err := objstore.Open(ctx, srv.URL(""), &objstore.Options{
		S3Endpoint: proxy.Endpoint, S3AccessKeyID: s3test.AccessKey, S3SecretAccessKey: s3test.SecretKey,
		S3MaxAttempts: 3, S3MaxBackoff: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	exp := t.TempDir()
	_, newest := writeExport(t, exp, 2, 10, batch.KindSnapshot, nil)
	reg := &recordingRegisterer{}
	proxy.LoseAlternateResponses(500, "PUT")
	res, err := BuildExport(ctx, &ExportBuildOptions{Export: exp, Store: store, Registerer: reg, Parallelism: 1})
	if err != nil {
		t.Fatal(err)
	}
	proxy.Heal()
	if _, inj := proxy.Counts(); inj < 4 { // a file and a manifest per partition
		t.Fatalf("%d responses lost, want at least 4", inj)
	}
	if reg.registered() != 2 {
		t.Fatalf("%d registered", reg.registered())
	}
	checkBatches(t, store, res, newest)
}

// A snapshot export that does not state its queue ends is refused before
// anything is built or uploaded: its snapshots would escape ordering.
func TestBuildExportRefusesSnapshotWithoutQueueEnds(t *testing.T) {
	ctx := context.Background()
	exp := t.TempDir()
	w, err := NewExportWriter(exp, 2, batch.KindSnapshot, &ExportOptions{ID: "noq"})
	if err != nil {
		t.Fatal(err)
	}
	k := pageKeys(1, 0, 2)[0]
	if err := w.Write(ExportRow{PageKey: hexKey(k), Op: "put", Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	store, err := objstore.Open(ctx, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = BuildExport(ctx, &ExportBuildOptions{Export: exp, Store: store})
	if !errors.Is(err, ErrNoSupersedes) || !strings.Contains(err.Error(), "noq") || !strings.Contains(err.Error(), "queue_ends") {
		t.Fatalf("snapshot export without queue ends: %v", err)
	}
	keys, err := store.List(ctx, "")
	if err != nil || len(keys) != 0 {
		t.Fatalf("refused export left objects: %v %v", keys, err)
	}
}

// TestBuildExportPublication: every batch built from an export carries the
// export's publication; a bad publication id is refused naming it.
func TestBuildExportPublication(t *testing.T) {
	ctx := context.Background()
	exp := t.TempDir()
	const pub = "recursive-s512-o64-54906c2d/hash-d384-ea4b8133"
	w, err := NewExportWriter(exp, 2, batch.KindSnapshot, &ExportOptions{ID: "exp-pub"})
	if err != nil {
		t.Fatal(err)
	}
	w.SetQueueEnds([]int64{0, 0})
	w.SetPublication(pub)
	for _, k := range pageKeys(3, 0, 2) {
		w.Write(ExportRow{PageKey: hexKey(k), Op: "put", Value: []byte("v")})
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	store, _ := objstore.Open(ctx, t.TempDir(), nil)
	res, err := BuildExport(ctx, &ExportBuildOptions{Export: exp, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range res.Partitions {
		if pr.Manifest == nil || pr.Manifest.Publication != pub {
			t.Fatalf("partition %d: manifest %+v, want publication %s", pr.Partition, pr.Manifest, pub)
		}
	}
	bad := ExportMeta{Format: ExportFormat, ID: "x", Partitions: 1, Kind: batch.KindSnapshot, Publication: "a b"}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), `publication "a b"`) {
		t.Fatalf("bad publication: %v", err)
	}
}
