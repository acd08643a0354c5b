package ytstore

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"time"

	"go.ytsaurus.tech/yt/go/mapreduce/spec"
	"go.ytsaurus.tech/yt/go/ypath"
	"go.ytsaurus.tech/yt/go/yson"
	"go.ytsaurus.tech/yt/go/yt"
	"go.ytsaurus.tech/yt/go/yterrors"

	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/internal/writeset"
)

// tx is one store transaction: a snapshot (the Begin state, for reads),
// the master transaction every change is made in, and the write-set (one
// staging table per writer).
type tx struct {
	*snapshot
	ytx yt.Tx
	ws  *writeset.Set[ypath.Path]
}

// YTTx returns the master transaction, so that jobs.YT runs operations
// inside it: their outputs commit (or vanish) with the store transaction.
func (t *tx) YTTx() yt.Tx { return t.ytx }

// Begin starts a transaction reading the latest generation.
func (s *Store) Begin(ctx context.Context) (pillar.Tx, error) {
	sn, err := s.takeSnapshot(ctx)
	if err != nil {
		return nil, err
	}
	ytx, err := s.beginTx(ctx)
	if err != nil {
		sn.Release()
		return nil, fmt.Errorf("ytstore %s: begin: %w", s.root, err)
	}
	return &tx{snapshot: sn, ytx: ytx, ws: writeset.New[ypath.Path]()}, nil
}

func (t *tx) errf(format string, a ...any) error {
	return fmt.Errorf("ytstore %s: tx %s: %w", t.s.root, t.ytx.ID(), fmt.Errorf(format, a...))
}

func (t *tx) stagingDir() ypath.Path { return t.s.stagingPath().Child(t.ytx.ID().String()) }

func (t *tx) WriteTable(ctx context.Context, name string, rowType any, opts *pillar.WriteOptions) (pillar.RowWriter, error) {
	if err := validTableName(name); err != nil {
		return nil, t.errf("%w", err)
	}
	rt, err := writeset.RowType(name, rowType)
	if err != nil {
		return nil, t.errf("%w", err)
	}
	if err := t.replaceLayers(ctx, name, opts); err != nil {
		return nil, err
	}
	var sortedBy []string
	if opts != nil {
		sortedBy = opts.SortedBy
	}
	sch, err := SchemaFor(rowType, sortedBy)
	if err != nil {
		return nil, t.errf("table %q: %w", name, err)
	}
	var w yt.TableWriter
	part, err := t.ws.Write(name, rt, opts, t.baseRowType, func(_ *writeset.Table[ypath.Path], n int) (ypath.Path, error) {
		path := t.stagingDir().Child(fmt.Sprintf("w%05d", n))
		if _, err := t.ytx.CreateNode(ctx, path, yt.NodeTable, &yt.CreateNodeOptions{Recursive: true, Attributes: map[string]any{"schema": sch}}); err != nil {
			return "", fmt.Errorf("create staging table: %w", err)
		}
		var err error
		if w, err = t.ytx.WriteTable(ctx, path, nil); err != nil {
			return "", fmt.Errorf("open writer: %w", err)
		}
		return path, nil
	})
	if err != nil {
		return nil, t.errf("%w", err)
	}
	return &rowWriter{t: t, table: name, w: w, rt: rt, part: part}, nil
}

// baseRowType is the row type a table had when the Tx began.
func (t *tx) baseRowType(name string) (string, bool) {
	if old, ok := t.st.tables[name]; ok && old.RowType != "" {
		return old.RowType, true
	}
	return "", false
}

type rowWriter struct {
	t     *tx
	table string
	w     yt.TableWriter
	rt    reflect.Type
	part  *writeset.Part[ypath.Path]
	rows  int64
	err   error // first error; every later call returns it
	ended bool
}

func (w *rowWriter) Write(row any) error {
	if w.err != nil {
		return w.err
	}
	if w.ended {
		w.err = fmt.Errorf("ytstore: table %q: Write after Close", w.table)
		return w.err
	}
	rt := reflect.TypeOf(row)
	if rt != w.rt && (rt == nil || rt.Kind() != reflect.Pointer || rt.Elem() != w.rt) {
		w.err = fmt.Errorf("ytstore: table %q: row of type %T, table rows are %s", w.table, row, w.rt)
		return w.err
	}
	if err := w.w.Write(row); err != nil {
		w.err = fmt.Errorf("ytstore: table %q row %d: %w", w.table, w.rows, err)
		return w.err
	}
	w.rows++
	return nil
}

func (w *rowWriter) Close() error {
	if w.ended {
		return w.err
	}
	w.ended = true
	if w.err != nil {
		_ = w.w.Rollback()
		return w.err
	}
	if err := w.w.Commit(); err != nil {
		w.err = fmt.Errorf("ytstore: table %q: close: %w", w.table, err)
		return w.err
	}
	w.t.ws.Closed(w.part, nil)
	return nil
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
	_, existed := t.st.tables[name]
	return t.wrap(t.ws.Drop(name, existed))
}

func (t *tx) SetAttr(ctx context.Context, name string, value any) error {
	return t.wrap(t.ws.SetAttr(name, value))
}

func (t *tx) DeleteAttr(ctx context.Context, name string) error { return t.wrap(t.ws.DeleteAttr(name)) }

func (t *tx) ExpectAttr(ctx context.Context, name string) error { return t.wrap(t.ws.ExpectAttr(name)) }

func (t *tx) Enqueue(ctx context.Context, recs ...pillar.ExportRecord) error {
	return t.wrap(t.ws.Enqueue(t.s.meta.Partitions, recs...))
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

// Abort aborts the master transaction (staging tables and operation
// outputs vanish with it) and releases the snapshot.
func (t *tx) Abort() error {
	if !t.ws.Finish() {
		return nil
	}
	_ = t.ytx.Abort()
	t.Release()
	return nil
}

// Commit makes the transaction's changes visible at once, or none of them:
// every change is made inside the master transaction, whose commit is
// atomic. The steps (see doc.go): take the commit lock, check for
// conflicts, put the written tables in place, set attributes, append the
// queue, mark consumed ids, advance the generation, commit.
func (t *tx) Commit(ctx context.Context) (err error) {
	if !t.ws.Finish() {
		return t.errf("commit: %w", pillar.ErrTxDone)
	}
	defer func() {
		if err != nil {
			_ = t.ytx.Abort()
			if errors.Is(err, pillar.ErrConflict) {
				t.s.stats.conflicts.Add(1)
			}
		} else {
			t.s.stats.commits.Add(1)
		}
		t.Release()
	}()
	if err := t.ws.CheckClosed(); err != nil {
		return t.errf("%w", err)
	}
	if err := ctx.Err(); err != nil {
		return t.errf("commit: %w", err)
	}
	gen, err := t.lockCommit(ctx)
	if err != nil {
		return err
	}
	trunk, opWritten, err := t.checkConflicts(ctx)
	if err != nil {
		return err
	}
	next := gen + 1
	if err := t.applyTables(ctx, trunk, opWritten, next); err != nil {
		return err
	}
	if err := t.applyAttrs(ctx); err != nil {
		return err
	}
	if err := t.applyQueue(ctx); err != nil {
		return err
	}
	for _, id := range t.ws.Consumed() {
		if _, err := t.ytx.CreateNode(ctx, t.s.consumedPath().Child(encodeName(id)), yt.NodeDocument,
			&yt.CreateNodeOptions{IgnoreExisting: true, Attributes: map[string]any{"value": next}}); err != nil {
			return t.errf("commit: consumed %q: %w", id, err)
		}
	}
	if len(t.ws.Tables()) > 0 {
		if err := t.ytx.RemoveNode(ctx, t.stagingDir(), &yt.RemoveNodeOptions{Recursive: true, Force: true}); err != nil {
			return t.errf("commit: remove staging: %w", err)
		}
	}
	if err := t.ytx.SetNode(ctx, t.s.genPath(), next, nil); err != nil {
		return t.errf("commit: generation: %w", err)
	}
	if err := t.ytx.Commit(); err != nil {
		return conflictErr(t.s.root, fmt.Sprintf("tx %s: commit", t.ytx.ID()), err)
	}
	t.s.opts.Logger.Debug("ytstore: committed", "root", string(t.s.root), "generation", next,
		"tables", len(t.ws.Tables())+len(opWritten), "attrs", len(t.ws.Attrs()), "queued", t.ws.Queued())
	return nil
}

// lockCommit takes the exclusive commit lock (on the generation node) in
// the master transaction, waiting for other commits to finish, and returns
// the generation read under it.
func (t *tx) lockCommit(ctx context.Context) (int64, error) {
	res, err := t.ytx.LockNode(ctx, t.s.genPath(), yt.LockExclusive, &yt.LockNodeOptions{Waitable: true})
	if err != nil {
		return 0, t.errf("commit lock: %w", err)
	}
	deadline := time.Now().Add(t.s.opts.LockTimeout)
	lockState := ypath.Path("#" + res.LockID.String()).Attr("state")
	waited := false
	for {
		var state string
		if err := t.s.yc.GetNode(ctx, lockState, &state, nil); err != nil {
			return 0, t.errf("commit lock: %w", err)
		}
		if state == "acquired" {
			break
		}
		if !waited {
			waited = true
			t.s.stats.lockWaits.Add(1)
		}
		if time.Now().After(deadline) {
			return 0, t.errf("commit lock: another commit held it for over %s", t.s.opts.LockTimeout)
		}
		select {
		case <-ctx.Done():
			return 0, t.errf("commit lock: %w", ctx.Err())
		case <-time.After(t.s.opts.PollInterval):
		}
	}
	var gen int64
	if err := t.ytx.GetNode(ctx, t.s.genPath(), &gen, nil); err != nil {
		return 0, t.errf("commit: read generation: %w", err)
	}
	return gen, nil
}

func sameNode(a, b *tableMeta) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.ID == b.ID && a.Revision == b.Revision
}

// checkConflicts runs under the commit lock, so the committed state (trunk)
// cannot move. A table this Tx changes (through a writer, a drop, or an
// operation that ran in its master transaction) or an attribute it sets,
// deletes or expects must be the node it was at Begin, at the same
// revision; otherwise ErrConflict. It returns the trunk state and the
// tables operations wrote.
func (t *tx) checkConflicts(ctx context.Context) (*state, []string, error) {
	trunk, err := t.s.fetch(ctx, t.s.yc)
	if err != nil {
		return nil, nil, err
	}
	view, err := t.s.fetchContent(ctx, t.ytx)
	if err != nil {
		return nil, nil, err
	}
	tcontent := map[string]contentKey{}
	for name, tm := range trunk.tables {
		tcontent[name] = makeContentKey(tm.ID, tm.ContentRev, tm.Revision)
	}
	var opWritten []string
	for name, v := range view {
		if t.ws.Touches(name) {
			continue
		}
		if c, ok := tcontent[name]; !ok || c != v {
			opWritten = append(opWritten, name)
		}
	}
	for name := range tcontent {
		if _, ok := view[name]; !ok && !t.ws.Touches(name) {
			opWritten = append(opWritten, name) // removed inside the transaction
		}
	}
	sort.Strings(opWritten)
	var names []string
	for _, tc := range t.ws.Tables() {
		names = append(names, tc.Name)
	}
	names = append(names, opWritten...)
	for _, name := range names {
		if b, c := t.st.tables[name], trunk.tables[name]; !sameNode(b, c) {
			g := int64(0)
			if c != nil {
				g = c.Generation
			}
			return nil, nil, fmt.Errorf("ytstore %s: table %q changed (generation %d) since this transaction began at %d: %w",
				t.s.root, name, g, t.st.gen, pillar.ErrConflict)
		}
	}
	for _, a := range t.ws.Attrs() {
		name := a.Name
		b, bok := t.st.attrs[name]
		c, cok := trunk.attrs[name]
		if bok != cok || b.id != c.id || b.revision != c.revision {
			return nil, nil, fmt.Errorf("ytstore %s: attribute %q changed since this transaction began at generation %d: %w",
				t.s.root, name, t.st.gen, pillar.ErrConflict)
		}
	}
	return trunk, opWritten, nil
}

type contentKey struct {
	id  yt.NodeID
	rev uint64
}

// makeContentKey identifies a table's contents: its node id and
// @content_revision, or @revision on a cluster without content revisions
// (then an attribute change or a lock that branches the node counts too:
// conservative, it can only add conflicts).
func makeContentKey(id yt.NodeID, content, rev uint64) contentKey {
	if content == 0 {
		content = rev
	}
	return contentKey{id, content}
}

// fetchContent maps each user table to its node id and content revision,
// as c (the master transaction or the trunk) sees it.
func (s *Store) fetchContent(ctx context.Context, c yt.CypressClient) (map[string]contentKey, error) {
	var root contentNode
	if err := c.GetNode(ctx, s.root, &root, &yt.GetNodeOptions{Attributes: []string{"type", "id", "content_revision", "revision"}}); err != nil {
		return nil, fmt.Errorf("ytstore %s: read the store: %w", s.root, err)
	}
	kids, err := decodeContent(root.Value)
	if err != nil {
		return nil, fmt.Errorf("ytstore %s: %w", s.root, err)
	}
	out := map[string]contentKey{}
	var walk func(prefix string, kids map[string]contentNode) error
	walk = func(prefix string, kids map[string]contentNode) error {
		for name, n := range kids {
			if prefix == "" && name == internalDir {
				continue
			}
			switch n.Type {
			case yt.NodeTable:
				out[prefix+name] = makeContentKey(n.ID, n.ContentRevision, n.Revision)
			case yt.NodeMap:
				sub, err := decodeContent(n.Value)
				if err != nil {
					return err
				}
				if err := walk(prefix+name+"/", sub); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return out, walk("", kids)
}

type contentNode struct {
	Type            yt.NodeType   `yson:"type,attr"`
	ID              yt.NodeID     `yson:"id,attr"`
	ContentRevision uint64        `yson:"content_revision,attr"`
	Revision        uint64        `yson:"revision,attr"`
	Value           yson.RawValue `yson:",value"`
}

func decodeContent(raw yson.RawValue) (map[string]contentNode, error) {
	var kids map[string]contentNode
	if err := yson.Unmarshal(raw, &kids); err != nil {
		return nil, err
	}
	return kids, nil
}

func isResolve(err error) bool { return yterrors.ContainsResolveError(err) }

// applyTables puts each written table in place: one replacing writer's
// staging table is moved over the table; several writers, or an append,
// are concatenated in writer order by an ordered merge operation inside the
// master transaction. Dropped tables are removed.
func (t *tx) applyTables(ctx context.Context, trunk *state, opWritten []string, next int64) error {
	for _, ch := range t.ws.Tables() {
		name := ch.Name
		dst := t.s.tablePath(name)
		existing := trunk.tables[name]
		if ch.Drop {
			if existing != nil {
				if err := t.ytx.RemoveNode(ctx, dst, &yt.RemoveNodeOptions{Force: true}); err != nil {
					return conflictErr(t.s.root, fmt.Sprintf("drop table %q", name), err)
				}
			}
			continue
		}
		appendTo := ch.Mode == pillar.Append && existing != nil
		final, err := SchemaFor(reflect.New(ch.RowType).Interface(), ch.SortedBy)
		if err != nil {
			return t.errf("table %q: %w", name, err)
		}
		if appendTo {
			var oldKeys []string
			if existing.Schema != nil {
				oldKeys = existing.Schema.KeyColumns()
			}
			if len(ch.SortedBy) == 0 || !slices.Equal(oldKeys, ch.SortedBy) {
				final = unsorted(final) // an append breaks any claimed order
			}
		}
		if !appendTo && len(ch.Parts) == 1 {
			if _, err := t.ytx.MoveNode(ctx, ch.Parts[0].Staged, dst, &yt.MoveNodeOptions{Recursive: true, Force: true}); err != nil {
				return conflictErr(t.s.root, fmt.Sprintf("table %q", name), err)
			}
		} else {
			var inputs []ypath.YPath
			if appendTo {
				inputs = append(inputs, dst)
			} else if _, err := t.ytx.CreateNode(ctx, dst, yt.NodeTable, &yt.CreateNodeOptions{Recursive: true, Force: true, Attributes: map[string]any{"schema": final}}); err != nil {
				return conflictErr(t.s.root, fmt.Sprintf("table %q", name), err)
			}
			for _, p := range ch.Parts {
				inputs = append(inputs, p.Staged)
			}
			out := ypath.NewRich(string(dst)).SetSchema(final)
			if err := t.merge(ctx, name, inputs, out); err != nil {
				return err
			}
		}
		if err := t.ytx.SetNode(ctx, dst.Attr(attrRowType), ch.RowType.String(), nil); err != nil {
			return conflictErr(t.s.root, fmt.Sprintf("table %q", name), err)
		}
		if err := t.ytx.SetNode(ctx, dst.Attr(attrGeneration), next, nil); err != nil {
			return conflictErr(t.s.root, fmt.Sprintf("table %q", name), err)
		}
	}
	for _, name := range opWritten {
		err := t.ytx.SetNode(ctx, t.s.tablePath(name).Attr(attrGeneration), next, nil)
		if err != nil && !isResolve(err) {
			return conflictErr(t.s.root, fmt.Sprintf("table %q", name), err)
		}
	}
	return nil
}

// merge runs an ordered merge of inputs into out inside the master
// transaction and waits for it.
func (t *tx) merge(ctx context.Context, table string, inputs []ypath.YPath, out ypath.YPath) error {
	s := spec.Merge()
	s.Title = fmt.Sprintf("pillar: ytstore commit: table %s", table)
	s.MergeMode = "ordered"
	s.Pool = t.s.opts.Pool
	s.InputTablePaths = inputs
	s.OutputTablePath = out
	t.s.stats.merges.Add(1)
	id, err := t.ytx.StartOperation(ctx, yt.OperationMerge, s, nil)
	if err != nil {
		return conflictErr(t.s.root, fmt.Sprintf("table %q: start merge", table), err)
	}
	for {
		st, err := t.s.yc.GetOperation(ctx, id, &yt.GetOperationOptions{Attributes: []string{"state", "result"}})
		if err != nil {
			return t.errf("table %q: merge %s: %w", table, id, err)
		}
		if st.State.IsFinished() {
			if st.State != yt.StateCompleted {
				if st.Result != nil && st.Result.Error != nil {
					return t.errf("table %q: merge %s %s: %w", table, id, st.State, st.Result.Error)
				}
				return t.errf("table %q: merge %s finished in state %s", table, id, st.State)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			_ = t.s.yc.AbortOperation(context.WithoutCancel(ctx), id, nil)
			return t.errf("table %q: merge %s: %w", table, id, ctx.Err())
		case <-time.After(t.s.opts.PollInterval):
		}
	}
}

// applyAttrs writes each set attribute as a document node (created or
// replaced) and removes deleted ones, in name order.
func (t *tx) applyAttrs(ctx context.Context) error {
	for _, a := range t.ws.Attrs() {
		name := a.Name
		p := t.s.attrsPath().Child(encodeName(name))
		switch {
		case a.Expect:
		case a.Delete:
			if err := t.ytx.RemoveNode(ctx, p, &yt.RemoveNodeOptions{Force: true}); err != nil {
				return conflictErr(t.s.root, fmt.Sprintf("attribute %q", name), err)
			}
		default:
			if _, err := t.ytx.CreateNode(ctx, p, yt.NodeDocument, &yt.CreateNodeOptions{Force: true, Attributes: map[string]any{"value": string(a.Value)}}); err != nil {
				return conflictErr(t.s.root, fmt.Sprintf("attribute %q", name), err)
			}
		}
	}
	return nil
}

// applyQueue appends each partition's records to its queue table. Under
// the commit lock the table's row count is the next offset.
func (t *tx) applyQueue(ctx context.Context) error {
	parts, byPart := t.ws.Queue()
	now := time.Now().UnixMilli()
	for _, p := range parts {
		if err := t.s.ensureQueueSchema(ctx, p); err != nil {
			return t.errf("commit: %w", err)
		}
		path := queuePath(t.s.root, p)
		var first int64
		if err := t.ytx.GetNode(ctx, path.Attr("row_count"), &first, nil); err != nil {
			return t.errf("commit: export queue partition %d: %w", p, err)
		}
		w, err := t.ytx.WriteTable(ctx, ypath.NewRich(string(path)).SetAppend(), nil)
		if err != nil {
			return conflictErr(t.s.root, fmt.Sprintf("export queue partition %d", p), err)
		}
		for i, r := range byPart[p] {
			r.Offset = first + int64(i)
			r.CommittedAt = now
			if err := w.Write(&r); err != nil {
				_ = w.Rollback()
				return t.errf("commit: export queue partition %d: %w", p, err)
			}
		}
		if err := w.Commit(); err != nil {
			return conflictErr(t.s.root, fmt.Sprintf("export queue partition %d", p), err)
		}
	}
	return nil
}
