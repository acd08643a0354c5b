package cobbled

import (
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/pace"
	"github.com/pillarkit/pillar/internal/rocks"
)

func manifestBytes(m batch.Manifest) int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

// TestPacedApply: every downloaded byte passes the pacer in its class, a
// rate below the batch size makes the download wait, the data is applied
// as without pacing, and the metrics show it.
func TestPacedApply(t *testing.T) {
	const parts, p = 4, 1
	objects, dir := t.TempDir(), t.TempDir()
	k := keysIn(40, p, parts)
	var snapOps, deltaOps []op
	for i, key := range k {
		if i < 30 {
			big := make([]byte, 20<<10) // incompressible: the SST is ~600 KB
			rand.Read(big)
			snapOps = append(snapOps, op{key: key, val: string(big)})
		} else {
			deltaOps = append(deltaOps, op{key: key, val: "d"})
		}
	}
	snap := writeBatch(t, objects, parts, p, "s-01", batch.KindSnapshot, snapOps, 0)
	delta := writeBatch(t, objects, parts, p, "d-02", batch.KindDelta, deltaOps, 0)
	metrics := NewMetrics()
	n := openTestNode(t, dir, objects, parts, func(o *Options) {
		// Adaptive on (a target no read reaches): the snapshot's
		// verification runs deprioritised (pace.RunClass).
		o.Pace = pace.Options{Rate: 16 << 20, Burst: 64 << 10, TargetP99: time.Hour}
		o.Background = rocks.Background{CompactionRate: 8 << 20}
		o.Metrics = metrics
	})
	defer n.Close()
	ctx := context.Background()
	must(t, n.Apply(ctx, Batch{Seq: 1, Manifest: snap}))
	must(t, n.Apply(ctx, Batch{Seq: 2, Manifest: delta}))
	want := model{}.apply(batch.KindSnapshot, snapOps).apply(batch.KindDelta, deltaOps)
	checkModel(t, n, p, k, want)

	s := n.Pacer().Stats()
	if got, want := s.Class[pace.Bulk].Bytes, manifestBytes(snap); got != want {
		t.Fatalf("snapshot bytes through the pacer %d, want %d", got, want)
	}
	if got, want := s.Class[pace.Fresh].Bytes, manifestBytes(delta); got != want {
		t.Fatalf("delta bytes through the pacer %d, want %d", got, want)
	}
	if s.Class[pace.Bulk].LowRuns != int64(len(snap.Files)) || s.Class[pace.Fresh].LowRuns != 0 {
		t.Fatalf("verifications run deprioritised: snapshot %d (want one per file, %d), delta %d (want 0)", s.Class[pace.Bulk].LowRuns, len(snap.Files), s.Class[pace.Fresh].LowRuns)
	}
	if s.Class[pace.Bulk].Waits == 0 || s.Rate != 16<<20 {
		t.Fatalf("a %d-byte snapshot at 16 MiB/s with a 64 KiB burst never waited: %+v", manifestBytes(snap), s)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.Collectors()...)
	fams, err := reg.Gather()
	must(t, err)
	seen := map[string]bool{}
	for _, mf := range fams {
		seen[mf.GetName()] = true
		if mf.GetName() != "cobbled_ingest_bytes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if l := m.GetLabel(); len(l) == 1 && l[0].GetValue() == "snapshot" && m.GetCounter().GetValue() != float64(manifestBytes(snap)) {
				t.Fatalf("cobbled_ingest_bytes_total{kind=snapshot} = %v, want %d", m.GetCounter().GetValue(), manifestBytes(snap))
			}
		}
	}
	for _, name := range []string{"cobbled_ingest_bytes_total", "cobbled_ingest_throttle_waits_total", "cobbled_ingest_throttle_wait_seconds_total",
		"cobbled_compaction_pending_bytes", "cobbled_l0_files", "cobbled_ingest_rate_limit_bytes", "cobbled_ingest_pacer_read_p99_seconds",
		"cobbled_cache_warm_files_total", "cobbled_cache_warm_bytes_total"} {
		if !seen[name] {
			t.Errorf("metric %s not exposed", name)
		}
	}
	if cs := n.CompactionStats(); cs.L0Files != 1 {
		t.Errorf("compaction stats %+v: want the delta's one L0 file", cs)
	}
	// The delta's files were read into the block cache before ingest, the
	// snapshot's were not.
	if ws := n.warmer.Stats(); ws.Files != uint64(len(delta.Files)) || ws.Bytes == 0 || ws.Failed != 0 {
		t.Errorf("warm stats %+v: want the delta's %d file(s) warmed", ws, len(delta.Files))
	}
}

// TestSnapshotSlot: one snapshot at a time with SnapshotConcurrency 1; deltas
// never wait for the slot.
func TestSnapshotSlot(t *testing.T) {
	n := openTestNode(t, t.TempDir(), t.TempDir(), 4, func(o *Options) { o.SnapshotConcurrency = 1 })
	defer n.Close()
	snap := &batch.Manifest{Kind: batch.KindSnapshot}
	ctx := context.Background()
	_, release, err := n.paceBatch(ctx, snap)
	must(t, err)
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, _, err := n.paceBatch(short, snap); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second snapshot: got %v, want to wait for the slot", err)
	}
	dctx, drelease, err := n.paceBatch(short, &batch.Manifest{Kind: batch.KindDelta})
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	if c, _ := dctx.Value(paceClassKey{}).(pace.Class); err == nil && c != pace.Fresh {
		t.Fatalf("delta class %v", c)
	}
	drelease()
	release()
	_, release, err = n.paceBatch(ctx, snap)
	must(t, err)
	release()
}

func TestPaceOptionsValidated(t *testing.T) {
	for _, o := range []Options{
		{Dir: "x", Pace: pace.Options{Rate: -1}},
		{Dir: "x", SnapshotConcurrency: -1},
		{Dir: "x", Background: rocks.Background{CompactionRate: -5}},
		{Dir: "x", Background: rocks.Background{WarmMaxFile: -1}},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}
