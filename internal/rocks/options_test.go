package rocks

import (
	"path/filepath"
	"testing"

	"github.com/linxGnu/grocksdb"
)

func TestOptionsWriteAndRead(t *testing.T) {
	for _, comp := range []string{"lz4", "zstd", "none"} {
		cfg := TableConfig{Compression: comp}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		opts, err := cfg.Options(nil)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		w := grocksdb.NewSSTFileWriter(grocksdb.NewDefaultEnvOptions(), opts)
		path := filepath.Join(dir, "a.sst")
		if err := w.Open(path); err != nil {
			t.Fatal(err)
		}
		if err := w.Put([]byte("k1"), []byte("v1")); err != nil {
			t.Fatal(err)
		}
		if err := w.Finish(); err != nil {
			t.Fatal(err)
		}
		w.Destroy()
		opts.Destroy()

		cache := grocksdb.NewLRUCache(1 << 20)
		ro, _ := cfg.Options(cache)
		ro.SetCreateIfMissing(true)
		db, err := grocksdb.OpenDb(ro, filepath.Join(dir, "db"))
		if err != nil {
			t.Fatal(err)
		}
		io := grocksdb.NewDefaultIngestExternalFileOptions()
		if err := db.IngestExternalFile([]string{path}, io); err != nil {
			t.Fatal(err)
		}
		rdo := grocksdb.NewDefaultReadOptions()
		v, err := db.GetBytes(rdo, []byte("k1"))
		if err != nil || string(v) != "v1" {
			t.Fatalf("%s: got %q %v", comp, v, err)
		}
		rdo.Destroy()
		io.Destroy()
		db.Close()
		ro.Destroy()
		cache.Destroy()
	}
	if err := (TableConfig{Compression: "snappy2"}).Validate(); err == nil {
		t.Fatal("bad compression accepted")
	}
}

// TestTimeDBMutex: without statistics TimeDBMutex fails naming why; with
// them it raises the level to kAll (5), and a database opened with the
// options serves.
func TestTimeDBMutex(t *testing.T) {
	opts, err := TableConfig{}.Options(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer opts.Destroy()
	opts.SetCreateIfMissing(true)
	if err := TimeDBMutex(opts); err == nil {
		t.Fatal("TimeDBMutex without statistics did not fail")
	}
	opts.EnableStatistics()
	if got := statsLevel(opts); got != 3 {
		t.Fatalf("stats level %d before, want 3 (kExceptDetailedTimers)", got)
	}
	if err := TimeDBMutex(opts); err != nil {
		t.Fatal(err)
	}
	if got := statsLevel(opts); got != 5 {
		t.Fatalf("stats level %d, want 5 (kAll)", got)
	}
	db, err := grocksdb.OpenDb(opts, filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	wo := grocksdb.NewDefaultWriteOptions()
	defer wo.Destroy()
	if err := db.Put(wo, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
}
