package ytfake

import (
	"context"
	"fmt"
	"io"
	"sort"
	"time"

	"go.ytsaurus.tech/yt/go/guid"
	"go.ytsaurus.tech/yt/go/ypath"
	"go.ytsaurus.tech/yt/go/yt"
	"go.ytsaurus.tech/yt/go/yterrors"
)

// Tx is a FAKE master transaction: its changes are a branch of the nodes
// it touched, visible to it and its descendants, merged into its parent
// (or the trunk) at commit. It implements yt.Tx; unmodelled methods panic.
type Tx struct {
	yt.Tx // nil

	c        *Cluster
	id       yt.TxID
	parent   *Tx
	kids     map[*Tx]bool
	overlay  map[string]*node // nil value: removed
	pinned   map[string]*pinned
	done     chan struct{}
	ended    bool
	timeout  time.Duration
	pinging  bool
	lastPing time.Time
	stopCtx  func() bool
}

var _ yt.Tx = (*Tx)(nil)
var _ yt.Client = (*Cluster)(nil)

func (c *Cluster) begin(ctx context.Context, parent *Tx, o *yt.StartTxOptions) (*Tx, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.enter(parent); err != nil {
		return nil, err
	}
	c.ntx++
	t := &Tx{c: c, id: yt.TxID(guid.New()), parent: parent, kids: map[*Tx]bool{}, overlay: map[string]*node{},
		pinned: map[string]*pinned{}, done: make(chan struct{}), timeout: c.opts.TxTimeout, pinging: true, lastPing: c.opts.Now()}
	if o != nil && o.Timeout != nil && *o.Timeout > 0 {
		t.timeout = time.Duration(*o.Timeout)
	}
	if parent != nil {
		parent.kids[t] = true
	}
	c.txs[t.id] = t
	c.txNames[t.id.String()] = fmt.Sprintf("tx%d", c.ntx)
	if parent != nil {
		c.rec(parent, "start_tx %s", t.id)
	} else {
		c.rec(nil, "start_tx %s", t.id)
	}
	// "Tx lifetime is bound to ctx. Tx is automatically aborted when ctx is
	// canceled." (yt/interface.go, Client.BeginTx)
	if ctx != nil && ctx.Done() != nil {
		t.stopCtx = context.AfterFunc(ctx, func() { _ = t.Abort() })
	}
	return t, nil
}

// BeginTx starts a topmost transaction.
func (c *Cluster) BeginTx(ctx context.Context, o *yt.StartTxOptions) (yt.Tx, error) {
	return c.begin(ctx, nil, o)
}

// BeginTx starts a transaction nested in t.
func (t *Tx) BeginTx(ctx context.Context, o *yt.StartTxOptions) (yt.Tx, error) {
	return t.c.begin(ctx, t, o)
}

// StopPings makes the client stop pinging transaction id (the process
// holding it died): once its timeout passes on Options.Now, the cluster
// aborts it ("If the time since transaction creation or the last execution
// of the ping_tx command exceeds timeout, the transaction will be
// aborted", docs: storage/transactions.md). It reports whether the
// transaction exists.
func (c *Cluster) StopPings(id yt.TxID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.txs[id]
	if t == nil {
		return false
	}
	t.pinging, t.lastPing = false, c.opts.Now()
	return true
}

// Alive reports whether transaction id is still open (after applying
// timeouts).
func (c *Cluster) Alive(id yt.TxID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expire()
	t := c.txs[id]
	return t != nil && !t.ended
}

// expire aborts the transactions whose pings stopped longer than their
// timeout ago. c.mu is held.
func (c *Cluster) expire() {
	now := c.opts.Now()
	var ids []string
	for id, t := range c.txs {
		if !t.ended && !t.pinging && now.Sub(t.lastPing) > t.timeout {
			ids = append(ids, id.String())
		}
	}
	sort.Strings(ids)
	for _, s := range ids {
		id, _ := guid.ParseString(s)
		if t := c.txs[yt.TxID(id)]; t != nil && !t.ended {
			c.rec(t, "abort_tx (ping timeout)")
			c.abort(t)
		}
	}
}

func (t *Tx) ID() yt.TxID               { return t.id }
func (t *Tx) Finished() <-chan struct{} { return t.done }
func (t *Tx) v() view                   { return view{c: t.c, tx: t} }

// finish ends t: its locks go (or pass to the parent), pending locks
// may be granted. c.mu is held.
func (c *Cluster) finish(t *Tx, committed bool) {
	c.release(t, committed)
	if t.parent != nil {
		delete(t.parent.kids, t)
	}
	t.ended = true
	delete(c.txs, t.id)
	close(t.done)
	if t.stopCtx != nil {
		t.stopCtx()
	}
	for _, op := range c.ops {
		if op.tx == t && !op.state.IsFinished() {
			op.state = yt.StateAborted
			op.err = yterrors.Err("Operation transaction was aborted").(*yterrors.Error)
		}
	}
}

// abort aborts t and, first, its descendants ("If you abort a transaction,
// all nested transactions will also be stopped", docs:
// storage/transactions.md). c.mu is held.
func (c *Cluster) abort(t *Tx) {
	if t.ended {
		return
	}
	for k := range t.kids {
		c.abort(k)
	}
	c.finish(t, false)
}

// Commit merges t's branch into its parent's (or the trunk). A
// transaction with open nested transactions cannot commit ("run the
// commit_tx command on all nested transactions and then on the parent",
// docs: storage/transactions.md).
func (t *Tx) Commit() error {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rec(t, "commit_tx")
	if err := c.enter(t); err != nil {
		return err
	}
	return c.commit(t)
}

// commit is Commit with c.mu held.
func (c *Cluster) commit(t *Tx) error {
	if t.ended {
		return yterrors.Err(yterrors.CodeNoSuchTransaction, fmt.Sprintf("No such transaction %s", t.id))
	}
	if len(t.kids) > 0 {
		return yterrors.Err(fmt.Sprintf("Transaction %s has %d active nested transaction(s)", t.id, len(t.kids)))
	}
	paths := make([]string, 0, len(t.overlay))
	for p := range t.overlay {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	if t.parent != nil {
		for _, p := range paths {
			n := t.overlay[p]
			if n != nil {
				// The parent's branch only appended too, or it overwrote.
				if old, ok := t.parent.overlay[p]; ok && old != nil && old.id == n.id && n.appendFrom >= 0 {
					n.appendFrom = old.appendFrom
				}
			}
			t.parent.overlay[p] = n
		}
		c.finish(t, true)
		return nil
	}
	for _, p := range paths {
		n := t.overlay[p]
		if n == nil {
			delete(c.nodes, p)
			continue
		}
		// Appends under shared locks from several transactions all land.
		if old := c.nodes[p]; old != nil && old.id == n.id && n.appendFrom >= 0 && n.appendFrom <= len(n.rows) && n.appendFrom != len(old.rows) {
			n.rows = append(append([][]byte(nil), old.rows...), n.rows[n.appendFrom:]...)
		}
		if n.dirty {
			c.rev++
			n.rev = c.rev
			if n.cdirty {
				n.crev = c.rev
			}
			n.dirty, n.cdirty = false, false
		}
		n.appendFrom = -1
		c.nodes[p] = n
	}
	c.finish(t, true)
	return nil
}

// Abort aborts t and its nested transactions; everything they changed
// vanishes.
func (t *Tx) Abort() error {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.ended {
		return nil
	}
	c.rec(t, "abort_tx")
	c.abort(t)
	return nil
}

func (t *Tx) CreateNode(ctx context.Context, p ypath.YPath, typ yt.NodeType, o *yt.CreateNodeOptions) (yt.NodeID, error) {
	return t.v().CreateNode(ctx, p, typ, o)
}
func (t *Tx) NodeExists(ctx context.Context, p ypath.YPath, o *yt.NodeExistsOptions) (bool, error) {
	return t.v().NodeExists(ctx, p, o)
}
func (t *Tx) RemoveNode(ctx context.Context, p ypath.YPath, o *yt.RemoveNodeOptions) error {
	return t.v().RemoveNode(ctx, p, o)
}
func (t *Tx) MoveNode(ctx context.Context, s, d ypath.YPath, o *yt.MoveNodeOptions) (yt.NodeID, error) {
	return t.v().MoveNode(ctx, s, d, o)
}
func (t *Tx) SetNode(ctx context.Context, p ypath.YPath, val any, o *yt.SetNodeOptions) error {
	return t.v().SetNode(ctx, p, val, o)
}
func (t *Tx) GetNode(ctx context.Context, p ypath.YPath, r any, o *yt.GetNodeOptions) error {
	return t.v().GetNode(ctx, p, r, o)
}
func (t *Tx) ListNode(ctx context.Context, p ypath.YPath, r any, o *yt.ListNodeOptions) error {
	return t.v().ListNode(ctx, p, r, o)
}
func (t *Tx) LockNode(ctx context.Context, p ypath.YPath, m yt.LockMode, o *yt.LockNodeOptions) (yt.LockResult, error) {
	return t.v().LockNode(ctx, p, m, o)
}
func (t *Tx) ReadTable(ctx context.Context, p ypath.YPath, o *yt.ReadTableOptions) (yt.TableReader, error) {
	return t.v().ReadTable(ctx, p, o)
}
func (t *Tx) WriteTable(ctx context.Context, p ypath.YPath, o *yt.WriteTableOptions) (yt.TableWriter, error) {
	return t.v().WriteTable(ctx, p, o)
}
func (t *Tx) WriteFile(ctx context.Context, p ypath.YPath, o *yt.WriteFileOptions) (io.WriteCloser, error) {
	return t.v().WriteFile(ctx, p, o)
}
func (t *Tx) ReadFile(ctx context.Context, p ypath.YPath, o *yt.ReadFileOptions) (io.ReadCloser, error) {
	return t.v().ReadFile(ctx, p, o)
}
func (t *Tx) StartOperation(ctx context.Context, typ yt.OperationType, s any, o *yt.StartOperationOptions) (yt.OperationID, error) {
	return t.c.startOperation(ctx, t, typ, s, o)
}

func (c *Cluster) CreateNode(ctx context.Context, p ypath.YPath, typ yt.NodeType, o *yt.CreateNodeOptions) (yt.NodeID, error) {
	return view{c: c}.CreateNode(ctx, p, typ, o)
}
func (c *Cluster) NodeExists(ctx context.Context, p ypath.YPath, o *yt.NodeExistsOptions) (bool, error) {
	return view{c: c}.NodeExists(ctx, p, o)
}
func (c *Cluster) RemoveNode(ctx context.Context, p ypath.YPath, o *yt.RemoveNodeOptions) error {
	return view{c: c}.RemoveNode(ctx, p, o)
}
func (c *Cluster) MoveNode(ctx context.Context, s, d ypath.YPath, o *yt.MoveNodeOptions) (yt.NodeID, error) {
	return view{c: c}.MoveNode(ctx, s, d, o)
}
func (c *Cluster) SetNode(ctx context.Context, p ypath.YPath, val any, o *yt.SetNodeOptions) error {
	return view{c: c}.SetNode(ctx, p, val, o)
}
func (c *Cluster) GetNode(ctx context.Context, p ypath.YPath, r any, o *yt.GetNodeOptions) error {
	return view{c: c}.GetNode(ctx, p, r, o)
}
func (c *Cluster) ListNode(ctx context.Context, p ypath.YPath, r any, o *yt.ListNodeOptions) error {
	return view{c: c}.ListNode(ctx, p, r, o)
}
func (c *Cluster) ReadTable(ctx context.Context, p ypath.YPath, o *yt.ReadTableOptions) (yt.TableReader, error) {
	return view{c: c}.ReadTable(ctx, p, o)
}
func (c *Cluster) WriteTable(ctx context.Context, p ypath.YPath, o *yt.WriteTableOptions) (yt.TableWriter, error) {
	return view{c: c}.WriteTable(ctx, p, o)
}
func (c *Cluster) WriteFile(ctx context.Context, p ypath.YPath, o *yt.WriteFileOptions) (io.WriteCloser, error) {
	return view{c: c}.WriteFile(ctx, p, o)
}
func (c *Cluster) ReadFile(ctx context.Context, p ypath.YPath, o *yt.ReadFileOptions) (io.ReadCloser, error) {
	return view{c: c}.ReadFile(ctx, p, o)
}
func (c *Cluster) StartOperation(ctx context.Context, typ yt.OperationType, s any, o *yt.StartOperationOptions) (yt.OperationID, error) {
	return c.startOperation(ctx, nil, typ, s, o)
}
