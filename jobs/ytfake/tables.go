package ytfake

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"unicode/utf8"

	"go.ytsaurus.tech/yt/go/schema"
	"go.ytsaurus.tech/yt/go/ypath"
	"go.ytsaurus.tech/yt/go/yson"
	"go.ytsaurus.tech/yt/go/yt"
	"go.ytsaurus.tech/yt/go/yterrors"

	"github.com/pillarkit/pillar/jobs/internal/rowkey"
)

// checkRows enforces a table's schema on rows written to it, after the
// table's last row prev (nil for none), as a master and the table writer
// do (docs: storage/static-schema.md):
//   - a strict schema (the default: "Schema is strict by default",
//     schema/schema.go) refuses a column it does not list;
//   - a required column must be present and not null;
//   - a value must have the column's type;
//   - the rows of a table with key columns must be sorted by them, also
//     after the rows already there ("Entries added to the end of the
//     sorted table must not violate the sort order", docs:
//     storage/static-tables.md), else code 301 (SortOrderViolation).
//
// A nil schema (a table created without one) accepts any row.
func checkRows(table string, s *schema.Schema, prev []byte, rows [][]byte) error {
	if s == nil {
		return nil
	}
	strict := s.Strict == nil || *s.Strict
	cols := map[string]schema.Column{}
	for _, c := range s.Columns {
		cols[c.Name] = c
	}
	for i, r := range rows {
		var m map[string]any
		if err := yson.Unmarshal(r, &m); err != nil {
			return yterrors.Err(yterrors.CodeSchemaViolation, fmt.Sprintf("Row %d written to /%s is not a map: %v", i, table, err))
		}
		if strict {
			for name := range m {
				if _, ok := cols[name]; !ok {
					return yterrors.Err(yterrors.CodeSchemaViolation,
						fmt.Sprintf("Column %q is not found in the strict schema of /%s", name, table), yterrors.Attr("row_index", i))
				}
			}
		}
		for _, c := range s.Columns {
			v, ok := m[c.Name]
			if !ok || v == nil {
				if c.Required {
					return yterrors.Err(yterrors.CodeSchemaViolation,
						fmt.Sprintf("Required column %q of /%s cannot have a null value", c.Name, table), yterrors.Attr("row_index", i))
				}
				continue
			}
			if !typeOK(c.Type, v) {
				return yterrors.Err(yterrors.CodeSchemaViolation,
					fmt.Sprintf("Column %q of /%s has type %s, row %d holds %T %v", c.Name, table, c.Type, i, v, v), yterrors.Attr("row_index", i))
			}
		}
	}
	keys := s.KeyColumns()
	if len(keys) == 0 {
		return nil
	}
	enc := rowkey.New(keys)
	var last []byte
	if prev != nil {
		k, err := enc.AppendYSON(nil, prev)
		if err != nil {
			return err
		}
		last = k
	}
	for i, r := range rows {
		k, err := enc.AppendYSON(nil, r)
		if err != nil {
			return err
		}
		if last != nil && bytes.Compare(last, k) > 0 {
			return yterrors.Err(yterrors.CodeSortOrderViolation,
				fmt.Sprintf("Sort order violation in /%s: row %d is less than the row before it by key columns %v", table, i, keys),
				yterrors.Attr("table", "/"+table), yterrors.Attr("row_index", i))
		}
		last = k
	}
	return nil
}

func typeOK(t schema.Type, v any) bool {
	inInt := func(lo, hi int64) bool {
		switch x := v.(type) {
		case int64:
			return x >= lo && x <= hi
		}
		return false
	}
	inUint := func(hi uint64) bool {
		switch x := v.(type) {
		case uint64:
			return x <= hi
		}
		return false
	}
	switch t {
	case schema.TypeInt64, schema.TypeInterval:
		return inInt(math.MinInt64, math.MaxInt64)
	case schema.TypeInt32:
		return inInt(math.MinInt32, math.MaxInt32)
	case schema.TypeInt16:
		return inInt(math.MinInt16, math.MaxInt16)
	case schema.TypeInt8:
		return inInt(math.MinInt8, math.MaxInt8)
	case schema.TypeUint64, schema.TypeDate, schema.TypeDatetime, schema.TypeTimestamp:
		return inUint(math.MaxUint64)
	case schema.TypeUint32:
		return inUint(math.MaxUint32)
	case schema.TypeUint16:
		return inUint(math.MaxUint16)
	case schema.TypeUint8:
		return inUint(math.MaxUint8)
	case schema.TypeFloat64, schema.TypeFloat32:
		_, ok := v.(float64)
		return ok
	case schema.TypeBoolean:
		_, ok := v.(bool)
		return ok
	case schema.TypeBytes:
		_, ok := v.(string)
		return ok
	case schema.TypeString:
		s, ok := v.(string)
		return ok && utf8.ValidString(s)
	case schema.TypeNull:
		return v == nil
	}
	return true // any, and types the fake does not check
}

type reader struct {
	rows [][]byte
	i    int
}

func (r *reader) Next() bool         { r.i++; return r.i <= len(r.rows) }
func (r *reader) Scan(dst any) error { return yson.Unmarshal(r.rows[r.i-1], dst) }
func (r *reader) Err() error         { return nil }
func (r *reader) Close() error       { return nil }

func (v view) ReadTable(ctx context.Context, path ypath.YPath, o *yt.ReadTableOptions) (yt.TableReader, error) {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	if err := v.c.enter(v.tx); err != nil {
		return nil, err
	}
	p, _, _, pn, err := v.resolve(path)
	if err != nil {
		return nil, err
	}
	n := v.get(p)
	if pn != nil && p == "" {
		n = pn.node
	}
	if n == nil {
		return nil, notFound(p)
	}
	if n.typ != yt.NodeTable {
		return nil, yterrors.Err(fmt.Sprintf("Node /%s is a %s, not a table", p, n.typ))
	}
	rich := richOf(path)
	ranges, err := rowRanges(rich, len(n.rows))
	if err != nil {
		return nil, err
	}
	rng := ""
	var rows [][]byte
	for _, r := range ranges {
		rows = append(rows, n.rows[r[0]:r[1]]...)
		if len(rich.Ranges) > 0 {
			rng += fmt.Sprintf("[#%d:#%d]", r[0], r[1])
		}
	}
	if pn != nil {
		p = "#pinned"
	}
	v.c.rec(v.tx, "read_table %s%s", p, rng)
	return &reader{rows: rows}, nil
}

type writer struct {
	v      view
	p      string
	append bool
	rows   [][]byte
	err    error
	done   bool
}

func (w *writer) Write(row any) error {
	if w.err != nil {
		return w.err
	}
	// Binary YSON, as the SDK's table writer sends it (text YSON prints a
	// float32 with 6 digits).
	b, err := yson.MarshalFormat(row, yson.FormatBinary)
	if err != nil {
		w.err = err
		return err
	}
	w.rows = append(w.rows, b)
	return nil
}

// Commit lands the rows: schema and sort order are checked first, and a
// violation lands nothing.
func (w *writer) Commit() error {
	if w.err != nil {
		return w.err
	}
	if w.done {
		return yterrors.Err("ytfake: table writer committed twice")
	}
	w.done = true
	c := w.v.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.enter(w.v.tx); err != nil {
		return err
	}
	n := w.v.get(w.p)
	if n == nil {
		return notFound(w.p)
	}
	var prev []byte
	if w.append && len(n.rows) > 0 {
		prev = n.rows[len(n.rows)-1]
	}
	if err := checkRows(w.p, n.schema, prev, w.rows); err != nil {
		return err
	}
	m := w.v.mut(w.p)
	if !w.append {
		m.rows = nil
		m.appendFrom = -1
	}
	m.rows = append(m.rows, w.rows...)
	c.touch(m, true)
	return nil
}

func (w *writer) Rollback() error { w.done = true; return nil }

// WriteTable opens a writer, taking the implicit lock at once: shared for
// an append, exclusive for an overwrite ("Writing to a table or file means
// taking a shared lock if writing to the end of the table and an exclusive
// lock if overwriting it", docs: storage/transactions.md).
func (v view) WriteTable(ctx context.Context, path ypath.YPath, o *yt.WriteTableOptions) (yt.TableWriter, error) {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	if err := v.c.enter(v.tx); err != nil {
		return nil, err
	}
	p, _, _, _, err := v.resolve(path)
	if err != nil {
		return nil, err
	}
	app := false
	if r := richOf(path); r.Append != nil {
		app = *r.Append
	}
	v.c.rec(v.tx, "write_table %s append=%v", p, app)
	n := v.get(p)
	if n == nil {
		return nil, notFound(p)
	}
	if n.typ != yt.NodeTable {
		return nil, yterrors.Err(fmt.Sprintf("Node /%s is a %s, not a table", p, n.typ))
	}
	mode := yt.LockExclusive
	if app {
		mode = yt.LockShared
	}
	if err := v.takeLock(p, n, mode, "", ""); err != nil {
		return nil, err
	}
	return &writer{v: v, p: p, append: app}, nil
}

type fileWriter struct {
	bytes.Buffer
	done func([]byte) error
}

func (w *fileWriter) Close() error { return w.done(w.Bytes()) }

func (v view) WriteFile(ctx context.Context, path ypath.YPath, o *yt.WriteFileOptions) (io.WriteCloser, error) {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	if err := v.c.enter(v.tx); err != nil {
		return nil, err
	}
	p, _, _, _, err := v.resolve(path)
	if err != nil {
		return nil, err
	}
	v.c.rec(v.tx, "write_file %s", p)
	n := v.get(p)
	if n == nil || n.typ != yt.NodeFile {
		return nil, notFound(p)
	}
	if err := v.takeLock(p, n, yt.LockExclusive, "", ""); err != nil {
		return nil, err
	}
	return &fileWriter{done: func(b []byte) error {
		v.c.mu.Lock()
		defer v.c.mu.Unlock()
		if err := v.c.enter(v.tx); err != nil {
			return err
		}
		m := v.mut(p)
		if m == nil {
			return notFound(p)
		}
		m.data = bytes.Clone(b)
		v.c.touch(m, true)
		return nil
	}}, nil
}

func (v view) ReadFile(ctx context.Context, path ypath.YPath, o *yt.ReadFileOptions) (io.ReadCloser, error) {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	if err := v.c.enter(v.tx); err != nil {
		return nil, err
	}
	p, _, _, _, err := v.resolve(path)
	if err != nil {
		return nil, err
	}
	v.c.rec(v.tx, "read_file %s", p)
	n := v.get(p)
	if n == nil || n.typ != yt.NodeFile {
		return nil, notFound(p)
	}
	return io.NopCloser(bytes.NewReader(bytes.Clone(n.data))), nil
}

// GetFileFromCache looks the MD5 up in the file cache.
func (c *Cluster) GetFileFromCache(ctx context.Context, md5 string, o *yt.GetFileFromCacheOptions) (ypath.YPath, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rec(nil, "get_file_from_cache %s", md5)
	if p, ok := c.cache[md5]; ok && c.nodes[key(ypath.Path(p))] != nil {
		return ypath.Path(p), nil
	}
	return nil, nil
}

// PutFileToCache copies the file into the cache at
// <cache>/<last two hex digits>/<md5>, as the master does.
func (c *Cluster) PutFileToCache(ctx context.Context, path ypath.YPath, md5 string, o *yt.PutFileToCacheOptions) (ypath.YPath, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rec(nil, "put_file_to_cache %s", md5)
	v := view{c: c}
	src, _, _, _, err := v.resolve(path)
	if err != nil {
		return nil, err
	}
	n := c.nodes[src]
	if n == nil || n.typ != yt.NodeFile {
		return nil, notFound(src)
	}
	if o == nil || o.CachePath == nil {
		return nil, yterrors.Err("ytfake: put_file_to_cache without a cache path")
	}
	p := string(o.CachePath.YPath()) + "/" + md5[len(md5)-2:] + "/" + md5
	k := key(ypath.Path(p))
	if err := v.makeParents(k); err != nil {
		return nil, err
	}
	f := c.newNode(yt.NodeFile)
	f.data = n.data
	c.nodes[k] = f
	c.cache[md5] = p
	return ypath.Path(p), nil
}
