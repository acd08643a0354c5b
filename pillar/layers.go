package pillar

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Layered tables (see "Layered tables" in doc.go).
//
// A layered table T is its base table T plus delta layers, each an
// ordinary table of the store under LayerDir:
//
//	_layers/<T>/delta-<seq>     rows that changed, T's row type, sorted by page_key
//	_layers/<T>/deletes-<seq>   keys removed (DeletedKey rows), sorted by page_key
//
// and the attribute "layers/<T>" (LayerMeta). The newest layer that holds a
// key decides it: within one seq the deletes come before the delta (a key
// both deleted and put in one delta is put). A deletes layer hides the key,
// a delta layer supplies all of its rows for the key (a table with several
// rows per key, such as chunks, replaces a page's rows as a whole).

// LayerDir is the folder of every table's delta layers.
const LayerDir = "_layers/"

// AttrLayerPrefix prefixes a layered table's LayerMeta attribute
// ("layers/<T>").
const AttrLayerPrefix = "layers/"

// Layer kinds.
const (
	LayerBase    = "base"
	LayerDelta   = "delta"
	LayerDeletes = "deletes"
)

// Layer is one layer of a layered table, in a Snapshot.
type Layer struct {
	// Table is the store table holding the layer's rows (T itself for the
	// base).
	Table string
	Kind  string // LayerBase, LayerDelta or LayerDeletes
	// Seq orders the deltas (0 for the base); a newer delta has a larger
	// seq.
	Seq   int64
	Rows  int64
	Bytes int64
}

// LayerMeta is the attribute "layers/<T>" of a layered table, set by every
// delta written (ReserveDelta, WriteDelta). Concurrent delta writers of one
// table conflict on it; a Replace of the table expects it unchanged, so a
// rewrite never silently drops a delta committed meanwhile. Compaction does
// not touch it: it changes no row, so a delta written meanwhile commits.
type LayerMeta struct {
	// NextSeq is the seq the next delta gets.
	NextSeq int64 `json:"next_seq"`
	// Rows is the merged row count once the newest delta is applied; -1
	// when its writer did not know it (readers then count it).
	Rows int64 `json:"rows"`
}

// DeletedKey is a row of a deletes layer: a page key the layer removes.
type DeletedKey struct {
	PageKey string `yson:"page_key" parquet:"page_key"`
}

// DeltaTable is the table of delta seq of layered table t.
func DeltaTable(t string, seq int64) string {
	return fmt.Sprintf("%s%s/delta-%09d", LayerDir, t, seq)
}

// DeletesTable is the deletes table of delta seq of layered table t.
func DeletesTable(t string, seq int64) string {
	return fmt.Sprintf("%s%s/deletes-%09d", LayerDir, t, seq)
}

// IsLayerTable reports whether name is a delta or deletes layer (a table
// under LayerDir), and of which table.
func IsLayerTable(name string) (table string, kind string, seq int64, ok bool) {
	rest, found := strings.CutPrefix(name, LayerDir)
	if !found {
		return "", "", 0, false
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 {
		return "", "", 0, false
	}
	table, leaf := rest[:i], rest[i+1:]
	for _, k := range []string{LayerDelta, LayerDeletes} {
		if num, ok := strings.CutPrefix(leaf, k+"-"); ok {
			n, err := strconv.ParseInt(num, 10, 64)
			if err != nil || n <= 0 {
				return "", "", 0, false
			}
			return table, k, n, true
		}
	}
	return "", "", 0, false
}

// LayerSource is what the shared layer code needs from a backend's
// snapshot: the raw tables, read without layer resolution. pillar/local and
// pillar/ytstore implement it; callers use Layers, OpenMerged and friends
// on an ordinary Snapshot.
type LayerSource interface {
	// RawTable describes a store table as stored (no layer resolution).
	RawTable(name string) (TableInfo, bool)
	// RawTablesUnder lists the store tables whose name starts with prefix.
	RawTablesUnder(prefix string) []string
	// RawRead reads a store table as stored.
	RawRead(ctx context.Context, name string, r *Range) (RowReader, error)
	// RawReadKeys reads a store table's rows for their page_key only: its
	// rows scan into DeletedKey (a backend may read the one column).
	RawReadKeys(ctx context.Context, name string, r *Range) (RowReader, error)
	Attr(ctx context.Context, name string, dst any) error
}

// LayersOf returns the layers of table t in src, oldest first: the base
// (when it exists), then per seq its deletes and its delta. It returns nil
// when t has no delta layer (an ordinary table).
func LayersOf(src LayerSource, t string) []Layer {
	if _, _, _, ok := IsLayerTable(t); ok {
		return nil
	}
	names := src.RawTablesUnder(LayerDir + t + "/")
	var out []Layer
	for _, n := range names {
		tab, kind, seq, ok := IsLayerTable(n)
		if !ok || tab != t {
			continue
		}
		ti, _ := src.RawTable(n)
		out = append(out, Layer{Table: n, Kind: kind, Seq: seq, Rows: ti.Rows, Bytes: ti.Bytes})
	}
	if len(out) == 0 {
		return nil
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Seq != out[j].Seq {
			return out[i].Seq < out[j].Seq
		}
		return out[i].Kind == LayerDeletes && out[j].Kind != LayerDeletes
	})
	if ti, ok := src.RawTable(t); ok {
		out = append([]Layer{{Table: t, Kind: LayerBase, Rows: ti.Rows, Bytes: ti.Bytes}}, out...)
	}
	return out
}

// layerSourceOf returns the LayerSource behind a Snapshot or Tx.
func layerSourceOf(sn Snapshot) (LayerSource, error) {
	src, ok := sn.(LayerSource)
	if !ok {
		return nil, fmt.Errorf("pillar: snapshot %T does not support layered tables", sn)
	}
	return src, nil
}

// Layers lists the layers of table t in a snapshot (see LayersOf): the
// base alone for an ordinary table, ErrNotFound when t does not exist.
func Layers(ctx context.Context, sn Snapshot, t string) ([]Layer, error) {
	src, err := layerSourceOf(sn)
	if err != nil {
		return nil, err
	}
	if ls := LayersOf(src, t); ls != nil {
		return ls, nil
	}
	ti, ok := src.RawTable(t)
	if !ok {
		return nil, fmt.Errorf("table %q: %w", t, ErrNotFound)
	}
	return []Layer{{Table: t, Kind: LayerBase, Rows: ti.Rows, Bytes: ti.Bytes}}, nil
}

// LayerInputs returns the tables of t's layers, oldest first, as the
// consecutive inputs of a runner operation: a job that reduces them by
// page_key resolves a key by the highest table index among them holding it
// (a deletes layer hides the key; see Layer.Kind). The layers are returned
// with them, index for index.
func LayerInputs(ctx context.Context, sn Snapshot, t string) ([]string, []Layer, error) {
	ls, err := Layers(ctx, sn, t)
	if err != nil {
		return nil, nil, err
	}
	names := make([]string, len(ls))
	for i, l := range ls {
		names[i] = l.Table
	}
	return names, ls, nil
}

// MergedTableInfo is the TableInfo of a layered table as readers see it:
// the merged row count (LayerMeta.Rows, or counted when unknown), the bytes
// and files of every layer, the base's schema and sort order, and the
// newest generation among the layers.
func MergedTableInfo(ctx context.Context, src LayerSource, t string, layers []Layer) (TableInfo, error) {
	var ti TableInfo
	if base, ok := src.RawTable(t); ok {
		ti = base
	} else {
		ti = TableInfo{Name: t, SortedBy: []string{"page_key"}}
	}
	ti.Rows, ti.Bytes, ti.Files = 0, 0, 0
	for _, l := range layers {
		li, _ := src.RawTable(l.Table)
		ti.Bytes += li.Bytes
		ti.Files += li.Files
		ti.Generation = max(ti.Generation, li.Generation)
		if ti.Schema == "" && l.Kind == LayerDelta {
			ti.Schema = li.Schema
		}
	}
	var meta LayerMeta
	if err := src.Attr(ctx, AttrLayerPrefix+t, &meta); err == nil && meta.Rows >= 0 {
		ti.Rows = meta.Rows
		return ti, nil
	}
	n, err := countMerged(ctx, src, t, layers)
	if err != nil {
		return TableInfo{}, err
	}
	ti.Rows = n
	return ti, nil
}

// countCache remembers merged row counts that were counted (layers are
// immutable: the key names every layer's table and size).
var countCache sync.Map

func countMerged(ctx context.Context, src LayerSource, t string, layers []Layer) (int64, error) {
	var key strings.Builder
	key.WriteString(t)
	for _, l := range layers {
		li, _ := src.RawTable(l.Table)
		fmt.Fprintf(&key, "|%s:%d:%d:%d", l.Table, li.Generation, li.Rows, li.Bytes)
	}
	if v, ok := countCache.Load(key.String()); ok {
		return v.(int64), nil
	}
	m, err := openMerged(ctx, src, t, layers, nil, true)
	if err != nil {
		return 0, err
	}
	defer m.Close()
	var n int64
	for m.Next() {
		n++
	}
	if err := m.Err(); err != nil {
		return 0, err
	}
	countCache.Store(key.String(), n)
	return n, nil
}

// ReadKeys reads the rows of table t whose page_key is one of keys
// (sorted, distinct), resolved as ReadTable resolves a layered table (an
// ordinary table is its base alone). It is the merge of ReadTable that
// scans a row only when its key is selected: the rows it passes over are
// read for their key column alone, and it stops after the last key. The
// incremental reconcile of jobs/pipeline reads the changed pages this way
// on the embedded store.
func ReadKeys(ctx context.Context, sn Snapshot, t string, keys []string) (RowReader, error) {
	src, err := layerSourceOf(sn)
	if err != nil {
		return nil, err
	}
	ls, err := Layers(ctx, sn, t)
	if err != nil {
		return nil, err
	}
	for i := 1; i < len(keys); i++ {
		if keys[i] <= keys[i-1] {
			return nil, fmt.Errorf("table %q: ReadKeys: key %s after %s: keys must be sorted and distinct", t, keys[i], keys[i-1])
		}
	}
	m, err := openMerged(ctx, src, t, ls, nil, false)
	if err != nil {
		return nil, err
	}
	m.want, m.filter = keys, true
	return m, nil
}

// OpenMerged reads layered table t as one sorted stream: rows [r.Start,
// r.End) of the merged rows (nil: all). Backends call it from ReadTable;
// callers read a layered table with Snapshot.ReadTable.
func OpenMerged(ctx context.Context, src LayerSource, t string, layers []Layer, r *Range) (RowReader, error) {
	return openMerged(ctx, src, t, layers, r, false)
}

func openMerged(ctx context.Context, src LayerSource, t string, layers []Layer, r *Range, keysOnly bool) (*mergedReader, error) {
	m := &mergedReader{ctx: ctx, table: t, emitting: -1, left: -1}
	if r != nil {
		if r.Start < 0 || r.Start > r.End {
			return nil, fmt.Errorf("table %q: range [%d,%d) is invalid", t, r.Start, r.End)
		}
		m.skip, m.left = r.Start, r.End-r.Start
	}
	for _, l := range layers {
		c := &layerCursor{l: l}
		var err error
		if c.keys, err = src.RawReadKeys(ctx, l.Table, nil); err != nil {
			m.Close()
			return nil, fmt.Errorf("table %q: layer %s: %w", t, l.Table, err)
		}
		if l.Kind != LayerDeletes && !keysOnly {
			if c.rows, err = src.RawRead(ctx, l.Table, nil); err != nil {
				c.keys.Close()
				m.Close()
				return nil, fmt.Errorf("table %q: layer %s: %w", t, l.Table, err)
			}
		}
		m.layers = append(m.layers, c)
		if err := c.advance(); err != nil {
			m.Close()
			return nil, fmt.Errorf("table %q: %w", t, err)
		}
	}
	return m, nil
}

// layerCursor walks one layer: its key reader and, in step with it, its
// row reader (scanned only for the rows that win).
type layerCursor struct {
	l    Layer
	keys RowReader
	rows RowReader // nil for a deletes layer and for counting
	ok   bool      // key holds the current row's key
	key  string
	n    int64
}

func (c *layerCursor) advance() error {
	c.ok = c.keys.Next()
	if !c.ok {
		if err := c.keys.Err(); err != nil {
			return fmt.Errorf("layer %s: %w", c.l.Table, err)
		}
		return nil
	}
	var k DeletedKey
	if err := c.keys.Scan(&k); err != nil {
		return fmt.Errorf("layer %s row %d: %w", c.l.Table, c.n, err)
	}
	if k.PageKey < c.key && c.n > 0 {
		return fmt.Errorf("layer %s is not sorted by page_key: row %d (%s) after %s", c.l.Table, c.n, k.PageKey, c.key)
	}
	if c.rows != nil && !c.rows.Next() {
		if err := c.rows.Err(); err != nil {
			return fmt.Errorf("layer %s: %w", c.l.Table, err)
		}
		return fmt.Errorf("layer %s: row %d: the row reader ended before the key reader", c.l.Table, c.n)
	}
	c.key = k.PageKey
	c.n++
	return nil
}

// skipKey moves the cursor past every row of key.
func (c *layerCursor) skipKey(key string) error {
	for c.ok && c.key == key {
		if err := c.advance(); err != nil {
			return err
		}
	}
	return nil
}

func (c *layerCursor) close() {
	if c.keys != nil {
		c.keys.Close()
	}
	if c.rows != nil {
		c.rows.Close()
	}
}

// mergedReader is the sorted merged stream of a layered table: per key, the
// newest layer holding it decides (see LayersOf for the order).
type mergedReader struct {
	ctx      context.Context
	table    string
	layers   []*layerCursor
	emitting int    // layer whose current row is returned; -1 none
	curKey   string // its key
	pending  bool   // emitting's current row was returned by Next
	skip     int64  // merged rows still to skip (Range.Start)
	left     int64  // merged rows still to return; -1: no limit
	n        int64
	err      error
	// filter: only the keys of want (sorted) are returned (ReadKeys); wi
	// is the first of them not passed yet.
	filter bool
	want   []string
	wi     int
}

func (m *mergedReader) Next() bool {
	if m.err != nil {
		return false
	}
	for {
		if m.left == 0 {
			return false
		}
		ok, err := m.step()
		if err != nil {
			m.err = fmt.Errorf("table %q: %w", m.table, err)
			return false
		}
		if !ok {
			return false
		}
		if m.skip > 0 {
			m.skip--
			continue
		}
		if m.left > 0 {
			m.left--
		}
		return true
	}
}

// step moves to the next merged row.
func (m *mergedReader) step() (bool, error) {
	if m.n++; m.n&1023 == 0 {
		if err := m.ctx.Err(); err != nil {
			return false, err
		}
	}
	if m.pending {
		m.pending = false
		c := m.layers[m.emitting]
		if err := c.advance(); err != nil {
			return false, err
		}
		if c.ok && c.key == m.curKey {
			m.pending = true
			return true, nil
		}
		if err := m.skipAll(m.curKey); err != nil {
			return false, err
		}
		m.emitting = -1
	}
	for {
		min, found := "", false
		for _, c := range m.layers {
			if c.ok && (!found || c.key < min) {
				min, found = c.key, true
			}
		}
		if !found {
			return false, nil
		}
		if m.filter {
			for m.wi < len(m.want) && m.want[m.wi] < min {
				m.wi++
			}
			if m.wi == len(m.want) {
				return false, nil // past the last key wanted
			}
			if m.want[m.wi] != min {
				if err := m.skipAll(min); err != nil {
					return false, err
				}
				continue
			}
		}
		win := -1
		for i, c := range m.layers {
			if c.ok && c.key == min {
				win = i
			}
		}
		if m.layers[win].l.Kind == LayerDeletes {
			if err := m.skipAll(min); err != nil {
				return false, err
			}
			continue
		}
		m.emitting, m.curKey, m.pending = win, min, true
		return true, nil
	}
}

func (m *mergedReader) skipAll(key string) error {
	for _, c := range m.layers {
		if err := c.skipKey(key); err != nil {
			return err
		}
	}
	return nil
}

func (m *mergedReader) Scan(dst any) error {
	if !m.pending || m.emitting < 0 {
		return fmt.Errorf("table %q: Scan without a successful Next", m.table)
	}
	c := m.layers[m.emitting]
	if c.rows == nil {
		return fmt.Errorf("table %q: this reader counts keys only", m.table)
	}
	if err := c.rows.Scan(dst); err != nil {
		return fmt.Errorf("table %q: layer %s: %w", m.table, c.l.Table, err)
	}
	return nil
}

func (m *mergedReader) Err() error { return m.err }

func (m *mergedReader) Close() error {
	for _, c := range m.layers {
		c.close()
	}
	return nil
}

// Delta is a delta reserved in a Tx (ReserveDelta): the tables its writer
// fills.
type Delta struct {
	Table string // the layered table
	Seq   int64
	// Rows is the table the changed rows go to (T's row type, sorted by
	// page_key). When Base is true the layered table did not exist when the
	// Tx began and Rows is the table itself: its first rows are its base.
	Rows string
	// Deletes is the table the removed keys go to (DeletedKey rows, sorted
	// by page_key); "" when Base. Writing it is optional (no deletes).
	Deletes string
	Base    bool
}

// ReserveDelta reserves the next delta of layered table t in tx and
// records rows, the merged row count after it (-1 when unknown: readers
// then count it). The caller writes d.Rows (with WriteOptions.SortedBy
// page_key) and, if keys are removed, d.Deletes, inside tx — itself or as
// the outputs of a runner operation in tx — and commits tx; everything
// else in tx commits with it. Two Txs adding a delta to one table conflict
// (ErrConflict for the second committer).
func ReserveDelta(ctx context.Context, tx Tx, t string, rows int64) (Delta, error) {
	if _, _, _, ok := IsLayerTable(t); ok {
		return Delta{}, fmt.Errorf("table %q is itself a layer: a delta goes to its layered table", t)
	}
	src, err := layerSourceOf(tx)
	if err != nil {
		return Delta{}, err
	}
	if _, ok := src.RawTable(t); !ok && LayersOf(src, t) == nil {
		return Delta{Table: t, Rows: t, Base: true}, nil
	}
	var meta LayerMeta
	if err := tx.Attr(ctx, AttrLayerPrefix+t, &meta); err != nil && !errors.Is(err, ErrNotFound) {
		return Delta{}, err
	}
	seq := max(meta.NextSeq, 1)
	for _, l := range LayersOf(src, t) {
		seq = max(seq, l.Seq+1)
	}
	if err := tx.SetAttr(ctx, AttrLayerPrefix+t, LayerMeta{NextSeq: seq + 1, Rows: rows}); err != nil {
		return Delta{}, err
	}
	return Delta{Table: t, Seq: seq, Rows: DeltaTable(t, seq), Deletes: DeletesTable(t, seq)}, nil
}

// DeltaWriter writes one delta of a layered table in a Tx: Put the changed
// rows and Delete the removed keys, each in page_key order, then Close
// before Commit.
type DeltaWriter struct {
	tx      Tx
	d       Delta
	rowType any
	rows    RowWriter
	dels    RowWriter
	lastPut string
	lastDel string
	puts    int64
	deletes int64
	keyIdx  []int
	closed  bool
}

// WriteDelta begins a delta of layered table t (ReserveDelta) with row type
// rowType; rows is the merged row count after it (-1 when unknown).
func WriteDelta(ctx context.Context, tx Tx, t string, rowType any, rows int64) (*DeltaWriter, error) {
	d, err := ReserveDelta(ctx, tx, t, rows)
	if err != nil {
		return nil, err
	}
	rt := reflect.TypeOf(rowType)
	for rt != nil && rt.Kind() == reflect.Pointer {
		rt = rt.Elem()
	}
	idx := pageKeyField(rt)
	if idx == nil {
		return nil, fmt.Errorf("table %q: row type %T has no page_key field: a layered table is keyed by page_key", t, rowType)
	}
	w, err := tx.WriteTable(ctx, d.Rows, rowType, &WriteOptions{SortedBy: []string{"page_key"}})
	if err != nil {
		return nil, err
	}
	return &DeltaWriter{tx: tx, d: d, rowType: rowType, rows: w, keyIdx: idx}, nil
}

func pageKeyField(rt reflect.Type) []int {
	if rt == nil || rt.Kind() != reflect.Struct {
		return nil
	}
	for i := 0; i < rt.NumField(); i++ {
		f := rt.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("yson"), ","); name == "page_key" && f.Type.Kind() == reflect.String {
			return f.Index
		}
	}
	return nil
}

// Delta returns the delta being written.
func (w *DeltaWriter) Delta() Delta { return w.d }

// Put writes a changed (or new) row. Rows come in page_key order; all rows
// of one key go in one delta (they replace the key's rows as a whole).
func (w *DeltaWriter) Put(row any) error {
	v := reflect.ValueOf(row)
	for v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	key := v.FieldByIndex(w.keyIdx).String()
	if w.puts > 0 && key < w.lastPut {
		return fmt.Errorf("table %q: delta row %s after %s: rows must come in page_key order", w.d.Table, key, w.lastPut)
	}
	w.lastPut = key
	w.puts++
	return w.rows.Write(row)
}

// Delete removes a key (in page_key order among the deletes). A delta of
// a table that did not exist has nothing to delete: Delete is a no-op
// then.
func (w *DeltaWriter) Delete(ctx context.Context, key string) error {
	if w.d.Base {
		return nil
	}
	if w.deletes > 0 && key <= w.lastDel {
		return fmt.Errorf("table %q: delete of %s after %s: keys must come in increasing order", w.d.Table, key, w.lastDel)
	}
	if w.dels == nil {
		var err error
		if w.dels, err = w.tx.WriteTable(ctx, w.d.Deletes, DeletedKey{}, &WriteOptions{SortedBy: []string{"page_key"}}); err != nil {
			return err
		}
	}
	w.lastDel = key
	w.deletes++
	return w.dels.Write(DeletedKey{PageKey: key})
}

// SetRows records the merged row count after the delta, once its writer
// knows it (e.g. at the end of a merge); -1 means unknown.
func (w *DeltaWriter) SetRows(ctx context.Context, rows int64) error {
	if w.d.Base {
		return nil
	}
	return w.tx.SetAttr(ctx, AttrLayerPrefix+w.d.Table, LayerMeta{NextSeq: w.d.Seq + 1, Rows: rows})
}

// Counts returns the rows put and the keys deleted so far.
func (w *DeltaWriter) Counts() (puts, deletes int64) { return w.puts, w.deletes }

// Close closes the delta's writers (before Commit).
func (w *DeltaWriter) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	err := w.rows.Close()
	if w.dels != nil {
		if e := w.dels.Close(); err == nil {
			err = e
		}
	}
	return err
}

// ErrAppendLayered: an Append onto a layered table (its rows would sit
// under the deltas).
var ErrAppendLayered = errors.New("append is not supported on a layered table (write a delta, or replace it)")

// WriteLayers is what a backend's WriteTable does to t's layers before
// writing t: a Replace drops them with the old rows (DropLayers); an Append
// onto a layered table is refused with ErrAppendLayered unless this
// transaction wrote t already (touched).
func WriteLayers(ctx context.Context, src LayerSource, t string, appending, touched bool, drop func(name string) error, expect func(attr string) error) error {
	if appending {
		if LayersOf(src, t) != nil && !touched {
			return fmt.Errorf("table %q has delta layers: %w", t, ErrAppendLayered)
		}
		return nil
	}
	_, err := DropLayers(ctx, src, t, drop, expect)
	return err
}

// DropLayers records in tx that every layer of t in tx's Begin state goes,
// and that the commit must see t's LayerMeta unchanged (so a delta
// committed meanwhile makes it fail with ErrConflict instead of being
// dropped or stacked on rows that did not see it). Backends call it when t
// is replaced or dropped; it reports whether t had layers.
func DropLayers(ctx context.Context, src LayerSource, t string, drop func(name string) error, expect func(attr string) error) (bool, error) {
	ls := LayersOf(src, t)
	if ls == nil {
		return false, nil
	}
	for _, l := range ls {
		if l.Kind == LayerBase {
			continue
		}
		if err := drop(l.Table); err != nil {
			return true, err
		}
	}
	return true, expect(AttrLayerPrefix + t)
}
