package testcluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pillarkit/pillar/cobbled"
)

// NodeConfig is what a node process (Options.Exec) needs to open and serve
// one member's directory: the loading process has applied its batches.
type NodeConfig struct {
	ID, Zone string
	// Dir is the node's data directory; Objects the batch directory.
	Dir, Objects string
	// Listen is the address to serve on ("127.0.0.1:0": a fresh port).
	Listen     string
	Partitions int
	CacheBytes int64
	// Fault is cobbled's test-only fault delay (the zero value: none).
	Fault cobbled.FaultDelay
}

// Args are the flags of pillar bench read-node for c.
func (c NodeConfig) Args() []string {
	a := []string{"--id", c.ID, "--zone", c.Zone, "--data", c.Dir, "--batch-dir", c.Objects, "--listen", c.Listen,
		"--partitions", strconv.Itoa(c.Partitions), "--cache", strconv.FormatInt(c.CacheBytes, 10)}
	if c.Fault.Fraction > 0 {
		a = append(a, "--fault-slow", fmt.Sprintf("%g:%v", c.Fault.Fraction, c.Fault.Delay))
	}
	return a
}

// readyPrefix starts the line a node process prints once it serves.
const readyPrefix = "serving "

// ServeNodeProcess is a node process's body (pillar bench read-node): it
// opens cfg's node, serves gRPC and the wire protocol on cfg.Listen,
// prints "serving ADDR" on stdout, and serves until ctx ends or stdin
// reaches its end (the parent closed it or died: no orphan outlives a
// benchmark), then stops the server and closes the node.
func ServeNodeProcess(ctx context.Context, cfg NodeConfig, stdin io.Reader, stdout io.Writer, log *slog.Logger) error {
	if cfg.Dir == "" || cfg.Objects == "" || cfg.ID == "" {
		return errors.New("cluster: a node process needs --id, --data and --batch-dir")
	}
	if cfg.Partitions <= 0 {
		return fmt.Errorf("cluster: node process %s: --partitions %d: must be positive", cfg.ID, cfg.Partitions)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n, err := cobbled.Open(ctx, cobbled.Options{ID: cfg.ID, Zone: cfg.Zone, Dir: cfg.Dir, Partitions: cfg.Partitions,
		CacheBytes: cfg.CacheBytes, Objects: dirObjects{cfg.Objects}, FaultDelay: cfg.Fault, Metrics: cobbled.NewMetrics(), Logger: log})
	if err != nil {
		return fmt.Errorf("cluster: node process %s: open: %w", cfg.ID, err)
	}
	defer n.Close()
	lis, err := listenRetry(cfg.Listen)
	if err != nil {
		return fmt.Errorf("cluster: node process %s: %w", cfg.ID, err)
	}
	srv := n.NewGRPCServer()
	served := make(chan error, 1)
	go func() { served <- n.Serve(lis, srv) }()
	defer srv.Stop()
	if err := ServeUntilParentGone(ctx, lis.Addr().String(), stdin, stdout, served); err != nil {
		return fmt.Errorf("cluster: node process %s: %w", cfg.ID, err)
	}
	return nil
}

// ServeUntilParentGone is the rest of a child server process's life once
// it serves on addr: it prints "serving ADDR" on stdout (StartProcess
// waits for that line) and returns when ctx ends or stdin reaches its end
// (the parent closed it or died: no orphan outlives a benchmark), or with
// the error of served (the server's Serve) if that ends first.
func ServeUntilParentGone(ctx context.Context, addr string, stdin io.Reader, stdout io.Writer, served <-chan error) error {
	if _, err := fmt.Fprintf(stdout, "%s%s\n", readyPrefix, addr); err != nil {
		return err
	}
	eof := make(chan struct{})
	go func() { io.Copy(io.Discard, stdin); close(eof) }()
	select {
	case <-ctx.Done():
	case <-eof:
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// listenRetry listens on addr, retrying for up to a second: a port just
// closed by a killed process may linger briefly.
func listenRetry(addr string) (net.Listener, error) {
	var lis net.Listener
	var err error
	for try := 0; ; try++ {
		if lis, err = net.Listen("tcp", addr); err == nil || try == 50 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	return lis, nil
}

// Process is a running child server process (StartProcess).
type Process struct {
	// Addr is the address it serves on.
	Addr  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{} // closed when the process has exited
}

// StartProcess runs argv (a program that ends in ServeUntilParentGone)
// with this process's environment plus env (KEY=VALUE) and stderr to this
// process's, and waits, up to a minute, until it serves. what names it in
// errors.
func StartProcess(ctx context.Context, what string, argv, env []string) (*Process, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("cluster: %s: %w", what, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("cluster: %s: %w", what, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("cluster: start %s's process (%s): %w", what, argv[0], err)
	}
	p := &Process{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		first := true
		for sc.Scan() {
			if first {
				lines <- sc.Text()
				first = false
			}
		}
		cmd.Wait()
		close(p.done)
		if first {
			close(lines)
		}
	}()
	wait := time.NewTimer(time.Minute)
	defer wait.Stop()
	select {
	case line, ok := <-lines:
		addr, found := strings.CutPrefix(line, readyPrefix)
		if !ok || !found {
			p.Kill()
			return nil, fmt.Errorf("cluster: %s's process exited before serving (%v; its stderr above)", what, cmd.ProcessState)
		}
		p.Addr = addr
	case <-wait.C:
		p.Kill()
		return nil, fmt.Errorf("cluster: %s's process did not serve within a minute", what)
	case <-ctx.Done():
		p.Kill()
		return nil, ctx.Err()
	}
	return p, nil
}

// Kill kills the process (SIGKILL: a crash, as a killed node) and waits
// for it to exit.
func (p *Process) Kill() {
	p.cmd.Process.Kill()
	p.stdin.Close()
	<-p.done
}

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop closes the process's stdin, which ends a ServeUntilParentGone
// process cleanly (its server stopped, its databases closed), and waits up
// to grace for it to exit before killing it. It reports whether the
// process exited on its own.
func (p *Process) Stop(grace time.Duration) bool {
	p.stdin.Close()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		p.Kill()
		return false
	}
}

// spawn starts m's node process on addr ("" = a fresh port) and waits until
// it serves. m.mu is held or m is not yet shared.
func (m *Member) spawn(ctx context.Context, addr string, fault cobbled.FaultDelay) error {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	cfg := NodeConfig{ID: m.ID, Zone: m.Zone, Dir: m.dir, Objects: m.c.objects, Listen: addr, Partitions: m.c.opts.Partitions,
		CacheBytes: m.c.opts.CacheBytes, Fault: fault}
	p, err := StartProcess(ctx, m.ID, append(slices.Clone(m.c.opts.Exec), cfg.Args()...), m.c.opts.Env)
	if err != nil {
		return err
	}
	if m.Addr == "" {
		m.Addr = p.Addr // first start only: GetRouting reads it without m.mu
	}
	m.proc, m.up = p, true
	return nil
}
