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

// GetMulti reads several databases in one call: each key's value comes from
// its own database (the same key holds a different value in each), a
// database with no keys asked is skipped, and a database read next to
// others answers as it does alone.
func TestGetMultiReadsEachDatabase(t *testing.T) {
	opts := grocksdb.NewDefaultOptions()
	defer opts.Destroy()
	opts.SetCreateIfMissing(true)
	wo := grocksdb.NewDefaultWriteOptions()
	defer wo.Destroy()
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	key := func(i int) []byte { return []byte(fmt.Sprintf("key-%012d", i)) }
	val := func(db, i int) []byte { return bytes.Repeat([]byte{byte(db*31 + i)}, (db*7919+i*997)%20000+1) }
	var dbs []*grocksdb.DB
	for d := range 3 {
		db, err := grocksdb.OpenDb(opts, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		for i := 0; i < 20; i += 2 { // odd keys absent
			if err := db.Put(wo, key(i), val(d, i)); err != nil {
				t.Fatal(err)
			}
		}
		dbs = append(dbs, db)
	}
	asks := [][]int{{0, 1, 4}, {}, {2, 4, 19, 2}} // per database
	var keys []byte
	var counts []int
	type want struct {
		v  []byte
		ok bool
	}
	var wants []want
	for d, ks := range asks {
		counts = append(counts, len(ks))
		for _, i := range ks {
			keys = append(keys, key(i)...)
			if i%2 == 0 {
				wants = append(wants, want{val(d, i), true})
			} else {
				wants = append(wants, want{nil, false})
			}
		}
	}
	var r Result
	defer r.Release()
	for round := range 2 { // the second reuses r's buffers
		errs := GetMulti(dbs, ro, counts, keys, 16, &r)
		if len(errs) != len(dbs) {
			t.Fatalf("round %d: %d errors for %d databases", round, len(errs), len(dbs))
		}
		for j, err := range errs {
			if err != nil {
				t.Fatalf("round %d: database %d: %v", round, j, err)
			}
		}
		if r.Len() != len(wants) {
			t.Fatalf("round %d: %d results for %d keys", round, r.Len(), len(wants))
		}
		for i, w := range wants {
			v, ok := r.Value(i)
			if ok != w.ok || !bytes.Equal(v, w.v) {
				t.Errorf("round %d: key %d: got %d bytes (found %v), want %d (found %v)", round, i, len(v), ok, len(w.v), w.ok)
			}
		}
	}
	if errs := GetMulti(nil, ro, nil, nil, 16, &r); len(errs) != 0 || r.Len() != 0 {
		t.Fatalf("no databases: %v, %d results", errs, r.Len())
	}
}

// A database asked for one key is read with DB::Get rather than MultiGet:
// a found key (memtable and SST), an absent one, and one-key databases
// beside a several-key one in the same call answer as grocksdb's Get does.
func TestGetMultiOneKeyDatabases(t *testing.T) {
	opts := grocksdb.NewDefaultOptions()
	defer opts.Destroy()
	opts.SetCreateIfMissing(true)
	wo := grocksdb.NewDefaultWriteOptions()
	defer wo.Destroy()
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	fo := grocksdb.NewDefaultFlushOptions()
	defer fo.Destroy()
	key := func(i int) []byte { return []byte(fmt.Sprintf("key-%012d", i)) }
	var dbs []*grocksdb.DB
	for d := range 3 {
		db, err := grocksdb.OpenDb(opts, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		for i := 0; i < 10; i += 2 {
			if err := db.Put(wo, key(i), bytes.Repeat([]byte{byte(d*10 + i)}, 1000*(i+1)+d)); err != nil {
				t.Fatal(err)
			}
		}
		if d == 1 {
			if err := db.Flush(fo); err != nil {
				t.Fatal(err)
			}
		}
		dbs = append(dbs, db)
	}
	for _, asks := range [][][]int{{{4}, {2}, {3}}, {{1}, {0, 8, 5}, {6}}, {{}, {9}, {}}} {
		var keys []byte
		var counts []int
		var who []int
		for d, ks := range asks {
			counts = append(counts, len(ks))
			for _, i := range ks {
				keys = append(keys, key(i)...)
				who = append(who, d)
			}
		}
		var r Result
		errs := GetMulti(dbs, ro, counts, keys, 16, &r)
		for j, err := range errs {
			if err != nil {
				t.Fatalf("%v: database %d: %v", asks, j, err)
			}
		}
		for i, d := range who {
			w, err := dbs[d].Get(ro, keys[i*16:(i+1)*16])
			if err != nil {
				t.Fatal(err)
			}
			v, ok := r.Value(i)
			if ok != w.Exists() || !bytes.Equal(v, w.Data()) {
				t.Errorf("%v: key %d of db %d: got %d bytes (found %v), want %d (found %v)", asks, i, d, len(v), ok, w.Size(), w.Exists())
			}
			w.Free()
		}
		r.Release()
	}
}
