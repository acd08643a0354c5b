package readbench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pillarkit/pillar/cobbled"
	"github.com/pillarkit/pillar/internal/testcluster"
)

// childEnv makes this test binary act as pillar bench read-node (the node
// and bare-floor processes of Options.NodeExec), so the tests run real
// processes without the pillar binary.
const childEnv = "PILLAR_READBENCH_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		if err := runChild(os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "read-node (test child):", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runChild parses read-node's flags (testcluster.NodeConfig.Args,
// BareConfig.Args) and serves.
func runChild(args []string) error {
	fs := flag.NewFlagSet("read-node", flag.ContinueOnError)
	id, zone, data, objects := fs.String("id", "", ""), fs.String("zone", "", ""), fs.String("data", "", ""), fs.String("batch-dir", "", "")
	listen, cache, fault := fs.String("listen", "127.0.0.1:0", ""), fs.Int64("cache", 8<<20, ""), fs.String("fault-slow", "", "")
	parts, bare := fs.Int("partitions", 0, ""), fs.Bool("bare", false, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx := context.Background()
	if *bare {
		return ServeBareProcess(ctx, BareConfig{Dir: *data, Partitions: *parts, CacheBytes: *cache, Listen: *listen}, os.Stdin, os.Stdout)
	}
	var fd cobbled.FaultDelay
	if f, d, ok := strings.Cut(*fault, ":"); ok {
		var err error
		if fd.Fraction, err = strconv.ParseFloat(f, 64); err != nil {
			return err
		}
		if fd.Delay, err = time.ParseDuration(d); err != nil {
			return err
		}
	}
	return testcluster.ServeNodeProcess(ctx, testcluster.NodeConfig{ID: *id, Zone: *zone, Dir: *data, Objects: *objects, Listen: *listen,
		Partitions: *parts, CacheBytes: *cache, Fault: fd}, os.Stdin, os.Stdout, nil)
}

// children lists this process's child processes (from /proc), zombies
// included.
func children(t *testing.T) []string {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid ...
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(s[i+1:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(os.Getpid()) {
			out = append(out, strings.TrimSpace(s[:i+1])+" "+fields[0])
		}
	}
	return out
}

// The benchmark with its nodes and bare floor in processes of their own:
// the slow scenario's restart with a fault and the kill scenario's SIGKILL
// reach the processes (the fault shows in the unhedged p99, the kill in
// failovers or in requests served after it), and no process outlives Run.
func TestRunNodeProcesses(t *testing.T) {
	t.Setenv(childEnv, "1")
	if c := children(t); len(c) > 0 {
		t.Fatalf("child processes before the run: %v", c)
	}
	rep, err := Run(context.Background(), Options{Dir: t.TempDir(), Duration: 800 * time.Millisecond, Warmup: 200 * time.Millisecond,
		Clients: 2, Keys: 240, Partitions: 8, MaxValue: 8 << 10, DownAfter: 200 * time.Millisecond, Interleave: true,
		Scenarios: []string{Healthy, Redis, SlowNoHedge, Kill}, SlowFraction: 0.3, Deadline: time.Minute,
		NodeExec: []string{os.Args[0]}})
	if err != nil {
		t.Fatal(err)
	}
	if c := children(t); len(c) > 0 {
		t.Errorf("child processes after the run: %v", c)
	}
	for _, name := range []string{Healthy, SlowNoHedge, Kill} {
		if x := rep.Result(name); x == nil || x.Requests == 0 {
			t.Fatalf("%s: no requests (%+v)", name, x)
		}
	}
	// The slow scenario puts its router in node-0's zone: 30% of its
	// requests are delayed by 50 ms.
	if sn, h := rep.Result(SlowNoHedge), rep.Result(Healthy); sn.P99 < 50*time.Millisecond || h.P99 >= 50*time.Millisecond {
		t.Errorf("the fault did not reach the restarted process: unhedged p99 %v, healthy p99 %v", sn.P99, h.P99)
	}
	if k := rep.Result(Kill); k.Failovers == 0 && k.MaxAfterKill <= 0 {
		t.Errorf("kill scenario: %d failovers, nothing served after the kill", k.Failovers)
	}
	if b := rep.Result(BareInterleaved); b == nil && len(rep.Notes) > 0 && !strings.Contains(strings.Join(rep.Notes, " "), "Redis") {
		t.Error("no bare floor result")
	} else if b != nil && (b.Requests == 0 || b.Errors > 0) {
		t.Errorf("bare floor process: %d requests, %d errors", b.Requests, b.Errors)
	}
	if !strings.Contains(strings.Join(rep.Notes, "\n"), "processes of their own") {
		t.Errorf("the report does not say where the nodes ran: %q", rep.Notes)
	}
}

// A node process stops on its own, its databases closed, when its stdin
// ends (the parent closed it or died), and a killed one leaves a directory
// the next process opens.
func TestNodeProcessStopsWithParent(t *testing.T) {
	t.Setenv(childEnv, "1")
	c, err := testcluster.Start(context.Background(), testcluster.Options{Dir: t.TempDir(), Nodes: 1, Replicas: 1, Partitions: 4, Keys: 40,
		MaxValue: 1 << 10, CacheBytes: 8 << 20, Exec: []string{os.Args[0]}})
	if err != nil {
		t.Fatal(err)
	}
	m := c.Members()[0]
	m.Kill() // SIGKILL
	if m.Up() || len(children(t)) != 0 {
		t.Fatalf("killed: up %v, children %v", m.Up(), children(t))
	}
	if err := m.Restart(context.Background(), cobbled.FaultDelay{}); err != nil {
		t.Fatalf("restart after SIGKILL: %v", err)
	}
	if !m.Up() || len(children(t)) != 1 {
		t.Fatalf("restarted: up %v, children %v", m.Up(), children(t))
	}
	cfg := testcluster.NodeConfig{ID: "x", Dir: t.TempDir(), Objects: c.ObjectsDir(), Listen: "127.0.0.1:0", Partitions: 4, CacheBytes: 8 << 20}
	p, err := testcluster.StartProcess(context.Background(), "x", append([]string{os.Args[0]}, cfg.Args()...), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Exited() {
		t.Fatal("exited while serving")
	}
	if !p.Stop(10*time.Second) || !p.Exited() {
		t.Error("a node process whose stdin ended did not exit by itself")
	}
	c.Close()
	if ch := children(t); len(ch) != 0 {
		t.Errorf("children after Close: %v", ch)
	}
	// Bad input names the offending thing.
	bad := testcluster.NodeConfig{ID: "y", Dir: t.TempDir(), Objects: c.ObjectsDir(), Partitions: 0}
	if _, err := testcluster.StartProcess(context.Background(), "y", append([]string{os.Args[0]}, bad.Args()...), nil); err == nil || !strings.Contains(err.Error(), "exited before serving") {
		t.Errorf("a node process with --partitions 0: %v", err)
	}
}
