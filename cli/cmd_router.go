package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/bench/readbench"
	"github.com/pillarkit/pillar/bench/switchbench"
	"github.com/pillarkit/pillar/cobbled"
	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/cobbled/router"
	"github.com/pillarkit/pillar/internal/bytesize"
	"github.com/pillarkit/pillar/internal/clock"
	"github.com/pillarkit/pillar/internal/health"
	"github.com/pillarkit/pillar/internal/testcluster"
)

// routerFlags are the router's tuning flags, shared by `router serve` and
// `bench read`.
func routerFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "zone", Usage: "the caller's zone: replicas there are preferred (default: none)"},
		&cli.DurationFlag{Name: "timeout", Value: 2 * time.Second, Usage: "deadline of a request that brings none"},
		&cli.IntFlag{Name: "max-keys", Value: 1024, Usage: "largest BatchGet request in keys"},
		&cli.IntFlag{Name: "max-in-flight", Value: 1024, Usage: "BatchGet requests the router's gRPC server answers at once (more: RESOURCE_EXHAUSTED)"},
		&cli.Int64Flag{Name: "max-lag", Value: 2, Usage: "never read a replica more than this many batches behind (at least 1; -1: no limit)"},
		&cli.BoolFlag{Name: "no-hedge", Usage: "turn hedged requests off"},
		&cli.BoolFlag{Name: "spread", Usage: "choose each partition's replica on its own (default: a request goes to as few nodes as possible)"},
		&cli.Float64Flag{Name: "hedge-quantile", Value: 0.99, Usage: "hedge a sub-request unanswered after this quantile of its node's recent latencies for its size (an outlier)"},
		&cli.Float64Flag{Name: "hedge-quantile-full", Value: 0.985, Usage: "the hedge quantile while the hedge budget holds at least half its bank (a lower bar while tokens are to spare; at most --hedge-quantile)"},
		&cli.Float64Flag{Name: "hedge-outlier", Value: 2, Usage: "and only after this multiple of that node's median for its size"},
		&cli.DurationFlag{Name: "hedge-min", Value: 500 * time.Microsecond, Usage: "floor of the hedge delay"},
		&cli.Float64Flag{Name: "hedge-budget", Value: 0.045, Usage: "most hedges per primary sub-request (token bucket)"},
		&cli.Float64Flag{Name: "stall-ratio", Usage: "read a node after the other replicas, even in this zone, while more than this share of its recent sub-requests outlast their hedge delay (a lossy link); 0: the larger of --hedge-budget and 3 × (1 − --hedge-quantile-full); negative: never"},
		&cli.DurationFlag{Name: "refresh", Value: 2 * time.Second, Usage: "routing refresh interval (and long-poll wait)"},
		&cli.StringFlag{Name: "transport", Value: router.TransportWire, Usage: "how the router reaches nodes: wire (cobbled's lean protocol on the nodes' own port: length-prefixed frames over TCP, pipelined), or grpc (the Serve API other languages use)"},
	}
}

// routerOptionsFrom applies the router flags to o: all of them, or with
// onlySet only those given on the command line.
func routerOptionsFrom(c *cli.Context, o *router.Options, onlySet bool) {
	set := func(name string) bool { return !onlySet || c.IsSet(name) }
	if set("zone") {
		o.Zone = c.String("zone")
	}
	if set("transport") {
		o.Transport = c.String("transport")
	}
	if set("timeout") {
		o.Timeout = c.Duration("timeout")
	}
	if set("max-keys") {
		o.MaxKeys = c.Int("max-keys")
	}
	if set("max-in-flight") {
		o.MaxInFlight = c.Int("max-in-flight")
	}
	if set("max-lag") {
		o.MaxLagBatches = c.Int64("max-lag")
	}
	if set("no-hedge") {
		o.DisableHedging = c.Bool("no-hedge")
	}
	if set("spread") {
		o.Spread = c.Bool("spread")
	}
	if set("hedge-quantile") {
		o.HedgeQuantile = c.Float64("hedge-quantile")
	}
	if set("hedge-quantile-full") {
		o.HedgeQuantileFull = c.Float64("hedge-quantile-full")
	}
	if set("hedge-outlier") {
		o.HedgeOutlier = c.Float64("hedge-outlier")
	}
	if set("hedge-min") {
		o.HedgeMinDelay = c.Duration("hedge-min")
		o.HedgeInitialDelay = max(20*time.Millisecond, o.HedgeMinDelay)
	}
	if set("hedge-budget") {
		o.HedgeBudget = c.Float64("hedge-budget")
	}
	if set("stall-ratio") {
		o.StallRatio = c.Float64("stall-ratio")
	}
	if set("refresh") {
		o.RefreshInterval = c.Duration("refresh")
	}
}

func routerCommand() *cli.Command {
	return &cli.Command{
		Name:  "router",
		Usage: "the hedging read router (BatchGet fan-out over cobbled nodes)",
		Subcommands: []*cli.Command{{
			Name:  "serve",
			Usage: "serve cobbled's BatchGet API through the router, for callers in other languages",
			Description: `A stateless server speaking the same gRPC BatchGet API as a cobbled node (service
pillar.serve.v1.Serve). It fetches the routing table from the control plane (and
refreshes it on version change, every --refresh, and on "not my partition"), groups each
request's keys by partition, sends one sub-request per chosen node in parallel (same-zone
replicas first, then the least loaded of two random choices), hedges a sub-request that
has not answered after its node's recent p95 (within a 5% extra-request budget), fails
over on errors and honours the caller's deadline. Results come back in request order;
a key fails only when every replica of its partition failed. Started before the control
plane answers, it retries the first routing fetch (backoff up to 15s) while --http's
/readyz answers 503 "starting" (waiting on the control plane).

Versions: every request reads one publication, resolved once per request to a concrete
id and sent only to replicas that hold it (failover and hedges stay among them). The
request's version field wins; otherwise --version (live, candidate, previous or an id).
--candidate-fraction F sends F of the reads that name no version (with --version live) to
the candidate while it is ready: of requests, or, when the request carries a caller id
(caller_id or x-pillar-caller metadata), of callers by a hash of it. A promote or rollback reaches reads as soon as the
control plane's routing version changes (the router long-polls it). A version no replica
can serve fails each key with KEY_NOT_SERVED naming it.

Metrics (hedges sent and won, failovers, per-node latency, extra-request ratio, latency
and requests per version and role) are on --http /metrics. The control plane must be reachable at start; later outages leave the
cached routing table in use.

Examples:
   pillar router serve --control 127.0.0.1:7000 --listen 127.0.0.1:7400 --zone a
   pillar router serve --control cp.internal:7000 --listen :7400 --hedge-budget 0.02 \
       --tls-cert certs/router.pem --tls-key certs/router.key --tls-client-ca certs/ca.pem --allow-identity 'pillar://reader/*'
   pillar router serve --control 127.0.0.1:7000 --no-hedge   # compare tails without hedging
   pillar router serve --control 127.0.0.1:7000 --candidate-fraction 0.05   # 5% A/B to the candidate
   pillar router serve --control 127.0.0.1:7000 --listen 127.0.0.1:7401 --version candidate
   pillar router serve --control 127.0.0.1:7000 --transport grpc   # nodes over gRPC instead of the lean wire protocol`,
			Flags: append([]cli.Flag{
				&cli.StringFlag{Name: "control", Usage: "control plane address host:port", Required: true, EnvVars: []string{envControl}},
				controlTokenFileFlag, controlTLSCAFlag,
				&cli.StringFlag{Name: "listen", Value: "127.0.0.1:7400", Usage: "gRPC listen address for BatchGet"},
				&cli.StringFlag{Name: "http", Value: "127.0.0.1:8400", Usage: "listen address for /metrics, /healthz and /readyz"},
				&cli.DurationFlag{Name: "drain", Value: 10 * time.Second, Usage: "how long shutdown waits for in-flight requests"},
				&cli.StringFlag{Name: "version", Usage: `publication read by requests that name none: live, candidate, previous or an id "<chunk version>/<model>" (default: live)`},
				&cli.Float64Flag{Name: "candidate-fraction", Usage: "A/B: fraction (0..1) of the reads naming no version, or of callers by caller-id hash, sent to the ready candidate"},
			}, append(routerFlags(), serverTLSFlags()...)...), // TLS: tls_flags.go
			Action: routerServe,
		}},
	}
}

func routerServe(c *cli.Context) error {
	allowStop(c.Duration("drain")) // signals.go: the drain may outlast the stop grace
	ctx := c.Context
	if c.Int64("max-lag") == 0 {
		return fmt.Errorf("--max-lag 0: use 1 or more, or -1 for no limit")
	}
	log := logger().With("component", "router")
	cc, err := dialControl(c) // cmd_control.go: --token-file, --tls-ca
	if err != nil {
		return err
	}
	defer cc.Close()
	metrics := router.NewMetrics()
	o := router.Options{Source: cc, Logger: log, Metrics: metrics, Version: c.String("version"), CandidateFraction: c.Float64("candidate-fraction")}
	routerOptionsFrom(c, &o, false)
	if c.Int("max-in-flight") < 1 {
		return fmt.Errorf("--max-in-flight %d: must be at least 1", c.Int("max-in-flight"))
	}
	if err := o.Validate(); err != nil { // before waiting on the control plane
		return err
	}
	if o.NodeTLS, err = clientTLS(c); err != nil { // cmd_control.go: --tls-ca (and --tls-cert as the router's client certificate)
		return err
	}
	// --http answers from the start: "starting" while the first routing
	// fetch waits for an unreachable control plane (retried with backoff;
	// any other error ends the start).
	var started atomic.Pointer[router.Router]
	var waitingOn atomic.Value // string
	waitingOn.Store("routing from the control plane at " + c.String("control"))
	hsrv, err := startDaemonHTTP("router serve", c.String("http"), health.New(health.Options{Component: "router"}, func(ctx context.Context) health.Status {
		if r := started.Load(); r != nil {
			return r.Health(ctx)
		}
		return health.Status{Status: health.Starting, WaitingOn: []string{waitingOn.Load().(string)}}
	}), metrics.Collectors()...) // daemon.go: /metrics, /healthz, /readyz
	if err != nil {
		return err
	}
	defer hsrv.Close()
	var r *router.Router
	for backoff := time.Second; ; backoff = min(2*backoff, 15*time.Second) {
		if r, err = router.New(ctx, o); err == nil {
			break
		}
		if !errors.Is(err, control.ErrUnavailable) || ctx.Err() != nil {
			return fmt.Errorf("%w (is the control plane running at %s?)", err, c.String("control"))
		}
		waitingOn.Store(fmt.Sprintf("routing from the control plane at %s: %v", c.String("control"), err))
		log.Warn("router: waiting for the control plane", "control", c.String("control"), "err", err, "retry_in", backoff)
		if !clock.Sleep(ctx, clock.Real{}, backoff) {
			return fmt.Errorf("%w (is the control plane running at %s? stopped waiting: %w)", err, c.String("control"), ctx.Err())
		}
	}
	defer r.Close()
	started.Store(r)

	lis, err := net.Listen("tcp", c.String("listen"))
	if err != nil {
		return fmt.Errorf("router: listen: %w", err)
	}
	if lis, err = secureListener(ctx, c, "router serve", lis, c.String("http"), log); err != nil { // tls_flags.go
		return err
	}
	gsrv := router.NewServer(r).GRPCServer()
	serveErr := make(chan error, 1)
	go func() { serveErr <- gsrv.Serve(lis) }()
	log.Info("router: serving", "listen", lis.Addr().String(), "http", hsrv.Addr.String(), "partitions", r.Partitions(),
		"routing_version", r.RoutingVersion(), "zone", o.Zone, "hedging", !o.DisableHedging, "version", o.Version, "candidate_fraction", o.CandidateFraction)
	select {
	case <-ctx.Done():
		log.Info("router: shutting down: draining requests")
	case err := <-serveErr:
		return fmt.Errorf("router: grpc serve: %w", err)
	}
	drained := make(chan struct{})
	go func() { gsrv.GracefulStop(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(c.Duration("drain")):
		gsrv.Stop()
		<-drained
	}
	return nil
}

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "benchmarks of the serving path",
		Subcommands: []*cli.Command{{
			Name:  "read",
			Usage: "read benchmark: router over a loopback cobbled cluster, with slow, degraded and killed nodes, Redis MGET as the peer and bare gRPC as the floor",
			Description: `Starts --nodes cobbled nodes, each a process of its own (pillar bench read-node, as
production runs one node per process; --nodes-in-process runs them in this one, sharing
its cores and garbage collector with the router and the clients), each with its own
RocksDB directories and its own gRPC server on 127.0.0.1 (distinct zones), loads --keys synthetic keys (values
100 B–100 KiB, mean ≈ 50 KB) as --partitions partitions × --replicas replicas, and runs
--clients closed-loop clients issuing 12-key BatchGets for --duration per scenario:

  healthy       the cluster as is, through the router (hedging on)
  redis         the same batches from Redis with MGET (keys under a per-run prefix,
                deleted afterwards); skipped with a note when Redis is not reachable;
                with --interleave (default) then also router and Redis alternating
                batch by batch in the same clients (healthy/interleaved,
                redis/interleaved), which a busy machine cannot skew, then
                the node's floors in a phase of their own (below)
  slow-nohedge  node --slow-node delays --slow (fraction:delay) of its requests
                (cobbled's test-only fault), hedging off
  slow-hedge    the same, hedging on; without --zone the router sits in the slow node's
                zone, so the fault reaches --slow's fraction of all requests (reported)
  degraded      node --degraded-node adds --degraded-delay to every request (a failing
                disk): replica choice must steer traffic away; p50 from 2 s on
  kill          node --kill-node is killed (listener closed) a third of the way in,
                and marked down in the routing table --down-after later
  saturation    --saturation-clients clients on the router and on Redis in alternating
                --saturation-slice slices (the same stretches of the machine):
                throughput in MB/s

With --interleave the Redis scenario then measures, batch by batch in the same clients,
straight to one node (direct/interleaved), a bare grpc-go call with a raw codec
around the same MultiGet (bare/interleaved): the floor the node's BatchGet is held to,
and the same BatchGet over cobbled's lean wire protocol (wire/interleaved).
The router's own sub-requests go over that protocol too (--transport, default wire;
--transport grpc for the Serve API over gRPC).

Writes results.md (table and targets), results.json and latency.png (latency by
percentile per scenario) to --out, and prints the table.

Examples:
   pillar bench read --out bench-out/read
   pillar bench read --out /tmp/read --duration 30s --clients 8 --keys 12000
   pillar bench read --out /tmp/read --scenarios healthy,redis --via-server
   pillar bench read --out /tmp/read --clients 1 --cache 256MiB   # one client, a cache below the data set
   pillar bench read --out /tmp/read --transport grpc   # the router reaches nodes over gRPC
   pillar bench read --out /tmp/read --duration 2s --keys 1200 --partitions 16   # quick look`,
			Flags: append([]cli.Flag{
				&cli.StringFlag{Name: "out", Value: "bench-out/read", Usage: "folder for results.md, results.json and latency.png"},
				&cli.BoolFlag{Name: "json", Usage: "print the report as JSON (results.json and results.md are written either way)"},
				&cli.StringFlag{Name: "data", Usage: "folder for the cluster's data (default: a temporary folder, removed afterwards)"},
				&cli.DurationFlag{Name: "duration", Value: 10 * time.Second, Usage: "measured time per scenario"},
				&cli.DurationFlag{Name: "warmup", Value: time.Second, Usage: "warm-up before each scenario"},
				&cli.IntFlag{Name: "clients", Value: 4, Usage: "closed-loop clients"},
				&cli.IntFlag{Name: "keys", Value: 6000, Usage: "keys in the data set (12-key batches)"},
				&cli.IntFlag{Name: "batch-keys", Value: 12, Usage: "keys per request"},
				&cli.IntFlag{Name: "nodes", Value: 3, Usage: "cobbled nodes"},
				&cli.IntFlag{Name: "partitions", Value: 64, Usage: "partitions"},
				&cli.IntFlag{Name: "replicas", Value: 3, Usage: "replicas per partition"},
				&cli.StringFlag{Name: "cache", Value: "1GiB", Usage: "each node's (and the bare floor's) block cache; the default, a node's own, holds the default data set (Redis holds it all in memory)"},
				&cli.StringFlag{Name: "scenarios", Value: strings.Join(readbench.AllScenarios, ","), Usage: "comma-separated scenarios to run"},
				&cli.StringFlag{Name: "slow", Value: "0.03:50ms", Usage: "FRACTION:DELAY of the slow node's requests (the scenario reports the share of all requests it reached)"},
				&cli.IntFlag{Name: "degraded-node", Value: 1, Usage: "index of the node that adds --degraded-delay to every request in the degraded scenario"},
				&cli.DurationFlag{Name: "degraded-delay", Value: 5 * time.Millisecond, Usage: "delay the degraded node adds to every request"},
				&cli.IntFlag{Name: "saturation-clients", Value: 16, Usage: "closed-loop clients in the saturation scenario"},
				&cli.DurationFlag{Name: "saturation-slice", Value: 500 * time.Millisecond, Usage: "saturation: how long all clients stay on the router or on Redis before switching to the other (each gets --duration in all)"},
				&cli.IntFlag{Name: "slow-node", Value: 0, Usage: "index of the node made slow"},
				&cli.IntFlag{Name: "kill-node", Value: 2, Usage: "index of the node killed"},
				&cli.DurationFlag{Name: "down-after", Value: 2 * time.Second, Usage: "when the killed node is marked down in routing (as the control plane's down-after)"},
				&cli.DurationFlag{Name: "deadline", Value: time.Second, Usage: "each request's deadline"},
				&cli.BoolFlag{Name: "via-server", Usage: "go through the router's gRPC server on loopback instead of the library"},
				&cli.StringFlag{Name: "redis", Value: "127.0.0.1:6379", Usage: "Redis address for the peer scenario (- to skip)"},
				&cli.BoolFlag{Name: "interleave", Value: true, Usage: "also run router and Redis interleaved (each client alternates them), so both see the same moment of a shared machine"},
				&cli.IntFlag{Name: "gogc", Value: 400, Usage: "Go GC percent for the run (requests allocate ~600 KB each; the Redis client shares the process and the setting)"},
				&cli.BoolFlag{Name: "nodes-in-process", Usage: "run the nodes and the bare floor in this process (with the router and the clients) instead of one process each"},
				&cli.StringSliceFlag{Name: "node-env", Usage: "KEY=VALUE added to the node processes' environment (repeatable; after --gogc's GOGC), e.g. GOMAXPROCS=1"},
				&cli.StringSliceFlag{Name: "node-exec", Hidden: true, Usage: "the command (program, then its leading arguments, one per flag) that runs a node process (default: this binary's bench read-node)"},
				&cli.StringFlag{Name: "cpuprofile", Hidden: true, Usage: "write a CPU profile of the run to this file"},
			}, routerFlags()...),
			Action: benchRead,
		}, benchReadNodeCommand(), benchScaleCommand(), lorryBenchCommand(), benchIngestCommand(), benchSwitchCommand(), benchFormatsCommand(), benchEmbedCommand()}, // bench ingest: cmd_bench_ingest.go; ingest-formats: cmd_bench_formats.go; embed: cmd_bench_embed.go
	}
}

func benchRead(c *cli.Context) error {
	frac, delay, err := routerParseFault(c.String("slow"))
	if err != nil {
		return fmt.Errorf("--slow: %w", err)
	}
	cacheBytes, err := bytesize.ParseFlag("cache", c.String("cache"))
	if err != nil {
		return err
	}
	var scen []string
	for _, s := range strings.Split(c.String("scenarios"), ",") {
		if s = strings.TrimSpace(s); s != "" {
			scen = append(scen, s)
		}
	}
	o := readbench.Options{
		Out: c.String("out"), Dir: c.String("data"), Duration: c.Duration("duration"), Warmup: c.Duration("warmup"),
		Clients: c.Int("clients"), Keys: c.Int("keys"), BatchKeys: c.Int("batch-keys"),
		Nodes: c.Int("nodes"), Partitions: c.Int("partitions"), Replicas: c.Int("replicas"), CacheBytes: cacheBytes,
		Zone: c.String("zone"), SlowNode: c.Int("slow-node"), SlowFraction: frac, SlowDelay: delay,
		DegradedNode: c.Int("degraded-node"), DegradedDelay: c.Duration("degraded-delay"), SaturationClients: c.Int("saturation-clients"), SaturationSlice: c.Duration("saturation-slice"),
		KillNode: c.Int("kill-node"), DownAfter: c.Duration("down-after"), Deadline: c.Duration("deadline"),
		Transport: c.String("transport"), ViaServer: c.Bool("via-server"), RedisAddr: c.String("redis"), Scenarios: scen, GCPercent: c.Int("gogc"), Spread: c.Bool("spread"), NoHedge: c.Bool("no-hedge"), Interleave: c.Bool("interleave"), Logger: logger(),
		Router: func(ro *router.Options) {
			// The scenario decides hedging, --deadline the request deadline.
			noHedge := ro.DisableHedging
			routerOptionsFrom(c, ro, true)
			ro.DisableHedging = noHedge
		},
	}
	for _, kv := range c.StringSlice("node-env") {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("--node-env %q: want KEY=VALUE", kv)
		}
		o.NodeEnv = append(o.NodeEnv, kv)
	}
	if o.NodeExec = c.StringSlice("node-exec"); len(o.NodeExec) == 0 && !c.Bool("nodes-in-process") {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("bench read: the node processes run this binary: %w", err)
		}
		o.NodeExec = []string{exe, "bench", "read-node"}
	}
	if c.Bool("nodes-in-process") {
		o.NodeExec = nil
	}
	stop, err := startCPUProfile(c.String("cpuprofile"))
	if err != nil {
		return err
	}
	defer stop()
	rep, err := readbench.Run(c.Context, o)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, rep)
	}
	fmt.Fprint(c.App.Writer, rep.Markdown())
	fmt.Fprintf(c.App.Writer, "\nwritten to %s (results.md, results.json, latency.png)\n", o.Out)
	return nil
}

// routerParseFault parses FRACTION:DELAY, e.g. 0.05:50ms.
func routerParseFault(s string) (float64, time.Duration, error) {
	f, d, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, fmt.Errorf("%q: want FRACTION:DELAY, e.g. 0.05:50ms", s)
	}
	frac, err := strconv.ParseFloat(f, 64)
	if err != nil || frac < 0 || frac > 1 {
		return 0, 0, fmt.Errorf("%q: fraction must be a number in [0,1]", s)
	}
	delay, err := time.ParseDuration(d)
	if err != nil || delay < 0 {
		return 0, 0, fmt.Errorf("%q: delay must be a duration like 50ms", s)
	}
	return frac, delay, nil
}

func benchSwitchCommand() *cli.Command {
	return &cli.Command{
		Name:  "switch",
		Usage: "version-switch benchmark: how long after a promote or rollback every router read returns the other publication, with readers running",
		Description: `Runs the real control plane (SQLite) on 127.0.0.1, --nodes cobbled nodes following it
(ingest loops, each its own gRPC server and RocksDB directories, every node holding all
--partitions), and a router watching the routing. Publishes two publications as tagged
snapshot batches (each value names its publication), makes the first live and the second
a ready candidate, then, while --readers closed-loop readers read all --keys keys
through the router, promotes the candidate and rolls back and forth, --switches switches
in all.

A switch's time is from just before the control-plane call until the end of the last
read that still returned the old version. Prints a table (or --json), with the reads,
failed reads and mixed reads (a key whose value is not from the version its response
names), and evaluates the target: every read on the other version within 2 s, 0 failed.
With --out, also writes results.md and results.json there.

Examples:
   pillar bench switch
   pillar bench switch --switches 20 --readers 4 --out bench-out/switch
   pillar bench switch --nodes 3 --partitions 16 --keys 256 --json
   pillar bench switch --via-server --switches 10`,
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "switches", Value: 10, Usage: "switches: a promote, then rollbacks back and forth"},
			&cli.IntFlag{Name: "readers", Value: 3, Usage: "closed-loop readers"},
			&cli.IntFlag{Name: "nodes", Value: 3, Usage: "cobbled nodes"},
			&cli.IntFlag{Name: "partitions", Value: 4, Usage: "partitions"},
			&cli.IntFlag{Name: "keys", Value: 96, Usage: "keys, all read by every request (at most 1024)"},
			&cli.StringFlag{Name: "data", Usage: "folder for the cluster's data (default: a temporary folder, removed afterwards)"},
			&cli.StringFlag{Name: "out", Usage: "also write results.md and results.json to this folder"},
			&cli.BoolFlag{Name: "via-server", Usage: "read through the router's gRPC server on loopback instead of the library"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
		},
		Action: benchSwitch,
	}
}

func benchSwitch(c *cli.Context) error {
	o := switchbench.Options{Dir: c.String("data"), Nodes: c.Int("nodes"), Partitions: c.Int("partitions"), Keys: c.Int("keys"),
		Readers: c.Int("readers"), Switches: c.Int("switches"), ViaServer: c.Bool("via-server"), Logger: logger()}
	if err := o.Validate(); err != nil {
		return err
	}
	rep, err := switchbench.Run(c.Context, o)
	if err != nil {
		return err
	}
	if dir := c.String("out"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(rep.Markdown()), 0o644); err != nil {
			return err
		}
		f, err := os.Create(filepath.Join(dir, "results.json"))
		if err != nil {
			return err
		}
		err = printJSON(f, rep)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, rep)
	}
	fmt.Fprint(c.App.Writer, rep.Markdown())
	if dir := c.String("out"); dir != "" {
		fmt.Fprintf(c.App.Writer, "\nwritten to %s (results.md, results.json)\n", dir)
	}
	return nil
}

// startCPUProfile starts a Go CPU profile into path (the hidden
// --cpuprofile of the benchmarks); "" profiles nothing. stop ends it.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// benchReadNodeCommand is the process bench read runs per node (and for the
// bare floor): it serves a directory bench read has loaded.
func benchReadNodeCommand() *cli.Command {
	return &cli.Command{
		Name:   "read-node",
		Hidden: true,
		Usage:  "one node of pillar bench read, as a process of its own (bench read starts it)",
		Description: `Opens the cobbled node bench read loaded under --data (or, with --bare, the bare
floor's --partitions databases), serves gRPC and the lean wire protocol on --listen,
prints "serving ADDR" on stdout, and serves until stdin ends (its parent closed it or
died) or SIGINT/SIGTERM. --fault-slow FRACTION:DELAY delays that fraction of its
BatchGets (cobbled's test-only fault; bench read's slow and degraded scenarios).

Example (as bench read runs it):
   pillar bench read-node --id node-0 --zone zone-a --data /tmp/rb/node-0 --batch-dir /tmp/rb/objects \
       --listen 127.0.0.1:0 --partitions 64 --cache 268435456`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "id", Usage: "node id"},
			&cli.StringFlag{Name: "zone", Usage: "node zone"},
			&cli.StringFlag{Name: "data", Usage: "the node's data directory (--bare: the bare floor's)", Required: true},
			&cli.StringFlag{Name: "batch-dir", Usage: "the directory of the batches bench read loaded the data from (its objects folder)"},
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:0", Usage: "address to serve on"},
			&cli.IntFlag{Name: "partitions", Usage: "partition count", Required: true},
			&cli.StringFlag{Name: "cache", Value: "256MiB", Usage: "block cache size"},
			&cli.StringFlag{Name: "fault-slow", Usage: "test only: FRACTION:DELAY, e.g. 0.03:50ms"},
			&cli.BoolFlag{Name: "bare", Usage: "serve the bare floor (grpc-go, raw codec, the same MultiGet) instead of a node"},
			&cli.StringFlag{Name: "cpuprofile", Hidden: true, Usage: "write a CPU profile of the process to this file (written when it stops; a %p in it becomes the process id)"},
		},
		Action: func(c *cli.Context) error {
			cacheBytes, err := bytesize.ParseFlag("cache", c.String("cache"))
			if err != nil {
				return err
			}
			stop, err := startCPUProfile(strings.ReplaceAll(c.String("cpuprofile"), "%p", strconv.Itoa(os.Getpid())))
			if err != nil {
				return err
			}
			defer stop()
			if c.Bool("bare") {
				return readbench.ServeBareProcess(c.Context, readbench.BareConfig{Dir: c.String("data"), Partitions: c.Int("partitions"),
					CacheBytes: cacheBytes, Listen: c.String("listen")}, os.Stdin, os.Stdout)
			}
			var fault cobbled.FaultDelay
			if s := c.String("fault-slow"); s != "" {
				if fault, err = cobbledParseFault(s); err != nil {
					return fmt.Errorf("--fault-slow: %w", err)
				}
			}
			return testcluster.ServeNodeProcess(c.Context, testcluster.NodeConfig{ID: c.String("id"), Zone: c.String("zone"), Dir: c.String("data"),
				Objects: c.String("batch-dir"), Listen: c.String("listen"), Partitions: c.Int("partitions"), CacheBytes: cacheBytes, Fault: fault},
				os.Stdin, os.Stdout, logger())
		},
	}
}
