package lorry

import (
	"context"
	"testing"
	"time"

	"github.com/pillarkit/pillar/pillar"
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
	got := map[string]int{}
	for _, be := range e.registered(0) {
		m := be.Manifest
		if m.Publication != a && m.Publication != b {
			t.Fatalf("batch %s: publication %q", m.ID, m.Publication)
		}
		got[m.Publication] += int(m.Keys)
	}
	if got[a] != 6 || got[b] != 6 {
		t.Fatalf("keys per publication %v, want 6 each", got)
	}
}
