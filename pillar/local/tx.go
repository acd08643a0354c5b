package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/pillarkit/pillar/pillar"
)

type tableChange struct {
	drop     bool
	mode     pillar.WriteMode
	rowType  reflect.Type
	schema   string
	sortedBy []string
	files    []*stagedFile // in the order their writers were opened
}

type stagedFile struct {
	name   string // base name in the staging dir
	rows   int64
	bytes  int64
	closed bool
}

type attrChange struct {
	del    bool
	expect bool // ExpectAttr only: no write
	value  json.RawMessage
}

type tx struct {
	*snapshot
	id      string
	staging string
	lockF   *os.File

	mu       sync.Mutex
	tables   map[string]*tableChange
	order    []string // tables in first-touch order
	attrs    map[string]*attrChange
	queue    []pillar.ExportRecord
	consumed []string
	nfile    int
	done     bool
}

// Begin starts a transaction reading the current generation.
func (s *Store) Begin(ctx context.Context) (pillar.Tx, error) {
	m, err := s.current()
	if err != nil {
		return nil, err
	}
	var rb [8]byte
	_, _ = rand.Read(rb[:])
	id := fmt.Sprintf("%d-%s", time.Now().UnixNano(), hex.EncodeToString(rb[:]))
	staging := filepath.Join(s.dir, "tx", id)
	if err := s.opts.FS.MkdirAll(staging); err != nil {
		return nil, fmt.Errorf("local store %s: begin: %w", s.dir, err)
	}
	lf, err := os.OpenFile(filepath.Join(staging, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		_ = s.opts.FS.RemoveAll(staging)
		return nil, fmt.Errorf("local store %s: begin: %w", s.dir, err)
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lf.Close()
		_ = s.opts.FS.RemoveAll(staging)
		return nil, fmt.Errorf("local store %s: begin: lock staging: %w", s.dir, err)
	}
	return &tx{
		snapshot: &snapshot{s: s, m: m},
		id:       id,
		staging:  staging,
		lockF:    lf,
		tables:   map[string]*tableChange{},
		attrs:    map[string]*attrChange{},
	}, nil
}

func (t *tx) errf(format string, a ...any) error {
	return fmt.Errorf("local store %s: tx %s: %s", t.s.dir, t.id, fmt.Sprintf(format, a...))
}

func validTableName(name string) error {
	if name == "" || strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") || strings.Contains(name, "//") {
		return fmt.Errorf("table name %q: must be non-empty path segments separated by '/'", name)
	}
	for _, seg := range strings.Split(name, "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("table name %q: '.' and '..' are not allowed", name)
		}
	}
	return nil
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
	if err := validTableName(name); err != nil {
		return nil, t.errf("%v", err)
	}
	o := pillar.WriteOptions{}
	if opts != nil {
		o = *opts
	}
	rt := reflect.TypeOf(rowType)
	for rt != nil && rt.Kind() == reflect.Pointer {
		rt = rt.Elem()
	}
	if rt == nil || rt.Kind() != reflect.Struct {
		return nil, t.errf("table %q: row type %T is not a struct", name, rowType)
	}
	schema := parquet.SchemaOf(reflect.New(rt).Interface())
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return nil, pillar.ErrTxDone
	}
	ch := t.tables[name]
	if ch == nil || ch.drop {
		if ch == nil {
			t.order = append(t.order, name)
		}
		ch = &tableChange{mode: o.Mode, rowType: rt, schema: schemaString(schema), sortedBy: o.SortedBy}
		t.tables[name] = ch
	} else if ch.rowType != rt {
		return nil, t.errf("table %q: row type %s differs from %s written earlier in this transaction", name, rt, ch.rowType)
	}
	if o.Mode == pillar.Append {
		if old, ok := t.m.Tables[name]; ok && old.RowType != rt.String() {
			return nil, t.errf("table %q: cannot append rows of type %s to a table of %s", name, rt, old.RowType)
		}
	}
	t.nfile++
	sf := &stagedFile{name: fmt.Sprintf("%06d.parquet", t.nfile)}
	ch.files = append(ch.files, sf)
	f, err := t.s.opts.FS.Create(filepath.Join(t.staging, sf.name))
	if err != nil {
		return nil, t.errf("table %q: %v", name, err)
	}
	w := parquet.NewWriter(f, schema, parquet.Compression(&parquet.Zstd), parquet.MaxRowsPerRowGroup(8192))
	return &rowWriter{t: t, table: name, f: f, w: w, rt: rt, sf: sf}, nil
}

type rowWriter struct {
	t     *tx
	table string
	f     File
	//lint:ignore SA1019 the untyped writer writes any row type a table is created with
	w    *parquet.Writer
	rt   reflect.Type
	sf   *stagedFile
	rows int64
	err  error // first error; every later call returns it
}

func (w *rowWriter) Write(row any) error {
	if w.err != nil {
		return w.err
	}
	rt := reflect.TypeOf(row)
	if rt != w.rt && (rt.Kind() != reflect.Pointer || rt.Elem() != w.rt) {
		w.err = fmt.Errorf("local store: table %q: row of type %T, table rows are %s", w.table, row, w.rt)
		return w.err
	}
	if err := w.w.Write(row); err != nil {
		w.err = fmt.Errorf("local store: table %q row %d: %w", w.table, w.rows, err)
		return w.err
	}
	w.rows++
	return nil
}

func (w *rowWriter) Close() error {
	if w.sf.closed {
		return w.err
	}
	w.sf.closed = true
	fail := func(err error) error {
		if w.err == nil {
			w.err = fmt.Errorf("local store: table %q: close: %w", w.table, err)
		}
		w.f.Close()
		return w.err
	}
	if w.err != nil {
		return fail(w.err)
	}
	if err := w.w.Close(); err != nil {
		return fail(err)
	}
	if err := w.f.Sync(); err != nil {
		return fail(err)
	}
	if err := w.f.Close(); err != nil {
		return fail(err)
	}
	st, err := os.Stat(filepath.Join(w.t.staging, w.sf.name))
	if err != nil {
		return fail(err)
	}
	w.t.mu.Lock()
	w.sf.rows, w.sf.bytes = w.rows, st.Size()
	w.t.mu.Unlock()
	return nil
}

func (t *tx) DropTable(ctx context.Context, name string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return pillar.ErrTxDone
	}
	if _, ok := t.m.Tables[name]; !ok {
		if ch := t.tables[name]; ch == nil || ch.drop {
			return fmt.Errorf("local store %s: tx %s: drop table %q: %w", t.s.dir, t.id, name, pillar.ErrNotFound)
		}
	}
	if t.tables[name] == nil {
		t.order = append(t.order, name)
	}
	t.tables[name] = &tableChange{drop: true}
	return nil
}

func (t *tx) SetAttr(ctx context.Context, name string, value any) error {
	b, err := json.Marshal(value)
	if err != nil {
		return t.errf("attribute %q: %v", name, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return pillar.ErrTxDone
	}
	t.attrs[name] = &attrChange{value: b}
	return nil
}

func (t *tx) DeleteAttr(ctx context.Context, name string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return pillar.ErrTxDone
	}
	t.attrs[name] = &attrChange{del: true}
	return nil
}

func (t *tx) ExpectAttr(ctx context.Context, name string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return pillar.ErrTxDone
	}
	if t.attrs[name] == nil {
		t.attrs[name] = &attrChange{expect: true}
	}
	return nil
}

func (t *tx) Enqueue(ctx context.Context, recs ...pillar.ExportRecord) error {
	for i := range recs {
		if err := recs[i].Validate(t.m.Partitions); err != nil {
			return t.errf("enqueue record %d: %v", i, err)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return pillar.ErrTxDone
	}
	t.queue = append(t.queue, recs...)
	return nil
}

func (t *tx) MarkConsumed(ctx context.Context, ids ...string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return pillar.ErrTxDone
	}
	t.consumed = append(t.consumed, ids...)
	return nil
}

func (t *tx) Abort() error {
	t.mu.Lock()
	if t.done {
		t.mu.Unlock()
		return nil
	}
	t.done = true
	t.mu.Unlock()
	t.finish()
	return nil
}

// finish removes the staging directory and releases its lock.
func (t *tx) finish() {
	_ = t.s.opts.FS.RemoveAll(t.staging)
	_ = syscall.Flock(int(t.lockF.Fd()), syscall.LOCK_UN)
	t.lockF.Close()
}

func (s *Store) hook(step string) {
	if s.opts.crashAt != nil {
		s.opts.crashAt(step)
	}
}

// Commit makes every change of the transaction visible at once, or none.
func (t *tx) Commit(ctx context.Context) (err error) {
	t.mu.Lock()
	if t.done {
		t.mu.Unlock()
		return pillar.ErrTxDone
	}
	t.done = true
	t.mu.Unlock()
	defer t.finish()

	for _, name := range t.order {
		for _, f := range t.tables[name].files {
			if !f.closed {
				return t.errf("table %q: a writer was not closed before Commit; nothing committed", name)
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return t.errf("commit: %v", err)
	}
	s := t.s
	staged, err := t.stageQueue()
	if err != nil {
		return err
	}
	unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	s.hook("locked")

	cur, err := s.current()
	if err != nil {
		return err
	}
	base := t.m
	for name := range t.tables {
		if tableGen(cur, name) != tableGen(base, name) {
			return fmt.Errorf("local store %s: table %q changed by generation %d since this transaction began at %d: %w",
				s.dir, name, tableGen(cur, name), base.Generation, pillar.ErrConflict)
		}
	}
	for name := range t.attrs {
		if cur.Attrs[name].Gen != base.Attrs[name].Gen {
			return fmt.Errorf("local store %s: attribute %q changed by generation %d since this transaction began at %d: %w",
				s.dir, name, cur.Attrs[name].Gen, base.Generation, pillar.ErrConflict)
		}
	}

	nm := cur.clone()
	nm.Generation = cur.Generation + 1
	nm.CommittedAt = time.Now().UTC()
	gen := nm.Generation
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	prefix := fmt.Sprintf("%012d-%s-", gen, hex.EncodeToString(rb[:]))
	dataDir := filepath.Join(s.dir, "data")
	var moved []string
	defer func() {
		if err != nil {
			for _, f := range moved {
				_ = s.opts.FS.Remove(filepath.Join(dataDir, f))
			}
		}
	}()

	for _, name := range t.order {
		ch := t.tables[name]
		if ch.drop {
			delete(nm.Tables, name)
			continue
		}
		var files []fileEntry
		for _, sf := range ch.files {
			dst := prefix + sf.name
			if err := s.opts.FS.Rename(filepath.Join(t.staging, sf.name), filepath.Join(dataDir, dst)); err != nil {
				return t.errf("commit: table %q: %v", name, err)
			}
			moved = append(moved, dst)
			s.hook("moved-data")
			files = append(files, fileEntry{Name: dst, Rows: sf.rows, Bytes: sf.bytes})
		}
		te := &tableEntry{RowType: ch.rowType.String(), Schema: ch.schema, SortedBy: ch.sortedBy, Files: files, Gen: gen}
		if old, ok := nm.Tables[name]; ok && ch.mode == pillar.Append {
			te.Files = append(append([]fileEntry(nil), old.Files...), files...)
			if !equalStrings(old.SortedBy, ch.sortedBy) {
				te.SortedBy = nil // an append breaks any claimed order
			}
		}
		nm.Tables[name] = te
	}
	for name, a := range t.attrs {
		switch {
		case a.expect:
		case a.del:
			delete(nm.Attrs, name)
		default:
			nm.Attrs[name] = attrEntry{Value: a.value, Gen: gen}
		}
	}
	// The export queue: the segment files were written before the lock;
	// offsets are assigned now, after everything already committed.
	nowMS := nm.CommittedAt.UnixMilli()
	for _, qf := range staged {
		q := nm.Queue[qf.partition]
		if q == nil {
			q = &queueEntry{}
			nm.Queue[qf.partition] = q
		}
		name := prefix + qf.name
		if err := s.opts.FS.Rename(filepath.Join(t.staging, qf.name), filepath.Join(dataDir, name)); err != nil {
			return t.errf("commit: export queue partition %d: %v", qf.partition, err)
		}
		moved = append(moved, name)
		s.hook("queue-written")
		q.Segments = append(q.Segments, segment{File: name, First: q.end(), Count: qf.count, Bytes: qf.bytes, CommittedAtMS: nowMS})
	}
	for _, id := range t.consumed {
		nm.Consumed[id] = gen
	}
	if err := s.opts.FS.SyncDir(dataDir); err != nil {
		return t.errf("commit: sync data: %v", err)
	}
	s.hook("data-synced")
	if err := writeJSONAtomic(s.opts.FS, filepath.Join(s.dir, "manifests", manifestName(gen)), nm); err != nil {
		return t.errf("commit: manifest: %v", err)
	}
	s.hook("manifest-written")
	if err := writeCurrent(s, manifestName(gen)); err != nil {
		_ = s.opts.FS.Remove(filepath.Join(s.dir, "manifests", manifestName(gen)))
		return t.errf("commit: CURRENT: %v", err)
	}
	s.hook("committed")
	s.mu.Lock()
	s.cached = nm
	s.mu.Unlock()
	// Cleanup reads every retained manifest: run it every few commits, not
	// after each one (unreferenced files wait a little longer, that's all).
	s.mu.Lock()
	s.commits++
	due := s.commits >= cleanupEvery || time.Since(s.lastCleanup) > cleanupAfter
	if due {
		s.commits, s.lastCleanup = 0, time.Now()
	}
	s.mu.Unlock()
	if due {
		if cerr := s.cleanupLocked(); cerr != nil {
			s.opts.Logger.Warn("local store: cleanup after commit", "err", cerr)
		}
	}
	s.opts.Logger.Debug("local store: committed", "generation", gen, "tables", len(t.tables), "attrs", len(t.attrs), "queued", len(t.queue))
	return nil
}

// Cleanup cadence after commits.
const (
	cleanupEvery = 16
	cleanupAfter = 30 * time.Second
)

// stagedQueue is one partition's queue segment written to staging.
type stagedQueue struct {
	partition    int
	name         string
	count, bytes int64
}

// stageQueue writes (and fsyncs) one segment file per partition touched,
// in staging, before the commit lock is taken.
func (t *tx) stageQueue() ([]stagedQueue, error) {
	byPart := map[int][]pillar.ExportRecord{}
	for _, r := range t.queue {
		byPart[int(r.Partition)] = append(byPart[int(r.Partition)], r)
	}
	parts := make([]int, 0, len(byPart))
	for p := range byPart {
		parts = append(parts, p)
	}
	sort.Ints(parts)
	var out []stagedQueue
	for _, p := range parts {
		name := fmt.Sprintf("q%05d.parquet", p)
		size, err := writeQueueFile(t.s.opts.FS, filepath.Join(t.staging, name), byPart[p])
		if err != nil {
			return nil, t.errf("commit: export queue partition %d: %v", p, err)
		}
		out = append(out, stagedQueue{partition: p, name: name, count: int64(len(byPart[p])), bytes: size})
	}
	return out, nil
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

func writeQueueFile(fs FS, path string, recs []pillar.ExportRecord) (int64, error) {
	f, err := fs.Create(path)
	if err != nil {
		return 0, err
	}
	w := parquet.NewGenericWriter[pillar.ExportRecord](f, parquet.Compression(&parquet.Zstd))
	if _, err := w.Write(recs); err != nil {
		f.Close()
		return 0, err
	}
	if err := w.Close(); err != nil {
		f.Close()
		return 0, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
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
