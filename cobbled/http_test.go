package cobbled

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/health"
)

func TestHealthzAndMetrics(t *testing.T) {
	const parts = 2
	objects, dir := t.TempDir(), t.TempDir()
	n := openTestNode(t, dir, objects, parts, nil)
	k := keysIn(1, 1, parts)[0]
	m := writeBatch(t, objects, parts, 1, "h1", batch.KindSnapshot, []op{{key: k, val: "value"}}, 0)
	must(t, n.Apply(context.Background(), Batch{Seq: 1, Manifest: m}))
	out, err := n.batchGet(context.Background(), &servepb.BatchGetRequest{Keys: [][]byte{[]byte(k), []byte(keysIn(1, 0, parts)[0])}})
	must(t, err)
	out.(*servepb.Encoded).Buf.Free()

	rec := httptest.NewRecorder()
	n.HealthHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	rep, err := health.DecodeBody(rec.Body.Bytes()) // the one shape (internal/health)
	must(t, err)
	var detail HealthDetail
	b, _ := json.Marshal(rep.Detail)
	must(t, json.Unmarshal(b, &detail))
	if rec.Code != 200 || rep.Component != "cobbled" || rep.Status != "ok" || detail.Held != 1 || detail.Serving != 1 || detail.Partitions != parts ||
		detail.PublicationBytes[""] == 0 {
		t.Fatalf("healthz %d: %s", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	n.HealthHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != 200 {
		t.Fatalf("readyz %d: %s", rec.Code, rec.Body)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(n.opts.Metrics.Collectors()...)
	mfs, err := reg.Gather()
	must(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "/" + l.GetValue()
			}
			switch {
			case m.Counter != nil:
				got[name] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				got[name] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				got[name] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	for name, want := range map[string]float64{
		"cobbled_batchget_requests_total/OK":             1,
		"cobbled_batchget_keys_total/found":              1,
		"cobbled_batchget_keys_total/not_served":         1,
		"cobbled_batchget_value_bytes_total":             5,
		"cobbled_batchget_duration_seconds":              1,
		"cobbled_partition_applied_seq/1":                1,
		"cobbled_ingest_batches_total/snapshot":          1,
		"cobbled_ingest_apply_duration_seconds/snapshot": 1,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
	if _, ok := got["cobbled_block_cache_hit_ratio"]; !ok {
		t.Errorf("no cache hit ratio")
	}

	n.Close()
	rec = httptest.NewRecorder()
	n.HealthHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rep, err := health.DecodeBody(rec.Body.Bytes()); rec.Code != 503 || err != nil || rep.Status != "closing" {
		t.Fatalf("healthz after close: %d %s (%v)", rec.Code, rec.Body, err)
	}
}
