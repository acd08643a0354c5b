package readbench

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/cobbled/wire"
)

var errRedisUnavailable = errors.New("readbench: Redis unavailable")

// redisScenario loads the same keys and values into Redis under a prefix of
// this run, reads the same 12-key batches with MGET from the same number of
// closed-loop clients, then (Interleave) sends every batch through a healthy
// router and Redis in turn, and deletes its keys afterwards. It returns the
// Redis result, then the interleaved router and Redis results.
func (b *bench) redisScenario(ctx context.Context) ([]*Result, error) {
	o := b.opts
	get, closeRedis, err := b.openRedis(ctx, o.Clients+2)
	if err != nil {
		return nil, err
	}
	defer closeRedis()
	res := &Result{Scenario: Redis, Description: "the same batches from Redis with MGET (go-redis v9, one pool)"}
	b.load(ctx, o.Warmup, get, nil)
	b.load(ctx, o.Duration, get, nil).fill(res)
	out := []*Result{res}
	if !o.Interleave {
		return out, nil
	}
	return b.interleaved(ctx, out, get)
}

// openRedis loads the data set into Redis under a prefix of this run and
// returns an MGET getter, and a function that deletes the keys and closes
// the client.
func (b *bench) openRedis(ctx context.Context, pool int) (getter, func(), error) {
	o := b.opts
	rdb := redis.NewClient(&redis.Options{Addr: o.RedisAddr, PoolSize: pool, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	err := rdb.Ping(pctx).Err()
	cancel()
	if err != nil {
		rdb.Close()
		return nil, nil, fmt.Errorf("%w at %s: %v", errRedisUnavailable, o.RedisAddr, err)
	}
	prefix := fmt.Sprintf("pillar:readbench:%d-%d:", os.Getpid(), time.Now().UnixNano())
	name := func(k []byte) string { return prefix + hex.EncodeToString(k) }
	keys := b.c.Keys()
	b.log.Info("readbench: loading Redis", "addr", o.RedisAddr, "prefix", prefix, "keys", len(keys))
	cleanup := func() {
		defer rdb.Close()
		// Clean up even when the run was interrupted.
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for i := 0; i < len(keys); i += 500 {
			var names []string
			for _, k := range keys[i:min(i+500, len(keys))] {
				names = append(names, name(k))
			}
			if err := rdb.Unlink(cctx, names...).Err(); err != nil {
				b.log.Warn("readbench: Redis cleanup", "prefix", prefix, "err", err)
				return
			}
		}
	}
	for i := 0; i < len(keys); i += 64 {
		pipe := rdb.Pipeline()
		for _, k := range keys[i:min(i+64, len(keys))] {
			pipe.Set(ctx, name(k), b.c.Value(k), 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			cleanup()
			return nil, nil, fmt.Errorf("readbench: load Redis at %s: %w", o.RedisAddr, err)
		}
	}
	get := func(ctx context.Context, keys [][]byte) error {
		names := make([]string, len(keys))
		for i, k := range keys {
			names[i] = name(k)
		}
		vals, err := rdb.MGet(ctx, names...).Result()
		if err != nil {
			return err
		}
		return b.verify(keys, len(vals), func(i int) (bool, []byte) {
			s, ok := vals[i].(string)
			return ok, unsafe.Slice(unsafe.StringData(s), len(s)) // read only; no copy

		})
	}
	return get, cleanup, nil
}

// interleaved sends every batch through a healthy router and to Redis
// (get) in turn, then, in a phase of its own, straight to one node over
// gRPC, to the bare gRPC floor and to the node over wire in turn.
func (b *bench) interleaved(ctx context.Context, out []*Result, get getter) ([]*Result, error) {
	o := b.opts
	r, rget, closeFn, err := b.newRouter(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer closeFn()
	// The floor: the same request straight to one node (which holds every
	// partition when replicas = nodes), without the router.
	m := b.c.Members()[0]
	conn, err := grpc.NewClient(m.Addr, append(servepb.DialOptions(0), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	direct := servepb.NewServeClient(conn)
	dget := func(ctx context.Context, keys [][]byte) error {
		resp, err := direct.BatchGet(ctx, &servepb.BatchGetRequest{Keys: keys})
		if err != nil {
			return err
		}
		return b.verify(keys, len(resp.Results), func(i int) (bool, []byte) { return resp.Results[i].Found, resp.Results[i].Value })
	}
	wc := wire.NewClient(m.Addr, wire.ClientOptions{})
	defer wc.Close()
	wget := func(ctx context.Context, keys [][]byte) error {
		resp, err := wc.BatchGet(ctx, &servepb.BatchGetRequest{Keys: keys})
		if err != nil {
			return err
		}
		return b.verify(keys, len(resp.Results), func(i int) (bool, []byte) { return resp.Results[i].Found, resp.Results[i].Value })
	}
	// Two interleaved phases: router and Redis, then the node's own floors
	// (straight to a node over gRPC, bare gRPC, wire). In one mix, a router
	// request (all its work in this process) shared the 2 cores with other
	// clients' gRPC calls, the heaviest getters here, while Redis's server
	// had its own process: the mix, not the router, set the router/Redis
	// ratio (4 clients, idle machine: p50 1.73× in the mix against 0.75×
	// in separate runs).
	floors := []getter{dget}
	bareAt, wireAt := -1, -1
	if o.Replicas == o.Nodes {
		bs, err := b.startBare(ctx, filepath.Join(b.dir, "bare"))
		if err != nil {
			return nil, err
		}
		defer bs.close()
		bget, closeBare, err := b.bareGetter(bs)
		if err != nil {
			return nil, err
		}
		defer closeBare()
		bareAt = len(floors)
		floors = append(floors, bget)
		wireAt = len(floors)
		floors = append(floors, wget)
	}
	b.log.Info("readbench: scenario", "scenario", "interleaved", "what", "each batch through the router and from Redis, then straight to a node")
	gets := []getter{rget, get}
	b.loadN(ctx, o.Warmup, gets, nil)
	before := r.Stats()
	ss := b.loadN(ctx, o.Duration, gets, nil)
	after := r.Stats()
	ri := &Result{Scenario: HealthyInterleaved, Description: "healthy cluster through the router, each batch alternating with the same batch from Redis (same clients, same moment)"}
	di := &Result{Scenario: RedisInterleaved, Description: "Redis MGET, alternating with the router"}
	ss[0].fill(ri)
	ss[1].fill(di)
	var extra []*Result
	if o.Replicas == o.Nodes {
		// Straight to a node needs one node holding every partition.
		b.loadN(ctx, o.Warmup, floors, nil)
		ss = b.loadN(ctx, o.Duration, floors, nil)
		fi := &Result{Scenario: DirectInterleaved, Description: fmt.Sprintf("the floor: the same BatchGet straight to %s with the generated gRPC client, no router, alternating with bare/interleaved and wire/interleaved (the phase after the router's)", m.ID)}
		ss[0].fill(fi)
		extra = append(extra, fi)
	}
	if bareAt > 0 {
		bi := &Result{Scenario: BareInterleaved, Description: "the floor under the node: a bare grpc-go unary call with a raw codec around the same MultiGet per partition (same table options, cache size and HTTP/2 windows), alternating with direct/interleaved"}
		ss[bareAt].fill(bi)
		extra = append(extra, bi)
	}
	if wireAt > 0 {
		wi := &Result{Scenario: WireInterleaved, Description: fmt.Sprintf("the same BatchGet straight to %s over cobbled's lean wire protocol (package wire, same port, same encoding), alternating with direct/interleaved", m.ID)}
		ss[wireAt].fill(wi)
		extra = append(extra, wi)
	}
	counters(ri, before, after)
	return append(append(out, ri, di), extra...), nil
}
