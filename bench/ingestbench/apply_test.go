package ingestbench

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/pillarkit/pillar/cobbled"
	"github.com/pillarkit/pillar/internal/testcluster"
)

// BenchmarkSnapshotApply measures the unpaced snapshot ingest alone, with no
// read load: the node's Apply (download with SHA-256, block verification,
// new generation) against the floor (a bare IngestExternalFile loop copying
// the same files from the object store into a fresh database), side by
// side: every iteration runs floor, node, floor on the same files, and the
// benchmark reports both rates and node/floor (the target: ≥ 0.8).
//
//	go test -run '^$' -bench SnapshotApply -benchtime 3x ./bench/ingestbench/
//
// INGESTBENCH_SNAPSHOT_MB sets the snapshot's size (default 256).
func BenchmarkSnapshotApply(b *testing.B) {
	mb := 256
	if v, err := strconv.Atoi(os.Getenv("INGESTBENCH_SNAPSHOT_MB")); err == nil && v > 0 {
		mb = v
	}
	ctx := context.Background()
	dir := b.TempDir()
	o := Options{Partitions: 2, Keys: 200, SnapshotBytes: int64(mb) << 20, Quiet: true}
	o.ensureDefaults()
	bb := &bench{o: o, log: o.Logger, seq: map[int]int64{}, loadReady: make(chan struct{})}
	c, err := testcluster.Start(ctx, testcluster.Options{Dir: filepath.Join(dir, "cluster"), Nodes: 1, Replicas: 1, Partitions: o.Partitions,
		Keys: o.Keys, MinValue: o.MinValue, MaxValue: o.MaxValue, CacheBytes: o.CacheBytes, Logger: o.Logger,
		Node: func(no *cobbled.Options) { no.SnapshotConcurrency = 1 }})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	bb.c, bb.node = c, c.Members()[0].Node()
	for p := range o.Partitions {
		bb.seq[p] = 2 // the cluster applied seq 1
	}
	if err := bb.buildSnapshot(ctx, filepath.Join(dir, "build")); err != nil {
		b.Fatal(err)
	}
	bytes := float64(manifestBytes(bb.snap))
	var floorT, nodeT time.Duration
	floors := 0
	b.ResetTimer()
	for range b.N {
		for i := range 3 {
			if i == 1 {
				t0 := time.Now()
				if err := bb.node.Apply(ctx, cobbled.Batch{Seq: bb.nextSeq(o.SnapshotPartition), Manifest: *bb.snap}); err != nil {
					b.Fatal(err)
				}
				nodeT += time.Since(t0)
				continue
			}
			var r Result
			if err := bb.floor(ctx, &r, filepath.Join(dir, "floor")); err != nil {
				b.Fatal(err)
			}
			floorT += r.IngestTime
			floors++
		}
	}
	b.StopTimer()
	floorMBps := bytes * float64(floors) / 1e6 / floorT.Seconds()
	nodeMBps := bytes * float64(b.N) / 1e6 / nodeT.Seconds()
	b.ReportMetric(floorMBps, "floor-MB/s")
	b.ReportMetric(nodeMBps, "node-MB/s")
	b.ReportMetric(nodeMBps/floorMBps, "node/floor")
}
