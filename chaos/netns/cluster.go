package netns

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"google.golang.org/grpc"
	grpccreds "google.golang.org/grpc/credentials"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/internal/s3test"
	"github.com/pillarkit/pillar/internal/tlsconf"
	"github.com/pillarkit/pillar/pillar/local"
)

const (
	bucket    = "pillar-netns"
	pgPort    = "5432"
	ctlPort   = "7000"
	ctlHTTP   = "7001"
	s3Port    = "7070"
	nodePort  = "7100"
	nodeHTTP  = "8100"
	routePort = "7400"
	routeHTTP = "8400"
)

// node is one cobbled node on a host of its own.
type node struct {
	id, zone string
	h        *host
	p        *proc
	data     string
}

func (n *node) addr() string     { return n.h.ip + ":" + nodePort }
func (n *node) httpAddr() string { return n.h.ip + ":" + nodeHTTP }

// cluster is the running system: every component on its own host.
type cluster struct {
	o   *Options
	dir string
	net *network

	ctlHost, s3Host, procHost, rtHost, clHost *host
	pg, control, s3srv, lorry, router         *proc
	nodes                                     []*node
	spare                                     *host  // the host scenario 7's new node starts on
	pgTop                                     string // PostgreSQL's folder (startPostgres)
	adminToken                                string

	certs, ca string
	tokens    map[string]string // role or node id → token file
	admin     *control.Client
	readerTLS *tls.Config
	store     *local.Store
	say       func(format string, a ...any)
}

func (c *cluster) ctlAddr() string { return c.ctlHost.ip + ":" + ctlPort }
func (c *cluster) s3URL() string   { return "http://" + c.s3Host.ip + ":" + s3Port }
func (c *cluster) objURL() string  { return "s3://" + bucket + "/netns" }

func (c *cluster) s3Env() []string {
	return []string{"AWS_ENDPOINT_URL_S3=" + c.s3URL(), "AWS_ACCESS_KEY_ID=" + s3test.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + s3test.SecretKey, "AWS_REGION=" + s3test.Region}
}

func (c *cluster) proc(name string, h *host, addr string, env []string, argv ...string) *proc {
	return &proc{name: name, ns: h.name, argv: argv, env: env, addr: addr, log: filepath.Join(c.dir, "logs", name+".log")}
}

func (c *cluster) pillar(name string, h *host, addr string, env []string, args ...string) *proc {
	return c.proc(name, h, addr, env, append([]string{c.o.Pillar}, args...)...)
}

// nodeZones are the zones of the first nodes, in order; a node added later
// takes the zone it replaces.
var nodeZones = []string{"a", "b", "c"}

// start builds the network and starts PostgreSQL, the object store, the
// control plane, the nodes, Lorry and the router, each in its own namespace.
func (c *cluster) start(ctx context.Context) error {
	var err error
	hosts := []struct {
		name string
		dst  **host
	}{{"ctl", &c.ctlHost}, {"s3", &c.s3Host}, {"proc", &c.procHost}, {"rt", &c.rtHost}, {"cl", &c.clHost}}
	for _, x := range hosts {
		if *x.dst, err = c.net.add(x.name); err != nil {
			return err
		}
	}
	var nodeHosts []*host
	for i := range 4 { // n4 is the replacement of scenario 7
		h, err := c.net.add(fmt.Sprintf("n%d", i+1))
		if err != nil {
			return err
		}
		nodeHosts = append(nodeHosts, h)
	}
	if err := c.makeCerts(nodeHosts); err != nil {
		return err
	}
	if err := c.startPostgres(); err != nil {
		return err
	}
	if err := c.startS3(ctx); err != nil {
		return err
	}
	if err := c.startControl(); err != nil {
		return err
	}
	for i := range 3 {
		if _, err := c.addNode(nodeHosts[i], fmt.Sprintf("n%d", i+1), nodeZones[i]); err != nil {
			return err
		}
	}
	c.spare = nodeHosts[3]
	if c.store, err = local.Create(filepath.Join(c.dir, "store"), &local.Options{Partitions: c.o.Partitions, Logger: c.o.Logger}); err != nil {
		return err
	}
	if err := c.startLorry(); err != nil {
		return err
	}
	return c.startRouter()
}

func randomToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// makeCerts makes a CA and a certificate per component valid for every
// host's address, and a token per control-plane role (each node its own).
func (c *cluster) makeCerts(nodeHosts []*host) error {
	c.certs = filepath.Join(c.dir, "certs")
	var ips []string
	for _, h := range c.net.hosts {
		ips = append(ips, h.ip)
	}
	names := []string{"control", "router", "writer/lorry", "admin", "reader"}
	for i := range nodeHosts {
		names = append(names, fmt.Sprintf("node/n%d", i+1))
	}
	if _, err := tlsconf.DevCerts(c.certs, tlsconf.DevOptions{Names: names, Hosts: ips}); err != nil {
		return err
	}
	c.ca = filepath.Join(c.certs, "ca.pem")
	c.tokens = map[string]string{}
	var lines []string
	for _, who := range []string{"writer", "admin", "n1", "n2", "n3", "n4"} {
		tok := randomToken()
		f := filepath.Join(c.certs, who+".token")
		if err := os.WriteFile(f, []byte(tok+"\n"), 0o600); err != nil {
			return err
		}
		c.tokens[who] = f
		if who == "writer" || who == "admin" {
			lines = append(lines, who+" "+tok)
		} else {
			lines = append(lines, "node "+tok+" "+who)
		}
		if who == "admin" {
			c.adminToken = tok
		}
	}
	return os.WriteFile(filepath.Join(c.certs, "credentials"), []byte(strings.Join(lines, "\n")+"\n"), 0o600)
}

func (c *cluster) cert(name string) []string {
	return []string{"--tls-cert", filepath.Join(c.certs, name+".pem"), "--tls-key", filepath.Join(c.certs, name+".key")}
}

func (c *cluster) clientTLS(name string) (*tls.Config, error) {
	r, err := tlsconf.NewReloader(tlsconf.Files{CA: c.ca, Cert: filepath.Join(c.certs, name+".pem"), Key: filepath.Join(c.certs, name+".key")}, tlsconf.Options{})
	if err != nil {
		return nil, err
	}
	return r.ClientConfig(), nil
}

// pgBin finds PostgreSQL's server binaries (Debian keeps them off $PATH).
func pgBin(name string) (string, error) {
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		p := filepath.Join(strings.TrimSpace(string(out)), name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	ms, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	if len(ms) > 0 {
		return ms[len(ms)-1], nil
	}
	return "", fmt.Errorf("netns: PostgreSQL's %s not found (Debian package postgresql)", name)
}

// startPostgres makes a fresh PostgreSQL cluster in the run's folder
// (initdb as the postgres user) and starts it inside the control plane's
// namespace, listening on that host's address only.
func (c *cluster) startPostgres() error {
	initdb, err := pgBin("initdb")
	if err != nil {
		return err
	}
	postgres, err := pgBin("postgres")
	if err != nil {
		return err
	}
	// PostgreSQL's user must reach its folder: the run's folder may sit
	// under one only root can enter (a test's TempDir), so the data lives
	// in a folder of its own under the temporary directory, linked from
	// the run's folder and removed with the cluster.
	top, err := os.MkdirTemp("", "pillar-netns-pg-")
	if err != nil {
		return err
	}
	c.pgTop = top
	if err := os.Chmod(top, 0o755); err != nil {
		return err
	}
	data := filepath.Join(top, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		return err
	}
	_ = os.Symlink(data, filepath.Join(c.dir, "pg"))
	if err := sh("chown", "postgres:postgres", data); err != nil {
		return err
	}
	if err := sh("runuser", "-u", "postgres", "--", initdb, "-D", data, "-A", "trust", "-U", "postgres", "--no-sync"); err != nil {
		return fmt.Errorf("netns: initdb: %w", err)
	}
	// The cluster's own subnet may connect (trust: the test network's
	// PostgreSQL holds nothing but this run's control-plane state).
	hba, err := os.OpenFile(filepath.Join(data, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(hba, "host all all %s.0/24 trust\n", c.net.subnet)
	if cerr := hba.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	c.pg = c.proc("postgres", c.ctlHost, c.ctlHost.ip+":"+pgPort, nil, "runuser", "-u", "postgres", "--", postgres, "-D", data,
		"-c", "listen_addresses="+c.ctlHost.ip, "-p", pgPort, "-c", "unix_socket_directories="+data, "-c", "fsync=off",
		"-c", "max_connections=100")
	if err := c.pg.start(); err != nil {
		return err
	}
	return c.pg.waitListening(60 * time.Second)
}

func (c *cluster) startS3(ctx context.Context) error {
	bin := c.o.Versitygw
	if bin == "" {
		var err error
		if bin, err = s3test.Binary(); err != nil {
			return err
		}
	}
	data := filepath.Join(c.dir, "s3")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return err
	}
	c.s3srv = c.proc("versitygw", c.s3Host, c.s3Host.ip+":"+s3Port,
		[]string{"ROOT_ACCESS_KEY_ID=" + s3test.AccessKey, "ROOT_SECRET_ACCESS_KEY=" + s3test.SecretKey},
		bin, "--port", c.s3Host.ip+":"+s3Port, "--quiet", "posix", data)
	if err := c.s3srv.start(); err != nil {
		return err
	}
	if err := c.s3srv.waitListening(30 * time.Second); err != nil {
		return err
	}
	cl := s3.New(s3.Options{Region: s3test.Region, BaseEndpoint: aws.String(c.s3URL()), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(s3test.AccessKey, s3test.SecretKey, "")})
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		_, err := cl.CreateBucket(cctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
		if err == nil {
			return nil
		}
		if cctx.Err() != nil {
			return fmt.Errorf("netns: s3: create bucket: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (c *cluster) startControl() error {
	db := fmt.Sprintf("postgres://postgres@%s:%s/postgres?sslmode=disable", c.ctlHost.ip, pgPort)
	c.control = c.pillar("control", c.ctlHost, c.ctlAddr(), c.s3Env(), append([]string{"control", "serve", "--db", db,
		"--listen", c.ctlAddr(), "--http", c.ctlHost.ip + ":" + ctlHTTP, "--insecure",
		"--partitions", fmt.Sprint(c.o.Partitions), "--credentials-file", filepath.Join(c.certs, "credentials"),
		"--down-after", "3s", "--objstore", c.objURL(), "--gc-interval", "10s"}, c.cert("control")...)...)
	if err := c.control.start(); err != nil {
		return err
	}
	if err := c.control.waitListening(60 * time.Second); err != nil {
		return err
	}
	adminTLS, err := c.clientTLS("admin")
	if err != nil {
		return err
	}
	c.admin, err = control.Dial(c.ctlAddr(), &control.ClientOptions{TLS: adminTLS, Token: c.adminToken})
	return err
}

// addNode starts cobbled node id of zone on h, with a fresh data folder.
func (c *cluster) addNode(h *host, id, zone string) (*node, error) {
	n := &node{id: id, zone: zone, h: h, data: filepath.Join(c.dir, id)}
	n.p = c.pillar(id, h, n.addr(), c.s3Env(), append([]string{"cobbled", "serve", "--id", id, "--zone", zone,
		"--data", n.data, "--listen", n.addr(), "--http", n.httpAddr(), "--insecure",
		"--control", c.ctlAddr(), "--tls-ca", c.ca, "--token-file", c.tokens[id],
		"--tls-client-ca", c.ca, "--allow-identity", "pillar://router/*", "--allow-identity", "pillar://reader/*",
		"--objstore", c.objURL(), "--cache", "32MiB", "--partitions", fmt.Sprint(c.o.Partitions), "--drain", "1s"},
		c.cert("node-"+id)...)...)
	if err := n.p.start(); err != nil {
		return nil, err
	}
	if err := n.p.waitListening(90 * time.Second); err != nil {
		return nil, err
	}
	c.nodes = append(c.nodes, n)
	return n, nil
}

func (c *cluster) startLorry() error {
	tmp := filepath.Join(c.dir, "lorry-tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	c.lorry = c.pillar("lorry", c.procHost, "", c.s3Env(), "lorry", "run", "--store", filepath.Join(c.dir, "store"),
		"--objstore", c.objURL(), "--control", c.ctlAddr(), "--tls-ca", c.ca, "--token-file", c.tokens["writer"],
		"--id", "netns-lorry", "--max-batch-age", "200ms", "--lease-ttl", "5s", "--parallelism", "2", "--tmp", tmp)
	return c.lorry.start()
}

func (c *cluster) startRouter() error {
	c.router = c.pillar("router", c.rtHost, c.rtHost.ip+":"+routePort, nil, append([]string{"router", "serve",
		"--control", c.ctlAddr(), "--tls-ca", c.ca, "--listen", c.rtHost.ip + ":" + routePort,
		"--http", c.rtHost.ip + ":" + routeHTTP, "--insecure", "--zone", "a",
		"--tls-client-ca", c.ca, "--allow-identity", "pillar://reader/*"}, c.cert("router")...)...)
	if err := c.router.start(); err != nil {
		return err
	}
	if err := c.router.waitListening(60 * time.Second); err != nil {
		return err
	}
	var err error
	c.readerTLS, err = c.clientTLS("reader")
	return err
}

// dialServe opens a BatchGet client to addr from the client's host (zone
// a), over mutual TLS as the reader.
func (c *cluster) dialServe(addr string) (servepb.ServeClient, func(), error) {
	conn, err := grpc.NewClient(addr, append(servepb.DialOptions(0),
		grpc.WithTransportCredentials(grpccreds.NewTLS(c.readerTLS.Clone())),
		grpc.WithContextDialer(dialFrom(c.clHost.name)))...)
	if err != nil {
		return nil, nil, err
	}
	return servepb.NewServeClient(conn), func() { conn.Close() }, nil
}

// run runs a one-shot pillar command on the processing host and returns
// its output.
func (c *cluster) run(ctx context.Context, timeout time.Duration, args ...string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, "ip", append([]string{"netns", "exec", c.procHost.name, c.o.Pillar}, args...)...)
	cmd.Env = append(os.Environ(), c.s3Env()...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("pillar %s: %v\n%s", strings.Join(args[:min(2, len(args))], " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

func (c *cluster) adminFlags() []string {
	return []string{"--control", c.ctlAddr(), "--tls-ca", c.ca, "--token-file", c.tokens["admin"]}
}

// scrape reads one Prometheus text exposition over the bridge.
func scrape(ctx context.Context, url string) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String(), nil
}

// stop kills every process (PostgreSQL last) and closes clients.
func (c *cluster) stop() {
	if c.admin != nil {
		c.admin.Close()
	}
	for _, p := range []*proc{c.router, c.lorry} {
		if p != nil {
			p.kill()
		}
	}
	for _, n := range c.nodes {
		n.p.kill()
	}
	for _, p := range []*proc{c.control, c.s3srv, c.pg} {
		if p != nil {
			p.kill()
		}
	}
	if c.store != nil {
		c.store.Close()
	}
	if c.pgTop != "" && !c.o.Keep {
		os.RemoveAll(c.pgTop)
	}
}
