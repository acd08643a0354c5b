package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"

	"github.com/pillarkit/pillar/internal/pqsnappy"
	"github.com/pillarkit/pillar/internal/pqzstd"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/internal/writeset"
)

// stagedPart is what one writer of a table staged: its Parquet files in
// the staging directory, in row order (a writer starts a new file once one
// holds maxFileChunks column chunks; see rowWriter).
type stagedPart struct {
	files []stagedFile
}

// stagedFiles lists the files of a table's parts in table order.
func stagedFiles(parts []*writeset.Part[stagedPart]) []stagedFile {
	var out []stagedFile
	for _, p := range parts {
		out = append(out, p.Staged.files...)
	}
	return out
}

// stagedFile is one Parquet file of a writer in the staging directory.
type stagedFile struct {
	name  string // base name in the staging dir
	rows  int64
	bytes int64
	crc   string // CRC32C of the file (checksum.go)
	// blocksCRC is the CRC32C of the block-sums sidecar written beside it
	// (blocksName), "" for a file without one (queue segments).
	blocksCRC string
}

// blocksName is the name of a table file's block-sums sidecar.
func blocksName(name string) string { return name + ".blocks" }

type tx struct {
	*snapshot
	id      string
	staging string
	lockF   *os.File
	ws      *writeset.Set[stagedPart]
	queue   queueBuf // enqueued records (spool.go)
	// intent lists, in staging, every file the commit is about to put into
	// data/ (written before each, not synced): when the process dies
	// mid-commit, the cleanup that finds its staging dead removes those of
	// them no retained manifest names (cleanupLocked).
	intent File
}

// intentFile is the name of a staging directory's list of files moved
// into data/.
const intentFile = "moving"

// intend appends name to the commit's intent list.
func (t *tx) intend(name string) error {
	if t.intent == nil {
		f, err := t.s.opts.FS.Create(filepath.Join(t.staging, intentFile))
		if err != nil {
			return fmt.Errorf("intent: %w", err)
		}
		t.intent = f
	}
	if _, err := t.intent.Write([]byte(name + "\n")); err != nil {
		return fmt.Errorf("intent: %w", err)
	}
	return nil
}

// pendingSuffix names a staging directory being made (Begin), not yet
// locked under its own name.
const pendingSuffix = ".new"

// beginMadeHook, when set (tests), runs in Begin once the staging
// directory is made, before its lock is taken.
var beginMadeHook func(pending string)

// Begin starts a transaction reading the current generation.
func (s *Store) Begin(ctx context.Context) (pillar.Tx, error) {
	m, l, err := s.acquire(ctx) // the Tx reads its Begin state until it ends
	if err != nil {
		return nil, err
	}
	sn := &snapshot{s: s, m: m, lease: l}
	var rb [8]byte
	_, _ = rand.Read(rb[:])
	id := fmt.Sprintf("%d-%s", time.Now().UnixNano(), hex.EncodeToString(rb[:]))
	staging := filepath.Join(s.dir, "tx", id)
	// The staging directory appears under its own name only with its lock
	// held: it is made as <id>.new, locked, then renamed. Made in place,
	// another process's cleanup could find it between the mkdir and the
	// flock, take the free lock for a dead transaction's and remove the
	// staging of this live one (TestSnapshotsRaceCleanup failed so, now
	// and then). Cleanup leaves a .new directory alone for a minute.
	pending := staging + pendingSuffix
	if err := s.opts.FS.MkdirAll(pending); err != nil {
		sn.Release()
		return nil, fmt.Errorf("local store %s: begin: %w", s.dir, err)
	}
	if beginMadeHook != nil {
		beginMadeHook(pending)
	}
	lf, err := os.OpenFile(filepath.Join(pending, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		_ = s.opts.FS.RemoveAll(pending)
		sn.Release()
		return nil, fmt.Errorf("local store %s: begin: %w", s.dir, err)
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lf.Close()
		_ = s.opts.FS.RemoveAll(pending)
		sn.Release()
		return nil, fmt.Errorf("local store %s: begin: lock staging: %w", s.dir, err)
	}
	if err := os.Rename(pending, staging); err != nil { // the lock stays: it is on the file
		lf.Close()
		_ = s.opts.FS.RemoveAll(pending)
		sn.Release()
		return nil, fmt.Errorf("local store %s: begin: %w", s.dir, err)
	}
	return &tx{
		snapshot: sn,
		id:       id,
		staging:  staging,
		lockF:    lf,
		ws:       writeset.New[stagedPart](),
	}, nil
}

func (t *tx) errf(format string, a ...any) error {
	return fmt.Errorf("local store %s: tx %s: %w", t.s.dir, t.id, fmt.Errorf(format, a...))
}

func schemaString(s *parquet.Schema) string {
	var parts []string
	for _, f := range s.Fields() {
		typ := "list"
		if f.Leaf() {
			typ = f.Type().String()
		}
		parts = append(parts, f.Name()+":"+typ)
	}
	return strings.Join(parts, ", ")
}

func (t *tx) WriteTable(ctx context.Context, name string, rowType any, opts *pillar.WriteOptions) (pillar.RowWriter, error) {
	if err := writeset.ValidTableName(name); err != nil {
		return nil, t.errf("%w", err)
	}
	rt, err := writeset.RowType(name, rowType)
	if err != nil {
		return nil, t.errf("%w", err)
	}
	if err := t.replaceLayers(ctx, name, opts); err != nil {
		return nil, err
	}
	schema := parquet.SchemaOf(reflect.New(rt).Interface())
	rg := int64(maxRowGroupBytes)
	if opts != nil && opts.RowGroupBytes > 0 {
		rg = min(opts.RowGroupBytes, rg)
	}
	// A column's page buffer is at most an eighth of the row group (and
	// parquet-go's default 256 KiB): with many small row groups open (a
	// recompute's diff writes ten tables per worker) the default pages
	// would hold more than the row groups do.
	page := parquet.PageBufferSize(int(min(max(rg/8, 16<<10), parquet.DefaultPageBufferSize)))
	var codec compress.Codec = pqzstd.Default
	if opts != nil && opts.Scratch {
		codec = pqsnappy.Default
	}
	w := &rowWriter{t: t, table: name, rt: rt, rowGroup: rg, columns: len(schema.Columns()),
		wopts: append(pageBoundsOptions(schema, opts), schema, parquet.Compression(codec), parquet.MaxRowsPerRowGroup(maxRowsPerRowGroup), page)}
	part, err := t.ws.Write(name, rt, opts, t.baseRowType, func(_ *writeset.Table[stagedPart], n int) (stagedPart, error) {
		w.n = n
		return stagedPart{}, w.create()
	})
	if err != nil {
		return nil, t.errf("%w", err)
	}
	w.part = part
	return w, nil
}

// pageBoundsOptions keeps page min/max bounds (the column index) only for
// the columns the rows are sorted by. The writer holds every page's
// untruncated bounds of a column until the file is closed, so bounds of a
// blob column (page text, export records, vectors) would make a writer's
// memory grow with the file it writes; nothing reads them.
func pageBoundsOptions(schema *parquet.Schema, opts *pillar.WriteOptions) []parquet.WriterOption {
	var out []parquet.WriterOption
	for _, path := range schema.Columns() {
		if opts != nil && len(path) == 1 && slices.Contains(opts.SortedBy, path[0]) {
			continue
		}
		out = append(out, parquet.SkipPageBounds(path...))
	}
	return out
}

// baseRowType is the row type of a table in the state the Tx began from.
func (t *tx) baseRowType(name string) (string, bool) {
	if old, ok := t.m.Tables[name]; ok {
		return old.RowType, true
	}
	return "", false
}

type rowWriter struct {
	t     *tx
	table string
	rt    reflect.Type
	part  *writeset.Part[stagedPart]
	n     int                    // the part's number in the Tx (names its files)
	wopts []parquet.WriterOption // of every file's writer
	// columns is the schema's leaf columns: a row group is that many
	// column chunks in the file's footer.
	columns int
	rows    int64 // rows written, all files
	err     error // first error; every later call returns it
	closed  bool
	// rowGroup bounds the bytes of a row group (WriteOptions.RowGroupBytes,
	// at most maxRowGroupBytes).
	rowGroup int64

	// The file being written (the part's files before it are in files).
	files     []stagedFile
	name      string // its base name in the staging dir
	f         *crcFile
	w         fileWriter
	fileRows  int64
	groups    int   // row groups flushed into it
	groupRows int64 // rows of the row group being buffered
	// flushed is the writer's size after its last flushed row group.
	flushed int64
	// next: the file is full (maxFileChunks); the next row starts a new one.
	next bool
}

// maxFileChunks bounds the column chunks (row groups × leaf columns) of
// one table file: once a file holds that many, the writer closes it and
// goes on in a new file of its part (rows stay in order: a part's files
// follow each other in the table). A Parquet writer keeps every row
// group's metadata (column chunk, column and offset index) until it
// writes the footer, and a reader decodes the whole footer and page index
// when it opens the file (~2 KB per column chunk), so without the bound
// both grow with the file: a 160k-page docs table was one 2 GB file of
// 3,185 column chunks, 7 MB of decoded metadata per reader (`pillar bench
// scale`, publish and rechunk). At 512 a file's metadata stays near 1 MB
// and a file of 8 MiB row groups still holds 300 MB of 13-column docs.
const maxFileChunks = 512

// maxRowsPerRowGroup is the writer's row bound of a row group; rowWriter
// flushes at it itself, so that it counts every row group it writes (the
// parquet-go option of the same bound is a backstop only: that writer
// flushes lazily, at the row after the bound, which never comes).
const maxRowsPerRowGroup = 8192

// create starts the part's next file in the staging directory.
func (w *rowWriter) create() error {
	w.name = fmt.Sprintf("%06d.parquet", w.n)
	if len(w.files) > 0 {
		w.name = fmt.Sprintf("%06d-%04d.parquet", w.n, len(w.files))
	}
	raw, err := w.t.s.opts.FS.Create(filepath.Join(w.t.staging, w.name))
	if err != nil {
		return err
	}
	w.f = &crcFile{File: raw, block: tableBlockSize}
	w.w = newFileWriter(w.rt, w.f, w.wopts)
	w.fileRows, w.groups, w.groupRows, w.flushed, w.next = 0, 0, 0, 0, false
	return nil
}

func (w *rowWriter) Write(row any) error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		w.err = fmt.Errorf("local store: table %q: Write after Close", w.table)
		return w.err
	}
	rt := reflect.TypeOf(row)
	if rt != w.rt && (rt == nil || rt.Kind() != reflect.Pointer || rt.Elem() != w.rt) {
		w.err = fmt.Errorf("local store: table %q: row of type %T, table rows are %s", w.table, row, w.rt)
		return w.err
	}
	if w.next {
		if err := w.finish(); err != nil {
			w.err = fmt.Errorf("local store: table %q row %d: %w", w.table, w.rows, err)
			return w.err
		}
		if err := w.create(); err != nil {
			w.err = fmt.Errorf("local store: table %q row %d: %w", w.table, w.rows, err)
			return w.err
		}
	}
	if err := w.w.Write(row); err != nil {
		w.err = fmt.Errorf("local store: table %q row %d: %w", w.table, w.rows, err)
		return w.err
	}
	w.rows++
	w.fileRows++
	w.groupRows++
	// A row group is buffered whole until it is flushed: bound it by bytes
	// too (8192 rows of 50 KB records would be 400 MB per open writer).
	if w.groupRows >= maxRowsPerRowGroup || w.rows&15 == 0 && w.w.Size()-w.flushed > w.rowGroup {
		if err := w.w.Flush(); err != nil {
			w.err = fmt.Errorf("local store: table %q row %d: %w", w.table, w.rows, err)
			return w.err
		}
		w.flushed = w.w.Size()
		w.groups++
		w.groupRows = 0
		// Another row group would take the file past the bound (the one
		// Close flushes included).
		w.next = (w.groups+1)*w.columns > maxFileChunks
	}
	return nil
}

// maxRowGroupBytes bounds the rows a writer buffers before it flushes a row
// group (the writer's Size: pages encoded and compressed so far, and the
// column buffers of the page being filled); WriteOptions.RowGroupBytes
// lowers it.
const maxRowGroupBytes = 8 << 20

// finish writes the current file's footer, syncs and closes it, writes its
// block-sums sidecar and adds it to files.
func (w *rowWriter) finish() error {
	if err := w.w.Close(); err != nil {
		return err
	}
	if err := w.f.Sync(); err != nil {
		return err
	}
	if err := w.f.Close(); err != nil {
		return err
	}
	st, err := os.Stat(filepath.Join(w.t.staging, w.name))
	if err != nil {
		return err
	}
	if st.Size() != w.f.fill+tableBlockSize*int64(len(w.f.blocks)) {
		return fmt.Errorf("file %s: %d bytes, %d written", w.name, st.Size(), w.f.fill+tableBlockSize*int64(len(w.f.blocks)))
	}
	blocks, err := w.t.writeSidecar(w.name, w.f.blockSidecar())
	if err != nil {
		return err
	}
	w.files = append(w.files, stagedFile{name: w.name, rows: w.fileRows, bytes: st.Size(), crc: w.f.sum(), blocksCRC: blocks})
	return nil
}

func (w *rowWriter) Close() error {
	if w.closed {
		return w.err
	}
	w.closed = true
	fail := func(err error) error {
		if w.err == nil {
			w.err = fmt.Errorf("local store: table %q: close: %w", w.table, err)
		}
		if w.f != nil {
			w.f.Close()
		}
		return w.err
	}
	if w.err != nil {
		return fail(w.err)
	}
	if err := w.finish(); err != nil {
		return fail(err)
	}
	w.t.ws.Closed(w.part, func(sp *stagedPart) { sp.files = w.files })
	return nil
}

// Discard abandons a writer that wrote no rows: its staged file is removed
// and its part stays in the table's order with no files, where Close would
// stage an empty file (a footer and its block sums). A writer that wrote
// rows is not discarded: Discard returns an error and the writer stays
// open. A table whose every part is discarded has no files. The local
// runner discards the empty outputs of all but the first job of a reduce,
// so a table does not get one empty file per job that selected nothing.
func (w *rowWriter) Discard() error {
	if w.closed {
		return w.err
	}
	if w.rows > 0 || len(w.files) > 0 {
		return fmt.Errorf("local store: table %q: Discard of a writer that wrote %d rows", w.table, w.rows)
	}
	w.closed = true
	if w.f != nil {
		w.f.Close()
		if err := os.Remove(filepath.Join(w.t.staging, w.name)); err != nil && w.err == nil {
			w.err = fmt.Errorf("local store: table %q: discard: %w", w.table, err)
		}
	}
	w.t.ws.Closed(w.part, func(sp *stagedPart) { sp.files = nil })
	return w.err
}

// writeSidecar writes, synced, the block-sums sidecar of staged file name
// and returns its CRC32C.
func (t *tx) writeSidecar(name string, b []byte) (string, error) {
	f, err := t.s.opts.FS.Create(filepath.Join(t.staging, blocksName(name)))
	if err != nil {
		return "", err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return crcString(crc32.Checksum(b, castagnoli)), nil
}

// replaceLayers: a Replace of a layered table drops its delta layers with
// it (the rows written are the whole table); an Append onto one is
// refused (its rows would sit under the deltas).
func (t *tx) replaceLayers(ctx context.Context, name string, opts *pillar.WriteOptions) error {
	appending := opts != nil && opts.Mode == pillar.Append
	err := pillar.WriteLayers(ctx, t.snapshot, name, appending, t.ws.Touches(name), t.dropRaw, func(a string) error { return t.ExpectAttr(ctx, a) })
	if errors.Is(err, pillar.ErrAppendLayered) {
		return t.errf("%w", err)
	}
	return err
}

func (t *tx) DropTable(ctx context.Context, name string) error {
	if _, err := pillar.DropLayers(ctx, t.snapshot, name, t.dropRaw, func(a string) error { return t.ExpectAttr(ctx, a) }); err != nil {
		return err
	}
	return t.dropRaw(name)
}

func (t *tx) dropRaw(name string) error {
	_, existed := t.m.Tables[name]
	if err := t.ws.Drop(name, existed); err != nil {
		return t.errf("%w", err)
	}
	return nil
}

func (t *tx) SetAttr(ctx context.Context, name string, value any) error {
	return t.wrap(t.ws.SetAttr(name, value))
}

func (t *tx) DeleteAttr(ctx context.Context, name string) error { return t.wrap(t.ws.DeleteAttr(name)) }

func (t *tx) ExpectAttr(ctx context.Context, name string) error { return t.wrap(t.ws.ExpectAttr(name)) }

func (t *tx) Enqueue(ctx context.Context, recs ...pillar.ExportRecord) error {
	if err := t.ws.Enqueue(t.m.Partitions); err != nil { // a finished transaction
		return t.wrap(err)
	}
	for i := range recs {
		if err := recs[i].Validate(t.m.Partitions); err != nil {
			return t.errf("enqueue record %d: %w", i, err)
		}
	}
	return t.wrap(t.addQueued(ctx, recs))
}

func (t *tx) MarkConsumed(ctx context.Context, ids ...string) error {
	return t.wrap(t.ws.MarkConsumed(ids...))
}

// wrap prefixes a write-set error with the store and transaction.
func (t *tx) wrap(err error) error {
	if err == nil {
		return nil
	}
	return t.errf("%w", err)
}

func (t *tx) Abort() error {
	if !t.ws.Finish() {
		return nil
	}
	t.finish()
	return nil
}

// finish removes the staging directory, releases its lock and the Begin
// state's lease.
func (t *tx) finish() {
	t.closeSpools()
	_ = t.s.opts.FS.RemoveAll(t.staging)
	_ = syscall.Flock(int(t.lockF.Fd()), syscall.LOCK_UN)
	t.lockF.Close()
	t.snapshot.Release()
}

func (s *Store) hook(step string) {
	if s.opts.crashAt != nil {
		s.opts.crashAt(step)
	}
}

func (s *Store) cleanupHook(step string) {
	if s.opts.crashAtCleanup != nil {
		s.opts.crashAtCleanup(step)
	}
}

// Commit makes every change of the transaction visible at once, or none.
// Concurrent commits of one Store share a store commit (group.go): one
// manifest, one round of fsyncs, each transaction checked and applied in
// turn, all or nothing per transaction.
func (t *tx) Commit(ctx context.Context) error {
	if !t.ws.Finish() {
		return t.errf("commit: %w", pillar.ErrTxDone)
	}
	defer t.finish()

	if err := t.ws.CheckClosed(); err != nil {
		return t.errf("%w", err)
	}
	if err := ctx.Err(); err != nil {
		return t.errf("commit: %w", err)
	}
	s := t.s
	r := &commitReq{t: t, ctx: ctx, start: time.Now(), lead: make(chan struct{}), done: make(chan struct{})}
	var err error
	if r.staged, err = t.stageQueue(ctx); err != nil {
		return err
	}
	// A store written before checksums gets them with its next commit
	// (computed before the lock: it reads every such file once).
	r.sums = s.missingSums(ctx, t.m)
	// Every sweepEvery one commit's cleanup also sweeps data/ (listed now,
	// before the lock): the files of a commit killed before it listed
	// them, and of a removal that failed.
	s.mu.Lock()
	sweep := s.opts.Now().Sub(s.lastSweep) > sweepEvery
	if sweep {
		s.lastSweep = s.opts.Now()
	}
	s.mu.Unlock()
	if sweep {
		r.listed, _ = os.ReadDir(filepath.Join(s.dir, "data"))
	}
	r.staging = time.Now()
	return s.groupCommit(r)
}

// Cleanup cadence after commits.
const (
	cleanupEvery = 16
	cleanupAfter = 30 * time.Second
	sweepEvery   = 10 * time.Minute
)

// stagedQueue is one partition's queue segment written to staging.
type stagedQueue struct {
	partition    int
	name         string
	count, bytes int64
	crc          string
	headsCRC     string // queueheads.go
	footerCRC    string
}

// syncAll runs fns concurrently and returns the first error.
func syncAll(fns ...func() error) error {
	errs := make(chan error, len(fns))
	for _, fn := range fns {
		go func() { errs <- fn() }()
	}
	var first error
	for range fns {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func wrapErr(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

// writeCurrent replaces CURRENT; the rename is the commit point.
func writeCurrent(s *Store, name string) error {
	path := filepath.Join(s.dir, "CURRENT")
	tmp := path + ".tmp"
	_ = s.opts.FS.Remove(tmp)
	f, err := s.opts.FS.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write([]byte(name + "\n")); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	s.hook("current-tmp-written")
	if err := s.opts.FS.Rename(tmp, path); err != nil {
		return err
	}
	s.hook("current-renamed")
	return s.opts.FS.SyncDir(s.dir)
}

func tableGen(m *manifest, name string) int64 {
	if t, ok := m.Tables[name]; ok {
		return t.Gen
	}
	return 0
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
