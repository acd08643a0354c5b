package sstverify

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linxGnu/grocksdb"
)

func writeSST(t *testing.T, path string, n int) {
	t.Helper()
	eo := grocksdb.NewDefaultEnvOptions()
	defer eo.Destroy()
	o := grocksdb.NewDefaultOptions()
	defer o.Destroy()
	w := grocksdb.NewSSTFileWriter(eo, o)
	defer w.Destroy()
	if err := w.Open(path); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := w.Add([]byte(fmt.Sprintf("key%08d", i)), []byte(strings.Repeat("v", 200))); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
}

func TestVerify(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.sst")
	writeSST(t, good, 2000)
	n, err := Verify(good)
	if err != nil || n != 2000 {
		t.Fatalf("good file: %d entries, %v", n, err)
	}
	raw, _ := os.ReadFile(good)
	damage := map[string]func([]byte) []byte{
		// A byte inside the first data block: the footer, index and
		// properties are intact, so only a full block pass finds it.
		"flipped data byte": func(b []byte) []byte { b[100] ^= 0x01; return b },
		"truncated":         func(b []byte) []byte { return b[:len(b)/2] },
		"not an sst":        func(b []byte) []byte { return []byte(strings.Repeat("x", 4096)) },
	}
	for name, fn := range damage {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".sst")
		if err := os.WriteFile(p, fn(append([]byte(nil), raw...)), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Verify(p)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "Corruption") || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
	if _, err := Verify(filepath.Join(dir, "missing.sst")); err == nil || errors.Is(err, ErrCorrupt) {
		t.Errorf("missing file: %v", err)
	}
}

// TestCheckBounds: Check verifies the file like Verify and reads its first
// and last keys, past a skipped first key.
func TestCheckBounds(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.sst")
	writeSST(t, path, 50)
	info, err := Check(path, nil)
	if err != nil || info.Entries != 50 || string(info.First) != "key00000000" || string(info.Last) != "key00000049" {
		t.Fatalf("Check: %+v (%q..%q), %v", info, info.First, info.Last, err)
	}
	if info, err = Check(path, []byte("key00000000")); err != nil || string(info.First) != "key00000001" || string(info.Last) != "key00000049" {
		t.Fatalf("Check skipping the first key: %q..%q, %v", info.First, info.Last, err)
	}
	one := filepath.Join(dir, "one.sst")
	writeSST(t, one, 1)
	if info, err = Check(one, []byte("key00000000")); err != nil || info.First != nil || info.Last != nil {
		t.Fatalf("only the skipped key: %q..%q, %v", info.First, info.Last, err)
	}
	raw, _ := os.ReadFile(path)
	raw[100] ^= 0x01
	bad := filepath.Join(dir, "bad.sst")
	os.WriteFile(bad, raw, 0o644)
	if _, err := Check(bad, nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("damaged file: %v, want ErrCorrupt", err)
	}
}
