package rocks

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/linxGnu/grocksdb"
)

// warmDB is a database with statistics, a block cache and a Warmer.
type warmDB struct {
	t     *testing.T
	dir   string
	cache *grocksdb.Cache
	o     *grocksdb.Options
	w     *Warmer
	db    *grocksdb.DB
	ro    *grocksdb.ReadOptions
}

func openWarmDB(t *testing.T, compactions bool, maxFile int64, tune ...func(*grocksdb.Options)) *warmDB {
	t.Helper()
	d := &warmDB{t: t, dir: t.TempDir(), cache: grocksdb.NewLRUCache(64 << 20)}
	t.Cleanup(d.cache.Destroy)
	o, err := TableConfig{}.Options(d.cache)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Destroy)
	d.o = o
	o.SetCreateIfMissing(true)
	o.EnableStatistics()
	o.SetDisableAutoCompactions(true) // compactions below are the test's own
	Background{}.Apply(o)
	for _, f := range tune {
		f(o)
	}
	if d.w, err = NewWarmer(o, compactions, maxFile); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.w.Destroy)
	if d.db, err = grocksdb.OpenDb(o, filepath.Join(d.dir, "db")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.db.Close)
	d.ro = grocksdb.NewDefaultReadOptions()
	t.Cleanup(d.ro.Destroy)
	return d
}

// value is key k's value in version v: 4 KiB, so the data spans many
// 16 KiB blocks.
func value(k, v int) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("%05d-%d|", k, v)), 4096/8)
}

func key(k int) []byte { return []byte(fmt.Sprintf("k%05d", k)) }

// sst writes keys lo..hi-1 in version v to a new SST and returns its path.
func (d *warmDB) sst(name string, lo, hi, v int) string {
	d.t.Helper()
	path := filepath.Join(d.dir, name)
	writeRows(d.t, path, hi-lo, func(i int) ([]byte, []byte) { return key(lo + i), value(lo+i, v) })
	return path
}

func (d *warmDB) ingest(path string, snapshot bool) {
	d.t.Helper()
	ing := IngestOptions(snapshot)
	defer ing.Destroy()
	if err := d.db.IngestExternalFile([]string{path}, ing); err != nil {
		d.t.Fatal(err)
	}
}

var tickerRE = regexp.MustCompile(`rocksdb\.block\.cache\.data\.miss COUNT : (\d+)`)

// dataMisses is the database's block cache data-block miss count.
func (d *warmDB) dataMisses() int {
	m := tickerRE.FindStringSubmatch(d.o.GetStatisticsString())
	if m == nil {
		d.t.Fatal("no rocksdb.block.cache.data.miss in the statistics")
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// readMisses reads keys lo..hi-1, checks they hold version v, and returns
// the data-block cache misses the reads took.
func (d *warmDB) readMisses(lo, hi, v int) int {
	d.t.Helper()
	before := d.dataMisses()
	for k := lo; k < hi; k++ {
		got, err := d.db.GetBytes(d.ro, key(k))
		if err != nil || !bytes.Equal(got, value(k, v)) {
			d.t.Fatalf("key %d: %.20q, %v; want version %d", k, got, err, v)
		}
	}
	return d.dataMisses() - before
}

// TestWarmer: a delta warmed before ingest is read without a data-block
// miss, and one not warmed misses (so the check can fail); compaction
// outputs are warmed before they serve, unless the listener is off or the
// file is over the size limit.
func TestWarmer(t *testing.T) {
	d := openWarmDB(t, true, 1<<30)
	d.ingest(d.sst("base.sst", 0, 400, 0), true)

	warm := d.sst("d1.sst", 0, 200, 1)
	n, err := d.w.WarmFile(warm)
	if err != nil || n < 200*4096 {
		t.Fatalf("WarmFile: %d bytes, %v; want ≥ %d", n, err, 200*4096)
	}
	d.ingest(warm, false)
	if m := d.readMisses(0, 200, 1); m != 0 {
		t.Fatalf("warmed delta: %d data-block misses, want 0", m)
	}
	d.ingest(d.sst("d2.sst", 200, 400, 1), false)
	if m := d.readMisses(200, 400, 1); m == 0 {
		t.Fatal("delta not warmed: no data-block miss (the check above proves nothing)")
	}

	if s := d.w.Stats(); s.TrackedFiles != 1 || s.ErasedBlocks != 0 {
		t.Fatalf("before the compaction: %+v, want the warmed delta tracked", s)
	}
	d.db.CompactRange(grocksdb.Range{})
	if got := d.db.GetProperty("rocksdb.num-files-at-level0"); got != "0" {
		t.Fatalf("L0 files after the compaction: %s", got)
	}
	// The warmed delta, an input, was deleted: its blocks left the cache
	// (followed from its staged name to its ingested one), and only the
	// compaction's output is tracked.
	if s := d.w.Stats(); s.TrackedFiles != 1 || s.ErasedBlocks < 200*4096/(16<<10) {
		t.Fatalf("after the compaction: %+v, want the output tracked and the delta's ≥%d blocks erased", s, 200*4096/(16<<10))
	}
	if m := d.readMisses(0, 400, 1); m != 0 {
		t.Fatalf("warmed compaction output: %d data-block misses, want 0", m)
	}
	s := d.w.Stats()
	if s.Files != 1 || s.Bytes != uint64(n) || s.CompactionFiles == 0 || s.CompactionBytes == 0 || s.CompactionSkipped != 0 || s.Failed+s.CompactionFailed != 0 {
		t.Fatalf("stats %+v", s)
	}
	if _, err := d.w.WarmFile(filepath.Join(d.dir, "missing.sst")); err == nil || d.w.Stats().Failed != 1 {
		t.Fatalf("warming a missing file: %v, stats %+v", err, d.w.Stats())
	}
	// A generation the caller deletes itself: DropDir erases its blocks.
	before, erased := d.cache.GetUsage(), d.w.Stats().ErasedBlocks
	d.w.DropDir(filepath.Join(d.dir, "db"))
	if s := d.w.Stats(); s.TrackedFiles != 0 || s.ErasedBlocks <= erased || d.cache.GetUsage() >= before-400*4096/2 {
		t.Fatalf("DropDir: %+v, cache usage %d → %d", s, before, d.cache.GetUsage())
	}
	if m := d.readMisses(0, 400, 1); m == 0 {
		t.Fatal("blocks read without a miss after DropDir erased them")
	}

	for _, c := range []struct {
		name        string
		compactions bool
		maxFile     int64
	}{{"listener off", false, 1 << 30}, {"file over the limit", true, 4096}} {
		t.Run(c.name, func(t *testing.T) {
			d := openWarmDB(t, c.compactions, c.maxFile)
			d.ingest(d.sst("base.sst", 0, 100, 0), true)
			d.ingest(d.sst("d1.sst", 0, 100, 1), false)
			d.db.CompactRange(grocksdb.Range{})
			if m := d.readMisses(0, 100, 1); m == 0 {
				t.Fatal("compaction output read without a miss")
			}
			if s := d.w.Stats(); s.CompactionFiles != 0 || (c.compactions && s.CompactionSkipped == 0) {
				t.Fatalf("stats %+v", s)
			}
		})
	}
	if _, err := NewWarmer(d.o, false, -1); err == nil {
		t.Fatal("negative max file accepted")
	}
	d.w.Destroy() // twice (Cleanup too), and its methods after it are harmless
	if _, err := d.w.WarmFile(warm); err == nil || d.w.Stats() != (WarmStats{}) {
		t.Fatal("a destroyed Warmer warmed a file or kept its stats")
	}
	d.w.DropDir(d.dir)
}

// TestWarmerBudgetPerCompaction: a compaction that writes many output files
// warms them only while their total is within the budget.
func TestWarmerBudgetPerCompaction(t *testing.T) {
	d := openWarmDB(t, true, 160<<10, func(o *grocksdb.Options) { o.SetTargetFileSizeBase(64 << 10) }) // many outputs
	r := rand.New(rand.NewPCG(5, 6))
	rnd := func() []byte {
		b := make([]byte, 4096)
		for i := range b {
			b[i] = byte(r.Uint32()) // incompressible: ~4 KiB per key on disk
		}
		return b
	}
	for i, name := range []string{"a.sst", "b.sst"} {
		path := filepath.Join(d.dir, name)
		writeRows(t, path, 200, func(k int) ([]byte, []byte) { return key(k), rnd() })
		d.ingest(path, i == 0)
	}
	d.db.CompactRange(grocksdb.Range{})
	s := d.w.Stats()
	if s.CompactionFiles == 0 || s.CompactionSkipped == 0 || s.CompactionBytes > 160<<10 {
		t.Fatalf("stats %+v: want some outputs warmed, the rest skipped, at most 160 KiB warmed", s)
	}
}
