package ytfake

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"go.ytsaurus.tech/yt/go/guid"
	"go.ytsaurus.tech/yt/go/schema"
	"go.ytsaurus.tech/yt/go/ypath"
	"go.ytsaurus.tech/yt/go/yson"
	"go.ytsaurus.tech/yt/go/yt"
	"go.ytsaurus.tech/yt/go/yterrors"
)

// view is the cluster as one transaction (or the trunk, tx nil) sees it:
// a transaction sees its own branch, then its ancestors', then the trunk.
type view struct {
	c  *Cluster
	tx *Tx
}

func (v view) get(p string) *node {
	for t := v.tx; t != nil; t = t.parent {
		if n, ok := t.overlay[p]; ok {
			return n // nil: removed in t
		}
	}
	return v.c.nodes[p]
}

// mut returns the transaction's own branch of the node at p, for changing.
func (v view) mut(p string) *node {
	n := v.get(p)
	if n == nil || v.tx == nil {
		return n
	}
	if o, ok := v.tx.overlay[p]; ok && o != nil {
		return o
	}
	b := n.clone()
	v.tx.overlay[p] = b
	return b
}

func (v view) put(p string, n *node) {
	if v.tx != nil {
		v.tx.overlay[p] = n
		return
	}
	v.c.nodes[p] = n
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
	var chain []*Tx
	for t := v.tx; t != nil; t = t.parent {
		chain = append(chain, t)
	}
	for i := len(chain) - 1; i >= 0; i-- {
		for p, n := range chain[i].overlay {
			set[p] = n != nil
		}
	}
	out := make([]string, 0, len(set))
	for p, ok := range set {
		if ok {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

func (v view) children(p string) []string {
	prefix := p + "/"
	if p == "/" {
		prefix = "/"
	}
	var out []string
	for _, q := range v.paths() {
		if q != "/" && strings.HasPrefix(q, prefix) && !strings.Contains(q[len(prefix):], "/") {
			out = append(out, q[len(prefix):])
		}
	}
	return out
}

// split returns the parent and the name of p ("" parent for the root).
func split(p string) (string, string) {
	if p == "/" {
		return "", ""
	}
	i := strings.LastIndex(p, "/")
	if i <= 0 {
		return "/", p[1:]
	}
	return p[:i], p[i+1:]
}

// touchParent records a change of the map node holding p (a child added
// or removed changes the map node, as on a master).
func (v view) touchParent(p string) {
	parent, _ := split(p)
	if parent == "" {
		return
	}
	if n := v.mut(parent); n != nil {
		v.c.touch(n, true)
	}
}

// pinned is a node as a snapshot lock saw it, with its children's names.
type pinned struct {
	node *node
	kids map[string]bool
}

// resolve splits a path into (node key, attribute, whole attribute map
// asked for); "#<id>" prefixes are resolved through the transaction's
// snapshot locks or by id. c.mu is held.
func (v view) resolve(yp ypath.YPath) (p, attr string, allAttrs bool, pn *pinned, err error) {
	s := string(richOf(yp).Path)
	if i := strings.Index(s, "/@"); i >= 0 {
		attr, s = s[i+2:], s[:i]
		allAttrs = attr == ""
	}
	if strings.HasPrefix(s, "#") {
		id, rest, _ := strings.Cut(s[1:], "/")
		for t := v.tx; t != nil; t = t.parent {
			if x := t.pinned[id]; x != nil {
				return rest, attr, allAttrs, x, nil
			}
		}
		for _, q := range v.paths() {
			if v.get(q).id.String() == id {
				if rest != "" {
					q += "/" + rest
				}
				return q, attr, allAttrs, nil, nil
			}
		}
		for _, l := range v.c.locks {
			if l.id.String() == id {
				return "lock:" + id, attr, allAttrs, nil, nil
			}
		}
		return "", "", false, nil, notFound(s)
	}
	if !strings.HasPrefix(s, "//") {
		return "", "", false, nil, yterrors.Err(fmt.Sprintf("Path %q does not start with // or #", s))
	}
	return key(ypath.Path(s)), attr, allAttrs, nil, nil
}

// richOf parses a path as the cluster does: a plain string path may carry
// YPath syntax ("//t[#10:#20]", "<append=%true>//t"), which the SDK sends
// as is (ypath.Path.YPath drops it: the fake must not).
func richOf(yp ypath.YPath) *ypath.Rich {
	switch p := yp.(type) {
	case *ypath.Rich:
		return p
	case ypath.Path:
		if r, err := ypath.Parse(string(p)); err == nil {
			return r
		}
		return &ypath.Rich{Path: p}
	}
	return &ypath.Rich{Path: yp.YPath()}
}

// rowRanges turns a path's ranges into [lo, hi) row intervals of a table
// of n rows (the whole table without ranges).
func rowRanges(r *ypath.Rich, n int) ([][2]int, error) {
	if len(r.Ranges) == 0 {
		return [][2]int{{0, n}}, nil
	}
	var out [][2]int
	clamp := func(x int64) int { return int(max(0, min(x, int64(n)))) }
	for _, rg := range r.Ranges {
		lo, hi := 0, n
		switch {
		case rg.Exact != nil:
			if rg.Exact.RowIndex == nil {
				return nil, yterrors.Err("ytfake: key ranges are not modelled")
			}
			lo, hi = clamp(*rg.Exact.RowIndex), clamp(*rg.Exact.RowIndex+1)
		default:
			if rg.Lower != nil {
				if rg.Lower.RowIndex == nil {
					return nil, yterrors.Err("ytfake: key ranges are not modelled")
				}
				lo = clamp(*rg.Lower.RowIndex)
			}
			if rg.Upper != nil {
				if rg.Upper.RowIndex == nil {
					return nil, yterrors.Err("ytfake: key ranges are not modelled")
				}
				hi = clamp(*rg.Upper.RowIndex)
			}
		}
		if hi < lo {
			hi = lo
		}
		out = append(out, [2]int{lo, hi})
	}
	return out, nil
}

// makeParents creates the missing map nodes above p (Recursive). c.mu is
// held.
func (v view) makeParents(p string) error {
	parent, _ := split(p)
	if parent == "" || v.get(parent) != nil {
		if parent != "" && v.get(parent).typ != yt.NodeMap {
			return yterrors.Err(fmt.Sprintf("Node /%s is a %s, not a map node: it cannot have children", parent, v.get(parent).typ), yterrors.Attr("path", "/"+parent))
		}
		return nil
	}
	if err := v.makeParents(parent); err != nil {
		return err
	}
	if err := v.lockChild(parent); err != nil {
		return err
	}
	n := v.c.newNode(yt.NodeMap)
	v.put(parent, n)
	v.touchParent(parent)
	return v.takeLock(parent, n, yt.LockExclusive, "", "")
}

// parentOK fails as a master does when p's parent is missing and the
// request is not recursive: "create" resolves the parent path first
// (mapreduce/prepare.go creates missing output tables without Recursive,
// so a missing folder fails the operation's start).
func (v view) parentOK(p string, recursive bool) error {
	parent, _ := split(p)
	if parent == "" || v.get(parent) != nil || recursive {
		return v.makeParents(p)
	}
	// The master names the deepest node that exists and the key it lacks.
	missing := parent
	for {
		up, _ := split(missing)
		if up == "" || v.get(up) != nil {
			break
		}
		missing = up
	}
	return resolveErr(missing)
}

func (c *Cluster) enter(tx *Tx) error {
	c.expire()
	if tx != nil && tx.ended {
		return yterrors.Err(yterrors.CodeNoSuchTransaction, fmt.Sprintf("No such transaction %s", tx.id), yterrors.Attr("transaction_id", tx.id.String()))
	}
	return nil
}

func toSchema(v any) (*schema.Schema, error) {
	b, err := yson.Marshal(v)
	if err != nil {
		return nil, err
	}
	var s schema.Schema
	if err := yson.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	return &s, nil
}

func (v view) CreateNode(ctx context.Context, path ypath.YPath, typ yt.NodeType, o *yt.CreateNodeOptions) (yt.NodeID, error) {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	if err := v.c.enter(v.tx); err != nil {
		return yt.NodeID{}, err
	}
	if o == nil {
		o = &yt.CreateNodeOptions{}
	}
	p, _, _, _, err := v.resolve(path)
	if err != nil {
		return yt.NodeID{}, err
	}
	keys := make([]string, 0, len(o.Attributes))
	for k := range o.Attributes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	v.c.rec(v.tx, "create %s %s recursive=%v ignore_existing=%v force=%v attributes=%v", typ, p, o.Recursive, o.IgnoreExisting, o.Force, keys)
	switch typ {
	case yt.NodeMap, yt.NodeDocument, yt.NodeTable, yt.NodeFile:
	default:
		return yt.NodeID{}, yterrors.Err(fmt.Sprintf("ytfake: node type %q is not modelled", typ))
	}
	if old := v.get(p); old != nil {
		if o.IgnoreExisting && old.typ == typ {
			return old.id, nil
		}
		if !o.Force {
			return yt.NodeID{}, yterrors.Err(yterrors.CodeAlreadyExists, fmt.Sprintf("Node /%s already exists", p), yterrors.Attr("path", "/"+p))
		}
		if err := v.lockSubtree(p); err != nil {
			return yt.NodeID{}, err
		}
		v.del(p)
	}
	if err := v.parentOK(p, o.Recursive); err != nil {
		return yt.NodeID{}, err
	}
	if err := v.lockChild(p); err != nil {
		return yt.NodeID{}, err
	}
	n := v.c.newNode(typ)
	for k, val := range o.Attributes {
		switch {
		case k == "value" && typ == yt.NodeDocument:
			n.value = val
		case k == "schema" && typ == yt.NodeTable:
			s, err := toSchema(val)
			if err != nil {
				return yt.NodeID{}, err
			}
			n.schema = s
		default:
			n.attrs[k] = val
		}
	}
	v.put(p, n)
	v.touchParent(p)
	if err := v.takeLock(p, n, yt.LockExclusive, "", ""); err != nil {
		return yt.NodeID{}, err
	}
	return n.id, nil
}

func (v view) NodeExists(ctx context.Context, path ypath.YPath, o *yt.NodeExistsOptions) (bool, error) {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	if err := v.c.enter(v.tx); err != nil {
		return false, err
	}
	p, attr, _, pn, err := v.resolve(path)
	if err != nil {
		return false, nil
	}
	v.c.rec(v.tx, "exists %s", p)
	if pn != nil {
		if p == "" {
			return true, nil
		}
		return pn.kids[p], nil
	}
	n := v.get(p)
	if n == nil {
		return false, nil
	}
	if attr != "" {
		_, ok := v.attrsOf(p, n)[attr]
		return ok, nil
	}
	return true, nil
}

func (v view) RemoveNode(ctx context.Context, path ypath.YPath, o *yt.RemoveNodeOptions) error {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	if err := v.c.enter(v.tx); err != nil {
		return err
	}
	p, attr, _, _, err := v.resolve(path)
	if err != nil {
		return err
	}
	v.c.rec(v.tx, "remove %s", p)
	n := v.get(p)
	if n == nil {
		if o != nil && o.Force {
			return nil
		}
		return notFound(p)
	}
	if attr != "" {
		if err := v.takeLock(p, n, yt.LockShared, "", attr); err != nil {
			return err
		}
		m := v.mut(p)
		delete(m.attrs, attr)
		v.c.touch(m, false)
		return nil
	}
	if len(v.children(p)) > 0 && (o == nil || !o.Recursive) {
		return yterrors.Err(fmt.Sprintf("Cannot remove non-empty composite node /%s without recursive", p), yterrors.Attr("path", "/"+p))
	}
	if err := v.lockSubtree(p); err != nil {
		return err
	}
	if err := v.lockChild(p); err != nil {
		return err
	}
	v.del(p)
	v.touchParent(p)
	return nil
}

func (v view) MoveNode(ctx context.Context, src, dst ypath.YPath, o *yt.MoveNodeOptions) (yt.NodeID, error) {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	if err := v.c.enter(v.tx); err != nil {
		return yt.NodeID{}, err
	}
	if o == nil {
		o = &yt.MoveNodeOptions{}
	}
	s, _, _, _, err := v.resolve(src)
	if err != nil {
		return yt.NodeID{}, err
	}
	d, _, _, _, err := v.resolve(dst)
	if err != nil {
		return yt.NodeID{}, err
	}
	v.c.rec(v.tx, "move %s %s", s, d)
	n := v.get(s)
	if n == nil {
		return yt.NodeID{}, notFound(s)
	}
	if len(v.children(s)) > 0 {
		return yt.NodeID{}, yterrors.Err("ytfake: moving a map node with children is not modelled")
	}
	if v.get(d) != nil {
		if !o.Force {
			return yt.NodeID{}, yterrors.Err(yterrors.CodeAlreadyExists, fmt.Sprintf("Node /%s already exists", d), yterrors.Attr("path", "/"+d))
		}
		if err := v.lockSubtree(d); err != nil {
			return yt.NodeID{}, err
		}
	}
	if err := v.lockSubtree(s); err != nil {
		return yt.NodeID{}, err
	}
	if err := v.lockChild(s); err != nil {
		return yt.NodeID{}, err
	}
	if err := v.parentOK(d, o.Recursive); err != nil {
		return yt.NodeID{}, err
	}
	if err := v.lockChild(d); err != nil {
		return yt.NodeID{}, err
	}
	// A move keeps the node's id (it is the same object under a new
	// name) and gives it a new revision.
	m := n.clone()
	m.appendFrom = -1
	v.c.touch(m, true)
	v.del(s)
	v.del(d)
	v.put(d, m)
	v.touchParent(s)
	v.touchParent(d)
	if err := v.takeLock(d, m, yt.LockExclusive, "", ""); err != nil {
		return yt.NodeID{}, err
	}
	return m.id, nil
}

// builtin attributes a node always has, beyond its user attributes.
func (v view) attrsOf(p string, n *node) map[string]any {
	a := map[string]any{"type": n.typ, "id": n.id, "revision": n.rev}
	if !v.c.NoContentRevision {
		a["content_revision"] = n.crev
	}
	for k, val := range n.attrs {
		a[k] = val
	}
	switch n.typ {
	case yt.NodeTable:
		size := 0
		for _, r := range n.rows {
			size += len(r)
		}
		a["row_count"] = int64(len(n.rows))
		a["chunk_count"] = int64(min(len(n.rows), 1))
		a["compressed_data_size"] = int64(size)
		a["uncompressed_data_size"] = int64(size)
		s := n.effectiveSchema()
		a["schema"] = s
		a["schema_mode"] = "strong"
		if n.schema == nil {
			a["schema_mode"] = "weak"
		}
		keys := s.KeyColumns()
		a["sorted"] = len(keys) > 0
		a["key_columns"] = keys
		if len(keys) > 0 {
			a["sorted_by"] = keys
		}
		a["dynamic"] = false
	case yt.NodeFile:
		a["uncompressed_data_size"] = int64(len(n.data))
	case yt.NodeMap:
		a["count"] = int64(len(v.children(p)))
	}
	if v.tx != nil {
		var locks []string
		for _, l := range v.c.locks {
			if l.nodeID == n.id {
				locks = append(locks, string(l.mode))
			}
		}
		a["lock_count"] = int64(len(locks))
	}
	return a
}

// effectiveSchema is the table's schema, or the weak empty schema of a
// table created without one (<strict=%false>[]).
func (n *node) effectiveSchema() schema.Schema {
	if n.schema != nil {
		return *n.schema
	}
	f := false
	return schema.Schema{Strict: &f}
}

// render builds the YSON of a node with the requested attributes.
func (v view) render(p string, n *node, attrs []string, pn *pinned) any {
	all := v.attrsOf(p, n)
	a := map[string]any{}
	for _, name := range attrs {
		if val, ok := all[name]; ok {
			a[name] = val
		}
	}
	var value any
	switch n.typ {
	case yt.NodeDocument:
		value = n.value
	case yt.NodeMap:
		// An opaque map node renders as an entity with its attributes
		// (docs: storage/attributes.md, "opaque").
		if opaque, _ := n.attrs["opaque"].(bool); opaque && pn == nil {
			break
		}
		kids := map[string]any{}
		names := v.children(p)
		if pn != nil {
			names = names[:0]
			for k := range pn.kids {
				names = append(names, k)
			}
		}
		for _, k := range names {
			q := p + "/" + k
			if p == "/" {
				q = "/" + k
			}
			if kn := v.get(q); kn != nil {
				kids[k] = v.render(q, kn, attrs, nil)
			}
		}
		value = kids
	}
	return &yson.ValueWithAttrs{Attrs: a, Value: value}
}

func (v view) GetNode(ctx context.Context, path ypath.YPath, result any, o *yt.GetNodeOptions) error {
	v.c.mu.Lock()
	if hook := v.c.AfterTxGet; hook != nil && v.tx != nil {
		v.c.AfterTxGet = nil
		defer hook()
	}
	defer v.c.mu.Unlock()
	if err := v.c.enter(v.tx); err != nil {
		return err
	}
	p, attr, allAttrs, pn, err := v.resolve(path)
	if err != nil {
		return err
	}
	var attrs []string
	if o != nil {
		attrs = o.Attributes
	}
	if attr != "" || allAttrs {
		v.c.rec(v.tx, "get %s/@%s", p, attr)
	} else {
		v.c.rec(v.tx, "get %s attributes=%v", p, attrs)
	}
	var out any
	if strings.HasPrefix(p, "lock:") {
		for _, l := range v.c.locks {
			if "lock:"+l.id.String() == p {
				m := map[string]any{"state": l.state, "mode": l.mode, "transaction_id": l.tx.id.String(), "node_id": l.nodeID}
				if attr == "" {
					out = m
				} else if out = m[attr]; out == nil {
					return notFound(p + "/@" + attr)
				}
			}
		}
		if out == nil {
			return notFound(p)
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
		case allAttrs:
			all := v.attrsOf(p, n)
			if len(attrs) > 0 {
				m := map[string]any{}
				for _, a := range attrs {
					if val, ok := all[a]; ok {
						m[a] = val
					}
				}
				all = m
			}
			out = all
		case attr != "":
			val, ok := v.attrsOf(p, n)[attr]
			if !ok {
				return notFound(p + "/@" + attr)
			}
			out = val
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

func (v view) ListNode(ctx context.Context, path ypath.YPath, result any, o *yt.ListNodeOptions) error {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	if err := v.c.enter(v.tx); err != nil {
		return err
	}
	p, _, _, _, err := v.resolve(path)
	if err != nil {
		return err
	}
	v.c.rec(v.tx, "list %s", p)
	n := v.get(p)
	if n == nil {
		return notFound(p)
	}
	if n.typ != yt.NodeMap {
		return yterrors.Err(fmt.Sprintf("Node /%s is a %s, not a map node", p, n.typ))
	}
	var attrs []string
	if o != nil {
		attrs = o.Attributes
	}
	var out []any
	for _, k := range v.children(p) {
		q := p + "/" + k
		if p == "/" {
			q = "/" + k
		}
		a := map[string]any{}
		all := v.attrsOf(q, v.get(q))
		for _, name := range attrs {
			if val, ok := all[name]; ok {
				a[name] = val
			}
		}
		out = append(out, &yson.ValueWithAttrs{Attrs: a, Value: k})
	}
	b, err := yson.Marshal(out)
	if err != nil {
		return err
	}
	return yson.Unmarshal(b, result)
}

// builtinRO are attributes a set cannot change.
var builtinRO = map[string]bool{"type": true, "id": true, "revision": true, "content_revision": true, "row_count": true,
	"chunk_count": true, "sorted": true, "sorted_by": true, "key_columns": true, "schema_mode": true, "compressed_data_size": true,
	"uncompressed_data_size": true, "count": true, "lock_count": true, "dynamic": true}

func (v view) SetNode(ctx context.Context, path ypath.YPath, value any, o *yt.SetNodeOptions) error {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	if err := v.c.enter(v.tx); err != nil {
		return err
	}
	p, attr, _, _, err := v.resolve(path)
	if err != nil {
		return err
	}
	if attr != "" {
		v.c.rec(v.tx, "set %s/@%s", p, attr)
	} else {
		v.c.rec(v.tx, "set %s", p)
	}
	n := v.get(p)
	if n == nil {
		if attr != "" {
			return notFound(p)
		}
		// A set of a missing node creates a document (docs:
		// storage/cypress.md), with its parents only if recursive.
		if err := v.parentOK(p, o != nil && o.Recursive); err != nil {
			return err
		}
		if err := v.lockChild(p); err != nil {
			return err
		}
		d := v.c.newNode(yt.NodeDocument)
		d.value = value
		v.put(p, d)
		v.touchParent(p)
		return v.takeLock(p, d, yt.LockExclusive, "", "")
	}
	if attr != "" {
		if builtinRO[attr] {
			return yterrors.Err(fmt.Sprintf("Builtin attribute %q of /%s cannot be set", attr, p))
		}
		// "Creating a new node attribute, as well as changing or deleting an
		// existing attribute is accompanied by taking a shared lock with the
		// corresponding attribute_key" (docs: storage/transactions.md).
		if err := v.takeLock(p, n, yt.LockShared, "", attr); err != nil {
			return err
		}
		m := v.mut(p)
		if attr == "schema" && m.typ == yt.NodeTable {
			if len(m.rows) > 0 {
				return yterrors.Err(fmt.Sprintf("ytfake: altering the schema of non-empty table /%s is not modelled", p))
			}
			s, err := toSchema(value)
			if err != nil {
				return err
			}
			m.schema = s
		} else {
			m.attrs[attr] = value
		}
		v.c.touch(m, false)
		return nil
	}
	if n.typ != yt.NodeDocument {
		return yterrors.Err(fmt.Sprintf("ytfake: set of a %s node (/%s) is not modelled", n.typ, p))
	}
	if err := v.takeLock(p, n, yt.LockExclusive, "", ""); err != nil {
		return err
	}
	m := v.mut(p)
	v.c.touch(m, true)
	m.value = value
	return nil
}

func (v view) LockNode(ctx context.Context, path ypath.YPath, mode yt.LockMode, o *yt.LockNodeOptions) (yt.LockResult, error) {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	if err := v.c.enter(v.tx); err != nil {
		return yt.LockResult{}, err
	}
	p, _, _, _, err := v.resolve(path)
	if err != nil {
		return yt.LockResult{}, err
	}
	waitable := o != nil && o.Waitable
	v.c.rec(v.tx, "lock %s %s waitable=%v", p, mode, waitable)
	if v.tx == nil {
		return yt.LockResult{}, yterrors.Err("A valid master transaction is required to take a lock")
	}
	n := v.get(p)
	if n == nil {
		return yt.LockResult{}, notFound(p)
	}
	var child, attr string
	if o != nil {
		if o.ChildKey != nil {
			child = *o.ChildKey
		}
		if o.AttributeKey != nil {
			attr = *o.AttributeKey
		}
	}
	if mode == yt.LockSnapshot {
		pn := &pinned{node: n.clone(), kids: map[string]bool{}}
		for _, k := range v.children(p) {
			pn.kids[k] = true
		}
		v.tx.pinned[n.id.String()] = pn
	}
	queued := false
	for _, l := range v.c.locks {
		if l.nodeID == n.id && l.state == "pending" && mode != yt.LockSnapshot {
			queued = true // the lock queue is FIFO
		}
	}
	if !queued {
		err := v.takeLock(p, n, mode, child, attr)
		if err == nil {
			l := v.c.locks[len(v.c.locks)-1]
			for _, x := range v.c.locks {
				if x.tx == v.tx && x.nodeID == n.id && x.mode == mode && x.child == child && x.attr == attr {
					l = x
					break
				}
			}
			return yt.LockResult{NodeID: n.id, LockID: l.id}, nil
		}
		if !waitable || !yterrors.ContainsErrorCode(err, yterrors.CodeConcurrentTransactionLockConflict) {
			return yt.LockResult{}, err
		}
	}
	l := &lock{id: guid.New(), nodeID: n.id, path: p, tx: v.tx, mode: mode, child: child, attr: attr, state: "pending"}
	v.c.locks = append(v.c.locks, l)
	return yt.LockResult{NodeID: n.id, LockID: l.id}, nil
}
