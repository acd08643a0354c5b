package sstbuilder

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/compress/uncompressed"
	"github.com/parquet-go/parquet-go/compress/zstd"

	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/pqsnappy"
	"github.com/pillarkit/pillar/pillar"
)

// ExportFormat is the export.json format this code writes and reads.
const ExportFormat = 1

// ExportMetaName is the name of an export's metadata file.
const ExportMetaName = "export.json"

// ExportRow is one row of an export partition file. See the package comment.
type ExportRow struct {
	PageKey string `parquet:"page_key" yson:"page_key"`
	Seq     int64  `parquet:"seq" yson:"seq"`
	Op      string `parquet:"op" yson:"op"`
	Value   []byte `parquet:"value" yson:"value"`
}

// ExportFile describes one partition file of an export.
type ExportFile struct {
	Partition int    `json:"partition"`
	Name      string `json:"name"`
	Rows      int64  `json:"rows"`
	Bytes     int64  `json:"bytes"`
	SHA256    string `json:"sha256"`
}

// ExportMeta is export.json.
type ExportMeta struct {
	Format      int          `json:"format"`
	ID          string       `json:"id"`
	Partitions  int          `json:"partitions"`
	Kind        string       `json:"kind"`
	Source      string       `json:"source"`
	CreatedAtMS int64        `json:"created_at_ms"`
	Files       []ExportFile `json:"files"`
	// QueueEnds[p] is partition p's export-queue end when the export was
	// taken: each partition's snapshot supersedes the queue records before
	// it (batch.Manifest.Supersedes). Empty: unknown (nothing superseded).
	QueueEnds []int64 `json:"queue_ends,omitempty"`
	// Publication is the serving publication the export's records were
	// computed for (pillar.EmbedVersionID of the published pair); every
	// batch built from the export carries it. "": the legacy publication.
	Publication string `json:"publication,omitempty"`
}

// PartitionFileName returns the file name of partition p: "p00007.parquet".
func PartitionFileName(p int) string { return fmt.Sprintf("p%05d.parquet", p) }

// BatchID returns the batch id of partition p of export id.
func BatchID(exportID string, p int) string { return fmt.Sprintf("%s-p%05d", exportID, p) }

// Validate checks the metadata.
func (m *ExportMeta) Validate() error {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("sstbuilder: export %q: "+format, append([]any{m.ID}, a...)...)
	}
	if m.Format != ExportFormat {
		return fail("format %d, this binary reads %d", m.Format, ExportFormat)
	}
	if !ValidExportID(m.ID) {
		return fail("invalid id (lower-case letters, digits, . _ -, at most 120 characters)")
	}
	if m.Partitions <= 0 {
		return fail("partitions %d must be positive", m.Partitions)
	}
	if len(m.QueueEnds) != 0 && len(m.QueueEnds) != m.Partitions {
		return fail("%d queue ends for %d partitions", len(m.QueueEnds), m.Partitions)
	}
	if err := batch.ValidPublication(m.Publication); err != nil {
		return fail("%v", err)
	}
	for p, e := range m.QueueEnds {
		if e < 0 {
			return fail("partition %d: queue end %d is negative", p, e)
		}
	}
	if m.Kind != batch.KindSnapshot && m.Kind != batch.KindDelta {
		return fail("kind %q is neither %q nor %q", m.Kind, batch.KindSnapshot, batch.KindDelta)
	}
	last := -1
	for _, f := range m.Files {
		if f.Partition <= last || f.Partition >= m.Partitions {
			return fail("file %q: partition %d out of order or range", f.Name, f.Partition)
		}
		last = f.Partition
		if f.Name != PartitionFileName(f.Partition) {
			return fail("partition %d: file name %q, want %q", f.Partition, f.Name, PartitionFileName(f.Partition))
		}
		if b, err := hex.DecodeString(f.SHA256); err != nil || len(b) != 32 {
			return fail("file %q: sha256 %q is not 64 hex characters", f.Name, f.SHA256)
		}
		if f.Rows < 0 || f.Bytes <= 0 {
			return fail("file %q: rows %d bytes %d", f.Name, f.Rows, f.Bytes)
		}
	}
	return nil
}

// File returns the file entry of partition p, or false when the partition
// has no rows.
func (m *ExportMeta) File(p int) (ExportFile, bool) {
	i := sort.Search(len(m.Files), func(i int) bool { return m.Files[i].Partition >= p })
	if i < len(m.Files) && m.Files[i].Partition == p {
		return m.Files[i], true
	}
	return ExportFile{}, false
}

// ValidExportID reports whether id may name an export: a valid batch id
// short enough to take the "-p00007" suffix.
func ValidExportID(id string) bool { return len(id) <= 120 && batch.ValidID(id) }

// ReadExportMeta reads and validates <dir>/export.json.
func ReadExportMeta(dir string) (*ExportMeta, error) {
	b, err := os.ReadFile(filepath.Join(dir, ExportMetaName))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("sstbuilder: export %s: no %s (incomplete or not an export): %w", dir, ExportMetaName, err)
		}
		return nil, fmt.Errorf("sstbuilder: export %s: %w", dir, err)
	}
	m, err := decodeExportMeta(b)
	if err != nil {
		return nil, fmt.Errorf("sstbuilder: export %s: %s: %w", dir, ExportMetaName, err)
	}
	return m, nil
}

func decodeExportMeta(b []byte) (*ExportMeta, error) {
	var m ExportMeta
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// WriteExportMeta validates m and writes <dir>/export.json atomically. Write
// it after every partition file is closed.
func WriteExportMeta(dir string, m *ExportMeta) error {
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Partition < m.Files[j].Partition })
	if err := m.Validate(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, ExportMetaName), append(b, '\n'))
}

func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// PartitionWriterOptions configure a PartitionWriter. A nil pointer means
// the defaults.
type PartitionWriterOptions struct {
	// RowGroupRows caps the rows of one Parquet row group. The default value
	// is 256. A row group also ends at maxGroupValueBytes of values.
	RowGroupRows int
	// RowGroupBytes caps the value bytes the writer holds in memory: rows
	// waiting to be encoded and the page being filled. The pages of the open
	// row group wait in a temporary file beside the partition file, not in
	// memory, so row groups need not be small to keep memory small (see
	// PartitionWriter). The default value is 4 MiB.
	RowGroupBytes int
	// Compression of the Parquet pages: "snappy", "zstd" or "none". The
	// default value is "snappy". "none" makes files larger and reading
	// cheaper.
	Compression string
}

func exportCodec(name string) (compress.Codec, error) {
	switch name {
	case "", "snappy":
		return pqsnappy.Default, nil
	case "zstd":
		return &zstd.Codec{Level: zstd.SpeedFastest}, nil
	case "none":
		return &uncompressed.Codec{}, nil
	}
	return nil, fmt.Errorf("sstbuilder: export compression %q: want snappy, zstd or none", name)
}

// PartitionWriter writes one partition file of an export. Rows must come
// sorted by (page_key, seq); every error names the partition and key. It is
// used by one goroutine.
//
// Memory. A Parquet writer keeps the metadata of every row group it has
// written (about 4 KB for the four columns) until Close, for the footer, so
// a file of small row groups costs memory that grows with its rows: the
// export's 16 writers at 512 KiB row groups held about 35 MB of it for a
// 160k-page export of 20 KB pages (about 30 KB records, 18 to a row group).
// So the row groups are cut by rows (RowGroupRows, 256; about 40 per
// partition there, 2 MB of metadata in all) and the pages of the open row
// group wait in a temporary file (a parquet-go file buffer pool, in a
// .tmp-…-pages directory beside the file, removed by Close and Abort): what
// the writer holds in memory is RowGroupBytes (rows waiting to be encoded and
// the page being filled), whatever the row group's size.
type PartitionWriter struct {
	dir        string
	partition  int
	partitions int
	f          *os.File
	h          hash.Hash
	cw         *countWriter
	pw         *parquet.GenericWriter[ExportRow]
	pages      string // temporary directory of the open row group's pages
	buf        []ExportRow
	bufBytes   int
	bufMax     int // bytes of rows buffered before they are encoded
	groupRows  int // rows in the open row group
	groupMax   int // RowGroupRows
	groupBytes int // value bytes in the open row group
	rows       int64
	lastKey    string
	lastSeq    int64
	err        error
}

// maxGroupValueBytes ends a row group with this many value bytes before it
// has RowGroupRows rows (a row group of large records stays a reasonable
// unit to read).
const maxGroupValueBytes = 64 << 20

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// NewPartitionWriter starts writing <dir>/p<partition>.parquet (through a
// temp file renamed into place by Close).
func NewPartitionWriter(dir string, partition, partitions int, opts *PartitionWriterOptions) (*PartitionWriter, error) {
	if partitions <= 0 || partition < 0 || partition >= partitions {
		return nil, fmt.Errorf("sstbuilder: partition %d of %d out of range", partition, partitions)
	}
	var o PartitionWriterOptions
	if opts != nil {
		o = *opts
	}
	if o.RowGroupRows <= 0 {
		o.RowGroupRows = 256
	}
	if o.RowGroupBytes <= 0 {
		o.RowGroupBytes = 4 << 20
	}
	codec, err := exportCodec(o.Compression)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("sstbuilder: export %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".tmp-"+PartitionFileName(partition)+"-*")
	if err != nil {
		return nil, fmt.Errorf("sstbuilder: export %s: %w", dir, err)
	}
	pages, err := os.MkdirTemp(dir, ".tmp-"+PartitionFileName(partition)+"-pages-*")
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("sstbuilder: export %s: %w", dir, err)
	}
	// Half the memory share for the rows waiting to be encoded, half for the
	// page being filled (parquet-go's page buffer, at most its 256 KiB
	// default).
	w := &PartitionWriter{dir: dir, partition: partition, partitions: partitions, f: f, h: sha256.New(), pages: pages,
		bufMax: max(o.RowGroupBytes/2, 1), groupMax: o.RowGroupRows}
	w.cw = &countWriter{w: io.MultiWriter(f, w.h)}
	page := min(max(o.RowGroupBytes/2, 16<<10), parquet.DefaultPageBufferSize)
	// No page bounds for the records: the writer would hold every page's
	// untruncated min/max record until Close, memory growing with the file.
	// No page statistics for them either: each data page's header would
	// carry its smallest and largest record twice over (min/max and the
	// deprecated min/max fields), uncompressed, about a third of the file
	// with ~30 KB records; nothing reads them.
	w.pw = parquet.NewGenericWriter[ExportRow](w.cw, parquet.Compression(codec), parquet.MaxRowsPerRowGroup(int64(o.RowGroupRows)),
		parquet.SkipPageBounds("value"), parquet.SkipPageStatistics("value"), parquet.PageBufferSize(page),
		parquet.ColumnPageBuffers(parquet.NewFileBufferPool(pages, "column-*")))
	return w, nil
}

// Write appends one row. The first error is kept and returned by every later
// call and by Close.
func (w *PartitionWriter) Write(row ExportRow) error {
	if w.err != nil {
		return w.err
	}
	fail := func(format string, a ...any) error {
		w.err = fmt.Errorf("sstbuilder: export partition %d: key %s: "+format, append([]any{w.partition, row.PageKey}, a...)...)
		return w.err
	}
	k, err := pillar.ParseKey(row.PageKey)
	if err != nil || strings.ToLower(row.PageKey) != row.PageKey {
		return fail("not 32 lower-case hex characters: %w", ErrBadKey)
	}
	if p := k.Partition(w.partitions); p != w.partition {
		return fail("belongs to partition %d: %w", p, ErrWrongPartition)
	}
	if w.rows > 0 && (row.PageKey < w.lastKey || (row.PageKey == w.lastKey && row.Seq <= w.lastSeq)) {
		return fail("seq %d after key %s seq %d: %w", row.Seq, w.lastKey, w.lastSeq, ErrOutOfOrder)
	}
	switch row.Op {
	case pillar.OpPut:
	case pillar.OpDelete:
		if len(row.Value) != 0 {
			return fail("delete with a %d-byte value", len(row.Value))
		}
	default:
		return fail("op %q is neither %q nor %q", row.Op, pillar.OpPut, pillar.OpDelete)
	}
	w.lastKey, w.lastSeq = row.PageKey, row.Seq
	w.rows++
	w.buf = append(w.buf, row)
	w.bufBytes += len(row.Value) + len(row.PageKey) + 16
	if len(w.buf) >= 64 || w.bufBytes >= w.bufMax || w.groupRows+len(w.buf) >= w.groupMax || w.groupBytes+w.bufBytes >= maxGroupValueBytes {
		return w.flush()
	}
	return nil
}

func (w *PartitionWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	if _, err := w.pw.Write(w.buf); err != nil {
		w.err = fmt.Errorf("sstbuilder: export partition %d: write parquet: %w", w.partition, err)
		return w.err
	}
	w.groupBytes += w.bufBytes
	w.groupRows += len(w.buf)
	clear(w.buf)
	w.buf, w.bufBytes = w.buf[:0], 0
	if w.groupRows >= w.groupMax || w.groupBytes >= maxGroupValueBytes {
		// End the row group (at RowGroupRows parquet-go has ended it
		// already; Flush then writes nothing).
		if err := w.pw.Flush(); err != nil {
			w.err = fmt.Errorf("sstbuilder: export partition %d: write parquet: %w", w.partition, err)
			return w.err
		}
		w.groupRows, w.groupBytes = 0, 0
	}
	return nil
}

// Rows returns the rows written so far.
func (w *PartitionWriter) Rows() int64 { return w.rows }

// Close finishes the file and returns its entry for export.json. A partition
// without rows still gets a (row-less) file; callers may omit it instead by
// calling Abort.
func (w *PartitionWriter) Close() (ExportFile, error) {
	if w.f == nil {
		return ExportFile{}, fmt.Errorf("sstbuilder: export partition %d: writer already closed", w.partition)
	}
	defer w.Abort()
	if err := w.flush(); err != nil {
		return ExportFile{}, err
	}
	if w.err != nil {
		return ExportFile{}, w.err
	}
	if err := w.pw.Close(); err != nil {
		return ExportFile{}, fmt.Errorf("sstbuilder: export partition %d: close parquet: %w", w.partition, err)
	}
	if err := w.f.Sync(); err != nil {
		return ExportFile{}, fmt.Errorf("sstbuilder: export partition %d: %w", w.partition, err)
	}
	name := PartitionFileName(w.partition)
	if err := os.Rename(w.f.Name(), filepath.Join(w.dir, name)); err != nil {
		return ExportFile{}, fmt.Errorf("sstbuilder: export partition %d: %w", w.partition, err)
	}
	return ExportFile{Partition: w.partition, Name: name, Rows: w.rows, Bytes: w.cw.n, SHA256: hex.EncodeToString(w.h.Sum(nil))}, nil
}

// Abort discards the file. It is safe after Close (then it does nothing).
func (w *PartitionWriter) Abort() {
	if w.f == nil {
		return
	}
	w.pw.Reset(io.Discard) // closes and removes the open row group's page files
	os.RemoveAll(w.pages)
	w.f.Close()
	os.Remove(w.f.Name())
	w.f = nil
	if w.err == nil {
		w.err = fmt.Errorf("sstbuilder: export partition %d: writer closed", w.partition)
	}
}

// ExportOptions configure an ExportWriter. A nil pointer means the defaults.
type ExportOptions struct {
	// ID of the export. The default value is "exp-<UTC yyyymmdd-hhmmss>".
	ID string
	// Source describes where the rows come from. The default value is "".
	Source string
	// RowGroupRows, RowGroupBytes and Compression: see
	// PartitionWriterOptions. Every partition with rows holds up to
	// RowGroupBytes in memory (default 4 MiB), so memory is about
	// partitions × RowGroupBytes, and its row group's pages on disk.
	RowGroupRows, RowGroupBytes int
	Compression                 string
	// Now is the clock. The default value is time.Now.
	Now func() time.Time
	// Workers is how many goroutines encode the partition files: worker i
	// owns the partitions p with p % Workers == i, so each file's rows stay
	// in the order they were written. Rows reach the workers in batches of
	// up to 64 rows or 1 MiB, at most two queued per worker, so Workers
	// adds about 3 MiB each to the partition writers' memory. The default
	// value (0 or 1) encodes on the goroutine that calls Write.
	Workers int
}

// ExportRowGroupBytes is the RowGroupBytes (the memory one partition writer
// holds) that keeps an export's partition writers, which are all open at
// once (rows come in key order, their partitions interleaved), within an
// eighth of memoryLimit: its part per partition, between 128 KiB and the 4
// MiB default. 0 (the default) when memoryLimit is not positive. At
// --memory-limit 64MiB and 16 partitions it is 512 KiB: 8 MiB in all, where
// 4 MiB each could reach 64 MiB with large records, whatever the limit. (It
// once was the size of the row groups too; they are now cut by rows, their
// pages waiting on disk: see PartitionWriter.)
func ExportRowGroupBytes(memoryLimit int64, partitions int) int {
	if memoryLimit <= 0 || partitions <= 0 {
		return 0
	}
	return int(min(max(memoryLimit/8/int64(partitions), 128<<10), 4<<20))
}

// ExportWorkers is ExportOptions.Workers for a pipeline's --workers: n, or
// every CPU when n is 0.
func ExportWorkers(n int) int {
	if n > 0 {
		return n
	}
	return runtime.GOMAXPROCS(0)
}

// ExportWriter writes a whole export from one process, routing rows to their
// partitions. Rows of each partition must come sorted by (page_key, seq);
// partitions may interleave. It is used by one goroutine (its Workers
// encode the files behind it). A row's Value is retained until the row
// is encoded: the caller must not modify it after Write.
type ExportWriter struct {
	dir   string
	meta  ExportMeta
	parts map[int]*PartitionWriter
	opts  ExportOptions
	err   error

	// With Workers > 1: each worker's queue and the batch being filled.
	workers []*exportWorker
	wg      sync.WaitGroup
	failed  atomic.Pointer[error] // a worker's first error
}

// exportWorker encodes the rows of the partitions it owns.
type exportWorker struct {
	ch    chan []routedRow
	batch []routedRow
	bytes int
}

// routedRow is a row and its partition's writer.
type routedRow struct {
	pw  *PartitionWriter
	row ExportRow
}

// exportBatchBytes bounds a batch of rows sent to a worker.
const exportBatchBytes = 1 << 20

// NewExportWriter starts an export in dir (created if missing; it must not
// already hold an export).
func NewExportWriter(dir string, partitions int, kind string, opts *ExportOptions) (*ExportWriter, error) {
	var o ExportOptions
	if opts != nil {
		o = *opts
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ID == "" {
		o.ID = "exp-" + o.Now().UTC().Format("20060102-150405")
	}
	if _, err := exportCodec(o.Compression); err != nil {
		return nil, err
	}
	m := ExportMeta{Format: ExportFormat, ID: o.ID, Partitions: partitions, Kind: kind, Source: o.Source, CreatedAtMS: o.Now().UnixMilli()}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, ExportMetaName)); err == nil {
		return nil, fmt.Errorf("sstbuilder: export %s: already holds an %s", dir, ExportMetaName)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("sstbuilder: export %s: %w", dir, err)
	}
	w := &ExportWriter{dir: dir, meta: m, parts: map[int]*PartitionWriter{}, opts: o}
	if o.Workers > 1 {
		w.startWorkers(o.Workers)
	}
	return w, nil
}

// startWorkers starts n goroutines that encode the partition files.
func (w *ExportWriter) startWorkers(n int) {
	for range n {
		wk := &exportWorker{ch: make(chan []routedRow, 2)}
		w.workers = append(w.workers, wk)
		w.wg.Go(func() {
			for batch := range wk.ch {
				if w.failed.Load() != nil {
					continue // drain: the export has failed
				}
				for _, r := range batch {
					if err := r.pw.Write(r.row); err != nil {
						w.failed.CompareAndSwap(nil, &err)
						break
					}
				}
			}
		})
	}
}

// workerErr is a worker's first error, if any.
func (w *ExportWriter) workerErr() error {
	if e := w.failed.Load(); e != nil {
		return *e
	}
	return nil
}

// stopWorkers sends the batches being filled (unless dropping them), ends
// the workers and waits for them. It is safe to call again.
func (w *ExportWriter) stopWorkers(drop bool) {
	for _, wk := range w.workers {
		if !drop && len(wk.batch) > 0 {
			wk.ch <- wk.batch
		}
		close(wk.ch)
	}
	w.workers = nil
	w.wg.Wait()
}

// ID returns the export id.
func (w *ExportWriter) ID() string { return w.meta.ID }

// SetQueueEnds records, per partition, the export-queue end the export
// supersedes (pipeline.Export calls it); call it before Close.
func (w *ExportWriter) SetQueueEnds(ends []int64) { w.meta.QueueEnds = append([]int64(nil), ends...) }

// SetPublication records the publication the export's records were computed
// for (pipeline.Export calls it); call it before Close.
func (w *ExportWriter) SetPublication(id string) { w.meta.Publication = id }

// WriteRecord writes a row with sequence number 0 (a snapshot export has
// one row per key); it makes an ExportWriter a jobs/pipeline.ExportSink.
func (w *ExportWriter) WriteRecord(pageKey, op string, value []byte) error {
	return w.Write(ExportRow{PageKey: pageKey, Op: op, Value: value})
}

// Write routes a row to its partition's file.
func (w *ExportWriter) Write(row ExportRow) error {
	if w.err != nil {
		return w.err
	}
	k, err := pillar.ParseKey(row.PageKey)
	if err != nil {
		w.err = fmt.Errorf("sstbuilder: export %s: key %q: %w", w.meta.ID, row.PageKey, ErrBadKey)
		return w.err
	}
	p := k.Partition(w.meta.Partitions)
	pw := w.parts[p]
	if pw == nil {
		pw, err = NewPartitionWriter(w.dir, p, w.meta.Partitions, &PartitionWriterOptions{RowGroupRows: w.opts.RowGroupRows, RowGroupBytes: w.opts.RowGroupBytes, Compression: w.opts.Compression})
		if err != nil {
			w.err = err
			return err
		}
		w.parts[p] = pw
	}
	if len(w.workers) == 0 {
		if err := pw.Write(row); err != nil {
			w.err = err
			return err
		}
		return nil
	}
	if err := w.workerErr(); err != nil {
		w.err = err
		return err
	}
	wk := w.workers[p%len(w.workers)]
	wk.batch = append(wk.batch, routedRow{pw: pw, row: row})
	wk.bytes += len(row.Value) + len(row.PageKey)
	if len(wk.batch) >= 64 || wk.bytes >= exportBatchBytes {
		wk.ch <- wk.batch
		wk.batch, wk.bytes = make([]routedRow, 0, 64), 0
	}
	return nil
}

// Close finishes every partition file, then writes export.json.
func (w *ExportWriter) Close() (*ExportMeta, error) {
	w.stopWorkers(w.err != nil)
	if w.err == nil {
		w.err = w.workerErr()
	}
	if w.err != nil {
		w.Abort()
		return nil, w.err
	}
	for p, pw := range w.parts {
		f, err := pw.Close()
		if err != nil {
			w.err = err
			w.Abort()
			return nil, err
		}
		delete(w.parts, p)
		w.meta.Files = append(w.meta.Files, f)
	}
	if err := WriteExportMeta(w.dir, &w.meta); err != nil {
		w.err = err
		return nil, err
	}
	w.err = fmt.Errorf("sstbuilder: export %s: writer closed", w.meta.ID)
	m := w.meta
	return &m, nil
}

// Abort discards every unfinished partition file.
func (w *ExportWriter) Abort() {
	w.stopWorkers(true)
	for p, pw := range w.parts {
		pw.Abort()
		delete(w.parts, p)
	}
}
