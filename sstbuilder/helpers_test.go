package sstbuilder

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/linxGnu/grocksdb"

	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/record"
	"github.com/pillarkit/pillar/internal/rocks"
	"github.com/pillarkit/pillar/pillar"
)

// pageKeys returns n distinct page keys of partition p (of parts), sorted.
func pageKeys(n, p, parts int) [][]byte {
	var keys [][]byte
	for i := 0; len(keys) < n; i++ {
		k := pillar.KeyOfNormalized(fmt.Sprintf("https://example.com/page/%d", i))
		if k.Partition(parts) == p {
			keys = append(keys, k[:])
		}
	}
	sort.Slice(keys, func(i, j int) bool { return bytes.Compare(keys[i], keys[j]) < 0 })
	return keys
}

var words = strings.Fields("pillar rocksdb batch partition replica embedding chunk vector serving router hedging latency snapshot delta manifest object store export parquet builder")

// pageValue returns a prepared page record of roughly chunks × (textLen +
// 2·dims) bytes.
func pageValue(rng *rand.Rand, url string, chunks, textLen, dims int) []byte {
	p := &record.PreparedPage{Url: url, ChunkerVersion: "recursive-test", ModelVersion: "test-model", ContentHash: fmt.Sprintf("%x", rng.Uint64()), UpdatedAtMs: 1764460800000, Title: "Page " + url}
	for c := range chunks {
		var sb strings.Builder
		for sb.Len() < textLen {
			sb.WriteString(words[rng.IntN(len(words))])
			sb.WriteByte(' ')
		}
		v := make([]float32, dims)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		ch := &record.Chunk{ChunkNo: int32(c), Text: sb.String(), Start: int32(c * textLen), End: int32((c + 1) * textLen)}
		if err := ch.SetVector(v, record.DefaultEncoding); err != nil {
			panic(err)
		}
		p.Chunks = append(p.Chunks, ch)
	}
	b, err := record.Marshal(p)
	if err != nil {
		panic(err)
	}
	return b
}

// openDB opens a fresh RocksDB with the serving layout; closed at cleanup.
func openDB(t testing.TB, dir string) *grocksdb.DB {
	t.Helper()
	opts, err := rocks.TableConfig{}.Options(nil)
	if err != nil {
		t.Fatal(err)
	}
	opts.SetCreateIfMissing(true)
	db, err := grocksdb.OpenDb(opts, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(); opts.Destroy() })
	return db
}

func ingest(t testing.TB, db *grocksdb.DB, paths []string) {
	t.Helper()
	io := grocksdb.NewDefaultIngestExternalFileOptions()
	defer io.Destroy()
	if err := db.IngestExternalFile(paths, io); err != nil {
		t.Fatal(err)
	}
}

func get(t testing.TB, db *grocksdb.DB, key []byte) ([]byte, bool) {
	t.Helper()
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	v, err := db.GetBytes(ro, key)
	if err != nil {
		t.Fatal(err)
	}
	return v, v != nil
}

// recordingRegisterer stands in for the control-plane client (a consumer-side
// interface): it records registrations and numbers them per partition,
// idempotently by batch id, as the control plane does.
type recordingRegisterer struct {
	mu    sync.Mutex
	seqs  map[string]int64
	next  map[int]int64
	calls int
}

func (r *recordingRegisterer) RegisterBatch(ctx context.Context, m *batch.Manifest) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := m.Validate(); err != nil {
		return 0, err
	}
	if r.seqs == nil {
		r.seqs, r.next = map[string]int64{}, map[int]int64{}
	}
	r.calls++
	if s, ok := r.seqs[m.ID]; ok {
		return s, nil
	}
	r.next[m.Partition]++
	r.seqs[m.ID] = r.next[m.Partition]
	return r.seqs[m.ID], nil
}

func (r *recordingRegisterer) registered() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seqs)
}

func sortSlice(keys []pillar.Key) {
	sort.Slice(keys, func(i, j int) bool { return bytes.Compare(keys[i][:], keys[j][:]) < 0 })
}

func hexKey(k []byte) string { return hex.EncodeToString(k) }
