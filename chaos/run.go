package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/jackc/pgx/v5"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/cobbled/router"
	"github.com/pillarkit/pillar/internal/s3test"
	"github.com/pillarkit/pillar/pillar/local"
)

const bucket = "pillar-chaos"

// node is one cobbled node with the proxies in front of its paths: readers
// reach it through serve, it reaches the control plane through ctl and the
// object store through s3.
type node struct {
	id, zone     string
	listen, http string
	dataMount    string // tmpfs mount point ("" when not mounted)
	serve, ctl   *TCPProxy
	s3           *S3Proxy
	proc         *proc
	ballast      string
	mountErr     error
	directAddr   string
}

// run is one chaos run in progress.
type run struct {
	o       Options
	ctx     context.Context
	dir     string
	sum     *Summary
	ks      *keySpace
	hist    *history
	db      string
	s3srv   *proc
	s3end   string
	lorryS3 *S3Proxy
	control *proc
	ctlAddr string
	lorry   *proc
	nodes   []*node
	client  *control.Client
	rt      *router.Router
	store   *local.Store

	// The kill-lorry fault asks the writer for a bulk backlog (burst,
	// answered on burstDone) and has it write fresh changes only until its
	// heal (freshOnly), counting them (freshDuringKill).
	burst           chan int
	burstDone       chan struct{}
	freshOnly       atomic.Bool
	freshDuringKill atomic.Int64
	// corruptN numbers the batches FaultCorruptObject registered.
	corruptN int

	mu       sync.Mutex
	cleanups []func()
}

func (r *run) say(format string, a ...any) {
	fmt.Fprintf(r.o.Stdout, "%s  %s\n", time.Now().UTC().Format("15:04:05.0"), fmt.Sprintf(format, a...))
}

func (r *run) onCleanup(f func()) {
	r.mu.Lock()
	r.cleanups = append(r.cleanups, f)
	r.mu.Unlock()
}

func (r *run) cleanup() {
	r.mu.Lock()
	cs := r.cleanups
	r.cleanups = nil
	r.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

// Run runs one chaos run: it starts the system, writes, reads and injects
// the seeded fault schedule for Duration, waits for convergence, runs the
// four checks and returns the summary. The error is non-nil when the run
// could not be carried out or a check failed (Summary.Passed is then false
// and the summary names the seed). Every child process is killed before Run
// returns.
func Run(ctx context.Context, opts Options) (*Summary, error) {
	opts.ensureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	r := &run{o: opts, ctx: ctx, sum: newSummary(opts), burst: make(chan int), burstDone: make(chan struct{}, 1)}
	removeDir := false
	defer func() {
		r.cleanup() // children killed and file systems unmounted first
		if removeDir {
			os.RemoveAll(r.dir)
		}
	}()
	fmt.Fprintf(opts.Stdout, "chaos: seed %d, %s of faults (%s), %d nodes, %d partitions, %d keys\n",
		opts.Seed, opts.Duration, faultList(opts.Faults), opts.Nodes, opts.Partitions, opts.Keys)
	if err := r.setup(); err != nil {
		r.sum.Error = err.Error()
		return r.sum, fmt.Errorf("chaos: seed %d: setup: %w (files: %s)", opts.Seed, err, r.dir)
	}
	err := r.exercise()
	if err != nil {
		r.sum.Error = err.Error()
	}
	r.collectCounts()
	r.sum.Write(opts.Stdout)
	if err == nil && !r.sum.Passed() {
		err = fmt.Errorf("chaos: seed %d: checks failed (replay: pillar chaos --seed %d --duration %s; files: %s)", opts.Seed, opts.Seed, opts.Duration, r.dir)
	} else if err != nil {
		err = fmt.Errorf("chaos: seed %d: %w (files: %s)", opts.Seed, err, r.dir)
	}
	if err == nil && opts.Dir == "" && !opts.Keep {
		removeDir = true
	} else {
		r.say("files kept in %s", r.dir)
	}
	return r.sum, err
}

func (r *run) setup() error {
	var err error
	if r.o.Dir == "" {
		if r.dir, err = os.MkdirTemp("", "pillar-chaos-"); err != nil {
			return err
		}
	} else {
		if r.dir, err = filepath.Abs(r.o.Dir); err != nil {
			return err
		}
		if err := os.MkdirAll(r.dir, 0o755); err != nil {
			return err
		}
	}
	r.ks = newKeySpace(r.o.Keys)
	r.hist = newHistory(r.ks, r.o.Partitions)
	if err := r.createDB(); err != nil {
		return err
	}
	if err := r.startS3(); err != nil {
		return err
	}
	if r.store, err = local.Create(filepath.Join(r.dir, "store"), &local.Options{Partitions: r.o.Partitions, Logger: r.o.Logger}); err != nil {
		return err
	}
	r.onCleanup(func() { r.store.Close() })
	if err := r.startControl(); err != nil {
		return err
	}
	if err := r.startNodes(); err != nil {
		return err
	}
	if err := r.startLorry(); err != nil {
		return err
	}
	if err := r.waitAssigned(90 * time.Second); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	if r.rt, err = router.New(rctx, router.Options{Source: r.client, Zone: "a", Partitions: r.o.Partitions, Logger: r.o.Logger}); err != nil {
		return fmt.Errorf("router: %w", err)
	}
	r.onCleanup(func() { r.rt.Close() })
	return nil
}

func (r *run) createDB() error {
	ctx, cancel := context.WithTimeout(r.ctx, 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.o.Postgres)
	if err != nil {
		return fmt.Errorf("postgres %s: %w", r.o.Postgres, err)
	}
	defer conn.Close(context.Background())
	r.db = strings.ReplaceAll(fmt.Sprintf("pillar_chaos_%d_%d_%d", r.o.Seed, os.Getpid(), time.Now().UnixNano()%1e6), "-", "m")
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+r.db); err != nil {
		return fmt.Errorf("postgres: create database %s: %w", r.db, err)
	}
	r.onCleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, r.o.Postgres)
		if err != nil {
			return
		}
		defer conn.Close(context.Background())
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+r.db+" WITH (FORCE)")
	})
	return nil
}

func (r *run) dbURL() string {
	i := strings.LastIndex(r.o.Postgres, "/")
	base := r.o.Postgres[:i+1]
	q := ""
	if j := strings.Index(r.o.Postgres[i:], "?"); j >= 0 {
		q = r.o.Postgres[i+j:]
	}
	return base + r.db + q
}

func (r *run) newProc(name string, addr string, env []string, args ...string) *proc {
	p := &proc{name: name, bin: r.o.Pillar, args: args, env: env, addr: addr, log: filepath.Join(r.dir, "logs", name+".log")}
	r.onCleanup(func() { p.kill(true) })
	return p
}

func (r *run) startS3() error {
	bin := r.o.Versitygw
	if bin == "" {
		var err error
		if bin, err = s3test.Binary(); err != nil {
			return err
		}
	}
	addr, err := freePort()
	if err != nil {
		return err
	}
	data := filepath.Join(r.dir, "s3")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return err
	}
	p := &proc{name: "versitygw", bin: bin, args: []string{"--port", addr, "--quiet", "posix", data}, addr: addr,
		env: []string{"ROOT_ACCESS_KEY_ID=" + s3test.AccessKey, "ROOT_SECRET_ACCESS_KEY=" + s3test.SecretKey},
		log: filepath.Join(r.dir, "logs", "versitygw.log")}
	r.onCleanup(func() { p.kill(true) })
	if err := p.start(); err != nil {
		return err
	}
	if err := p.waitListening(30 * time.Second); err != nil {
		return err
	}
	r.s3srv, r.s3end = p, "http://"+addr
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	cl := s3.New(s3.Options{Region: s3test.Region, BaseEndpoint: aws.String(r.s3end), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(s3test.AccessKey, s3test.SecretKey, "")})
	for {
		_, err = cl.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("s3: create bucket: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.lorryS3, err = NewS3Proxy(r.s3end, uint64(r.o.Seed)+100)
	if err != nil {
		return err
	}
	r.onCleanup(func() { r.lorryS3.Close() })
	return nil
}

func s3Env(endpoint string) []string {
	return []string{"AWS_ENDPOINT_URL_S3=" + endpoint, "AWS_ACCESS_KEY_ID=" + s3test.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + s3test.SecretKey, "AWS_REGION=" + s3test.Region}
}

func (r *run) objURL() string { return "s3://" + bucket + "/chaos" }

func (r *run) startControl() error {
	var err error
	if r.ctlAddr, err = freePort(); err != nil {
		return err
	}
	httpAddr, err := freePort()
	if err != nil {
		return err
	}
	r.control = r.newProc("control", r.ctlAddr, nil, "control", "serve", "--db", r.dbURL(), "--listen", r.ctlAddr,
		"--http", httpAddr, "--partitions", fmt.Sprint(r.o.Partitions), "--no-auth", "--down-after", "3s")
	if err := r.control.start(); err != nil {
		return err
	}
	if err := r.control.waitListening(30 * time.Second); err != nil {
		return err
	}
	if r.client, err = control.Dial(r.ctlAddr, nil); err != nil {
		return err
	}
	r.onCleanup(func() { r.client.Close() })
	return nil
}

func (r *run) wantsFault(kind string) bool {
	for _, k := range r.o.Faults {
		if k == kind {
			return true
		}
	}
	return false
}

func (r *run) startNodes() error {
	zones := []string{"a", "b", "c"}
	for i := range r.o.Nodes {
		n := &node{id: fmt.Sprintf("n%d", i+1), zone: zones[i%len(zones)]}
		var err error
		if n.listen, err = freePort(); err != nil {
			return err
		}
		if n.http, err = freePort(); err != nil {
			return err
		}
		n.directAddr = n.listen
		if n.serve, err = NewTCPProxy("127.0.0.1:0", n.listen); err != nil {
			return err
		}
		r.onCleanup(func() { n.serve.Close() })
		if n.ctl, err = NewTCPProxy("127.0.0.1:0", r.ctlAddr); err != nil {
			return err
		}
		r.onCleanup(func() { n.ctl.Close() })
		if n.s3, err = NewS3Proxy(r.s3end, uint64(r.o.Seed)+uint64(i)); err != nil {
			return err
		}
		r.onCleanup(func() { n.s3.Close() })
		root := filepath.Join(r.dir, n.id)
		if err := os.MkdirAll(root, 0o755); err != nil {
			return err
		}
		if r.wantsFault(FaultDiskFull) {
			if err := mountTmpfs(root, r.o.DiskBytes); err != nil {
				n.mountErr = err
			} else {
				n.dataMount = root
				r.onCleanup(func() { unmount(root) })
			}
		}
		n.ballast = filepath.Join(root, "ballast")
		n.proc = r.newProc(n.id, n.listen, s3Env(n.s3.Endpoint), "cobbled", "serve", "--id", n.id, "--zone", n.zone,
			"--data", filepath.Join(root, "data"), "--listen", n.listen, "--addr", n.serve.Addr, "--http", n.http,
			"--control", n.ctl.Addr, "--objstore", r.objURL(), "--cache", "32MiB", "--partitions", fmt.Sprint(r.o.Partitions),
			"--drain", "2s")
		if err := n.proc.start(); err != nil {
			return err
		}
		r.nodes = append(r.nodes, n)
	}
	for _, n := range r.nodes {
		if err := n.proc.waitListening(60 * time.Second); err != nil {
			return err
		}
	}
	return nil
}

func mountTmpfs(dir string, size int64) error {
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mount tmpfs on %s: %v: %s", dir, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func unmount(dir string) {
	if err := syscall.Unmount(dir, 0); err != nil {
		_ = syscall.Unmount(dir, syscall.MNT_DETACH)
	}
}

func (r *run) startLorry() error {
	r.lorry = r.newProc("lorry", "", s3Env(r.lorryS3.Endpoint), "lorry", "run", "--store", filepath.Join(r.dir, "store"),
		"--objstore", r.objURL(), "--control", r.ctlAddr, "--id", "chaos-lorry", "--max-batch-age", "500ms",
		"--lease-ttl", "5s", "--parallelism", "2", "--tmp", filepath.Join(r.dir, "lorry-tmp"))
	if err := os.MkdirAll(filepath.Join(r.dir, "lorry-tmp"), 0o755); err != nil {
		return err
	}
	return r.lorry.start()
}

func (r *run) procs() []*proc {
	ps := []*proc{r.control, r.lorry}
	for _, n := range r.nodes {
		ps = append(ps, n.proc)
	}
	return ps
}

// supervise restarts any child that exited without being asked to (as a
// service manager would), counting the crash.
func (r *run) supervise(stop <-chan struct{}) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-r.ctx.Done():
			return
		case <-t.C:
		}
		for _, p := range r.procs() {
			if p.reap() {
				r.say("supervisor: %s exited unexpectedly (%s); restarting", p.name, p.lastExit)
				if err := p.start(); err != nil {
					r.say("supervisor: restart %s: %v", p.name, err)
				}
			}
		}
	}
}

// waitAssigned waits until every partition has a replica on every node, all
// up, so the fault phase starts from a serving system.
func (r *run) waitAssigned(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	why := ""
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
		rt, err := r.client.GetRouting(ctx)
		cancel()
		why = ""
		if err != nil {
			why = err.Error()
		} else {
			for p, reps := range rt.Replicas {
				up := 0
				for _, rep := range reps {
					if rep.State == control.StateUp {
						up++
					}
				}
				if up < r.o.Nodes {
					why = fmt.Sprintf("partition %d: %d replicas up of %d", p, up, r.o.Nodes)
					break
				}
			}
		}
		if why == "" {
			return nil
		}
		select {
		case <-r.ctx.Done():
			return r.ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("partitions not assigned within %s: %s", timeout, why)
}
