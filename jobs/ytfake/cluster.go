package ytfake

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"go.ytsaurus.tech/yt/go/guid"
	"go.ytsaurus.tech/yt/go/mapreduce/spec"
	"go.ytsaurus.tech/yt/go/schema"
	"go.ytsaurus.tech/yt/go/ypath"
	"go.ytsaurus.tech/yt/go/yson"
	"go.ytsaurus.tech/yt/go/yt"
	"go.ytsaurus.tech/yt/go/yterrors"

	"github.com/pillarkit/pillar/jobs/internal/exechost"
)

// Options configure a Cluster.
type Options struct {
	// Now is the clock of transaction timeouts. The default value is
	// time.Now.
	Now func() time.Time
	// SandboxDir holds one directory per job run (left for inspection).
	// The default value is a directory under os.TempDir, removed by Close.
	SandboxDir string
	// TxTimeout is the timeout of a transaction begun without one. The
	// default value is 15 s, the SDK's (yt/config.go: "TxTimeout of zero
	// means default timeout of 15 seconds").
	TxTimeout time.Duration
}

// JobInfo describes a job about to run, for Cluster.FailJobs.
type JobInfo struct {
	Operation yt.OperationID
	Type      yt.OperationType
	Title     string
	// Phase is "map" or "reduce".
	Phase string
	// Index counts the jobs of the phase from 0.
	Index int
}

// Cluster is the FAKE cluster (see the package comment). It implements
// yt.Client; a method the fake does not model panics (the embedded nil
// interface), so an unexpected call fails the test loudly.
type Cluster struct {
	yt.Client

	// NoContentRevision leaves out @content_revision, as older clusters do.
	NoContentRevision bool
	// AfterTxGet, when set, runs once after the next `get` inside a
	// transaction (tests: a commit landing between two steps).
	AfterTxGet func()
	// Hold keeps operations started from now on running (not executed)
	// until they are aborted.
	Hold bool
	// FailJobs, when set, is asked before every job; true fails the job
	// (exit code 1, stderr "ytfake: injected job failure") and so the
	// operation.
	FailJobs func(JobInfo) bool
	// AbortOperations, when set, is asked when an operation starts; true
	// makes it end aborted (as if an operator aborted it) without running.
	AbortOperations func(s *spec.Spec) bool

	opts     Options
	ownedDir bool

	mu      sync.Mutex
	nodes   map[string]*node // the committed state, by path ("/" is the root)
	rev     uint64
	locks   []*lock
	txs     map[yt.TxID]*Tx
	ntx     int
	txNames map[string]string // tx id → "tx1", … (the call log)
	calls   []string
	ops     map[yt.OperationID]*operation
	specs   []*spec.Spec
	jobs    []*exechost.Job
	cache   map[string]string // md5 → path of the cached file
	nops    int
}

// New returns an empty cluster: the root and //tmp.
func New(opts *Options) *Cluster {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.TxTimeout <= 0 {
		o.TxTimeout = 15 * time.Second
	}
	c := &Cluster{opts: o, nodes: map[string]*node{}, txs: map[yt.TxID]*Tx{}, txNames: map[string]string{},
		ops: map[yt.OperationID]*operation{}, cache: map[string]string{}}
	c.nodes["/"] = c.newNode(yt.NodeMap)
	c.nodes["/tmp"] = c.newNode(yt.NodeMap)
	return c
}

// Close removes the sandbox directory the cluster created.
func (c *Cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ownedDir && c.opts.SandboxDir != "" {
		return os.RemoveAll(c.opts.SandboxDir)
	}
	return nil
}

func (c *Cluster) sandboxDir() (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.opts.SandboxDir == "" {
		d, err := os.MkdirTemp("", "ytfake-")
		if err != nil {
			return "", err
		}
		c.opts.SandboxDir, c.ownedDir = d, true
	}
	return c.opts.SandboxDir, nil
}

// node is one Cypress node (a version of it: the trunk's, or a
// transaction's branch).
type node struct {
	id     yt.NodeID
	typ    yt.NodeType
	attrs  map[string]any
	value  any      // documents
	rows   [][]byte // tables: binary YSON maps
	data   []byte   // files
	schema *schema.Schema
	rev    uint64
	crev   uint64
	dirty  bool // changed in a transaction: new revision at commit
	cdirty bool // content changed
	// appendFrom is, in a branch, the number of rows the branch started
	// with when it only appended since (a shared lock): the commit adds
	// rows[appendFrom:] to the parent's version, as concurrent appends
	// under shared locks do. -1 when the branch overwrote the rows.
	appendFrom int
}

func (c *Cluster) newNode(typ yt.NodeType) *node {
	n := &node{id: yt.NodeID(guid.New()), typ: typ, attrs: map[string]any{}, appendFrom: -1}
	c.touch(n, true)
	return n
}

func (n *node) clone() *node {
	m := *n
	m.attrs = make(map[string]any, len(n.attrs))
	for k, v := range n.attrs {
		m.attrs[k] = v
	}
	m.rows = append([][]byte(nil), n.rows...)
	m.appendFrom = len(n.rows)
	if n.schema != nil {
		s := n.schema.Copy()
		m.schema = &s
	}
	return &m
}

// touch gives a changed node a new revision (and content revision) at
// once, as the master does for a change inside a transaction, and marks it
// for another at commit.
func (c *Cluster) touch(n *node, content bool) {
	c.rev++
	n.rev, n.dirty = c.rev, true
	if content {
		n.crev, n.cdirty = c.rev, true
	}
}

var guidRE = regexp.MustCompile(`[0-9a-f]{1,8}-[0-9a-f]{1,8}-[0-9a-f]{1,8}-[0-9a-f]{1,8}`)

// rec records a call with transaction ids replaced by their names and
// other GUIDs by <id>. c.mu is held.
func (c *Cluster) rec(tx *Tx, format string, a ...any) {
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

// Calls returns the calls made so far, one line each ("tx3: create table
// /tmp/x recursive=false …"; transactions named tx1, tx2, … in start
// order).
func (c *Cluster) Calls() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.calls...)
}

// ResetCalls forgets the calls recorded so far.
func (c *Cluster) ResetCalls() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = nil
}

// Specs returns the specs of the operations started so far, as the cluster
// received them.
func (c *Cluster) Specs() []*spec.Spec {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*spec.Spec(nil), c.specs...)
}

// Jobs returns every job run so far, in order.
func (c *Cluster) Jobs() []*exechost.Job {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*exechost.Job(nil), c.jobs...)
}

// Running is the number of operations not finished.
func (c *Cluster) Running() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, op := range c.ops {
		if !op.state.IsFinished() {
			n++
		}
	}
	return n
}

// key turns "//a/b" into the node key "/a/b" ("//" is "/").
func key(p ypath.Path) string {
	s := strings.TrimPrefix(string(p), "/")
	if s == "/" || s == "" {
		return "/"
	}
	return strings.TrimSuffix(s, "/")
}

// HasNode reports whether a committed node exists at p.
func (c *Cluster) HasNode(p ypath.Path) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[key(p)] != nil
}

// Rows returns the committed rows of the table at p (binary YSON), nil
// when there is none.
func (c *Cluster) Rows(p ypath.Path) [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.nodes[key(p)]; n != nil {
		return append([][]byte(nil), n.rows...)
	}
	return nil
}

// NodeInfo is one committed node, for tests that pin a layout.
type NodeInfo struct {
	Path  string // "//a/b"
	Type  yt.NodeType
	Attrs map[string]any // user attributes
	Rows  int
	Value any // documents
}

// Nodes lists the committed nodes under p (p included), by path.
func (c *Cluster) Nodes(p ypath.Path) []NodeInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := key(p)
	var out []NodeInfo
	for q, n := range c.nodes {
		if q == k || strings.HasPrefix(q, k+"/") || k == "/" {
			attrs := map[string]any{}
			for a, v := range n.attrs {
				attrs[a] = v
			}
			out = append(out, NodeInfo{Path: "/" + q, Type: n.typ, Attrs: attrs, Rows: len(n.rows), Value: n.value})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// SetTable creates (or replaces) the committed table at p, with its
// parents, holding rows (a slice of Go values, YSON-encoded here). A
// non-nil schema is the table's; rows must satisfy it.
func (c *Cluster) SetTable(p ypath.Path, rows any, sch *schema.Schema) error {
	b, err := yson.Marshal(rows)
	if err != nil {
		return err
	}
	var raws []yson.RawValue
	if err := yson.Unmarshal(b, &raws); err != nil {
		return err
	}
	var bin [][]byte
	for _, r := range raws {
		var v any
		if err := yson.Unmarshal(r, &v); err != nil {
			return err
		}
		rb, err := yson.MarshalFormat(v, yson.FormatBinary)
		if err != nil {
			return err
		}
		bin = append(bin, rb)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v := view{c: c}
	k := key(p)
	if err := v.makeParents(k); err != nil {
		return err
	}
	n := c.newNode(yt.NodeTable)
	n.schema = sch
	if err := checkRows(k, n.schema, nil, bin); err != nil {
		return err
	}
	n.rows = bin
	v.del(k)
	v.put(k, n)
	return nil
}

// resolveErr is the master's error for a path whose node p is missing:
// "Node //a has no child with key "b"" (code 500).
func resolveErr(p string) error {
	up, name := split(p)
	return yterrors.Err(yterrors.CodeResolveError, fmt.Sprintf("Node /%s has no child with key %q", up, name), yterrors.Attr("path", "/"+p))
}

func notFound(p string) error {
	return yterrors.Err(yterrors.CodeResolveError, "Error resolving path /"+p, yterrors.Attr("path", "/"+p))
}
