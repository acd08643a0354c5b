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
