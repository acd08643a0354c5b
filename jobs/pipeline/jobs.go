package pipeline

import (
	"context"
	"errors"
	"fmt"
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
}

// inRange reports whether key is in [lo, hi); empty bounds are open.
func inRange(key, lo, hi string) bool {
	return (lo == "" || key >= lo) && (hi == "" || key < hi)
}

// RechunkJob is a mapper over docs rows: every page in [Lo, Hi) whose
// content hash differs from Done[page_key] is split by the chunker Spec into
// pillar.Chunk rows (output 0). A page with no text gets one row with
// ChunkNo -1, so "this content was chunked, into nothing" is recorded.
type RechunkJob struct {
	Spec string
	// Done maps page keys to the content hash already chunked in this
	// version: those pages are skipped.
	Done   map[string]string
	Lo, Hi string
}

func (*RechunkJob) InputTypes() []any  { return []any{&pillar.Doc{}} }
func (*RechunkJob) OutputTypes() []any { return []any{&pillar.Chunk{}} }

// Do implements mapreduce.Job.
func (j *RechunkJob) Do(ctx mapreduce.JobContext, in mapreduce.Reader, out []mapreduce.Writer) error {
	ch, err := chunker.Parse(j.Spec)
	if err != nil {
		return err
	}
	for in.Next() {
		var d pillar.Doc
		if err := in.Scan(&d); err != nil {
			return err
		}
		if !inRange(d.PageKey, j.Lo, j.Hi) || j.Done[d.PageKey] == d.ContentHash {
			continue
		}
		chunks := ch.Chunk(d.Text)
		if len(chunks) == 0 {
			if err := out[0].Write(&pillar.Chunk{PageKey: d.PageKey, ChunkNo: -1, ContentHash: d.ContentHash}); err != nil {
				return err
			}
			continue
		}
		for i, c := range chunks {
			row := pillar.Chunk{PageKey: d.PageKey, ChunkNo: int32(i), ContentHash: d.ContentHash,
				Text: c.Text, Start: int32(c.Start), End: int32(c.End), Tokens: int32(c.Tokens)}
			if err := out[0].Write(&row); err != nil {
				return err
			}
		}
	}
	return nil
}

// EmbedJob is a mapper over chunks rows: the chunks of every page in
// [Lo, Hi) whose content hash differs from Done[page_key] are embedded by
// the model Spec in batches of Batch texts into pillar.Embedding rows.
// A page's empty-marker chunk (ChunkNo -1) becomes an embedding row with no
// vector. A bad vector fails the job with the page and chunk named.
type EmbedJob struct {
	Spec   string
	Done   map[string]string
	Lo, Hi string
	// Batch is the number of texts per Embed call. The default value is the
	// model's preferred batch (batch × concurrency for a remote model), or 64.
	Batch int
	// Timeout bounds one Embed call. The default value is 5 minutes.
	Timeout time.Duration
}

func (*EmbedJob) InputTypes() []any  { return []any{&pillar.Chunk{}} }
func (*EmbedJob) OutputTypes() []any { return []any{&pillar.Embedding{}} }

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
	batch := j.Batch
	if batch <= 0 {
		batch = 64
		// A remote model answers batch × concurrency texts at once.
		if pb, ok := emb.(interface{ PreferredBatch() int }); ok && pb.PreferredBatch() > 0 {
			batch = pb.PreferredBatch()
		}
	}
	timeout := j.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	var pend []pillar.Chunk
	flush := func() error {
		if len(pend) == 0 {
			return nil
		}
		texts := make([]string, len(pend))
		for i, c := range pend {
			texts[i] = c.Text
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		vecs, err := emb.Embed(ctx, texts)
		cancel()
		if err != nil {
			var ve *embedder.VectorError
			if errors.As(err, &ve) && ve.Index >= 0 && ve.Index < len(pend) {
				c := pend[ve.Index]
				return fmt.Errorf("embed: page %s chunk %d: %w", c.PageKey, c.ChunkNo, err)
			}
			return fmt.Errorf("embed: batch starting at page %s chunk %d: %w", pend[0].PageKey, pend[0].ChunkNo, err)
		}
		if len(vecs) != len(pend) {
			return fmt.Errorf("embed: model returned %d vectors for %d chunks (batch starting at page %s)", len(vecs), len(pend), pend[0].PageKey)
		}
		for i, c := range pend {
			if err := embedder.CheckVector(i, vecs[i], emb.Dims()); err != nil {
				return fmt.Errorf("embed: page %s chunk %d: %w", c.PageKey, c.ChunkNo, err)
			}
			row := pillar.Embedding{PageKey: c.PageKey, ChunkNo: c.ChunkNo, ContentHash: c.ContentHash, Vector: vecs[i]}
			if err := out[0].Write(&row); err != nil {
				return err
			}
		}
		pend = pend[:0]
		return nil
	}
	for in.Next() {
		var c pillar.Chunk
		if err := in.Scan(&c); err != nil {
			return err
		}
		if !inRange(c.PageKey, j.Lo, j.Hi) || j.Done[c.PageKey] == c.ContentHash {
			continue
		}
		if c.ChunkNo < 0 {
			if err := out[0].Write(&pillar.Embedding{PageKey: c.PageKey, ChunkNo: -1, ContentHash: c.ContentHash}); err != nil {
				return err
			}
			continue
		}
		pend = append(pend, c)
		if len(pend) >= batch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}
