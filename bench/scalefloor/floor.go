package scalefloor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/pillarkit/pillar/internal/pqsnappy"
	"github.com/pillarkit/pillar/internal/pqzstd"
	"github.com/pillarkit/pillar/internal/record"
	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/jobs/chunker"
	"github.com/pillarkit/pillar/jobs/embedder"
	"github.com/pillarkit/pillar/jobs/pipeline"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/ingest"
	"github.com/pillarkit/pillar/pillar/local"
	"github.com/pillarkit/pillar/sstbuilder"
	"github.com/pillarkit/pillar/subsets"
)

// The steps a floor exists for (the names of `pillar bench scale`'s steps).
const (
	StepIngest  = "ingest"
	StepRechunk = "rechunk"
	StepEmbed   = "embed"
	StepSubsets = "subsets recompute"
	StepPublish = "publish"
	StepExport  = "export"
)

// Steps are the steps with a floor, in the order of the benchmark's round.
var Steps = []string{StepIngest, StepRechunk, StepEmbed, StepSubsets, StepPublish, StepExport}

// Options configure a floor. Fields a step does not use are ignored.
type Options struct {
	// Step is one of Steps. Required.
	Step string
	// Store is the local store the step ran on; its tables' files are the
	// floor's input (all steps but ingest). Required for those.
	Store string
	// Corpus is the folder the ingest step read, BaseURL its --base-url.
	// Required for ingest.
	Corpus, BaseURL string
	// Scratch is the folder the floor writes into (created; the caller
	// removes it). Required.
	Scratch string
	// Chunker is the rechunk step's chunker spec. The default value is
	// recursive:size=512,overlap=64.
	Chunker string
	// ChunkVersion is the chunk table the embed step read (chunks/<cv>).
	// Required for embed.
	ChunkVersion string
	// Model is the embed step's model spec. The default value is
	// hash:dim=384.
	Model string
	// Policies is the subset policy file of the recompute step; publish
	// and export join the member tables of its exported subsets. Required
	// for those three steps.
	Policies string
	// AsOf is the recompute's --as-of. The default value is now.
	AsOf time.Time
	// Encoding of the vectors in the records: the default value is float16,
	// the export default.
	Encoding string
	// Workers is the goroutines doing the work. The default value is
	// GOMAXPROCS.
	Workers int
	// MemoryLimit is the steps' --memory-limit: the floor's row groups are
	// cut at the bytes the step's writers cut theirs at (jobs.RowGroupShare;
	// sstbuilder.ExportRowGroupBytes for export). The default value is
	// 512 MiB, the operations' default.
	MemoryLimit int64
}

func (o *Options) ensureDefaults() {
	if o.Chunker == "" {
		o.Chunker = "recursive:size=512,overlap=64"
	}
	if o.Model == "" {
		o.Model = "hash:dim=384"
	}
	if o.AsOf.IsZero() {
		o.AsOf = time.Now()
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.MemoryLimit <= 0 {
		o.MemoryLimit = 512 << 20
	}
}

// Result is what a floor did.
type Result struct {
	Step string `json:"step"`
	// RowsIn are the input rows read (corpus files for ingest); RowsOut the
	// rows written, which must equal the rows the step wrote.
	RowsIn  int64 `json:"rows_in"`
	RowsOut int64 `json:"rows_out"`
	// Files and Bytes are the files written under Scratch.
	Files   int64 `json:"files"`
	Bytes   int64 `json:"bytes"`
	Workers int   `json:"workers"`
}

// Run runs the floor of one step.
func Run(ctx context.Context, o Options) (*Result, error) {
	o.ensureDefaults()
	if o.Scratch == "" {
		return nil, errors.New("scalefloor: no scratch folder")
	}
	if err := os.MkdirAll(o.Scratch, 0o755); err != nil {
		return nil, fmt.Errorf("scalefloor: %w", err)
	}
	out := &files{dir: o.Scratch}
	res := &Result{Step: o.Step, Workers: o.Workers}
	var err error
	if o.Step == StepIngest {
		err = floorIngest(ctx, &o, out, res)
	} else {
		err = withStore(ctx, &o, func(in *inputs) error {
			switch o.Step {
			case StepRechunk:
				return floorRechunk(ctx, &o, in, out, res)
			case StepEmbed:
				return floorEmbed(ctx, &o, in, out, res)
			case StepSubsets:
				return floorSubsets(ctx, &o, in, out, res)
			case StepPublish, StepExport:
				return floorRecords(ctx, &o, in, out, res)
			}
			return fmt.Errorf("scalefloor: no floor for step %q (want one of %q)", o.Step, Steps)
		})
	}
	if err != nil {
		return nil, fmt.Errorf("scalefloor: %s: %w", o.Step, err)
	}
	res.RowsOut, res.Files, res.Bytes = out.rows.Load(), out.n.Load(), out.bytes.Load()
	return res, nil
}

// inputs are the files of a store's tables in one snapshot.
type inputs struct {
	sn    pillar.Snapshot
	parts int
}

func (in *inputs) files(ctx context.Context, table string) ([]string, error) {
	tf, ok := in.sn.(interface {
		TableFiles(context.Context, string) ([]string, error)
	})
	if !ok {
		return nil, errors.New("the store does not list its files")
	}
	return tf.TableFiles(ctx, table)
}

func withStore(ctx context.Context, o *Options, fn func(*inputs) error) error {
	if o.Store == "" {
		return errors.New("no store")
	}
	st, err := local.Open(o.Store, nil)
	if err != nil {
		return err
	}
	defer st.Close()
	sn, err := st.Snapshot(ctx)
	if err != nil {
		return err
	}
	defer sn.Release()
	return fn(&inputs{sn: sn, parts: st.Info().Partitions})
}

// tableOutput is the store's writer settings: ZSTD, 8,192 rows, the
// operations' row group bytes, pages an eighth of it (at most 256 KiB),
// page bounds only for the key columns.
func tableOutput(o *Options, sorted ...string) *output {
	rg := jobs.RowGroupShare(o.MemoryLimit)
	return &output{codec: pqzstd.Default, groupRows: 8192, groupBytes: rg, page: int(min(max(rg/8, 16<<10), 256<<10)), sorted: sorted}
}

// each runs fn on every unit with o.Workers goroutines; worker w gets its
// own index to keep its state by. It returns the first error.
func each(ctx context.Context, workers int, n int, fn func(w, i int) error) error {
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	failed := make(chan struct{})
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(w, i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
						close(failed)
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-failed:
			break feed
		case <-ctx.Done():
			mu.Lock()
			if first == nil {
				first = ctx.Err()
			}
			mu.Unlock()
			break feed
		}
	}
	close(next)
	wg.Wait()
	return first
}

// floorIngest cleans every candidate file of the corpus (ingest.ReadFile:
// what ingest makes of one file) and writes its docs row.
func floorIngest(ctx context.Context, o *Options, out *files, res *Result) error {
	var paths []string
	err := filepath.WalkDir(o.Corpus, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && ingest.Candidate(p) {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	res.RowsIn = int64(len(paths))
	const batch = 64
	opts := ingest.Options{From: o.Corpus, BaseURL: o.BaseURL}
	now := time.Now().UnixMilli()
	ws := make([]*writer[pillar.Doc], o.Workers)
	err = each(ctx, o.Workers, (len(paths)+batch-1)/batch, func(w, i int) error {
		if ws[w] == nil {
			var err error
			if ws[w], err = newWriter[pillar.Doc](out, "docs", tableOutput(o, "page_key")); err != nil {
				return err
			}
		}
		for _, p := range paths[i*batch : min((i+1)*batch, len(paths))] {
			f := ingest.ReadFile(p, opts)
			if f.Outcome != "" {
				continue
			}
			f.Doc.Version, f.Doc.UpdatedAt = 1, now
			if err := ws[w].write(f.Doc); err != nil {
				return err
			}
		}
		return nil
	})
	return closeAll(out, err, ws)
}

func closeAll[T any](out *files, err error, ws []*writer[T]) error {
	for _, w := range ws {
		if w != nil {
			if cerr := w.close(out); err == nil {
				err = cerr
			}
		}
	}
	return err
}

// floorRechunk splits every docs row with the chunker (pipeline.ChunkRows).
func floorRechunk(ctx context.Context, o *Options, in *inputs, out *files, res *Result) error {
	us, err := tableUnits(ctx, in, pillar.TableDocs)
	if err != nil {
		return err
	}
	ws := make([]*writer[pillar.Chunk], o.Workers)
	chs := make([]chunker.Chunker, o.Workers)
	var rowsIn sync.Map
	err = each(ctx, o.Workers, len(us), func(w, i int) error {
		if ws[w] == nil {
			var err error
			if chs[w], err = chunker.Parse(o.Chunker); err != nil {
				return err
			}
			if ws[w], err = newWriter[pillar.Chunk](out, "chunks", tableOutput(o, "page_key", "chunk_no")); err != nil {
				return err
			}
		}
		var rows []pillar.Chunk
		n := 0
		err := readUnit(us[i], func(docs []pillar.Doc) error {
			n += len(docs)
			for j := range docs {
				rows = pipeline.ChunkRows(rows[:0], chs[w], &docs[j])
				if err := ws[w].write(rows...); err != nil {
					return err
				}
			}
			return nil
		})
		rowsIn.Store(i, n)
		return err
	})
	res.RowsIn = sum(&rowsIn)
	return closeAll(out, err, ws)
}

func sum(m *sync.Map) int64 {
	var n int64
	m.Range(func(_, v any) bool { n += int64(v.(int)); return true })
	return n
}

func tableUnits(ctx context.Context, in *inputs, table string) ([]unit, error) {
	fs, err := in.files(ctx, table)
	if err != nil {
		return nil, err
	}
	return units(fs)
}

// floorEmbed embeds every chunk of the chunk table with the model, in the
// batches EmbedJob sends (64 texts, or the model's preferred batch), each
// vector checked (embedder.CheckVector); a page's marker row gets a row
// without a vector.
func floorEmbed(ctx context.Context, o *Options, in *inputs, out *files, res *Result) error {
	if o.ChunkVersion == "" {
		return errors.New("no chunk version")
	}
	us, err := tableUnits(ctx, in, pillar.ChunksTable(o.ChunkVersion))
	if err != nil {
		return err
	}
	ws := make([]*writer[pillar.Embedding], o.Workers)
	embs := make([]embedder.Embedder, o.Workers)
	var rowsIn sync.Map
	err = each(ctx, o.Workers, len(us), func(w, i int) error {
		if ws[w] == nil {
			var err error
			if embs[w], err = embedder.Parse(o.Model, nil); err != nil {
				return err
			}
			if ws[w], err = newWriter[pillar.Embedding](out, "embeddings", tableOutput(o, "page_key", "chunk_no")); err != nil {
				return err
			}
		}
		emb := embs[w]
		batch := 64
		if pb, ok := emb.(interface{ PreferredBatch() int }); ok && pb.PreferredBatch() > 0 {
			batch = pb.PreferredBatch()
		}
		var pend []pillar.Chunk
		texts := make([]string, 0, batch)
		flush := func() error {
			if len(pend) == 0 {
				return nil
			}
			texts = texts[:0]
			for _, c := range pend {
				texts = append(texts, c.Text)
			}
			vecs, err := emb.Embed(ctx, texts)
			if err != nil {
				return err
			}
			if len(vecs) != len(pend) {
				return fmt.Errorf("%d vectors for %d chunks", len(vecs), len(pend))
			}
			for k, c := range pend {
				if err := embedder.CheckVector(k, vecs[k], emb.Dims()); err != nil {
					return fmt.Errorf("page %s chunk %d: %w", c.PageKey, c.ChunkNo, err)
				}
				if err := ws[w].write(pillar.Embedding{PageKey: c.PageKey, ChunkNo: c.ChunkNo, ContentHash: c.ContentHash, Vector: vecs[k]}); err != nil {
					return err
				}
			}
			pend = pend[:0]
			return nil
		}
		n := 0
		err := readUnit(us[i], func(chunks []pillar.Chunk) error {
			n += len(chunks)
			for _, c := range chunks {
				if c.ChunkNo < 0 {
					if err := ws[w].write(pillar.Embedding{PageKey: c.PageKey, ChunkNo: -1, ContentHash: c.ContentHash}); err != nil {
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
			return nil
		})
		if err == nil {
			err = flush()
		}
		rowsIn.Store(i, n)
		return err
	})
	res.RowsIn = sum(&rowsIn)
	return closeAll(out, err, ws)
}

// floorSubsets evaluates every docs row against the policies
// (subsets.NewPage, Set.AppendEval) and writes each policy's members: a
// policy without top every match, one with top its best K per group
// (subsets.TopK, one per group, shared by the workers under a lock).
func floorSubsets(ctx context.Context, o *Options, in *inputs, out *files, res *Result) error {
	if _, err := in.sn.Table(ctx, pillar.TableSignals); err == nil {
		return errors.New("the store has signals: the floor evaluates docs alone")
	}
	set, err := subsets.ReadFile(o.Policies)
	if err != nil {
		return err
	}
	names := set.Names()
	us, err := tableUnits(ctx, in, pillar.TableDocs)
	if err != nil {
		return err
	}
	// ws[w][s]: worker w's members of subset s.
	ws := make([][]*writer[pillar.SubsetMember], o.Workers)
	var mu sync.Mutex
	tops := map[[2]string]*subsets.TopK{}
	var rowsIn sync.Map
	mo := tableOutput(o, "page_key")
	err = each(ctx, o.Workers, len(us), func(w, i int) error {
		if ws[w] == nil {
			ws[w] = make([]*writer[pillar.SubsetMember], len(names))
			for s, name := range names {
				var err error
				if ws[w][s], err = newWriter[pillar.SubsetMember](out, "subset-"+name, mo); err != nil {
					return err
				}
			}
		}
		idx := map[string]int{}
		for s, name := range names {
			idx[name] = s
		}
		var buf []subsets.Match
		n := 0
		err := readUnit(us[i], func(docs []pillar.Doc) error {
			n += len(docs)
			for j := range docs {
				p, err := subsets.NewPage(&docs[j], nil)
				if err != nil {
					return err
				}
				buf = set.AppendEval(buf[:0], &p, o.AsOf)
				for _, m := range buf {
					if !set.HasTop(m.Subset) {
						if err := ws[w][idx[m.Subset]].write(m.Member()); err != nil {
							return err
						}
						continue
					}
					k := [2]string{m.Subset, m.Group}
					mu.Lock()
					tk := tops[k]
					if tk == nil {
						if tk, err = set.NewTopK(m.Subset); err != nil {
							mu.Unlock()
							return err
						}
						tops[k] = tk
					}
					tk.Push(m)
					mu.Unlock()
				}
			}
			return nil
		})
		rowsIn.Store(i, n)
		return err
	})
	res.RowsIn = sum(&rowsIn)
	if err == nil {
		keys := make([][2]string, 0, len(tops))
		for k := range tops {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(a, b int) bool {
			return keys[a][0] < keys[b][0] || keys[a][0] == keys[b][0] && keys[a][1] < keys[b][1]
		})
		top := map[string]*writer[pillar.SubsetMember]{}
		for _, k := range keys {
			if top[k[0]] == nil {
				if top[k[0]], err = newWriter[pillar.SubsetMember](out, "subset-"+k[0]+"-top", mo); err != nil {
					break
				}
			}
			if err = top[k[0]].write(tops[k].Members()...); err != nil {
				break
			}
		}
		for _, w := range top {
			if cerr := w.close(out); err == nil {
				err = cerr
			}
		}
	}
	for _, w := range ws {
		if cerr := closeAll(out, nil, w); err == nil {
			err = cerr
		}
	}
	return err
}

// page is one exported page with its rows, as the join hands it to a
// worker.
type page struct {
	doc    pillar.Doc
	chunks []pillar.Chunk
	vecs   map[int32]pillar.Embedding
}

// floorRecords is the floor of publish and export: the docs, chunk,
// embedding and exported member tables of the published pair, each decoded
// by its own goroutine, joined by page key in one, and every member page's
// record built (pipeline.PageRecord) and written by the workers: queue
// records (pipeline.Desired rows, one file per worker, the store's table
// settings: a new pair's publish computes them and marks a bulk rebuild)
// for publish, export rows
// (sstbuilder.ExportRow, the export's partition file settings) for export;
// and for both the export/state row of each page.
func floorRecords(ctx context.Context, o *Options, in *inputs, out *files, res *Result) error {
	pub, err := pillar.LoadPublished(ctx, in.sn)
	if err != nil {
		return fmt.Errorf("nothing is published: %w", err)
	}
	enc, err := record.ParseEncoding(o.Encoding)
	if err != nil {
		return err
	}
	set, err := subsets.ReadFile(o.Policies)
	if err != nil {
		return err
	}
	tables := []string{pillar.TableDocs, pillar.ChunksTable(pub.ChunkVersion), pillar.EmbeddingsTable(pub.ChunkVersion, pub.Model)}
	for _, n := range set.Names() {
		if set.Exported(n) {
			tables = append(tables, pillar.SubsetTable(n))
		}
	}
	fls := make([][]string, len(tables))
	for i, t := range tables {
		if fls[i], err = in.files(ctx, t); err != nil {
			return err
		}
	}
	stop := make(chan struct{})
	defer close(stop)
	errs := make([]error, len(tables))
	docs := &cursor[pillar.Doc]{ch: stream[pillar.Doc](fls[0], stop, &errs[0])}
	chunks := &cursor[pillar.Chunk]{ch: stream[pillar.Chunk](fls[1], stop, &errs[1])}
	embs := &cursor[pillar.Embedding]{ch: stream[pillar.Embedding](fls[2], stop, &errs[2])}
	var members []*cursor[pillar.SubsetMember]
	for i := 3; i < len(tables); i++ {
		members = append(members, &cursor[pillar.SubsetMember]{ch: stream[pillar.SubsetMember](fls[i], stop, &errs[i])})
	}

	// The join: pages in key order, in batches, to the workers.
	const batch = 32
	work := make(chan []page, 2*o.Workers)
	go func() {
		defer close(work)
		var b []page
		for d := docs.peek(); d != nil; d = docs.peek() {
			doc := docs.take()
			k := doc.PageKey
			member := false
			for _, m := range members {
				for r := m.peek(); r != nil && r.PageKey <= k; r = m.peek() {
					member = member || r.PageKey == k
					m.take()
				}
			}
			p := page{doc: doc}
			for r := chunks.peek(); r != nil && r.PageKey <= k; r = chunks.peek() {
				if c := chunks.take(); c.PageKey == k {
					p.chunks = append(p.chunks, c)
				}
			}
			for r := embs.peek(); r != nil && r.PageKey <= k; r = embs.peek() {
				if e := embs.take(); e.PageKey == k {
					if p.vecs == nil {
						p.vecs = map[int32]pillar.Embedding{}
					}
					p.vecs[e.ChunkNo] = e
				}
			}
			if !member {
				continue
			}
			if b = append(b, p); len(b) == batch {
				select {
				case work <- b:
				case <-stop:
					return
				}
				b = nil
			}
		}
		if len(b) > 0 {
			select {
			case work <- b:
			case <-stop:
			}
		}
		// Drain the rest so every row is read (members or chunks past the
		// last page).
		for _, c := range []interface{ drain() }{chunks, embs} {
			c.drain()
		}
		for _, m := range members {
			m.drain()
		}
	}()

	publish := o.Step == StepPublish
	rg := sstbuilder.ExportRowGroupBytes(o.MemoryLimit, in.parts)
	eo := &output{codec: pqsnappy.Default, groupRows: 256, groupBytes: 1 << 62, page: min(max(rg/2, 16<<10), 256<<10), sorted: []string{"page_key", "seq", "op"}, skipStats: []string{"value"}}
	so := tableOutput(o, "page_key")
	type worker struct {
		desired *writer[pipeline.Desired]
		export  map[int32]*writer[sstbuilder.ExportRow]
		state   *writer[pipeline.ExportState]
	}
	wk := make([]worker, o.Workers)
	var wg sync.WaitGroup
	werrs := make([]error, o.Workers)
	for w := range o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := &wk[w]
			x.export = map[int32]*writer[sstbuilder.ExportRow]{}
			fail := func(err error) {
				werrs[w] = err
				for range work { // let the join finish
				}
			}
			var err error
			if x.state, err = newWriter[pipeline.ExportState](out, "state", so); err != nil {
				fail(err)
				return
			}
			for b := range work {
				for i := range b {
					p := &b[i]
					d, _, err := pipeline.PageRecord(&p.doc, p.chunks, p.vecs, pub.ChunkVersion, pub.Model, enc, in.parts)
					if err != nil {
						fail(err)
						return
					}
					if d == nil {
						continue // skipped, as the step skips it
					}
					if publish {
						if x.desired == nil {
							if x.desired, err = newWriter[pipeline.Desired](out, "desired", so); err != nil {
								fail(err)
								return
							}
						}
						err = x.desired.write(*d)
					} else {
						ew := x.export[d.Partition]
						if ew == nil {
							if ew, err = newWriter[sstbuilder.ExportRow](out, sstbuilder.PartitionFileName(int(d.Partition)), eo); err != nil {
								fail(err)
								return
							}
							x.export[d.Partition] = ew
						}
						err = ew.write(sstbuilder.ExportRow{PageKey: d.PageKey, Op: pillar.OpPut, Value: d.Value})
					}
					if err == nil {
						err = x.state.write(pipeline.ExportState{PageKey: d.PageKey, Partition: d.Partition, RecordHash: d.RecordHash})
					}
					if err != nil {
						fail(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	err = errors.Join(errs...)
	res.RowsIn = docs.n + chunks.n + embs.n
	for _, m := range members {
		res.RowsIn += m.n
	}
	// RowsOut counts the records (desired or export rows), not the state rows.
	var state int64
	for w := range wk {
		x := &wk[w]
		if x.desired != nil {
			err = errors.Join(err, x.desired.close(out))
		}
		for _, ew := range x.export {
			err = errors.Join(err, ew.close(out))
		}
		if x.state != nil {
			state += x.state.rows
			err = errors.Join(err, x.state.close(out))
		}
		err = errors.Join(err, werrs[w])
	}
	out.rows.Add(-state)
	return err
}
