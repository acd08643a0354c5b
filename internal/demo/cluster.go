package demo

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/pillarkit/pillar/cobbled/control"
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
	client  *control.Client
}

type nodeInfo struct {
	id, zone, addr, http string
	proc                 *proc
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

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
	grpcAddr, err := freePort()
	if err != nil {
		return nil, err
	}
	httpAddr, err := freePort()
	if err != nil {
		return nil, err
	}
	p, err := c.start("control", "control", "serve", "--db", "sqlite:"+filepath.Join(dir, "control.db"),
		"--listen", grpcAddr, "--http", httpAddr, "--partitions", fmt.Sprint(partitions), "--no-auth",
		"--objstore", objects)
	if err != nil {
		return nil, err
	}
	if err := waitTCP(ctx, grpcAddr, p); err != nil {
		return nil, err
	}
	c.control = grpcAddr
	c.client, err = control.Dial(grpcAddr, nil)
	if err != nil {
		return nil, err
	}
	for i, zone := range []string{"a", "b", "c"} {
		addr, err := freePort()
		if err != nil {
			return nil, err
		}
		hp, err := freePort()
		if err != nil {
			return nil, err
		}
		id := fmt.Sprintf("n%d", i+1)
		p, err := c.start(id, "cobbled", "serve", "--id", id, "--zone", zone, "--data", filepath.Join(dir, id),
			"--listen", addr, "--http", hp, "--control", grpcAddr, "--objstore", objects, "--cache", "256MiB",
			"--partitions", fmt.Sprint(partitions))
		if err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, nodeInfo{id: id, zone: zone, addr: addr, http: hp, proc: p})
	}
	for _, n := range c.nodes {
		if err := waitTCP(ctx, n.addr, n.proc); err != nil {
			return nil, err
		}
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
