package netns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/lorry"
)

// Options configure a run.
type Options struct {
	// Pillar is the pillar binary every component runs. Required.
	Pillar string
	// Versitygw is the S3 server binary. The default value is what
	// internal/s3test finds ($PILLAR_VERSITYGW, bin/versitygw, $PATH).
	Versitygw string
	// Seed drives the writer, the readers and the order of repeated
	// scenarios. The default value is derived from the clock (and printed).
	Seed int64
	// Duration is the long version's length: every scenario once with its
	// full fault durations (30 s cuts, 60 s outages and packet loss), then
	// seeded repeats until Duration has passed. 0 (the default) runs the
	// short version: every scenario once, faults of 8–15 s (about 4 minutes
	// in all on 2 cores).
	Duration time.Duration
	// Scenarios are the scenarios run, by name (see Scenarios). The default
	// value is all of them.
	Scenarios []string
	// Dir holds the cluster's files and logs. The default value is a new
	// temporary folder, removed after a passing run unless Keep.
	Dir string
	// Keep leaves the cluster up after the checks (processes, namespaces,
	// files) until the context is cancelled, so a person can poke at it. The
	// default value is false.
	Keep bool
	// Partitions of the serving tier. The default value is 4.
	Partitions int
	// Keys is the size of the key space. The default value is 400.
	Keys int
	// CommitsPerSecond is the writer's rate. The default value is 4.
	CommitsPerSecond float64
	// NetID (1..250) picks the subnet 10.NetID.0.0/24 and the names'
	// prefix "pn<NetID>". The default value is derived from the process id.
	NetID int
	// Sabotage breaks the run on purpose to show the checks catch it:
	// SabotageLoseRange deletes a contiguous range of keys from one replica
	// of one partition after it caught up (while the node is down, from its
	// RocksDB), then restarts it. The default value is "".
	Sabotage string
	// Stdout receives progress lines and the summary. The default value
	// discards.
	Stdout io.Writer
	// Logger receives debug logs. The default value discards.
	Logger *slog.Logger
}

// SabotageLoseRange is the Options.Sabotage that loses a key range on one
// replica.
const SabotageLoseRange = "lose-range"

func (o *Options) defaults() error {
	if o.Pillar == "" {
		return errors.New("netns: Options.Pillar (the pillar binary) is required")
	}
	if o.Seed == 0 {
		o.Seed = time.Now().UnixNano() % 1_000_000_007
	}
	if o.Scenarios == nil {
		for _, s := range Scenarios {
			o.Scenarios = append(o.Scenarios, s.Name)
		}
	}
	for _, n := range o.Scenarios {
		if scenarioByName(n) == nil {
			return fmt.Errorf("netns: scenario %q: want one of %s", n, strings.Join(ScenarioNames(), ", "))
		}
	}
	if o.Partitions == 0 {
		o.Partitions = 4
	}
	if o.Keys == 0 {
		o.Keys = 400
	}
	if o.CommitsPerSecond == 0 {
		o.CommitsPerSecond = 4
	}
	if o.NetID == 0 {
		o.NetID = 20 + os.Getpid()%200
	}
	switch {
	case o.Partitions < 1 || o.Partitions > 64:
		return fmt.Errorf("netns: partitions %d: want 1..64", o.Partitions)
	case o.Keys < 20 || o.Keys > 20000:
		return fmt.Errorf("netns: keys %d: want 20..20000", o.Keys)
	case o.NetID < 1 || o.NetID > 250:
		return fmt.Errorf("netns: net id %d: want 1..250", o.NetID)
	case o.Duration != 0 && o.Duration < 5*time.Minute:
		return fmt.Errorf("netns: duration %s: the long version needs at least 5m (0 runs the short one)", o.Duration)
	case o.Sabotage != "" && o.Sabotage != SabotageLoseRange:
		return fmt.Errorf("netns: sabotage %q: want %q or nothing", o.Sabotage, SabotageLoseRange)
	}
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// run is one run in progress.
type run struct {
	o   Options
	c   *cluster
	h   *history
	ks  *keySpace
	w   *writer
	sum *Summary
	rng *rand.Rand

	window atomic.Pointer[string] // the scenario in force, for the reads
	latMu  sync.Mutex
	lat    map[string][]time.Duration // router read latencies per window
	pubN   int
	live   string
}

func (r *run) say(format string, a ...any) {
	fmt.Fprintf(r.o.Stdout, "%s  %s\n", time.Now().UTC().Format("15:04:05.0"), fmt.Sprintf(format, a...))
}

func (r *run) setWindow(w string) { r.window.Store(&w) }

func (r *run) short() bool { return r.o.Duration == 0 }

// d is a fault duration: long in the long version, short in the short one.
func (r *run) d(long, short time.Duration) time.Duration {
	if r.short() {
		return short
	}
	return long
}

// Run builds the cluster, runs the scenarios, heals, checks and returns the
// summary. The error is non-nil when the run could not be carried out or a
// check failed. Every process is killed and every namespace deleted before
// Run returns (after ctx ends, with Keep).
func Run(ctx context.Context, opts Options) (*Summary, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	if why := Available(); why != "" {
		return nil, fmt.Errorf("netns: %s", why)
	}
	r := &run{o: opts, ks: newKeySpace(opts.Keys), sum: &Summary{Seed: opts.Seed, Started: time.Now()},
		rng: rand.New(rand.NewPCG(uint64(opts.Seed), 9)), lat: map[string][]time.Duration{}}
	r.h = newHistory(r.ks, opts.Partitions)
	r.setWindow("setup")
	dir := opts.Dir
	var err error
	if dir == "" {
		if dir, err = os.MkdirTemp("", "pillar-netns-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil { // PostgreSQL's user reads under it
		return nil, err
	}
	net, err := newNetwork(opts.NetID)
	if err != nil {
		return nil, err
	}
	r.c = &cluster{o: &r.o, dir: dir, net: net, say: r.say}
	defer func() {
		r.c.stop()
		if err := net.close(); err != nil {
			r.say("teardown: %v", err)
		}
	}()
	mode := "short version"
	if !r.short() {
		mode = "long version, " + opts.Duration.String()
	}
	r.say("netns: seed %d, %s, scenarios %s, %d partitions, %d keys, subnet %s.0/24",
		opts.Seed, mode, strings.Join(opts.Scenarios, ","), opts.Partitions, opts.Keys, net.subnet)
	err = r.exercise(ctx)
	if err != nil {
		r.sum.Error = err.Error()
	}
	r.sum.Took = time.Since(r.sum.Started)
	r.sum.Write(opts.Stdout)
	if err == nil && !r.sum.Passed() {
		err = fmt.Errorf("netns: seed %d: checks failed (replay: pillar chaos --netns --seed %d; files: %s)", opts.Seed, opts.Seed, dir)
	} else if err != nil {
		err = fmt.Errorf("netns: seed %d: %w (files: %s)", opts.Seed, err, dir)
	}
	if opts.Keep {
		r.say("cluster kept up: control %s, router %s (zone a), nodes %s; certificates in %s; Ctrl-C tears it down",
			r.c.ctlAddr(), r.c.rtHost.ip+":"+routePort, r.nodeList(), r.c.certs)
		<-ctx.Done()
	}
	if err == nil && opts.Dir == "" && !opts.Keep {
		os.RemoveAll(dir)
	}
	return r.sum, err
}

func (r *run) nodeList() string {
	var s []string
	for _, n := range r.c.nodes {
		s = append(s, fmt.Sprintf("%s=%s(zone %s, ns %s)", n.id, n.addr(), n.zone, n.h.name))
	}
	return strings.Join(s, " ")
}

func (r *run) exercise(ctx context.Context) error {
	if err := r.c.start(ctx); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	var err error
	if r.w, err = newWriter(r.c, r.h, r.ks, r.o.Seed); err != nil {
		return err
	}
	defer r.w.close()
	if err := r.waitAssigned(ctx, 90*time.Second); err != nil {
		return err
	}
	if err := r.publishNext(ctx); err != nil {
		return fmt.Errorf("first publication: %w", err)
	}
	if _, err := r.waitConverged(ctx, 2*time.Minute); err != nil {
		return fmt.Errorf("first publication: %w", err)
	}
	r.say("up: %s; %s live on every replica", r.nodeList(), r.live)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); r.w.loop(ctx, stop) }()
	go func() { defer wg.Done(); r.readLoop(ctx, stop) }()
	go func() { defer wg.Done(); r.supervise(ctx, stop) }()
	defer func() { close(stop); wg.Wait() }()

	plan := r.plan()
	for _, s := range plan {
		if err := r.runScenario(ctx, s); err != nil {
			return err
		}
	}
	r.setWindow("final")
	// The writer stops; everything delivered and applied, then the checks.
	r.w.mu.Lock()
	r.w.pub = "" // commits become no-ops
	r.w.mu.Unlock()
	if r.o.Sabotage == SabotageLoseRange {
		if err := r.sabotage(ctx); err != nil {
			return fmt.Errorf("sabotage: %w", err)
		}
	}
	took, err := r.waitConverged(ctx, 3*time.Minute)
	if err != nil {
		return err
	}
	r.say("converged %s after the last scenario; checking", took.Round(time.Millisecond))
	r.checkIdentical(ctx)
	r.checkOnce(ctx)
	r.sum.fromHistory(r.h)
	for _, p := range r.c.allProcs() {
		r.sum.Crashes += p.crashes
	}
	return nil
}

// plan is the order of scenarios: each chosen one once (the vanishing node
// last, as it changes the cluster), then in the long version seeded
// repeats of the others until Duration has passed.
func (r *run) plan() []*Scenario {
	var out []*Scenario
	var last *Scenario
	for _, n := range r.o.Scenarios {
		s := scenarioByName(n)
		if s.Name == ScenarioNodeVanishes {
			last = s
			continue
		}
		out = append(out, s)
	}
	if !r.short() && len(out) > 0 {
		// Estimated: the first round of the long version takes about 7
		// minutes on 2 cores; repeats fill what is left.
		var rep []*Scenario
		budget := r.o.Duration - 7*time.Minute
		for t := time.Duration(0); t < budget; t += 90 * time.Second {
			rep = append(rep, out[r.rng.IntN(len(out))])
		}
		out = append(out, rep...)
	}
	if last != nil {
		out = append(out, last)
	}
	return out
}

func (r *run) runScenario(ctx context.Context, s *Scenario) error {
	n := len(r.sum.Scenarios) + 1
	win := fmt.Sprintf("%d-%s", n, s.Name)
	r.setWindow(win)
	r.say("scenario %s: %s", win, s.Summary)
	start := time.Now()
	res := &ScenarioResult{Name: s.Name, Window: win}
	before := r.h.countOf(CheckScenario)
	note, err := s.run(ctx, r, res)
	if err != nil {
		return fmt.Errorf("scenario %s: %w", win, err)
	}
	r.setWindow(win + " heal")
	took, err := r.waitConverged(ctx, 3*time.Minute)
	if err != nil {
		r.h.Violate(CheckScenario, "%s: not converged after the heal: %v", win, err)
	}
	res.Converge = took
	res.Took = time.Since(start)
	res.Note = note
	res.Failed, res.FirstError = r.h.failed(win)
	res.OK = r.h.countOf(CheckScenario) == before
	r.sum.Scenarios = append(r.sum.Scenarios, *res)
	r.say("scenario %s: %s; converged %s after the heal", win, note, took.Round(time.Millisecond))
	return nil
}

// readLoop reads batches of 12 random keys through the router from the
// client's host (zone a), one at a time, checking every answer.
func (r *run) readLoop(ctx context.Context, stop <-chan struct{}) {
	cl, closeFn, err := r.c.dialServe(r.c.rtHost.ip + ":" + routePort)
	if err != nil {
		r.say("reader: %v", err)
		return
	}
	defer closeFn()
	rng := rand.New(rand.NewPCG(uint64(r.o.Seed), 5))
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
		win := *r.window.Load()
		idx := make([]int, 12)
		keys := make([][]byte, 12)
		for i := range idx {
			idx[i] = rng.IntN(len(r.ks.keys))
			keys[i] = r.ks.keys[idx[i]][:]
		}
		t0 := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := cl.BatchGet(cctx, &servepb.BatchGetRequest{Keys: keys})
		cancel()
		lat := time.Since(t0)
		if err == nil {
			for i, x := range resp.Results {
				if x.Status != servepb.KeyStatus_KEY_OK {
					err = fmt.Errorf("key %d: %s %s", idx[i], x.Status, x.Error)
					break
				}
			}
		}
		r.h.read(win, err)
		if err != nil {
			continue
		}
		r.latMu.Lock()
		r.lat[win] = append(r.lat[win], lat)
		r.latMu.Unlock()
		for i, x := range resp.Results {
			r.h.observe("router", resp.Version, idx[i], x.Found, x.Value)
		}
	}
}

// p99 of the router's read latencies in a window.
func (r *run) p99(win string) (time.Duration, int) {
	r.latMu.Lock()
	l := append([]time.Duration(nil), r.lat[win]...)
	r.latMu.Unlock()
	if len(l) == 0 {
		return 0, 0
	}
	sort.Slice(l, func(a, b int) bool { return l[a] < l[b] })
	return l[min(len(l)-1, len(l)*99/100)], len(l)
}

// supervise restarts a component that exited without being held down.
func (r *run) supervise(ctx context.Context, stop <-chan struct{}) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, p := range r.c.allProcs() {
			if p.reap() {
				r.say("supervisor: %s exited unexpectedly (%v); restarting", p.name, p.err)
				if err := p.start(); err != nil {
					r.say("supervisor: restart %s: %v", p.name, err)
				}
			}
		}
	}
}

func (c *cluster) allProcs() []*proc {
	ps := []*proc{c.pg, c.control, c.s3srv, c.lorry, c.router}
	for _, n := range c.nodes {
		ps = append(ps, n.p)
	}
	return ps
}

// publishNext publishes the next publication as a snapshot and makes it
// live: the first at once (nothing is live), later ones by `pillar promote
// --force` from the processing host, which the caller does.
func (r *run) publishNext(ctx context.Context) error {
	r.pubN++
	pub := fmt.Sprintf("netns/v%d", r.pubN)
	if err := r.w.publish(ctx, pub); err != nil {
		return err
	}
	if r.pubN == 1 {
		r.live = pub
	}
	return nil
}

func (r *run) promote(ctx context.Context, pub string) error {
	if _, err := r.c.run(ctx, time.Minute, append([]string{"promote", "--publication", pub, "--force"}, r.c.adminFlags()...)...); err != nil {
		return err
	}
	r.live = pub
	return nil
}

// waitAssigned waits until every partition has a replica up on every node.
func (r *run) waitAssigned(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	why := ""
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		rt, err := r.c.admin.GetRouting(cctx)
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
				if up < 3 {
					why = fmt.Sprintf("partition %d: %d replicas up of 3", p, up)
					break
				}
			}
		}
		if why == "" {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("partitions not assigned within %s: %s", timeout, why)
}

// converged reports why the system has not converged ("" when it has):
// Lorry delivered the whole queue, every assigned replica is up, applied its
// partition's newest batch and holds the live publication.
func (r *run) converged(ctx context.Context) string {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ls, err := lorry.Status(cctx, r.c.store, time.Now())
	if err != nil {
		return "lorry status: " + err.Error()
	}
	for _, s := range ls {
		if s.Committed != s.QueueEnd || s.Pending != nil || s.FreshPending != nil {
			return fmt.Sprintf("partition %d: Lorry delivered up to %d of %d", s.Partition, s.Committed, s.QueueEnd)
		}
	}
	rt, err := r.c.admin.GetRouting(cctx)
	if err != nil {
		return "routing: " + err.Error()
	}
	for p, reps := range rt.Replicas {
		if len(reps) < 3 {
			return fmt.Sprintf("partition %d: %d replicas assigned", p, len(reps))
		}
		for _, rep := range reps {
			if rep.State != control.StateUp {
				return fmt.Sprintf("partition %d: replica %s is %s", p, rep.NodeID, rep.State)
			}
			if rep.AppliedSeq != rt.NewestSeq[p] {
				return fmt.Sprintf("partition %d: replica %s at seq %d of %d", p, rep.NodeID, rep.AppliedSeq, rt.NewestSeq[p])
			}
		}
	}
	pubs, live, err := r.c.admin.ListPublications(cctx)
	if err != nil {
		return "publications: " + err.Error()
	}
	if live != r.live {
		return fmt.Sprintf("live publication %q, want %q", live, r.live)
	}
	for _, ps := range pubs {
		if ps.ID == live && !ps.Ready {
			return fmt.Sprintf("live publication %s held by %d of %d replicas", live, ps.Holding, ps.Assigned)
		}
	}
	return ""
}

func (r *run) waitConverged(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	why := ""
	for time.Since(start) < timeout {
		if why = r.converged(ctx); why == "" {
			return time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return 0, fmt.Errorf("not converged within %s: %s", timeout, why)
}

// nodeByID finds a running node.
func (r *run) nodeByID(id string) *node {
	for _, n := range r.c.nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

func (r *run) zoneNodes(zone string) []*node {
	var out []*node
	for _, n := range r.c.nodes {
		if n.zone == zone {
			out = append(out, n)
		}
	}
	return out
}

// exportsDir is where snapshot exports are written.
func (r *run) exportsDir() string { return filepath.Join(r.c.dir, "exports") }
