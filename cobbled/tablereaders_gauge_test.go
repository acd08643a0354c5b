package cobbled

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pillarkit/pillar/internal/batch"
)

// TestTableReaderMemoryReported: the node keeps index and filter blocks in
// its table readers, outside the block cache's bound (--cache), for every
// SST of every publication of every partition (max_open_files -1 keeps
// every reader open). An operator sizing a node by --cache, or watching
// cobbled_block_cache_usage_bytes, must see that memory too: a gauge whose
// name says "table_reader" holds at least the sum of
// rocksdb.estimate-table-readers-mem.
func TestTableReaderMemoryReported(t *testing.T) {
	const parts = 4
	objects, dir := t.TempDir(), t.TempDir()
	n := openTestNode(t, dir, objects, parts, nil)
	defer n.Close()
	ctx := context.Background()
	for p := range parts {
		var ops []op
		for i, k := range keysIn(4000, p, parts) {
			ops = append(ops, op{key: k, val: fmt.Sprintf("v%d", i)})
		}
		m := writeBatch(t, objects, parts, p, fmt.Sprintf("s%d", p), batch.KindSnapshot, ops, 0)
		must(t, n.Apply(ctx, Batch{Seq: 1, Manifest: m}))
	}
	var readers int64
	for _, p := range *n.parts.Load() {
		if p == nil {
			continue
		}
		p.mu.RLock()
		for _, d := range p.dbs {
			v, err := strconv.ParseInt(d.db.GetProperty("rocksdb.estimate-table-readers-mem"), 10, 64)
			must(t, err)
			readers += v
		}
		p.mu.RUnlock()
	}
	if readers < parts*4000 {
		t.Fatalf("the table readers hold %d bytes for %d keys: index and filter are not in them", readers, parts*4000)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(n.opts.Metrics.Collectors()...)
	mfs, err := reg.Gather()
	must(t, err)
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
		if !strings.Contains(mf.GetName(), "table_reader") {
			continue
		}
		var sum float64
		for _, m := range mf.GetMetric() {
			sum += m.GetGauge().GetValue()
		}
		if sum < float64(readers) {
			t.Fatalf("%s = %v, but the table readers hold %d bytes", mf.GetName(), sum, readers)
		}
		return
	}
	t.Fatalf("the table readers hold %d bytes outside the block cache (capacity %d, in use %d), and no metric reports them; metrics: %s",
		readers, n.Stats().CacheCapacity, n.Stats().CacheUsage, strings.Join(names, " "))
}
