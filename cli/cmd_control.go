package cli

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"reflect"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/objstore"
	"github.com/pillarkit/pillar/internal/tlsconf"
)

// Flags shared by the control-plane client commands.
var (
	controlAddrFlag = &cli.StringFlag{Name: "control", Value: "127.0.0.1:7000", EnvVars: []string{envControl},
		Usage: "control-plane address host:port"}
	controlTokenFileFlag = &cli.StringFlag{Name: "token-file", EnvVars: []string{envControlTokenFile},
		Usage: "file holding the bearer token, needed by mutating calls (default: $" + envControlToken + ")"}
	controlTLSCAFlag = &cli.StringFlag{Name: "tls-ca", Usage: "PEM CA bundle: connect with TLS and verify the server against it"}
	controlJSONFlag  = &cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"}
)

func controlClientFlags(extra ...cli.Flag) []cli.Flag {
	return append([]cli.Flag{controlAddrFlag, controlTokenFileFlag, controlTLSCAFlag}, extra...)
}

func dialControl(c *cli.Context) (*control.Client, error) {
	tok, err := controlToken(c)
	if err != nil {
		return nil, err
	}
	opts := &control.ClientOptions{Token: tok}
	if cfg, err := clientTLS(c); err != nil {
		return nil, err
	} else if cfg != nil {
		opts.TLS = cfg
	}
	if tok != "" && opts.TLS == nil && !tlsconf.IsLoopback(c.String("control")) {
		return nil, fmt.Errorf("--control %s: a token is never sent in plaintext beyond loopback; give --tls-ca (the control plane serving --tls-cert)", c.String("control"))
	}
	return control.Dial(c.String("control"), opts)
}

// clientTLS is the client side of the TLS flags: with --tls-ca, a TLS
// configuration verifying the server against it and, where the command
// has --tls-cert and --tls-key, presenting that certificate (mutual TLS;
// reloaded when the files change). Without --tls-ca, nil: plaintext.
func clientTLS(c *cli.Context) (*tls.Config, error) {
	ca := c.String("tls-ca")
	if ca == "" {
		return nil, nil
	}
	f := tlsconf.Files{CA: ca}
	if hasFlag(c, "tls-cert") {
		f.Cert, f.Key = c.String("tls-cert"), c.String("tls-key")
	}
	r, err := tlsconf.NewReloader(f, tlsconf.Options{OnError: func(err error) {
		logger().Error("client certificate reload failed; the previous one stays in use", "err", err)
	}})
	if err != nil {
		return nil, fmt.Errorf("--tls-ca: %w", err)
	}
	go r.Watch(c.Context)
	return r.ClientConfig(), nil
}

func controlCommand() *cli.Command {
	return &cli.Command{
		Name:  "control",
		Usage: "the control plane: per-partition batch log, nodes, replica assignment",
		Description: `The control plane orders the batches of each partition (the batches themselves live
in the object store), keeps the serving nodes and the partition -> replica assignment,
and records how far each replica has applied. 'pillar status' shows replica lag.

Examples:
   pillar control serve --db sqlite:data/control.db --listen 127.0.0.1:7000 --partitions 64 --token-file control.token
   pillar control batches --control 127.0.0.1:7000 --partition 3
   pillar control nodes --control 127.0.0.1:7000
   pillar control remove-node --token-file control.token --node node-7`,
		Subcommands: []*cli.Command{controlServeCommand(), controlBatchesCommand(), controlRegisterCommand(), controlNodesCommand(),
			controlRemoveNodeCommand(), controlRetractCommand(), controlRebuildCommand()},
	}
}

func controlServeCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the control-plane gRPC service",
		Description: `Serves the control plane's gRPC API on --listen (loopback unless told otherwise) and
Prometheus metrics (/metrics) and health checks (/healthz, /readyz) on --http. The partition
count is fixed at the first start (--partitions) and recorded in the database; a later
start with a different count is refused. Mutating calls need a credential: the admin
token of --token-file, a role token of --credentials-file (node: register, heartbeat and
report for its own node id; writer: register batches and publications; admin: everything,
including promote, rollback, retire, retract and remove-node), or with --tls-client-ca a
client certificate whose identity is pillar://<role>/<name>. A refused call is logged once
per credential and method. Off loopback, --listen needs --tls-cert (or --insecure). With --objstore, batches every replica has moved past (they precede a
snapshot all replicas applied) are garbage-collected, objects included.

Keep database passwords out of the URL (it shows in ps): pgx reads PGPASSWORD and
~/.pgpass. An SQLite database belongs to one instance; several instances may share a PostgreSQL
database (long polls hear of each other's writes through LISTEN/NOTIFY).

Examples:
   pillar control serve --db sqlite:data/control.db --listen 127.0.0.1:7000 --partitions 64 --token-file control.token
   pillar control serve --db postgres://postgres@127.0.0.1:5432/control --partitions 64 \
       --token-file control.token --objstore file:///srv/pillar/objects --http 127.0.0.1:7001
   pillar control serve --db postgres://control@db.internal/control --listen 0.0.0.0:7000 \
       --tls-cert server.pem --tls-key server.key --token-file /etc/pillar/control.token
   pillar control serve --db postgres://control@db.internal/control --listen 0.0.0.0:7000 \
       --tls-cert certs/control.pem --tls-key certs/control.key --tls-client-ca certs/ca.pem \
       --credentials-file /etc/pillar/credentials`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "db", Required: true, EnvVars: []string{"PILLAR_CONTROL_DB"},
				Usage: "database: sqlite:PATH (embedded, one file) or postgres://user@host:port/db"},
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:7000", Usage: "gRPC listen address"},
			&cli.IntFlag{Name: "partitions", Usage: "partition count P (required on a new database; must match afterwards)"},
			&cli.StringFlag{Name: "token-file", EnvVars: []string{envControlTokenFile}, Usage: "file holding the bearer token mutating calls must present (default: $" + envControlToken + ")"},
			&cli.BoolFlag{Name: "no-auth", Usage: "accept mutating calls without a token (only with a loopback --listen)"},
			&cli.StringFlag{Name: "http", Value: "127.0.0.1:7001", Usage: "address for /metrics, /healthz and /readyz (empty: none)"},
			&cli.StringFlag{Name: "credentials-file", Usage: "role tokens, one per line: node TOKEN [NODE_ID] | writer TOKEN | admin TOKEN (reloaded on SIGHUP or change: rotate by adding the new token, moving clients, removing the old)"},
			&cli.StringFlag{Name: "tls-cert", Usage: "PEM certificate: serve gRPC over TLS (reloaded on SIGHUP or change)"},
			&cli.StringFlag{Name: "tls-key", Usage: "PEM private key for --tls-cert"},
			&cli.StringFlag{Name: "tls-client-ca", Usage: "PEM CA bundle: require client certificates signed by it; their pillar://<role>/<name> identities act as credentials"},
			&cli.BoolFlag{Name: "insecure", Usage: "serve plaintext on a non-loopback --listen or --http (refused without it)"},
			&cli.StringFlag{Name: "objstore", EnvVars: []string{envObjstore}, Usage: "object store URL (file:///dir, a path, or s3://bucket/prefix); enables garbage collection"},
			s3EndpointFlag, s3RegionFlag, s3PathStyleFlag,
			&cli.DurationFlag{Name: "gc-interval", Value: time.Minute, Usage: "how often garbage collection runs"},
			&cli.IntFlag{Name: "replicas", Value: 3, Usage: "replicas per partition"},
			&cli.DurationFlag{Name: "down-after", Value: 10 * time.Second, Usage: "missed heartbeats before a node is marked down (not routed to)"},
			&cli.DurationFlag{Name: "reassign-after", Value: 5 * time.Minute, Usage: "missed heartbeats before a node's partitions are reassigned"},
		},
		Action: runControlServe,
	}
}

func runControlServe(c *cli.Context) error {
	allowStop(7 * time.Second) // signals.go: GracefulStop (5 s) and the HTTP shutdown (2 s)
	ctx := c.Context
	log := slog.Default()
	token, err := controlToken(c)
	if err != nil {
		return err
	}
	var creds []control.Credential
	if f := c.String("credentials-file"); f != "" {
		if creds, err = readCredentials(f); err != nil {
			return fmt.Errorf("control serve: %w", err)
		}
	}
	if token == "" && len(creds) == 0 && c.String("tls-client-ca") == "" && !c.Bool("no-auth") {
		return errors.New("control serve: give --token-file (an admin token), --credentials-file (role tokens) or --tls-client-ca (certificate identities); or --no-auth on a loopback --listen")
	}
	tlsOn := c.String("tls-cert") != ""
	if err := tlsconf.OffLoopback("control serve --listen", c.String("listen"), tlsOn, c.Bool("insecure")); err != nil {
		return err
	}
	if a := c.String("http"); a != "" && !tlsconf.IsLoopback(a) && !c.Bool("insecure") {
		return fmt.Errorf("control serve --http %s: the metrics and health port serves plaintext; bind it to 127.0.0.1 or pass --insecure", a)
	}
	if c.Bool("no-auth") && !isLoopback(c.String("listen")) {
		return fmt.Errorf("control serve: --no-auth is refused with a non-loopback --listen %s", c.String("listen"))
	}
	if (c.String("tls-cert") == "") != (c.String("tls-key") == "") {
		return errors.New("control serve: --tls-cert and --tls-key go together")
	}
	store, err := control.OpenStore(ctx, c.String("db"), &control.StoreOptions{Partitions: c.Int("partitions"), Logger: log})
	if err != nil {
		return err
	}
	defer store.Close()
	metrics := control.NewMetrics()
	opts := &control.Options{Store: store, Token: token, Credentials: creds, ClientCerts: c.String("tls-client-ca") != "",
		NoAuth: c.Bool("no-auth"), Replicas: c.Int("replicas"),
		DownAfter: c.Duration("down-after"), ReassignAfter: c.Duration("reassign-after"),
		GCInterval: c.Duration("gc-interval"), Logger: log, Metrics: metrics}
	if u := c.String("objstore"); u != "" {
		objs, err := openObjstore(c, "objstore", u)
		if err != nil {
			return fmt.Errorf("control serve: %w", err)
		}
		opts.Objects = objs
	}
	srv, err := control.NewServer(opts)
	if err != nil {
		return err
	}
	var gopts []grpc.ServerOption
	if tlsOn {
		r, err := tlsconf.NewReloader(tlsconf.Files{Cert: c.String("tls-cert"), Key: c.String("tls-key"), CA: c.String("tls-client-ca")}, tlsconf.Options{
			OnError: func(err error) {
				log.Error("control serve: certificate reload failed; the previous one stays in use", "err", err)
			},
			// A bearer token authenticates a client without a certificate;
			// a certificate sent is verified against --tls-client-ca.
			ClientCertOptional: true,
		})
		if err != nil {
			return fmt.Errorf("control serve: %w", err)
		}
		cfg, err := r.ServerConfig()
		if err != nil {
			return fmt.Errorf("control serve: %w", err)
		}
		go r.Watch(ctx)
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(cfg)))
	} else if c.String("tls-client-ca") != "" {
		return errors.New("control serve: --tls-client-ca needs --tls-cert and --tls-key")
	}
	if f := c.String("credentials-file"); f != "" {
		go watchCredentials(ctx, f, srv, log)
	}
	g := srv.GRPCServer(gopts...)
	lis, err := net.Listen("tcp", c.String("listen"))
	if err != nil {
		return fmt.Errorf("control serve: --listen: %w", err)
	}
	var httpSrv *daemonHTTP
	if addr := c.String("http"); addr != "" {
		if httpSrv, err = startDaemonHTTP("control serve", addr, srv.HealthHandler(), metrics, srv.LagCollector()); err != nil {
			lis.Close()
			return err
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go srv.Run(runCtx)
	log.Info("control plane serving", "listen", lis.Addr().String(), "http", c.String("http"), "db", store.Backend(),
		"partitions", store.Partitions(), "gc", opts.Objects != nil, "tls", c.String("tls-cert") != "")
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(lis) }()
	select {
	case err := <-errc:
		return fmt.Errorf("control serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("control plane stopping")
	done := make(chan struct{})
	go func() { g.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second): // long polls end with Stop
		g.Stop()
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	httpSrv.Shutdown(sctx)
	cancel()
	return nil
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// batchJSON is one batch-log entry of `control batches --json`.
type batchJSON struct {
	Seq          int64          `json:"seq"`
	RegisteredAt time.Time      `json:"registered_at"`
	Manifest     batch.Manifest `json:"manifest"`
	Retracted    string         `json:"retracted,omitempty"`
}

func controlBatchesCommand() *cli.Command {
	return &cli.Command{
		Name:  "batches",
		Usage: "list a partition's batch log",
		Description: `Lists the registered (not garbage-collected) batches of one partition in sequence
order. With --follow it keeps long-polling and prints batches as they are registered.
--json prints one array; with --follow, one object per line as batches arrive.

Examples:
   pillar control batches --control 127.0.0.1:7000 --partition 3
   pillar control batches --partition 3 --after 120 --limit 10 --json
   pillar control batches --partition 3 --follow`,
		Flags: controlClientFlags(
			&cli.IntFlag{Name: "partition", Required: true, Usage: "partition number"},
			&cli.Int64Flag{Name: "after", Usage: "list batches after this seq"},
			&cli.IntFlag{Name: "limit", Value: 1000, Usage: "at most this many batches (per poll with --follow)"},
			&cli.BoolFlag{Name: "follow", Usage: "keep waiting for new batches (Ctrl-C to stop)"},
			controlJSONFlag,
		),
		Action: func(c *cli.Context) error {
			cl, err := dialControl(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
			asJSON := c.Bool("json")
			if !asJSON {
				fmt.Fprintln(w, "SEQ\tID\tKIND\tFILES\tBYTES\tKEYS\tDELETES\tREGISTERED\tSOURCE")
			}
			after := c.Int64("after")
			for {
				wait := time.Duration(0)
				if c.Bool("follow") {
					wait = 25 * time.Second
				}
				list, err := cl.ListBatches(c.Context, c.Int("partition"), after, c.Int("limit"), wait)
				if err != nil {
					if c.Bool("follow") && c.Context.Err() != nil {
						return nil
					}
					return err
				}
				if asJSON && !c.Bool("follow") {
					rows := make([]batchJSON, 0, len(list))
					for _, e := range list {
						rows = append(rows, batchJSON{e.Seq, e.RegisteredAt, e.Manifest, e.Retracted})
					}
					return printJSON(c.App.Writer, rows)
				}
				for _, e := range list {
					if asJSON { // --follow: one object per line as batches arrive
						b, _ := json.Marshal(jsonShape(reflect.ValueOf(batchJSON{e.Seq, e.RegisteredAt, e.Manifest, e.Retracted})))
						fmt.Fprintln(c.App.Writer, string(b))
						continue
					}
					var size int64
					for _, f := range e.Manifest.Files {
						size += f.Size
					}
					src := e.Manifest.Source
					if e.Retracted != "" {
						src = "RETRACTED (" + e.Retracted + ") " + src
					}
					fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", e.Seq, e.Manifest.ID, e.Manifest.Kind, len(e.Manifest.Files),
						size, e.Manifest.Keys, e.Manifest.Deletes, e.RegisteredAt.UTC().Format(time.RFC3339), src)
				}
				w.Flush()
				if len(list) > 0 {
					after = list[len(list)-1].Seq
				}
				if !c.Bool("follow") {
					return nil
				}
			}
		},
	}
}

func controlRegisterCommand() *cli.Command {
	return &cli.Command{
		Name:  "register",
		Usage: "register a batch from its manifest.json",
		Description: `Registers a batch whose objects already exist in the object store and prints its
sequence number. Registering the same manifest again prints the same number.

Examples:
   pillar control register --token-file control.token --manifest out/batches/p00003/b-0001/manifest.json
   pillar control register --token-file control.token --objstore file:///srv/pillar/objects --partition 3 --id b-0001`,
		Flags: controlClientFlags(
			&cli.StringFlag{Name: "manifest", Usage: "manifest.json file ('-' for stdin)"},
			&cli.StringFlag{Name: "objstore", EnvVars: []string{envObjstore}, Usage: "object store URL to read the manifest from (with --partition and --id)"},
			s3EndpointFlag, s3RegionFlag, s3PathStyleFlag,
			&cli.IntFlag{Name: "partition", Usage: "partition of the batch (with --objstore)"},
			&cli.StringFlag{Name: "id", Usage: "batch id (with --objstore)"},
			controlJSONFlag,
		),
		Action: func(c *cli.Context) error {
			var raw []byte
			var err error
			switch {
			case c.String("manifest") == "-":
				raw, err = io.ReadAll(os.Stdin)
			case c.String("manifest") != "":
				raw, err = os.ReadFile(c.String("manifest"))
			case c.String("objstore") != "" && c.String("id") != "":
				var st objstore.Store
				if st, err = openObjstore(c, "objstore", c.String("objstore")); err == nil {
					raw, err = objstore.ReadAll(c.Context, st, batch.ManifestKey(c.Int("partition"), c.String("id")))
				}
			default:
				return errors.New("control register: give --manifest FILE, or --objstore URL with --partition and --id")
			}
			if err != nil {
				return fmt.Errorf("control register: %w", err)
			}
			m, err := batch.Decode(raw)
			if err != nil {
				return fmt.Errorf("control register: %w", err)
			}
			cl, err := dialControl(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			seq, err := cl.RegisterBatch(c.Context, m)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, map[string]any{"partition": m.Partition, "seq": seq, "batch": m.ID})
			}
			fmt.Fprintf(c.App.Writer, "partition %d seq %d batch %s\n", m.Partition, seq, m.ID)
			return nil
		},
	}
}

func controlNodesCommand() *cli.Command {
	return &cli.Command{
		Name:  "nodes",
		Usage: "list the serving nodes and their state",
		Description: `Examples:
   pillar control nodes --control 127.0.0.1:7000
   pillar control nodes --json`,
		Flags: controlClientFlags(controlJSONFlag),
		Action: func(c *cli.Context) error {
			cl, err := dialControl(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			nodes, err := cl.ListNodes(c.Context)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, nodes) // jsonshape.go: as in status --json
			}
			w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NODE\tADDR\tZONE\tSTATE\tREPLICAS\tLAST HEARTBEAT")
			for _, n := range nodes {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s ago\n", n.ID, n.Addr, n.Zone, n.State, n.Replicas,
					time.Since(n.LastHeartbeat).Round(time.Second))
			}
			return w.Flush()
		},
	}
}

func controlRemoveNodeCommand() *cli.Command {
	return &cli.Command{
		Name:  "remove-node",
		Usage: "decommission a node: forget it and reassign its partitions now",
		Description: `Forgets a node and its progress and reassigns its partitions at once, instead of
waiting for the reassignment grace period. A node that is still up is refused unless
--force (it would be routed away from while serving; stop it first).

Examples:
   pillar control remove-node --control 127.0.0.1:7000 --token-file control.token --node node-7
   pillar control remove-node --token-file control.token --node node-7 --force`,
		Flags: controlClientFlags(
			&cli.StringFlag{Name: "node", Required: true, Usage: "node id"},
			&cli.BoolFlag{Name: "force", Usage: "remove the node even if it is up"},
			controlJSONFlag,
		),
		Action: func(c *cli.Context) error {
			cl, err := dialControl(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			if err := cl.RemoveNode(c.Context, c.String("node"), c.Bool("force")); err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, map[string]any{"node": c.String("node"), "removed": true})
			}
			fmt.Fprintf(c.App.Writer, "node %s removed; its partitions are reassigned\n", c.String("node"))
			return nil
		},
	}
}

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "per-partition replica lag from the control plane",
		Description: `Prints, for every partition and each of its replicas, the replica's node, zone and
state, the sequence number it applied, and how far it is behind the partition's newest
batch: in batches and in time (the age of the oldest batch it has not applied).

Examples:
   pillar status --control 127.0.0.1:7000
   pillar status --control 127.0.0.1:7000 --lagging
   pillar status --partition 3 --json
   pillar status --lagging --watch 5s`,
		Flags: controlClientFlags(
			&cli.IntFlag{Name: "partition", Value: -1, Usage: "only this partition"},
			&cli.BoolFlag{Name: "lagging", Usage: "only replicas that are behind or down"},
			&cli.DurationFlag{Name: "watch", Usage: "print again every interval (and at once when the routing changes) until interrupted"},
			controlJSONFlag,
		),
		Action: func(c *cli.Context) error {
			cl, err := dialControl(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			every := c.Duration("watch")
			var version int64
			for {
				v, err := printStatus(c, cl)
				if err != nil || every <= 0 {
					return err
				}
				if v > version {
					version = v
				}
				// Wait for the interval, or less if the routing changes.
				wctx, cancel := context.WithTimeout(c.Context, every)
				if r, err := cl.WatchRouting(wctx, version, every); err == nil && r.Version > version {
					version = r.Version
				} else {
					<-wctx.Done()
				}
				cancel()
				if c.Context.Err() != nil {
					return nil
				}
				fmt.Fprintf(c.App.Writer, "\n--- %s\n", time.Now().UTC().Format(time.RFC3339))
			}
		},
	}
}

// printStatus prints one status report and returns the routing version.
func printStatus(c *cli.Context, cl *control.Client) (int64, error) {
	info, err := cl.Info(c.Context)
	if err != nil {
		return 0, err
	}
	r, err := cl.GetRouting(c.Context)
	if err != nil {
		return 0, err
	}
	nodes, err := cl.ListNodes(c.Context)
	if err != nil {
		return 0, err
	}
	type row struct {
		Partition  int           `json:"partition"`
		NewestSeq  int64         `json:"newest_seq"`
		Node       string        `json:"node,omitempty"`
		Zone       string        `json:"zone,omitempty"`
		State      string        `json:"state,omitempty"`
		AppliedSeq int64         `json:"applied_seq"`
		LagBatches int64         `json:"lag_batches"`
		Lag        time.Duration `json:"lag"` // lag_ms in JSON
		Fault      string        `json:"fault,omitempty"`
	}
	var rows []row
	for p := 0; p < r.Partitions; p++ {
		if c.Int("partition") >= 0 && p != c.Int("partition") {
			continue
		}
		if len(r.Replicas[p]) == 0 && !c.Bool("lagging") {
			rows = append(rows, row{Partition: p, NewestSeq: r.NewestSeq[p], State: "unassigned"})
		}
		for _, rep := range r.Replicas[p] {
			if c.Bool("lagging") && rep.LagBatches == 0 && rep.State == control.StateUp && rep.Fault == "" {
				continue
			}
			rows = append(rows, row{p, r.NewestSeq[p], rep.NodeID, rep.Zone, rep.State, rep.AppliedSeq, rep.LagBatches, rep.Lag, rep.Fault})
		}
	}
	pubs, live, perr := servingPublications(c.Context, cl) // cmd_publication.go; an older control plane has none
	if perr != nil {
		fmt.Fprintf(c.App.ErrWriter, "serving publications: %v\n", perr)
	}
	if c.Bool("json") {
		return r.Version, printJSON(c.App.Writer, map[string]any{"backend": info.Backend, "partitions": r.Partitions, "routing_version": r.Version,
			"nodes": nodes, "replicas": rows, "publications": pubs, "live": live}) // jsonshape.go: snake_case, _ms, RFC 3339
	}
	if c.Bool("lagging") && len(rows) == 0 {
		unassigned := 0
		for p := 0; p < r.Partitions; p++ {
			if len(r.Replicas[p]) == 0 {
				unassigned++
			}
		}
		fmt.Fprintf(c.App.Writer, "every replica is current: none behind, down or faulty (%d partitions, %d unassigned, routing version %d)\n", r.Partitions, unassigned, r.Version)
		return r.Version, nil
	}
	states := map[string]int{}
	for _, n := range nodes {
		states[n.State]++
	}
	fmt.Fprintf(c.App.Writer, "control plane %s: %s, %d partitions, routing version %d, nodes: %d up, %d down, %d gone\n\n",
		c.String("control"), info.Backend, r.Partitions, r.Version, states[control.StateUp], states[control.StateDown], states[control.StateGone])
	w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PARTITION\tNEWEST\tNODE\tZONE\tSTATE\tAPPLIED\tBEHIND\tLAG\tFAULT")
	for _, rw := range rows {
		lag := "-"
		if rw.LagBatches > 0 {
			d := rw.Lag
			if d < 10*time.Second {
				lag = d.Round(10 * time.Millisecond).String()
			} else {
				lag = d.Round(time.Second).String()
			}
		}
		fmt.Fprintf(w, "%d\t%d\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", rw.Partition, rw.NewestSeq, rw.Node, rw.Zone, rw.State, rw.AppliedSeq, rw.LagBatches, lag, rw.Fault)
	}
	if err := w.Flush(); err != nil {
		return r.Version, err
	}
	fmt.Fprintln(c.App.Writer)
	return r.Version, printPublications(c.App.Writer, pubs, live)
}
