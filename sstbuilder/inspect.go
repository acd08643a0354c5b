package sstbuilder

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/linxGnu/grocksdb"

	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/objstore"
	"github.com/pillarkit/pillar/internal/record"
	"github.com/pillarkit/pillar/internal/rocks"
	"github.com/pillarkit/pillar/internal/sstverify"
)

// ErrCorruptBatch: a stored batch does not match its manifest.
var ErrCorruptBatch = errors.New("corrupt batch")

// InspectOptions configure InspectBatch. A nil pointer means the defaults.
type InspectOptions struct {
	// Samples is the number of keys decoded and shown, spread evenly over the
	// batch. The default value is 5.
	Samples int
	// Table is the layout used to open the files. The default value is
	// rocks.TableConfig{}.
	Table rocks.TableConfig
	// WorkDir holds the downloaded files while inspecting. The default value
	// is a new temporary directory, removed afterwards.
	WorkDir string
}

// Sample is one decoded entry of a batch.
type Sample struct {
	Key      string `json:"key"`
	Bytes    int    `json:"bytes"`
	URL      string `json:"url,omitempty"`
	Title    string `json:"title,omitempty"`
	Chunker  string `json:"chunker,omitempty"`
	Model    string `json:"model,omitempty"`
	Chunks   int    `json:"chunks"`
	Dims     int    `json:"dims,omitempty"`
	Encoding string `json:"encoding,omitempty"`
	Error    string `json:"error,omitempty"`
}

// Inspection is what InspectBatch found.
type Inspection struct {
	Manifest *batch.Manifest `json:"manifest"`
	// MetaValue is the value of batch.MetaKey (the batch id).
	MetaValue string `json:"meta_value"`
	// LiveKeys is the number of page keys visible once the batch is ingested
	// into an empty database (puts; deletes leave nothing).
	LiveKeys int64 `json:"live_keys"`
	// FirstKey and LastKey are the smallest and largest live page keys (hex).
	FirstKey string   `json:"first_key"`
	LastKey  string   `json:"last_key"`
	Samples  []Sample `json:"samples"`
}

var batchURLRE = regexp.MustCompile(`^(.*?)/?batches/p(\d{5})/([^/]+)/?(manifest\.json)?$`)

// ParseBatchURL splits "<objstore-url>/batches/p00007/<batch-id>" into the
// store URL, the partition and the batch id.
func ParseBatchURL(u string) (storeURL string, partition int, id string, err error) {
	m := batchURLRE.FindStringSubmatch(u)
	if m == nil {
		return "", 0, "", fmt.Errorf("sstbuilder: %q is not <objstore-url>/batches/p<5 digits>/<batch-id>", u)
	}
	p, _ := strconv.Atoi(m[2])
	if !batch.ValidID(m[3]) {
		return "", 0, "", fmt.Errorf("sstbuilder: %q: invalid batch id %q", u, m[3])
	}
	storeURL = m[1]
	if storeURL == "" || strings.HasSuffix(storeURL, ":/") || strings.HasSuffix(storeURL, "://") {
		storeURL += "/" // "file:///batches/..." or a relative path at "."
		if storeURL == "/" {
			storeURL = "."
		}
	}
	return storeURL, p, m[3], nil
}

// InspectBatch downloads a batch, verifies every file against the manifest
// (size, SHA-256), ingests the files into an empty RocksDB and checks the
// meta key, the live key count and the key range, and decodes sample values.
// A mismatch is an error wrapping ErrCorruptBatch.
func InspectBatch(ctx context.Context, store objstore.Store, partition int, id string, opts *InspectOptions) (*Inspection, error) {
	var o InspectOptions
	if opts != nil {
		o = *opts
	}
	if o.Samples == 0 {
		o.Samples = 5
	}
	m, err := ReadManifest(ctx, store, partition, id)
	if err != nil {
		return nil, err
	}
	if m.Partition != partition || m.ID != id {
		return nil, fmt.Errorf("sstbuilder: batch %s: manifest names partition %d batch %s: %w", id, m.Partition, m.ID, ErrCorruptBatch)
	}
	dir := o.WorkDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "pillar-inspect-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
	}
	fail := func(format string, a ...any) error {
		return fmt.Errorf("sstbuilder: batch %s (partition %d): "+format, append([]any{id, partition}, a...)...)
	}
	var paths []string
	for _, f := range m.Files {
		path := filepath.Join(dir, f.Name)
		if err := objstore.GetFile(ctx, store, batch.Prefix(partition, id)+f.Name, path); err != nil {
			return nil, fail("%w", err)
		}
		sum, size, err := fileSHA256(path)
		if err != nil {
			return nil, fail("%w", err)
		}
		if size != f.Size || sum != f.SHA256 {
			return nil, fail("file %s: %d bytes sha256 %s, manifest says %d bytes %s: %w", f.Name, size, sum, f.Size, f.SHA256, ErrCorruptBatch)
		}
		// The check a serving node makes before ingest: every block.
		if _, err := sstverify.Verify(path); err != nil {
			if errors.Is(err, sstverify.ErrCorrupt) {
				return nil, fail("file %s matches its manifest but %v: %w", f.Name, err, ErrCorruptBatch)
			}
			return nil, fail("file %s: %w", f.Name, err)
		}
		paths = append(paths, path)
	}
	in := &Inspection{Manifest: m}
	if err := scanBatch(filepath.Join(dir, "db"), paths, m, o, in); err != nil {
		return nil, fail("%w", err)
	}
	return in, nil
}

func scanBatch(dbDir string, paths []string, m *batch.Manifest, o InspectOptions, in *Inspection) error {
	dbOpts, err := o.Table.Options(nil)
	if err != nil {
		return err
	}
	defer dbOpts.Destroy()
	dbOpts.SetCreateIfMissing(true)
	db, err := grocksdb.OpenDb(dbOpts, dbDir)
	if err != nil {
		return fmt.Errorf("open scratch db: %w", err)
	}
	defer db.Close()
	ingest := grocksdb.NewDefaultIngestExternalFileOptions()
	ingest.SetMoveFiles(true)
	err = db.IngestExternalFile(paths, ingest)
	ingest.Destroy()
	if err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	it := db.NewIterator(ro)
	defer it.Close()
	want := m.Keys - m.Deletes
	pick := func(i int) int64 { // evenly spread sample positions, first and last included
		if o.Samples <= 1 || want <= 1 {
			return 0
		}
		return int64(i) * (want - 1) / int64(o.Samples-1)
	}
	// Key and value slices point into the iterator (no copy, nothing to free).
	for it.SeekToFirst(); it.Valid(); it.Next() {
		k := it.Key().Data()
		if string(k) == string(batch.MetaKey) {
			in.MetaValue = string(it.Value().Data())
			continue
		}
		hk := hex.EncodeToString(k)
		if in.LiveKeys == 0 {
			in.FirstKey = hk
		}
		in.LastKey = hk
		if len(in.Samples) < o.Samples && in.LiveKeys == pick(len(in.Samples)) {
			in.Samples = append(in.Samples, sampleOf(hk, it.Value().Data()))
		}
		in.LiveKeys++
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("iterate: %w", err)
	}
	if in.MetaValue != m.ID {
		return fmt.Errorf("meta key holds %q, want the batch id: %w", in.MetaValue, ErrCorruptBatch)
	}
	if in.LiveKeys != want {
		return fmt.Errorf("%d live keys, manifest says %d keys - %d deletes: %w", in.LiveKeys, m.Keys, m.Deletes, ErrCorruptBatch)
	}
	if m.Deletes == 0 && (in.FirstKey != m.Smallest || in.LastKey != m.Largest) {
		return fmt.Errorf("key range %s..%s, manifest says %s..%s: %w", in.FirstKey, in.LastKey, m.Smallest, m.Largest, ErrCorruptBatch)
	}
	return nil
}

func sampleOf(key string, v []byte) Sample {
	s := Sample{Key: key, Bytes: len(v)}
	p, err := record.Unmarshal(v)
	if err != nil {
		s.Error = err.Error()
		return s
	}
	s.URL, s.Title, s.Chunker, s.Model, s.Chunks = p.GetUrl(), p.GetTitle(), p.GetChunkerVersion(), p.GetModelVersion(), len(p.GetChunks())
	if len(p.GetChunks()) > 0 {
		c := p.GetChunks()[0]
		s.Dims, s.Encoding = int(c.GetDims()), c.GetEncoding().Short()
	}
	return s
}

// WriteText writes the inspection for a person.
func (in *Inspection) WriteText(w io.Writer) {
	m := in.Manifest
	fmt.Fprintf(w, "batch      %s\npartition  %d of %d\nkind       %s\nsource     %s\n", m.ID, m.Partition, m.Partitions, m.Kind, m.Source)
	fmt.Fprintf(w, "keys       %d (%d deletes), %d live after ingest; meta key = %q\n", m.Keys, m.Deletes, in.LiveKeys, in.MetaValue)
	fmt.Fprintf(w, "key range  %s .. %s\n", orDash(m.Smallest), orDash(m.Largest))
	var total int64
	for _, f := range m.Files {
		total += f.Size
	}
	fmt.Fprintf(w, "files      %d, %d bytes (all checksums verified)\n", len(m.Files), total)
	for _, f := range m.Files {
		fmt.Fprintf(w, "  %s  %10d bytes  %8d keys  sha256 %s\n", f.Name, f.Size, f.Keys, f.SHA256)
	}
	if len(in.Samples) > 0 {
		fmt.Fprintf(w, "samples\n")
	}
	for _, s := range in.Samples {
		if s.Error != "" {
			fmt.Fprintf(w, "  %s  %d bytes  not a record: %s\n", s.Key, s.Bytes, s.Error)
			continue
		}
		fmt.Fprintf(w, "  %s  %d bytes  %s  %q  chunker=%s model=%s chunks=%d dims=%d %s\n",
			s.Key, s.Bytes, s.URL, s.Title, s.Chunker, s.Model, s.Chunks, s.Dims, s.Encoding)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
