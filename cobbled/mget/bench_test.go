package mget

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/linxGnu/grocksdb"
)

// BenchmarkGetMultiOneKeyEach reads one key from each of 12 databases (a
// 12-key BatchGet over a dozen partitions, ~50 KB values, all in the block
// cache) in one GetMulti call: "get" reads each with DB::Get (the default),
// "multiget" with the batched MultiGet of one key, side by side in one run;
// "grocksdb-get" is the copying per-key Get of grocksdb, for scale.
//
//	go test -run '^$' -bench GetMultiOneKeyEach -count 5 ./cobbled/mget/
func BenchmarkGetMultiOneKeyEach(b *testing.B) {
	const ndb = 12
	opts := grocksdb.NewDefaultOptions()
	defer opts.Destroy()
	opts.SetCreateIfMissing(true)
	bbto := grocksdb.NewDefaultBlockBasedTableOptions()
	defer bbto.Destroy()
	cache := grocksdb.NewLRUCache(256 << 20)
	defer cache.Destroy()
	bbto.SetBlockCache(cache)
	opts.SetBlockBasedTableFactory(bbto)
	wo := grocksdb.NewDefaultWriteOptions()
	defer wo.Destroy()
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	fo := grocksdb.NewDefaultFlushOptions()
	defer fo.Destroy()
	key := func(i int) []byte { return []byte(fmt.Sprintf("key-%012d", i)) }
	var dbs []*grocksdb.DB
	var keys []byte
	for d := range ndb {
		db, err := grocksdb.OpenDb(opts, b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		for i := range 64 {
			if err := db.Put(wo, key(i), bytes.Repeat([]byte{byte(i)}, 50<<10)); err != nil {
				b.Fatal(err)
			}
		}
		if err := db.Flush(fo); err != nil {
			b.Fatal(err)
		}
		dbs = append(dbs, db)
		keys = append(keys, key(d*5%64)...)
	}
	counts := make([]int, ndb)
	for j := range counts {
		counts[j] = 1
	}
	for _, mode := range []string{"get", "multiget", "grocksdb-get"} {
		b.Run(mode, func(b *testing.B) {
			setSingleKeyGet(mode != "multiget")
			defer setSingleKeyGet(true)
			var r Result
			defer r.Release()
			b.SetBytes(ndb * 50 << 10)
			for range b.N {
				if mode == "grocksdb-get" {
					for j, db := range dbs {
						v, err := db.Get(ro, keys[j*16:(j+1)*16])
						if err != nil || !v.Exists() {
							b.Fatal(err)
						}
						v.Free()
					}
					continue
				}
				for j, err := range GetMulti(dbs, ro, counts, keys, 16, &r) {
					if err != nil {
						b.Fatal(j, err)
					}
				}
				if _, ok := r.Value(ndb - 1); !ok {
					b.Fatal("key not found")
				}
			}
		})
	}
}
