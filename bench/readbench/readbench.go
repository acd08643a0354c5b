package readbench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/pillarkit/pillar/cobbled"
	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/cobbled/router"
	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/internal/testcluster"
)

// Scenario names, in the order Run runs them.
const (
	Healthy     = "healthy"
	Redis       = "redis"
	SlowNoHedge = "slow-nohedge"
	SlowHedge   = "slow-hedge"
	Kill        = "kill"
	Degraded    = "degraded"
	Saturation  = "saturation"

	// Results of the saturation scenario.
	SaturationRouter = "saturation/router"
	SaturationRedis  = "saturation/redis"

	// Results of the Redis scenario's interleaved part.
	HealthyInterleaved = "healthy/interleaved"
	RedisInterleaved   = "redis/interleaved"
	DirectInterleaved  = "direct/interleaved"
	BareInterleaved    = "bare/interleaved"
	WireInterleaved    = "wire/interleaved"

	// The degraded scenario's reference router (the degraded node marked
	// down in its routing table), interleaved with it.
	DegradedReference = "degraded/reference"
)

// AllScenarios lists every scenario in run order.
var AllScenarios = []string{Healthy, Redis, SlowNoHedge, SlowHedge, Degraded, Kill, Saturation}

// Options configure Run. The zero value of every field means its default.
type Options struct {
	// Out is the folder the table (results.md), the plot (latency.png) and
	// the raw figures (results.json) are written to. The default value ""
	// writes nothing.
	Out string
	// Dir holds the cluster's data. The default value "" is a temporary
	// folder, removed afterwards.
	Dir string
	// Duration is how long each scenario measures. The default value is 10s.
	Duration time.Duration
	// Warmup runs before each scenario's measurement (routers learn node
	// latencies, caches fill). The default value is 1s.
	Warmup time.Duration
	// Clients is the number of closed-loop clients. The default value is 4.
	Clients int
	// Keys is the data set's size; requests are its consecutive BatchKeys
	// slices. The default value is 6000.
	Keys int
	// BatchKeys is the keys per request. The default value is 12.
	BatchKeys int
	// Nodes, Partitions and Replicas shape the cluster. The default values
	// are 3, 64 and 3.
	Nodes, Partitions, Replicas int
	// CacheBytes is each node's (and the bare floor's) block cache. The
	// default value is 1 GiB, a node's own default (cobbled.Options
	// CacheBytes), which holds the default data set (6000 values of ~51 KB,
	// ~306 MB per node, as Redis holds it all in memory). Below the data
	// set, a request's misses are read from the OS page cache, malloc'd
	// and evicted again: 256 MiB (the setting before 2026-12-02) cost the
	// node processes ~20% more CPU per request.
	CacheBytes int64
	// MinValue and MaxValue bound value sizes. The default values are 100
	// and 102400 (mean ≈ 50 KB).
	MinValue, MaxValue int
	// Zone is the router's zone. The default value "" prefers none (a caller
	// outside the nodes' zones).
	Zone string
	// SlowNode is the node made slow in the slow scenarios; SlowFraction of
	// its requests are delayed by SlowDelay (cobbled's fault delay). The
	// default values are 0, 0.03 and 50ms. Unless Zone is set, the slow
	// scenarios' router sits in the slow node's zone, so that node is every
	// request's primary and the fault reaches SlowFraction (3%) of the
	// requests (the scenario reports the measured reach): enough to move an
	// unhedged p99, and what hedging is for. (With no zone, the router's
	// load-aware choice, median × outstanding, moves traffic off a node that
	// stalls: 10-15% of its requests reached only 1.4% of all, and the
	// scenario tested replica choice instead of hedging.)
	SlowNode     int
	SlowFraction float64
	SlowDelay    time.Duration
	// DegradedNode is the node that adds DegradedDelay to every request in
	// the degraded scenario (a failing disk): the router's replica choice,
	// not hedging, must steer traffic away. The default values are 1 and
	// 5ms.
	DegradedNode  int
	DegradedDelay time.Duration
	// SaturationClients is the number of closed-loop clients in the
	// saturation scenario (all on the router or all on Redis). The default
	// value is 16.
	SaturationClients int
	// SaturationSlice is how long the saturation clients stay on one of
	// router and Redis before switching to the other; each gets Duration in
	// all. The default value is 500ms.
	SaturationSlice time.Duration
	// KillNode is the node killed a third of the way into the kill
	// scenario; DownAfter later the routing marks it down, as the control
	// plane does when heartbeats stop. The default values are 2 and 2s.
	KillNode  int
	DownAfter time.Duration
	// Deadline is each request's deadline. The default value is 1s.
	Deadline time.Duration
	// Spread sets router.Options.Spread (each partition's replica chosen on
	// its own). The default value false sends a request to as few nodes as
	// possible.
	Spread bool
	// NoHedge turns hedging off in every scenario but slow-hedge (which
	// exists to measure it against slow-nohedge): healthy, the interleaved
	// rows, degraded, kill and saturation run unhedged, for an A/B of what
	// hedging costs a healthy cluster. The default value false hedges.
	NoHedge bool
	// Transport is the router's node transport (router.Options.Transport):
	// "grpc" or "wire". The default value "" is wire, as `bench read`'s
	// (gRPC before 2026-12-02). The interleaved rows measure both straight
	// to a node either way.
	Transport string
	// ViaServer sends requests through the router's gRPC server on
	// loopback instead of the library. The default value is false.
	ViaServer bool
	// Interleave adds to the Redis scenario a run where every client sends
	// each batch through the router and then to Redis, so both see the same
	// moment of a shared machine. The default value false skips it.
	Interleave bool
	// RedisAddr is the Redis peer. The default value is "127.0.0.1:6379";
	// "-" skips the Redis scenario.
	RedisAddr string
	// Scenarios to run. The default value is AllScenarios.
	Scenarios []string
	// GCPercent, when positive, is the Go GC percent for the run (restored
	// afterwards), and the node processes' GOGC (NodeExec), so nodes run
	// with the same setting in a process of their own or in this one.
	// Requests allocate ~600 KB each; the Redis client shares the process
	// and the setting. The default value 0 leaves it as is.
	GCPercent int
	// NodeExec, when set, runs every node and the bare floor as a process
	// of its own, as production runs nodes, instead of in this process
	// with the router, the clients and the Redis client (sharing its cores
	// and its garbage collector, while Redis's server has a process of its
	// own). It is the pillar binary and its leading arguments, to which
	// the read-node flags are appended: {"/path/pillar", "bench",
	// "read-node"} (testcluster.Options.Exec). The default value nil runs them
	// in this process.
	NodeExec []string
	// NodeEnv is added to the node processes' environment (KEY=VALUE),
	// after GCPercent's GOGC. The default value nil adds nothing.
	NodeEnv []string
	// Router adjusts the router's options (after the benchmark's own). The
	// default value nil changes nothing.
	Router func(*router.Options)
	// Logger receives progress. The default value discards.
	Logger *slog.Logger
}

func (o *Options) ensureDefaults() {
	if o.Duration == 0 {
		o.Duration = 10 * time.Second
	}
	if o.Warmup == 0 {
		o.Warmup = time.Second
	}
	if o.Clients == 0 {
		o.Clients = 4
	}
	if o.Keys == 0 {
		o.Keys = 6000
	}
	if o.BatchKeys == 0 {
		o.BatchKeys = 12
	}
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.Partitions == 0 {
		o.Partitions = 64
	}
	if o.Replicas == 0 {
		o.Replicas = 3
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = 1 << 30
	}
	if o.Transport == "" {
		o.Transport = router.TransportWire
	}
	if o.MinValue == 0 {
		o.MinValue = 100
	}
	if o.MaxValue == 0 {
		o.MaxValue = 100 << 10
	}
	if o.SlowFraction == 0 {
		o.SlowFraction = 0.03
	}
	if o.DegradedNode == 0 {
		o.DegradedNode = 1
	}
	if o.DegradedDelay == 0 {
		o.DegradedDelay = 5 * time.Millisecond
	}
	if o.SaturationClients == 0 {
		o.SaturationClients = 16
	}
	if o.SaturationSlice == 0 {
		o.SaturationSlice = 500 * time.Millisecond
	}
	if o.SlowDelay == 0 {
		o.SlowDelay = 50 * time.Millisecond
	}
	if o.KillNode == 0 {
		o.KillNode = 2
	}
	if o.DownAfter == 0 {
		o.DownAfter = 2 * time.Second
	}
	if o.Deadline == 0 {
		o.Deadline = time.Second
	}
	if o.RedisAddr == "" {
		o.RedisAddr = "127.0.0.1:6379"
	}
	if len(o.Scenarios) == 0 {
		o.Scenarios = AllScenarios
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate checks the options, with defaults applied.
func (o Options) Validate() error {
	o.ensureDefaults()
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf("readbench: options: "+format, a...)) }
	for _, s := range o.Scenarios {
		if !slices.Contains(AllScenarios, s) {
			fail("unknown scenario %q (want some of %v)", s, AllScenarios)
		}
	}
	if o.Keys < o.BatchKeys || o.BatchKeys < 1 {
		fail("Keys %d must be at least BatchKeys %d, which must be positive", o.Keys, o.BatchKeys)
	}
	if o.SlowNode < 0 || o.SlowNode >= o.Nodes || o.KillNode < 0 || o.KillNode >= o.Nodes || o.DegradedNode < 0 || o.DegradedNode >= o.Nodes {
		fail("SlowNode %d, DegradedNode %d and KillNode %d must name one of %d nodes", o.SlowNode, o.DegradedNode, o.KillNode, o.Nodes)
	}
	if o.Replicas < 2 {
		fail("Replicas %d: hedging and failover need at least 2", o.Replicas)
	}
	if o.Transport != "" && o.Transport != router.TransportGRPC && o.Transport != router.TransportWire {
		fail("Transport %q: want %q or %q", o.Transport, router.TransportGRPC, router.TransportWire)
	}
	if o.CacheBytes < 1<<20 {
		fail("CacheBytes %d is under 1 MiB", o.CacheBytes)
	}
	if o.Clients < 1 || o.Duration <= 0 {
		fail("Clients and Duration must be positive")
	}
	if o.SaturationSlice < 0 {
		fail("SaturationSlice %v is negative", o.SaturationSlice)
	}
	if o.SlowFraction < 0 || o.SlowFraction > 1 {
		fail("SlowFraction %v must be in [0,1]", o.SlowFraction)
	}
	return errors.Join(errs...)
}

// Result is one scenario's figures.
type Result struct {
	Scenario    string
	Description string
	Requests    int
	Errors      int
	// DeadlineErrors counts the failed requests that ran out of their
	// deadline (included in Errors).
	DeadlineErrors int
	Elapsed        time.Duration
	RPS            float64
	// Latency percentiles of all requests (failed ones at their failure time).
	P50, P90, P99, P999, Max time.Duration
	// MBps is the value bytes delivered per second (MB = 10^6 bytes).
	MBps float64
	// Router counters during the measurement (zero for Redis).
	Primaries, Hedges, HedgesWon, HedgesDenied, Failovers int64
	// HedgesDeferred: hedge timers that fired late (this process stalled)
	// and were put off once (router.Stats.HedgesDeferred).
	HedgesDeferred         int64
	HedgeRatio, ExtraRatio float64
	// HedgeWait is the mean time a hedged primary had waited when its
	// hedge was sent (the hedge delay as applied); HedgeWon the mean
	// latency of the hedges that won, from their own send; HedgeDelay the
	// mean hedge delay those primaries had been given (HedgeWait above it:
	// timers firing late, deferrals).
	HedgeWait, HedgeWon, HedgeDelay time.Duration
	// GC is what the Go GC took while the scenario ran (cycles, CPU time;
	// shared with the rows interleaved with it).
	GC gcUse
	// NodeP50 and NodeP99 are each node's recent sub-request latency as the
	// router saw it at the end of the scenario (router.NodeStats).
	NodeP50, NodeP99 map[string]time.Duration
	// NodeRPCs counts the sub-requests each node received (router
	// scenarios).
	NodeRPCs map[string]int64
	// FaultReach (slow scenarios) is the share of requests a delayed
	// sub-request reached: SlowFraction × the slow node's sub-requests /
	// requests.
	FaultReach float64
	// P50After (degraded scenario) is the p50 of the requests that
	// completed from 2 s after the node was degraded (counting the warm-up).
	P50After time.Duration
	// Kill scenario: when the node was killed (offset from the start); the
	// recovery, from the kill to the router's last failover (after it, no
	// request went to the dead node); Disrupted, from the kill to the end of
	// the last 100 ms window with a failed request or one slower than
	// DisruptLimit (2× the pre-kill p99.9); and the worst latency after the
	// kill.
	KilledAt, Recovery, Disrupted, DisruptLimit, MaxAfterKill time.Duration

	lat []time.Duration // sorted
	s   *sample
}

// Report is the outcome of Run.
type Report struct {
	Options Options
	Started time.Time
	Results []*Result
	Checks  []Check
	Notes   []string
}

// Check is one target of the issue, evaluated.
type Check struct {
	Target string
	Value  string
	Pass   bool
}

// Result returns the named scenario's result, or nil.
func (r *Report) Result(name string) *Result {
	for _, x := range r.Results {
		if x.Scenario == name {
			return x
		}
	}
	return nil
}

// Run starts a loopback cluster, runs the scenarios and, with Options.Out,
// writes the report there.
func Run(ctx context.Context, opts Options) (*Report, error) {
	opts.ensureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	log := opts.Logger
	rep := &Report{Options: opts, Started: time.Now()}
	startLoad := loadavg()
	if opts.GCPercent > 0 {
		defer debug.SetGCPercent(debug.SetGCPercent(opts.GCPercent))
	}
	dir := opts.Dir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "pillar-readbench-")
		if err != nil {
			return nil, fmt.Errorf("readbench: %w", err)
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	var env []string // the node processes'
	if opts.GCPercent > 0 {
		env = append(env, fmt.Sprintf("GOGC=%d", opts.GCPercent))
	}
	env = append(env, opts.NodeEnv...)
	log.Info("readbench: building cluster", "nodes", opts.Nodes, "partitions", opts.Partitions, "replicas", opts.Replicas, "keys", opts.Keys, "dir", dir)
	c, err := testcluster.Start(ctx, testcluster.Options{Dir: dir, Nodes: opts.Nodes, Partitions: opts.Partitions, Replicas: opts.Replicas,
		Keys: opts.Keys, MinValue: opts.MinValue, MaxValue: opts.MaxValue, CacheBytes: opts.CacheBytes, Logger: log, Exec: opts.NodeExec, Env: env})
	if err != nil {
		return nil, fmt.Errorf("readbench: %w", err)
	}
	defer c.Close()
	b := &bench{opts: opts, c: c, batches: c.Batches(opts.BatchKeys), log: log, dir: dir, lens: map[string]int{}, exec: opts.NodeExec, env: env}
	for _, k := range c.Keys() { // verify's expected lengths, computed once (not a SHA-256 per key per request)
		b.lens[string(k)] = testcluster.ValueLen(k, opts.MinValue, opts.MaxValue)
	}
	for _, keys := range b.batches {
		var n int64
		for _, k := range keys {
			n += int64(testcluster.ValueLen(k, opts.MinValue, opts.MaxValue))
		}
		b.sizes = append(b.sizes, n)
	}
	if err := b.prewarm(ctx); err != nil {
		return nil, err
	}

	for _, name := range opts.Scenarios {
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
		var res *Result
		var extra []*Result // further results of the scenario
		var err error
		switch name {
		case Healthy:
			res, err = b.routerScenario(ctx, Healthy, "healthy cluster, hedging "+map[bool]string{false: "on", true: "off (--no-hedge)"}[opts.NoHedge], nil, nil)
		case Redis:
			if opts.RedisAddr == "-" {
				continue
			}
			var more []*Result
			more, err = b.redisScenario(ctx)
			if errors.Is(err, errRedisUnavailable) {
				rep.Notes = append(rep.Notes, err.Error())
				log.Warn("readbench: skipping the Redis scenario", "err", err)
				continue
			}
			if err == nil {
				res, extra = more[0], more[1:]
			}
		case SlowNoHedge, SlowHedge:
			hedge := name == SlowHedge
			desc := fmt.Sprintf("node-%d delays %.0f%% of requests by %v, hedging %s", opts.SlowNode, opts.SlowFraction*100, opts.SlowDelay, map[bool]string{true: "on", false: "off"}[hedge])
			slow := c.Members()[opts.SlowNode]
			if err := slow.Restart(ctx, cobbled.FaultDelay{Fraction: opts.SlowFraction, Delay: opts.SlowDelay}); err != nil {
				return rep, err
			}
			zone := opts.Zone
			if zone == "" {
				zone = slow.Zone
				desc += fmt.Sprintf(", router in %s (the slow node's zone: every request's primary)", zone)
			}
			res, err = b.routerScenario(ctx, name, desc, func(o *router.Options) { o.DisableHedging, o.Zone = !hedge, zone }, nil)
			if rerr := slow.Restart(ctx, cobbled.FaultDelay{}); rerr != nil && err == nil {
				err = rerr
			}
			if err == nil && res.Requests > 0 {
				res.FaultReach = opts.SlowFraction * float64(res.NodeRPCs[slow.ID]) / float64(res.Requests)
			}
		case Degraded:
			var more []*Result
			more, err = b.degradedScenario(ctx)
			if err == nil {
				res, extra = more[0], more[1:]
			}
		case Saturation:
			var more []*Result
			more, err = b.saturationScenario(ctx)
			if errors.Is(err, errRedisUnavailable) {
				rep.Notes = append(rep.Notes, err.Error())
				log.Warn("readbench: skipping the saturation scenario", "err", err)
				continue
			}
			if err == nil {
				res, extra = more[0], more[1:]
			}
		case Kill:
			res, err = b.killScenario(ctx)
		}
		if err != nil {
			return rep, fmt.Errorf("readbench: scenario %s: %w", name, err)
		}
		log.Info("readbench: scenario done", "scenario", name, "requests", res.Requests, "rps", fmt.Sprintf("%.0f", res.RPS),
			"p50", res.P50, "p99", res.P99, "p999", res.P999, "errors", res.Errors, "hedges", res.Hedges, "extra", fmt.Sprintf("%.3f", res.ExtraRatio))
		rep.Results = append(rep.Results, res)
		rep.Results = append(rep.Results, extra...)
	}
	if opts.NoHedge {
		rep.Notes = append(rep.Notes, "--no-hedge: hedging was off in every scenario but slow-hedge.")
	}
	if len(opts.NodeExec) > 0 {
		rep.Notes = append(rep.Notes, "The nodes and the bare floor ran in processes of their own (as production nodes do); the router, the clients and the Redis client in this one.")
	} else {
		if opts.NoHedge {
			rep.Notes = append(rep.Notes, "--no-hedge: hedging was off in every scenario but slow-hedge.")
		}
		rep.Notes = append(rep.Notes, "The nodes and the bare floor ran in this process, with the router, the clients and the Redis client (one Go runtime and garbage collector); Redis's server in its own.")
	}
	rep.Notes = append(rep.Notes, fmt.Sprintf("Machine load (1/5/15-minute averages from /proc/loadavg): %s at the start, %s at the end.", startLoad, loadavg()))
	rep.evaluate()
	if opts.Out != "" {
		if err := rep.Write(opts.Out); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

type bench struct {
	opts    Options
	c       *testcluster.Cluster
	batches [][][]byte
	sizes   []int64        // value bytes per batch
	lens    map[string]int // value length per key
	dir     string
	log     *slog.Logger
	exec    []string // Options.NodeExec
	env     []string // the node processes' extra environment
}

// prewarm reads every key once from every node, so the first scenario does
// not pay for cold table readers and caches the others find warm.
func (b *bench) prewarm(ctx context.Context) error {
	start := time.Now()
	for _, m := range b.c.Members() {
		conn, err := grpc.NewClient(m.Addr, append(servepb.DialOptions(0), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			return fmt.Errorf("readbench: prewarm %s: %w", m.ID, err)
		}
		cli := servepb.NewServeClient(conn)
		for _, keys := range b.batches {
			if _, err := cli.BatchGet(ctx, &servepb.BatchGetRequest{Keys: keys}); err != nil {
				conn.Close()
				return fmt.Errorf("readbench: prewarm %s: %w", m.ID, err)
			}
		}
		conn.Close()
	}
	b.log.Info("readbench: caches warm", "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// getter is one way of issuing a request.
type getter func(ctx context.Context, keys [][]byte) error

func (b *bench) newRouter(ctx context.Context, mutate func(*router.Options)) (*router.Router, getter, func(), error) {
	o := router.Options{Source: b.c, Zone: b.opts.Zone, Spread: b.opts.Spread, Timeout: b.opts.Deadline, RefreshInterval: 500 * time.Millisecond, Transport: b.opts.Transport,
		DisableHedging: b.opts.NoHedge} // slow-hedge's mutate turns it back on
	if mutate != nil {
		mutate(&o)
	}
	if b.opts.Router != nil {
		b.opts.Router(&o)
	}
	r, err := router.New(ctx, o)
	if err != nil {
		return nil, nil, nil, err
	}
	if !b.opts.ViaServer {
		get := func(ctx context.Context, keys [][]byte) error {
			resp, err := r.Read(ctx, keys, nil)
			if err != nil {
				return err
			}
			// A caller done with the values gives their buffers back
			// (Response.Release), as a server re-encoding them would.
			defer resp.Release()
			res := resp.Results
			return b.verify(keys, len(res), func(i int) (bool, []byte) { return res[i].Found, res[i].Value })
		}
		return r, get, func() { r.Close() }, nil
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		r.Close()
		return nil, nil, nil, err
	}
	gs := router.NewServer(r).GRPCServer()
	go gs.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), append(servepb.DialOptions(0), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		gs.Stop()
		r.Close()
		return nil, nil, nil, err
	}
	cli := servepb.NewServeClient(conn)
	get := func(ctx context.Context, keys [][]byte) error {
		resp, err := cli.BatchGet(ctx, &servepb.BatchGetRequest{Keys: keys})
		if err != nil {
			return err
		}
		for i, x := range resp.Results {
			if x.Status != servepb.KeyStatus_KEY_OK {
				return fmt.Errorf("key %d: %s: %s", i, x.Status, x.Error)
			}
		}
		return b.verify(keys, len(resp.Results), func(i int) (bool, []byte) { return resp.Results[i].Found, resp.Results[i].Value })
	}
	return r, get, func() { conn.Close(); gs.Stop(); r.Close() }, nil
}

// verify checks every key is found with a value of the right length, and
// compares whole values for one request in 64.
func (b *bench) verify(keys [][]byte, n int, at func(int) (bool, []byte)) error {
	if n != len(keys) {
		return fmt.Errorf("readbench: %d results for %d keys", n, len(keys))
	}
	full := rand.IntN(64) == 0
	for i, k := range keys {
		found, v := at(i)
		if !found {
			return fmt.Errorf("readbench: key %x not found", k)
		}
		if full {
			if want := b.c.Value(k); string(want) != string(v) {
				return fmt.Errorf("readbench: key %x: wrong value (%d bytes, want %d)", k, len(v), len(want))
			}
		} else if want := b.lens[string(k)]; len(v) != want {
			return fmt.Errorf("readbench: key %x: %d bytes, want %d", k, len(v), want)
		}
	}
	return nil
}

func (b *bench) routerScenario(ctx context.Context, name, desc string, mutate func(*router.Options),
	during func(ctx context.Context, start time.Time, r *router.Router, res *Result)) (*Result, error) {
	r, get, closeFn, err := b.newRouter(ctx, mutate)
	if err != nil {
		return nil, err
	}
	defer closeFn()
	b.log.Info("readbench: scenario", "scenario", name, "what", desc)
	b.load(ctx, b.opts.Warmup, get, nil)
	before := r.Stats()
	res := &Result{Scenario: name, Description: desc}
	dctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	s := b.load(ctx, b.opts.Duration, get, func(start time.Time) {
		if during != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				during(dctx, start, r, res)
			}()
		}
	})
	stop()
	wg.Wait() // res is the during function's until here
	after := r.Stats()
	s.fill(res)
	res.s = s
	counters(res, before, after)
	return res, nil
}

// killScenario kills a node a third of the way in and marks it down in the
// routing table DownAfter later. It watches the router's failover counter:
// Recovery is the time from the kill to the last failover (after which no
// request reached the dead node).
func (b *bench) killScenario(ctx context.Context) (*Result, error) {
	victim := b.opts.KillNode
	m := b.c.Members()[victim]
	desc := fmt.Sprintf("node-%d killed at 1/3 of the run (listener closed), marked down in routing %v later", victim, b.opts.DownAfter)
	res, err := b.routerScenario(ctx, Kill, desc, nil, func(ctx context.Context, start time.Time, r *router.Router, res *Result) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(b.opts.Duration / 3):
		}
		base := r.Stats().Failovers
		res.KilledAt = time.Since(start)
		m.Kill()
		b.log.Info("readbench: node killed", "node", m.ID)
		down := time.After(b.opts.DownAfter)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-down:
				b.c.SetDown(victim, true)
			case <-tick.C:
				if f := r.Stats().Failovers; f > base {
					base, res.Recovery = f, time.Since(start)-res.KilledAt
				}
			}
		}
	})
	if err != nil {
		return nil, err
	}
	// Bring the node back for whatever runs next.
	b.c.SetDown(victim, false)
	if err := m.Restart(ctx, cobbled.FaultDelay{}); err != nil {
		return res, err
	}
	return res, nil
}

// degradedScenario adds DegradedDelay to every request of one node: the
// router's replica choice (recent median × load) must move traffic off it,
// so after 2 s the p50 is the healthy cluster's. Each client also sends
// every batch, in turn, through a reference router whose routing table
// marks the degraded node down (what perfect steering achieves), so the
// two are compared at the same moments (DegradedReference).
func (b *bench) degradedScenario(ctx context.Context) (_ []*Result, err error) {
	o := b.opts
	m := b.c.Members()[o.DegradedNode]
	if err := m.Restart(ctx, cobbled.FaultDelay{Fraction: 1, Delay: o.DegradedDelay}); err != nil {
		return nil, err
	}
	defer func() {
		if rerr := m.Restart(ctx, cobbled.FaultDelay{}); rerr != nil && err == nil {
			err = rerr
		}
	}()
	without := router.RoutingFunc(func(ctx context.Context) (*control.Routing, error) {
		rt, err := b.c.GetRouting(ctx)
		if err != nil {
			return nil, err
		}
		cp := *rt
		cp.Replicas = make([][]control.Replica, len(rt.Replicas))
		for p, reps := range rt.Replicas {
			cp.Replicas[p] = slices.Clone(reps)
			for i := range cp.Replicas[p] {
				if cp.Replicas[p][i].NodeID == m.ID {
					cp.Replicas[p][i].State = control.StateDown
				}
			}
		}
		return &cp, nil
	})
	r, get, closeFn, err := b.newRouter(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer closeFn()
	_, refGet, closeRef, err := b.newRouter(ctx, func(ro *router.Options) { ro.Source = without })
	if err != nil {
		return nil, err
	}
	defer closeRef()
	desc := fmt.Sprintf("node-%d adds %v to every request (a failing disk), hedging %s; each batch alternating with the reference router", o.DegradedNode, o.DegradedDelay, map[bool]string{false: "on", true: "off (--no-hedge)"}[o.NoHedge])
	b.log.Info("readbench: scenario", "scenario", Degraded, "what", desc)
	gets := []getter{get, refGet}
	b.loadN(ctx, o.Warmup, gets, nil)
	before := r.Stats()
	ss := b.loadN(ctx, o.Duration, gets, nil)
	after := r.Stats()
	res := &Result{Scenario: Degraded, Description: desc}
	ref := &Result{Scenario: DegradedReference, Description: fmt.Sprintf("the reference: a router whose routing table marks node-%d down, alternating with the degraded row (same clients, same moments)", o.DegradedNode)}
	ss[0].fill(res)
	ss[1].fill(ref)
	res.s, ref.s = ss[0], ss[1]
	counters(res, before, after)
	// The router met the node at the start of the warm-up.
	from := max(0, 2*time.Second-o.Warmup)
	res.P50After, ref.P50After = p50From(ss[0], from), p50From(ss[1], from)
	return []*Result{res, ref}, nil
}

// p50From is the p50 of the requests of s that completed from offset on.
func p50From(s *sample, from time.Duration) time.Duration {
	var after []time.Duration
	for i, at := range s.at {
		if at >= from {
			after = append(after, s.lat[i])
		}
	}
	slices.Sort(after)
	return pct(after, 0.5)
}

// counters fills res's router counters from two Stats snapshots.
func counters(res *Result, before, after router.Stats) {
	res.Primaries = after.Primaries - before.Primaries
	res.Hedges = after.Hedges - before.Hedges
	res.HedgesWon = after.HedgesWon - before.HedgesWon
	res.HedgesDenied = after.HedgesDenied - before.HedgesDenied
	res.Failovers = after.Failovers - before.Failovers
	res.HedgesDeferred = after.HedgesDeferred - before.HedgesDeferred
	res.NodeRPCs = map[string]int64{}
	res.NodeP50, res.NodeP99 = map[string]time.Duration{}, map[string]time.Duration{}
	for _, n := range after.Nodes {
		res.NodeRPCs[n.ID] = n.RPCs
		res.NodeP50[n.ID], res.NodeP99[n.ID] = n.P50, n.P99
	}
	for _, n := range before.Nodes {
		res.NodeRPCs[n.ID] -= n.RPCs
	}
	if res.Primaries > 0 {
		res.HedgeRatio = float64(res.Hedges) / float64(res.Primaries)
		res.ExtraRatio = float64(res.Hedges+res.Failovers) / float64(res.Primaries)
	}
	if res.Hedges > 0 {
		res.HedgeWait = (after.HedgeWait - before.HedgeWait) / time.Duration(res.Hedges)
		res.HedgeDelay = (after.HedgeDelay - before.HedgeDelay) / time.Duration(res.Hedges)
	}
	if res.HedgesWon > 0 {
		res.HedgeWon = (after.HedgeWonTime - before.HedgeWonTime) / time.Duration(res.HedgesWon)
	}
}

// saturationScenario runs SaturationClients closed-loop clients through the
// router and against Redis in alternating slices of SaturationSlice (all
// clients on one of them at a time, the order swapping every round), so
// both see the same stretches of a shared machine, and compares the value
// bytes delivered per second of each one's own slices. (Run one after the
// other, 10 s each, the rest of the machine differed between them: across
// runs the router delivered 425–1,189 MB/s and Redis 455–1,381.)
func (b *bench) saturationScenario(ctx context.Context) ([]*Result, error) {
	o := b.opts
	rget, closeRedis, err := b.openRedis(ctx, o.SaturationClients+2)
	if err != nil {
		return nil, err
	}
	defer closeRedis()
	r, get, closeFn, err := b.newRouter(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer closeFn()
	n := o.SaturationClients
	b.log.Info("readbench: scenario", "scenario", Saturation, "clients", n, "slice", o.SaturationSlice)
	gets := []getter{get, rget}
	for _, g := range gets {
		b.loadClients(ctx, o.Warmup, n, []getter{g}, nil)
	}
	before := r.Stats()
	ss := b.loadSlices(ctx, o.Duration, o.SaturationSlice, n, gets)
	after := r.Stats()
	rr := &Result{Scenario: SaturationRouter, Description: fmt.Sprintf("%d closed-loop clients through the router (healthy cluster), in %v slices alternating with Redis's (%d slices each)", n, o.SaturationSlice, ss[0].slices)}
	rd := &Result{Scenario: SaturationRedis, Description: fmt.Sprintf("%d closed-loop clients against Redis MGET, in %v slices alternating with the router's", n, o.SaturationSlice)}
	ss[0].fill(rr)
	ss[1].fill(rd)
	counters(rr, before, after)
	return []*Result{rr, rd}, nil
}

// loadSlices runs every getter for d in all, in turns of slice: all clients
// on one getter at a time (each slice ends when its last request does), the
// order rotating round by round. Each getter's sample has its own slices'
// requests and time (sample.active).
func (b *bench) loadSlices(ctx context.Context, d, slice time.Duration, clients int, gets []getter) []*sample {
	slice = min(slice, d)
	rounds := int((d + slice - 1) / slice)
	out := make([]*sample, len(gets))
	start := time.Now()
	for j := range out {
		out[j] = &sample{start: start}
	}
	for round := 0; round < rounds && ctx.Err() == nil; round++ {
		for o := range gets {
			j := (o + round) % len(gets)
			s := b.loadClients(ctx, slice, clients, []getter{gets[j]}, nil)[0]
			acc := out[j]
			off := s.start.Sub(start)
			for i := range s.lat {
				acc.lat = append(acc.lat, s.lat[i])
				acc.at = append(acc.at, s.at[i]+off)
				acc.bad = append(acc.bad, s.bad[i])
			}
			acc.errs += s.errs
			acc.dl += s.dl
			acc.bytes += s.bytes
			acc.active += s.end.Sub(s.start)
			acc.slices++
			acc.gc = acc.gc.add(s.gc)
			if acc.first == nil {
				acc.first = s.first
			}
		}
	}
	end := time.Now()
	for _, s := range out {
		s.end = end
	}
	return out
}

// sample is what the clients measured.
type sample struct {
	start time.Time
	end   time.Time
	lat   []time.Duration
	at    []time.Duration // offset of each request's completion from start
	bad   []bool
	errs  int
	dl    int // errors that are deadline expiries
	bytes int64
	first error
	// active, when set (loadSlices), is the time this sample's getter ran:
	// rates are per active time, not per start to end.
	active time.Duration
	slices int
	// gc: the Go GC's cycles and CPU time while this sample ran (shared by
	// the getters interleaved with it).
	gc gcUse
}

// gcUse is what the Go garbage collector took over a stretch of time.
type gcUse struct {
	Cycles uint64
	CPU    time.Duration // GC CPU time, every class (runtime/metrics)
}

var gcMetrics = []string{"/gc/cycles/total:gc-cycles", "/cpu/classes/gc/total:cpu-seconds"}

func readGC() gcUse {
	s := make([]metrics.Sample, len(gcMetrics))
	for i, n := range gcMetrics {
		s[i].Name = n
	}
	metrics.Read(s)
	var u gcUse
	if s[0].Value.Kind() == metrics.KindUint64 {
		u.Cycles = s[0].Value.Uint64()
	}
	if s[1].Value.Kind() == metrics.KindFloat64 {
		u.CPU = time.Duration(s[1].Value.Float64() * float64(time.Second))
	}
	return u
}

func (u gcUse) sub(v gcUse) gcUse { return gcUse{u.Cycles - v.Cycles, u.CPU - v.CPU} }
func (u gcUse) add(v gcUse) gcUse { return gcUse{u.Cycles + v.Cycles, u.CPU + v.CPU} }

// load runs the closed-loop clients for d.
func (b *bench) load(ctx context.Context, d time.Duration, get getter, started func(time.Time)) *sample {
	return b.loadN(ctx, d, []getter{get}, started)[0]
}

// batchBytes is the value bytes of batch i.
func (b *bench) batchBytes(i int) int64 { return b.sizes[i] }

// loadN runs the closed-loop clients for d; with several getters each
// client sends every batch through each of them in turn (interleaved, so
// noise from the rest of the machine falls on all of them alike) and each
// getter gets its own sample.
func (b *bench) loadN(ctx context.Context, d time.Duration, gets []getter, started func(time.Time)) []*sample {
	return b.loadClients(ctx, d, b.opts.Clients, gets, started)
}

func (b *bench) loadClients(ctx context.Context, d time.Duration, clients int, gets []getter, started func(time.Time)) []*sample {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	per := make([][]*sample, clients)
	gc0 := readGC()
	start := time.Now()
	if started != nil {
		started(start)
	}
	var wg sync.WaitGroup
	for w := range per {
		for range gets {
			per[w] = append(per[w], &sample{})
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(start.UnixNano())))
			for iter := 0; ctx.Err() == nil; iter++ {
				bi := rng.IntN(len(b.batches))
				keys := b.batches[bi]
				// The order rotates batch by batch, so no getter always
				// runs first (or right after another).
				for o := range gets {
					j := (o + iter) % len(gets)
					get := gets[j]
					s := per[w][j]
					rctx, rcancel := context.WithTimeout(context.Background(), b.opts.Deadline)
					t0 := time.Now()
					err := get(rctx, keys)
					t1 := time.Now()
					rcancel()
					if err != nil && ctx.Err() != nil && t1.Sub(start) >= d {
						break // cut off by the end of the run, not a failure
					}
					s.lat = append(s.lat, t1.Sub(t0))
					s.at = append(s.at, t1.Sub(start))
					s.bad = append(s.bad, err != nil)
					if err == nil {
						s.bytes += b.batchBytes(bi)
					}
					if err != nil {
						s.errs++
						if errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded {
							s.dl++
						}
						if s.first == nil {
							s.first = err
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	gc := readGC().sub(gc0)
	out := make([]*sample, len(gets))
	for j := range gets {
		all := &sample{start: start, end: time.Now(), gc: gc}
		for w := range per {
			s := per[w][j]
			all.lat = append(all.lat, s.lat...)
			all.at = append(all.at, s.at...)
			all.bad = append(all.bad, s.bad...)
			all.errs += s.errs
			all.dl += s.dl
			all.bytes += s.bytes
			if all.first == nil {
				all.first = s.first
			}
		}
		if all.first != nil {
			b.log.Warn("readbench: failed requests", "count", all.errs, "first", all.first)
		}
		out[j] = all
	}
	return out
}

func (s *sample) fill(r *Result) {
	r.Requests = len(s.lat)
	r.Errors = s.errs
	r.DeadlineErrors = s.dl
	r.Elapsed = s.end.Sub(s.start)
	if s.active > 0 {
		r.Elapsed = s.active
	}
	r.RPS = float64(r.Requests) / r.Elapsed.Seconds()
	r.MBps = float64(s.bytes) / 1e6 / r.Elapsed.Seconds()
	r.GC = s.gc
	r.lat = slices.Clone(s.lat)
	slices.Sort(r.lat)
	r.P50, r.P90, r.P99, r.P999 = pct(r.lat, 0.50), pct(r.lat, 0.90), pct(r.lat, 0.99), pct(r.lat, 0.999)
	if len(r.lat) > 0 {
		r.Max = r.lat[len(r.lat)-1]
	}
	if r.KilledAt > 0 {
		r.Disrupted, r.MaxAfterKill, r.DisruptLimit = s.disruption(r.KilledAt)
	}
}

// disruption is the time from the kill to the end of the last 100 ms window
// with a failed request or a latency over 2× the pre-kill p99.9 (at least
// +5 ms), and the worst latency after the kill.
func (s *sample) disruption(killedAt time.Duration) (time.Duration, time.Duration, time.Duration) {
	var pre []time.Duration
	for i, at := range s.at {
		if at < killedAt {
			pre = append(pre, s.lat[i])
		}
	}
	slices.Sort(pre)
	limit := max(2*pct(pre, 0.999), pct(pre, 0.999)+5*time.Millisecond)
	var last, worst time.Duration
	for i, at := range s.at {
		if at < killedAt {
			continue
		}
		worst = max(worst, s.lat[i])
		if s.bad[i] || s.lat[i] > limit {
			const window = 100 * time.Millisecond
			end := (at/window + 1) * window
			last = max(last, end-killedAt)
		}
	}
	return last, worst, limit
}

func pct(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*q+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// loadavg is the machine's load averages, or "unknown".
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if err != nil || len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
