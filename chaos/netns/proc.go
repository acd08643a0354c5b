package netns

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// proc is one component process, started inside a namespace with `ip netns
// exec` in a process group of its own (so SIGKILL reaches everything it
// started) and restartable with the same command.
type proc struct {
	name string
	ns   string // namespace; "" runs in the harness's own
	argv []string
	env  []string
	log  string
	addr string // what it listens on, waited for after a start ("" none)

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
	held    bool // down on purpose: the supervisor leaves it down
	crashes int  // exits nobody asked for (restarted by the supervisor)
}

// hold marks the process down on purpose (true) or back in service.
func (p *proc) hold(v bool) {
	p.mu.Lock()
	p.held = v
	p.mu.Unlock()
}

// reap reports whether the process exited without being held, counting it.
func (p *proc) reap() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.held || !closed(p.done) {
		return false
	}
	p.crashes++
	return true
}

func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !closed(p.done) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p.log), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "\n=== netns: start %s at %s\n", p.name, time.Now().UTC().Format(time.RFC3339Nano))
	argv := p.argv
	if p.ns != "" {
		argv = append([]string{"ip", "netns", "exec", p.ns}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("netns: start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
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

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !closed(p.done)
}

// signal sends sig to the process group and, for SIGKILL and SIGTERM, waits
// for the exit (SIGKILL after 10 s of SIGTERM).
func (p *proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || closed(done) {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	if sig != syscall.SIGKILL && sig != syscall.SIGTERM {
		return
	}
	select {
	case <-done:
		return
	case <-time.After(10 * time.Second):
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
	}
}

func (p *proc) kill() { p.signal(syscall.SIGKILL) }

// waitListening waits until addr accepts a TCP connection from the harness
// (over the bridge), the process exits, or timeout passes.
func (p *proc) waitListening(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		done := p.done
		p.mu.Unlock()
		if done != nil && closed(done) {
			b, _ := os.ReadFile(p.log)
			s := string(b)
			if len(s) > 3000 {
				s = "…" + s[len(s)-3000:]
			}
			return fmt.Errorf("netns: %s exited: %v\n%s", p.name, p.err, s)
		}
		c, err := net.DialTimeout("tcp", p.addr, 300*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("netns: %s did not listen on %s within %s (log: %s)", p.name, p.addr, timeout, p.log)
}
