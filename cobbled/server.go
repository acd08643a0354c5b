package cobbled

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"runtime"
	"slices"
	"sync"

	"github.com/linxGnu/grocksdb"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/pillarkit/pillar/cobbled/mget"
	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/cobbled/wire"
	"github.com/pillarkit/pillar/internal/clock"
	"github.com/pillarkit/pillar/internal/grpclink"
	"github.com/pillarkit/pillar/internal/servelimit"
	"github.com/pillarkit/pillar/pillar"
)

// The read path. BatchGet groups the request's keys by partition and issues
// one RocksDB MultiGet per partition (package mget: DB::MultiGet with pinned
// values, read in place from the block cache, not copied into malloc'd
// strings), holding each partition's read lock (acquired in increasing
// partition order, so readers and snapshot swaps cannot deadlock) until the
// response is encoded. For gRPC, values are copied once, from the pinned
// block straight into a pooled wire buffer holding the encoded
// BatchGetResponse, which gRPC sends and then returns to the pool. For the
// wire protocol nothing is copied: the framing goes into a small pooled
// buffer and every value over inlineMax is written with the same writev
// from where RocksDB pinned it, so the pins and the partitions' read locks
// are held until the answer is written (bounded: the wire server's write
// deadline is the request's deadline + 1 s, or its WriteTimeout (10 s) for
// a request without one, after which the connection is closed and the
// locks released; a snapshot swap waits at most that long).

// serving is the node's gRPC request limits, one set for the node however
// many gRPC servers it is served by.
type serving struct {
	guardOnce sync.Once
	guard     *servelimit.Guard
}

// requestGuard returns the node's guard (servelimit): its receive limit is
// servelimit.RecvLimit(MaxKeys), a BatchGetRequest is refused by its key
// count and key lengths before it is decoded, and at most MaxInFlight
// requests are answered at once.
func (n *Node) requestGuard() *servelimit.Guard {
	n.guardOnce.Do(func() {
		m := n.opts.Metrics
		n.guard = servelimit.New(servelimit.Limits{
			Who:         "cobbled",
			MaxKeys:     n.opts.MaxKeys,
			MaxInFlight: n.opts.MaxInFlight,
			Refused:     func(err error) { m.requests.WithLabelValues(status.Code(err).String()).Inc() },
		})
	})
	return n.guard
}

// NewGRPCServer returns a gRPC server with the Serve service registered on
// this node, tuned for large responses (~600 KB, 12 × 50 KB; the send side)
// and bounded for requests (requestGuard; its receive windows are sized
// for requests). Callers Serve it on a listener and GracefulStop it
// (draining in-flight requests) before Node.Close.
func (n *Node) NewGRPCServer(extra ...grpc.ServerOption) *grpc.Server {
	g := n.requestGuard()
	opts := append(append(g.ServerOptions(), grpclink.ServerOptions()...),
		grpc.MaxSendMsgSize(n.opts.MaxResponseBytes+1<<20),
		grpc.WriteBufferSize(256<<10),
		grpc.ReadBufferSize(64<<10),
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
		experimental.BufferPool(servepb.TransportPool()), // no zeroing of frame buffers
	)
	s := grpc.NewServer(append(opts, extra...)...)
	s.RegisterService(g.ServiceDesc(serveGet), n)
	return s
}

// serveGet answers BatchGet with the pre-encoded response instead of a
// *servepb.BatchGetResponse.
func serveGet(srv any, ctx context.Context, req *servepb.BatchGetRequest) (any, error) {
	return srv.(*Node).batchGet(ctx, req)
}

// notHeldLabel is the metric label of requests for a version no partition
// of the request holds here.
const notHeldLabel = "(not held)"

// maxVersionLen bounds a request's version (publication ids are short).
const maxVersionLen = servelimit.MaxFieldBytes

// respPool holds wire buffers; they are fully overwritten, so not zeroed.
var respPool = new(servepb.BufferPool)

type getScratch struct {
	part   []int
	order  []int
	kbuf   []byte      // the keys read, back to back, partition by partition
	val    [][]byte    // per key: the value (pinned by mr or res) when found
	found  []bool      // per key
	mr     mget.Result // every partition's pinned values (one GetMulti)
	reads  []partRead  // the partitions read, in kbuf's order
	dbs    []*grocksdb.DB
	counts []int
	status []servepb.KeyStatus
	msg    []string // per key error text (shared per partition)
	held   []*partition
	res    []grocksdb.Slices
	parts  [][]byte // a wireResponse's parts
}

var scratchPool = sync.Pool{New: func() any { return new(getScratch) }}

func (s *getScratch) reset(n int) {
	s.part = slices.Grow(s.part[:0], n)[:n]
	s.order = slices.Grow(s.order[:0], n)[:n]
	s.val = slices.Grow(s.val[:0], n)[:n]
	s.found = slices.Grow(s.found[:0], n)[:n]
	s.status = slices.Grow(s.status[:0], n)[:n]
	s.msg = slices.Grow(s.msg[:0], n)[:n]
	s.kbuf = s.kbuf[:0]
	clear(s.val)
	clear(s.found)
	clear(s.status)
	clear(s.msg)
}

// release frees RocksDB results and read locks; safe to call twice.
func (s *getScratch) release() {
	for _, r := range s.res {
		r.Destroy()
	}
	clear(s.res)
	s.res = s.res[:0]
	for _, p := range s.held {
		p.mu.RUnlock()
	}
	clear(s.held)
	s.held = s.held[:0]
	s.mr.Release()
	clear(s.reads)
	s.reads = s.reads[:0]
	clear(s.dbs)
	s.dbs, s.counts = s.dbs[:0], s.counts[:0]
	clear(s.val)
	clear(s.parts)
	s.parts = s.parts[:0]
}

// partRead is one partition of a request read from its database: the
// request's keys s.order[lo:hi].
type partRead struct {
	p      *partition
	db     *grocksdb.DB
	q      int
	lo, hi int
}

func (n *Node) batchGet(ctx context.Context, req *servepb.BatchGetRequest) (any, error) {
	return n.read(ctx, req, false)
}

// wireResponse is a BatchGetResponse for the wire protocol: the framing in
// a pooled buffer and the larger values as they lie pinned in RocksDB,
// written back to back; release unpins them and unlocks the partitions.
type wireResponse struct {
	parts   [][]byte
	release func()
}

// inlineMax: values up to this size are copied into the framing buffer
// (one iovec less costs more than the copy); larger ones are written from
// where RocksDB pinned them.
const inlineMax = 4 << 10

// read answers a BatchGet: an *servepb.Encoded (one buffer, for gRPC), or
// with zeroCopy a *wireResponse whose values are still pinned, and whose
// partitions still read-locked, until its release.
func (n *Node) read(ctx context.Context, req *servepb.BatchGetRequest, zeroCopy bool) (_ any, err error) {
	clk := n.opts.Clock
	start := clk.Now()
	m := n.opts.Metrics
	m.inflight.Inc()
	defer func() {
		m.inflight.Dec()
		d := clock.Since(clk, start)
		m.requestDuration.Observe(d.Seconds())
		n.pacer.Observe(d) // the adaptive ingest mode's read latency (pace.go)
		if err == nil {
			m.requestsOK.Inc()
		} else {
			m.requests.WithLabelValues(status.Code(err).String()).Inc()
		}
	}()
	keys := req.Keys
	if len(keys) == 0 {
		return nil, status.Error(codes.InvalidArgument, "cobbled: BatchGet: empty request (no keys)")
	}
	if len(keys) > n.opts.MaxKeys {
		return nil, status.Errorf(codes.InvalidArgument, "cobbled: BatchGet: %d keys, over the limit of %d per request", len(keys), n.opts.MaxKeys)
	}
	for i, k := range keys {
		if len(k) != pillar.KeySize {
			return nil, status.Errorf(codes.InvalidArgument, "cobbled: BatchGet: key %d: %s, want %d", i, shortKey(k), pillar.KeySize)
		}
	}
	if len(req.Version) > maxVersionLen {
		return nil, status.Errorf(codes.InvalidArgument, "cobbled: BatchGet: version of %d bytes, over the limit of %d", len(req.Version), maxVersionLen)
	}
	if n.closed.Load() {
		return nil, status.Error(codes.Unavailable, "cobbled: BatchGet: node is shutting down")
	}
	if f := n.opts.FaultDelay; f.Fraction > 0 && rand.Float64() < f.Fraction {
		if !clock.Sleep(ctx, clk, f.Delay) {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}

	if err := ctx.Err(); err != nil {
		// The caller gave up (a hedged request that lost the race, a
		// deadline): do not read for nobody.
		return nil, status.FromContextError(err).Err()
	}

	s := scratchPool.Get().(*getScratch)
	keep := false // a wireResponse releases s once written
	defer func() {
		if !keep {
			s.release()
			scratchPool.Put(s)
		}
	}()
	s.reset(len(keys))
	for i, k := range keys {
		s.part[i] = pillar.Partition(k, n.p)
		s.order[i] = i
	}
	slices.SortFunc(s.order, func(a, b int) int {
		if s.part[a] != s.part[b] {
			return s.part[a] - s.part[b]
		}
		return a - b
	})
	version := n.resolve(req.Version) // one publication for every key
	held := false                     // some partition of the request holds it (the metric's label)
	parts := *n.parts.Load()
	for lo := 0; lo < len(s.order); {
		q := s.part[s.order[lo]]
		hi := lo + 1
		for hi < len(s.order) && s.part[s.order[hi]] == q {
			hi++
		}
		run := s.order[lo:hi]
		lo = hi
		p := parts[q]
		if p != nil {
			p.mu.RLock() // increasing partition order: see the comment at the top
			s.held = append(s.held, p)
		}
		var db *grocksdb.DB
		var corrupt bool
		if p != nil && p.dbs != nil {
			db, corrupt = p.db(version)
		}
		if db == nil {
			var msg string
			switch {
			case p == nil || p.dbs == nil:
				msg = fmt.Sprintf("partition %d not served by node %s", q, n.opts.ID)
			case corrupt:
				msg = fmt.Sprintf("partition %d: version %q on node %s: its data is corrupt; rebuilding", q, version, n.opts.ID)
			default:
				msg = fmt.Sprintf("partition %d: version %q not held by node %s", q, version, n.opts.ID)
			}
			for _, i := range run {
				s.status[i], s.msg[i] = servepb.KeyStatus_KEY_NOT_SERVED, msg
			}
			continue
		}
		for _, i := range run {
			s.kbuf = append(s.kbuf, keys[i]...)
		}
		held = true
		s.reads = append(s.reads, partRead{p: p, db: db, q: q, lo: lo - len(run), hi: lo})
		s.dbs, s.counts = append(s.dbs, db), append(s.counts, len(run))
	}
	// Pinned: the values are read in place (block cache) until release,
	// every partition's in one call into RocksDB.
	errs := mget.GetMulti(s.dbs, n.ro, s.counts, s.kbuf, pillar.KeySize, &s.mr)
	at := 0
	for j, pr := range s.reads {
		run := s.order[pr.lo:pr.hi]
		if errs[j] != nil {
			// One bad key fails the partition's MultiGet: read its keys
			// one by one, so only those that fail get an error.
			n.getEach(pr.p, pr.db, version, pr.q, keys, run, s, errs[j])
		} else {
			for k, i := range run {
				s.val[i], s.found[i] = s.mr.Value(at + k)
			}
		}
		at += len(run)
	}

	// Size, then encode in request order.
	total := 0
	for i := range keys {
		total += resultSize(s, i)
	}
	if version != "" {
		total += 1 + protowire.SizeBytes(len(version))
	}
	if total > n.opts.MaxResponseBytes {
		return nil, status.Errorf(codes.ResourceExhausted, "cobbled: BatchGet: response of %d keys would be %d bytes, over the limit of %d; ask for fewer keys", len(keys), total, n.opts.MaxResponseBytes)
	}
	if zeroCopy {
		out, err := n.encodeParts(s, len(keys), total, version)
		if err != nil {
			return nil, err
		}
		keep = true
		n.countRead(held, version, s, len(keys))
		return out, nil
	}
	bufp := respPool.Get(total)
	b, _, _ := appendResponse((*bufp)[:0], nil, s, len(keys), version, math.MaxInt)
	if len(b) != total {
		respPool.Put(bufp)
		return nil, status.Errorf(codes.Internal, "cobbled: BatchGet: encoded %d bytes, sized %d", len(b), total)
	}
	*bufp = b
	n.countRead(held, version, s, len(keys))
	return &servepb.Encoded{Buf: mem.NewBuffer(bufp, respPool)}, nil
}

// countRead updates the read metrics for a request's n keys read into s.
func (n *Node) countRead(held bool, version string, s *getScratch, keys int) {
	m := n.opts.Metrics
	var found, missing, notServed, failed, valueBytes int
	for i := range keys {
		switch st := s.status[i]; {
		case s.found[i]:
			found++
			valueBytes += len(s.val[i])
		case st == servepb.KeyStatus_KEY_OK:
			missing++
		case st == servepb.KeyStatus_KEY_NOT_SERVED:
			notServed++
		default:
			failed++
		}
	}
	if !held {
		version = notHeldLabel // callers choose versions: keep the label set to what is held
	}
	m.versionReads.WithLabelValues(version).Inc()
	for _, c := range [...]struct {
		c prometheus.Counter
		n int
	}{{m.keysFound, found}, {m.keysMissing, missing}, {m.keysNotServed, notServed}, {m.keysFailed, failed}} {
		if c.n > 0 {
			c.c.Add(float64(c.n))
		}
	}
	m.bytes.Add(float64(valueBytes))
}

// encodeParts encodes the response of keys keys in s (total bytes) as a
// wireResponse: everything but the values over inlineMax goes into one
// pooled framing buffer, and those values are parts of their own, read
// where RocksDB pinned them. Its release frees the buffer and s.
func (n *Node) encodeParts(s *getScratch, keys, total int, version string) (*wireResponse, error) {
	frame := total
	for i := range keys {
		if s.found[i] && len(s.val[i]) > inlineMax {
			frame -= len(s.val[i])
		}
	}
	hp := respPool.Get(frame)
	h, parts, mark := appendResponse((*hp)[:0], s.parts[:0], s, keys, version, inlineMax)
	if len(h) != frame || cap(h) != cap(*hp) { // sized wrong (or h grew out of the pooled buffer)
		respPool.Put(hp)
		return nil, status.Errorf(codes.Internal, "cobbled: BatchGet: encoded %d framing bytes, sized %d", len(h), frame)
	}
	if mark < len(h) {
		parts = append(parts, h[mark:])
	}
	s.parts = parts
	return &wireResponse{parts: parts, release: func() {
		respPool.Put(hp)
		s.release()
		scratchPool.Put(s)
	}}, nil
}

// appendResponse appends to b the BatchGetResponse encoding of the keys
// keys read into s (and version), as both transports send it. A value over
// split bytes is not copied: it and the bytes of b before it (from mark
// on) are appended to parts instead, so that b[mark:] is what follows the
// last such value. With split math.MaxInt, b is the whole encoding.
func appendResponse(b []byte, parts [][]byte, s *getScratch, keys int, version string, split int) (_ []byte, _ [][]byte, mark int) {
	for i := range keys {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(innerSize(s, i)))
		if s.found[i] {
			b = protowire.AppendTag(b, 1, protowire.VarintType)
			b = append(b, 1)
			if d := s.val[i]; len(d) > split {
				b = protowire.AppendTag(b, 2, protowire.BytesType)
				b = protowire.AppendVarint(b, uint64(len(d)))
				parts = append(parts, b[mark:len(b):len(b)], d)
				mark = len(b)
			} else if len(d) > 0 {
				b = protowire.AppendTag(b, 2, protowire.BytesType)
				b = protowire.AppendBytes(b, d)
			}
		}
		if st := s.status[i]; st != servepb.KeyStatus_KEY_OK {
			b = protowire.AppendTag(b, 3, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(st))
			b = protowire.AppendTag(b, 4, protowire.BytesType)
			b = protowire.AppendString(b, s.msg[i])
		}
	}
	if version != "" {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, version)
	}
	return b, parts, mark
}

// getEach reads the keys of run (partition q) one at a time after their
// MultiGet failed with mgErr, filling s; it returns how many keys failed.
// Corruption takes the partition out of service (markCorrupt) after this
// request, which is still answered for the keys that read fine.
func (n *Node) getEach(p *partition, db *grocksdb.DB, version string, q int, keys [][]byte, run []int, s *getScratch, mgErr error) int {
	failed := 0
	corrupt := isCorruption(mgErr)
	for _, i := range run {
		v, err := db.Get(n.ro, keys[i])
		if err != nil {
			corrupt = corrupt || isCorruption(err)
			s.status[i], s.msg[i] = servepb.KeyStatus_KEY_ERROR, fmt.Sprintf("partition %d: key %s: %v", q, shortKey(keys[i]), err)
			failed++
			continue
		}
		s.res = append(s.res, grocksdb.Slices{v})
		s.val[i], s.found[i] = v.Data(), v.Exists()
	}
	if corrupt {
		n.markCorrupt(p, version, fmt.Errorf("partition %d: read: %w", q, mgErr))
	}
	return failed
}

// innerSize is the encoded size of Result i's fields.
func innerSize(s *getScratch, i int) int {
	size := 0
	if s.found[i] {
		size += 2 // found
		if l := len(s.val[i]); l > 0 {
			size += 1 + protowire.SizeBytes(l)
		}
	}
	if st := s.status[i]; st != servepb.KeyStatus_KEY_OK {
		size += 1 + protowire.SizeVarint(uint64(st))
		size += 1 + protowire.SizeBytes(len(s.msg[i]))
	}
	return size
}

// resultSize is the encoded size of Result i within the response.
func resultSize(s *getScratch, i int) int {
	return 1 + protowire.SizeBytes(innerSize(s, i))
}

// WireHandler answers the lean protocol's BatchGet (package wire) with the
// same code path, limits, metrics and errors as the gRPC method: the
// response bytes are the encoded BatchGetResponse gRPC would send.
func (n *Node) WireHandler() wire.Handler {
	return func(ctx context.Context, req *servepb.BatchGetRequest) ([][]byte, func(), error) {
		out, err := n.read(ctx, req, true)
		if err != nil {
			return nil, nil, err
		}
		r := out.(*wireResponse)
		return r.parts, r.release, nil
	}
}

// Serve serves gRPC (gs, from NewGRPCServer) and the lean wire protocol on
// one listener (wire.Split tells them apart by a connection's first bytes)
// until gs stops, which also closes the wire side and its connections.
// Callers in other languages use gRPC; the Go router may use either.
func (n *Node) Serve(lis net.Listener, gs *grpc.Server) error {
	other, wl := wire.Split(lis, 0)
	wo := n.opts.Wire
	wo.MaxKeys, wo.Logger = n.opts.MaxKeys, n.opts.Logger
	ws := wire.NewServer(n.WireHandler(), wo)
	go ws.ServeConns(wl)
	err := gs.Serve(other)
	ws.Close()
	return err
}
