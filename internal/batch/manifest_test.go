package batch

import (
	"strings"
	"testing"
)

func validManifest() Manifest {
	return Manifest{Format: 1, ID: "exp1-p00007", Partition: 7, Partitions: 64, Kind: KindDelta,
		Files: []File{{Name: "000001.sst", Size: 10, SHA256: strings.Repeat("ab", 32), Keys: 2}}, Keys: 2}
}

func TestValidate(t *testing.T) {
	m := validManifest()
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(*Manifest){
		"format":           func(m *Manifest) { m.Format = 2 },
		"invalid id":       func(m *Manifest) { m.ID = "Bad ID" },
		"out of range":     func(m *Manifest) { m.Partition = 64 },
		"kind":             func(m *Manifest) { m.Kind = "full" },
		"no files":         func(m *Manifest) { m.Files = nil },
		"sha256":           func(m *Manifest) { m.Files[0].SHA256 = "abc" },
		"bad name":         func(m *Manifest) { m.Files[0].Name = "../x.sst" },
		"size":             func(m *Manifest) { m.Files[0].Size = 0 },
		"inconsistent":     func(m *Manifest) { m.Deletes = 5 },
		"partitions 0":     func(m *Manifest) { m.Partitions = 0 },
		"smallest > la":    func(m *Manifest) { m.Smallest, m.Largest = "ff", "00" },
		"queue range":      func(m *Manifest) { m.QueueFirst, m.QueueEnd = 5, 3 },
		"delta supersedes": func(m *Manifest) { m.Supersedes = 3 },
		"snapshot range":   func(m *Manifest) { m.Kind, m.QueueEnd = KindSnapshot, 3 },
		"parent no seq":    func(m *Manifest) { m.Parent = "x" },
		"publication":      func(m *Manifest) { m.Publication = "a b" },
	}
	for name, mut := range cases {
		m := validManifest()
		m.Files = append([]File(nil), m.Files...)
		mut(&m)
		err := m.Validate()
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if !strings.Contains(err.Error(), `batch "`) {
			t.Errorf("%s: error does not name the batch: %v", name, err)
		}
	}
	m = validManifest()
	m.QueueFirst, m.QueueEnd, m.Seq, m.Parent = 3, 9, 4, "prev"
	m.Publication = "recursive-s512-o64-54906c2d/hash-d384-ea4b8133"
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	if c := m.Canonical(); c.Seq != 0 || c.Parent != "" || c.QueueEnd != 9 || m.Seq != 4 {
		t.Fatalf("canonical: %+v", c)
	}
	if _, err := Decode([]byte(`{"format":1,"unknown":true}`)); err == nil {
		t.Error("unknown field accepted")
	}
	if Prefix(7, "x") != "batches/p00007/x/" || ManifestKey(7, "x") != "batches/p00007/x/manifest.json" {
		t.Error("object keys")
	}
}

// TestFileNames: a manifest names its files by plain base names; "." and
// "..", path separators and control characters are refused with an error
// that quotes the name.
func TestFileNames(t *testing.T) {
	for _, c := range []struct{ name, want string }{
		{".", `file name "." is a directory reference`},
		{"..", `file name ".." is a directory reference`},
		{"a/b.sst", `file name "a/b.sst" has a path separator`},
		{"/etc/passwd", `file name "/etc/passwd" has a path separator`},
		{`..\x.sst`, `file name "..\\x.sst" has a path separator`},
		{"a\x00.sst", `file name "a\x00.sst" has control character`},
		{"manifest.json", `file name "manifest.json" is the manifest's own`},
		{"", "empty file name"},
		{strings.Repeat("a", 256), "longer than 255 bytes"},
	} {
		m := validManifest()
		m.Files = []File{{Name: c.name, Size: 10, SHA256: strings.Repeat("ab", 32), Keys: 2}}
		err := m.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("file name %q: %v, want an error containing %q", c.name, err, c.want)
		}
	}
	for _, ok := range []string{"000001.sst", "..sst", "a..b.sst", ".hidden"} {
		m := validManifest()
		m.Files[0].Name = ok
		if err := m.Validate(); err != nil {
			t.Errorf("file name %q refused: %v", ok, err)
		}
	}
}
