package ingestbench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pillarkit/pillar/cobbled/readbench/cluster"
	"github.com/pillarkit/pillar/cobbled/servepb"
)

// The reference node: a second node, in a process of its own, holding the
// same data set and ingesting nothing. The reader sends every batch to both
// nodes in turn (the order alternates), so the reference's latencies are
// taken at the same moments as the measured node's and share the machine's
// noise; only the measured node's process ingests. On a machine that other
// work keeps busy, an idle window before and after an ingest is a different
// moment of that noise, which is why the targets are also judged against
// the reference (see Report.evaluate). What the reference does not remove:
// the reader (client) lives in the measured node's process, so ingest CPU
// there slows the decoding of the reference's answers too, and on an
// otherwise idle machine the measured process's ingest takes cores from
// the reference's process; both make the reference ratio understate
// ingest's cost, which is why the idle-window ratio is kept beside it.

// referenceEnv names the environment variable that turns a process into
// the reference node: it holds the JSON referenceConfig.
const referenceEnv = "PILLAR_INGESTBENCH_REFERENCE"

type referenceConfig struct {
	Dir                string
	Partitions, Keys   int
	MinValue, MaxValue int
	CacheBytes         int64
}

// ServeReferenceIfAsked serves the reference node when this process was
// started as one (Options.Reference): it loads the data set, prints the
// node's address on stdout and serves until stdin is closed; then it
// returns true. Otherwise it returns false at once. Entry points that
// Options.Reference re-executes (the CLI, a test binary's TestMain) call it
// first.
func ServeReferenceIfAsked() (bool, error) {
	js := os.Getenv(referenceEnv)
	if js == "" {
		return false, nil
	}
	var rc referenceConfig
	if err := json.Unmarshal([]byte(js), &rc); err != nil {
		return true, fmt.Errorf("ingestbench: reference: %s: %w", referenceEnv, err)
	}
	ctx := context.Background()
	c, err := cluster.Start(ctx, cluster.Options{Dir: rc.Dir, Nodes: 1, Replicas: 1, Partitions: rc.Partitions,
		Keys: rc.Keys, MinValue: rc.MinValue, MaxValue: rc.MaxValue, CacheBytes: rc.CacheBytes})
	if err != nil {
		return true, fmt.Errorf("ingestbench: reference: %w", err)
	}
	defer c.Close()
	defer os.RemoveAll(rc.Dir)
	fmt.Printf("addr %s\n", c.Members()[0].Addr)
	io.Copy(io.Discard, os.Stdin) // until the parent closes it (or exits)
	return true, nil
}

// reference is the parent's handle on the reference process.
type reference struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	conn  *grpc.ClientConn
	cli   servepb.ServeClient
}

// startReference starts the reference process with argv and waits for its
// address.
func startReference(ctx context.Context, argv []string, rc referenceConfig) (*reference, error) {
	js, err := json.Marshal(rc)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), referenceEnv+"="+string(js))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("ingestbench: reference: %w", err)
	}
	r := &reference{cmd: cmd, stdin: stdin}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "addr "); ok {
				addr <- a
				break
			}
		}
		close(addr)
		io.Copy(io.Discard, stdout)
	}()
	var a string
	select {
	case a = <-addr:
	case <-ctx.Done():
	case <-time.After(5 * time.Minute):
	}
	if a == "" {
		r.close()
		return nil, errors.New("ingestbench: reference: the process printed no address")
	}
	r.conn, err = grpc.NewClient(a, append(servepb.DialOptions(0), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		r.close()
		return nil, fmt.Errorf("ingestbench: reference: %w", err)
	}
	r.cli = servepb.NewServeClient(r.conn)
	return r, nil
}

func (r *reference) close() {
	if r.conn != nil {
		r.conn.Close()
	}
	r.stdin.Close()
	done := make(chan struct{})
	go func() { r.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		r.cmd.Process.Kill()
		<-done
	}
}

func referenceDir(dir string) string { return filepath.Join(dir, "reference") }
