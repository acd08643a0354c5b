package ytstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"go.ytsaurus.tech/yt/go/schema"
	"go.ytsaurus.tech/yt/go/ypath"
	"go.ytsaurus.tech/yt/go/yson"
	"go.ytsaurus.tech/yt/go/yt"
	"go.ytsaurus.tech/yt/go/yterrors"

	"github.com/pillarkit/pillar/pillar"
)

// treeAttrs are the attributes one `get` of the root asks for: everything a
// snapshot needs, read atomically by the master.
var treeAttrs = []string{"type", "id", "revision", "content_revision", "row_count", "chunk_count", "compressed_data_size", "schema", attrRowType, attrGeneration}

// nodeAttrs are the attributes of a node in the result of a `get`
// (YSON <attributes>value; the SDK decodes them into ",attr" fields).
type nodeAttrs struct {
	Type       yt.NodeType    `yson:"type,attr"`
	ID         yt.NodeID      `yson:"id,attr"`
	Revision   uint64         `yson:"revision,attr"`
	ContentRev uint64         `yson:"content_revision,attr"`
	RowCount   int64          `yson:"row_count,attr"`
	ChunkCount int64          `yson:"chunk_count,attr"`
	Bytes      int64          `yson:"compressed_data_size,attr"`
	Schema     *schema.Schema `yson:"schema,attr"`
	RowType    string         `yson:"pillar_row_type,attr"`
	Generation int64          `yson:"pillar_generation,attr"`
}

type ynode struct {
	nodeAttrs
	Value yson.RawValue `yson:",value"`
}

type tableMeta struct {
	nodeAttrs
	name string
}

type attrMeta struct {
	value    []byte // JSON
	id       yt.NodeID
	revision uint64
}

// state is the store as one `get` of the root saw it.
type state struct {
	gen         int64
	tables      map[string]*tableMeta
	attrs       map[string]attrMeta
	queueEnd    map[int]int64
	consumedID  yt.NodeID
	consumedRev uint64
}

func decodeChildren(raw yson.RawValue) (map[string]ynode, error) {
	var kids map[string]ynode
	if err := yson.Unmarshal(raw, &kids); err != nil {
		return nil, err
	}
	return kids, nil
}

// parseTree reads the result of a `get` of the root.
func parseTree(root ynode) (*state, error) {
	st := &state{tables: map[string]*tableMeta{}, attrs: map[string]attrMeta{}, queueEnd: map[int]int64{}}
	kids, err := decodeChildren(root.Value)
	if err != nil {
		return nil, fmt.Errorf("root: %w", err)
	}
	var walk func(prefix string, kids map[string]ynode) error
	walk = func(prefix string, kids map[string]ynode) error {
		for name, n := range kids {
			full := prefix + name
			switch n.Type {
			case yt.NodeTable:
				st.tables[full] = &tableMeta{nodeAttrs: n.nodeAttrs, name: full}
			case yt.NodeMap:
				sub, err := decodeChildren(n.Value)
				if err != nil {
					return fmt.Errorf("%s: %w", full, err)
				}
				if err := walk(full+"/", sub); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for name, n := range kids {
		if name == internalDir {
			continue
		}
		if err := walk("", map[string]ynode{name: n}); err != nil {
			return nil, err
		}
	}
	in, ok := kids[internalDir]
	if !ok {
		return nil, fmt.Errorf("%s is missing: %w", internalDir, pillar.ErrNotStore)
	}
	ik, err := decodeChildren(in.Value)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", internalDir, err)
	}
	if g, ok := ik["generation"]; ok {
		if err := yson.Unmarshal(g.Value, &st.gen); err != nil {
			return nil, fmt.Errorf("%s/generation: %w", internalDir, err)
		}
	}
	if a, ok := ik["attrs"]; ok {
		ak, err := decodeChildren(a.Value)
		if err != nil {
			return nil, fmt.Errorf("%s/attrs: %w", internalDir, err)
		}
		for enc, n := range ak {
			name, err := decodeName(enc)
			if err != nil {
				return nil, fmt.Errorf("%s/attrs: %w", internalDir, err)
			}
			var v string
			if err := yson.Unmarshal(n.Value, &v); err != nil {
				return nil, fmt.Errorf("%s/attrs/%s: %w", internalDir, enc, err)
			}
			st.attrs[name] = attrMeta{value: []byte(v), id: n.ID, revision: n.Revision}
		}
	}
	if q, ok := ik["queue"]; ok {
		qk, err := decodeChildren(q.Value)
		if err != nil {
			return nil, fmt.Errorf("%s/queue: %w", internalDir, err)
		}
		for name, n := range qk {
			var p int
			if _, err := fmt.Sscanf(name, "p%05d", &p); err != nil {
				continue
			}
			st.queueEnd[p] = n.RowCount
		}
	}
	if c, ok := ik["consumed"]; ok {
		st.consumedID, st.consumedRev = c.ID, c.Revision
	}
	return st, nil
}

// fetch reads the whole store state in one `get` (inside tx when set).
func (s *Store) fetch(ctx context.Context, c yt.CypressClient) (*state, error) {
	return s.fetchWith(ctx, c, treeAttrs)
}

func (s *Store) fetchWith(ctx context.Context, c yt.CypressClient, attrs []string) (*state, error) {
	var root ynode
	if err := c.GetNode(ctx, s.root, &root, &yt.GetNodeOptions{Attributes: attrs}); err != nil {
		if yterrors.ContainsResolveError(err) {
			return nil, fmt.Errorf("ytstore %s: %w", s.root, pillar.ErrNotFound)
		}
		return nil, fmt.Errorf("ytstore %s: read the store: %w", s.root, err)
	}
	st, err := parseTree(root)
	if err != nil {
		return nil, fmt.Errorf("ytstore %s: %w", s.root, err)
	}
	return st, nil
}

func (s *Store) beginTx(ctx context.Context) (yt.Tx, error) {
	var o *yt.StartTxOptions
	if s.opts.TxTimeout > 0 {
		d := yson.Duration(s.opts.TxTimeout)
		o = &yt.StartTxOptions{Timeout: &d}
	}
	// The transaction lives until Commit/Abort/Release, not until the
	// caller's ctx ends (the SDK aborts a transaction when the context
	// passed to BeginTx is cancelled).
	return s.yc.BeginTx(context.WithoutCancel(ctx), o)
}

// snapshot is a pinned view: a transaction holding snapshot locks on every
// table and on the consumed-id directory, plus the state read just before
// the locks were taken (valid because none of those nodes changed until
// after the locks: their committed revisions did not move).
type snapshot struct {
	s    *Store
	tx   yt.Tx // snapshot transaction; nil after Release
	st   *state
	once sync.Once
}

// takeSnapshot pins the current state.
func (s *Store) takeSnapshot(ctx context.Context) (*snapshot, error) {
	var last error
	for attempt := 0; attempt < s.opts.SnapshotAttempts; attempt++ {
		sn, err := s.trySnapshot(ctx)
		if err == nil {
			s.stats.snapshots.Add(1)
			return sn, nil
		}
		if !errors.Is(err, errRetrySnapshot) {
			return nil, err
		}
		s.stats.snapshotRetries.Add(1)
		last = err
		s.opts.Logger.Debug("ytstore: snapshot retry", "root", string(s.root), "attempt", attempt+1, "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 10 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("ytstore %s: snapshot: %d attempts: %w", s.root, s.opts.SnapshotAttempts, last)
}

func (s *Store) trySnapshot(ctx context.Context) (_ *snapshot, err error) {
	tx, err := s.beginTx(ctx)
	if err != nil {
		return nil, fmt.Errorf("ytstore %s: snapshot: begin transaction: %w", s.root, err)
	}
	defer func() {
		if err != nil {
			tx.Abort()
		}
	}()
	st, err := s.fetch(ctx, tx)
	if err != nil {
		return nil, err
	}
	ids := []yt.NodeID{st.consumedID}
	for _, t := range st.tables {
		ids = append(ids, t.ID)
	}
	if err := lockAll(ctx, tx, ids); err != nil {
		if yterrors.ContainsResolveError(err) {
			return nil, fmt.Errorf("%w: %w", errRetrySnapshot, err)
		}
		return nil, fmt.Errorf("ytstore %s: snapshot: %w", s.root, err)
	}
	// Every lock was taken after the first read. A node whose committed
	// revision is the same now was not changed in between, so its lock
	// pinned the state the first read saw. (Commits that changed only
	// attributes or the queue do not force a retry.)
	again, err := s.fetchWith(ctx, s.yc, []string{"type", "id", "revision"})
	if err != nil {
		return nil, err
	}
	if again.consumedID != st.consumedID || again.consumedRev != st.consumedRev {
		return nil, fmt.Errorf("%w: consumed ids changed", errRetrySnapshot)
	}
	for name, t := range st.tables {
		if a := again.tables[name]; a == nil || a.ID != t.ID || a.Revision != t.Revision {
			return nil, fmt.Errorf("%w: table %q changed", errRetrySnapshot, name)
		}
	}
	return &snapshot{s: s, tx: tx, st: st}, nil
}

// lockAll takes snapshot locks on nodes by id, 16 at a time.
func lockAll(ctx context.Context, tx yt.Tx, ids []yt.NodeID) error {
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if _, err := tx.LockNode(ctx, id.YPath(), yt.LockSnapshot, nil); err != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("snapshot lock %s: %w", id, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

// Snapshot returns a consistent view of the latest generation.
func (s *Store) Snapshot(ctx context.Context) (pillar.Snapshot, error) {
	return s.takeSnapshot(ctx)
}

func (sn *snapshot) Info() pillar.Info {
	return pillar.Info{Backend: "yt", Root: string(sn.s.root), Partitions: sn.s.meta.Partitions, Format: sn.s.meta.Format, Generation: sn.st.gen}
}

// Release aborts the snapshot transaction (its locks go with it).
func (sn *snapshot) Release() {
	sn.once.Do(func() {
		if sn.tx != nil {
			sn.tx.Abort()
		}
	})
}

func schemaString(s *schema.Schema) string {
	if s == nil {
		return ""
	}
	parts := make([]string, 0, len(s.Columns))
	for _, c := range s.Columns {
		parts = append(parts, c.Name+":"+string(c.Type))
	}
	return strings.Join(parts, ", ")
}

func (t *tableMeta) info() pillar.TableInfo {
	ti := pillar.TableInfo{Name: t.name, Rows: t.RowCount, Bytes: t.Bytes, Schema: schemaString(t.Schema), Files: int(t.ChunkCount), Generation: t.Generation}
	if t.Schema != nil {
		ti.SortedBy = t.Schema.KeyColumns()
	}
	if len(ti.SortedBy) == 0 {
		ti.SortedBy = nil
	}
	return ti
}

func (sn *snapshot) Tables(ctx context.Context) ([]pillar.TableInfo, error) {
	out := make([]pillar.TableInfo, 0, len(sn.st.tables))
	for name, t := range sn.st.tables {
		if ls := pillar.LayersOf(sn, name); ls != nil {
			ti, err := pillar.MergedTableInfo(ctx, sn, name, ls)
			if err != nil {
				return nil, fmt.Errorf("ytstore %s: %w", sn.s.root, err)
			}
			out = append(out, ti)
			continue
		}
		out = append(out, t.info())
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
			return pillar.TableInfo{}, fmt.Errorf("ytstore %s: %w", sn.s.root, err)
		}
		return ti, nil
	}
	t, ok := sn.st.tables[name]
	if !ok {
		return pillar.TableInfo{}, fmt.Errorf("ytstore %s: table %q: %w", sn.s.root, name, pillar.ErrNotFound)
	}
	return t.info(), nil
}

// ReadTable reads the pinned table by node id, inside the snapshot
// transaction, so a table replaced or dropped since still reads as it was.
// A layered table reads as one sorted merged stream of its pinned layers
// (r selects merged rows).
func (sn *snapshot) ReadTable(ctx context.Context, name string, r *pillar.Range) (pillar.RowReader, error) {
	if ls := pillar.LayersOf(sn, name); ls != nil {
		rr, err := pillar.OpenMerged(ctx, sn, name, ls, r)
		if err != nil {
			return nil, fmt.Errorf("ytstore %s: %w", sn.s.root, err)
		}
		return rr, nil
	}
	return sn.RawRead(ctx, name, r)
}

// RawTable implements pillar.LayerSource.
func (sn *snapshot) RawTable(name string) (pillar.TableInfo, bool) {
	t, ok := sn.st.tables[name]
	if !ok {
		return pillar.TableInfo{}, false
	}
	return t.info(), true
}

// RawTablesUnder implements pillar.LayerSource.
func (sn *snapshot) RawTablesUnder(prefix string) []string {
	var out []string
	for name := range sn.st.tables {
		if strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// RawReadKeys implements pillar.LayerSource: the rows decode into
// pillar.DeletedKey (YSON skips the other columns).
func (sn *snapshot) RawReadKeys(ctx context.Context, name string, r *pillar.Range) (pillar.RowReader, error) {
	return sn.RawRead(ctx, name, r)
}

// RawRead implements pillar.LayerSource: the table as stored.
func (sn *snapshot) RawRead(ctx context.Context, name string, r *pillar.Range) (pillar.RowReader, error) {
	t, ok := sn.st.tables[name]
	if !ok {
		return nil, fmt.Errorf("ytstore %s: table %q: %w", sn.s.root, name, pillar.ErrNotFound)
	}
	start, end := int64(0), t.RowCount
	if r != nil {
		start, end = r.Start, r.End
		if start < 0 || end > t.RowCount || start > end {
			return nil, fmt.Errorf("ytstore %s: table %q: range [%d,%d) outside [0,%d)", sn.s.root, name, start, end, t.RowCount)
		}
	}
	if start == end {
		return &emptyReader{}, nil
	}
	p := ypath.NewRich(string(t.ID.YPath())).AddRange(ypath.Interval(ypath.RowIndex(start), ypath.RowIndex(end)))
	tr, err := sn.tx.ReadTable(ctx, p, nil)
	if err != nil {
		return nil, fmt.Errorf("ytstore %s: table %q: %w", sn.s.root, name, err)
	}
	return &rowReader{TableReader: tr, root: sn.s.root, table: name}, nil
}

type rowReader struct {
	yt.TableReader
	root  ypath.Path
	table string
	row   int64
}

func (r *rowReader) Next() bool {
	ok := r.TableReader.Next()
	if ok {
		r.row++
	}
	return ok
}

func (r *rowReader) Scan(dst any) error {
	if err := r.TableReader.Scan(dst); err != nil {
		return fmt.Errorf("ytstore %s: table %q row %d of the read: %w", r.root, r.table, r.row-1, err)
	}
	return nil
}

func (r *rowReader) Err() error {
	if err := r.TableReader.Err(); err != nil {
		return fmt.Errorf("ytstore %s: table %q: %w", r.root, r.table, err)
	}
	return nil
}

type emptyReader struct{}

func (emptyReader) Next() bool         { return false }
func (emptyReader) Scan(dst any) error { return errors.New("ytstore: Scan without a successful Next") }
func (emptyReader) Err() error         { return nil }
func (emptyReader) Close() error       { return nil }

func (sn *snapshot) Attr(ctx context.Context, name string, dst any) error {
	a, ok := sn.st.attrs[name]
	if !ok {
		return fmt.Errorf("ytstore %s: attribute %q: %w", sn.s.root, name, pillar.ErrNotFound)
	}
	if err := json.Unmarshal(a.value, dst); err != nil {
		return fmt.Errorf("ytstore %s: attribute %q: %w", sn.s.root, name, err)
	}
	return nil
}

func (sn *snapshot) Attrs(ctx context.Context) (map[string][]byte, error) {
	out := make(map[string][]byte, len(sn.st.attrs))
	for k, v := range sn.st.attrs {
		out[k] = append([]byte(nil), v.value...)
	}
	return out, nil
}

func (sn *snapshot) checkPartition(p int) error {
	if p < 0 || p >= sn.s.meta.Partitions {
		return fmt.Errorf("ytstore %s: partition %d out of range [0,%d)", sn.s.root, p, sn.s.meta.Partitions)
	}
	return nil
}

func (sn *snapshot) QueueEnd(ctx context.Context, partition int) (int64, error) {
	if err := sn.checkPartition(partition); err != nil {
		return 0, err
	}
	return sn.st.queueEnd[partition], nil
}

// ReadQueue reads rows [from, from+limit) of the partition's queue table,
// cut at the snapshot's end. The queue only grows (rows are appended under
// the commit lock and never rewritten), so the rows below the end are the
// same in every later state and are read outside the snapshot transaction.
func (sn *snapshot) ReadQueue(ctx context.Context, partition int, from int64, limit int) ([]pillar.ExportRecord, error) {
	if err := sn.checkPartition(partition); err != nil {
		return nil, err
	}
	end := sn.st.queueEnd[partition]
	if limit <= 0 || from >= end {
		return nil, nil
	}
	if from < 0 {
		from = 0
	}
	to := min(end, from+int64(limit))
	p := ypath.NewRich(string(queuePath(sn.s.root, partition))).AddRange(ypath.Interval(ypath.RowIndex(from), ypath.RowIndex(to)))
	tr, err := sn.s.yc.ReadTable(ctx, p, nil)
	if err != nil {
		return nil, fmt.Errorf("ytstore %s: queue partition %d: %w", sn.s.root, partition, err)
	}
	defer tr.Close()
	out := make([]pillar.ExportRecord, 0, to-from)
	for tr.Next() {
		var rec pillar.ExportRecord
		if err := tr.Scan(&rec); err != nil {
			return nil, fmt.Errorf("ytstore %s: queue partition %d row %d: %w", sn.s.root, partition, from+int64(len(out)), err)
		}
		if want := from + int64(len(out)); rec.Offset != want || int(rec.Partition) != partition {
			return nil, fmt.Errorf("ytstore %s: queue partition %d row %d holds partition %d offset %d: the queue table is damaged", sn.s.root, partition, want, rec.Partition, rec.Offset)
		}
		out = append(out, rec)
	}
	if err := tr.Err(); err != nil {
		return nil, fmt.Errorf("ytstore %s: queue partition %d: %w", sn.s.root, partition, err)
	}
	if int64(len(out)) != to-from {
		return nil, fmt.Errorf("ytstore %s: queue partition %d: read %d rows of [%d,%d)", sn.s.root, partition, len(out), from, to)
	}
	return out, nil
}

// Consumed looks the id up in the pinned consumed-id directory.
func (sn *snapshot) Consumed(ctx context.Context, id string) (bool, error) {
	ok, err := sn.tx.NodeExists(ctx, sn.st.consumedID.YPath().Child(encodeName(id)), nil)
	if err != nil {
		return false, fmt.Errorf("ytstore %s: consumed %q: %w", sn.s.root, id, err)
	}
	return ok, nil
}
