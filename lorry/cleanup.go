package lorry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/pillarkit/pillar/internal/objstore"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/sstbuilder"
)

// CleanupOptions configure Cleanup. Store and Objects are required.
type CleanupOptions struct {
	Store   pillar.Store
	Objects objstore.Store
	// Partitions to clean. The default value (nil) means all.
	Partitions []int
	// Grace: only objects older than this are removed. The default value is
	// 15m.
	Grace time.Duration
	// DryRun counts what would be removed and removes nothing. The default
	// value is false.
	DryRun bool
	// Now is the clock. The default value is time.Now.
	Now func() time.Time
	// Logger. The default value discards.
	Logger *slog.Logger
}

// CleanupStats count what Cleanup found.
type CleanupStats struct {
	Batches int      // Lorry batch prefixes looked at
	Objects int      // objects under them
	Removed int      // objects removed (or, with DryRun, removable)
	Young   int      // orphans kept because they are younger than Grace
	Keys    []string // removed keys (at most 100)
}

// Cleanup removes the objects of this store's Lorry batches that no
// registered batch names: files of an upload that crashed before its
// manifest was written and that a retry replaced (file names are unique by
// content, so a rebuilt batch has new names), and whole prefixes without a
// manifest that are not the partition's pending batch. Only objects older
// than Grace go, so an upload in progress is never touched.
//
// A batch with a manifest is never removed: its id was recorded as the
// partition's pending batch before its manifest was written, so it is
// registered by whoever holds the partition (the control plane's garbage
// collection removes it once replicas have moved past it). Files uploaded
// ahead for a follow-up batch whose commit then failed have no manifest and
// go like any other orphan.
func Cleanup(ctx context.Context, o CleanupOptions) (CleanupStats, error) {
	var st CleanupStats
	if o.Store == nil || o.Objects == nil {
		return st, fmt.Errorf("lorry: cleanup: Store and Objects are required")
	}
	if o.Grace == 0 {
		o.Grace = 15 * time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	sid, err := storeID(ctx, o.Store)
	if err != nil {
		return st, err
	}
	parts := o.Partitions
	if len(parts) == 0 {
		for p := 0; p < o.Store.Info().Partitions; p++ {
			parts = append(parts, p)
		}
	}
	var errs []error
	for _, p := range parts {
		if err := cleanupPartition(ctx, &o, sid, p, &st); err != nil {
			errs = append(errs, err)
		}
	}
	return st, errors.Join(errs...)
}

func cleanupPartition(ctx context.Context, o *CleanupOptions, sid string, p int, st *CleanupStats) error {
	sn, err := o.Store.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("lorry: cleanup partition %d: %w", p, err)
	}
	ps, err := readPartition(ctx, sn, p)
	sn.Release()
	if err != nil {
		return err
	}
	root := fmt.Sprintf("batches/p%05d/", p)
	mine := "lorry-" + sid + fmt.Sprintf("-p%05d-", p)
	objs, err := o.Objects.List(ctx, root+mine)
	if err != nil {
		return fmt.Errorf("lorry: cleanup partition %d: list %s: %w", p, root+mine, err)
	}
	byID := map[string][]objstore.Info{}
	for _, info := range objs {
		rest := strings.TrimPrefix(info.Key, root)
		id, _, ok := strings.Cut(rest, "/")
		if !ok || !strings.HasPrefix(id, mine) {
			continue
		}
		byID[id] = append(byID[id], info)
	}
	ids := make([]string, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	now := o.Now()
	for _, id := range ids {
		st.Batches++
		st.Objects += len(byID[id])
		if ps.Pending != nil && ps.Pending.ID == id || ps.FreshPending != nil && ps.FreshPending.ID == id {
			continue // being delivered right now
		}
		objs := byID[id]
		hasManifest := false
		for _, info := range objs {
			hasManifest = hasManifest || path.Base(info.Key) == "manifest.json"
		}
		if hasManifest && len(objs) == 2 {
			// The usual complete batch: one SST and its manifest. The
			// manifest names at least one file and was written after all of
			// them, so the other object is the named SST: nothing to read.
			continue
		}
		named := map[string]bool{"manifest.json": true}
		m, err := sstbuilder.ReadManifest(ctx, o.Objects, p, id)
		switch {
		case err == nil:
			for _, f := range m.Files {
				named[f.Name] = true
			}
		case errors.Is(err, objstore.ErrNotFound):
			named = map[string]bool{} // no manifest: nothing here is a batch
		default:
			o.Logger.Warn("lorry: cleanup: unreadable manifest, batch left alone", "partition", p, "batch", id, "err", err)
			continue
		}
		for _, info := range objs {
			if named[path.Base(info.Key)] {
				continue
			}
			if now.Sub(info.ModTime) < o.Grace {
				st.Young++
				continue
			}
			if !o.DryRun {
				if err := o.Objects.Delete(ctx, info.Key); err != nil {
					return fmt.Errorf("lorry: cleanup partition %d: delete %s: %w", p, info.Key, err)
				}
			}
			st.Removed++
			if len(st.Keys) < 100 {
				st.Keys = append(st.Keys, info.Key)
			}
			o.Logger.Info("lorry: cleanup: orphan removed", "key", info.Key, "age", now.Sub(info.ModTime).Round(time.Second), "dry_run", o.DryRun)
		}
	}
	return nil
}

// cleanupLoop cleans the held partitions every CleanupInterval.
func (w *Worker) cleanupLoop(ctx context.Context) {
	t := w.o.Clock.NewTicker(w.o.CleanupInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		held := w.Stats().Held
		if len(held) == 0 {
			continue
		}
		st, err := Cleanup(ctx, CleanupOptions{Store: w.o.Store, Objects: w.o.Objects, Partitions: held,
			Grace: w.o.OrphanGrace, Now: w.o.Now, Logger: w.o.Logger})
		if err != nil && ctx.Err() == nil {
			w.o.Logger.Warn("lorry: cleanup", "err", err)
		}
		if st.Removed > 0 {
			w.o.Logger.Info("lorry: cleanup", "removed", st.Removed, "batches", st.Batches)
		}
	}
}
