package control

import (
	"context"
	"testing"
	"time"

	"github.com/pillarkit/pillar/internal/batch"
	"github.com/prometheus/client_golang/prometheus"
)

func TestMetrics(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	m := NewMetrics()
	e := startEnv(t, backends()[0].dsn(t), 2, func(o *Options) { o.Metrics = m; o.Now = clock.Now })
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, e.srv.LagCollector())
	ctx := context.Background()
	for i, z := range []string{"a", "b"} {
		if err := e.client.RegisterNode(ctx, Node{ID: "m" + z, Addr: "127.0.0.1:" + string(rune('1'+i)), Zone: z}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"m-1", "m-2", "m-1"} {
		if _, err := e.client.RegisterBatch(ctx, manifest(id, 0, 2, batch.KindDelta)); err != nil {
			t.Fatal(err)
		}
	}
	clock.Add(7 * time.Second)
	if err := e.client.ReportApplied(ctx, "ma", 0, 1); err != nil {
		t.Fatal(err)
	}
	e.client.RegisterBatch(ctx, manifest("bad", 5, 2, batch.KindDelta))
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, mm := range mf.GetMetric() {
			name := mf.GetName()
			for _, lp := range mm.GetLabel() {
				name += "," + lp.GetName() + "=" + lp.GetValue()
			}
			switch {
			case mm.Counter != nil:
				got[name] = mm.Counter.GetValue()
			case mm.Gauge != nil:
				got[name] = mm.Gauge.GetValue()
			}
		}
	}
	for name, want := range map[string]float64{
		"pillar_control_batches_registered_total":                             2,
		"pillar_control_max_replica_lag_batches":                              2,
		"pillar_control_max_replica_lag_seconds":                              7,
		"pillar_control_replicas_behind":                                      2,
		"pillar_control_lag_scrape_ok":                                        1,
		"pillar_control_nodes,state=up":                                       2,
		"pillar_control_nodes,state=down":                                     0,
		"pillar_control_rpcs_total,code=InvalidArgument,method=RegisterBatch": 1,
		"pillar_control_rpcs_total,code=OK,method=RegisterBatch":              3,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
}
