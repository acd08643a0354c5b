package bulkexport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/clock"
	"github.com/pillarkit/pillar/internal/objstore"
	"github.com/pillarkit/pillar/internal/rocks"
	"github.com/pillarkit/pillar/jobs/pipeline"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/sstbuilder"
)

// ErrNoSupersedes: an export's snapshots would not carry the export-queue
// ends they supersede (the export was not written by pipeline.Export).
var ErrNoSupersedes = sstbuilder.ErrNoSupersedes

// ErrIDUsed: the store recorded this export ID as committed, but its files
// are gone; a new export needs a new ID.
var ErrIDUsed = errors.New("export id already used")

// Options configure Run. Store, Dir, Objects and Control are required.
type Options struct {
	// Store is the Pillar store exported from.
	Store pillar.Store
	// Pipeline configures the export's operations (runner, workers, memory,
	// vector encoding, logger). The default value is the local runner with
	// pipeline's defaults.
	Pipeline pipeline.Options
	// Dir is the local export directory: the partition files, export.json
	// and the build's work directory (Dir/.sst-build). A re-run with the
	// same Dir and ID completes an interrupted run.
	Dir string
	// ID is the export id (batch ids are derived from it). The default value
	// is Dir's base name, lower-cased.
	ID string
	// Source is written to export.json. The default value is
	// "pillar export <store root>".
	Source string
	// Objects receives the batches.
	Objects objstore.Store
	// Control registers the batches: the control plane's client
	// (cobbled/control.Client) satisfies it.
	Control sstbuilder.Registerer
	// Partitions is the deployment's partition count; a store with another
	// count is refused. The default value 0 accepts the store's count.
	Partitions int
	// WaitDelivered is how long a registration refused with
	// control.ErrNotDelivered is retried, counted from the first refusal.
	// The default value 0 returns the refusal at once (it is retryable: run
	// Lorry, then Run again).
	WaitDelivered time.Duration
	// RetryInterval is the first wait between refused registrations; it
	// doubles up to 5 s. The default value is 200 ms.
	RetryInterval time.Duration
	// Clock times the waits. The default value is the wall clock.
	Clock clock.Clock
	// Table, TargetFileSize, MaxValueSize, Parallelism, KeepFiles: see
	// sstbuilder.ExportBuildOptions (same defaults).
	Table          rocks.TableConfig
	TargetFileSize int64
	MaxValueSize   int
	Parallelism    int
	KeepFiles      bool
	// Progress, when set, is called once the export is known with its
	// total row count and returns what counts the rows built (the
	// internal/progress Bar). The default value shows nothing.
	Progress func(rows int64, exportID string) sstbuilder.Progress
	// Logger. The default value discards.
	Logger *slog.Logger
}

// Result is the outcome of Run.
type Result struct {
	// Export is the export's pipeline result; nil when this run found the
	// export already committed by an earlier run (Resumed).
	Export *pipeline.ExportResult
	// Resumed: the export was committed by an earlier run and not redone.
	Resumed bool
	// Build is the build, upload and registration of the batches.
	Build *sstbuilder.ExportBuildResult
}

// testHook, when set (by tests), is called after each step of Run; an
// error stops Run there as a crash would.
var testHook func(step string) error

func hook(step string) error {
	if testHook != nil {
		return testHook(step)
	}
	return nil
}

// Run exports, builds, uploads and registers a bulk export; see the package
// comment for its guarantees.
func Run(ctx context.Context, opts *Options) (*Result, error) {
	if opts == nil {
		return nil, fmt.Errorf("bulkexport: Run needs options")
	}
	o := *opts
	if o.Store == nil || o.Dir == "" || o.Objects == nil || o.Control == nil {
		return nil, fmt.Errorf("bulkexport: Options.Store, Dir, Objects and Control are required")
	}
	o.ensureWaitDefaults()
	if o.Pipeline.Logger == nil {
		o.Pipeline.Logger = o.Logger
	}
	if o.ID == "" {
		o.ID = strings.ToLower(filepath.Base(filepath.Clean(o.Dir)))
	}
	if !sstbuilder.ValidExportID(o.ID) {
		return nil, fmt.Errorf("bulkexport: export id %q: lower-case letters, digits, '.', '_' and '-' only", o.ID)
	}
	parts := o.Store.Info().Partitions
	if o.Partitions != 0 && o.Partitions != parts {
		return nil, fmt.Errorf("bulkexport: the deployment has %d partitions, the store %d: %w", o.Partitions, parts, pillar.ErrPartitions)
	}
	if o.Source == "" {
		o.Source = "pillar export " + o.Store.Info().Root
	}
	res := &Result{}

	committed, err := exported(ctx, o.Store, o.ID)
	if err != nil {
		return nil, err
	}
	meta, err := sstbuilder.ReadExportMeta(o.Dir)
	haveFiles := err == nil
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("bulkexport: %w", err)
	}
	switch {
	case haveFiles && meta.ID != o.ID:
		return nil, fmt.Errorf("bulkexport: %s holds export %q, not %q", o.Dir, meta.ID, o.ID)
	case haveFiles && committed:
		res.Resumed = true
		o.Logger.Info("bulkexport: export already committed by an earlier run; building it", "export", o.ID)
	case committed:
		return nil, fmt.Errorf("bulkexport: export %q was committed to the store, but %s holds no %s: use a new id: %w", o.ID, o.Dir, sstbuilder.ExportMetaName, ErrIDUsed)
	case haveFiles && buildStarted(o.Dir):
		// The build starts only after the commit, so this export was
		// committed once and a newer export has replaced it since.
		return nil, fmt.Errorf("bulkexport: export %q in %s was committed and its build started, but the store's last export is now another one: "+
			"finish it with `pillar sst build --export %s`, or export again under a new id: %w", o.ID, o.Dir, o.Dir, ErrIDUsed)
	default:
		if haveFiles {
			// Written but never committed: the store recorded nothing, so
			// the files are discarded and the export made again.
			o.Logger.Warn("bulkexport: discarding an export that was written but not committed", "export", o.ID, "dir", o.Dir)
			if err := discard(o.Dir, meta); err != nil {
				return nil, err
			}
		}
		if res.Export, err = export(ctx, &o, parts); err != nil {
			return nil, err
		}
	}
	if err := hook("committed"); err != nil {
		return nil, err
	}

	var bar sstbuilder.Progress
	if o.Progress != nil {
		if meta, err = sstbuilder.ReadExportMeta(o.Dir); err != nil {
			return nil, err
		}
		var rows int64
		for _, f := range meta.Files {
			rows += f.Rows
		}
		bar = o.Progress(rows, meta.ID)
	}
	reg := &waiting{r: o.Control, o: &o}
	res.Build, err = sstbuilder.BuildExport(ctx, &sstbuilder.ExportBuildOptions{
		Export: o.Dir, Store: o.Objects, Partitions: parts, Registerer: reg, Table: o.Table, TargetFileSize: o.TargetFileSize,
		MaxValueSize: o.MaxValueSize, Parallelism: o.Parallelism, KeepFiles: o.KeepFiles, Progress: bar, Logger: o.Logger,
		Now: o.Clock.Now,
	})
	if err != nil {
		return nil, fmt.Errorf("bulkexport: export %s: %w", o.ID, err)
	}
	return res, nil
}

// export writes the export into o.Dir and commits it to the store.
func export(ctx context.Context, o *Options, parts int) (*pipeline.ExportResult, error) {
	w, err := sstbuilder.NewExportWriter(o.Dir, parts, batch.KindSnapshot, &sstbuilder.ExportOptions{ID: o.ID, Source: o.Source, Now: o.Clock.Now,
		RowGroupBytes: sstbuilder.ExportRowGroupBytes(o.Pipeline.MemoryLimit, parts), Workers: sstbuilder.ExportWorkers(o.Pipeline.Workers)})
	if err != nil {
		return nil, err
	}
	res, pending, err := pipeline.Export(ctx, o.Store, w, o.Pipeline)
	if err != nil {
		w.Abort()
		return nil, err
	}
	meta, err := w.Close()
	if err == nil && len(meta.QueueEnds) != parts {
		err = fmt.Errorf("bulkexport: export %s: the exporter recorded %d queue ends for %d partitions: %w", o.ID, len(meta.QueueEnds), parts, ErrNoSupersedes)
	}
	if err == nil {
		err = hook("exported")
	}
	if err != nil {
		pending.Abort()
		return nil, err
	}
	if err := pending.Commit(meta.ID, o.Dir); err != nil {
		return nil, err
	}
	o.Logger.Info("bulkexport: exported", "export", meta.ID, "pages", res.Pages, "bytes", res.Bytes, "skipped", res.Skipped)
	return res, nil
}

// exported reports whether the store recorded export id as committed.
func exported(ctx context.Context, st pillar.Store, id string) (bool, error) {
	sn, err := st.Snapshot(ctx)
	if err != nil {
		return false, err
	}
	defer sn.Release()
	var last pipeline.LastExport
	if err := sn.Attr(ctx, pipeline.AttrLastExport, &last); err != nil {
		if errors.Is(err, pillar.ErrNotFound) {
			return false, nil
		}
		return false, fmt.Errorf("bulkexport: read %s: %w", pipeline.AttrLastExport, err)
	}
	return last.ID == id, nil
}

// buildStarted reports whether BuildExport has run on the export in dir.
func buildStarted(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, ".sst-build", "state.json"))
	return err == nil
}

// discard removes an uncommitted export's files (nothing else in dir).
func discard(dir string, meta *sstbuilder.ExportMeta) error {
	for _, f := range meta.Files {
		if err := os.Remove(filepath.Join(dir, f.Name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("bulkexport: discard %s: %w", f.Name, err)
		}
	}
	if err := os.RemoveAll(filepath.Join(dir, ".sst-build")); err != nil {
		return fmt.Errorf("bulkexport: discard: %w", err)
	}
	if err := os.Remove(filepath.Join(dir, sstbuilder.ExportMetaName)); err != nil {
		return fmt.Errorf("bulkexport: discard: %w", err)
	}
	return nil
}

// WaitDelivered wraps r so that a registration the control plane refuses
// with the retryable control.ErrNotDelivered is retried, every
// o.RetryInterval doubling up to 5 s, until o.WaitDelivered has passed since
// the first refusal (on o.Clock), then returned. It reads only those fields
// and o.Logger, with Run's defaults. Run uses it; `pillar sst build
// --wait-delivered` (which builds an export it did not make) too.
func WaitDelivered(r sstbuilder.Registerer, o *Options) sstbuilder.Registerer {
	w := &waiting{r: r, o: &Options{}}
	if o != nil {
		w.o.WaitDelivered, w.o.RetryInterval, w.o.Clock, w.o.Logger = o.WaitDelivered, o.RetryInterval, o.Clock, o.Logger
	}
	w.o.ensureWaitDefaults()
	return w
}

func (o *Options) ensureWaitDefaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.Clock = clock.Or(o.Clock)
	if o.RetryInterval <= 0 {
		o.RetryInterval = 200 * time.Millisecond
	}
}

// waiting retries registrations refused with control.ErrNotDelivered until
// WaitDelivered has passed since the first refusal.
type waiting struct {
	r        sstbuilder.Registerer
	o        *Options
	mu       sync.Mutex
	deadline time.Time // set at the first refusal (shared by the partitions)
}

func (w *waiting) deadlineFrom(now time.Time) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.deadline.IsZero() {
		w.deadline = now.Add(w.o.WaitDelivered)
	}
	return w.deadline
}

func (w *waiting) RegisterBatch(ctx context.Context, m *batch.Manifest) (int64, error) {
	if m.Kind == batch.KindSnapshot && m.Supersedes == 0 {
		// Zero is legitimate only for a partition whose queue never held a
		// record; BuildExport has already checked the export states it.
		w.o.Logger.Debug("bulkexport: snapshot supersedes nothing (its partition's queue is empty)", "batch", m.ID)
	}
	for backoff := w.o.RetryInterval; ; backoff = min(2*backoff, 5*time.Second) {
		seq, err := w.r.RegisterBatch(ctx, m)
		if err == nil || !errors.Is(err, control.ErrNotDelivered) {
			if err == nil {
				err = hook("registered")
			}
			return seq, err
		}
		now := w.o.Clock.Now()
		if !now.Add(backoff).Before(w.deadlineFrom(now)) {
			if w.o.WaitDelivered > 0 {
				return 0, fmt.Errorf("bulkexport: still refused after waiting %s: %w", w.o.WaitDelivered, err)
			}
			return 0, err
		}
		w.o.Logger.Info("bulkexport: waiting for Lorry to deliver the records this snapshot supersedes", "batch", m.ID, "retry_in", backoff)
		if !clock.Sleep(ctx, w.o.Clock, backoff) {
			return 0, ctx.Err()
		}
	}
}
