package mget

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/linxGnu/grocksdb"
)

// Get answers what grocksdb's MultiGet answers: values (from the memtable
// and from SST blocks after a flush), absent keys, empty values, and keys
// repeated, in request order.
func TestGetMatchesMultiGet(t *testing.T) {
	opts := grocksdb.NewDefaultOptions()
	defer opts.Destroy()
	opts.SetCreateIfMissing(true)
	db, err := grocksdb.OpenDb(opts, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	wo := grocksdb.NewDefaultWriteOptions()
	defer wo.Destroy()
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	key := func(i int) []byte { return []byte(fmt.Sprintf("key-%012d", i)) } // 16 bytes
	for i := 0; i < 200; i += 2 {
		if err := db.Put(wo, key(i), bytes.Repeat([]byte{byte(i)}, (i*997)%70000)); err != nil {
			t.Fatal(err)
		}
	}
	var r Result
	defer r.Release()
	check := func(when string) {
		var keys []byte
		var list [][]byte
		for _, i := range []int{0, 1, 2, 150, 151, 198, 2, 199} {
			keys = append(keys, key(i)...)
			list = append(list, key(i))
		}
		want, err := db.MultiGet(ro, list...)
		if err != nil {
			t.Fatal(err)
		}
		defer want.Destroy()
		if err := Get(db, ro, keys, 16, &r); err != nil {
			t.Fatal(err)
		}
		if r.Len() != len(list) {
			t.Fatalf("%s: %d results for %d keys", when, r.Len(), len(list))
		}
		for i, w := range want {
			v, ok := r.Value(i)
			if ok != w.Exists() || !bytes.Equal(v, w.Data()) {
				t.Errorf("%s: key %s: got %d bytes (found %v), want %d (found %v)", when, list[i], len(v), ok, w.Size(), w.Exists())
			}
		}
	}
	check("memtable")
	fo := grocksdb.NewDefaultFlushOptions()
	defer fo.Destroy()
	if err := db.Flush(fo); err != nil {
		t.Fatal(err)
	}
	check("after flush")
	if err := Get(db, ro, nil, 16, &r); err != nil || r.Len() != 0 {
		t.Fatalf("no keys: %v, %d results", err, r.Len())
	}
}
