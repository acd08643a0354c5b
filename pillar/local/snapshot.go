package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strings"
	"sync"

	"github.com/parquet-go/parquet-go"

	"github.com/pillarkit/pillar/pillar"
)

type snapshot struct {
	s     *Store
	m     *manifest
	lease *lease
	once  sync.Once
}

func (sn *snapshot) Info() pillar.Info {
	return pillar.Info{Backend: "local", Root: sn.s.dir, Partitions: sn.m.Partitions, Format: sn.m.Format, Generation: sn.m.Generation}
}

// Release drops the snapshot's lease; it is safe to call more than once.
// Rows read from the snapshot stay valid; reading on after Release does
// not (its files may be cleaned up).
func (sn *snapshot) Release() {
	sn.once.Do(func() {
		if sn.lease != nil {
			sn.s.release(sn.lease)
		}
	})
}

func (sn *snapshot) tableInfo(name string, t *tableEntry) pillar.TableInfo {
	return pillar.TableInfo{
		Name: name, Rows: t.rows(), Bytes: t.bytes(), Schema: t.Schema, Files: len(t.Files),
		SortedBy: append([]string(nil), t.SortedBy...), Generation: t.Gen,
	}
}

func (sn *snapshot) Tables(ctx context.Context) ([]pillar.TableInfo, error) {
	out := make([]pillar.TableInfo, 0, len(sn.m.Tables))
	for name, t := range sn.m.Tables {
		if ls := pillar.LayersOf(sn, name); ls != nil {
			ti, err := pillar.MergedTableInfo(ctx, sn, name, ls)
			if err != nil {
				return nil, fmt.Errorf("local store %s: %w", sn.s.dir, err)
			}
			out = append(out, ti)
			continue
		}
		out = append(out, sn.tableInfo(name, t))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Table describes a table; a layered table (pillar's layers.go) as its
// readers see it, merged.
func (sn *snapshot) Table(ctx context.Context, name string) (pillar.TableInfo, error) {
	if ls := pillar.LayersOf(sn, name); ls != nil {
		ti, err := pillar.MergedTableInfo(ctx, sn, name, ls)
		if err != nil {
			return pillar.TableInfo{}, fmt.Errorf("local store %s: %w", sn.s.dir, err)
		}
		return ti, nil
	}
	t, ok := sn.m.Tables[name]
	if !ok {
		return pillar.TableInfo{}, fmt.Errorf("local store %s: table %q: %w", sn.s.dir, name, pillar.ErrNotFound)
	}
	return sn.tableInfo(name, t), nil
}

// ReadTable reads a table's rows; a layered table's as one sorted merged
// stream (r selects merged rows).
func (sn *snapshot) ReadTable(ctx context.Context, name string, r *pillar.Range) (pillar.RowReader, error) {
	if ls := pillar.LayersOf(sn, name); ls != nil {
		rr, err := pillar.OpenMerged(ctx, sn, name, ls, r)
		if err != nil {
			return nil, fmt.Errorf("local store %s: %w", sn.s.dir, err)
		}
		return rr, nil
	}
	return sn.RawRead(ctx, name, r)
}

// RawTable implements pillar.LayerSource.
func (sn *snapshot) RawTable(name string) (pillar.TableInfo, bool) {
	t, ok := sn.m.Tables[name]
	if !ok {
		return pillar.TableInfo{}, false
	}
	return sn.tableInfo(name, t), true
}

// RawTablesUnder implements pillar.LayerSource.
func (sn *snapshot) RawTablesUnder(prefix string) []string {
	var out []string
	for name := range sn.m.Tables {
		if strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// RawReadKeys implements pillar.LayerSource: Parquet decodes the page_key
// column into pillar.DeletedKey.
func (sn *snapshot) RawReadKeys(ctx context.Context, name string, r *pillar.Range) (pillar.RowReader, error) {
	return sn.RawRead(ctx, name, r)
}

// RawRead implements pillar.LayerSource: the table as stored.
func (sn *snapshot) RawRead(ctx context.Context, name string, r *pillar.Range) (pillar.RowReader, error) {
	t, ok := sn.m.Tables[name]
	if !ok {
		return nil, fmt.Errorf("local store %s: table %q: %w", sn.s.dir, name, pillar.ErrNotFound)
	}
	total := t.rows()
	start, end := int64(0), total
	if r != nil {
		start, end = r.Start, r.End
		if start < 0 || end > total || start > end {
			return nil, fmt.Errorf("local store %s: table %q: range [%d,%d) outside [0,%d)", sn.s.dir, name, start, end, total)
		}
	}
	return &rowReader{ctx: ctx, s: sn.s, table: name, files: t.Files, pos: start, end: end}, nil
}

func (sn *snapshot) Attr(ctx context.Context, name string, dst any) error {
	a, ok := sn.m.Attrs[name]
	if !ok {
		return fmt.Errorf("local store %s: attribute %q: %w", sn.s.dir, name, pillar.ErrNotFound)
	}
	if err := json.Unmarshal(a.Value, dst); err != nil {
		return fmt.Errorf("local store %s: attribute %q: %w", sn.s.dir, name, err)
	}
	return nil
}

func (sn *snapshot) Attrs(ctx context.Context) (map[string][]byte, error) {
	out := make(map[string][]byte, len(sn.m.Attrs))
	for k, v := range sn.m.Attrs {
		out[k] = append([]byte(nil), v.Value...)
	}
	return out, nil
}

func (sn *snapshot) checkPartition(p int) error {
	if p < 0 || p >= sn.m.Partitions {
		return fmt.Errorf("local store %s: partition %d out of range [0,%d)", sn.s.dir, p, sn.m.Partitions)
	}
	return nil
}

func (sn *snapshot) QueueEnd(ctx context.Context, partition int) (int64, error) {
	if err := sn.checkPartition(partition); err != nil {
		return 0, err
	}
	return sn.m.Queue[partition].end(), nil
}

func (sn *snapshot) ReadQueue(ctx context.Context, partition int, from int64, limit int) ([]pillar.ExportRecord, error) {
	return readQueue[pillar.ExportRecord](ctx, sn, partition, from, limit, func(r *pillar.ExportRecord) *pillar.ExportRecord { return r }, false)
}

// queueHead is ExportRecord without its value: reading a segment into it
// decodes neither the value column nor the cause.
type queueHead struct {
	Partition   int32  `parquet:"partition"`
	Offset      int64  `parquet:"queue_offset"`
	PageKey     string `parquet:"page_key"`
	Op          string `parquet:"op"`
	CommittedAt int64  `parquet:"committed_at,timestamp(millisecond)"`
	Priority    string `parquet:"priority,optional"`
	Publication string `parquet:"publication,optional"`
}

// ReadQueueHeads is ReadQueue without values (pillar.QueueHeadReader).
func (sn *snapshot) ReadQueueHeads(ctx context.Context, partition int, from int64, limit int) ([]pillar.ExportRecord, error) {
	heads, err := readQueue[queueHead](ctx, sn, partition, from, limit, func(h *queueHead) *queueHead { return h }, true)
	if err != nil {
		return nil, err
	}
	out := make([]pillar.ExportRecord, len(heads))
	for i, h := range heads {
		out[i] = pillar.ExportRecord{Partition: h.Partition, Offset: h.Offset, PageKey: h.PageKey, Op: h.Op,
			CommittedAt: h.CommittedAt, Priority: h.Priority, Publication: h.Publication}
	}
	return out, nil
}

// queueRow is a row type a queue segment is read into.
type queueRow interface {
	pillar.ExportRecord | queueHead
}

// readQueue reads rows of partition's queue into T; heads: T has no value
// column (the segment's heads checksum suffices, see queueheads.go).
func readQueue[T queueRow](ctx context.Context, sn *snapshot, partition int, from int64, limit int, self func(*T) *T, heads bool) ([]T, error) {
	if err := sn.checkPartition(partition); err != nil {
		return nil, err
	}
	q := sn.m.Queue[partition]
	if q == nil || limit <= 0 {
		return nil, nil
	}
	var out []T
	err := sn.s.eachSegment(ctx, partition, q, from, func(seg segment) (bool, error) {
		skip := max(from-seg.First, 0)
		recs, err := readQueueSegment[T](ctx, sn.s, seg, skip, limit-len(out), heads)
		if err != nil {
			return false, fmt.Errorf("segment %s: %w", seg.File, err)
		}
		for i := range recs {
			setPosition(self(&recs[i]), seg.First+skip+int64(i), seg.CommittedAtMS)
		}
		out = append(out, recs...)
		return len(out) < limit, nil
	})
	if err != nil {
		return nil, fmt.Errorf("local store %s: queue partition %d: %w", sn.s.dir, partition, err)
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// setPosition sets a row's offset and commit time, which the segment (not
// the file) records.
func setPosition(row any, offset, committedAtMS int64) {
	switch r := row.(type) {
	case *pillar.ExportRecord:
		r.Offset = offset
		if committedAtMS != 0 {
			r.CommittedAt = committedAtMS
		}
	case *queueHead:
		r.Offset = offset
		if committedAtMS != 0 {
			r.CommittedAt = committedAtMS
		}
	}
}

// readQueueSegment reads up to limit records of a segment file from row
// skip on; heads: T has no value column (see readQueue).
func readQueueSegment[T any](ctx context.Context, s *Store, seg segment, skip int64, limit int, heads bool) ([]T, error) {
	open := func() (*os.File, error) { return s.openData(ctx, seg.File, seg.Bytes, seg.CRC32C) }
	if heads {
		open = func() (*os.File, error) { return s.openQueueHeads(ctx, seg) }
	}
	f, err := open()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	pf, err := openParquet(f, seg.Bytes)
	if err != nil {
		return nil, err
	}
	n := pf.NumRows() - skip
	if n <= 0 || limit <= 0 {
		return nil, nil
	}
	n = min(n, int64(limit))
	r := parquet.NewGenericReader[T](pf)
	defer r.Close()
	if skip > 0 {
		if err := r.SeekToRow(skip); err != nil {
			return nil, err
		}
	}
	out := make([]T, n)
	got := 0
	for got < len(out) {
		k, err := r.Read(out[got:])
		got += k
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, err
		}
		if k == 0 {
			break
		}
	}
	return out[:got], nil
}

func (sn *snapshot) Consumed(ctx context.Context, id string) (bool, error) {
	_, ok := sn.m.Consumed[id]
	return ok, nil
}

// rowReader reads rows [pos, end) across a table's files.
type rowReader struct {
	ctx   context.Context
	s     *Store
	table string
	files []fileEntry
	pos   int64 // index of the next row to return from Next
	end   int64

	//lint:ignore SA1019 the untyped reader is what decodes into any row type the caller scans into
	cur     *parquet.Reader
	curFile dataFile
	curIdx  int   // index into files of cur
	curBase int64 // table row index of cur's first row
	last    int64 // row index within cur of the last row read (-1: none)
	curCols map[string]bool
	views   map[reflect.Type]reflect.Type // row type -> legacy view for cur (nil: none needed)
	pending bool                          // Next returned true and Scan has not consumed the row
	row     int64                         // table row index of the pending row
	err     error

	curPF   *parquet.File
	batch   *rowBatch
	noBatch map[reflect.Type]bool // row types cur's file cannot be converted to
}

// rowBatch reads a file's rows for one row type in batches: parquet-go's
// Reader.Read of one row at a time seeks and reads a one-row batch for
// every row (3.6x slower on a two-column projection of docs).
type rowBatch struct {
	rt     reflect.Type
	file   int // the files index it reads
	rd     *parquet.Reader
	schema *parquet.Schema
	rows   []parquet.Row
	i, n   int   // rows[i:n] are read and not yet scanned
	next   int64 // the file row of rows[i]
}

// rowBatchRows is the rows a rowBatch decodes at once.
const rowBatchRows = 64

func (r *rowReader) Next() bool {
	if r.err != nil {
		return false
	}
	if r.pending {
		r.pos++ // the caller skipped Scan; move past the row
		r.pending = false
	}
	if r.pos >= r.end {
		return false
	}
	if err := r.ctx.Err(); err != nil {
		r.err = err
		return false
	}
	r.row = r.pos
	r.pending = true
	return true
}

// open positions the underlying reader at table row idx.
func (r *rowReader) open(idx int64) error {
	if r.cur != nil && idx >= r.curBase && idx < r.curBase+r.files[r.curIdx].Rows {
		return nil // the file open already (every row but a file's first)
	}
	base := int64(0)
	for i, f := range r.files {
		if idx < base+f.Rows {
			if r.cur == nil || r.curIdx != i {
				r.closeCur()
				fh, err := r.s.openTable(r.ctx, f)
				if err != nil {
					return err
				}
				pf, err := parquet.OpenFile(fh, f.Bytes)
				if err != nil {
					fh.Close()
					return fmt.Errorf("file %s: %w", f.Name, err)
				}
				r.cur, r.curFile, r.curIdx, r.curBase, r.last = parquet.NewReader(pf), fh, i, base, -1
				r.curCols, r.views, r.curPF, r.noBatch = fileColumns(pf), nil, pf, nil
			}
			return nil
		}
		base += f.Rows
	}
	return fmt.Errorf("row %d beyond the table's files", idx)
}

func (r *rowReader) closeCur() {
	if r.batch != nil {
		r.batch.rd.Close()
		r.batch = nil
	}
	if r.cur != nil {
		r.cur.Close()
		r.curFile.Close()
		r.cur, r.curFile = nil, nil
	}
}

// Scan decodes the current row into dst, a pointer to a row struct.
func (r *rowReader) Scan(dst any) error {
	if !r.pending {
		return fmt.Errorf("local store: table %q: Scan without a successful Next", r.table)
	}
	r.pending = false
	idx := r.row
	r.pos = idx + 1
	if err := r.open(idx); err != nil {
		r.err = fmt.Errorf("local store %s: table %q row %d: %w", r.s.dir, r.table, idx, err)
		return r.err
	}
	local := idx - r.curBase
	if ok, err := r.readBatched(dst, local, r.end-idx); ok {
		if err != nil {
			r.err = fmt.Errorf("local store: table %q row %d: %w", r.table, idx, err)
			return r.err
		}
		r.last = -2 // cur did not move: its next read seeks
		return nil
	}
	if local != r.last+1 {
		if err := r.cur.SeekToRow(local); err != nil {
			r.err = fmt.Errorf("local store: table %q row %d: seek: %w", r.table, idx, err)
			return r.err
		}
	}
	if err := r.read(dst); err != nil {
		r.err = fmt.Errorf("local store: table %q row %d: %w", r.table, idx, err)
		if strings.Contains(err.Error(), "cannot read parquet row into go value") {
			r.err = fmt.Errorf("local store: table %q row %d: row type %T does not match the table: %w", r.table, idx, dst, err)
		}
		return r.err
	}
	r.last = local
	return nil
}

// viewOf is the legacy view of row type rt for cur's file (nil: none).
func (r *rowReader) viewOf(rt reflect.Type) reflect.Type {
	view, ok := r.views[rt]
	if !ok {
		view, _ = legacyView(rt, r.curCols)
		if r.views == nil {
			r.views = map[reflect.Type]reflect.Type{}
		}
		r.views[rt] = view
	}
	return view
}

// readBatched decodes row local of cur's file into dst, a pointer to a
// struct, from a batch of at most left rows (those the reader's range has
// left: a one-row read decodes one row); it reports false, having read
// nothing, when the file needs a legacy view for dst's type or cannot be
// converted to it (read then decodes it, or names the mismatch).
func (r *rowReader) readBatched(dst any, local, left int64) (bool, error) {
	pv := reflect.ValueOf(dst)
	if pv.Kind() != reflect.Pointer || pv.IsNil() || pv.Elem().Kind() != reflect.Struct {
		return false, nil
	}
	rt := pv.Type().Elem()
	b := r.batch
	if b == nil || b.rt != rt || b.file != r.curIdx {
		if r.noBatch[rt] || r.viewOf(rt) != nil {
			return false, nil
		}
		schema := parquet.SchemaOf(dst)
		if _, err := parquet.Convert(schema, r.curPF.Schema()); err != nil {
			if r.noBatch == nil {
				r.noBatch = map[reflect.Type]bool{}
			}
			r.noBatch[rt] = true
			return false, nil
		}
		if b != nil {
			b.rd.Close()
		}
		b = &rowBatch{rt: rt, file: r.curIdx, rd: parquet.NewReader(r.curPF, schema), schema: schema,
			rows: make([]parquet.Row, rowBatchRows), next: -1}
		r.batch = b
	}
	if local != b.next || b.i >= b.n {
		if local != b.next {
			if err := b.rd.SeekToRow(local); err != nil {
				return true, fmt.Errorf("seek: %w", err)
			}
		}
		n, err := b.rd.ReadRows(b.rows[:min(int64(len(b.rows)), max(left, 1))])
		if n == 0 {
			if err == nil || errors.Is(err, io.EOF) {
				err = fmt.Errorf("no row %d in file %s", local, r.files[r.curIdx].Name)
			}
			return true, err
		}
		b.i, b.n, b.next = 0, n, local
	}
	if err := b.schema.Reconstruct(dst, b.rows[b.i]); err != nil {
		return true, err
	}
	b.i++
	b.next++
	return true, nil
}

// read decodes the next row of cur into dst, through a legacy view when cur
// names a column the old way (legacy.go).
func (r *rowReader) read(dst any) error {
	pv := reflect.ValueOf(dst)
	if pv.Kind() != reflect.Pointer || pv.IsNil() {
		return r.cur.Read(dst)
	}
	rt := pv.Type().Elem()
	view := r.viewOf(rt)
	if view == nil {
		return r.cur.Read(dst)
	}
	v := reflect.New(view)
	if err := r.cur.Read(v.Interface()); err != nil {
		return err
	}
	pv.Elem().Set(v.Elem().Convert(rt))
	return nil
}

func (r *rowReader) Err() error { return r.err }

func (r *rowReader) Close() error {
	r.closeCur()
	return nil
}
