package control

import (
	"context"
	"strings"
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

// TestPublicationMetrics: publication changes are counted by kind, and the
// lag collector exports each retained publication's holders and readiness.
func TestPublicationMetrics(t *testing.T) {
	m := NewMetrics()
	e := startEnv(t, backends()[0].dsn(t), 1, func(o *Options) { o.Metrics = m; o.Replicas = 1 })
	ctx := context.Background()
	if err := e.client.RegisterNode(ctx, Node{"pm", "h:1", "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.RegisterPublication(ctx, "c/m", false); err != nil {
		t.Fatal(err)
	}
	mf := manifest("pm-s", 0, 1, "snapshot")
	mf.Publication = "c/m"
	seq, err := e.client.RegisterBatch(ctx, mf)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.client.ReportApplied(ctx, "pm", 0, seq); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Promote(ctx, "", false); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, e.srv.LagCollector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range mfs {
		for _, mm := range f.GetMetric() {
			var labels []string
			for _, l := range mm.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			v := mm.GetGauge().GetValue() + mm.GetCounter().GetValue()
			got[f.GetName()+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	for k, want := range map[string]float64{
		"pillar_control_publication_changes_total{kind=promote}":                  1,
		"pillar_control_publication_changes_total{kind=register}":                 1,
		"pillar_control_publication_ready{publication=c/m,role=live}":             1,
		"pillar_control_publication_replicas_holding{publication=c/m,role=live}":  1,
		"pillar_control_publication_replicas_assigned{publication=c/m,role=live}": 1,
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
}
