// Package switchbench is the version-switch benchmark behind `pillar bench
// switch`: it runs the real control plane (SQLite) on 127.0.0.1, Nodes
// cobbled nodes with their ingest loops following it, each with its own
// gRPC server and RocksDB directories, and a router watching the routing;
// publishes two publications as tagged snapshot batches (each key's value
// names its publication, so every read shows which version answered),
// makes the first live and the second a ready candidate, and then, while
// Readers closed-loop readers read every key through the router, promotes
// the candidate and rolls back (and forward) Switches-1 times.
//
// A switch's time is from just before the control-plane call until the end
// of the last read that still returned the old version; it is complete
// when 200 reads in a row that started after the call returned the new
// one. Reported per switch, with the reads, the failed reads and the
// "mixed" reads (a key whose value is not from the version the response
// names): the target is every read on the other version within 2 s
// with no failed read.
//
// Run is not safe for concurrent use with another Run on the same Dir.
package switchbench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pillarkit/pillar/cobbled"
	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/cobbled/router"
	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/objstore"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/sstbuilder"
)

// The two publications.
const (
	PubA = "bench-cv1/model" // live at the start
	PubB = "bench-cv2/model" // the candidate
)

// Options configure Run. The zero value of every field means its default.
type Options struct {
	// Dir holds the control plane's database, the batches and the nodes'
	// data. The default value is a temporary directory, removed afterwards.
	Dir string
	// Nodes is the number of cobbled nodes (each holds every partition).
	// The default value is 3.
	Nodes int
	// Partitions is P. The default value is 4.
	Partitions int
	// Keys is the number of keys, all read by every request. The default
	// value is 96.
	Keys int
	// Readers is the number of closed-loop readers. The default value is 3.
	Readers int
	// Switches is the number of switches: a promote, then rollbacks back
	// and forth. The default value is 10.
	Switches int
	// SwitchTimeout bounds one switch. The default value is 30s.
	SwitchTimeout time.Duration
	// ViaServer sends the readers through the router's gRPC server
	// (what `pillar router serve` runs) on loopback instead of the
	// library. The default value is false.
	ViaServer bool
	// Logger receives progress. The default value discards.
	Logger *slog.Logger
}

func (o *Options) ensureDefaults() {
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.Partitions == 0 {
		o.Partitions = 4
	}
	if o.Keys == 0 {
		o.Keys = 96
	}
	if o.Readers == 0 {
		o.Readers = 3
	}
	if o.Switches == 0 {
		o.Switches = 10
	}
	if o.SwitchTimeout == 0 {
		o.SwitchTimeout = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate checks the options, with defaults applied.
func (o Options) Validate() error {
	o.ensureDefaults()
	var errs []error
	if o.Nodes < 1 || o.Partitions < 1 || o.Keys < 1 || o.Readers < 1 || o.Switches < 1 {
		errs = append(errs, fmt.Errorf("switchbench: options: Nodes %d, Partitions %d, Keys %d, Readers %d and Switches %d must be positive",
			o.Nodes, o.Partitions, o.Keys, o.Readers, o.Switches))
	}
	if o.Keys > 1024 {
		errs = append(errs, fmt.Errorf("switchbench: options: Keys %d over the router's 1024 per request", o.Keys))
	}
	return errors.Join(errs...)
}

// Switch is one measured switch.
type Switch struct {
	Kind string // "promote" or "rollback"
	From string
	To   string
	// Took is from just before the control-plane call until the end of
	// the last read that returned From.
	Took time.Duration
	// Call is how long the control-plane call took.
	Call time.Duration
}

// Report is a run's result.
type Report struct {
	Nodes, Partitions, Keys, Readers int
	ViaServer                        bool // readers went through the router's gRPC server
	Switches                         []Switch
	Max, Mean                        time.Duration
	Reads, FailedReads, MixedReads   int64
	// FirstError is the first failed read's error ("" when none failed).
	FirstError string
	// TargetMet: every switch within 2 s and no failed or mixed read.
	TargetMet bool
}

// Target is the bound on a switch.
const Target = 2 * time.Second

// Markdown renders the report as a table with the target evaluated.
func (r *Report) Markdown() string {
	var b strings.Builder
	via := "the router library"
	if r.ViaServer {
		via = "the router's gRPC server"
	}
	fmt.Fprintf(&b, "# Version switch: %d nodes, %d partitions, %d keys per read, %d readers through %s\n\n", r.Nodes, r.Partitions, r.Keys, r.Readers, via)
	fmt.Fprintf(&b, "| # | switch | from → to | every read on the new version after | control-plane call |\n|---|---|---|---|---|\n")
	for i, s := range r.Switches {
		fmt.Fprintf(&b, "| %d | %s | %s → %s | %.1f ms | %.1f ms |\n", i+1, s.Kind, s.From, s.To, ms(s.Took), ms(s.Call))
	}
	verdict := "met"
	if !r.TargetMet {
		verdict = "NOT met"
	}
	fmt.Fprintf(&b, "\nmax %.1f ms, mean %.1f ms over %d switches; %d reads, %d failed, %d mixed.\n", ms(r.Max), ms(r.Mean), len(r.Switches), r.Reads, r.FailedReads, r.MixedReads)
	fmt.Fprintf(&b, "Target (every read on the other version ≤ %v after the change, 0 failed reads): %s.\n", Target, verdict)
	if r.FirstError != "" {
		fmt.Fprintf(&b, "First failed read: %s\n", r.FirstError)
	}
	return b.String()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// ValueOf is key k's value in publication pub.
func ValueOf(pub string, k []byte) string { return fmt.Sprintf("%s|%x", pub, k) }

// Rig is the running cluster: a control plane, nodes and a router.
type Rig struct {
	Control *control.Client
	Router  *router.Router
	Keys    [][]byte
	// server is the router's gRPC server's client (Options.ViaServer).
	server servepb.ServeClient
	stop   []func()
}

// Close stops everything, in reverse order of start.
func (s *Rig) Close() {
	for i := len(s.stop) - 1; i >= 0; i-- {
		s.stop[i]()
	}
	s.stop = nil
}

// Start starts the rig under dir with PubA live and PubB a ready
// candidate; ropts (may be nil) changes the router's options.
func Start(ctx context.Context, dir string, o Options, ropts func(*router.Options)) (_ *Rig, err error) {
	o.ensureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	s := &Rig{}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	store, err := control.OpenStore(ctx, "sqlite:"+filepath.Join(dir, "control.db"), &control.StoreOptions{Partitions: o.Partitions})
	if err != nil {
		return nil, fmt.Errorf("switchbench: control plane: %w", err)
	}
	s.stop = append(s.stop, func() { store.Close() })
	cp, err := control.NewServer(&control.Options{Store: store, NoAuth: true})
	if err != nil {
		return nil, fmt.Errorf("switchbench: control plane: %w", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("switchbench: control plane: %w", err)
	}
	gs := cp.GRPCServer()
	go gs.Serve(lis)
	s.stop = append(s.stop, gs.Stop)
	if s.Control, err = control.Dial(lis.Addr().String(), nil); err != nil {
		return nil, fmt.Errorf("switchbench: control plane: %w", err)
	}
	s.stop = append(s.stop, func() { s.Control.Close() })

	objs, err := objstore.OpenLocal(filepath.Join(dir, "objects"))
	if err != nil {
		return nil, fmt.Errorf("switchbench: objects: %w", err)
	}
	for i := range o.Keys {
		s.Keys = append(s.Keys, []byte(fmt.Sprintf("w%015d", i)))
	}
	for i := range o.Nodes {
		nl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("switchbench: node %d: %w", i, err)
		}
		n, err := cobbled.Open(ctx, cobbled.Options{ID: fmt.Sprintf("n%d", i), Zone: fmt.Sprintf("z%d", i), Addr: nl.Addr().String(),
			Dir: filepath.Join(dir, fmt.Sprintf("n%d", i)), CacheBytes: 8 << 20, Control: cobbled.FromControlClient(s.Control), Objects: objs,
			LongPoll: time.Second, Heartbeat: 100 * time.Millisecond, RetryBackoff: 10 * time.Millisecond, RetryBackoffMax: 100 * time.Millisecond})
		if err != nil {
			nl.Close()
			return nil, fmt.Errorf("switchbench: node %d: %w", i, err)
		}
		srv := n.NewGRPCServer()
		go srv.Serve(nl)
		rctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { n.Run(rctx); close(done) }()
		s.stop = append(s.stop, func() { cancel(); <-done; srv.Stop(); n.Close() })
	}
	for _, pub := range []string{PubA, PubB} {
		if _, err := s.Control.RegisterPublication(ctx, pub, pub == PubA); err != nil {
			return nil, fmt.Errorf("switchbench: register %s: %w", pub, err)
		}
		if err := s.publish(ctx, dir, objs, o.Partitions, pub); err != nil {
			return nil, err
		}
		err := s.waitRouting(ctx, fmt.Sprintf("%s ready on every replica", pub), func(rt *control.Routing) bool {
			p := rt.Publication(pub)
			return p != nil && p.Ready && (pub != PubA || rt.Live == PubA)
		})
		if err != nil {
			return nil, err
		}
		o.Logger.Info("switchbench: publication ready", "publication", pub)
	}
	ro := router.Options{Source: s.Control}
	if ropts != nil {
		ropts(&ro)
	}
	if s.Router, err = router.New(ctx, ro); err != nil {
		return nil, fmt.Errorf("switchbench: %w", err)
	}
	s.stop = append(s.stop, func() { s.Router.Close() })
	if o.ViaServer {
		rl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("switchbench: router server: %w", err)
		}
		rs := router.NewServer(s.Router).GRPCServer()
		go rs.Serve(rl)
		s.stop = append(s.stop, rs.Stop)
		conn, err := grpc.NewClient(rl.Addr().String(), append(servepb.DialOptions(0), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			return nil, fmt.Errorf("switchbench: router server: %w", err)
		}
		s.stop = append(s.stop, func() { conn.Close() })
		s.server = servepb.NewServeClient(conn)
	}
	return s, nil
}

// read reads every key once, through the library or the router's server,
// and returns the version read and whether every value is from it.
func (s *Rig) read(ctx context.Context) (version string, consistent bool, err error) {
	if s.server == nil {
		resp, err := s.Router.Read(ctx, s.Keys, nil)
		if err != nil {
			return "", false, err
		}
		for i, x := range resp.Results {
			if !x.Found || string(x.Value) != ValueOf(resp.Version, s.Keys[i]) {
				return resp.Version, false, nil
			}
		}
		return resp.Version, true, nil
	}
	resp, err := s.server.BatchGet(ctx, &servepb.BatchGetRequest{Keys: s.Keys})
	if err != nil {
		return "", false, err
	}
	for i, x := range resp.Results {
		if x.Status != servepb.KeyStatus_KEY_OK {
			return "", false, fmt.Errorf("key %d: %s: %s", i, x.Status, x.Error)
		}
		if !x.Found || string(x.Value) != ValueOf(resp.Version, s.Keys[i]) {
			return resp.Version, false, nil
		}
	}
	return resp.Version, true, nil
}

// publish builds and registers one snapshot batch of pub per partition.
func (s *Rig) publish(ctx context.Context, dir string, objs objstore.Store, parts int, pub string) error {
	for p := range parts {
		var rows []sstbuilder.Row
		for _, k := range s.Keys {
			if pillar.Partition(k, parts) == p {
				rows = append(rows, sstbuilder.Row{Key: k, Value: []byte(ValueOf(pub, k))})
			}
		}
		id := fmt.Sprintf("switch-p%d-%s", p, strings.ReplaceAll(strings.ReplaceAll(pub, "/", "-"), "_", "-"))
		build := filepath.Join(dir, "build", id)
		m, paths, err := sstbuilder.BuildPartition(ctx, sstbuilder.SliceRows(rows), &sstbuilder.BuildOptions{
			Dir: build, Partition: p, Partitions: parts, Kind: batch.KindSnapshot, BatchID: id, Source: "pillar bench switch"})
		if err != nil {
			return fmt.Errorf("switchbench: build %s: %w", id, err)
		}
		m.Publication = pub
		up, err := sstbuilder.Upload(ctx, objs, m, paths)
		if err != nil {
			return fmt.Errorf("switchbench: upload %s: %w", id, err)
		}
		os.RemoveAll(build)
		if _, err := s.Control.RegisterBatch(ctx, up); err != nil {
			return fmt.Errorf("switchbench: register %s: %w", id, err)
		}
	}
	return nil
}

func (s *Rig) waitRouting(ctx context.Context, what string, cond func(*control.Routing) bool) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		rt, err := s.Control.GetRouting(ctx)
		if err == nil && cond(rt) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("switchbench: timed out waiting for %s (last error: %v)", what, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Reads is what the readers saw.
type Reads struct {
	mu       sync.Mutex
	log      []read
	firstErr string
	n        atomic.Int64
	failed   atomic.Int64
	mixed    atomic.Int64
}

type read struct {
	start, end time.Time
	version    string
}

// Counts returns the reads, failed reads and mixed reads so far.
func (r *Reads) Counts() (reads, failed, mixed int64) {
	return r.n.Load(), r.failed.Load(), r.mixed.Load()
}

// Readers runs c closed-loop readers of every key until stop is closed;
// wait for them with the returned WaitGroup.
func (s *Rig) Readers(c int, stop <-chan struct{}, rs *Reads) *sync.WaitGroup {
	var wg sync.WaitGroup
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				version, consistent, err := s.read(context.Background())
				end := time.Now()
				rs.n.Add(1)
				if err != nil {
					rs.failed.Add(1)
					rs.mu.Lock()
					if rs.firstErr == "" {
						rs.firstErr = err.Error()
					}
					rs.mu.Unlock()
					continue
				}
				if !consistent {
					rs.mixed.Add(1)
				}
				rs.mu.Lock()
				rs.log = append(rs.log, read{start, end, version})
				rs.mu.Unlock()
			}
		}()
	}
	return &wg
}

// Measure runs change (a promote or a rollback) while readers run and
// returns the switch time to want (see the package comment) and how long
// the call took.
func (s *Rig) Measure(ctx context.Context, rs *Reads, want string, timeout time.Duration, change func() error) (took, call time.Duration, err error) {
	t0 := time.Now()
	if err := change(); err != nil {
		return 0, 0, err
	}
	call = time.Since(t0)
	deadline := time.Now().Add(timeout)
	for {
		rs.mu.Lock()
		run := 0
		for i := len(rs.log) - 1; i >= 0 && rs.log[i].start.After(t0) && rs.log[i].version == want; i-- {
			run++
		}
		rs.mu.Unlock()
		if run >= 200 {
			break
		}
		if time.Now().After(deadline) {
			return 0, call, fmt.Errorf("switchbench: reads did not all switch to %s within %v", want, timeout)
		}
		select {
		case <-ctx.Done():
			return 0, call, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var last time.Time
	for _, rd := range rs.log {
		if rd.version != want && rd.end.After(last) {
			last = rd.end
		}
	}
	if last.Before(t0) {
		return 0, call, nil
	}
	return last.Sub(t0), call, nil
}

// Run runs the benchmark (see the package comment).
func Run(ctx context.Context, o Options) (*Report, error) {
	o.ensureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	dir := o.Dir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "pillar-bench-switch-")
		if err != nil {
			return nil, fmt.Errorf("switchbench: %w", err)
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	rig, err := Start(ctx, dir, o, nil)
	if err != nil {
		return nil, err
	}
	defer rig.Close()
	rs := &Reads{}
	stop := make(chan struct{})
	wg := rig.Readers(o.Readers, stop, rs)
	var once sync.Once
	stopReaders := func() { once.Do(func() { close(stop); wg.Wait() }) }
	defer stopReaders()
	rep := &Report{Nodes: o.Nodes, Partitions: o.Partitions, Keys: o.Keys, Readers: o.Readers, ViaServer: o.ViaServer}
	from, to := PubA, PubB
	for i := range o.Switches {
		sw := Switch{Kind: "rollback", From: from, To: to}
		change := func() error { _, err := rig.Control.Rollback(ctx, false); return err }
		if i == 0 {
			sw.Kind = "promote"
			change = func() error { _, err := rig.Control.Promote(ctx, PubB, false); return err }
		}
		if sw.Took, sw.Call, err = rig.Measure(ctx, rs, to, o.SwitchTimeout, change); err != nil {
			return nil, fmt.Errorf("switchbench: switch %d (%s to %s): %w", i+1, sw.Kind, to, err)
		}
		o.Logger.Info("switchbench: switched", "kind", sw.Kind, "to", to, "took", sw.Took, "call", sw.Call)
		rep.Switches = append(rep.Switches, sw)
		from, to = to, from
	}
	stopReaders()
	var sum time.Duration
	for _, s := range rep.Switches {
		sum += s.Took
		rep.Max = max(rep.Max, s.Took)
	}
	rep.Mean = sum / time.Duration(len(rep.Switches))
	rep.Reads, rep.FailedReads, rep.MixedReads = rs.Counts()
	rep.FirstError = rs.firstErr
	rep.TargetMet = rep.Max <= Target && rep.FailedReads == 0 && rep.MixedReads == 0
	return rep, nil
}
