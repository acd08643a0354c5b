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
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/internal/testcluster"
)

// The reference node: a second node, in a process of its own, holding the
// same data set and ingesting nothing; and the reader, a third process
// that sends every batch to both nodes in turn (the order alternates) and
// streams each read's start and latency back. So the reference's
// latencies are taken at the same moments as the measured node's and share
// the machine's noise, and the two node processes differ only in that one
// ingests (with the reader in the measured node's process, that node was
// 1.0–1.9× slower than the reference even when idle: it also decoded both
// nodes' answers). On a machine other work keeps busy, an idle window
// before and after an ingest is a different moment of that noise, which is
// why the targets are also judged against the reference (see
// Report.evaluate). What the reference does not remove: on an otherwise
// idle machine the measured process's ingest takes cores from the other
// two processes as well, which makes the reference ratio understate
// ingest's cost; the idle-window ratio is kept beside it.

// referenceEnv and readerEnv name the environment variables that turn a
// process into the reference node or the reader: they hold the JSON
// referenceConfig or readerConfig.
const (
	referenceEnv = "PILLAR_INGESTBENCH_REFERENCE"
	readerEnv    = "PILLAR_INGESTBENCH_READER"
)

type readerConfig struct {
	Addrs                        []string // measured node, reference
	Seed                         uint64   // the data set's (testcluster.Options.Seed)
	Keys, BatchKeys              int
	MinValue, MaxValue, ReadRate int
	Deadline                     time.Duration
	Start                        int64 // the run's t0, Unix ns
}

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
	if js := os.Getenv(readerEnv); js != "" {
		return true, serveReader(js)
	}
	js := os.Getenv(referenceEnv)
	if js == "" {
		return false, nil
	}
	var rc referenceConfig
	if err := json.Unmarshal([]byte(js), &rc); err != nil {
		return true, fmt.Errorf("ingestbench: reference: %s: %w", referenceEnv, err)
	}
	ctx := context.Background()
	c, err := testcluster.Start(ctx, testcluster.Options{Dir: rc.Dir, Nodes: 1, Replicas: 1, Partitions: rc.Partitions,
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

// serveReader runs the read load against the configured nodes, writing
// one line per read to stdout ("<node index> <start ns since t0> <latency
// ns> <error or ->"), until stdin is closed.
func serveReader(js string) error {
	var rc readerConfig
	if err := json.Unmarshal([]byte(js), &rc); err != nil {
		return fmt.Errorf("ingestbench: reader: %s: %w", readerEnv, err)
	}
	var clis []servepb.ServeClient
	for _, a := range rc.Addrs {
		conn, err := grpc.NewClient(a, append(servepb.DialOptions(0), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			return fmt.Errorf("ingestbench: reader: %w", err)
		}
		defer conn.Close()
		clis = append(clis, servepb.NewServeClient(conn))
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }()
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	flush := time.NewTicker(100 * time.Millisecond)
	defer flush.Stop()
	go func() {
		for range flush.C {
			mu.Lock()
			out.Flush()
			mu.Unlock()
		}
	}()
	runLoad(ctx, clis, readerBatches(rc), rc.ReadRate, rc.Deadline, rc.MinValue, rc.MaxValue, time.Unix(0, rc.Start),
		func(i int, at, lat time.Duration, err error) {
			e := "-"
			if err != nil {
				e = strings.ReplaceAll(err.Error(), "\n", " ")
			}
			mu.Lock()
			fmt.Fprintf(out, "%d %d %d %s\n", i, int64(at), int64(lat), e)
			mu.Unlock()
		})
	mu.Lock()
	defer mu.Unlock()
	return out.Flush()
}

// readerBatches are the data set's request batches, as
// testcluster.Cluster.Batches cuts them.
func readerBatches(rc readerConfig) [][][]byte {
	var out [][][]byte
	for i := 0; i+rc.BatchKeys <= rc.Keys; i += rc.BatchKeys {
		var b [][]byte
		for j := range rc.BatchKeys {
			b = append(b, testcluster.KeyOf(rc.Seed, i+j))
		}
		out = append(out, b)
	}
	return out
}

// reference is the parent's handle on the reference and reader processes.
type reference struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	addr   string
	conn   *grpc.ClientConn
	cli    servepb.ServeClient
	reader *exec.Cmd
	rIn    io.WriteCloser
	rOut   io.ReadCloser
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
	r.addr = a
	r.conn, err = grpc.NewClient(a, append(servepb.DialOptions(0), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		r.close()
		return nil, fmt.Errorf("ingestbench: reference: %w", err)
	}
	r.cli = servepb.NewServeClient(r.conn)
	return r, nil
}

// startReader starts the reader process with argv.
func (r *reference) startReader(ctx context.Context, argv []string, rc readerConfig) error {
	if rc.Seed == 0 {
		rc.Seed = 1 // testcluster.Options' default, which the bench uses
	}
	js, err := json.Marshal(rc)
	if err != nil {
		return err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), readerEnv+"="+string(js))
	cmd.Stderr = os.Stderr
	if r.rIn, err = cmd.StdinPipe(); err != nil {
		return err
	}
	if r.rOut, err = cmd.StdoutPipe(); err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("ingestbench: reader: %w", err)
	}
	r.reader = cmd
	return nil
}

// readFrom passes every read the reader reports to rec until ctx ends,
// then stops the reader and returns once its last report is in.
func (r *reference) readFrom(ctx context.Context, rec func(i int, at, lat time.Duration, err error)) error {
	stop := context.AfterFunc(ctx, func() { r.rIn.Close() })
	defer stop()
	sc := bufio.NewScanner(r.rOut)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var i int
		var at, lat int64
		var e string
		if _, err := fmt.Sscanf(sc.Text(), "%d %d %d", &i, &at, &lat); err != nil {
			return fmt.Errorf("ingestbench: reader: line %q: %w", sc.Text(), err)
		}
		if f := strings.SplitN(sc.Text(), " ", 4); len(f) == 4 {
			e = f[3]
		}
		var err error
		if e != "-" {
			err = errors.New(e)
		}
		rec(i, time.Duration(at), time.Duration(lat), err)
	}
	r.rIn.Close()
	werr := r.reader.Wait()
	r.reader = nil
	if err := sc.Err(); err != nil {
		return fmt.Errorf("ingestbench: reader: %w", err)
	}
	if werr != nil {
		return fmt.Errorf("ingestbench: reader: %w", werr)
	}
	return nil
}

func (r *reference) close() {
	if r.reader != nil { // readFrom never ran
		r.rIn.Close()
		r.reader.Wait()
	}
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
