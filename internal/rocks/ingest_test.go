package rocks

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/linxGnu/grocksdb"
)

// writeSST writes keys (with value "v"+suffix) into a new SST at path.
func writeSST(t *testing.T, path, suffix string, keys ...string) {
	t.Helper()
	writeRows(t, path, len(keys), func(i int) ([]byte, []byte) { return []byte(keys[i]), []byte("v" + suffix) })
}

// writeRows writes n rows, row i being kv(i) (keys in order), into a new
// SST at path with the toolkit's table layout.
func writeRows(tb testing.TB, path string, n int, kv func(i int) (key, value []byte)) {
	tb.Helper()
	opts, err := TableConfig{}.Options(nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer opts.Destroy()
	env := grocksdb.NewDefaultEnvOptions()
	defer env.Destroy()
	w := grocksdb.NewSSTFileWriter(env, opts)
	defer w.Destroy()
	if err := w.Open(path); err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		if err := w.Put(kv(i)); err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.Finish(); err != nil {
		tb.Fatal(err)
	}
}

// TestIngestOptions: a snapshot goes into an empty database at the bottom
// level with seqno 0; the snapshot options refuse a file that would need a
// global seqno (the generation was not empty); the delta options take it
// (with a global seqno, above the data it overwrites). The database runs with the Background settings, including a
// rate limiter whose Go handle Apply already destroyed, through a
// compaction.
func TestIngestOptions(t *testing.T) {
	dir := t.TempDir()
	cache := grocksdb.NewLRUCache(1 << 20)
	defer cache.Destroy()
	o, err := TableConfig{}.Options(cache)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Destroy()
	o.SetCreateIfMissing(true)
	Background{CompactionRate: 4 << 20}.Apply(o)
	db, err := grocksdb.OpenDb(o, filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { db.Close() }() // reopened below

	snap, delta := IngestOptions(true), IngestOptions(false)
	defer snap.Destroy()
	defer delta.Destroy()
	for i := range 2 { // two non-overlapping files in one snapshot
		writeSST(t, filepath.Join(dir, fmt.Sprintf("s%d.sst", i)), "s", fmt.Sprintf("%da", i), fmt.Sprintf("%db", i))
	}
	if err := db.IngestExternalFile([]string{filepath.Join(dir, "s0.sst"), filepath.Join(dir, "s1.sst")}, snap); err != nil {
		t.Fatalf("snapshot into an empty database: %v", err)
	}
	if got := db.GetProperty("rocksdb.num-files-at-level6"); got != "2" {
		t.Fatalf("snapshot files at L6: %q, want 2 (bottommost)", got)
	}
	if seq := db.GetLatestSequenceNumber(); seq != 0 {
		t.Fatalf("latest seqno %d after the snapshot, want 0", seq)
	}

	writeSST(t, filepath.Join(dir, "d1.sst"), "d", "0a", "1b")
	if err := db.IngestExternalFile([]string{filepath.Join(dir, "d1.sst")}, snap); err == nil {
		t.Fatal("snapshot options ingested an overlapping file (global seqno needed)")
	}
	staged, err := os.ReadFile(filepath.Join(dir, "d1.sst"))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.IngestExternalFile([]string{filepath.Join(dir, "d1.sst")}, delta); err != nil {
		t.Fatalf("delta: %v", err)
	}
	// write_global_seqno=false: the linked file is byte for byte the staged
	// one (with true, RocksDB writes the seqno into its properties block).
	var linked []byte
	for _, lf := range db.GetLiveFilesMetaData() {
		if lf.Level < 6 { // the snapshot is at L6; the delta lands above it
			if linked, err = os.ReadFile(filepath.Join(dir, "db", lf.Name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !bytes.Equal(linked, staged) {
		t.Fatalf("the ingested delta file (%d bytes) differs from the staged one (%d bytes): its global seqno was written into it", len(linked), len(staged))
	}
	if seq := db.GetLatestSequenceNumber(); seq != 1 {
		t.Fatalf("latest seqno %d after the delta, want 1 (a global seqno)", seq)
	}
	// Set through the C++ shim (7.8's C API has no setters for them).
	if f := ingestFlags(delta); f&ingestWriteGlobalSeqno != 0 || f&ingestFailIfNotBottom != 0 || f&ingestMove == 0 {
		t.Fatalf("delta options flags %#x: want move_files, no write_global_seqno, no fail_if_not_bottommost_level", f)
	}
	if f := ingestFlags(snap); f&ingestWriteGlobalSeqno != 0 || f&ingestFailIfNotBottom == 0 || f&ingestAllowGlobalSeqno != 0 {
		t.Fatalf("snapshot options flags %#x: want fail_if_not_bottommost_level, no write_global_seqno, no allow_global_seqno", f)
	}
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	// The delta's seqno is in the MANIFEST only (write_global_seqno=false):
	// after a reopen, before any compaction, the delta still wins.
	db.Close()
	if db, err = grocksdb.OpenDb(o, filepath.Join(dir, "db")); err != nil {
		t.Fatal(err)
	}
	if v, err := db.GetBytes(ro, []byte("0a")); err != nil || string(v) != "vd" {
		t.Fatalf("0a after a reopen = %q, %v; want the delta's vd", v, err)
	}
	db.CompactRange(grocksdb.Range{})
	for k, want := range map[string]string{"0a": "vd", "0b": "vs", "1b": "vd"} {
		v, err := db.GetBytes(ro, []byte(k))
		if err != nil || string(v) != want {
			t.Fatalf("%s = %q, %v; want %q", k, v, err, want)
		}
	}
	if err := (Background{CompactionRate: -1}).Validate(); err == nil {
		t.Fatal("negative compaction rate accepted")
	}
	for _, trig := range []int{-1, 40} {
		if err := (Background{L0CompactionTrigger: trig}).Validate(); err == nil {
			t.Fatalf("L0 compaction trigger %d accepted", trig)
		}
	}
}

func TestL0CompactionTrigger(t *testing.T) {
	o := grocksdb.NewDefaultOptions()
	defer o.Destroy()
	o.SetLevel0FileNumCompactionTrigger(8)
	Background{}.Apply(o)
	if got := o.GetLevel0FileNumCompactionTrigger(); got != 8 {
		t.Fatalf("default Background changed the trigger to %d", got)
	}
	Background{L0CompactionTrigger: 24}.Apply(o)
	if got := o.GetLevel0FileNumCompactionTrigger(); got != 24 {
		t.Fatalf("trigger %d, want 24", got)
	}
}
