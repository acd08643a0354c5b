package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/pillarkit/pillar/bulkexport"
	"github.com/pillarkit/pillar/cobbled/router"
	"github.com/pillarkit/pillar/internal/objstore"
	"github.com/pillarkit/pillar/internal/record"
	"github.com/pillarkit/pillar/jobs/pipeline"
	"github.com/pillarkit/pillar/lorry"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/ingest"
	"github.com/pillarkit/pillar/pillar/local"
	"github.com/pillarkit/pillar/subsets"
)

// DefaultCorpus is the PostgreSQL HTML documentation from Debian's
// postgresql-doc-15 package.
const DefaultCorpus = "/usr/share/doc/postgresql-doc-15/html"

// Options configure a demo run. The zero value runs the default demo.
type Options struct {
	// Pillar is the pillar binary started for the control plane and the
	// nodes. Required.
	Pillar string
	// Out is the output folder. The default value is "demo-out".
	Out string
	// Corpus is a folder of HTML or text files, or a crawl or page
	// dataset as pillar ingest takes them (WARC, WET, JSONL, Parquet: a
	// file, a folder of them, a glob): a crawl is ingested where it is,
	// and step 6 changes pages by ingesting a re-crawl of them. The
	// default value is DefaultCorpus; ignored when Synthetic > 0.
	Corpus string
	// BaseURL for corpus files without a canonical link. The default value
	// is the PostgreSQL docs' URL when Corpus is the default, else
	// "http://corpus.local/".
	BaseURL string
	// Synthetic generates this many pages of realistic size instead of
	// reading a corpus. The default value is 0.
	Synthetic int
	// Policies is the subset policy file. The default value ("") is the
	// embedded assets/policies.yaml, written for any folder of HTML docs.
	Policies string
	// MaxFiles, when > 0, copies only the first MaxFiles candidate files of
	// Corpus (in walk order): the short mode the corpus tests use. The
	// default value (0) copies them all.
	MaxFiles int
	// Canonical, Include and Exclude are passed to ingest (see
	// ingest.Options). The default values: prefer, every file, none.
	Canonical        string
	Include, Exclude []string
	// Partitions is the deployment's partition count. The default value is
	// 64.
	Partitions int
	// Reuse keeps an existing store and object store in Out (the serving
	// side always starts fresh). The default value (false) starts fresh.
	Reuse bool
	// Stdout receives the step-by-step narrative. The default value is
	// os.Stdout.
	Stdout io.Writer
	// Logger receives component logs. The default value discards.
	Logger *slog.Logger
}

func (o *Options) ensureDefaults() {
	if o.Out == "" {
		o.Out = "demo-out"
	}
	if o.Corpus == "" {
		o.Corpus = DefaultCorpus
	}
	if o.BaseURL == "" {
		if o.Corpus == DefaultCorpus {
			o.BaseURL = "https://www.postgresql.org/docs/15/"
		} else {
			o.BaseURL = "http://corpus.local/"
		}
	}
	if o.Partitions == 0 {
		o.Partitions = 64
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Report is what the demo measured. Every number in it is the counter the
// narrative printed.
type Report struct {
	Corpus string
	// Failure is why the run failed ("" when it passed).
	Failure string
	// Ingest is step 1's ingest summary (Pages, Skipped(), Outcomes).
	Ingest        ingest.Stats
	Pages         int
	HTMLBytes     int64
	Chunks        int64
	ChunksV2      int64
	Exported      int
	RecordBytes   int64
	SSTBytes      int64
	SSTFiles      int
	Batches       int // snapshot batches registered
	LorryBatches  int // delta batches Lorry delivered over the whole run
	Subsets       []pipeline.SubsetSummary
	Stages        []Stage
	Reads         Latencies // step 4: every exported page read back
	ReadsDuring   Latencies // step 5: reads while re-publishing
	FailedDuring  int
	Hedges        int64
	HedgesWon     int64
	Failovers     int64
	Incremental   Incremental
	Lag           []LagSample
	ConvergeBulk1 time.Duration
	ConvergeBulk2 time.Duration
	ConvergeLorry time.Duration
	Versions      [2]string
	// Versions2 is step 5, the serving-versions cycle.
	Versions2 Versions
}

// Stage is the wall time of one step.
type Stage struct {
	Name string
	Dur  time.Duration
}

// Incremental is what step 6 changed and checked.
type Incremental struct {
	Edited       []string // files edited (relative to the corpus), pages picked from the exported ones
	ChangedPages int      // changed pages ingest counted after the edits
	PublishPuts  int      // puts the re-publish queued for them
	PolicySubset string   // the exported subset the policy change cuts into
	SubsetSize   int      // its size before the change
	Removed      []string // URLs of the pages the change removes from every exported subset
	Puts         int      // puts the policy change queued
	Deletes      int      // deletes the policy change queued
	Batches      int      // delta batches Lorry delivered in step 6
	Verified     int      // records read back and matched afterwards
	EditedRead   int      // of them, the edited pages, with their new content hash
	Gone         int      // removed pages confirmed no longer served
}

// LagSample is the total number of batches replicas were behind at a time.
type LagSample struct {
	At     time.Duration
	Behind int64
}

type demo struct {
	o       Options
	crawl   bool   // Corpus is a crawl or dataset, not a folder of pages
	recrawl string // step 6's re-crawl of edited pages (a WARC), once written
	ctx     context.Context
	rep     *Report
	start   time.Time
	st      *local.Store
	objs    objstore.Store
	objURL  string
	cl      *cluster
	rt      *router.Router
	set     *subsets.Set
	lagMu   sync.Mutex
	lagWG   sync.WaitGroup
	lagEnd  chan struct{}
	// runID makes this run's export and batch ids unique: with --reuse the
	// object store keeps earlier runs' batches, and a batch id is never
	// reused for other content.
	runID string
	// asOf is the subsets' evaluation time, fixed in step 2 so that step 6's
	// policy change is the only thing that moves membership.
	asOf time.Time
}

func (d *demo) say(format string, a ...any) {
	fmt.Fprintf(d.o.Stdout, format+"\n", a...)
}

func (d *demo) stage(name string, fn func() error) error {
	d.say("==> %s", name)
	t0 := time.Now()
	err := fn()
	dur := time.Since(t0)
	d.rep.Stages = append(d.rep.Stages, Stage{Name: name, Dur: dur})
	if err != nil {
		return fmt.Errorf("demo: %s: %w", name, err)
	}
	d.say("    done in %s", dur.Round(time.Millisecond))
	return nil
}

// Run runs the demo and writes the report into opts.Out.
func Run(ctx context.Context, opts Options) (*Report, error) {
	opts.ensureDefaults()
	if opts.Pillar == "" {
		return nil, errors.New("demo: Options.Pillar (the pillar binary) is required")
	}
	d := &demo{o: opts, ctx: ctx, rep: &Report{}, start: time.Now(), runID: time.Now().UTC().Format("20060102t150405")}
	if !opts.Reuse {
		for _, sub := range []string{"store", "objects", "exports", "corpus", "serve"} {
			if err := os.RemoveAll(filepath.Join(opts.Out, sub)); err != nil {
				return nil, err
			}
		}
	}
	_ = os.RemoveAll(filepath.Join(opts.Out, "serve")) // the serving side always starts fresh
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(opts.Out)
	if err != nil {
		return nil, err
	}
	d.o.Out = abs
	d.objURL = "file://" + filepath.Join(abs, "objects")
	if d.objs, err = objstore.Open(ctx, d.objURL, nil); err != nil {
		return nil, err
	}
	if d.set, err = loadPolicies(opts.Policies); err != nil {
		return nil, err
	}
	defer func() {
		if d.lagEnd != nil {
			close(d.lagEnd)
			d.lagWG.Wait()
		}
		if d.rt != nil {
			d.rt.Close()
		}
		if d.cl != nil {
			d.cl.stop()
		}
		if d.st != nil {
			d.st.Close()
		}
	}()
	steps := []func() error{d.step1, d.step2, d.step3, d.step4, d.step5, d.step6}
	for _, s := range steps {
		if err := s(); err != nil {
			d.rep.Failure = err.Error()
			if path, werr := writeReport(d.o.Out, d.rep); werr == nil {
				d.say("\nFAILED: %v\nreport: %s", err, path)
			}
			if d.cl != nil {
				err = fmt.Errorf("%w (logs of the child processes: %s)", err, filepath.Join(d.o.Out, "serve", "logs"))
			}
			return d.rep, err
		}
	}
	if d.lagEnd != nil {
		close(d.lagEnd)
		d.lagWG.Wait()
		d.lagEnd = nil
	}
	if d.rt != nil {
		st := d.rt.Stats()
		d.rep.Hedges, d.rep.HedgesWon, d.rep.Failovers = st.Hedges, st.HedgesWon, st.Failovers
	}
	path, err := writeReport(d.o.Out, d.rep)
	if err != nil {
		return d.rep, err
	}
	d.say("\nreport: %s (plots beside it)", path)
	return d.rep, nil
}

// ingestOptions are the options of both ingests of the corpus copy.
func (d *demo) ingestOptions() ingest.Options {
	base := d.o.BaseURL
	if d.o.Synthetic > 0 {
		base = "https://synthetic.example/"
	}
	from := filepath.Join(d.o.Out, "corpus")
	switch {
	case d.recrawl != "":
		from = d.recrawl
	case d.crawl:
		from = d.o.Corpus
	}
	return ingest.Options{From: from, BaseURL: base, Logger: d.o.Logger,
		Canonical: d.o.Canonical, Include: d.o.Include, Exclude: d.o.Exclude}
}

// step1 ingests the corpus.
func (d *demo) step1() error {
	return d.stage("1. ingest the corpus into an embedded store", func() error {
		src := filepath.Join(d.o.Out, "corpus")
		d.crawl = d.o.Synthetic == 0 && ingest.IsCrawl(d.o.Corpus)
		if d.crawl {
			d.rep.Corpus = d.o.Corpus + " (a crawl, ingested where it is)"
		} else if _, err := os.Stat(src); err != nil {
			if d.o.Synthetic > 0 {
				d.rep.Corpus = fmt.Sprintf("%d synthetic pages", d.o.Synthetic)
				if err := writeSynthetic(src, d.o.Synthetic); err != nil {
					return err
				}
			} else {
				// A private copy, so step 6 can change pages.
				d.rep.Corpus = d.o.Corpus
				n, err := copyTree(d.o.Corpus, src, d.o.MaxFiles)
				if err != nil {
					return fmt.Errorf("corpus %s: %w (install it with `make deps`, or pass --corpus DIR or --synthetic N)", d.o.Corpus, err)
				}
				if d.o.MaxFiles > 0 {
					d.rep.Corpus = fmt.Sprintf("%s (first %d candidate files)", d.o.Corpus, n)
				}
			}
		} else if d.rep.Corpus == "" {
			d.rep.Corpus = d.o.Corpus
		}
		st, err := local.Open(filepath.Join(d.o.Out, "store"), nil)
		if errors.Is(err, pillar.ErrNotFound) {
			st, err = local.Create(filepath.Join(d.o.Out, "store"), &local.Options{Partitions: d.o.Partitions})
		}
		if err != nil {
			return err
		}
		if st.Info().Partitions != d.o.Partitions {
			return fmt.Errorf("the reused store has %d partitions, not %d", st.Info().Partitions, d.o.Partitions)
		}
		d.st = st
		io := d.ingestOptions()
		io.Progress = true
		stats, err := ingest.Run(d.ctx, st, io)
		if err != nil {
			return err
		}
		d.rep.Ingest = stats
		d.rep.Pages, d.rep.HTMLBytes = stats.Pages, stats.HTMLBytes
		d.say("    %.1f MB of HTML; %s", float64(stats.HTMLBytes)/1e6, indent(stats.Summary(), "    "))
		if stats.Pages == 0 {
			return fmt.Errorf("no page of %s went into the store (%d files, %d skipped): nothing to check", d.rep.Corpus, stats.Files, stats.Skipped())
		}
		return nil
	})
}

// indent indents every line but the first of s.
func indent(s, prefix string) string {
	return strings.TrimRight(strings.ReplaceAll(s, "\n", "\n"+prefix), " \n")
}

const (
	chunkerV1 = "recursive:size=512,overlap=64"
	chunkerV2 = "tokens:size=256,overlap=32"
	model     = "hash:dim=384"
)

// asOf is the evaluation time of the subsets: a day after the newest page,
// so "fresh" means the same whenever the demo runs.
func (d *demo) newestAsOf() (time.Time, error) {
	sn, err := d.st.Snapshot(d.ctx)
	if err != nil {
		return time.Time{}, err
	}
	defer sn.Release()
	rr, err := sn.ReadTable(d.ctx, pillar.TableDocs, nil)
	if err != nil {
		return time.Time{}, err
	}
	defer rr.Close()
	var newest int64
	for rr.Next() {
		var doc pillar.Doc
		if err := rr.Scan(&doc); err != nil {
			return time.Time{}, err
		}
		newest = max(newest, doc.FetchedAt)
	}
	return time.UnixMilli(newest).Add(24 * time.Hour).UTC(), rr.Err()
}

// step2 backfills v1, computes subsets and publishes.
func (d *demo) step2() error {
	return d.stage("2. rechunk (v1), embed, compute subsets, publish", func() error {
		o := pipeline.Options{Logger: d.o.Logger}
		r, err := pipeline.Rechunk(d.ctx, d.st, chunkerV1, o)
		if err != nil {
			return err
		}
		d.rep.Chunks = r.Rows
		d.rep.Versions[0] = r.Version
		d.say("    chunk version %s: %d chunks for %d pages", r.Version, r.Rows, r.Pages)
		e, err := pipeline.Embed(d.ctx, d.st, r.Version, model, o)
		if err != nil {
			return err
		}
		d.say("    embedding version %s: %d vectors", e.Version, e.Rows)
		asOf, err := d.newestAsOf()
		if err != nil {
			return err
		}
		d.asOf = asOf
		rc, err := pipeline.Recompute(d.ctx, d.st, d.set, asOf, o)
		if err != nil {
			return err
		}
		d.rep.Subsets = rc.Subsets
		for _, s := range rc.Subsets {
			d.say("    subset %-14s exported=%-5v %5d pages", s.Name, s.Exported, s.Size)
		}
		p, err := pipeline.Publish(d.ctx, d.st, r.Version, model, o)
		if err != nil {
			return err
		}
		d.say("    published %s + %s; export: %d pages desired, bulk=%v", p.Published.ChunkVersion, p.Published.Model, p.Export.Desired, p.Export.Bulk)
		if p.Export.Desired == 0 {
			return fmt.Errorf("the policies (%s) put no page into an exported subset: the serving checks would test nothing", d.policiesName())
		}
		return nil
	})
}

func (d *demo) policiesName() string {
	if d.o.Policies == "" {
		return DefaultPoliciesName
	}
	return d.o.Policies
}

// bulkExport exports, builds SST batches and registers them: one call,
// bulkexport.Run, which owns the protocol's steps and its ordering.
func (d *demo) bulkExport(id string) error {
	dir := filepath.Join(d.o.Out, "exports", id)
	_ = os.RemoveAll(dir)
	// Records queued before the export must be delivered before its
	// snapshots are registered (the control plane refuses them until then):
	// drain Lorry first. Nothing is queued between here and the export.
	drained, err := d.drainLorry()
	if err != nil {
		return err
	}
	d.say("    Lorry drained first: %d delta batches queued before the export delivered", drained)
	r, err := bulkexport.Run(d.ctx, &bulkexport.Options{
		Store: d.st, Pipeline: pipeline.Options{Logger: d.o.Logger}, Dir: dir, ID: id, Source: "demo",
		Objects: d.objs, Control: d.cl.writer, Partitions: d.o.Partitions, Logger: d.o.Logger,
	})
	if err != nil {
		return err
	}
	res, br := r.Export, r.Build
	d.rep.Exported = int(res.Pages)
	d.rep.RecordBytes = res.Bytes
	d.say("    export %s: %d pages, %.1f MB of records (%d member pages skipped)", id, res.Pages, float64(res.Bytes)/1e6, res.Skipped)
	var bytes int64
	files := 0
	for _, p := range br.Partitions {
		if p.Manifest != nil {
			for _, f := range p.Manifest.Files {
				bytes += f.Size
				files++
			}
		}
	}
	d.rep.SSTBytes, d.rep.SSTFiles = bytes, files
	d.rep.Batches += len(br.Partitions)
	if len(br.Partitions) == 0 && res.Pages > 0 {
		return fmt.Errorf("export %s holds %d pages but built no snapshot batch", id, res.Pages)
	}
	d.say("    built and registered %d snapshot batches (%d SST files, %.1f MB) in %s", len(br.Partitions), files, float64(bytes)/1e6, br.Elapsed.Round(time.Millisecond))
	return nil
}

// step3 starts the serving side and loads the first bulk export.
func (d *demo) step3() error {
	return d.stage("3. bulk export → SST batches → object store → control plane → 3 cobbled nodes", func() error {
		cl, err := startCluster(d.ctx, d.o.Pillar, filepath.Join(d.o.Out, "serve"), d.objURL, d.o.Partitions)
		if err != nil {
			return err
		}
		d.cl = cl
		d.say("    control plane %s (SQLite); nodes %s/%s/%s in zones a/b/c", cl.control, cl.nodes[0].addr, cl.nodes[1].addr, cl.nodes[2].addr)
		d.say("    every hop on mutual TLS (certificates: %s, as `pillar dev certs` makes them); nodes serve only the router and reader identities; node, writer and admin credentials apart", filepath.Join(d.o.Out, "serve", "certs"))
		d.lagEnd = make(chan struct{})
		d.lagWG.Add(1)
		go d.sampleLag()
		if err := d.bulkExport("bulk1-" + d.runID); err != nil {
			return err
		}
		took, err := cl.waitConverged(d.ctx, 3*time.Minute)
		if err != nil {
			return err
		}
		d.rep.ConvergeBulk1 = took
		d.say("    every replica caught up %s after registration", took.Round(time.Millisecond))
		d.rt, err = router.New(d.ctx, router.Options{Source: cl.client, Zone: "a", Partitions: d.o.Partitions, Logger: d.o.Logger, NodeTLS: cl.nodeTLS})
		return err
	})
}

// expected is what a page's record must say.
type expected struct {
	url, hash string
}

// exportedPages returns the pages the serving tier should hold, from the
// store: export/state joined with docs.
func (d *demo) exportedPages() (map[string]expected, error) {
	sn, err := d.st.Snapshot(d.ctx)
	if err != nil {
		return nil, err
	}
	defer sn.Release()
	want := map[string]bool{}
	rr, err := sn.ReadTable(d.ctx, pipeline.TableExportState, nil)
	if err != nil {
		return nil, err
	}
	for rr.Next() {
		var s pipeline.ExportState
		if err := rr.Scan(&s); err != nil {
			rr.Close()
			return nil, err
		}
		want[s.PageKey] = true
	}
	rr.Close()
	out := map[string]expected{}
	rr, err = sn.ReadTable(d.ctx, pillar.TableDocs, nil)
	if err != nil {
		return nil, err
	}
	defer rr.Close()
	for rr.Next() {
		var doc pillar.Doc
		if err := rr.Scan(&doc); err != nil {
			return nil, err
		}
		if want[doc.PageKey] {
			out[doc.PageKey] = expected{url: doc.URL, hash: doc.ContentHash}
		}
	}
	return out, rr.Err()
}

// readAll reads every page of want through the router in batches of 12 and
// checks each record. chunker, when set, is the chunk version every record
// must carry.
func (d *demo) readAll(want map[string]expected, chunker string, lat *Latencies) (int, error) {
	return d.readAllAs(want, chunker, lat, nil)
}

// storeDir is the embedded store's folder.
func (d *demo) storeDir() string { return filepath.Join(d.o.Out, "store") }

// readAllAs is readAll reading with ro (a version by name: ro.Version).
func (d *demo) readAllAs(want map[string]expected, chunker string, lat *Latencies, ro *router.ReadOptions) (int, error) {
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	bad := 0
	var firstBad string
	for i := 0; i < len(keys); i += 12 {
		batchKeys := keys[i:min(i+12, len(keys))]
		raw := make([][]byte, len(batchKeys))
		for j, k := range batchKeys {
			kk, _ := pillar.ParseKey(k)
			raw[j] = kk[:]
		}
		t0 := time.Now()
		resp, err := d.rt.Read(d.ctx, raw, ro)
		var res []router.Result
		if resp != nil {
			res = resp.Results
		}
		if lat != nil {
			lat.Add(time.Since(t0))
		}
		if err != nil {
			return 0, err
		}
		for j, r := range res {
			k := batchKeys[j]
			why := ""
			switch {
			case r.Err != nil:
				why = r.Err.Error()
			case !r.Found:
				why = "not found"
			default:
				rec, err := record.Unmarshal(r.Value)
				switch {
				case err != nil:
					why = err.Error()
				case rec.ContentHash != want[k].hash:
					why = fmt.Sprintf("content hash %s, store has %s", rec.ContentHash, want[k].hash)
				case rec.Url != want[k].url:
					why = fmt.Sprintf("url %s, store has %s", rec.Url, want[k].url)
				case chunker != "" && rec.ChunkerVersion != chunker:
					why = fmt.Sprintf("chunker version %s, want %s", rec.ChunkerVersion, chunker)
				}
			}
			if why != "" {
				bad++
				if firstBad == "" {
					firstBad = k + ": " + why
				}
			}
		}
	}
	if bad > 0 {
		return len(keys), fmt.Errorf("%d of %d records do not match the store (first: %s)", bad, len(keys), firstBad)
	}
	return len(keys), nil
}

// step4 reads every exported page back and checks it.
func (d *demo) step4() error {
	return d.stage("4. read every exported page back through the hedged router and check it", func() error {
		want, err := d.exportedPages()
		if err != nil {
			return err
		}
		n, err := d.readAll(want, d.rep.Versions[0], &d.rep.Reads)
		if err != nil {
			return err
		}
		if n == 0 {
			return errors.New("export/state holds no page: there is nothing to read back")
		}
		d.say("    %d records read in batches of 12, all match the store (content hash, URL, chunk version); p50 %s p99 %s",
			n, d.rep.Reads.Quantile(0.5), d.rep.Reads.Quantile(0.99))
		return nil
	})
}

// drainLorry delivers everything queued now (in-process Lorry worker) and
// returns the number of delta batches it delivered.
func (d *demo) drainLorry() (int, error) {
	w, err := lorry.New(lorry.Options{Store: d.st, Objects: d.objs, Registry: d.cl.writer, ID: "demo-lorry", Logger: d.o.Logger})
	if err != nil {
		return 0, err
	}
	res, err := w.Drain(d.ctx)
	if err != nil {
		return 0, err
	}
	d.rep.LorryBatches += int(res.Stats.Batches)
	return int(res.Stats.Batches), nil
}

// sampleLag records the replicas' total lag every 250ms until the cluster
// stops.
func (d *demo) sampleLag() {
	defer d.lagWG.Done()
	t0 := time.Now()
	for {
		select {
		case <-d.ctx.Done():
			return
		case <-d.lagEnd:
			return
		case <-time.After(250 * time.Millisecond):
		}
		ctx, cancel := context.WithTimeout(d.ctx, time.Second)
		_, behind, err := d.cl.converged(ctx)
		cancel()
		if err != nil {
			if strings.Contains(err.Error(), "closing") {
				return
			}
			continue
		}
		d.lagMu.Lock()
		d.rep.Lag = append(d.rep.Lag, LagSample{At: time.Since(t0), Behind: behind})
		d.lagMu.Unlock()
	}
}
