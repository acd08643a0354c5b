package lorry

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/sstbuilder"
)

// TestBatchesCarryOnePublication: records computed for two publications,
// interleaved in one partition's queue, fresh and bulk, are delivered in
// batches that each carry exactly one publication (the records'), and
// every record reaches a batch of its own publication; a fresh record
// supersedes older bulk records of its page in its own publication only.
func TestBatchesCarryOnePublication(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	keys := keysIn(12, 0, 1)
	const a, b = "c1/hash-d8-aaaa", "c2/hash-d8-bbbb"
	e.enqueue(rec{key: keys[0], val: "a0", pub: a}, rec{key: keys[1], val: "a1", pub: a})
	e.enqueue(rec{key: keys[2], val: "b2", pub: b}, rec{key: keys[3], val: "b3", pub: b})
	e.enqueue(rec{key: keys[4], val: "a4", pub: a, pri: pillar.PriorityBulk}, rec{key: keys[5], val: "a5", pub: a, pri: pillar.PriorityBulk})
	e.enqueue(rec{key: keys[6], val: "b6", pub: b, pri: pillar.PriorityBulk}, rec{key: keys[7], val: "b7", pub: b, pri: pillar.PriorityBulk})
	e.enqueue(rec{key: keys[8], val: "a8", pub: a}, rec{key: keys[9], val: "b9", pub: b, pri: pillar.PriorityBulk})
	// The same page in both: b's fresh record, delivered first, does not
	// supersede a's older bulk one (they go to different databases).
	e.enqueue(rec{key: keys[10], val: "a10", pub: a, pri: pillar.PriorityBulk})
	e.enqueue(rec{key: keys[10], val: "b10", pub: b})
	o := e.opts("w1")
	o.MaxBatchAge = time.Hour
	if _, err := e.worker(o).Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Each batch carries one publication, and the keys delivered in a
	// publication's batches are exactly that publication's records (a
	// replay may deliver a key twice: compared as sets).
	got := map[string]map[string]bool{a: {}, b: {}}
	for _, be := range e.registered(0) {
		m := be.Manifest
		if got[m.Publication] == nil {
			t.Fatalf("batch %s: publication %q", m.ID, m.Publication)
		}
		// Samples = live keys: every key is sampled.
		in, err := sstbuilder.InspectBatch(context.Background(), e.objs.Store, 0, m.ID, &sstbuilder.InspectOptions{Samples: max(1, int(m.Keys-m.Deletes))})
		must(t, err)
		for _, smp := range in.Samples {
			got[m.Publication][smp.Key] = true
		}
	}
	want := map[string][]int{a: {0, 1, 4, 5, 8, 10}, b: {2, 3, 6, 7, 9, 10}}
	for pub, idx := range want {
		var w []string
		for _, i := range idx {
			w = append(w, keys[i])
		}
		var g []string
		for k := range got[pub] {
			g = append(g, k)
		}
		sort.Strings(w)
		sort.Strings(g)
		if strings.Join(g, ",") != strings.Join(w, ",") {
			t.Errorf("publication %s: delivered keys\n%v\nwant\n%v", pub, g, w)
		}
	}
}
