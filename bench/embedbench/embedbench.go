package embedbench

import (
	"context"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pillarkit/pillar/jobs/embedder"
	"github.com/pillarkit/pillar/jobs/embedder/fakemodel"
	"github.com/pillarkit/pillar/jobs/pipeline"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/local"
)

// Options configure Measure. Zero values are documented per field.
type Options struct {
	// Dir holds the store; it must be empty or absent. Required.
	Dir string
	// Pages is the number of synthetic pages. The default value is 4000.
	Pages int
	// PageBytes is the text length of a page. The default value is 2048.
	PageBytes int
	// Chunker is the chunker spec. The default value is
	// "recursive:size=400,overlap=40".
	Chunker string
	// Batch is the number of chunks per model request. The default value
	// is 64.
	Batch int
	// Concurrency is the model's slots and the pipeline's
	// EmbedConcurrency. The default value is 4.
	Concurrency int
	// Latency is how long the model holds a slot per request. The default
	// value is 50 ms.
	Latency time.Duration
	// Dim is the vector length. The default value is 384.
	Dim int
	// Rounds is the number of rounds. The default value is 3.
	Rounds int
	// Log receives progress lines. The default value discards them.
	Log io.Writer
}

func (o *Options) ensureDefaults() error {
	if o.Dir == "" {
		return fmt.Errorf("embedbench: Dir is required")
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.Pages, 4000)
	def(&o.PageBytes, 2048)
	def(&o.Batch, 64)
	def(&o.Concurrency, 4)
	def(&o.Dim, 384)
	def(&o.Rounds, 3)
	if o.Chunker == "" {
		o.Chunker = "recursive:size=400,overlap=40"
	}
	if o.Latency <= 0 {
		o.Latency = 50 * time.Millisecond
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return nil
}

// Round is one round's figures, in chunks per second.
type Round struct {
	Bare         float64 `json:"bare_chunks_per_sec"`
	Pipeline     float64 `json:"pipeline_chunks_per_sec"`
	PipelineSecs float64 `json:"pipeline_secs"`
	BareSecs     float64 `json:"bare_secs"`
	// MaxInFlight is the most requests at the model at once during the
	// pipeline's run.
	MaxInFlight int64 `json:"pipeline_max_in_flight"`
}

// Report is a run's result.
type Report struct {
	Options  Options `json:"-"`
	Chunks   int64   `json:"chunks"`
	Pages    int     `json:"pages"`
	Batch    int     `json:"batch"`
	Conc     int     `json:"concurrency"`
	Latency  string  `json:"latency"`
	Capacity float64 `json:"capacity_chunks_per_sec"`
	Rounds   []Round `json:"rounds"`
	// Medians over rounds of pipeline ÷ bare and pipeline ÷ capacity.
	VsBare     float64 `json:"pipeline_vs_bare"`
	VsCapacity float64 `json:"pipeline_vs_capacity"`
	BareVsCap  float64 `json:"bare_vs_capacity"`
}

// Target is the pipeline's throughput over the model's own limit that
// the run is held to.
const Target = 0.9

// Measure builds the store, then runs the rounds.
func Measure(ctx context.Context, o Options) (*Report, error) {
	if err := o.ensureDefaults(); err != nil {
		return nil, err
	}
	st, err := local.Create(filepath.Join(o.Dir, "store"), &local.Options{Partitions: 8})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	fmt.Fprintf(o.Log, "embedbench: writing %d pages of %d bytes\n", o.Pages, o.PageBytes)
	if err := writeDocs(ctx, st, o.Pages, o.PageBytes); err != nil {
		return nil, err
	}
	rc, err := pipeline.Rechunk(ctx, st, o.Chunker, pipeline.Options{})
	if err != nil {
		return nil, fmt.Errorf("embedbench: rechunk: %w", err)
	}
	fmt.Fprintf(o.Log, "embedbench: %d chunks under %s\n", rc.Rows, rc.Version)
	srv := fakemodel.Start(fakemodel.Options{Dim: o.Dim, Slots: o.Concurrency, Latency: o.Latency})
	defer srv.Close()
	rep := &Report{Options: o, Chunks: rc.Rows, Pages: o.Pages, Batch: o.Batch, Conc: o.Concurrency,
		Latency: o.Latency.String(), Capacity: srv.Capacity(o.Batch)}
	for i := 0; i < o.Rounds; i++ {
		var rd Round
		// Alternate which goes first, so neither always runs on a cooler
		// (or warmer) machine.
		runs := []func() error{
			func() error { return bare(ctx, st, rc.Table, srv, o, &rd) },
			func() error { return pipe(ctx, st, rc, srv, o, i, &rd) },
		}
		if i%2 == 1 {
			runs[0], runs[1] = runs[1], runs[0]
		}
		for _, run := range runs {
			if err := run(); err != nil {
				return nil, err
			}
		}
		fmt.Fprintf(o.Log, "embedbench: round %d: bare %.0f chunks/s, pipeline %.0f chunks/s (%.2f× bare, %.2f× capacity %.0f)\n",
			i+1, rd.Bare, rd.Pipeline, rd.Pipeline/rd.Bare, rd.Pipeline/rep.Capacity, rep.Capacity)
		rep.Rounds = append(rep.Rounds, rd)
	}
	rep.VsBare = median(rep.Rounds, func(r Round) float64 { return r.Pipeline / r.Bare })
	rep.VsCapacity = median(rep.Rounds, func(r Round) float64 { return r.Pipeline / rep.Capacity })
	rep.BareVsCap = median(rep.Rounds, func(r Round) float64 { return r.Bare / rep.Capacity })
	return rep, nil
}

// bare keeps Concurrency batches of the chunks' texts at the model through
// the openai embedder and discards the vectors.
func bare(ctx context.Context, st pillar.Store, table string, srv *fakemodel.Server, o Options, rd *Round) error {
	emb, err := embedder.Parse(fmt.Sprintf("openai:url=%s,model=fake-bare,dim=%d,batch=%d,concurrency=%d", srv.URL(), o.Dim, o.Batch, o.Concurrency), nil)
	if err != nil {
		return err
	}
	sn, err := st.Snapshot(ctx)
	if err != nil {
		return err
	}
	defer sn.Release()
	start := time.Now()
	rr, err := sn.ReadTable(ctx, table, nil)
	if err != nil {
		return err
	}
	defer rr.Close()
	batches := make(chan []string, o.Concurrency)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		first   error
		vectors int64
	)
	for w := 0; w < o.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for texts := range batches {
				vs, err := emb.Embed(ctx, texts)
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				vectors += int64(len(vs))
				mu.Unlock()
			}
		}()
	}
	var cur []string
	var texts int64
	for rr.Next() {
		var c pillar.Chunk
		if err := rr.Scan(&c); err != nil {
			close(batches)
			wg.Wait()
			return err
		}
		if c.ChunkNo < 0 {
			continue // a page's empty marker: the pipeline sends it no text either
		}
		cur = append(cur, c.Text)
		texts++
		if len(cur) == o.Batch {
			batches <- cur
			cur = nil
		}
	}
	if len(cur) > 0 {
		batches <- cur
	}
	close(batches)
	wg.Wait()
	if err := rr.Err(); err != nil {
		return err
	}
	if first != nil {
		return fmt.Errorf("embedbench: bare loop: %w", first)
	}
	if vectors != texts {
		return fmt.Errorf("embedbench: bare loop got %d vectors for %d chunks", vectors, texts)
	}
	secs := time.Since(start).Seconds()
	rd.BareSecs, rd.Bare = secs, float64(texts)/secs
	return nil
}

// pipe runs pipeline.Embed under a model name of round i's own.
func pipe(ctx context.Context, st pillar.Store, rc *pipeline.Result, srv *fakemodel.Server, o Options, i int, rd *Round) error {
	spec := fmt.Sprintf("openai:url=%s,model=fake-round%d,dim=%d", srv.URL(), i+1, o.Dim)
	before := srv.Stats()
	start := time.Now()
	res, err := pipeline.Embed(ctx, st, rc.Version, spec, pipeline.Options{EmbedConcurrency: o.Concurrency, Batch: o.Batch})
	if err != nil {
		return fmt.Errorf("embedbench: pipeline: %w", err)
	}
	secs := time.Since(start).Seconds()
	if res.Rows != rc.Rows {
		return fmt.Errorf("embedbench: pipeline wrote %d embedding rows for %d chunks", res.Rows, rc.Rows)
	}
	after := srv.Stats()
	texts := after.Inputs - before.Inputs
	if texts <= 0 {
		return fmt.Errorf("embedbench: the pipeline sent the model no chunk")
	}
	rd.PipelineSecs, rd.Pipeline, rd.MaxInFlight = secs, float64(texts)/secs, after.MaxInFlight
	return nil
}

func median(rs []Round, f func(Round) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	if len(v) == 0 {
		return math.NaN()
	}
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// writeDocs writes n synthetic pages of about size bytes of text, sorted
// by page key, as the docs table.
func writeDocs(ctx context.Context, st pillar.Store, n, size int) error {
	type kd struct{ key, url string }
	keys := make([]kd, n)
	for i := range keys {
		k, u, err := pillar.KeyOfURL(fmt.Sprintf("https://bench.example/embed/%d", i))
		if err != nil {
			return err
		}
		keys[i] = kd{k.String(), u}
	}
	slices.SortFunc(keys, func(a, b kd) int { return strings.Compare(a.key, b.key) })
	tx, err := st.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Abort()
	w, err := tx.WriteTable(ctx, pillar.TableDocs, pillar.Doc{}, &pillar.WriteOptions{SortedBy: []string{"page_key"}})
	if err != nil {
		return err
	}
	var b strings.Builder
	for i, k := range keys {
		b.Reset()
		for s := 0; b.Len() < size; s++ {
			fmt.Fprintf(&b, "Page %d, sentence %d, is about topic %d and its neighbours. ", i, s, (i*7+s)%97)
		}
		text := b.String()
		d := pillar.Doc{PageKey: k.key, URL: k.url, Host: "bench.example", Text: text, ContentHash: fmt.Sprintf("%016x", fnv(text))}
		if err := w.Write(&d); err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func fnv(s string) uint64 {
	h := uint64(1469598103934665603)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * 1099511628211
	}
	return h
}
