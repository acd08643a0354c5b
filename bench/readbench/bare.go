package readbench

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/linxGnu/grocksdb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/pillarkit/pillar/cobbled"
	"github.com/pillarkit/pillar/cobbled/mget"
	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/internal/grpclink"
	"github.com/pillarkit/pillar/internal/rocks"
	"github.com/pillarkit/pillar/internal/testcluster"
	"github.com/pillarkit/pillar/pillar"
)

// The bare floor: a grpc-go unary call with a raw codec around the same
// RocksDB MultiGet per partition, with the same table options, block cache
// size and HTTP/2 windows as a cobbled node, and nothing else (no request
// validation, no metrics, no partition locks, no protobuf). Request: the
// keys, 16 bytes each, back to back. Response: per key a uvarint (0: absent,
// else 1 + value length) and the value. It is what the node's BatchGet is
// measured against.

// rawCodec passes []byte (requests) and *rawFrame (responses) through as is.
type rawCodec struct{}

type rawFrame struct{ b mem.BufferSlice }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch x := v.(type) {
	case *[]byte:
		return mem.BufferSlice{mem.SliceBuffer(*x)}, nil
	case *rawFrame:
		return x.b, nil
	}
	return nil, fmt.Errorf("readbench: raw codec cannot marshal %T", v)
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	switch x := v.(type) {
	case *[]byte:
		*x = data.Materialize()
		return nil
	case *rawFrame:
		x.b = data // the caller frees it
		data.Ref()
		return nil
	}
	return fmt.Errorf("readbench: raw codec cannot unmarshal into %T", v)
}

func (rawCodec) Name() string { return "pillar-raw" }

var _ encoding.CodecV2 = rawCodec{}

const bareMethod = "/pillar.readbench.Bare/Get"

// bareServer holds one RocksDB per partition, loaded from the cluster's SST
// files.
type bareServer struct {
	dbs   []*grocksdb.DB
	opts  *grocksdb.Options
	cache *grocksdb.Cache
	ro    *grocksdb.ReadOptions
	srv   *grpc.Server
	addr  string
	pool  *servepb.BufferPool
	// served gets Serve's error; proc is the bare process (out of
	// process: nothing else is set).
	served chan error
	proc   *testcluster.Process
}

func (b *bench) startBare(ctx context.Context, dir string) (*bareServer, error) {
	ssts := make([]string, b.c.Partitions())
	for p := range ssts {
		ssts[p] = b.c.SSTFile(p)
	}
	s, err := openBare(dir, ssts, b.c.CacheBytes())
	if err != nil {
		return nil, err
	}
	if len(b.exec) == 0 {
		return s, s.listen("127.0.0.1:0")
	}
	// Out of process, like the nodes: close the databases the loading
	// opened; the bare process opens them again.
	s.close()
	cfg := BareConfig{Dir: dir, Partitions: len(ssts), CacheBytes: b.c.CacheBytes(), Listen: "127.0.0.1:0"}
	p, err := testcluster.StartProcess(ctx, "the bare floor", append(slices.Clone(b.exec), cfg.Args()...), b.env)
	if err != nil {
		return nil, err
	}
	return &bareServer{addr: p.Addr, proc: p}, nil
}

// BareConfig is what the bare floor's process (pillar bench read-node
// --bare) needs: Partitions databases under Dir (p00000, …) that the
// benchmark has loaded.
type BareConfig struct {
	Dir        string
	Partitions int
	CacheBytes int64
	Listen     string
}

// Args are the flags of pillar bench read-node --bare for c.
func (c BareConfig) Args() []string {
	return []string{"--bare", "--data", c.Dir, "--partitions", strconv.Itoa(c.Partitions), "--cache", strconv.FormatInt(c.CacheBytes, 10), "--listen", c.Listen}
}

// ServeBareProcess is the bare floor's process body: it opens cfg's
// databases, serves on cfg.Listen and returns as testcluster.ServeUntilParentGone
// does.
func ServeBareProcess(ctx context.Context, cfg BareConfig, stdin io.Reader, stdout io.Writer) error {
	if cfg.Dir == "" || cfg.Partitions <= 0 {
		return fmt.Errorf("readbench: bare process: --data %q and --partitions %d: both required", cfg.Dir, cfg.Partitions)
	}
	s, err := openBare(cfg.Dir, make([]string, cfg.Partitions), cfg.CacheBytes)
	if err != nil {
		return err
	}
	defer s.close()
	if err := s.listen(cfg.Listen); err != nil {
		return err
	}
	if err := testcluster.ServeUntilParentGone(ctx, s.addr, stdin, stdout, s.served); err != nil {
		return fmt.Errorf("readbench: bare process: %w", err)
	}
	return nil
}

// openBare opens (creating) one database per partition under dir and
// ingests ssts[p] into partition p's where it is not "".
func openBare(dir string, ssts []string, cacheBytes int64) (*bareServer, error) {
	s := &bareServer{cache: grocksdb.NewLRUCache(uint64(cacheBytes)), ro: grocksdb.NewDefaultReadOptions(), pool: new(servepb.BufferPool)}
	var err error
	if s.opts, err = cobbled.TableOptions(rocks.TableConfig{}, s.cache); err != nil { // the node's own
		s.close()
		return nil, fmt.Errorf("readbench: bare: %w", err)
	}
	s.opts.SetCreateIfMissing(true)
	ing := grocksdb.NewDefaultIngestExternalFileOptions()
	defer ing.Destroy()
	for p, sst := range ssts {
		pdir := filepath.Join(dir, fmt.Sprintf("p%05d", p))
		if err := os.MkdirAll(pdir, 0o755); err != nil {
			s.close()
			return nil, fmt.Errorf("readbench: bare: %w", err)
		}
		db, err := grocksdb.OpenDb(s.opts, pdir)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("readbench: bare: open %s: %w", pdir, err)
		}
		s.dbs = append(s.dbs, db)
		if sst == "" {
			continue
		}
		if err := db.IngestExternalFile([]string{sst}, ing); err != nil {
			s.close()
			return nil, fmt.Errorf("readbench: bare: ingest partition %d: %w", p, err)
		}
	}
	return s, nil
}

func (s *bareServer) listen(addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("readbench: bare: %w", err)
	}
	s.addr = lis.Addr().String()
	// The same transport settings as cobbled.Node.NewGRPCServer.
	s.srv = grpc.NewServer(append(grpclink.ServerOptions(), grpc.ForceServerCodecV2(rawCodec{}), grpc.MaxRecvMsgSize(16<<20), grpc.MaxSendMsgSize(65<<20),
		grpc.InitialWindowSize(16<<20), grpc.InitialConnWindowSize(64<<20), grpc.WriteBufferSize(256<<10), grpc.ReadBufferSize(64<<10),
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))))...)
	s.srv.RegisterService(&grpc.ServiceDesc{ServiceName: "pillar.readbench.Bare", HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Get", Handler: s.handle}}}, s)
	s.served = make(chan error, 1)
	go func() { s.served <- s.srv.Serve(lis) }()
	return nil
}

func (s *bareServer) handle(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	var in []byte
	if err := dec(&in); err != nil {
		return nil, err
	}
	if len(in) == 0 || len(in)%pillar.KeySize != 0 {
		return nil, status.Errorf(codes.InvalidArgument, "bare: %d request bytes", len(in))
	}
	n := len(in) / pillar.KeySize
	keys := make([][]byte, n)
	part := make([]int, n)
	for i := range keys {
		keys[i] = in[i*pillar.KeySize : (i+1)*pillar.KeySize]
		part[i] = pillar.Partition(keys[i], len(s.dbs))
	}
	vals := make([][]byte, n)
	found := make([]bool, n)
	// Every partition's keys in one pinned MultiGet call, as the node does
	// (package mget): keys grouped by partition, in partition order.
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return part[order[a]] < part[order[b]] })
	pk := make([]byte, 0, len(in))
	var dbs []*grocksdb.DB
	var counts []int
	for x, i := range order {
		pk = append(pk, keys[i]...)
		if x == 0 || part[i] != part[order[x-1]] {
			dbs, counts = append(dbs, s.dbs[part[i]]), append(counts, 0)
		}
		counts[len(counts)-1]++
	}
	got := new(mget.Result)
	defer got.Release()
	for _, err := range mget.GetMulti(dbs, s.ro, counts, pk, pillar.KeySize, got) {
		if err != nil {
			return nil, status.Errorf(codes.Internal, "bare: %v", err)
		}
	}
	for x, i := range order {
		vals[i], found[i] = got.Value(x)
	}
	total := 0
	for _, v := range vals {
		total += binary.MaxVarintLen64 + len(v)
	}
	bufp := s.pool.Get(total)
	b := (*bufp)[:0]
	for i, d := range vals {
		if !found[i] {
			b = binary.AppendUvarint(b, 0)
			continue
		}
		b = binary.AppendUvarint(b, uint64(len(d))+1)
		b = append(b, d...)
	}
	*bufp = b
	return &rawFrame{b: mem.BufferSlice{mem.NewBuffer(bufp, s.pool)}}, nil
}

func (s *bareServer) close() {
	if s.proc != nil {
		s.proc.Stop(5 * time.Second)
		return
	}
	if s.srv != nil {
		s.srv.Stop()
	}
	for _, db := range s.dbs {
		db.Close()
	}
	if s.opts != nil {
		s.opts.Destroy()
	}
	s.ro.Destroy()
	s.cache.Destroy()
}

// bareGetter dials the bare server and returns a getter that checks its
// answers like the others.
func (b *bench) bareGetter(s *bareServer) (getter, func(), error) {
	conn, err := grpc.NewClient(s.addr, append(servepb.DialOptions(0), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))...)
	if err != nil {
		return nil, nil, err
	}
	get := func(ctx context.Context, keys [][]byte) error {
		req := make([]byte, 0, len(keys)*pillar.KeySize)
		for _, k := range keys {
			req = append(req, k...)
		}
		var out rawFrame
		if err := conn.Invoke(ctx, bareMethod, &req, &out); err != nil {
			return err
		}
		defer out.b.Free()
		body := out.b.Materialize() // one copy, as the generated client's unmarshal makes
		vals := make([][]byte, 0, len(keys))
		found := make([]bool, 0, len(keys))
		for len(body) > 0 {
			l, n := binary.Uvarint(body)
			if n <= 0 || uint64(len(body)-n) < l-min(l, 1) {
				return fmt.Errorf("readbench: bare: malformed response")
			}
			body = body[n:]
			if l == 0 {
				vals, found = append(vals, nil), append(found, false)
				continue
			}
			vals, found = append(vals, body[:l-1]), append(found, true)
			body = body[l-1:]
		}
		return b.verify(keys, len(vals), func(i int) (bool, []byte) { return found[i], vals[i] })
	}
	return get, func() { conn.Close() }, nil
}
