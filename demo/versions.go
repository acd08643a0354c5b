package demo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/cobbled/router"
	"github.com/pillarkit/pillar/jobs/embedder"
	"github.com/pillarkit/pillar/jobs/pipeline"
	"github.com/pillarkit/pillar/pillar"
)

// Versions is what step 5 (serving versions) measured.
type Versions struct {
	V1, V2 string // publication ids
	// Candidate: every exported page read by name from the candidate.
	CandidateVerified int
	// A/B: requests through a router sending CandidateFraction of them to
	// the candidate, and how many were answered by it.
	ABFraction         float64
	ABReads, ABFromV2  int
	Promote            time.Duration // `pillar promote` started → every read returns v2
	Rollback           time.Duration // `pillar rollback` started → every read returns v1
	RollForward        time.Duration // `pillar rollback` again → every read returns v2
	RollbackCommand    time.Duration // the whole rollback command (serving + store)
	RollbackState      string        // what the store's rollback diffed against (pipeline.StateSaved)
	RollbackQueued     int           // puts + deletes the store's rollback queued
	BatchesOnRollback  int64         // batches registered by rollback and roll-forward (no export: 0)
	ReadsDuring        int           // background reads over the whole step
	FailedDuring       int
	WrongVersionDuring int // a read of the live publication answered by another one
	// Bytes is each retained publication's databases per node (all its
	// partitions), as the nodes report them, after the cycle.
	Bytes map[string]map[string]int64
	// Status is the publication table of `pillar status` after the cycle.
	Status string
}

// pillarCmd runs the pillar binary and returns its standard output.
func (d *demo) pillarCmd(args ...string) (string, error) {
	wait, err := d.pillarStart(args...)
	if err != nil {
		return "", err
	}
	return wait()
}

// pillarStart starts the pillar binary; wait returns its standard output
// (an error carries the tail of both outputs).
func (d *demo) pillarStart(args ...string) (wait func() (string, error), err error) {
	cmd := exec.CommandContext(d.ctx, d.o.Pillar, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("pillar %s: %w", strings.Join(args, " "), err)
	}
	return func() (string, error) {
		if err := cmd.Wait(); err != nil {
			return out.String(), fmt.Errorf("pillar %s: %w\n%s\n%s", strings.Join(args, " "), err, tail(out.String(), 1000), tail(errb.String(), 2000))
		}
		return out.String(), nil
	}, nil
}

// parseRollback reads `pillar rollback --json`.
func parseRollback(out string) (*rollbackJSON, error) {
	var r rollbackJSON
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return nil, fmt.Errorf("pillar rollback --json: %w: %s", err, tail(out, 500))
	}
	return &r, nil
}

type rollbackJSON struct {
	Live  string `json:"live"`
	Store struct {
		ExportState string `json:"export_state"`
		Export      struct {
			Puts    int  `json:"puts"`
			Deletes int  `json:"deletes"`
			Bulk    bool `json:"bulk"`
		} `json:"export"`
	} `json:"store"`
}

// bgReader reads random batches of keys through the router (the live
// publication) until stopped, counting failures and reads that another
// publication than the live one answered.
type bgReader struct {
	mu           sync.Mutex
	reads, fails int
	wrong        int
	firstErr     error
	allowed      map[string]bool // publications a live read may come from now
	stop         chan struct{}
	wg           sync.WaitGroup
}

func (d *demo) startReader(keys [][]byte, lat *Latencies, live ...string) *bgReader {
	b := &bgReader{stop: make(chan struct{}), allowed: map[string]bool{}}
	b.allow(live...)
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		rng := rand.New(rand.NewSource(5))
		for {
			select {
			case <-b.stop:
				return
			default:
			}
			batch := make([][]byte, 12)
			for i := range batch {
				batch[i] = keys[rng.Intn(len(keys))]
			}
			t0 := time.Now()
			resp, err := d.rt.Read(d.ctx, batch, nil)
			lat.Add(time.Since(t0))
			if err == nil {
				for _, r := range resp.Results {
					if r.Err != nil || !r.Found {
						err = fmt.Errorf("found=%v err=%v", r.Found, r.Err)
						break
					}
				}
			}
			b.mu.Lock()
			b.reads++
			switch {
			case err != nil:
				b.fails++
				if b.firstErr == nil {
					b.firstErr = err
				}
			case !b.allowed[resp.Version]:
				b.wrong++
				if b.firstErr == nil {
					b.firstErr = fmt.Errorf("a live read was answered by %q", resp.Version)
				}
			}
			b.mu.Unlock()
		}
	}()
	return b
}

// allow sets the publications live reads may come from (both around a
// switch, until it is measured complete).
func (b *bgReader) allow(ids ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.allowed = map[string]bool{}
	for _, id := range ids {
		b.allowed[id] = true
	}
}

func (b *bgReader) finish() (reads, fails, wrong int, first error) {
	close(b.stop)
	b.wg.Wait()
	return b.reads, b.fails, b.wrong, b.firstErr
}

// waitServed reads through the router from start on until every key of a
// read comes from target, then checks that the next 50 reads do too, and
// returns the time from start to the first such read.
func (d *demo) waitServed(start time.Time, keys [][]byte, target string, timeout time.Duration) (time.Duration, error) {
	probe := keys[:min(len(keys), 12)]
	for {
		resp, err := d.rt.Read(d.ctx, probe, nil)
		if err == nil && resp.Version == target {
			took := time.Since(start)
			for i := 0; i < 50; i++ {
				resp, err := d.rt.Read(d.ctx, keys[(i*12)%len(keys):min(len(keys), (i*12)%len(keys)+12)], nil)
				if err != nil {
					return took, fmt.Errorf("read after the switch to %s: %w", target, err)
				}
				if resp.Version != target {
					return took, fmt.Errorf("a read after the switch to %s came from %s", target, resp.Version)
				}
			}
			return took, nil
		}
		if time.Since(start) > timeout {
			return 0, fmt.Errorf("reads did not switch to %s within %s (last: %q, %v)", target, timeout, respVersion(resp), err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// newestTotal sums the partitions' newest seqs: batches registered so far.
func (d *demo) newestTotal() (int64, error) {
	r, err := d.cl.client.GetRouting(d.ctx)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, s := range r.NewestSeq {
		n += s
	}
	return n, nil
}

// step5 is the serving-versions cycle, with a reader running throughout:
// v2 published as a candidate (v1 stays live), a slice of traffic read
// from it, promoted, rolled back to v1 in seconds with no export, rolled
// forward. Each switch is timed from the command's start until every
// router read returns the other publication.
func (d *demo) step5() error {
	return d.stage("5. serving versions: v2 as candidate, A/B slice, promote, rollback to v1 (no export), roll forward", func() error {
		vr := &d.rep.Versions2
		want, err := d.exportedPages()
		if err != nil {
			return err
		}
		keys := make([][]byte, 0, len(want))
		for k := range want {
			kk, _ := pillar.ParseKey(k)
			keys = append(keys, append([]byte(nil), kk[:]...))
		}
		if len(keys) == 0 {
			return errors.New("no exported page to read")
		}
		_, live, err := d.cl.client.ListPublications(d.ctx)
		if err != nil {
			return err
		}
		vr.V1 = live
		bg := d.startReader(keys, &d.rep.ReadsDuring, vr.V1)
		done := false
		var firstBad error
		finish := func() {
			if !done {
				done = true
				vr.ReadsDuring, vr.FailedDuring, vr.WrongVersionDuring, firstBad = bg.finish()
			}
		}
		defer finish()
		o := pipeline.Options{Logger: d.o.Logger}
		r, err := pipeline.Rechunk(d.ctx, d.st, chunkerV2, o)
		if err != nil {
			return err
		}
		d.rep.ChunksV2 = r.Rows
		d.rep.Versions[1] = r.Version
		d.say("    chunk version %s: %d chunks", r.Version, r.Rows)
		if _, err := pipeline.Embed(d.ctx, d.st, r.Version, model, o); err != nil {
			return err
		}
		// 1. Publish v2 as the candidate: the user's command.
		drained, err := d.drainLorry()
		if err != nil {
			return err
		}
		t0 := time.Now()
		out, err := d.pillarCmd(append([]string{"publish", "--store", d.storeDir(), "--chunks", r.Version, "--model", model,
			"--serve", "--objstore", d.objURL, "--control", d.cl.control, "--wait", "3m"}, d.cl.adminFlags...)...)
		if err != nil {
			return err
		}
		vr.V2 = pillar.EmbedVersionID(r.Version, resolveModel(model))
		d.rep.ConvergeBulk2 = time.Since(t0)
		d.say("    `pillar publish --serve --wait` (Lorry drained first: %d batches): %s in %s", drained, lastLine(out), time.Since(t0).Round(time.Millisecond))
		ps, err := d.publication(vr.V2)
		if err != nil {
			return err
		}
		if ps.Role != control.RoleCandidate || !ps.Ready {
			return fmt.Errorf("after publish --serve --wait, %s is %s (ready %v), want a ready candidate", vr.V2, ps.Role, ps.Ready)
		}
		// 2. A slice of traffic from the candidate.
		n, err := d.readAllAs(want, r.Version, nil, &router.ReadOptions{Version: "candidate"})
		if err != nil {
			return fmt.Errorf("reading the candidate by name: %w", err)
		}
		vr.CandidateVerified = n
		vr.ABFraction = 0.25
		ab, err := router.New(d.ctx, router.Options{Source: d.cl.client, Zone: "b", Partitions: d.o.Partitions, Logger: d.o.Logger, CandidateFraction: vr.ABFraction, NodeTLS: d.cl.nodeTLS})
		if err != nil {
			return err
		}
		for i := 0; i < 400; i++ {
			resp, err := ab.Read(d.ctx, keys[(i*12)%len(keys):min(len(keys), (i*12)%len(keys)+12)], nil)
			if err != nil {
				ab.Close()
				return fmt.Errorf("A/B read: %w", err)
			}
			vr.ABReads++
			if resp.Version == vr.V2 {
				vr.ABFromV2++
			}
		}
		ab.Close()
		d.say("    candidate read by name: all %d pages carry chunk version %s; A/B router (fraction %.2f): %d of %d requests answered by the candidate",
			n, r.Version, vr.ABFraction, vr.ABFromV2, vr.ABReads)
		if vr.ABFromV2 == 0 || vr.ABFromV2 == vr.ABReads {
			return fmt.Errorf("the A/B router sent %d of %d requests to the candidate at fraction %.2f", vr.ABFromV2, vr.ABReads, vr.ABFraction)
		}
		// 3. Promote.
		bg.allow(vr.V1, vr.V2)
		t0 = time.Now()
		wait, err := d.pillarStart(append([]string{"promote", "--store", d.storeDir(), "--control", d.cl.control}, d.cl.adminFlags...)...)
		if err != nil {
			return err
		}
		vr.Promote, err = d.waitServed(t0, keys, vr.V2, 30*time.Second)
		out, werr := wait()
		if err == nil {
			err = werr
		}
		if err != nil {
			return err
		}
		bg.allow(vr.V2)
		d.say("    `pillar promote`: %s; every read returns v2 %s after the command started", lastLine(out), vr.Promote.Round(time.Millisecond))
		// 4. Roll back to v1: serving and store in one command, no export.
		before, err := d.newestTotal()
		if err != nil {
			return err
		}
		bg.allow(vr.V1, vr.V2)
		t0 = time.Now()
		wait, err = d.pillarStart(append([]string{"rollback", "--store", d.storeDir(), "--control", d.cl.control, "--json"}, d.cl.adminFlags...)...)
		if err != nil {
			return err
		}
		vr.Rollback, err = d.waitServed(t0, keys, vr.V1, 30*time.Second)
		out, werr = wait()
		vr.RollbackCommand = time.Since(t0)
		if err == nil {
			err = werr
		}
		if err != nil {
			return err
		}
		bg.allow(vr.V1)
		rb, err := parseRollback(out)
		if err != nil {
			return err
		}
		vr.RollbackState, vr.RollbackQueued = rb.Store.ExportState, rb.Store.Export.Puts+rb.Store.Export.Deletes
		if rb.Store.ExportState != pipeline.StateSaved || rb.Store.Export.Bulk {
			return fmt.Errorf("the store's rollback diffed against %q (bulk %v): want the saved export state and no rebuild", rb.Store.ExportState, rb.Store.Export.Bulk)
		}
		if _, err := d.readAll(want, d.rep.Versions[0], nil); err != nil {
			return fmt.Errorf("after rollback: %w", err)
		}
		d.say("    `pillar rollback`: every read returns v1 %s after the command started (command done in %s; store against its saved export state, %d records queued; no export, no SST build)",
			vr.Rollback.Round(time.Millisecond), vr.RollbackCommand.Round(time.Millisecond), vr.RollbackQueued)
		// 5. Roll forward.
		bg.allow(vr.V1, vr.V2)
		t0 = time.Now()
		wait, err = d.pillarStart(append([]string{"rollback", "--store", d.storeDir(), "--control", d.cl.control}, d.cl.adminFlags...)...)
		if err != nil {
			return err
		}
		vr.RollForward, err = d.waitServed(t0, keys, vr.V2, 30*time.Second)
		out, werr = wait()
		if err == nil {
			err = werr
		}
		if err != nil {
			return err
		}
		bg.allow(vr.V2)
		after, err := d.newestTotal()
		if err != nil {
			return err
		}
		vr.BatchesOnRollback = after - before
		if vr.BatchesOnRollback != 0 {
			return fmt.Errorf("rollback and roll-forward registered %d batches: want none (no export)", vr.BatchesOnRollback)
		}
		d.say("    roll forward (`pillar rollback` again): every read returns v2 %s after the command started", vr.RollForward.Round(time.Millisecond))
		finish()
		d.rep.FailedDuring = vr.FailedDuring
		d.say("    %d batch reads during the whole cycle: %d failed, %d answered by a publication that was not live", vr.ReadsDuring, vr.FailedDuring, vr.WrongVersionDuring)
		if vr.FailedDuring > 0 || vr.WrongVersionDuring > 0 {
			return fmt.Errorf("%d reads failed and %d came from the wrong publication during the cycle (first: %v)", vr.FailedDuring, vr.WrongVersionDuring, firstBad)
		}
		if vr.ReadsDuring == 0 {
			return errors.New("no read ran during the cycle: the no-failed-reads check would test nothing")
		}
		n, err = d.readAll(want, r.Version, nil)
		if err != nil {
			return err
		}
		d.say("    all %d records now carry chunk version %s", n, r.Version)
		// Disk: what each retained publication takes on each node.
		pubs, _, err := d.cl.client.ListPublications(d.ctx)
		if err != nil {
			return err
		}
		vr.Bytes = map[string]map[string]int64{}
		for _, p := range pubs {
			if p.Role == control.RoleRetired {
				continue
			}
			vr.Bytes[p.ID] = map[string]int64{}
			for _, rep := range p.Replicas {
				vr.Bytes[p.ID][rep.NodeID] += rep.Bytes
			}
		}
		out, err = d.pillarCmd(append([]string{"status", "--control", d.cl.control}, d.cl.adminFlags...)...)
		if err != nil {
			return err
		}
		if i := strings.Index(out, "PUBLICATION"); i >= 0 {
			vr.Status = strings.TrimSpace(out[i:])
			d.say("    `pillar status`:\n      %s", indent(vr.Status, "      "))
		}
		return nil
	})
}

func (d *demo) publication(id string) (*control.PublicationStatus, error) {
	pubs, _, err := d.cl.client.ListPublications(d.ctx)
	if err != nil {
		return nil, err
	}
	for i := range pubs {
		if pubs[i].ID == id {
			return &pubs[i], nil
		}
	}
	return nil, fmt.Errorf("publication %s is not registered", id)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// resolveModel turns the demo's model spec into its id, as the pipeline
// does.
func resolveModel(spec string) string {
	e, err := embedder.Parse(spec, nil)
	if err != nil {
		return spec
	}
	return e.ID()
}

// respVersion is the version of a response, or "" without one.
func respVersion(r *router.Response) string {
	if r == nil {
		return ""
	}
	return r.Version
}
