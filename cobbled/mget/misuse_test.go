package mget

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/linxGnu/grocksdb"
)

// A caller's mistake with GetMulti must end in a Go panic or an error
// naming it, never in C reading or writing out of bounds or through a null
// handle (a SIGSEGV kills the node process, and corrupted memory is
// worse). The scenarios that could crash run in a child process (this test
// binary with misuseChild set): the parent passes only when the child
// reports a clean outcome.

const misuseChild = "PILLAR_MGET_MISUSE_CHILD"

// misuseRun runs scenario in a child process of this test binary (the
// test named test) and fails unless the child printed "MISUSE CLEAN".
func misuseRun(t *testing.T, test, scenario string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), misuseChild+"="+scenario)
	out, err := cmd.CombinedOutput()
	if !strings.Contains(string(out), "MISUSE CLEAN") {
		s := string(out)
		if len(s) > 1500 {
			s = s[:1500] + "…"
		}
		t.Fatalf("%s: the child did not end cleanly (%v):\n%s", scenario, err, s)
	}
}

// misuseInChild runs fn in the child and exits: 0 with "MISUSE CLEAN"
// when fn returns an error or panics (a Go panic is a clear failure),
// 3 when it returns nil (the bad call went unnoticed).
func misuseInChild(fn func() error) {
	defer func() {
		if p := recover(); p != nil {
			fmt.Printf("MISUSE CLEAN: panic: %v\n", p)
			os.Exit(0)
		}
	}()
	if err := fn(); err != nil {
		fmt.Printf("MISUSE CLEAN: error: %v\n", err)
		os.Exit(0)
	}
	fmt.Println("MISUSE UNNOTICED: no error, no panic")
	os.Exit(3)
}

func misuseDB(t *testing.T) *grocksdb.DB {
	opts := grocksdb.NewDefaultOptions()
	defer opts.Destroy()
	opts.SetCreateIfMissing(true)
	db, err := grocksdb.OpenDb(opts, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	wo := grocksdb.NewDefaultWriteOptions()
	defer wo.Destroy()
	for i := range 4 {
		if err := db.Put(wo, []byte(fmt.Sprintf("key-%012d", i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// R1: a closed database (grocksdb's Close leaves a nil handle) handed to
// GetMulti with keys to read: the C side dereferences the null rocksdb_t
// (SIGSEGV, the whole process dies) instead of an error for that
// database or a Go panic naming it.
func TestGetMultiClosedDB(t *testing.T) {
	if os.Getenv(misuseChild) == "closed-db" {
		db := misuseDB(t)
		db.Close()
		ro := grocksdb.NewDefaultReadOptions()
		var r Result
		misuseInChild(func() error {
			defer r.Release()
			errs := GetMulti([]*grocksdb.DB{db}, ro, []int{1}, []byte("key-000000000001"), 16, &r)
			return errs[0]
		})
		return
	}
	misuseRun(t, "TestGetMultiClosedDB", "closed-db")
}

// R2: a negative count passes GetMulti's length check (counts {2, -1}
// sum to the one key given) and reaches C as SIZE_MAX: the C side's total
// wraps to 1, database 0 reads two keys from a one-key array and writes
// two results into one-element arrays (Go's r.status, r.data, r.sizes
// included), and database 1 is asked for SIZE_MAX keys.
func TestGetMultiNegativeCount(t *testing.T) {
	if os.Getenv(misuseChild) == "negative-count" {
		db := misuseDB(t)
		defer db.Close()
		ro := grocksdb.NewDefaultReadOptions()
		var r Result
		misuseInChild(func() error {
			defer r.Release()
			errs := GetMulti([]*grocksdb.DB{db, db}, ro, []int{2, -1}, []byte("key-000000000001"), 16, &r)
			for _, err := range errs {
				if err != nil {
					return err
				}
			}
			return nil
		})
		return
	}
	misuseRun(t, "TestGetMultiNegativeCount", "negative-count")
}

// R3: GetMulti's doc says a database with no keys asked is skipped, and
// the C side never touches it, but the Go side reads the handle out of
// every *DB first: a nil *DB with count 0 (a partition with nothing to
// read, a slot left empty) is a nil-pointer panic.
func TestGetMultiNilDBNoKeys(t *testing.T) {
	db := misuseDB(t)
	defer db.Close()
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	var r Result
	defer r.Release()
	var errs []error
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("GetMulti with a nil database asked for no keys panicked: %v", p)
			}
		}()
		errs = GetMulti([]*grocksdb.DB{nil, db}, ro, []int{0, 1}, []byte("key-000000000001"), 16, &r)
	}()
	if len(errs) != 2 || errs[0] != nil || errs[1] != nil {
		t.Fatalf("errors %v", errs)
	}
	if v, ok := r.Value(0); !ok || string(v) != "v" {
		t.Fatalf("key of database 1: %q, found %v", v, ok)
	}
}
