package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"go.ytsaurus.tech/yt/go/mapreduce"

	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/jobs/chunker"
	"github.com/pillarkit/pillar/jobs/embedder"
	"github.com/pillarkit/pillar/pillar"
)

func init() {
	jobs.Register("rechunk", "docs → chunks/<cv>: split each pending page with a chunker version", &RechunkJob{})
	jobs.Register("embed", "chunks/<cv> → embeddings/<cv>/<model>: embed each pending page's chunks", &EmbedJob{})
	jobs.Register("backfill-plan", "source rows + a version's done rows, reduced by page_key → the source rows of the pages to process, and the stale pages", &PlanJob{})
	jobs.Register("backfill-finish", "source hashes + a version's rows, reduced by page_key → the rows of current content, sorted, and a summary", &FinishJob{})
	jobs.Register("backfill-copy", "a version's rows, reduced by page_key → the same rows (the version table's new contents)", &CopyJob{})
	jobs.Register("backfill-counted", "a backfill mapper whose output 0 is counted (pages, rows, empty pages) into a summary row on output 1", &countedJob{})
}

// PlanJob is a reducer over (grouped by page_key) input 0, the source rows
// (docs, or chunks when Source is pillar.KindEmbeddings), and inputs 1..,
// the (page, content hash) of the version's rows done so far. For a page
// whose source content has no done rows it writes the page's source rows to
// output 0 (chunks in chunk_no order); for a page with done rows of another
// content (or no source any more) it writes one pageHash row to output 1.
//
// With Keys, input 0 is read as its (page, content hash) projection and a
// page to process gets one pageHash row in output 0 instead of its source
// rows (an incremental plan selects those rows afterwards).
type PlanJob struct {
	Source string // pillar.KindChunks (the source is docs) or pillar.KindEmbeddings (chunks)
	Keys   bool
}

func (*PlanJob) InputTypes() []any  { return nil }
func (*PlanJob) OutputTypes() []any { return nil }

// Do implements mapreduce.Job.
func (j *PlanJob) Do(ctx mapreduce.JobContext, in mapreduce.Reader, out []mapreduce.Writer) error {
	return mapreduce.GroupKeys(in, func(r mapreduce.Reader) error {
		var (
			key, hash string
			have      bool
			doc       pillar.Doc
			chunks    []pillar.Chunk
			done      []string
		)
		for r.Next() {
			if r.TableIndex() > 0 {
				var h pageHash
				if err := r.Scan(&h); err != nil {
					return err
				}
				key = h.PageKey
				if !slices.Contains(done, h.ContentHash) {
					done = append(done, h.ContentHash)
				}
				continue
			}
			have = true
			if j.Keys {
				var h pageHash
				if err := r.Scan(&h); err != nil {
					return err
				}
				key, hash = h.PageKey, h.ContentHash
				continue
			}
			if j.Source == pillar.KindEmbeddings {
				var c pillar.Chunk
				if err := r.Scan(&c); err != nil {
					return err
				}
				key, hash = c.PageKey, c.ContentHash
				chunks = append(chunks, c)
				continue
			}
			if err := r.Scan(&doc); err != nil {
				return err
			}
			key, hash = doc.PageKey, doc.ContentHash
		}
		current := have && slices.Contains(done, hash)
		if len(done) > 0 && (!have || len(done) > 1 || !current) {
			if err := out[1].Write(&pageHash{PageKey: key, ContentHash: hash}); err != nil {
				return err
			}
		}
		if !have || current {
			return nil
		}
		if j.Keys {
			return out[0].Write(&pageHash{PageKey: key, ContentHash: hash})
		}
		if j.Source != pillar.KindEmbeddings {
			return out[0].Write(&doc)
		}
		sort.SliceStable(chunks, func(a, b int) bool { return chunks[a].ChunkNo < chunks[b].ChunkNo })
		for i := range chunks {
			if err := out[0].Write(&chunks[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// FinishSummary is one FinishJob's count of what it kept.
type FinishSummary struct {
	Pages int64 `yson:"pages" parquet:"pages"`
	Rows  int64 `yson:"rows" parquet:"rows"`   // rows kept, empty-page markers included
	Empty int64 `yson:"empty" parquet:"empty"` // pages with no chunks (one marker row)
}

// FinishJob is a reducer over (grouped by page_key) input 0, the (page,
// content hash) of the source (docs or chunks), and inputs 1.., a
// version's rows (Chunk or Embedding, by Kind). It writes the rows of each
// page's current content, in chunk_no order, to output 0, and one
// FinishSummary per job to output 1.
type FinishJob struct {
	Kind string // pillar.KindChunks or pillar.KindEmbeddings
}

func (*FinishJob) InputTypes() []any  { return nil }
func (*FinishJob) OutputTypes() []any { return nil }

// versionRow is a row of a chunk or embedding table.
type versionRow struct {
	no  int32
	row any
}

func scanVersionRow(kind string, r mapreduce.Reader) (hash string, vr versionRow, err error) {
	if kind == pillar.KindEmbeddings {
		var e pillar.Embedding
		err = r.Scan(&e)
		return e.ContentHash, versionRow{e.ChunkNo, &e}, err
	}
	var c pillar.Chunk
	err = r.Scan(&c)
	return c.ContentHash, versionRow{c.ChunkNo, &c}, err
}

// Do implements mapreduce.Job.
func (j *FinishJob) Do(ctx mapreduce.JobContext, in mapreduce.Reader, out []mapreduce.Writer) error {
	var sum FinishSummary
	err := mapreduce.GroupKeys(in, func(r mapreduce.Reader) error {
		var src string
		var rows []versionRow
		for r.Next() {
			if r.TableIndex() == 0 {
				var h pageHash
				if err := r.Scan(&h); err != nil {
					return err
				}
				src = h.ContentHash
				continue
			}
			hash, vr, err := scanVersionRow(j.Kind, r)
			if err != nil {
				return err
			}
			if src != "" && hash == src {
				rows = append(rows, vr)
			}
		}
		if len(rows) == 0 {
			return nil
		}
		sort.SliceStable(rows, func(a, b int) bool { return rows[a].no < rows[b].no })
		sum.Pages++
		for i, vr := range rows {
			if i > 0 && vr.no == rows[i-1].no {
				continue // the same row in the table and its pending rows
			}
			sum.Rows++
			if vr.no < 0 {
				sum.Empty++
			}
			if err := out[0].Write(vr.row); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return out[1].Write(&sum)
}

// CopyJob is a reducer that copies its rows (Chunk or Embedding, by Kind)
// to output 0.
type CopyJob struct {
	Kind string
}

func (*CopyJob) InputTypes() []any  { return nil }
func (*CopyJob) OutputTypes() []any { return nil }

// Do implements mapreduce.Job.
func (j *CopyJob) Do(ctx mapreduce.JobContext, in mapreduce.Reader, out []mapreduce.Writer) error {
	for in.Next() {
		_, vr, err := scanVersionRow(j.Kind, in)
		if err != nil {
			return err
		}
		if err := out[0].Write(vr.row); err != nil {
			return err
		}
	}
	return nil
}

// RechunkJob is a mapper over docs rows (a slice of a backfill's todo
// table): every page is split by the chunker Spec into pillar.Chunk rows
// (output 0). A page with no text gets one row with ChunkNo -1, so "this
// content was chunked, into nothing" is recorded.
type RechunkJob struct {
	Spec string
}

func (*RechunkJob) InputTypes() []any  { return []any{&pillar.Doc{}} }
func (*RechunkJob) OutputTypes() []any { return []any{&pillar.Chunk{}} }

// Do implements mapreduce.Job.
func (j *RechunkJob) Do(ctx mapreduce.JobContext, in mapreduce.Reader, out []mapreduce.Writer) error {
	ch, err := chunker.Parse(j.Spec)
	if err != nil {
		return err
	}
	var rows []pillar.Chunk
	for in.Next() {
		var d pillar.Doc
		if err := in.Scan(&d); err != nil {
			return err
		}
		rows = ChunkRows(rows[:0], ch, &d)
		for i := range rows {
			if err := out[0].Write(&rows[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// ChunkRows appends the chunk rows of one page under chunker ch to dst: its
// chunks in order, or, for a page with no text, one marker row with ChunkNo
// -1. RechunkJob writes them; `pillar bench scale --floors` calls it in its
// bare loop, so the floor chunks what the backfill chunks.
func ChunkRows(dst []pillar.Chunk, ch chunker.Chunker, d *pillar.Doc) []pillar.Chunk {
	chunks := ch.Chunk(d.Text)
	if len(chunks) == 0 {
		return append(dst, pillar.Chunk{PageKey: d.PageKey, ChunkNo: -1, ContentHash: d.ContentHash})
	}
	for i, c := range chunks {
		dst = append(dst, pillar.Chunk{PageKey: d.PageKey, ChunkNo: int32(i), ContentHash: d.ContentHash,
			Text: c.Text, Start: int32(c.Start), End: int32(c.End), Tokens: int32(c.Tokens)})
	}
	return dst
}

// EmbedJob is a mapper over chunks rows (a slice of a backfill's todo
// table): every chunk is embedded by the model Spec into pillar.Embedding
// rows, written in input order. Batches of Batch texts go to the model, up
// to Concurrency of them in flight, while the job reads the chunks after
// them and writes the answered batches in order: a slow remote model is
// kept busy instead of waiting for each batch's rows to be written and the
// next batch's read.
// A page's empty-marker chunk (ChunkNo -1) becomes an embedding row with no
// vector. A bad vector fails the job with the page and chunk named.
type EmbedJob struct {
	Spec string
	// Batch is the number of texts per Embed call. The default value is the
	// model's batch size (batch= for a remote model), or 64.
	Batch int
	// Concurrency is the number of Embed calls in flight at once. The
	// default value is the model's concurrency (concurrency= for a remote
	// model, whose requests in flight it also caps), or 2 for a local model
	// (one batch embedding while the next is read).
	Concurrency int
	// Timeout bounds one Embed call. The default value is 5 minutes.
	Timeout time.Duration
}

func (*EmbedJob) InputTypes() []any  { return []any{&pillar.Chunk{}} }
func (*EmbedJob) OutputTypes() []any { return []any{&pillar.Embedding{}} }

// embedFlight is one Embed call: its rows in input order (markers
// included), the indexes of those with text, and the answer.
type embedFlight struct {
	rows  []pillar.Chunk
	texts []int // rows[texts[i]] is input i of the call
	vecs  [][]float32
	err   error
	done  chan struct{}
}

// Do implements mapreduce.Job.
func (j *EmbedJob) Do(jc mapreduce.JobContext, in mapreduce.Reader, out []mapreduce.Writer) error {
	secrets := map[string]string{}
	for _, name := range []string{"PILLAR_EMBED_API_KEY", "OPENAI_API_KEY"} {
		if v, ok := jc.LookupVault(name); ok {
			secrets[name] = v
		}
	}
	emb, err := embedder.Parse(j.Spec, secrets)
	if err != nil {
		return err
	}
	batch, conc := 64, 2
	if m, ok := emb.(interface {
		BatchSize() int
		Concurrency() int
	}); ok {
		batch, conc = m.BatchSize(), m.Concurrency()
	}
	if j.Batch > 0 {
		batch = j.Batch
	}
	if j.Concurrency > 0 {
		conc = j.Concurrency
	}
	timeout := j.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var queue []*embedFlight
	defer func() { // on an early return: stop and wait for what is in flight
		cancel()
		for _, f := range queue {
			<-f.done
		}
	}()
	launch := func(f *embedFlight) {
		texts := make([]string, len(f.texts))
		for i, r := range f.texts {
			texts[i] = f.rows[r].Text
		}
		f.done = make(chan struct{})
		go func() {
			defer close(f.done)
			if len(texts) == 0 {
				return
			}
			cctx, ccancel := context.WithTimeout(ctx, timeout)
			f.vecs, f.err = emb.Embed(cctx, texts)
			ccancel()
		}()
		queue = append(queue, f)
	}
	// wait waits for the oldest call and takes it off the queue.
	wait := func() *embedFlight {
		f := queue[0]
		<-f.done
		queue = queue[1:]
		return f
	}
	// land writes a finished call's rows.
	land := func(f *embedFlight) error {
		pend := f.rows
		if err := f.err; err != nil {
			var ve *embedder.VectorError
			if errors.As(err, &ve) && ve.Index >= 0 && ve.Index < len(f.texts) {
				c := pend[f.texts[ve.Index]]
				return fmt.Errorf("embed: page %s chunk %d: %w", c.PageKey, c.ChunkNo, err)
			}
			c := pend[f.texts[0]]
			return fmt.Errorf("embed: batch starting at page %s chunk %d: %w", c.PageKey, c.ChunkNo, err)
		}
		if len(f.vecs) != len(f.texts) {
			c := pend[f.texts[0]]
			return fmt.Errorf("embed: model returned %d vectors for %d chunks (batch starting at page %s)", len(f.vecs), len(f.texts), c.PageKey)
		}
		next := 0
		for i := range pend {
			c := &pend[i]
			row := pillar.Embedding{PageKey: c.PageKey, ChunkNo: c.ChunkNo, ContentHash: c.ContentHash}
			if c.ChunkNo >= 0 {
				v := f.vecs[next]
				if err := embedder.CheckVector(next, v, emb.Dims()); err != nil {
					return fmt.Errorf("embed: page %s chunk %d: %w", c.PageKey, c.ChunkNo, err)
				}
				row.Vector = v
				next++
			}
			if err := out[0].Write(&row); err != nil {
				return err
			}
		}
		return nil
	}
	cur := &embedFlight{}
	send := func() error {
		if len(cur.rows) == 0 {
			return nil
		}
		var done *embedFlight
		if len(queue) >= conc {
			done = wait()
		}
		// The next call goes out before the finished one's rows are
		// written, so the model's slot it freed is not idle meanwhile.
		launch(cur)
		cur = &embedFlight{}
		if done != nil {
			return land(done)
		}
		return nil
	}
	for in.Next() {
		var c pillar.Chunk
		if err := in.Scan(&c); err != nil {
			return err
		}
		cur.rows = append(cur.rows, c)
		if c.ChunkNo >= 0 {
			cur.texts = append(cur.texts, len(cur.rows)-1)
		}
		if len(cur.texts) >= batch || len(cur.rows) >= 4*batch { // (a run of empty pages: markers only)
			if err := send(); err != nil {
				return err
			}
		}
	}
	if err := send(); err != nil {
		return err
	}
	for len(queue) > 0 {
		if err := land(wait()); err != nil {
			return err
		}
	}
	return nil
}

// countedJob runs a backfill mapper and counts what it writes to output 0
// (pages, rows, empty-page markers) into one FinishSummary row on output 1.
// A first rechunk whose slices go straight into the version table
// completes from these counts (build, finish). Pages are counted as runs of
// one page_key, so a page must not span two map jobs: true of RechunkJob,
// one todo row (a doc) per page.
type countedJob struct {
	mapreduce.Job
}

func (j *countedJob) OutputTypes() []any {
	return append(append([]any(nil), j.Job.OutputTypes()...), &FinishSummary{})
}

// Do implements mapreduce.Job.
func (j *countedJob) Do(ctx mapreduce.JobContext, in mapreduce.Reader, out []mapreduce.Writer) error {
	cw := &countingWriter{Writer: out[0]}
	if err := j.Job.Do(ctx, in, []mapreduce.Writer{cw}); err != nil {
		return err
	}
	return out[1].Write(&cw.sum)
}

// countingWriter counts the chunk or embedding rows written through it.
type countingWriter struct {
	mapreduce.Writer
	sum  FinishSummary
	last string
}

func (w *countingWriter) Write(v any) error {
	var key string
	var no int32
	switch r := v.(type) {
	case *pillar.Chunk:
		key, no = r.PageKey, r.ChunkNo
	case *pillar.Embedding:
		key, no = r.PageKey, r.ChunkNo
	default:
		return fmt.Errorf("backfill: counted output of %T, want a chunk or an embedding", v)
	}
	if key != w.last || w.sum.Rows == 0 {
		w.sum.Pages++
		w.last = key
	}
	w.sum.Rows++
	if no < 0 {
		w.sum.Empty++
	}
	return w.Writer.Write(v)
}

func (w *countingWriter) MustWrite(v any) {
	if err := w.Write(v); err != nil {
		panic(err)
	}
}
