package cli

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/local"
)

// TestCLIChild is not a test: it is the pillar binary when a test re-runs
// the test binary as a child process (PILLAR_CLI_CHILD_ARGS holds the
// arguments, separated by newlines), so that a test can send it real
// signals.
//
// With PILLAR_CLI_CHILD_ARGV=1 the arguments are the command line's after
// "--" instead (os.Args[0] -test.run=^TestCLIChild$ -- ARGS…): a command
// that runs pillar itself with arguments of its own (bench read's node
// processes, --node-exec) runs the test binary that way.
func TestCLIChild(t *testing.T) {
	args := os.Getenv("PILLAR_CLI_CHILD_ARGS")
	if os.Getenv("PILLAR_CLI_CHILD_ARGV") == "1" {
		os.Args = append([]string{"pillar"}, flag.Args()...)
		Main()
		return
	}
	if args == "" {
		t.Skip("only runs as a child process of another test")
	}
	os.Args = append([]string{"pillar"}, strings.Split(args, "\n")...)
	Main()
}

// startCLI starts the pillar CLI as a child process.
func startCLI(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer, <-chan error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCLIChild$")
	cmd.Env = append(os.Environ(), "PILLAR_CLI_CHILD_ARGS="+strings.Join(args, "\n"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, &out, done
}

func writeCorpus(t *testing.T, dir string, n int, tag string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	body := strings.Repeat("<p>words of the page, repeated to make it a page of some size.</p>\n", 30)
	for i := 0; i < n; i++ {
		page := fmt.Sprintf("<html><head><title>page %d %s</title></head><body><h1>%d</h1>%s</body></html>", i, tag, i, body)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("p%05d.html", i)), []byte(page), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func docsState(t *testing.T, dir string) (gen int64, rows int64) {
	t.Helper()
	st, err := local.Open(dir, nil) // Open runs cleanup: a dead transaction's staging goes
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sn, err := st.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	ti, err := sn.Table(context.Background(), pillar.TableDocs)
	if err != nil {
		t.Fatal(err)
	}
	return sn.Info().Generation, ti.Rows
}

// TestSIGTERMMidIngest: a pillar ingest that gets SIGTERM while it runs
// ends within two seconds, and the store is as it was before (the first
// ingest's pages) or after (every page of the second), never in between,
// with no staging left behind.
func TestSIGTERMMidIngest(t *testing.T) {
	root := t.TempDir()
	store := filepath.Join(root, "store")
	writeCorpus(t, filepath.Join(root, "a"), 20, "a")
	if _, err := runControlCLI(t, context.Background(), "ingest", "--store", store, "--from", filepath.Join(root, "a"), "--partitions", "4"); err != nil {
		t.Fatal(err)
	}
	gen0, rows0 := docsState(t, store)
	// Big enough that an idle machine does not finish it in the time the
	// child takes to start and open its transaction.
	const big = 12000
	writeCorpus(t, filepath.Join(root, "b"), big, "b")

	cmd, out, done := startCLI(t, "ingest", "--store", store, "--from", filepath.Join(root, "b"), "--workers", "1")
	// Signal once the ingest is under way: its transaction's staging exists
	// (or, at the latest, after 300 ms).
	for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if ents, _ := os.ReadDir(filepath.Join(store, "tx")); len(ents) > 0 {
			break
		}
	}
	select {
	case err := <-done:
		t.Fatalf("ingest of %d pages finished before the signal (%v); the test needs a bigger corpus\n%s", big, err, out)
	default:
	}
	sent := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("ingest still running 5 s after SIGTERM\n%s", out)
	}
	took := time.Since(sent)
	if took > 2500*time.Millisecond {
		t.Fatalf("ingest took %s to stop after SIGTERM, want at most about 2 s\n%s", took, out)
	}
	code := cmd.ProcessState.ExitCode()
	gen, rows := docsState(t, store)
	switch {
	case gen == gen0 && rows == rows0:
		if code != 128+int(syscall.SIGTERM) || !strings.Contains(out.String(), "stopping") {
			t.Fatalf("interrupted ingest: exit %d (%v), want %d and a message\n%s", code, err, 128+int(syscall.SIGTERM), out)
		}
		t.Logf("stopped in %s before committing (exit %d)", took, code)
	case gen > gen0 && rows == rows0+big:
		t.Logf("stopped in %s after committing (exit %d)", took, code)
	default:
		t.Fatalf("store after SIGTERM: generation %d with %d docs; before it was %d with %d, after it would be %d docs",
			gen, rows, gen0, rows0, rows0+big)
	}
	if ents, _ := os.ReadDir(filepath.Join(store, "tx")); len(ents) != 0 {
		t.Fatalf("staging left after reopening: %d", len(ents))
	}
}

// The stopper: the first signal cancels the context; the process exits
// after the grace (plus allowStop) if the command has not returned, or at
// once on a second signal. A fake clock stands in for the grace timer.
func TestStopperGraceAndSecondSignal(t *testing.T) {
	for _, second := range []bool{false, true} {
		sigs := make(chan os.Signal, 2)
		timer := make(chan time.Time, 1)
		var asked time.Duration
		exited := make(chan int, 1)
		s := &stopper{sigs: sigs, grace: 2 * time.Second, extra: 3 * time.Second, log: &bytes.Buffer{},
			after: func(d time.Duration) <-chan time.Time { asked = d; return timer },
			exit:  func(code int) { exited <- code }}
		ctx, stop := s.start(context.Background())
		sigs <- syscall.SIGTERM
		<-ctx.Done()
		if second {
			sigs <- syscall.SIGINT
		} else {
			timer <- time.Time{}
		}
		if code := <-exited; code != 143 {
			t.Fatalf("second=%v: exit code %d, want 143 (SIGTERM)", second, code)
		}
		if !second && asked != 5*time.Second {
			t.Fatalf("grace asked of the clock: %s, want 5s (2s + allowStop 3s)", asked)
		}
		stop()
	}
	// A command that returns in time is not exited.
	sigs := make(chan os.Signal, 1)
	timer := make(chan time.Time)
	s := &stopper{sigs: sigs, grace: time.Second, log: &bytes.Buffer{},
		after: func(time.Duration) <-chan time.Time { return timer },
		exit:  func(code int) { t.Errorf("exited %d although the command returned", code) }}
	ctx, stop := s.start(context.Background())
	sigs <- os.Interrupt
	<-ctx.Done()
	stop()
	time.Sleep(10 * time.Millisecond)
}

// A server (the control plane on SQLite) stops on SIGTERM within two
// seconds and exits 0: stopping is its normal end.
func TestSIGTERMControlServe(t *testing.T) {
	addr := freeAddr(t)
	db := "sqlite:" + filepath.Join(t.TempDir(), "control.db")
	cmd, out, done := startCLI(t, "control", "serve", "--db", db, "--listen", addr, "--partitions", "4", "--no-auth")
	deadline := time.Now().Add(20 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			c.Close()
			break
		}
		select {
		case err := <-done:
			t.Fatalf("control serve exited early: %v\n%s", err, out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("control serve not listening on %s after 20 s\n%s", addr, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	sent := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if took := time.Since(sent); took > 2500*time.Millisecond || err != nil {
			t.Fatalf("control serve after SIGTERM: %v after %s, want exit 0 within about 2 s\n%s", err, took, out)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("control serve still running 10 s after SIGTERM\n%s", out)
	}
}
