package sstbuilder

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"

	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/objstore"
)

// Registerer records an uploaded batch in the control plane and returns its
// sequence number in the partition's log. Registration is idempotent by
// batch id. The control-plane client (cobbled/control.Client) satisfies it.
type Registerer interface {
	RegisterBatch(ctx context.Context, m *batch.Manifest) (int64, error)
}

// NopRegisterer registers nothing: it logs that the batch was uploaded but
// not registered and returns sequence 0.
type NopRegisterer struct{ Logger *slog.Logger }

// RegisterBatch implements Registerer.
func (n NopRegisterer) RegisterBatch(ctx context.Context, m *batch.Manifest) (int64, error) {
	if n.Logger != nil {
		n.Logger.Debug("sstbuilder: no control plane given: batch uploaded, not registered", "batch", m.ID, "partition", m.Partition)
	}
	return 0, nil
}

// Upload stores a built batch: every file under batch.Prefix first, then
// manifest.json, each as a conditional create. It returns the manifest now in
// the store, which is m unless an earlier run already uploaded this batch id
// from the same source (then the stored manifest, whose files exist, wins).
// Different content under the same id is ErrBatchExists. Nothing is
// registered here; register the returned manifest.
//
// A file that already exists is accepted when its size and checksum match (a
// retried upload); file names are unique by content, so no object a manifest
// names is ever replaced.
func Upload(ctx context.Context, store objstore.Store, m *batch.Manifest, files []string) (*batch.Manifest, error) {
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("sstbuilder: upload: %w", err)
	}
	if len(files) != len(m.Files) {
		return nil, fmt.Errorf("sstbuilder: upload batch %s: %d paths for %d manifest files", m.ID, len(files), len(m.Files))
	}
	prefix := batch.Prefix(m.Partition, m.ID)
	mkey := batch.ManifestKey(m.Partition, m.ID)
	// A complete earlier upload: nothing to do.
	if existing, err := readManifest(ctx, store, mkey); err == nil {
		return sameBatch(existing, m)
	} else if !errors.Is(err, objstore.ErrNotFound) {
		return nil, err
	}
	for i, path := range files {
		f := m.Files[i]
		if filepath.Base(path) != f.Name {
			return nil, fmt.Errorf("sstbuilder: upload batch %s: path %s does not match manifest file %s", m.ID, path, f.Name)
		}
		key := prefix + f.Name
		err := objstore.PutFile(ctx, store, key, path, &objstore.PutOptions{IfNotExists: true, SHA256: f.SHA256})
		if errors.Is(err, objstore.ErrExists) {
			err = checkObject(ctx, store, key, f)
		}
		if err != nil {
			return nil, fmt.Errorf("sstbuilder: upload batch %s: %w", m.ID, err)
		}
	}
	raw, err := m.Encode()
	if err != nil {
		return nil, err
	}
	err = store.Put(ctx, mkey, bytesReader(raw), int64(len(raw)), &objstore.PutOptions{IfNotExists: true})
	if errors.Is(err, objstore.ErrExists) { // another run won the race
		existing, rerr := readManifest(ctx, store, mkey)
		if rerr != nil {
			return nil, rerr
		}
		return sameBatch(existing, m)
	}
	if err != nil {
		return nil, fmt.Errorf("sstbuilder: upload batch %s: manifest: %w", m.ID, err)
	}
	return m, nil
}

// sameBatch accepts an already stored manifest of the same batch from the
// same source.
func sameBatch(existing, m *batch.Manifest) (*batch.Manifest, error) {
	if existing.ID != m.ID || existing.Partition != m.Partition || existing.Partitions != m.Partitions ||
		existing.Kind != m.Kind || existing.Source != m.Source {
		return nil, fmt.Errorf("sstbuilder: batch %s (partition %d): stored from source %q, this one from %q: %w",
			m.ID, m.Partition, existing.Source, m.Source, ErrBatchExists)
	}
	return existing, nil
}

func readManifest(ctx context.Context, store objstore.Store, key string) (*batch.Manifest, error) {
	raw, err := objstore.ReadAll(ctx, store, key)
	if err != nil {
		return nil, err
	}
	m, err := batch.Decode(raw)
	if err != nil {
		return nil, fmt.Errorf("sstbuilder: %s: %w", key, err)
	}
	return m, nil
}

// checkObject accepts an existing object equal to the file (same size and
// SHA-256): the same bytes uploaded by an earlier try.
func checkObject(ctx context.Context, store objstore.Store, key string, f batch.File) error {
	info, err := store.Stat(ctx, key)
	if err != nil {
		return err
	}
	if info.Size != f.Size {
		return fmt.Errorf("%s exists with %d bytes, want %d: %w", key, info.Size, f.Size, ErrBatchExists)
	}
	r, err := store.Get(ctx, key)
	if err != nil {
		return err
	}
	defer r.Close()
	sum, _, err := readerSHA256(r)
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	if sum != f.SHA256 {
		return fmt.Errorf("%s exists with sha256 %s, want %s: %w", key, sum, f.SHA256, ErrBatchExists)
	}
	return nil
}

// ReadManifest reads and validates a batch's manifest from the store.
func ReadManifest(ctx context.Context, store objstore.Store, partition int, id string) (*batch.Manifest, error) {
	return readManifest(ctx, store, batch.ManifestKey(partition, id))
}

// ListBatches returns the manifests of the complete batches in the store
// (those with a manifest.json), of one partition or of all (partition < 0),
// sorted by partition, then creation time, then id. Objects of incomplete
// uploads (no manifest) are not listed.
func ListBatches(ctx context.Context, store objstore.Store, partition int) ([]*batch.Manifest, error) {
	prefix := "batches/"
	if partition >= 0 {
		prefix = fmt.Sprintf("batches/p%05d/", partition)
	}
	infos, err := store.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("sstbuilder: list batches: %w", err)
	}
	var out []*batch.Manifest
	for _, in := range infos {
		if !strings.HasSuffix(in.Key, "/manifest.json") {
			continue
		}
		m, err := readManifest(ctx, store, in.Key)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Partition != b.Partition {
			return a.Partition < b.Partition
		}
		if a.CreatedAtMS != b.CreatedAtMS {
			return a.CreatedAtMS < b.CreatedAtMS
		}
		return a.ID < b.ID
	})
	return out, nil
}
