// Package testcluster runs a small cobbled cluster on 127.0.0.1 for the router's
// tests and the read benchmark: N serving nodes, in this process or (Exec)
// each a process of its own, each with its own
// RocksDB directories and its own gRPC server on a real loopback listener,
// holding P partitions × R replicas of deterministic synthetic data, and a
// routing source the caller can change (mark nodes down, reassign). Kill
// stops a node's gRPC server and listener for real; Restart reopens the node
// from its directory on the same address, optionally with cobbled's
// test-only fault delay.
//
// Data: key i is the first 16 bytes of SHA-256("pillar-readbench", seed, i);
// its value (Value) is a pseudo-random byte string whose length is uniform in
// [MinValue, MaxValue] and whose bytes come from a ChaCha8 stream seeded by
// the key, so any process can regenerate it. Each partition's keys are
// written as one snapshot batch (SST files with grocksdb's SSTFileWriter and
// the shared internal/rocks table options, batch.MetaKey first, as the SST
// builder does) and applied with cobbled.Node.Apply to each replica.
//
// A Cluster's methods are safe for concurrent use.
package testcluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/linxGnu/grocksdb"
	"google.golang.org/grpc"

	"github.com/pillarkit/pillar/cobbled"
	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/clock"
	"github.com/pillarkit/pillar/internal/rocks"
	"github.com/pillarkit/pillar/internal/tlsconf"
	"github.com/pillarkit/pillar/pillar"
)

// Options configure Start. The zero value of every field means its default;
// Dir is required.
type Options struct {
	// Dir holds the batches and every node's data. Required.
	Dir string
	// Nodes is the number of serving nodes. The default value is 3.
	Nodes int
	// Zones names each node's zone. The default value is zone-a, zone-b, …
	Zones []string
	// Partitions is P. The default value is 64.
	Partitions int
	// Replicas per partition, on distinct nodes. The default value is 3
	// (capped at Nodes).
	Replicas int
	// Keys is how many keys the data set has. The default value is 1200.
	Keys int
	// MinValue and MaxValue bound a value's length. The default values are
	// 100 and 102400 (mean ≈ 50 KB).
	MinValue, MaxValue int
	// Values, when set, is every key's value (real records, say, for a
	// client that decodes them); MinValue and MaxValue are then unused.
	// The default value nil makes random bytes (Value).
	Values func(key []byte) []byte
	// Seed selects the data set. The default value is 1.
	Seed uint64
	// CacheBytes is each node's block cache. The default value is 64 MiB.
	CacheBytes int64
	// Clock is every node's clock (their fault delays wait on it). The
	// default value is the wall clock.
	Clock clock.Clock
	// Logger receives progress. The default value discards.
	Logger *slog.Logger
	// Node adjusts each node's options before it opens (also on Restart).
	// The default value nil changes nothing. Not with Exec.
	Node func(*cobbled.Options)
	// Exec, when set, runs every node as a process of its own, as in
	// production, instead of in this one: Exec is the program and its
	// leading arguments, to which NodeConfig.Args are appended (the pillar
	// binary: pillar bench read-node, which calls ServeNodeProcess). The
	// data is still loaded in this process, before the node processes
	// start; Kill then kills a node's process (SIGKILL) and Restart starts
	// a new one on the same address. Member.Node and Member.Metrics are
	// then nil and unused. Requires the wall clock (Clock nil). The default
	// value nil runs the nodes in this process.
	Exec []string
	// TLS, when set, serves every in-process node (gRPC and the wire
	// protocol) inside TLS with this server configuration. The default
	// value nil serves plaintext. Not with Exec.
	TLS *tls.Config
	// Env is added to the node processes' environment (KEY=VALUE; this
	// process's is passed on). The default value nil adds nothing.
	Env []string
}

func (o *Options) ensureDefaults() {
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	for len(o.Zones) < o.Nodes {
		o.Zones = append(o.Zones, fmt.Sprintf("zone-%c", 'a'+len(o.Zones)))
	}
	if o.Partitions == 0 {
		o.Partitions = 64
	}
	if o.Replicas == 0 {
		o.Replicas = 3
	}
	o.Replicas = min(o.Replicas, o.Nodes)
	if o.Keys == 0 {
		o.Keys = 1200
	}
	if o.MinValue == 0 {
		o.MinValue = 100
	}
	if o.MaxValue == 0 {
		o.MaxValue = 100 << 10
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = 64 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Cluster is a running loopback cluster.
type Cluster struct {
	opts    Options
	keys    [][]byte
	members []*Member
	objects string

	ssts []string // partition -> its snapshot batch's SST file

	mu      sync.Mutex
	version int64
	assign  [][]int // partition -> member indexes
	down    map[int]bool
}

// Member is one serving node.
type Member struct {
	ID, Zone, Addr string
	// Metrics are the node's cobbled collectors (kept across restarts).
	Metrics *cobbled.Metrics
	c       *Cluster
	idx     int
	dir     string

	mu   sync.Mutex
	node *cobbled.Node
	srv  *grpc.Server
	proc *Process // with Options.Exec
	up   bool
}

// Start builds the data set, opens the nodes, applies each partition's
// batch to its replicas and starts every node's gRPC server.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	opts.ensureDefaults()
	if opts.Dir == "" {
		return nil, errors.New("cluster: Dir is required")
	}
	if len(opts.Exec) > 0 && (opts.Node != nil || opts.Clock != nil) {
		return nil, errors.New("cluster: Exec runs nodes in processes of their own: Node and Clock cannot reach them")
	}
	if opts.MinValue < 0 || opts.MaxValue < opts.MinValue {
		return nil, fmt.Errorf("cluster: value sizes [%d, %d] out of order", opts.MinValue, opts.MaxValue)
	}
	c := &Cluster{opts: opts, objects: filepath.Join(opts.Dir, "objects"), version: 1, down: map[int]bool{}}
	c.keys = make([][]byte, opts.Keys)
	for i := range c.keys {
		c.keys[i] = KeyOf(opts.Seed, i)
	}
	c.assign = make([][]int, opts.Partitions)
	for p := range c.assign {
		for j := range opts.Replicas {
			c.assign[p] = append(c.assign[p], (p+j)%opts.Nodes)
		}
	}
	for i := range opts.Nodes {
		m := &Member{ID: fmt.Sprintf("node-%d", i), Zone: opts.Zones[i], c: c, idx: i, dir: filepath.Join(opts.Dir, fmt.Sprintf("node-%d", i)), Metrics: cobbled.NewMetrics()}
		if err := m.open(ctx, cobbled.FaultDelay{}); err != nil {
			c.Close()
			return nil, err
		}
		c.members = append(c.members, m)
	}
	start := time.Now()
	byPart := make([][][]byte, opts.Partitions)
	for _, k := range c.keys {
		p := pillar.Partition(k, opts.Partitions)
		byPart[p] = append(byPart[p], k)
	}
	manifests := make([]*batch.Manifest, opts.Partitions)
	for p, keys := range byPart {
		m, err := c.writeBatch(p, keys)
		if err != nil {
			c.Close()
			return nil, err
		}
		manifests[p] = m
		c.ssts = append(c.ssts, filepath.Join(c.objects, filepath.FromSlash(batch.Prefix(p, m.ID)), m.Files[0].Name))
	}
	// Apply on every node at once: applying is mostly waiting for fsync.
	errs := make([]error, opts.Nodes)
	var wg sync.WaitGroup
	for i, mem := range c.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p, ms := range c.assign {
				if !slices.Contains(ms, i) {
					continue
				}
				if err := mem.node.Apply(ctx, cobbled.Batch{Seq: 1, Manifest: *manifests[p]}); err != nil {
					errs[i] = fmt.Errorf("cluster: apply partition %d to %s: %w", p, mem.ID, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Close()
		return nil, err
	}
	opts.Logger.Info("cluster: data loaded", "keys", len(c.keys), "partitions", opts.Partitions, "replicas", opts.Replicas, "took", time.Since(start).Round(time.Millisecond))
	for _, m := range c.members {
		var err error
		if len(opts.Exec) > 0 {
			// Close the loading node; its process opens the directory.
			m.node.Close()
			m.node, m.Metrics = nil, nil
			err = m.spawn(ctx, "", cobbled.FaultDelay{})
		} else {
			err = m.serve("")
		}
		if err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// KeyOf returns key i of the data set with the given seed.
func KeyOf(seed uint64, i int) []byte {
	var b [24]byte
	copy(b[:8], "readbnch")
	binary.BigEndian.PutUint64(b[8:], seed)
	binary.BigEndian.PutUint64(b[16:], uint64(i))
	sum := sha256.Sum256(b[:])
	return sum[:pillar.KeySize]
}

// Value returns key's value in a data set with value sizes [lo, hi].
func Value(key []byte, lo, hi int) []byte {
	rng := rand.NewChaCha8(sha256.Sum256(key))
	v := make([]byte, ValueLen(key, lo, hi))
	rng.Read(v)
	return v
}

// Value returns key's value in this data set.
func (c *Cluster) Value(key []byte) []byte {
	if c.opts.Values != nil {
		return c.opts.Values(key)
	}
	return Value(key, c.opts.MinValue, c.opts.MaxValue)
}

// Keys returns the data set's keys (do not modify).
func (c *Cluster) Keys() [][]byte { return c.keys }

// SSTFile returns the SST file holding partition p's data (as the nodes
// ingested it), for benchmarks that read the same data without cobbled.
func (c *Cluster) SSTFile(p int) string { return c.ssts[p] }

// CacheBytes returns each node's block cache size.
func (c *Cluster) CacheBytes() int64 { return c.opts.CacheBytes }

// ObjectsDir is the local object store the nodes read batches from (a
// directory in objstore.Local's layout).
func (c *Cluster) ObjectsDir() string { return c.objects }

// Partitions returns P.
func (c *Cluster) Partitions() int { return c.opts.Partitions }

// Members returns the nodes.
func (c *Cluster) Members() []*Member { return c.members }

// Batches cuts the keys into request batches of size n (in key order, which
// is random across partitions).
func (c *Cluster) Batches(n int) [][][]byte {
	var out [][][]byte
	for i := 0; i+n <= len(c.keys); i += n {
		out = append(out, c.keys[i:i+n])
	}
	return out
}

func (c *Cluster) writeBatch(p int, keys [][]byte) (*batch.Manifest, error) {
	keys = slices.Clone(keys)
	slices.SortFunc(keys, bytes.Compare)
	id := fmt.Sprintf("readbench-s%d-p%05d", c.opts.Seed, p)
	m := &batch.Manifest{Format: batch.FormatVersion, ID: id, Partition: p, Partitions: c.opts.Partitions, Kind: batch.KindSnapshot,
		Source: "readbench synthetic", CreatedAtMS: time.Now().UnixMilli(), Keys: int64(len(keys))}
	dir := filepath.Join(c.objects, filepath.FromSlash(batch.Prefix(p, id)))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cluster: partition %d: %w", p, err)
	}
	opts, err := rocks.TableConfig{}.Options(nil)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	defer opts.Destroy()
	env := grocksdb.NewDefaultEnvOptions()
	defer env.Destroy()
	w := grocksdb.NewSSTFileWriter(env, opts)
	defer w.Destroy()
	const name = "000001.sst"
	path := filepath.Join(dir, name)
	fail := func(err error) (*batch.Manifest, error) {
		return nil, fmt.Errorf("cluster: partition %d: write %s: %w", p, path, err)
	}
	if err := w.Open(path); err != nil {
		return fail(err)
	}
	if err := w.Put(batch.MetaKey, []byte(id)); err != nil {
		return fail(err)
	}
	for _, k := range keys {
		if err := w.Put(k, c.Value(k)); err != nil {
			return fail(err)
		}
	}
	if err := w.Finish(); err != nil {
		return fail(err)
	}
	f, err := os.Open(path)
	if err != nil {
		return fail(err)
	}
	h := sha256.New()
	size, err := io.Copy(h, f)
	f.Close()
	if err != nil {
		return fail(err)
	}
	m.Files = []batch.File{{Name: name, Size: size, SHA256: hex.EncodeToString(h.Sum(nil)), Keys: int64(len(keys))}}
	if len(keys) > 0 {
		m.Smallest, m.Largest = hex.EncodeToString(keys[0]), hex.EncodeToString(keys[len(keys)-1])
	}
	if err := m.Validate(); err != nil {
		return fail(err)
	}
	enc, err := m.Encode()
	if err != nil {
		return fail(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), enc, 0o644); err != nil {
		return fail(err)
	}
	return m, nil
}

// dirObjects reads batch objects from the local directory.
type dirObjects struct{ root string }

func (d dirObjects) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	return os.Open(filepath.Join(d.root, filepath.FromSlash(key)))
}

func (m *Member) open(ctx context.Context, fault cobbled.FaultDelay) error {
	o := cobbled.Options{ID: m.ID, Zone: m.Zone, Dir: m.dir, Partitions: m.c.opts.Partitions,
		CacheBytes: m.c.opts.CacheBytes, Objects: dirObjects{m.c.objects}, FaultDelay: fault, Metrics: m.Metrics, Clock: m.c.opts.Clock}
	if m.c.opts.Node != nil {
		m.c.opts.Node(&o)
	}
	n, err := cobbled.Open(ctx, o)
	if err != nil {
		return fmt.Errorf("cluster: open %s: %w", m.ID, err)
	}
	m.node = n
	return nil
}

// serve starts the gRPC server on addr ("" = a fresh loopback port).
func (m *Member) serve(addr string) error {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var lis net.Listener
	var err error
	for try := 0; ; try++ { // a just-closed port may linger briefly
		if lis, err = net.Listen("tcp", addr); err == nil || try == 50 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("cluster: %s: listen %s: %w", m.ID, addr, err)
	}
	if m.Addr == "" {
		m.Addr = lis.Addr().String() // first start only: GetRouting reads it without m.mu
	}
	if m.c.opts.TLS != nil {
		lis = tlsconf.NewListener(lis, m.c.opts.TLS, tlsconf.ListenerOptions{})
	}
	m.srv = m.node.NewGRPCServer()
	m.up = true
	go m.node.Serve(lis, m.srv) // gRPC and the lean wire protocol on one port
	return nil
}

// Node returns the member's cobbled node (nil while killed).
func (m *Member) Node() *cobbled.Node {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.node
}

// Kill stops the node's gRPC server at once (closing its listener and every
// connection, failing requests in flight) and closes the node.
func (m *Member) Kill() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.up {
		return
	}
	if m.proc != nil {
		m.proc.Kill()
		m.up, m.proc = false, nil
		return
	}
	m.srv.Stop()
	m.node.Close()
	m.up, m.node = false, nil
}

// Restart kills the node if it runs and opens it again from its directory,
// on the same address, delaying the given fraction of its requests
// (cobbled's test-only fault; the zero value for none).
func (m *Member) Restart(ctx context.Context, fault cobbled.FaultDelay) error {
	m.Kill()
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.c.opts.Exec) > 0 {
		return m.spawn(ctx, m.Addr, fault)
	}
	if err := m.open(ctx, fault); err != nil {
		return err
	}
	return m.serve(m.Addr)
}

// Up reports whether the node is serving (a node process that died on its
// own is not).
func (m *Member) Up() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.up && (m.proc == nil || !m.proc.Exited())
}

// SetDown marks member i down (or up again) in the routing table, as the
// control plane does when heartbeats stop; the routing version changes.
func (c *Cluster) SetDown(i int, down bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down[i] = down
	c.version++
}

// Reassign gives partition p to the listed members (most preferred first);
// the routing version changes.
func (c *Cluster) Reassign(p int, members ...int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.assign[p] = slices.Clone(members)
	c.version++
}

// GetRouting returns the cluster's routing table (it is a router's
// RoutingSource). Every replica is caught up (applied seq = newest = 1).
func (c *Cluster) GetRouting(ctx context.Context) (*control.Routing, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rt := &control.Routing{Version: c.version, Partitions: c.opts.Partitions, Replicas: make([][]control.Replica, c.opts.Partitions),
		NewestSeq: make([]int64, c.opts.Partitions), NewestAt: make([]time.Time, c.opts.Partitions), GeneratedAt: time.Now()}
	for p, ms := range c.assign {
		rt.NewestSeq[p] = 1
		for _, i := range ms {
			m := c.members[i]
			state := control.StateUp
			if c.down[i] {
				state = control.StateDown
			}
			rt.Replicas[p] = append(rt.Replicas[p], control.Replica{NodeID: m.ID, Addr: m.Addr, Zone: m.Zone, State: state, AppliedSeq: 1})
		}
	}
	return rt, nil
}

// Close kills every node (a node process is first asked to stop: it
// closes its databases).
func (c *Cluster) Close() error {
	for _, m := range c.members {
		m.mu.Lock()
		if m.proc != nil {
			m.proc.Stop(5 * time.Second)
		}
		m.mu.Unlock()
		m.Kill()
	}
	return nil
}

// ValueLen is the length of Value(key, lo, hi), without generating it.
func ValueLen(key []byte, lo, hi int) int {
	seed := sha256.Sum256(key)
	return lo + int(binary.BigEndian.Uint64(seed[:8])%uint64(hi-lo+1))
}
