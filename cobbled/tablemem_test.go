package cobbled

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/pillarkit/pillar/internal/batch"
)

// A partition's index and filter blocks are held by its table readers,
// not looked up in the block cache on every read (Open): the
// readers' memory includes the bloom filter of every key (10 bits a key).
func TestIndexAndFilterInTableReaders(t *testing.T) {
	const parts = 2
	objects, dir := t.TempDir(), t.TempDir()
	n := openTestNode(t, dir, objects, parts, nil)
	defer n.Close()
	var ops []op
	for i, k := range keysIn(4000, 0, parts) {
		ops = append(ops, op{key: k, val: fmt.Sprintf("v%d", i)})
	}
	m := writeBatch(t, objects, parts, 0, "s0", batch.KindSnapshot, ops, 0)
	must(t, n.Apply(context.Background(), Batch{Seq: 1, Manifest: m}))
	p := (*n.parts.Load())[0]
	p.mu.RLock()
	defer p.mu.RUnlock()
	if len(p.dbs) == 0 {
		t.Fatal("partition 0 has no database after its snapshot")
	}
	for pub, d := range p.dbs {
		mem, err := strconv.ParseInt(d.db.GetProperty("rocksdb.estimate-table-readers-mem"), 10, 64)
		must(t, err)
		// 4000 keys × 10 bits of filter = 5,000 bytes; in the block
		// cache instead, the readers hold a few hundred bytes.
		if mem < 4000 {
			t.Errorf("publication %q: table readers hold %d bytes: the filter (≥ 5,000 bytes) is not in them", pub, mem)
		}
	}
}
