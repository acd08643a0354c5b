package sstbuilder

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pillarkit/pillar/internal/batch"
)

var fixedNow = func() time.Time { return time.UnixMilli(1764460800000) }

// A snapshot with repeated keys rolls over several files; RocksDB ingests
// them and every key reads back as its newest version.
func TestBuildSnapshotReadBack(t *testing.T) {
	const P, part = 4, 3
	rng := rand.New(rand.NewPCG(1, 1))
	keys := pageKeys(401, part, P)
	del := keys[400] // the largest: deleted below
	keys = keys[:400]
	var rows []Row
	want := map[string][]byte{}
	for i, k := range keys {
		versions := 1 + i%3
		for v := range versions {
			val := pageValue(rng, "https://example.com/"+hex.EncodeToString(k), 2, 1000+rng.IntN(3000), 768)
			rows = append(rows, Row{Key: k, Seq: int64(10*i + v), Value: val})
			want[string(k)] = val
		}
	}
	// One deleted key: a snapshot simply leaves it out.
	rows = append(rows, Row{Key: del, Seq: 1, Delete: true})
	dir := t.TempDir()
	m, paths, err := BuildPartition(context.Background(), SliceRows(rows), &BuildOptions{
		Dir: dir, Partition: part, Partitions: P, BatchID: "snap-p00003", Source: "test", TargetFileSize: 1 << 20, Now: fixedNow,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) < 2 {
		t.Fatalf("want several files at a 1 MiB target, got %d", len(paths))
	}
	if m.Keys != int64(len(keys)) || m.Deletes != 0 || m.Kind != batch.KindSnapshot || m.CreatedAtMS != 1764460800000 {
		t.Fatalf("manifest: %+v", m)
	}
	if m.Smallest != hex.EncodeToString(keys[0]) || m.Largest != hex.EncodeToString(keys[len(keys)-1]) {
		t.Fatalf("range %s..%s", m.Smallest, m.Largest)
	}
	var sum int64
	for i, f := range m.Files {
		got, size, err := fileSHA256(paths[i])
		if err != nil || got != f.SHA256 || size != f.Size {
			t.Fatalf("file %s: sha %s size %d, manifest %s %d (%v)", f.Name, got, size, f.SHA256, f.Size, err)
		}
		if !strings.HasPrefix(f.Name, "00000") || !strings.Contains(f.Name, f.SHA256[:12]) {
			t.Fatalf("file name %s", f.Name)
		}
		sum += f.Keys
	}
	if sum != m.Keys {
		t.Fatalf("file keys sum to %d, manifest says %d", sum, m.Keys)
	}
	if _, err := batch.Decode(mustEncode(t, m)); err != nil {
		t.Fatal(err)
	}
	// No temp files left.
	ents, _ := os.ReadDir(dir)
	if len(ents) != len(paths) {
		t.Fatalf("%d entries in dir, %d files", len(ents), len(paths))
	}
	db := openDB(t, filepath.Join(t.TempDir(), "db"))
	ingest(t, db, paths)
	for k, v := range want {
		got, ok := get(t, db, []byte(k))
		if !ok || !bytes.Equal(got, v) {
			t.Fatalf("key %x: found %v, value equal %v", k, ok, bytes.Equal(got, v))
		}
	}
	if _, ok := get(t, db, del); ok {
		t.Fatal("deleted key present in snapshot")
	}
	if v, _ := get(t, db, batch.MetaKey); string(v) != "snap-p00003" {
		t.Fatalf("meta key = %q", v)
	}
}

func mustEncode(t *testing.T, m *batch.Manifest) []byte {
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A delta's puts and tombstones apply on top of existing data; of several
// versions of one key only the newest is written.
func TestBuildDeltaOnTop(t *testing.T) {
	const P, part = 2, 1
	keys := pageKeys(6, part, P)
	db := openDB(t, filepath.Join(t.TempDir(), "db"))
	var base []Row
	for i, k := range keys {
		base = append(base, Row{Key: k, Seq: 1, Value: []byte{'a', byte('0' + i)}})
	}
	_, paths, err := BuildPartition(context.Background(), SliceRows(base), &BuildOptions{Dir: t.TempDir(), Partition: part, Partitions: P, BatchID: "base"})
	if err != nil {
		t.Fatal(err)
	}
	ingest(t, db, paths)
	delta := []Row{
		{Key: keys[0], Seq: 5, Value: []byte("b0")},
		{Key: keys[1], Seq: 5, Delete: true},
		{Key: keys[2], Seq: 5, Value: []byte("old")},
		{Key: keys[2], Seq: 6, Delete: true},
		{Key: keys[2], Seq: 7, Value: []byte("b2")}, // delete then put again: put wins
		{Key: keys[3], Seq: 5, Value: []byte("b3")},
		{Key: keys[3], Seq: 8, Delete: true}, // put then delete: delete wins
	}
	m, paths, err := BuildPartition(context.Background(), SliceRows(delta), &BuildOptions{Dir: t.TempDir(), Partition: part, Partitions: P, Kind: batch.KindDelta, BatchID: "delta-1"})
	if err != nil {
		t.Fatal(err)
	}
	if m.Keys != 4 || m.Deletes != 2 {
		t.Fatalf("keys %d deletes %d, want 4 and 2", m.Keys, m.Deletes)
	}
	ingest(t, db, paths)
	for i, want := range []string{"b0", "", "b2", "", "a4", "a5"} {
		got, ok := get(t, db, keys[i])
		if want == "" && ok || want != "" && string(got) != want {
			t.Errorf("key %d: %q (found %v), want %q", i, got, ok, want)
		}
	}
	if v, _ := get(t, db, batch.MetaKey); string(v) != "delta-1" {
		t.Fatalf("meta key = %q after delta", v)
	}
}

func TestBuildBadInput(t *testing.T) {
	const P, part = 4, 2
	keys := pageKeys(3, part, P)
	other := pageKeys(1, 1, P)[0]
	hk := hex.EncodeToString
	for _, tc := range []struct {
		name string
		rows []Row
		want error
		msg  string
	}{
		{"out of order", []Row{{Key: keys[1], Value: []byte("x")}, {Key: keys[0], Value: []byte("y")}}, ErrOutOfOrder, "partition 2: key " + hk(keys[0])},
		{"same seq twice", []Row{{Key: keys[0], Seq: 3, Value: []byte("x")}, {Key: keys[0], Seq: 3, Value: []byte("y")}}, ErrOutOfOrder, hk(keys[0])},
		{"older seq after newer", []Row{{Key: keys[0], Seq: 3, Value: []byte("x")}, {Key: keys[0], Seq: 2, Value: []byte("y")}}, ErrOutOfOrder, hk(keys[0])},
		{"wrong partition", []Row{{Key: other, Value: []byte("x")}}, ErrWrongPartition, hk(other)},
		{"short key", []Row{{Key: []byte{1, 2, 3}, Value: []byte("x")}}, ErrBadKey, "010203"},
		{"value too large", []Row{{Key: keys[0], Value: []byte("x")}, {Key: keys[2], Value: make([]byte, 1001)}}, ErrValueTooLarge, hk(keys[2])},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, _, err := BuildPartition(context.Background(), SliceRows(tc.rows), &BuildOptions{Dir: dir, Partition: part, Partitions: P, BatchID: "b", MaxValueSize: 1000, TargetFileSize: 1 << 20})
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want %v naming %s", err, tc.want, tc.msg)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Fatalf("failed build left %d files", len(ents))
			}
		})
	}
	// Bad options.
	for _, o := range []BuildOptions{
		{Partition: 0, Partitions: 1, BatchID: "b"},                              // no dir
		{Dir: "x", Partition: 4, Partitions: 4, BatchID: "b"},                    // partition out of range
		{Dir: "x", Partition: 0, Partitions: 4, BatchID: "Bad ID"},               // invalid id
		{Dir: "x", Partition: 0, Partitions: 4, BatchID: "b", Kind: "merge"},     // kind
		{Dir: "x", Partition: 0, Partitions: 4, BatchID: "b", TargetFileSize: 5}, // tiny target
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
}

// RocksDB refuses an empty SST: an empty delta makes no file; an empty
// snapshot is the meta key alone (it empties the partition).
func TestBuildEmpty(t *testing.T) {
	dir := t.TempDir()
	_, _, err := BuildPartition(context.Background(), SliceRows(nil), &BuildOptions{Dir: dir, Partition: 0, Partitions: 2, Kind: batch.KindDelta, BatchID: "d"})
	if !errors.Is(err, ErrEmpty) {
		t.Fatalf("empty delta: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("empty delta left %d files", len(ents))
	}
	// Only deletes in a snapshot: also just the meta key.
	k := pageKeys(1, 0, 2)[0]
	m, paths, err := BuildPartition(context.Background(), SliceRows([]Row{{Key: k, Delete: true}}), &BuildOptions{Dir: dir, Partition: 0, Partitions: 2, BatchID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 1 || m.Keys != 0 || m.Smallest != "" || m.Files[0].Keys != 0 {
		t.Fatalf("empty snapshot: %+v", m)
	}
	db := openDB(t, filepath.Join(t.TempDir(), "db"))
	ingest(t, db, paths)
	if v, _ := get(t, db, batch.MetaKey); string(v) != "s" {
		t.Fatalf("meta key = %q", v)
	}
}

func TestBuilderCancel(t *testing.T) {
	keys := pageKeys(3000, 0, 1)
	rows := make([]Row, len(keys))
	for i, k := range keys {
		rows[i] = Row{Key: k, Value: []byte("v")}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := t.TempDir()
	if _, _, err := BuildPartition(ctx, SliceRows(rows), &BuildOptions{Dir: dir, Partition: 0, Partitions: 1, BatchID: "c"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled build: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("cancelled build left %d files", len(ents))
	}
}

// Finish and Abort after Finish leave the finished batch's files alone.
func TestBuilderMisuse(t *testing.T) {
	dir := t.TempDir()
	b, err := NewBuilder(&BuildOptions{Dir: dir, Partition: 0, Partitions: 1, BatchID: "m"})
	if err != nil {
		t.Fatal(err)
	}
	k := pageKeys(1, 0, 1)[0]
	if err := b.Add(Row{Key: k, Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	_, paths, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Finish(); err == nil {
		t.Fatal("second Finish succeeded")
	}
	b.Abort()
	if err := b.Add(Row{Key: k, Seq: 1, Value: []byte("w")}); err == nil {
		t.Fatal("Add after Finish succeeded")
	}
	if _, err := os.Stat(paths[0]); err != nil {
		t.Fatalf("finished file removed: %v", err)
	}
	// Abort, then Finish: an error, no files.
	b2, _ := NewBuilder(&BuildOptions{Dir: t.TempDir(), Partition: 0, Partitions: 1, BatchID: "n"})
	b2.Add(Row{Key: k, Value: []byte("v")})
	b2.Abort()
	if _, _, err := b2.Finish(); err == nil {
		t.Fatal("Finish after Abort succeeded")
	}
}
