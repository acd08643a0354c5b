package sstbuilder

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/linxGnu/grocksdb"

	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/rocks"
	"github.com/pillarkit/pillar/pillar"
)

// Sentinel errors; errors about these conditions wrap them.
var (
	// ErrOutOfOrder: a row's (key, seq) is not after the previous row's.
	ErrOutOfOrder = errors.New("out of order")
	// ErrWrongPartition: a row's key belongs to another partition.
	ErrWrongPartition = errors.New("key in wrong partition")
	// ErrBadKey: a key is not a 16-byte page key.
	ErrBadKey = errors.New("bad page key")
	// ErrValueTooLarge: a value exceeds BuildOptions.MaxValueSize.
	ErrValueTooLarge = errors.New("value too large")
	// ErrEmpty: a delta without rows; there is nothing to publish.
	ErrEmpty = errors.New("empty delta")
	// ErrPartitions: an export's partition count differs from the requested one.
	ErrPartitions = errors.New("partition count mismatch")
	// ErrCorruptExport: an export file does not match export.json.
	ErrCorruptExport = errors.New("corrupt export")
	// ErrBatchExists: the batch id is taken by a batch of different content.
	ErrBatchExists = errors.New("batch id exists with different content")
	// ErrNoSupersedes: a snapshot export does not state the export-queue end
	// per partition that its snapshots supersede (export.json queue_ends),
	// so its snapshots would escape the control plane's ordering check.
	ErrNoSupersedes = errors.New("snapshot export without queue ends")
)

// Row is one input row of a partition: a put (Value) or a delete of a page key.
type Row struct {
	Key    []byte // 16-byte page key
	Seq    int64  // version order among rows of the same key; the highest wins
	Delete bool
	Value  []byte // the prepared page record; empty for a delete
}

// Rows iterates rows sorted by (Key, Seq).
type Rows interface {
	Next() bool
	// Row returns the current row, valid until the next call to Next.
	Row() Row
	Err() error
}

// SliceRows returns Rows over an in-memory slice.
func SliceRows(rows []Row) Rows { return &sliceRows{rows: rows, i: -1} }

type sliceRows struct {
	rows []Row
	i    int
}

func (s *sliceRows) Next() bool { s.i++; return s.i < len(s.rows) }
func (s *sliceRows) Row() Row   { return s.rows[s.i] }
func (s *sliceRows) Err() error { return nil }

// stable marks Rows whose rows stay valid after Next (a slice): the builder
// then holds a row back without copying it.
func (s *sliceRows) stable() {}

// BuildOptions configure a Builder. Partition, Partitions, BatchID and Dir are
// required.
type BuildOptions struct {
	// Dir receives the SST files; it is created if missing.
	Dir string
	// Partition and Partitions: every key must belong to Partition.
	Partition, Partitions int
	// Kind is batch.KindSnapshot or batch.KindDelta. The default value is
	// batch.KindSnapshot.
	Kind string
	// BatchID names the batch (batch.ValidID).
	BatchID string
	// Source is recorded in the manifest (free text for people). The
	// default value is "".
	Source string
	// QueueFirst and QueueEnd, for a delta delivered from the export queue,
	// are the half-open range of the partition's queue offsets it carries
	// (batch.Manifest.QueueFirst/QueueEnd). The default values are 0 (not
	// from the queue).
	QueueFirst, QueueEnd int64
	// Supersedes, for a snapshot of a bulk export, is the partition's
	// export-queue end when the export was taken
	// (batch.Manifest.Supersedes); the control plane registers the snapshot
	// only after the deltas before it. The default value is 0.
	Supersedes int64
	// Publication is the serving publication the batch belongs to
	// (batch.Manifest.Publication). The default value "" is the legacy
	// unnamed publication.
	Publication string
	// Table is the SST layout; it must match the serving nodes'. The default
	// value is rocks.TableConfig{} (its documented defaults).
	Table rocks.TableConfig
	// TargetFileSize: a new file is started once the current one reaches it.
	// The default value is 256 MiB.
	TargetFileSize int64
	// MaxValueSize: a larger value is an error naming its key. The default
	// value is 16 MiB.
	MaxValueSize int
	// Now is the clock for the manifest's creation time. The default value is
	// time.Now.
	Now func() time.Time
	// Logger. The default value discards.
	Logger *slog.Logger
}

func (o *BuildOptions) ensureDefaults() {
	if o.Kind == "" {
		o.Kind = batch.KindSnapshot
	}
	if o.TargetFileSize == 0 {
		o.TargetFileSize = 256 << 20
	}
	if o.MaxValueSize == 0 {
		o.MaxValueSize = 16 << 20
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate checks the options.
func (o BuildOptions) Validate() error {
	o.ensureDefaults()
	if o.Dir == "" {
		return fmt.Errorf("sstbuilder: BuildOptions.Dir is empty")
	}
	if o.Partitions <= 0 || o.Partition < 0 || o.Partition >= o.Partitions {
		return fmt.Errorf("sstbuilder: partition %d of %d out of range", o.Partition, o.Partitions)
	}
	if o.Kind != batch.KindSnapshot && o.Kind != batch.KindDelta {
		return fmt.Errorf("sstbuilder: kind %q is neither %q nor %q", o.Kind, batch.KindSnapshot, batch.KindDelta)
	}
	if !batch.ValidID(o.BatchID) {
		return fmt.Errorf("sstbuilder: batch id %q is not valid (lower-case letters, digits, . _ -)", o.BatchID)
	}
	if o.TargetFileSize < 1<<20 {
		return fmt.Errorf("sstbuilder: TargetFileSize %d below 1 MiB", o.TargetFileSize)
	}
	if o.MaxValueSize < 1 {
		return fmt.Errorf("sstbuilder: MaxValueSize %d must be positive", o.MaxValueSize)
	}
	return o.Table.Validate()
}

// BuildStats count what a Builder did.
type BuildStats struct {
	RowsIn         int64 // rows given to Add
	Superseded     int64 // older versions of a repeated key, dropped
	DeletesDropped int64 // deletes in a snapshot, dropped
	Puts, Deletes  int64 // entries written
	ValueBytes     int64 // key + value bytes written
	Files          int
	FileBytes      int64
	Elapsed        time.Duration
}

// Builder writes one partition's rows into the SST files of one batch. Feed
// it rows sorted by (Key, Seq) with Add, then call Finish (or Abort). It keeps
// its first error: every later call returns it. A Builder is used by one
// goroutine.
type Builder struct {
	o        BuildOptions
	envOpts  *grocksdb.EnvOptions
	dbOpts   *grocksdb.Options
	w        *grocksdb.SSTFileWriter
	hasher   *tailHasher // hashes the current file as it is written
	tmpPath  string
	fileKeys int64

	files []batch.File
	paths []string

	// The pending row: held back until the next key shows it is the newest
	// version of its key.
	pending    Row
	pendKey    []byte
	pendVal    []byte
	hasPending bool
	noCopy     bool // rows stay valid after the next Add (SliceRows)
	lastKey    []byte
	lastSeq    int64
	hasLast    bool

	smallest, largest []byte
	stats             BuildStats
	start             time.Time
	err               error
	done              bool
}

// NewBuilder validates the options and prepares a builder.
func NewBuilder(opts *BuildOptions) (*Builder, error) {
	var o BuildOptions
	if opts != nil {
		o = *opts
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o.ensureDefaults()
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("sstbuilder: partition %d: %w", o.Partition, err)
	}
	dbOpts, err := o.Table.Options(nil)
	if err != nil {
		return nil, err
	}
	return &Builder{o: o, envOpts: grocksdb.NewDefaultEnvOptions(), dbOpts: dbOpts, start: time.Now()}, nil
}

func (b *Builder) fail(key []byte, format string, a ...any) error {
	if key != nil {
		b.err = fmt.Errorf("sstbuilder: partition %d: key %x: "+format, append([]any{b.o.Partition, key}, a...)...)
	} else {
		b.err = fmt.Errorf("sstbuilder: partition %d: "+format, append([]any{b.o.Partition}, a...)...)
	}
	return b.err
}

// Add adds one row. Rows must come sorted by (Key, Seq); of several rows with
// one key only the last (highest Seq) is written.
func (b *Builder) Add(r Row) error {
	if b.err != nil {
		return b.err
	}
	b.stats.RowsIn++
	if len(r.Key) != pillar.KeySize {
		return b.fail(r.Key, "%d bytes, want %d: %w", len(r.Key), pillar.KeySize, ErrBadKey)
	}
	if p := pillar.Partition(r.Key, b.o.Partitions); p != b.o.Partition {
		return b.fail(r.Key, "belongs to partition %d of %d: %w", p, b.o.Partitions, ErrWrongPartition)
	}
	if !r.Delete && len(r.Value) > b.o.MaxValueSize {
		return b.fail(r.Key, "value of %d bytes over the %d-byte limit: %w", len(r.Value), b.o.MaxValueSize, ErrValueTooLarge)
	}
	if r.Delete && len(r.Value) != 0 {
		return b.fail(r.Key, "delete with a %d-byte value", len(r.Value))
	}
	if b.hasLast {
		c := bytes.Compare(r.Key, b.lastKey)
		if c < 0 || (c == 0 && r.Seq <= b.lastSeq) {
			return b.fail(r.Key, "seq %d after key %x seq %d: %w", r.Seq, b.lastKey, b.lastSeq, ErrOutOfOrder)
		}
		if c == 0 {
			b.stats.Superseded++
		} else if err := b.emitPending(); err != nil {
			return err
		}
	}
	b.lastKey = append(b.lastKey[:0], r.Key...)
	b.lastSeq, b.hasLast = r.Seq, true
	if b.noCopy {
		b.pending = r
	} else { // copy: the caller may reuse its buffers
		b.pendKey = append(b.pendKey[:0], r.Key...)
		b.pendVal = append(b.pendVal[:0], r.Value...)
		b.pending = Row{Key: b.pendKey, Seq: r.Seq, Delete: r.Delete, Value: b.pendVal}
	}
	b.hasPending = true
	return nil
}

func (b *Builder) emitPending() error {
	if !b.hasPending {
		return nil
	}
	b.hasPending = false
	r := b.pending
	if r.Delete && b.o.Kind == batch.KindSnapshot {
		b.stats.DeletesDropped++
		return nil
	}
	if b.w == nil {
		if err := b.openFile(); err != nil {
			return err
		}
	}
	var err error
	if r.Delete {
		err = b.w.Delete(r.Key)
		b.stats.Deletes++
	} else {
		err = b.w.Put(r.Key, r.Value)
		b.stats.Puts++
	}
	if err != nil {
		return b.fail(r.Key, "sst write: %w", err)
	}
	b.fileKeys++
	b.stats.ValueBytes += int64(len(r.Key) + len(r.Value))
	if b.smallest == nil {
		b.smallest = append([]byte(nil), r.Key...)
	}
	b.largest = append(b.largest[:0], r.Key...)
	if int64(b.w.FileSize()) >= b.o.TargetFileSize {
		return b.finishFile()
	}
	return nil
}

func (b *Builder) openFile() error {
	n := len(b.files) + 1
	b.tmpPath = filepath.Join(b.o.Dir, fmt.Sprintf(".tmp-%06d.sst", n))
	w := grocksdb.NewSSTFileWriter(b.envOpts, b.dbOpts)
	if err := w.Open(b.tmpPath); err != nil {
		w.Destroy()
		return b.fail(nil, "open sst %s: %w", b.tmpPath, err)
	}
	b.w = w
	b.fileKeys = 0
	h, err := startTailHasher(b.tmpPath)
	if err != nil {
		return b.fail(nil, "%w", err)
	}
	b.hasher = h
	if n == 1 {
		if err := w.Put(batch.MetaKey, []byte(b.o.BatchID)); err != nil {
			return b.fail(nil, "write meta key: %w", err)
		}
	}
	return nil
}

// finishFile closes the current SST, hashes it and gives it its final,
// content-unique name.
func (b *Builder) finishFile() error {
	w, h := b.w, b.hasher
	b.w, b.hasher = nil, nil
	err := w.Finish()
	w.Destroy()
	if err != nil {
		h.abort()
		return b.fail(nil, "finish sst %s: %w", b.tmpPath, err)
	}
	sum, size, err := h.finish()
	if err != nil {
		return b.fail(nil, "%s: %w", b.tmpPath, err)
	}
	if st, err := os.Stat(b.tmpPath); err != nil {
		return b.fail(nil, "%w", err)
	} else if st.Size() != size {
		return b.fail(nil, "%s: hashed %d bytes, the file has %d", b.tmpPath, size, st.Size())
	}
	name := fmt.Sprintf("%06d-%s.sst", len(b.files)+1, sum[:12])
	path := filepath.Join(b.o.Dir, name)
	if err := os.Rename(b.tmpPath, path); err != nil {
		return b.fail(nil, "%w", err)
	}
	b.tmpPath = ""
	b.files = append(b.files, batch.File{Name: name, Size: size, SHA256: sum, Keys: b.fileKeys})
	b.paths = append(b.paths, path)
	b.stats.Files++
	b.stats.FileBytes += size
	b.o.Logger.Debug("sstbuilder: file done", "partition", b.o.Partition, "batch", b.o.BatchID, "file", name, "bytes", size, "keys", b.fileKeys)
	return nil
}

func fileSHA256(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(h, f, make([]byte, tailChunk))
	if err != nil {
		return "", 0, fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// Finish writes the last row, closes the last file and returns the batch's
// manifest and file paths. An empty delta returns ErrEmpty (and no files); an
// empty snapshot is one file holding only the meta key.
func (b *Builder) Finish() (*batch.Manifest, []string, error) {
	if b.done { // finished or aborted: leave its files alone
		return nil, nil, fmt.Errorf("sstbuilder: partition %d: Finish after Finish or Abort", b.o.Partition)
	}
	defer b.release()
	if b.err != nil {
		b.cleanup()
		return nil, nil, b.err
	}
	if err := b.emitPending(); err != nil {
		b.cleanup()
		return nil, nil, err
	}
	if b.w == nil && len(b.files) == 0 {
		if b.o.Kind == batch.KindDelta {
			b.err = fmt.Errorf("sstbuilder: partition %d: batch %s: %w", b.o.Partition, b.o.BatchID, ErrEmpty)
			return nil, nil, b.err
		}
		if err := b.openFile(); err != nil { // snapshot of nothing: the meta key alone
			b.cleanup()
			return nil, nil, err
		}
	}
	if b.w != nil {
		if err := b.finishFile(); err != nil {
			b.cleanup()
			return nil, nil, err
		}
	}
	m := &batch.Manifest{
		Format: batch.FormatVersion, ID: b.o.BatchID, Partition: b.o.Partition, Partitions: b.o.Partitions,
		Kind: b.o.Kind, Files: b.files, Keys: b.stats.Puts + b.stats.Deletes, Deletes: b.stats.Deletes,
		Source: b.o.Source, CreatedAtMS: b.o.Now().UnixMilli(),
		QueueFirst: b.o.QueueFirst, QueueEnd: b.o.QueueEnd, Supersedes: b.o.Supersedes,
		Publication: b.o.Publication,
	}
	if b.smallest != nil {
		m.Smallest, m.Largest = hex.EncodeToString(b.smallest), hex.EncodeToString(b.largest)
	}
	if err := m.Validate(); err != nil {
		b.cleanup()
		b.err = fmt.Errorf("sstbuilder: partition %d: %w", b.o.Partition, err)
		return nil, nil, b.err
	}
	b.stats.Elapsed = time.Since(b.start)
	b.err = fmt.Errorf("sstbuilder: partition %d: builder finished", b.o.Partition)
	return m, b.paths, nil
}

// Abort discards every file written. It is safe to call after Finish, which
// it then leaves alone.
func (b *Builder) Abort() {
	if b.done {
		return
	}
	if b.err == nil {
		b.err = fmt.Errorf("sstbuilder: partition %d: builder aborted", b.o.Partition)
	}
	b.cleanup()
	b.release()
}

func (b *Builder) cleanup() {
	if b.w != nil {
		b.w.Destroy()
		b.w = nil
	}
	b.hasher.abort()
	b.hasher = nil
	if b.tmpPath != "" {
		os.Remove(b.tmpPath)
		b.tmpPath = ""
	}
	for _, p := range b.paths {
		os.Remove(p)
	}
	b.paths, b.files = nil, nil
}

// release frees the RocksDB handles, once.
func (b *Builder) release() {
	if b.done {
		return
	}
	b.done = true
	if b.w != nil {
		b.w.Destroy()
		b.w = nil
	}
	b.hasher.abort()
	b.hasher = nil
	b.envOpts.Destroy()
	b.dbOpts.Destroy()
}

// Stats returns what the builder did so far.
func (b *Builder) Stats() BuildStats { return b.stats }

// BuildPartition builds one batch from rows sorted by (Key, Seq): see Builder.
func BuildPartition(ctx context.Context, rows Rows, opts *BuildOptions) (*batch.Manifest, []string, error) {
	m, paths, _, err := buildPartition(ctx, rows, opts)
	return m, paths, err
}

func buildPartition(ctx context.Context, rows Rows, opts *BuildOptions) (*batch.Manifest, []string, BuildStats, error) {
	b, err := NewBuilder(opts)
	if err != nil {
		return nil, nil, BuildStats{}, err
	}
	_, b.noCopy = rows.(interface{ stable() })
	n := 0
	for rows.Next() {
		if err := b.Add(rows.Row()); err != nil {
			b.Abort()
			return nil, nil, b.Stats(), err
		}
		if n++; n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				b.Abort()
				return nil, nil, b.Stats(), fmt.Errorf("sstbuilder: partition %d: %w", opts.Partition, err)
			}
		}
	}
	if err := rows.Err(); err != nil {
		b.Abort()
		return nil, nil, b.Stats(), err
	}
	m, paths, err := b.Finish()
	return m, paths, b.Stats(), err
}

func readerSHA256(r io.Reader) (string, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return "", n, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
