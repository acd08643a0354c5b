package ytstore

// This file holds a FAKE YTsaurus cluster: a yt.Client keeping Cypress in
// memory, with master transactions (changes visible to their transaction,
// applied to the trunk at commit), revisions, snapshot locks that pin a
// node for their transaction, waitable exclusive locks, static tables of
// YSON rows and ordered merge operations. It records every call. It stands
// in for a cluster only because none can run on this machine; it models the
// YTsaurus behaviour the store relies on as the documentation describes
// it, and a real cluster (YT_PROXY, see integration_test.go) is the test
// that counts.

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"

	"go.ytsaurus.tech/yt/go/guid"
	"go.ytsaurus.tech/yt/go/mapreduce/spec"
	"go.ytsaurus.tech/yt/go/ypath"
	"go.ytsaurus.tech/yt/go/yson"
	"go.ytsaurus.tech/yt/go/yt"
	"go.ytsaurus.tech/yt/go/yterrors"
)

type fnode struct {
	id     yt.NodeID
	typ    yt.NodeType
	attrs  map[string]any
	value  any      // documents
	rows   [][]byte // tables
	rev    uint64
	crev   uint64
	dirty  bool // changed in a transaction: new revision at commit
	cdirty bool // content changed
}

func (n *fnode) clone() *fnode {
	c := *n
	c.attrs = map[string]any{}
	for k, v := range n.attrs {
		c.attrs[k] = v
	}
	c.rows = append([][]byte(nil), n.rows...)
	return &c
}

type flock struct {
	id    guid.GUID
	path  string
	tx    *fakeTx
	state string
}

type fakeYT struct {
	yt.Client // nil: a method not implemented below panics (an unexpected call)

	mu     sync.Mutex
	nodes  map[string]*fnode // trunk, by path
	rev    uint64
	locks  []*flock
	ntx    int
	calls  []string
	record bool
	// noContentRev leaves out @content_revision, as older clusters do.
	noContentRev bool
	// afterTxGet, when set, runs once after the next `get` inside a
	// transaction (tests: a commit landing between two steps).
	afterTxGet func()
	txNames    map[string]string // tx id → "tx1"...
}

func newFakeYT() *fakeYT {
	c := &fakeYT{nodes: map[string]*fnode{}, txNames: map[string]string{}}
	c.nodes["/"] = &fnode{id: yt.NodeID(guid.New()), typ: yt.NodeMap, attrs: map[string]any{}}
	return c
}

var guidRE = regexp.MustCompile(`[0-9a-f]{1,8}-[0-9a-f]{1,8}-[0-9a-f]{1,8}-[0-9a-f]{1,8}`)

// rec records a call with transaction ids replaced by their names and
// other GUIDs by <id>.
func (c *fakeYT) rec(tx *fakeTx, format string, a ...any) {
	if !c.record {
		return
	}
	s := fmt.Sprintf(format, a...)
	s = guidRE.ReplaceAllStringFunc(s, func(g string) string {
		if n, ok := c.txNames[g]; ok {
			return n
		}
		return "<id>"
	})
	if tx != nil {
		s = c.txNames[tx.id.String()] + ": " + s
	}
	c.calls = append(c.calls, s)
}

// touch gives a changed node a new revision (and content revision) at
// once, as the master does for a change inside a transaction, and marks it
// for another at commit.
func (c *fakeYT) touch(n *fnode, content bool) {
	c.rev++
	n.rev, n.dirty = c.rev, true
	if content {
		n.crev, n.cdirty = c.rev, true
	}
}

// view is the cluster as one transaction (or the trunk, tx nil) sees it.
type view struct {
	c  *fakeYT
	tx *fakeTx
}

func (v view) get(p string) *fnode {
	if v.tx != nil {
		if n, ok := v.tx.overlay[p]; ok {
			return n
		}
	}
	return v.c.nodes[p]
}

// mut returns the transaction's own copy of the node at p, for changing.
func (v view) mut(p string) *fnode {
	n := v.get(p)
	if n == nil {
		return nil
	}
	if v.tx == nil {
		return n
	}
	if o, ok := v.tx.overlay[p]; ok && o != nil {
		return o
	}
	c := n.clone()
	v.tx.overlay[p] = c
	return c
}

func (v view) put(p string, n *fnode) {
	if v.tx != nil {
		v.tx.overlay[p] = n
		return
	}
	v.c.nodes[p] = n
}

// touchParent records a change of the map node holding p (a child added
// or removed changes the map node, as on a master).
func (v view) touchParent(p string) {
	i := strings.LastIndex(p, "/")
	if i <= 0 {
		return
	}
	if n := v.mut(p[:i]); n != nil {
		v.c.touch(n, true)
	}
}

func (v view) del(p string) {
	for _, q := range v.paths() {
		if q == p || strings.HasPrefix(q, p+"/") {
			if v.tx != nil {
				v.tx.overlay[q] = nil
			} else {
				delete(v.c.nodes, q)
			}
		}
	}
}

func (v view) paths() []string {
	set := map[string]bool{}
	for p := range v.c.nodes {
		set[p] = true
	}
	if v.tx != nil {
		for p, n := range v.tx.overlay {
			set[p] = n != nil
		}
	}
	var out []string
	for p, ok := range set {
		if ok {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

func (v view) children(p string) []string {
	var out []string
	for _, q := range v.paths() {
		if strings.HasPrefix(q, p+"/") && !strings.Contains(q[len(p)+1:], "/") {
			out = append(out, q[len(p)+1:])
		}
	}
	return out
}

func notFound(p string) error {
	return yterrors.Err(yterrors.CodeResolveError, "node does not exist", yterrors.Attr("path", p))
}

// resolve splits a path into (node path, attribute); "#id" prefixes are
// resolved through the transaction's pinned nodes or by id.
func (v view) resolve(yp ypath.YPath) (string, string, *pinned, error) {
	s := string(yp.YPath())
	if r, ok := yp.(*ypath.Rich); ok {
		s = string(r.Path)
	}
	attr := ""
	if i := strings.Index(s, "/@"); i >= 0 {
		attr, s = s[i+2:], s[:i]
	}
	if strings.HasPrefix(s, "#") {
		id, rest, _ := strings.Cut(s[1:], "/")
		if v.tx != nil {
			if pn := v.tx.pinned[id]; pn != nil {
				return rest, attr, pn, nil
			}
		}
		for _, p := range v.paths() {
			if v.get(p).id.String() == id {
				if rest != "" {
					p += "/" + rest
				}
				return p, attr, nil, nil
			}
		}
		for _, l := range v.c.locks {
			if l.id.String() == id {
				return "lock:" + id, attr, nil, nil
			}
		}
		return "", "", nil, notFound(s)
	}
	s = strings.TrimPrefix(s, "/")
	if s == "/" || s == "" {
		return "/", attr, nil, nil
	}
	return s, attr, nil, nil
}

// pinned is a node as a snapshot lock saw it, with its children's names.
type pinned struct {
	node *fnode
	kids map[string]bool
}

func (v view) parentOK(p string, recursive bool) error {
	i := strings.LastIndex(p, "/")
	if i <= 0 {
		return nil
	}
	parent := p[:i]
	if v.get(parent) != nil {
		return nil
	}
	if !recursive {
		return notFound(parent)
	}
	if err := v.parentOK(parent, true); err != nil {
		return err
	}
	n := &fnode{id: yt.NodeID(guid.New()), typ: yt.NodeMap, attrs: map[string]any{}}
	v.c.touch(n, true)
	v.put(parent, n)
	return nil
}

func (v view) CreateNode(ctx context.Context, path ypath.YPath, typ yt.NodeType, o *yt.CreateNodeOptions) (yt.NodeID, error) {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	if o == nil {
		o = &yt.CreateNodeOptions{}
	}
	p, _, _, err := v.resolve(path)
	if err != nil {
		return yt.NodeID{}, err
	}
	keys := make([]string, 0, len(o.Attributes))
	for k := range o.Attributes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	v.c.rec(v.tx, "create %s %s recursive=%v ignore_existing=%v force=%v attributes=%v", typ, p, o.Recursive, o.IgnoreExisting, o.Force, keys)
	if old := v.get(p); old != nil {
		if o.IgnoreExisting {
			return old.id, nil
		}
		if !o.Force {
			return yt.NodeID{}, yterrors.Err(yterrors.CodeAlreadyExists, "node already exists", yterrors.Attr("path", p))
		}
		v.del(p)
	}
	if err := v.parentOK(p, o.Recursive); err != nil {
		return yt.NodeID{}, err
	}
	n := &fnode{id: yt.NodeID(guid.New()), typ: typ, attrs: map[string]any{}}
	v.c.touch(n, true)
	for k, val := range o.Attributes {
		if k == "value" && typ == yt.NodeDocument {
			n.value = val
			continue
		}
		n.attrs[k] = val
	}
	v.put(p, n)
	v.touchParent(p)
	return n.id, nil
}

func (v view) NodeExists(ctx context.Context, path ypath.YPath, o *yt.NodeExistsOptions) (bool, error) {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	p, _, pn, err := v.resolve(path)
	if err != nil {
		return false, nil
	}
	v.c.rec(v.tx, "exists %s", p)
	if pn != nil {
		return p == "" || pn.kids[p], nil
	}
	return v.get(p) != nil, nil
}

func (v view) RemoveNode(ctx context.Context, path ypath.YPath, o *yt.RemoveNodeOptions) error {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	p, _, _, err := v.resolve(path)
	if err != nil {
		return err
	}
	v.c.rec(v.tx, "remove %s", p)
	if v.get(p) == nil {
		if o != nil && o.Force {
			return nil
		}
		return notFound(p)
	}
	v.del(p)
	v.touchParent(p)
	return nil
}

func (v view) MoveNode(ctx context.Context, src, dst ypath.YPath, o *yt.MoveNodeOptions) (yt.NodeID, error) {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	s, _, _, err := v.resolve(src)
	if err != nil {
		return yt.NodeID{}, err
	}
	d, _, _, err := v.resolve(dst)
	if err != nil {
		return yt.NodeID{}, err
	}
	v.c.rec(v.tx, "move %s %s", s, d)
	n := v.get(s)
	if n == nil {
		return yt.NodeID{}, notFound(s)
	}
	if v.get(d) != nil {
		if o == nil || !o.Force {
			return yt.NodeID{}, yterrors.Err(yterrors.CodeAlreadyExists, "node already exists", yterrors.Attr("path", d))
		}
		v.del(d)
	}
	if err := v.parentOK(d, o != nil && o.Recursive); err != nil {
		return yt.NodeID{}, err
	}
	m := n.clone()
	v.c.touch(m, true)
	v.del(s)
	v.put(d, m)
	v.touchParent(s)
	v.touchParent(d)
	return m.id, nil
}

func (v view) SetNode(ctx context.Context, path ypath.YPath, value any, o *yt.SetNodeOptions) error {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	p, attr, _, err := v.resolve(path)
	if err != nil {
		return err
	}
	if attr != "" {
		v.c.rec(v.tx, "set %s/@%s", p, attr)
	} else {
		v.c.rec(v.tx, "set %s", p)
	}
	n := v.mut(p)
	if n == nil {
		return notFound(p)
	}
	v.c.touch(n, attr == "")
	if attr != "" {
		n.attrs[attr] = value
		return nil
	}
	n.value = value
	return nil
}

// render builds the YSON of a node with the requested attributes.
func (v view) render(p string, n *fnode, attrs []string, pn *pinned) any {
	a := map[string]any{}
	for _, name := range attrs {
		switch name {
		case "type":
			a[name] = n.typ
		case "id":
			a[name] = n.id
		case "revision":
			a[name] = n.rev
		case "content_revision":
			if !v.c.noContentRev {
				a[name] = n.crev
			}
		case "row_count":
			if n.typ == yt.NodeTable {
				a[name] = int64(len(n.rows))
			}
		case "chunk_count":
			if n.typ == yt.NodeTable {
				a[name] = int64(min(len(n.rows), 1))
			}
		case "compressed_data_size":
			if n.typ == yt.NodeTable {
				size := 0
				for _, r := range n.rows {
					size += len(r)
				}
				a[name] = int64(size)
			}
		default:
			if val, ok := n.attrs[name]; ok {
				a[name] = val
			}
		}
	}
	var value any
	switch n.typ {
	case yt.NodeDocument:
		value = n.value
	case yt.NodeMap:
		if opaque, _ := n.attrs["opaque"].(bool); opaque && pn == nil {
			break
		}
		kids := map[string]any{}
		for _, k := range v.children(p) {
			kids[k] = v.render(p+"/"+k, v.get(p+"/"+k), attrs, nil)
		}
		value = kids
	}
	return &yson.ValueWithAttrs{Attrs: a, Value: value}
}

func (v view) GetNode(ctx context.Context, path ypath.YPath, result any, o *yt.GetNodeOptions) error {
	v.c.mu.Lock()
	if hook := v.c.afterTxGet; hook != nil && v.tx != nil {
		v.c.afterTxGet = nil
		defer hook()
	}
	defer v.c.mu.Unlock()
	p, attr, pn, err := v.resolve(path)
	if err != nil {
		return err
	}
	var attrs []string
	if o != nil {
		attrs = o.Attributes
	}
	if attr != "" || strings.HasSuffix(string(path.YPath()), "/@") {
		v.c.rec(v.tx, "get %s/@%s", p, attr)
	} else {
		v.c.rec(v.tx, "get %s attributes=%v", p, attrs)
	}
	var out any
	if strings.HasPrefix(p, "lock:") {
		for _, l := range v.c.locks {
			if "lock:"+l.id.String() == p {
				out = l.state
			}
		}
	} else {
		n := v.get(p)
		if pn != nil && p == "" {
			n = pn.node
		}
		if n == nil {
			return notFound(p)
		}
		switch {
		case attr == "" && strings.HasSuffix(string(path.YPath()), "/@"):
			m := map[string]any{}
			for k, val := range n.attrs {
				m[k] = val
			}
			out = m
		case attr != "":
			out = v.render(p, n, []string{attr}, nil).(*yson.ValueWithAttrs).Attrs[attr]
			if out == nil {
				return notFound(p + "/@" + attr)
			}
		default:
			out = v.render(p, n, attrs, pn)
		}
	}
	b, err := yson.Marshal(out)
	if err != nil {
		return err
	}
	return yson.Unmarshal(b, result)
}

func (v view) LockNode(ctx context.Context, path ypath.YPath, mode yt.LockMode, o *yt.LockNodeOptions) (yt.LockResult, error) {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	p, _, _, err := v.resolve(path)
	if err != nil {
		return yt.LockResult{}, err
	}
	v.c.rec(v.tx, "lock %s %s waitable=%v", p, mode, o != nil && o.Waitable)
	n := v.get(p)
	if n == nil {
		return yt.LockResult{}, notFound(p)
	}
	l := &flock{id: guid.New(), path: p, tx: v.tx, state: "acquired"}
	switch mode {
	case yt.LockSnapshot:
		pn := &pinned{node: n.clone(), kids: map[string]bool{}}
		for _, k := range v.children(p) {
			pn.kids[k] = true
		}
		v.tx.pinned[n.id.String()] = pn
	case yt.LockExclusive:
		for _, other := range v.c.locks {
			if other.path == p && other.tx != v.tx && other.state == "acquired" {
				if o == nil || !o.Waitable {
					return yt.LockResult{}, yterrors.Err(yterrors.CodeConcurrentTransactionLockConflict, "cannot take lock", yterrors.Attr("path", p))
				}
				l.state = "pending"
			}
		}
		for _, other := range v.c.locks {
			if other.path == p && other.state == "pending" {
				l.state = "pending"
			}
		}
		v.c.locks = append(v.c.locks, l)
	}
	return yt.LockResult{NodeID: n.id, LockID: l.id}, nil
}

type fakeReader struct {
	rows [][]byte
	i    int
}

func (r *fakeReader) Next() bool         { r.i++; return r.i <= len(r.rows) }
func (r *fakeReader) Scan(dst any) error { return yson.Unmarshal(r.rows[r.i-1], dst) }
func (r *fakeReader) Err() error         { return nil }
func (r *fakeReader) Close() error       { return nil }

func (v view) ReadTable(ctx context.Context, path ypath.YPath, o *yt.ReadTableOptions) (yt.TableReader, error) {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	p, _, pn, err := v.resolve(path)
	if err != nil {
		return nil, err
	}
	n := v.get(p)
	if pn != nil && p == "" {
		n = pn.node
	}
	rich, _ := path.(*ypath.Rich)
	rng := ""
	rows := [][]byte(nil)
	if n == nil {
		return nil, notFound(p)
	}
	rows = n.rows
	if rich != nil && len(rich.Ranges) == 1 {
		lo, hi := *rich.Ranges[0].Lower.RowIndex, *rich.Ranges[0].Upper.RowIndex
		rng = fmt.Sprintf("[#%d:#%d]", lo, hi)
		rows = rows[min(lo, int64(len(rows))):min(hi, int64(len(rows)))]
	}
	if pn != nil {
		p = "#pinned"
	}
	v.c.rec(v.tx, "read_table %s%s", p, rng)
	return &fakeReader{rows: rows}, nil
}

type fakeWriter struct {
	v      view
	p      string
	append bool
	rows   [][]byte
}

func (w *fakeWriter) Write(row any) error {
	// Binary YSON, as the SDK's table writer sends it (text YSON prints a
	// float32 with 6 digits).
	b, err := yson.MarshalFormat(row, yson.FormatBinary)
	if err != nil {
		return err
	}
	w.rows = append(w.rows, b)
	return nil
}

func (w *fakeWriter) Commit() error {
	w.v.c.mu.Lock()
	defer w.v.c.mu.Unlock()
	n := w.v.mut(w.p)
	if n == nil {
		return notFound(w.p)
	}
	if !w.append {
		n.rows = nil
	}
	n.rows = append(n.rows, w.rows...)
	w.v.c.touch(n, true)
	return nil
}

func (w *fakeWriter) Rollback() error { return nil }

func (v view) WriteTable(ctx context.Context, path ypath.YPath, o *yt.WriteTableOptions) (yt.TableWriter, error) {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	p, _, _, err := v.resolve(path)
	if err != nil {
		return nil, err
	}
	app := false
	if r, ok := path.(*ypath.Rich); ok && r.Append != nil {
		app = *r.Append
	}
	v.c.rec(v.tx, "write_table %s append=%v", p, app)
	if v.get(p) == nil {
		return nil, notFound(p)
	}
	return &fakeWriter{v: v, p: p, append: app}, nil
}

func (v view) StartOperation(ctx context.Context, typ yt.OperationType, sp any, o *yt.StartOperationOptions) (yt.OperationID, error) {
	s := sp.(*spec.Spec)
	var in []string
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	var rows [][]byte
	for _, ip := range s.InputTablePaths {
		p, _, _, err := v.resolve(ip)
		if err != nil {
			return yt.OperationID{}, err
		}
		in = append(in, p)
		n := v.get(p)
		if n == nil {
			return yt.OperationID{}, notFound(p)
		}
		rows = append(rows, n.rows...)
	}
	out, _, _, err := v.resolve(s.OutputTablePath)
	if err != nil {
		return yt.OperationID{}, err
	}
	v.c.rec(v.tx, "start_operation %s mode=%s inputs=%v output=%s", typ, s.MergeMode, in, out)
	n := v.mut(out)
	if n == nil {
		return yt.OperationID{}, notFound(out)
	}
	if r, ok := s.OutputTablePath.(*ypath.Rich); ok && r.Schema != nil {
		n.attrs["schema"] = *r.Schema
	}
	n.rows = rows
	v.c.touch(n, true)
	return yt.OperationID(guid.New()), nil
}

func (c *fakeYT) GetOperation(ctx context.Context, id yt.OperationID, o *yt.GetOperationOptions) (*yt.OperationStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rec(nil, "get_operation")
	return &yt.OperationStatus{ID: id, State: yt.StateCompleted}, nil
}

func (c *fakeYT) BeginTx(ctx context.Context, o *yt.StartTxOptions) (yt.Tx, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ntx++
	t := &fakeTx{c: c, id: yt.TxID(guid.New()), overlay: map[string]*fnode{}, pinned: map[string]*pinned{}, done: make(chan struct{})}
	c.txNames[t.id.String()] = fmt.Sprintf("tx%d", c.ntx)
	c.rec(nil, "start_tx %s", t.id)
	return t, nil
}

func (c *fakeYT) CreateNode(ctx context.Context, p ypath.YPath, typ yt.NodeType, o *yt.CreateNodeOptions) (yt.NodeID, error) {
	return view{c: c}.CreateNode(ctx, p, typ, o)
}
func (c *fakeYT) NodeExists(ctx context.Context, p ypath.YPath, o *yt.NodeExistsOptions) (bool, error) {
	return view{c: c}.NodeExists(ctx, p, o)
}
func (c *fakeYT) GetNode(ctx context.Context, p ypath.YPath, r any, o *yt.GetNodeOptions) error {
	return view{c: c}.GetNode(ctx, p, r, o)
}
func (c *fakeYT) ReadTable(ctx context.Context, p ypath.YPath, o *yt.ReadTableOptions) (yt.TableReader, error) {
	return view{c: c}.ReadTable(ctx, p, o)
}

// fakeTx is a FAKE master transaction (see the file comment).
type fakeTx struct {
	yt.Tx   // nil: unexpected calls panic
	c       *fakeYT
	id      yt.TxID
	overlay map[string]*fnode // nil value: removed
	pinned  map[string]*pinned
	done    chan struct{}
	ended   bool
}

func (t *fakeTx) ID() yt.TxID               { return t.id }
func (t *fakeTx) Finished() <-chan struct{} { return t.done }
func (t *fakeTx) v() view                   { return view{c: t.c, tx: t} }
func (t *fakeTx) CreateNode(ctx context.Context, p ypath.YPath, typ yt.NodeType, o *yt.CreateNodeOptions) (yt.NodeID, error) {
	return t.v().CreateNode(ctx, p, typ, o)
}
func (t *fakeTx) NodeExists(ctx context.Context, p ypath.YPath, o *yt.NodeExistsOptions) (bool, error) {
	return t.v().NodeExists(ctx, p, o)
}
func (t *fakeTx) RemoveNode(ctx context.Context, p ypath.YPath, o *yt.RemoveNodeOptions) error {
	return t.v().RemoveNode(ctx, p, o)
}
func (t *fakeTx) MoveNode(ctx context.Context, s, d ypath.YPath, o *yt.MoveNodeOptions) (yt.NodeID, error) {
	return t.v().MoveNode(ctx, s, d, o)
}
func (t *fakeTx) SetNode(ctx context.Context, p ypath.YPath, val any, o *yt.SetNodeOptions) error {
	return t.v().SetNode(ctx, p, val, o)
}
func (t *fakeTx) GetNode(ctx context.Context, p ypath.YPath, r any, o *yt.GetNodeOptions) error {
	return t.v().GetNode(ctx, p, r, o)
}
func (t *fakeTx) LockNode(ctx context.Context, p ypath.YPath, m yt.LockMode, o *yt.LockNodeOptions) (yt.LockResult, error) {
	return t.v().LockNode(ctx, p, m, o)
}
func (t *fakeTx) ReadTable(ctx context.Context, p ypath.YPath, o *yt.ReadTableOptions) (yt.TableReader, error) {
	return t.v().ReadTable(ctx, p, o)
}
func (t *fakeTx) WriteTable(ctx context.Context, p ypath.YPath, o *yt.WriteTableOptions) (yt.TableWriter, error) {
	return t.v().WriteTable(ctx, p, o)
}
func (t *fakeTx) StartOperation(ctx context.Context, typ yt.OperationType, s any, o *yt.StartOperationOptions) (yt.OperationID, error) {
	return t.v().StartOperation(ctx, typ, s, o)
}

// end releases the transaction's locks and hands pending ones on.
func (t *fakeTx) end() {
	var keep []*flock
	for _, l := range t.c.locks {
		if l.tx != t {
			keep = append(keep, l)
		}
	}
	t.c.locks = keep
	held := map[string]bool{}
	for _, l := range t.c.locks {
		if l.state == "acquired" {
			held[l.path] = true
		}
	}
	for _, l := range t.c.locks {
		if l.state == "pending" && !held[l.path] {
			l.state, held[l.path] = "acquired", true
		}
	}
	t.ended = true
	close(t.done)
}

func (t *fakeTx) Commit() error {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.c.rec(t, "commit_tx")
	if t.ended {
		return yterrors.Err("transaction is finished")
	}
	paths := make([]string, 0, len(t.overlay))
	for p := range t.overlay {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		n := t.overlay[p]
		if n == nil {
			delete(t.c.nodes, p)
			continue
		}
		if n.dirty {
			t.c.rev++
			n.rev = t.c.rev
			if n.cdirty {
				n.crev = t.c.rev
			}
			n.dirty, n.cdirty = false, false
		}
		t.c.nodes[p] = n
	}
	t.end()
	return nil
}

func (t *fakeTx) Abort() error {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.ended {
		return nil
	}
	t.c.rec(t, "abort_tx")
	t.end()
	return nil
}

// rowsOf decodes a committed table (tests).
func (c *fakeYT) tableRows(p string) [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.nodes[strings.TrimPrefix(p, "/")]; n != nil {
		return n.rows
	}
	return nil
}
