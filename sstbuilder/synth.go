package sstbuilder

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/record"
	"github.com/pillarkit/pillar/pillar"
)

// SynthOptions describe a synthetic export (for demos, benchmarks and trying
// the builder before the export job has run). Pages is required.
type SynthOptions struct {
	// ID of the export. The default value is "synth".
	ID string
	// Partitions. The default value is 8.
	Partitions int
	// Pages is the number of distinct page keys.
	Pages int
	// Kind is batch.KindSnapshot or batch.KindDelta. The default value is
	// batch.KindSnapshot.
	Kind string
	// Chunks per page. The default value is 16 (with the other defaults, a
	// record of about 48 KB, near the serving tier's ~50 KB average).
	Chunks int
	// TextBytes per chunk. The default value is 2200.
	TextBytes int
	// Dims of each embedding. The default value is 384.
	Dims int
	// Encoding of the embeddings. The default value is record.DefaultEncoding.
	Encoding record.Encoding
	// Versions per page (older ones are superseded). The default value is 1.
	Versions int
	// DeleteEvery: in a delta, every DeleteEvery-th page is a delete. The
	// default value is 0 (no deletes).
	DeleteEvery int
	// Seed of the generator. The default value is 1.
	Seed uint64
	// Compression of the Parquet files (see PartitionWriterOptions). The
	// default value is "snappy".
	Compression string
}

// SynthValue returns one synthetic prepared page record for url.
func SynthValue(rng *rand.Rand, url string, o *SynthOptions) ([]byte, error) {
	p := &record.PreparedPage{Url: url, ChunkerVersion: "recursive-synth", ModelVersion: "synth-model",
		ContentHash: fmt.Sprintf("%016x", rng.Uint64()), UpdatedAtMs: 1764460800000, Title: "Synthetic " + url}
	var sb strings.Builder
	for c := range o.Chunks {
		sb.Reset()
		for sb.Len() < o.TextBytes {
			sb.WriteString(synthWords[rng.IntN(len(synthWords))])
			sb.WriteByte(' ')
		}
		v := make([]float32, o.Dims)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * 0.05)
		}
		ch := &record.Chunk{ChunkNo: int32(c), Text: sb.String(), Start: int32(c * o.TextBytes), End: int32((c + 1) * o.TextBytes)}
		if err := ch.SetVector(v, o.Encoding); err != nil {
			return nil, err
		}
		p.Chunks = append(p.Chunks, ch)
	}
	return record.Marshal(p)
}

var synthWords = strings.Fields(`the of and to in is for on with as by at from that this be are
or an it was not which can have has all its more one but use other when new
database table index query replica partition batch snapshot embedding vector chunk
page search server client latency throughput storage object manifest compaction`)

// SynthExport writes a synthetic export into dir.
func SynthExport(dir string, opts *SynthOptions) (*ExportMeta, error) {
	o := *opts
	if o.ID == "" {
		o.ID = "synth"
	}
	if o.Partitions == 0 {
		o.Partitions = 8
	}
	if o.Kind == "" {
		o.Kind = batch.KindSnapshot
	}
	if o.Chunks == 0 {
		o.Chunks = 16
	}
	if o.TextBytes == 0 {
		o.TextBytes = 2200
	}
	if o.Dims == 0 {
		o.Dims = 384
	}
	if o.Encoding == record.Encoding_ENCODING_UNSPECIFIED {
		o.Encoding = record.DefaultEncoding
	}
	if o.Versions == 0 {
		o.Versions = 1
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Pages <= 0 {
		return nil, fmt.Errorf("sstbuilder: synthetic export: Pages %d must be positive", o.Pages)
	}
	type page struct {
		key pillar.Key
		url string
	}
	pages := make([]page, o.Pages)
	for i := range pages {
		u := fmt.Sprintf("https://synthetic.example/page/%d", i)
		pages[i] = page{pillar.KeyOfNormalized(u), u}
	}
	sort.Slice(pages, func(i, j int) bool { return bytes.Compare(pages[i].key[:], pages[j].key[:]) < 0 })
	w, err := NewExportWriter(dir, o.Partitions, o.Kind, &ExportOptions{ID: o.ID, Source: fmt.Sprintf("synthetic pages=%d seed=%d", o.Pages, o.Seed), Now: time.Now, Compression: o.Compression})
	if err != nil {
		return nil, err
	}
	if o.Kind == batch.KindSnapshot {
		w.SetQueueEnds(make([]int64, o.Partitions)) // synthetic: no queue, supersedes nothing
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x5eed))
	for i, pg := range pages {
		hk := hex.EncodeToString(pg.key[:])
		for v := range o.Versions {
			row := ExportRow{PageKey: hk, Seq: int64(v + 1), Op: pillar.OpPut}
			if o.Kind == batch.KindDelta && o.DeleteEvery > 0 && i%o.DeleteEvery == o.DeleteEvery-1 && v == o.Versions-1 {
				row.Op = pillar.OpDelete
			} else if row.Value, err = SynthValue(rng, pg.url, &o); err != nil {
				w.Abort()
				return nil, err
			}
			if err := w.Write(row); err != nil {
				w.Abort()
				return nil, err
			}
		}
	}
	return w.Close()
}
