package demo

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/internal/freeport"
	"github.com/pillarkit/pillar/internal/tlsconf"
)

// proc is a child process of the demo.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// cluster is the serving side of the demo: a control plane and three cobbled
// nodes, each a child process of the pillar binary on 127.0.0.1.
type cluster struct {
	bin     string
	dir     string
	mu      sync.Mutex
	procs   []*proc
	control string // gRPC address
	nodes   []nodeInfo
	// client is the admin's control client (promote, rollback, routing);
	// writer the SST builder's and Lorry's (register batches and
	// publications only).
	client, writer *control.Client
	// nodeTLS is the routers' client configuration toward the nodes: the
	// demo CA and the router's certificate (the nodes serve only it).
	nodeTLS *tls.Config
	// adminFlags are the CLI flags of an admin command against this
	// control plane: the CA and the admin token file.
	adminFlags []string
}

type nodeInfo struct {
	id, zone, addr, http string
	proc                 *proc
}

// startListening starts a server child on two free ports (its listen and
// its --http address) and waits until it accepts connections. A port picked
// by freePort can be taken by another process before the child binds it
// (tests run demos side by side); a child that exits saying so is started
// again on new ports, a few times.
func (c *cluster) startListening(ctx context.Context, name string, args func(addr, http string) []string) (p *proc, addr, http string, err error) {
	const attempts = 5
	for i := 0; ; i++ {
		if addr, err = freePort(); err != nil {
			return nil, "", "", err
		}
		if http, err = freePort(); err != nil {
			return nil, "", "", err
		}
		logged := logSize(filepath.Join(c.dir, "logs", name+".log"))
		if p, err = c.start(name, args(addr, http)...); err != nil {
			return nil, "", "", err
		}
		err = waitTCP(ctx, addr, p)
		if err == nil {
			return p, addr, http, nil
		}
		if i+1 == attempts || !exitedOnTakenPort(p, logged) {
			return nil, "", "", err
		}
	}
}

// exitedOnTakenPort reports whether p has exited and what it logged after
// offset says its address was already in use.
func exitedOnTakenPort(p *proc, offset int64) bool {
	select {
	case <-p.done:
	default:
		return false
	}
	b, err := os.ReadFile(p.log)
	if err != nil || int64(len(b)) < offset {
		return false
	}
	return strings.Contains(string(b[offset:]), "address already in use")
}

func logSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// freePort returns an address outside the ephemeral port range (see
// internal/freeport): a child process binds it a while later.
func freePort() (string, error) { return freeport.Addr() }

func (c *cluster) start(name string, args ...string) (*proc, error) {
	logPath := filepath.Join(c.dir, "logs", name+".log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(c.bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("demo: start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p, nil
}

// stop ends every child: SIGTERM, then SIGKILL after a grace period.
func (c *cluster) stop() {
	if c.client != nil {
		c.client.Close()
	}
	if c.writer != nil {
		c.writer.Close()
	}
	c.mu.Lock()
	procs := append([]*proc(nil), c.procs...)
	c.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		p := procs[i]
		select {
		case <-p.done:
			continue
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	}
}

func waitTCP(ctx context.Context, addr string, p *proc) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			b, _ := os.ReadFile(p.log)
			return fmt.Errorf("demo: %s exited: %v\n%s", p.name, p.err, tail(string(b), 2000))
		default:
		}
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("demo: %s did not listen on %s within 30s (log: %s)", p.name, addr, p.log)
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// randomToken is a fresh 32-byte bearer token, hex.
func randomToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// startCluster starts the control plane (SQLite) and three nodes in zones
// a, b, c, all reading batches from objects.
func startCluster(ctx context.Context, bin, dir, objects string, partitions int) (*cluster, error) {
	c := &cluster{bin: bin, dir: dir}
	ok := false
	defer func() {
		if !ok {
			c.stop()
		}
	}()
	// Every hop on mutual TLS, with certificates from a local CA
	// (tlsconf.DevCerts, as `pillar dev certs` makes them) and per-role
	// control-plane credentials: each node a token bound to its own id, the
	// writer and the admin one each.
	certs := filepath.Join(dir, "certs")
	if err := os.RemoveAll(certs); err != nil {
		return nil, err
	}
	if _, err := tlsconf.DevCerts(certs, tlsconf.DevOptions{}); err != nil {
		return nil, err
	}
	cert := func(name string) []string {
		return []string{"--tls-cert", filepath.Join(certs, name+".pem"), "--tls-key", filepath.Join(certs, name+".key")}
	}
	ca := filepath.Join(certs, "ca.pem")
	tokens := map[string]string{}
	var credLines []string
	for _, who := range []string{"n1", "n2", "n3", "writer", "admin"} {
		tok := randomToken()
		tokens[who] = tok
		if err := os.WriteFile(filepath.Join(certs, who+".token"), []byte(tok+"\n"), 0o600); err != nil {
			return nil, err
		}
		switch who {
		case "writer", "admin":
			credLines = append(credLines, who+" "+tok)
		default:
			credLines = append(credLines, "node "+tok+" "+who)
		}
	}
	credFile := filepath.Join(certs, "credentials")
	if err := os.WriteFile(credFile, []byte(strings.Join(credLines, "\n")+"\n"), 0o600); err != nil {
		return nil, err
	}
	_, grpcAddr, _, err := c.startListening(ctx, "control", func(addr, http string) []string {
		return append([]string{"control", "serve", "--db", "sqlite:" + filepath.Join(dir, "control.db"),
			"--listen", addr, "--http", http, "--partitions", fmt.Sprint(partitions),
			"--credentials-file", credFile, "--tls-client-ca", ca,
			"--objstore", objects}, cert("control")...)
	})
	if err != nil {
		return nil, err
	}
	c.control = grpcAddr
	c.adminFlags = []string{"--tls-ca", ca, "--token-file", filepath.Join(certs, "admin.token")}
	clientTLS := func(name string) (*tls.Config, error) {
		r, err := tlsconf.NewReloader(tlsconf.Files{CA: ca, Cert: filepath.Join(certs, name+".pem"), Key: filepath.Join(certs, name+".key")}, tlsconf.Options{})
		if err != nil {
			return nil, err
		}
		return r.ClientConfig(), nil
	}
	adminTLS, err := clientTLS("admin")
	if err != nil {
		return nil, err
	}
	if c.client, err = control.Dial(grpcAddr, &control.ClientOptions{TLS: adminTLS, Token: tokens["admin"]}); err != nil {
		return nil, err
	}
	writerTLS, err := clientTLS("writer-lorry")
	if err != nil {
		return nil, err
	}
	if c.writer, err = control.Dial(grpcAddr, &control.ClientOptions{TLS: writerTLS, Token: tokens["writer"]}); err != nil {
		return nil, err
	}
	if c.nodeTLS, err = clientTLS("router"); err != nil {
		return nil, err
	}
	for i, zone := range []string{"a", "b", "c"} {
		id := fmt.Sprintf("n%d", i+1)
		p, addr, hp, err := c.startListening(ctx, id, func(addr, http string) []string {
			return append([]string{"cobbled", "serve", "--id", id, "--zone", zone, "--data", filepath.Join(dir, id),
				"--listen", addr, "--http", http, "--control", grpcAddr, "--objstore", objects, "--cache", "256MiB",
				"--partitions", fmt.Sprint(partitions),
				"--tls-ca", ca, "--token-file", filepath.Join(certs, id+".token"),
				"--tls-client-ca", ca, "--allow-identity", "pillar://router/*", "--allow-identity", "pillar://reader/*"},
				cert("node-"+id)...)
		})
		if err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, nodeInfo{id: id, zone: zone, addr: addr, http: hp, proc: p})
	}
	ok = true
	return c, nil
}

// converged reports whether every replica of every partition has applied
// its partition's newest batch, and the total batches behind.
func (c *cluster) converged(ctx context.Context) (bool, int64, error) {
	r, err := c.client.GetRouting(ctx)
	if err != nil {
		return false, 0, err
	}
	var behind int64
	ok := true
	for p, reps := range r.Replicas {
		if len(reps) < min(3, len(c.nodes)) {
			ok = false
		}
		for _, rep := range reps {
			if rep.AppliedSeq < r.NewestSeq[p] {
				ok = false
				behind += r.NewestSeq[p] - rep.AppliedSeq
			}
		}
	}
	return ok, behind, nil
}

// waitConverged polls until every replica caught up.
func (c *cluster) waitConverged(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		ok, behind, err := c.converged(ctx)
		if err == nil && ok {
			return time.Since(start), nil
		}
		if time.Since(start) > timeout {
			return 0, fmt.Errorf("demo: replicas did not converge within %s (%d batches behind, last error %v)", timeout, behind, err)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
