package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"

	"go.ytsaurus.tech/yt/go/mapreduce"

	"github.com/pillarkit/pillar/internal/record"
	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/pillar"
)

func init() {
	jobs.Register("export", "docs + chunks + embeddings + exported subsets, reduced by page_key → prepared page records", &ExportJob{})
}

// TableExportState is the export state: what the serving tier should hold
// after everything queued so far is delivered (one row per exported page).
const TableExportState = "export/state"

// Desired is one page the serving tier should hold: its partition and its
// prepared record.
type Desired struct {
	PageKey    string `yson:"page_key" parquet:"page_key"`
	Partition  int32  `yson:"partition" parquet:"partition"`
	RecordHash string `yson:"record_hash" parquet:"record_hash"`
	Value      []byte `yson:"value" parquet:"value"`
}

// ExportState is a row of export/state.
type ExportState struct {
	PageKey    string `yson:"page_key" parquet:"page_key"`
	Partition  int32  `yson:"partition" parquet:"partition"`
	RecordHash string `yson:"record_hash" parquet:"record_hash"`
}

// ExportJob is a reducer over (grouped by page_key): input 0 docs, 1 the
// published chunk table, 2 the published embedding table, 3.. the member
// tables of exported subsets. For every page that is a member of at least one
// of them it writes a Desired row with the prepared page record, built from
// the chunks and vectors of the page's current content hash. A member page
// without chunks or vectors of its current content is skipped (counted in
// output 1 as a Skipped row), so a record is never half old, half new.
type ExportJob struct {
	ChunkVersion string
	ModelVersion string
	Partitions   int
	// Encoding of the vectors: "float16" (default), "float32" or "int8".
	Encoding string
}

// Skipped names a member page that could not be exported and why.
type Skipped struct {
	PageKey string `yson:"page_key" parquet:"page_key"`
	Reason  string `yson:"reason" parquet:"reason"`
}

func (*ExportJob) InputTypes() []any  { return nil }
func (*ExportJob) OutputTypes() []any { return []any{&Desired{}, &Skipped{}} }

// Do implements mapreduce.Job.
func (j *ExportJob) Do(ctx mapreduce.JobContext, in mapreduce.Reader, out []mapreduce.Writer) error {
	enc, err := record.ParseEncoding(j.Encoding)
	if err != nil {
		return err
	}
	if j.Partitions <= 0 {
		return fmt.Errorf("export: partitions %d", j.Partitions)
	}
	return mapreduce.GroupKeys(in, func(r mapreduce.Reader) error {
		var (
			doc    *pillar.Doc
			chunks []pillar.Chunk
			vecs   = map[int32]pillar.Embedding{}
			member bool
		)
		for r.Next() {
			switch ti := r.TableIndex(); {
			case ti == 0:
				var d pillar.Doc
				if err := r.Scan(&d); err != nil {
					return err
				}
				doc = &d
			case ti == 1:
				var c pillar.Chunk
				if err := r.Scan(&c); err != nil {
					return err
				}
				chunks = append(chunks, c)
			case ti == 2:
				var e pillar.Embedding
				if err := r.Scan(&e); err != nil {
					return err
				}
				vecs[e.ChunkNo] = e
			default:
				var m pillar.SubsetMember
				if err := r.Scan(&m); err != nil {
					return err
				}
				member = true
			}
		}
		if !member || doc == nil {
			return nil // not exported, or a member whose page is gone
		}
		d, reason, err := PageRecord(doc, chunks, vecs, j.ChunkVersion, j.ModelVersion, enc, j.Partitions)
		switch {
		case err != nil:
			return err
		case d == nil:
			if len(out) > 1 {
				return out[1].Write(&Skipped{PageKey: doc.PageKey, Reason: reason})
			}
			return nil
		}
		return out[0].Write(d)
	})
}

// PageRecord builds the Desired row of one exported page: its prepared
// record (the chunks and vectors of the page's current content hash, the
// vectors in enc), the record's hash and the page's partition of
// partitions. chunks may come in any order (they are sorted by chunk_no in
// place); vecs maps chunk_no to the page's embedding rows. A page without
// chunks or vectors of its current content gets no row (nil) and the
// reason it is skipped, so a record is never half old, half new. ExportJob
// calls it for every member page; `pillar bench scale --floors` calls it in
// its bare loop, so the floor encodes what publish and export encode.
func PageRecord(doc *pillar.Doc, chunks []pillar.Chunk, vecs map[int32]pillar.Embedding, cv, model string, enc record.Encoding, partitions int) (*Desired, string, error) {
	rec := &record.PreparedPage{
		Url: doc.URL, ChunkerVersion: cv, ModelVersion: model,
		ContentHash: doc.ContentHash, UpdatedAtMs: doc.UpdatedAt, Title: doc.Title,
	}
	sort.Slice(chunks, func(a, b int) bool { return chunks[a].ChunkNo < chunks[b].ChunkNo })
	current := 0
	for _, c := range chunks {
		if c.ContentHash != doc.ContentHash {
			continue
		}
		current++
		if c.ChunkNo < 0 {
			continue // the page has no text: a record with no chunks
		}
		e, ok := vecs[c.ChunkNo]
		if !ok || e.ContentHash != doc.ContentHash {
			return nil, fmt.Sprintf("chunk %d has no vector of the current content in %s", c.ChunkNo, model), nil
		}
		rc := &record.Chunk{ChunkNo: c.ChunkNo, Text: c.Text, Start: c.Start, End: c.End}
		if err := rc.SetVector(e.Vector, enc); err != nil {
			return nil, "", fmt.Errorf("export: page %s chunk %d: %w", doc.PageKey, c.ChunkNo, err)
		}
		rec.Chunks = append(rec.Chunks, rc)
	}
	if current == 0 {
		return nil, "no chunks of the current content in " + cv + ": run the backfill", nil
	}
	val, err := record.Marshal(rec)
	if err != nil {
		return nil, "", fmt.Errorf("export: page %s: %w", doc.PageKey, err)
	}
	k, err := pillar.ParseKey(doc.PageKey)
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(val)
	return &Desired{PageKey: doc.PageKey, Partition: int32(k.Partition(partitions)),
		RecordHash: hex.EncodeToString(sum[:16]), Value: val}, "", nil
}

func init() {
	jobs.Register("reconcile", "desired records + export/state, reduced by page_key → the puts and deletes that bring the serving tier up to date", &ReconcileJob{})
	jobs.Register("export-state", "desired records, reduced by page_key → export/state rows (page, partition, record hash)", &StateJob{})
}

// ReconcileJob is a reducer over (grouped by page_key) input 0, the desired
// records (Desired), and input 1, export/state (ExportState; absent before
// the first export). Output 0 gets the Desired row of every page whose
// record is new or has another hash than the state's (a put); output 1 the
// state row of every page that is no longer desired (a delete). Both come
// out sorted by page_key.
type ReconcileJob struct{}

func (*ReconcileJob) InputTypes() []any  { return []any{&Desired{}, &ExportState{}} }
func (*ReconcileJob) OutputTypes() []any { return []any{&Desired{}, &ExportState{}} }

// Do implements mapreduce.Job.
func (*ReconcileJob) Do(ctx mapreduce.JobContext, in mapreduce.Reader, out []mapreduce.Writer) error {
	return mapreduce.GroupKeys(in, func(r mapreduce.Reader) error {
		var d *Desired
		var s *ExportState
		for r.Next() {
			if r.TableIndex() == 0 {
				d = new(Desired)
				if err := r.Scan(d); err != nil {
					return err
				}
				continue
			}
			s = new(ExportState)
			if err := r.Scan(s); err != nil {
				return err
			}
		}
		switch {
		case d != nil && (s == nil || s.RecordHash != d.RecordHash):
			return out[0].Write(d)
		case d == nil && s != nil:
			return out[1].Write(s)
		}
		return nil
	})
}

// StateJob is a reducer over desired records (read as ExportState rows, so
// the record values are not decoded): it writes each as a row of
// export/state.
type StateJob struct{}

func (*StateJob) InputTypes() []any  { return []any{&ExportState{}} }
func (*StateJob) OutputTypes() []any { return []any{&ExportState{}} }

// Do implements mapreduce.Job.
func (*StateJob) Do(ctx mapreduce.JobContext, in mapreduce.Reader, out []mapreduce.Writer) error {
	for in.Next() {
		var s ExportState
		if err := in.Scan(&s); err != nil {
			return err
		}
		if err := out[0].Write(&s); err != nil {
			return err
		}
	}
	return nil
}
