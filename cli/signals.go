package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// Stopping on SIGINT and SIGTERM.
//
// The first signal cancels the root context: every command passes it down,
// stops at its next check, aborts its open transaction (nothing half-done is
// committed: a store commit is atomic) and exits. A command that is still
// running stopGrace after the signal (stuck in a call that does not watch
// the context) is ended by exiting the process; a second signal ends it at
// once. Exiting is safe for everything a command writes: the embedded store,
// RocksDB, SQLite and PostgreSQL keep their state as before or after a commit
// across a crash, and child processes (demo, chaos) die with the parent
// (Pdeathsig). Servers that drain in-flight requests (cobbled, router,
// control) extend the grace by their drain time with allowStop.
//
// The exit status after a signal is 128 + the signal number (130 for
// SIGINT, 143 for SIGTERM), unless the command returned nil (a server that
// stopped cleanly exits 0).

// stopGrace is how long a command may take to stop after the first signal.
const stopGrace = 2 * time.Second

// stopper turns signals into a canceled context, then into an exit.
type stopper struct {
	sigs  <-chan os.Signal
	grace time.Duration
	after func(time.Duration) <-chan time.Time // the clock
	exit  func(code int)
	log   io.Writer

	mu     sync.Mutex
	extra  time.Duration // allowStop
	got    os.Signal
	cancel context.CancelFunc
}

var (
	rootStopperMu sync.Mutex
	rootStopper   *stopper
)

// signalContext returns the root context of the process: canceled on the
// first SIGINT or SIGTERM, with the process ended stopGrace (plus
// allowStop) later or at a second signal.
func signalContext() (context.Context, func()) {
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	s := &stopper{sigs: ch, grace: stopGrace, after: time.After, exit: os.Exit, log: os.Stderr}
	rootStopperMu.Lock()
	rootStopper = s
	rootStopperMu.Unlock()
	ctx, stop := s.start(context.Background())
	return ctx, func() { signal.Stop(ch); stop() }
}

// allowStop lets the running command take d longer than stopGrace to stop
// after a signal (a server's drain time). It does nothing outside main.
func allowStop(d time.Duration) {
	rootStopperMu.Lock()
	s := rootStopper
	rootStopperMu.Unlock()
	if s != nil {
		s.mu.Lock()
		s.extra = max(s.extra, d)
		s.mu.Unlock()
	}
}

// interrupted returns the signal that canceled the root context, if any.
func interrupted() os.Signal {
	rootStopperMu.Lock()
	s := rootStopper
	rootStopperMu.Unlock()
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got
}

func (s *stopper) start(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	s.cancel = cancel
	done := make(chan struct{})
	go s.watch(done)
	var once sync.Once
	return ctx, func() { once.Do(func() { close(done); cancel() }) }
}

func (s *stopper) watch(done <-chan struct{}) {
	var sig os.Signal
	select {
	case sig = <-s.sigs:
	case <-done:
		return
	}
	s.mu.Lock()
	s.got = sig
	grace := s.grace + s.extra
	s.mu.Unlock()
	fmt.Fprintf(s.log, "pillar: %s: stopping (a second signal exits at once)\n", sig)
	s.cancel()
	select {
	case <-done:
	case again := <-s.sigs:
		fmt.Fprintf(s.log, "pillar: %s again: exiting now\n", again)
		s.exit(exitCode(sig))
	case <-s.after(grace):
		fmt.Fprintf(s.log, "pillar: still running %s after %s: exiting (committed state is kept)\n", grace, sig)
		s.exit(exitCode(sig))
	}
}

// exitCode is the shell convention for death by a signal: 128 + signo.
func exitCode(sig os.Signal) int {
	if n, ok := sig.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 1
}

// surviveHangup keeps a server running on SIGHUP: the servers reload
// their certificates and credentials on it (tlsconf.Reloader.Watch,
// watchCredentials), and `systemctl reload` sends it even to one that has
// nothing to reload, where Go's default action would end the process.
func surviveHangup() {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
		}
	}()
}
