package chaos

import (
	"fmt"
	"github.com/pillarkit/pillar/internal/freeport"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// proc is one child process (a pillar subcommand) that the harness starts,
// kills with SIGKILL and restarts with the same arguments. Its process runs
// in its own process group, so a kill reaches its children too.
type proc struct {
	name string
	bin  string
	args []string
	env  []string
	log  string
	addr string // address it listens on (waited for after a start)

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	err      error
	held     bool // down on purpose (a fault): the supervisor leaves it down
	starts   int
	crashes  int // exits nobody asked for
	lastExit string
}

func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !isDone(p.done) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p.log), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "\n=== chaos: start %s at %s\n", p.name, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("chaos: start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.held = cmd, done, false
	p.starts++
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func isDone(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// running reports whether the process is alive.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !isDone(p.done)
}

// kill sends SIGKILL to the process group and waits for the exit. hold keeps
// the supervisor from restarting it.
func (p *proc) kill(hold bool) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	if hold {
		p.held = true
	}
	p.mu.Unlock()
	if cmd == nil || isDone(done) {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
	}
}

// stop ends the process gently (SIGTERM, then SIGKILL after grace).
func (p *proc) stop(grace time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.held = true
	p.mu.Unlock()
	if cmd == nil || isDone(done) {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
		}
	}
}

// reap notes an unexpected exit and reports whether the supervisor should
// restart the process.
func (p *proc) reap() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.held || !isDone(p.done) {
		return false
	}
	p.crashes++
	if p.err != nil {
		p.lastExit = p.err.Error()
	} else {
		p.lastExit = "exit 0"
	}
	return true
}

// waitListening waits until addr accepts connections, the process exits,
// or timeout passes.
func (p *proc) waitListening(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		done := p.done
		p.mu.Unlock()
		if done != nil && isDone(done) {
			b, _ := os.ReadFile(p.log)
			return fmt.Errorf("chaos: %s exited: %v\n%s", p.name, p.err, tail(string(b), 3000))
		}
		c, err := net.DialTimeout("tcp", p.addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("chaos: %s did not listen on %s within %s (log: %s)", p.name, p.addr, timeout, p.log)
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// freePort returns an address outside the ephemeral port range (see
// internal/freeport): a child process binds it a while later.
func freePort() (string, error) { return freeport.Addr() }
