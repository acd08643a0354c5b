package cli

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pillarkit/pillar/cobbled"
	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/cobbled/wire"
	"github.com/pillarkit/pillar/internal/bytesize"
	"github.com/pillarkit/pillar/internal/health"
	"github.com/pillarkit/pillar/internal/record"
	"github.com/pillarkit/pillar/internal/tlsconf"
	"github.com/pillarkit/pillar/pillar"
)

func cobbledCommand() *cli.Command {
	return &cli.Command{
		Name:  "cobbled",
		Usage: "run a serving node (one RocksDB per partition replica, BatchGet over gRPC)",
		Subcommands: []*cli.Command{{
			Name:  "serve",
			Usage: "serve the partitions the control plane assigns to this node",
			Description: `Registers with the control plane, opens one RocksDB database per assigned partition
replica under --data (all sharing one --cache sized LRU block cache), long-polls for each
partition's batches, downloads and verifies them from --objstore and applies them in
order (deltas by IngestExternalFile, snapshots by building and swapping in a fresh
database). Serves BatchGet on --listen and /metrics, /healthz, /readyz and /checksum on --http
(/checksum?partition=P[&version=V]: the SHA-256 of a replica's whole key range and its
applied seq, to compare replicas; see go doc ./cobbled Checksum). On SIGINT or
SIGTERM it stops ingesting, drains in-flight requests and closes the databases.

A restarted node resumes exactly where it stopped. A batch that fails verification (size,
SHA-256, or any SST block checksum) is retried, then reported as "corrupt batch <id>: …"
(log, /healthz, cobbled_partition_fault, pillar status); the replica stays at the batch
before it and keeps serving until it is repaired or retracted (pillar control retract).
A read that finds the node's own data corrupt takes that partition out of service here
(other replicas serve it) while it is rebuilt from the object store. A token the control
plane refuses ends the node with an error.

Publications: each replica keeps one RocksDB per publication (chunk version + model) side
by side: the live one, the previous one and a candidate. A batch applies to its own
publication's database only (a snapshot replaces only that one). A publication the control
plane retires is dropped from disk --retire-grace after the node first sees it retired
(never a live, previous or candidate one). BatchGet reads the version the request names
("" = the live one as the node last saw routing). Per-publication bytes are reported to
the control plane (pillar status), in /metrics (cobbled_publication_bytes) and by
pillar cobbled inspect.

Ingest pacing: --ingest-rate caps the node's download rate for ingest (MB/s, default
unlimited); --ingest-target-p99 slows snapshot downloads while the node's own BatchGet
p99 is above it; --compaction-rate caps RocksDB's compaction writes. See /metrics
(cobbled_ingest_bytes_total, cobbled_ingest_throttle_*, cobbled_compaction_pending_bytes).

Examples:
   pillar cobbled serve --id n1 --zone a --data data/n1 --listen 127.0.0.1:7101 \
       --control 127.0.0.1:7000 --objstore data/objects --cache 2GiB
   pillar cobbled serve --id n2 --zone b --data data/n2 --listen 127.0.0.1:7102 \
       --http 127.0.0.1:8102 --control 127.0.0.1:7000 --objstore s3://pillar-batches/prod
   pillar cobbled serve --id n3 --data data/n3 --listen 127.0.0.1:7103 --control 127.0.0.1:7000 \
       --objstore data/objects --ingest-rate 200 --ingest-target-p99 3ms --compaction-rate 64
   pillar cobbled serve --id n1 --data data/n1 --listen 127.0.0.1:7101 --control 127.0.0.1:7000 \
       --objstore data/objects --retire-grace 1m`,
			Flags: append([]cli.Flag{
				&cli.StringFlag{Name: "id", Usage: "node id, unique in the deployment", Required: true},
				&cli.StringFlag{Name: "zone", Usage: "zone (failure domain) reported to the control plane"},
				&cli.StringFlag{Name: "data", Usage: "data directory (one subdirectory per partition replica)", Required: true},
				&cli.StringFlag{Name: "listen", Value: "127.0.0.1:7101", Usage: "gRPC listen address for BatchGet"},
				&cli.StringFlag{Name: "addr", Usage: "address readers dial, as registered (default: --listen)"},
				&cli.StringFlag{Name: "http", Usage: "listen address for /metrics, /healthz and /readyz (default: --listen's host, port + 1000)"},
				&cli.StringFlag{Name: "control", Usage: "control plane address host:port", Required: true, EnvVars: []string{envControl}},
				controlTokenFileFlag, controlTLSCAFlag,
				&cli.StringFlag{Name: "objstore", Usage: "object store holding the batches: a directory, file:///abs/dir or s3://bucket/prefix", Required: true, EnvVars: []string{envObjstore}},
				s3EndpointFlag, s3RegionFlag, s3PathStyleFlag,
				&cli.StringFlag{Name: "cache", Value: "1GiB", Usage: "block cache size shared by all partitions (e.g. 512MiB, 2GiB)"},
				&cli.IntFlag{Name: "partitions", Usage: "expected partition count (default: learn from the control plane)"},
				&cli.BoolFlag{Name: "direct-reads", Usage: "read SST files with O_DIRECT: the block cache is the only cache"},
				&cli.IntFlag{Name: "ingest-concurrency", Value: 2, Usage: "partitions downloading/applying at once (plus --small-delta-slots for small deltas)"},
				&cli.IntFlag{Name: "max-keys", Value: 1024, Usage: "largest BatchGet request in keys"},
				&cli.StringFlag{Name: "max-response", Value: "64MiB", Usage: "largest BatchGet response"},
				&cli.IntFlag{Name: "max-in-flight", Value: 1024, Usage: "gRPC BatchGet requests answered at once (more: RESOURCE_EXHAUSTED)"},
				&cli.IntFlag{Name: "max-conns", Value: 1024, Usage: "wire-protocol connections served at once (one more is refused)"},
				&cli.IntFlag{Name: "max-wire-in-flight", Value: 4096, Usage: "wire-protocol requests answered at once, all connections (more: RESOURCE_EXHAUSTED)"},
				&cli.DurationFlag{Name: "drain", Value: 30 * time.Second, Usage: "how long shutdown waits for in-flight requests"},
				&cli.DurationFlag{Name: "retire-grace", Value: 10 * time.Minute, Usage: "keep a retired publication's databases this long after first seeing it retired, so routers with an older table finish"},
				&cli.StringFlag{Name: "fault-slow", Hidden: true, Usage: "test only: FRACTION:DELAY, e.g. 0.05:50ms, delays that fraction of BatchGet requests"},
			}, append(cobbledPaceFlags(), serverTLSFlags()...)...), // ingest pacing: cmd_bench_ingest.go; TLS: tls_flags.go
			Action: cobbledServe,
		}, {
			Name:  "inspect",
			Usage: "show a node's data directory: partition replicas, applied seq, batch, each publication's generation and size",
			Description: `Reads the recorded state of every partition replica under --data without opening
any database, so it is safe while the node runs (use /healthz for live figures). Each
replica is followed by one line per publication database it keeps (publication "" is the
legacy unnamed one): its generation directory, bytes on disk and last batch.

Examples:
   pillar cobbled inspect --data data/n1
   pillar cobbled inspect --data data/n1 --json`,
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "data", Usage: "the node's data directory", Required: true},
				&cli.BoolFlag{Name: "json", Usage: "print as JSON"},
			},
			Action: func(c *cli.Context) error {
				info, err := cobbled.InspectDir(c.String("data"))
				if err != nil {
					return err
				}
				if c.Bool("json") {
					return printJSON(c.App.Writer, info) // jsonshape.go
				}
				fmt.Printf("%s: %d partitions, %d replicas held\n\n", info.Dir, info.Partitions, len(info.Replicas))
				fmt.Printf("%-9s  %8s  %-10s  %10s  %s\n", "PARTITION", "APPLIED", "GENERATION", "BYTES", "BATCH")
				for _, r := range info.Replicas {
					gen := r.Generation // the legacy "" publication's
					if gen == "" {
						gen = "-"
					}
					fmt.Printf("%-9d  %8d  %-10s  %10d  %s\n", r.Partition, r.AppliedSeq, gen, r.Bytes, r.Batch)
					for _, pi := range r.Publications {
						note := ""
						if pi.RebuildUntil > 0 {
							note = fmt.Sprintf("  (rebuilding until seq %d)", pi.RebuildUntil)
						}
						fmt.Printf("  publication %-40q  %-10s  %10d  %s%s\n", pi.ID, pi.Generation, pi.Bytes, pi.Batch, note)
					}
					if len(r.Retired) > 0 {
						fmt.Printf("  retired here: %s\n", strings.Join(r.Retired, ", "))
					}
				}
				return nil
			},
		}},
	}
}

func cobbledServe(c *cli.Context) error {
	allowStop(c.Duration("drain")) // signals.go: the drain may outlast the stop grace
	ctx := c.Context
	log := logger().With("node", c.String("id"))
	cacheBytes, err := bytesize.ParseFlag("cache", c.String("cache"))
	if err != nil {
		return err
	}
	maxResp, err := bytesize.ParseFlag("max-response", c.String("max-response"))
	if err != nil {
		return err
	}
	var fault cobbled.FaultDelay
	if s := c.String("fault-slow"); s != "" {
		if fault, err = cobbledParseFault(s); err != nil {
			return fmt.Errorf("--fault-slow: %w", err)
		}
		log.Warn("cobbled: fault injection on", "fraction", fault.Fraction, "delay", fault.Delay)
	}
	httpAddr := c.String("http")
	if httpAddr == "" {
		if httpAddr, err = cobbledPortPlus(c.String("listen"), 1000); err != nil {
			return fmt.Errorf("--http: %w", err)
		}
		if _, port, err := net.SplitHostPort(httpAddr); err == nil && !tlsconf.IsLoopback(httpAddr) {
			httpAddr = net.JoinHostPort("127.0.0.1", port) // plaintext metrics stay on loopback unless --http says otherwise
		}
	}
	addr := c.String("addr")
	if addr == "" {
		addr = c.String("listen")
	}

	objs, err := openObjstore(c, "objstore", c.String("objstore"))
	if err != nil {
		return err
	}
	cc, err := dialControl(c) // cmd_control.go: --token-file, --tls-ca
	if err != nil {
		return err
	}
	defer cc.Close()

	metrics := cobbled.NewMetrics()
	nodeOpts := cobbled.Options{
		ID: c.String("id"), Zone: c.String("zone"), Addr: addr, Dir: c.String("data"),
		Partitions: c.Int("partitions"), CacheBytes: cacheBytes, DirectReads: c.Bool("direct-reads"),
		Control: cobbled.FromControlClient(cc), Objects: objs,
		IngestConcurrency: c.Int("ingest-concurrency"), MaxKeys: c.Int("max-keys"), MaxResponseBytes: int(maxResp),
		MaxInFlight: c.Int("max-in-flight"),
		Wire:        wire.ServerOptions{MaxConns: c.Int("max-conns"), MaxServerInFlight: c.Int("max-wire-in-flight")},
		FaultDelay:  fault, Logger: log, Metrics: metrics, RetireGrace: c.Duration("retire-grace"),
	}
	for _, f := range []string{"max-in-flight", "max-conns", "max-wire-in-flight"} {
		if c.Int(f) < 1 {
			return fmt.Errorf("--%s %d: must be at least 1", f, c.Int(f))
		}
	}
	if nodeOpts.RetireGrace <= 0 {
		return fmt.Errorf("--retire-grace %v: must be positive", nodeOpts.RetireGrace)
	}
	if err := cobbledPaceOptions(c, &nodeOpts); err != nil {
		return err
	}
	// /healthz and /readyz answer while the node opens: "starting" until
	// Open returns (a first start waits there for the control plane).
	var opened atomic.Pointer[cobbled.Node]
	hsrv, err := startDaemonHTTP("cobbled serve", httpAddr, health.New(health.Options{Component: "cobbled"}, func(ctx context.Context) health.Status {
		if n := opened.Load(); n != nil {
			return n.Health(ctx)
		}
		return health.Status{Status: health.Starting, WaitingOn: []string{"opening the node (a first start learns the partition count from the control plane)"}}
	}), metrics.Collectors()...) // daemon.go: /metrics, /healthz, /readyz
	if err != nil {
		return err
	}
	defer hsrv.Close()
	node, err := cobbled.Open(ctx, nodeOpts)
	if err != nil {
		return err
	}
	defer node.Close()
	opened.Store(node)
	hsrv.Handle("/checksum", node.ChecksumHandler())

	lis, err := net.Listen("tcp", c.String("listen"))
	if err != nil {
		return fmt.Errorf("cobbled: listen: %w", err)
	}
	if lis, err = secureListener(ctx, c, "cobbled serve", lis, httpAddr, log); err != nil { // tls_flags.go
		return err
	}
	gsrv := node.NewGRPCServer()
	serveErr := make(chan error, 1)
	go func() { serveErr <- node.Serve(lis, gsrv) }() // gRPC and the lean wire protocol (router --transport wire) on one port

	runCtx, stopRun := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- node.Run(runCtx) }()
	log.Info("cobbled: serving", "listen", lis.Addr().String(), "http", hsrv.Addr.String(),
		"partitions", node.Partitions(), "held", len(node.Held()), "cache", cacheBytes)

	var result error
	select {
	case <-ctx.Done():
		log.Info("cobbled: shutting down: draining requests")
	case err := <-runErr:
		result = err
		runErr <- err
	case err := <-serveErr:
		result = fmt.Errorf("cobbled: grpc serve: %w", err)
	}
	stopRun()
	if err := <-runErr; err != nil && result == nil {
		result = err
	}
	drained := make(chan struct{})
	go func() { gsrv.GracefulStop(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(c.Duration("drain")):
		log.Warn("cobbled: drain timeout; closing open requests")
		gsrv.Stop()
		<-drained
	}
	hsrv.Close()
	return result
}

func getCommand() *cli.Command {
	return &cli.Command{
		Name:      "get",
		Usage:     "read pages from a serving node with BatchGet",
		ArgsUsage: "KEY|URL...",
		Description: `Looks up page keys (32 hex characters) or URLs (normalized, then hashed to their key) on
one cobbled node with a single BatchGet and prints, per key in order: found or not, the
value size and a summary of the prepared page record (URL, title, chunks, versions).
Keys of partitions the node does not hold are reported per key. --node may also be a
router (pillar router serve): it speaks the same API. --version reads one publication
(default: the live one); through a router also "candidate" or "previous", and --caller
sets the caller id of the router's A/B split. The version read is printed.

Examples:
   pillar get --node 127.0.0.1:7101 https://www.postgresql.org/docs/15/sql-select.html
   pillar get --node 127.0.0.1:7101 3fa85f6457174562b3fc2c963f66afa6 --json
   pillar get --node 127.0.0.1:7101 --out values/ $(cat keys.txt)
   pillar get --node 127.0.0.1:7400 --version candidate 3fa85f6457174562b3fc2c963f66afa6
   pillar get --node 127.0.0.1:7400 --caller user-17 3fa85f6457174562b3fc2c963f66afa6
   pillar get --node router.internal:7400 --tls-ca certs/ca.pem --tls-cert certs/reader.pem --tls-key certs/reader.key 3fa85f6457174562b3fc2c963f66afa6`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "node", Usage: "cobbled node address host:port", Required: true},
			&cli.DurationFlag{Name: "timeout", Value: 10 * time.Second, Usage: "deadline for the request"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object per key"},
			&cli.StringFlag{Name: "out", Usage: "also write each found value (encoded record) to DIR/<key>.pb"},
			&cli.StringFlag{Name: "version", Usage: `publication to read: an id ("<chunk version>/<model>"); through a router also live, candidate, previous (default: live)`},
			&cli.StringFlag{Name: "caller", Usage: "caller id for a router's A/B split by caller"},
			&cli.StringFlag{Name: "tls-ca", Usage: "PEM CA bundle: connect with TLS and verify the node or router against it"},
			&cli.StringFlag{Name: "tls-cert", Usage: "PEM client certificate, for a server requiring mutual TLS (with --tls-ca)"},
			&cli.StringFlag{Name: "tls-key", Usage: "PEM private key for --tls-cert"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return errors.New("get: give at least one KEY (32 hex characters) or URL")
			}
			var keys [][]byte
			var labels []string
			for _, a := range c.Args().Slice() {
				k, label, err := cobbledParseKeyArg(a)
				if err != nil {
					return err
				}
				keys, labels = append(keys, k[:]), append(labels, label)
			}
			creds := insecure.NewCredentials()
			if cfg, err := clientTLS(c); err != nil { // cmd_control.go
				return err
			} else if cfg != nil {
				creds = credentials.NewTLS(cfg)
			}
			conn, err := grpc.NewClient(c.String("node"), append(servepb.DialOptions(0), grpc.WithTransportCredentials(creds))...)
			if err != nil {
				return fmt.Errorf("get: %s: %w", c.String("node"), err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
			defer cancel()
			start := time.Now()
			resp, err := servepb.NewServeClient(conn).BatchGet(ctx, &servepb.BatchGetRequest{Keys: keys, Version: c.String("version"), CallerId: c.String("caller")})
			if err != nil {
				return fmt.Errorf("get: %s: %w", c.String("node"), err)
			}
			took := time.Since(start)
			if len(resp.Results) != len(keys) {
				return fmt.Errorf("get: %s answered %d results for %d keys", c.String("node"), len(resp.Results), len(keys))
			}
			if dir := c.String("out"); dir != "" {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					return err
				}
			}
			enc := json.NewEncoder(c.App.Writer) // --json: one object per key
			for i, r := range resp.Results {
				hexKey := hex.EncodeToString(keys[i])
				row := map[string]any{"key": hexKey, "found": r.Found, "bytes": len(r.Value), "version": resp.Version}
				if labels[i] != hexKey {
					row["arg"] = labels[i]
				}
				if r.Status != servepb.KeyStatus_KEY_OK {
					row["status"], row["error"] = r.Status.String(), r.Error
				}
				if r.Found {
					if pg, err := record.Unmarshal(r.Value); err == nil {
						row["url"], row["title"], row["chunks"] = pg.GetUrl(), pg.GetTitle(), len(pg.GetChunks())
						row["chunker_version"], row["model_version"] = pg.GetChunkerVersion(), pg.GetModelVersion()
					} else {
						row["record_error"] = err.Error()
					}
					if dir := c.String("out"); dir != "" {
						if err := os.WriteFile(filepath.Join(dir, hexKey+".pb"), r.Value, 0o644); err != nil {
							return err
						}
					}
				}
				if c.Bool("json") {
					enc.Encode(row)
					continue
				}
				switch {
				case r.Status != servepb.KeyStatus_KEY_OK:
					fmt.Printf("%s  %s: %s\n", hexKey, r.Status, r.Error)
				case !r.Found:
					fmt.Printf("%s  not found\n", hexKey)
				default:
					fmt.Printf("%s  %d bytes", hexKey, len(r.Value))
					if u, ok := row["url"]; ok {
						fmt.Printf("  %s  %q  %d chunks  %s/%s", u, row["title"], row["chunks"], row["chunker_version"], row["model_version"])
					}
					fmt.Println()
				}
			}
			if !c.Bool("json") {
				fmt.Fprintf(os.Stderr, "%d keys from version %q in %v\n", len(keys), resp.Version, took.Round(time.Microsecond))
			}
			return nil
		},
	}
}

// cobbledParseKeyArg reads a page key as 32 hex characters or as a URL.
func cobbledParseKeyArg(a string) (pillar.Key, string, error) {
	if len(a) == 2*pillar.KeySize && !strings.Contains(a, ":") {
		k, err := pillar.ParseKey(strings.ToLower(a))
		return k, a, err
	}
	k, _, err := pillar.KeyOfURL(a)
	if err != nil {
		return k, a, fmt.Errorf("get: %q is neither a 32-hex-character key nor a URL: %w", a, err)
	}
	return k, a, nil
}

// cobbledParseFault parses FRACTION:DELAY, e.g. "0.05:50ms".
func cobbledParseFault(s string) (cobbled.FaultDelay, error) {
	frac, delay, ok := strings.Cut(s, ":")
	f, err1 := strconv.ParseFloat(frac, 64)
	d, err2 := time.ParseDuration(delay)
	if !ok || err1 != nil || err2 != nil || f < 0 || f > 1 || d < 0 {
		return cobbled.FaultDelay{}, fmt.Errorf("%q: want FRACTION:DELAY with FRACTION in [0,1], e.g. 0.05:50ms", s)
	}
	return cobbled.FaultDelay{Fraction: f, Delay: d}, nil
}

// cobbledPortPlus returns addr with its port increased by d.
func cobbledPortPlus(addr string, d int) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	p, err := strconv.Atoi(port)
	if err != nil || p == 0 {
		return net.JoinHostPort(host, "0"), nil
	}
	return net.JoinHostPort(host, strconv.Itoa(p+d)), nil
}
