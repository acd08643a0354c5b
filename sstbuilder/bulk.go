package sstbuilder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/objstore"
	"github.com/pillarkit/pillar/internal/rocks"
)

// Progress receives units of work done (BuildExport counts input rows). The
// internal/progress Bar satisfies it.
type Progress interface{ Add(n int64) }

// ExportBuildOptions configure BuildExport. Export and Store are required.
type ExportBuildOptions struct {
	// Export is the export directory (see the package comment), or, with
	// ExportStore, the key prefix of the export in that store ("" for its
	// root).
	Export string
	// ExportStore holds the export when it is not a local directory. Each
	// partition file is downloaded (and checked against export.json) into
	// WorkDir just before its partition is built, and removed after. The
	// default value is nil (Export is a directory).
	ExportStore objstore.Store
	// Store receives the batches.
	Store objstore.Store
	// Partitions is the deployment's partition count; an export with another
	// count is refused (ErrPartitions). The default value 0 accepts the
	// export's count.
	Partitions int
	// Only lists the partitions to build. The default value (nil) builds all.
	Only []int
	// Registerer registers each uploaded batch. The default value is
	// NopRegisterer (nothing is registered; that is logged).
	Registerer Registerer
	// WorkDir holds the SST files being built and the resume state
	// (state.json). The default value is <Export>/.sst-build, or
	// $TMPDIR/pillar-sst-<export id> with ExportStore.
	WorkDir string
	// Table, TargetFileSize, MaxValueSize: see BuildOptions.
	Table          rocks.TableConfig
	TargetFileSize int64
	MaxValueSize   int
	// Parallelism is the number of partitions built at once. The default
	// value is 2.
	Parallelism int
	// KeepFiles keeps the local SST files after upload. The default value is
	// false (they are removed).
	KeepFiles bool
	// Progress counts input rows. The default value shows nothing.
	Progress Progress
	// Logger. The default value discards.
	Logger *slog.Logger
	// Now is the clock for manifests. The default value is time.Now.
	Now func() time.Time
}

// Partition outcomes in PartitionResult.Status.
const (
	StatusBuilt    = "built"    // built, uploaded (and registered) now
	StatusReused   = "reused"   // built by an earlier run from the same input; uploaded now
	StatusUploaded = "uploaded" // the store already held this batch from the same input
	StatusEmpty    = "empty"    // a delta partition without rows: no batch
)

// PartitionResult is the outcome for one partition.
type PartitionResult struct {
	Partition int
	BatchID   string
	Status    string
	Manifest  *batch.Manifest // nil when Status is StatusEmpty
	Seq       int64           // control-plane sequence; 0 when not registered
	Stats     BuildStats      // zero unless Status is StatusBuilt
}

// ExportBuildResult is the outcome of BuildExport.
type ExportBuildResult struct {
	Export     *ExportMeta
	Partitions []PartitionResult // in partition order
	Elapsed    time.Duration
}

type buildState struct {
	ExportID   string             `json:"export_id"`
	Partitions map[int]*partState `json:"partitions"`
}

type partState struct {
	InputSHA256 string          `json:"input_sha256"`
	Manifest    *batch.Manifest `json:"manifest,omitempty"`
	Files       []string        `json:"files,omitempty"`
	Empty       bool            `json:"empty,omitempty"`
	Uploaded    bool            `json:"uploaded,omitempty"`
	Seq         int64           `json:"seq,omitempty"`
}

// BuildExport builds, uploads and registers one batch per partition of an
// export. It is resumable: see the package comment. On the first error it
// stops the other partitions and returns that error; batches completed
// before stay uploaded and registered, and a rerun skips them.
func BuildExport(ctx context.Context, opts *ExportBuildOptions) (*ExportBuildResult, error) {
	if opts == nil {
		return nil, fmt.Errorf("sstbuilder: BuildExport needs options")
	}
	o := *opts
	if (o.Export == "" && o.ExportStore == nil) || o.Store == nil {
		return nil, fmt.Errorf("sstbuilder: ExportBuildOptions.Export and Store are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Registerer == nil {
		o.Registerer = NopRegisterer{Logger: o.Logger}
	}
	if o.Parallelism <= 0 {
		o.Parallelism = 2
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if err := o.Table.Validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	var meta *ExportMeta
	var err error
	if o.ExportStore != nil {
		if meta, err = ReadExportMetaFrom(ctx, o.ExportStore, o.Export); err != nil {
			return nil, err
		}
		if o.WorkDir == "" {
			o.WorkDir = filepath.Join(os.TempDir(), "pillar-sst-"+meta.ID)
		}
	} else {
		if meta, err = ReadExportMeta(o.Export); err != nil {
			return nil, err
		}
		if o.WorkDir == "" {
			o.WorkDir = filepath.Join(o.Export, ".sst-build")
		}
	}
	if o.Partitions != 0 && meta.Partitions != o.Partitions {
		return nil, fmt.Errorf("sstbuilder: export %s has %d partitions, the deployment has %d: %w", meta.ID, meta.Partitions, o.Partitions, ErrPartitions)
	}
	// A snapshot replaces its partition, so it must say which queued
	// records it supersedes; zero per partition is stated explicitly (a
	// partition whose queue held nothing, or a synthetic export).
	if meta.Kind == batch.KindSnapshot && len(meta.QueueEnds) != meta.Partitions {
		return nil, fmt.Errorf("sstbuilder: export %s is a snapshot export without queue_ends in %s: its snapshots could land before "+
			"older deltas they replace; export it with `pillar export` (pipeline.Export), or with bulkexport.Run: %w", meta.ID, ExportMetaName, ErrNoSupersedes)
	}
	var parts []int
	if len(o.Only) == 0 {
		for p := range meta.Partitions {
			parts = append(parts, p)
		}
	} else {
		seen := map[int]bool{}
		for _, p := range o.Only {
			if p < 0 || p >= meta.Partitions {
				return nil, fmt.Errorf("sstbuilder: export %s: partition %d out of range [0,%d)", meta.ID, p, meta.Partitions)
			}
			if !seen[p] {
				seen[p] = true
				parts = append(parts, p)
			}
		}
		sort.Ints(parts)
	}
	if err := os.MkdirAll(o.WorkDir, 0o755); err != nil {
		return nil, fmt.Errorf("sstbuilder: work dir: %w", err)
	}
	unlock, err := lockWorkDir(o.WorkDir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	eb := &exportBuild{o: o, meta: meta, statePath: filepath.Join(o.WorkDir, "state.json"), inputDir: o.Export}
	if o.ExportStore != nil {
		eb.inputDir = filepath.Join(o.WorkDir, "input")
	}
	if err := eb.loadState(); err != nil {
		return nil, err
	}
	o.Logger.Info("sstbuilder: building export", "export", meta.ID, "kind", meta.Kind, "partitions", len(parts), "store", fmt.Sprint(o.Store))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make([]PartitionResult, len(parts))
	var (
		wg       sync.WaitGroup
		firstErr error
		errMu    sync.Mutex
	)
	work := make(chan int)
	for range min(o.Parallelism, len(parts)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				r, err := eb.partition(ctx, parts[i])
				results[i] = r
				if err != nil {
					errMu.Lock()
					if firstErr == nil {
						firstErr = err
						cancel()
					}
					errMu.Unlock()
				}
			}
		}()
	}
feed:
	for i := range parts {
		select {
		case work <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sstbuilder: export %s: %w", meta.ID, err)
	}
	res := &ExportBuildResult{Export: meta, Partitions: results, Elapsed: time.Since(start)}
	var st BuildStats
	for _, r := range results {
		st.RowsIn += r.Stats.RowsIn
		st.ValueBytes += r.Stats.ValueBytes
		st.FileBytes += r.Stats.FileBytes
	}
	o.Logger.Info("sstbuilder: export done", "export", meta.ID, "partitions", len(results), "rows_built", st.RowsIn,
		"sst_bytes", st.FileBytes, "elapsed", res.Elapsed.Round(time.Millisecond),
		"mb_per_s", fmt.Sprintf("%.1f", float64(st.ValueBytes)/1e6/res.Elapsed.Seconds()))
	return res, nil
}

type exportBuild struct {
	o         ExportBuildOptions
	inputDir  string // where the partition files are read (downloaded with ExportStore)
	meta      *ExportMeta
	statePath string
	mu        sync.Mutex
	state     buildState
}

func (eb *exportBuild) loadState() error {
	eb.state = buildState{ExportID: eb.meta.ID, Partitions: map[int]*partState{}}
	b, err := os.ReadFile(eb.statePath)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sstbuilder: state: %w", err)
	}
	var s buildState
	if err := json.Unmarshal(b, &s); err != nil {
		eb.o.Logger.Warn("sstbuilder: ignoring unreadable state file", "path", eb.statePath, "err", err)
		return nil
	}
	if s.ExportID != eb.meta.ID || s.Partitions == nil {
		eb.o.Logger.Warn("sstbuilder: state file belongs to another export; starting afresh", "path", eb.statePath, "state_export", s.ExportID)
		return nil
	}
	eb.state = s
	return nil
}

// update changes one partition's state and saves the state file.
func (eb *exportBuild) update(p int, f func(*partState)) error {
	eb.mu.Lock()
	defer eb.mu.Unlock()
	st := eb.state.Partitions[p]
	if st == nil {
		st = &partState{}
		eb.state.Partitions[p] = st
	}
	f(st)
	b, err := json.MarshalIndent(&eb.state, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileAtomic(eb.statePath, b); err != nil {
		return fmt.Errorf("sstbuilder: save state: %w", err)
	}
	return nil
}

func (eb *exportBuild) get(p int) partState {
	eb.mu.Lock()
	defer eb.mu.Unlock()
	if st := eb.state.Partitions[p]; st != nil {
		return *st
	}
	return partState{}
}

func (eb *exportBuild) partition(ctx context.Context, p int) (PartitionResult, error) {
	o, meta := eb.o, eb.meta
	bid := BatchID(meta.ID, p)
	res := PartitionResult{Partition: p, BatchID: bid}
	ef, has := meta.File(p)
	inputSHA := "none"
	if has {
		inputSHA = ef.SHA256
	}
	source := fmt.Sprintf("export:%s:p%05d:sha256=%s", meta.ID, p, inputSHA)
	log := o.Logger.With("partition", p, "batch", bid)
	progress := func() {
		if o.Progress != nil {
			o.Progress.Add(ef.Rows)
		}
	}

	// 1. Already in the store from the same input (an earlier run got as far
	// as the manifest): only (re-)register, which is idempotent.
	m, err := ReadManifest(ctx, o.Store, p, bid)
	switch {
	case err == nil:
		if m.Source != source {
			return res, fmt.Errorf("sstbuilder: partition %d: batch %s stored from %q, this export is %q: %w", p, bid, m.Source, source, ErrBatchExists)
		}
		res.Status, res.Manifest = StatusUploaded, m
		log.Info("sstbuilder: batch already uploaded from this input; not rebuilt")
		progress()
		return eb.register(ctx, res)
	case !errors.Is(err, objstore.ErrNotFound):
		return res, fmt.Errorf("sstbuilder: partition %d: %w", p, err)
	}

	st := eb.get(p)
	var paths []string
	if st.InputSHA256 == inputSHA && st.Empty && meta.Kind == batch.KindDelta {
		res.Status = StatusEmpty
		progress()
		return res, nil
	}
	if st.InputSHA256 == inputSHA && st.Manifest != nil && filesIntact(st.Manifest, st.Files) {
		res.Status, m, paths = StatusReused, st.Manifest, st.Files
		log.Info("sstbuilder: reusing files built by an earlier run from this input")
		progress()
	} else {
		// 2. Build.
		if has && o.ExportStore != nil {
			if err := eb.download(ctx, ef); err != nil {
				return res, err
			}
			defer os.Remove(filepath.Join(eb.inputDir, ef.Name))
		}
		if has {
			if err := VerifyExportFile(eb.inputDir, ef); err != nil {
				return res, err
			}
		}
		dir := filepath.Join(o.WorkDir, fmt.Sprintf("p%05d", p))
		if err := os.RemoveAll(dir); err != nil {
			return res, fmt.Errorf("sstbuilder: partition %d: %w", p, err)
		}
		r, err := OpenPartition(eb.inputDir, meta, p)
		if err != nil {
			return res, err
		}
		var rows Rows = r
		if o.Progress != nil {
			rows = &stableCountingRows{countingRows{Rows: r, p: o.Progress}}
		}
		var supersedes int64
		if meta.Kind == batch.KindSnapshot {
			supersedes = meta.QueueEnds[p] // present: checked above
		}
		m, paths, res.Stats, err = buildPartition(ctx, rows, &BuildOptions{
			Dir: dir, Partition: p, Partitions: meta.Partitions, Kind: meta.Kind, BatchID: bid, Source: source, Supersedes: supersedes,
			Publication: meta.Publication,
			Table:       o.Table, TargetFileSize: o.TargetFileSize, MaxValueSize: o.MaxValueSize, Now: o.Now, Logger: o.Logger,
		})
		r.Close()
		if cr, ok := rows.(*stableCountingRows); ok {
			cr.flush()
		}
		if errors.Is(err, ErrEmpty) {
			res.Status = StatusEmpty
			log.Info("sstbuilder: delta partition has no rows; no batch")
			return res, eb.update(p, func(s *partState) { *s = partState{InputSHA256: inputSHA, Empty: true} })
		}
		if err != nil {
			return res, err
		}
		res.Status = StatusBuilt
		log.Info("sstbuilder: built", "files", len(paths), "keys", m.Keys, "deletes", m.Deletes, "sst_bytes", res.Stats.FileBytes,
			"superseded", res.Stats.Superseded, "elapsed", res.Stats.Elapsed.Round(time.Millisecond))
		if err := eb.update(p, func(s *partState) { *s = partState{InputSHA256: inputSHA, Manifest: m, Files: paths} }); err != nil {
			return res, err
		}
	}

	// 3. Upload: files, then the manifest.
	stored, err := Upload(ctx, o.Store, m, paths)
	if err != nil {
		return res, err
	}
	res.Manifest = stored
	if err := eb.update(p, func(s *partState) { s.Uploaded = true; s.Manifest = stored }); err != nil {
		return res, err
	}
	if !o.KeepFiles {
		os.RemoveAll(filepath.Join(o.WorkDir, fmt.Sprintf("p%05d", p)))
		if err := eb.update(p, func(s *partState) { s.Files = nil }); err != nil {
			return res, err
		}
	}
	// 4. Register.
	return eb.register(ctx, res)
}

func (eb *exportBuild) register(ctx context.Context, res PartitionResult) (PartitionResult, error) {
	seq, err := eb.o.Registerer.RegisterBatch(ctx, res.Manifest)
	if err != nil {
		return res, fmt.Errorf("sstbuilder: partition %d: register batch %s: %w", res.Partition, res.BatchID, err)
	}
	res.Seq = seq
	if seq > 0 {
		eb.o.Logger.Info("sstbuilder: registered", "partition", res.Partition, "batch", res.BatchID, "seq", seq)
	}
	return res, eb.update(res.Partition, func(s *partState) { s.Seq = seq })
}

// filesIntact reports whether the local files of an earlier build are all
// there with their manifest sizes (their checksums are verified by the
// serving nodes, and an upload over a different object fails).
func filesIntact(m *batch.Manifest, paths []string) bool {
	if len(paths) != len(m.Files) {
		return false
	}
	for i, p := range paths {
		st, err := os.Stat(p)
		if err != nil || st.Size() != m.Files[i].Size || filepath.Base(p) != m.Files[i].Name {
			return false
		}
	}
	return true
}

// countingRows reports rows to a Progress in steps of 256. It is as stable
// as the Rows it wraps.
type countingRows struct {
	Rows
	p Progress
	n int64
}

func (c *countingRows) Next() bool {
	ok := c.Rows.Next()
	if ok {
		if c.n++; c.n == 256 {
			c.p.Add(c.n)
			c.n = 0
		}
	}
	return ok
}

func (c *countingRows) flush() {
	if c.n > 0 {
		c.p.Add(c.n)
		c.n = 0
	}
}

// exportKey joins an export prefix and a file name into an object key.
func exportKey(prefix, name string) string {
	prefix = strings.Trim(prefix, "/")
	if prefix == "" {
		return name
	}
	return prefix + "/" + name
}

// ReadExportMetaFrom reads and validates export.json of an export stored
// under prefix in an object store.
func ReadExportMetaFrom(ctx context.Context, store objstore.Store, prefix string) (*ExportMeta, error) {
	raw, err := objstore.ReadAll(ctx, store, exportKey(prefix, ExportMetaName))
	if err != nil {
		return nil, fmt.Errorf("sstbuilder: export %s: %w", exportKey(prefix, ""), err)
	}
	m, err := decodeExportMeta(raw)
	if err != nil {
		return nil, fmt.Errorf("sstbuilder: export %s: %w", exportKey(prefix, ExportMetaName), err)
	}
	return m, nil
}

// download fetches one partition file of a remote export into inputDir.
func (eb *exportBuild) download(ctx context.Context, ef ExportFile) error {
	path := filepath.Join(eb.inputDir, ef.Name)
	if err := objstore.GetFile(ctx, eb.o.ExportStore, exportKey(eb.o.Export, ef.Name), path); err != nil {
		return fmt.Errorf("sstbuilder: export partition %d: download: %w", ef.Partition, err)
	}
	return nil
}

// UploadExport copies a finished local export into a store under prefix:
// the partition files first, export.json last (so its presence still marks
// the export complete).
func UploadExport(ctx context.Context, store objstore.Store, dir, prefix string) error {
	meta, err := ReadExportMeta(dir)
	if err != nil {
		return err
	}
	for _, f := range meta.Files {
		if err := objstore.PutFile(ctx, store, exportKey(prefix, f.Name), filepath.Join(dir, f.Name), nil); err != nil {
			return fmt.Errorf("sstbuilder: upload export %s: %w", meta.ID, err)
		}
	}
	if err := objstore.PutFile(ctx, store, exportKey(prefix, ExportMetaName), filepath.Join(dir, ExportMetaName), nil); err != nil {
		return fmt.Errorf("sstbuilder: upload export %s: %w", meta.ID, err)
	}
	return nil
}

// stableCountingRows counts the rows of a PartitionReader (stable rows).
type stableCountingRows struct{ countingRows }

func (*stableCountingRows) stable() {}

// ErrBusy: another BuildExport holds the work directory.
var ErrBusy = errors.New("work directory in use by another build")

// lockWorkDir takes an exclusive flock on <dir>/lock, released by the
// returned function or when the process dies (so a crash leaves no stale
// lock).
func lockWorkDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("sstbuilder: work dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("sstbuilder: work dir %s: %w (%v)", dir, ErrBusy, err)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
