package cobbled

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/internal/batch"
)

// The kill -9 tests re-run this test binary as a child process: a serving
// node whose ingest loop (Run) follows the real control plane, served by the
// parent on 127.0.0.1, and SIGKILLs itself at a chosen point of an apply.
// The parent then reopens the data directory and checks that the replica is
// exactly at a batch boundary, and that running the loop again finishes the
// log with the right contents and no batch lost or applied twice.

const (
	envCrashDir   = "COBBLED_CRASH_DIR"
	envCrashPoint = "COBBLED_CRASH_POINT"
	envCrashHit   = "COBBLED_CRASH_HIT"
	envCrashCtl   = "COBBLED_CRASH_CONTROL"
)

type crashSetup struct {
	Parts, P int
	Batches  []Batch
}

func TestCrashChild(t *testing.T) {
	dir := os.Getenv(envCrashDir)
	if dir == "" {
		t.Skip("child process of TestKill9DuringIngest")
	}
	var setup crashSetup
	b, err := os.ReadFile(filepath.Join(dir, "setup.json"))
	must(t, err)
	must(t, json.Unmarshal(b, &setup))
	point, hit := os.Getenv(envCrashPoint), 0
	want, _ := strconv.Atoi(os.Getenv(envCrashHit))
	crashHook = func(p string) {
		if p == point {
			if hit++; hit == want {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // never returns
			}
		}
	}
	cc, err := control.Dial(os.Getenv(envCrashCtl), nil)
	must(t, err)
	n := openTestNode(t, filepath.Join(dir, "node"), filepath.Join(dir, "objects"), setup.Parts,
		func(o *Options) {
			o.Control = FromControlClient(cc)
			fastRun(o)
			o.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
		})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	waitFor(t, "the whole log", 30*time.Second, func() bool {
		return n.part(setup.P) != nil && n.part(setup.P).applied.Load() == int64(len(setup.Batches))
	})
	cancel()
	<-done
	n.Close()
	t.Fatalf("crash point %s hit %d times, wanted %d", point, hit, want)
}

// crashCase is a crash point and where the replica must be after restart.
type crashCase struct {
	point string
	hit   int
	// at is the seq the replica must be at after restart (the crashed
	// batch is seq at+1), reconciled whether the restart records batch
	// at+1 from the meta key rather than applying it.
	at         int64
	reconciled bool
}

func TestKill9DuringIngest(t *testing.T) {
	// Batch seqs: 1 snapshot, 2 delta, 3 delta, 4 snapshot, 5 delta, 6 delta,
	// 7 snapshot, 8 delta.
	runCrashCases(t, nil, []crashCase{
		{"staged", 2, 1, false},              // files downloaded, delta seq 2 not ingested
		{"delta-before-ingest", 4, 5, false}, // delta seq 6
		{"delta-after-ingest", 1, 1, true},   // delta seq 2 ingested, not recorded
		{"delta-after-ingest", 5, 7, true},   // delta seq 8, after two swaps
		{"snapshot-built", 2, 3, false},      // snapshot seq 4 built, not recorded
		{"snapshot-recorded", 2, 4, false},   // seq 4 recorded, old generation still open
		{"snapshot-old-closed", 2, 7, false}, // seq 7 swapped in, old generation not deleted (seq 1 had none to close)
	})
}

// TestKill9DuringIngestPublications: the same log interleaving two
// publications, each batch applying to its own publication's database
// only; after a kill -9 anywhere, each publication is exactly at a batch
// boundary and the other is untouched.
func TestKill9DuringIngestPublications(t *testing.T) {
	const a, b = "cv1/m", "cv2/m"
	// Seqs: 1 snapshot a, 2 delta a, 3 delta b (passed: b has no
	// database yet), 4 snapshot b, 5 delta a, 6 delta b, 7 snapshot a
	// (replaces a only), 8 delta b.
	pubs := []string{a, a, b, b, a, b, a, b}
	runCrashCases(t, pubs, []crashCase{
		{"staged", 4, 4, false},              // delta seq 5 (a) staged (seq 3 was never downloaded)
		{"delta-after-ingest", 1, 1, true},   // delta seq 2 (a) ingested, not recorded
		{"delta-after-ingest", 3, 5, true},   // delta seq 6 (b)
		{"delta-after-ingest", 4, 7, true},   // delta seq 8 (b), after a's swap
		{"snapshot-built", 2, 3, false},      // snapshot seq 4 (b, its first) built, not recorded
		{"snapshot-recorded", 3, 7, false},   // seq 7 (a) recorded, a's old generation still open
		{"snapshot-old-closed", 1, 7, false}, // seq 7 (a) swapped in, a's old generation not deleted
	})
}

// runCrashCases runs testSteps as the log of one partition, batch i of
// publication pubs[i] (nil: all the legacy "" publication), killing a
// child node at each case's point.
func runCrashCases(t *testing.T, pubs []string, cases []crashCase) {
	const parts, p = 4, 3
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s-%d", c.point, c.hit), func(t *testing.T) {
			dir := t.TempDir()
			objects := filepath.Join(dir, "objects")
			steps, universe := testSteps(p, parts)
			bs, models, passed := writePubSteps(t, objects, parts, p, "k", steps, pubs)
			setup, _ := json.Marshal(crashSetup{Parts: parts, P: p, Batches: bs})
			must(t, os.WriteFile(filepath.Join(dir, "setup.json"), setup, 0o644))
			ctx := context.Background()
			addr, cc := startControl(t, ctx, dir, parts)
			for _, b := range bs {
				seq, err := cc.RegisterBatch(ctx, &b.Manifest)
				must(t, err)
				if seq != b.Seq {
					t.Fatalf("control plane gave seq %d to batch %s, want %d", seq, b.Manifest.ID, b.Seq)
				}
			}

			cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), envCrashDir+"="+dir, envCrashPoint+"="+c.point,
				envCrashHit+"="+strconv.Itoa(c.hit), envCrashCtl+"="+addr)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("child did not die of SIGKILL: %v\n%s", err, out)
			}

			n := openTestNode(t, filepath.Join(dir, "node"), objects, parts,
				func(o *Options) { o.Control = FromControlClient(cc); fastRun(o) })
			defer n.Close()
			pt := n.part(p)
			if got := pt.applied.Load(); got != c.at {
				t.Fatalf("after restart: applied seq %d, want %d", got, c.at)
			}
			// Contents are exactly those of a batch boundary: seq at, or at+1
			// when the crash came after a delta's atomic ingest.
			at := c.at
			if c.reconciled {
				at++
				crashed := bs[c.at].Manifest
				if pt.meta[crashed.Publication] != crashed.ID {
					t.Fatalf("meta key of publication %q: %q, want batch %q", crashed.Publication, pt.meta[crashed.Publication], crashed.ID)
				}
			}
			checkPubModels(t, n, p, universe, models[at])
			gens, _ := filepath.Glob(filepath.Join(dir, "node", partDirName(p), "db-*"))
			if len(gens) != len(models[at]) {
				t.Fatalf("generations on disk after restart: %v, want one per publication with data (%d)", gens, len(models[at]))
			}
			// Finish the log with the ingest loop: every batch applied exactly
			// once, and the control plane told.
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- n.Run(rctx) }()
			waitFor(t, "the control plane to see the whole log applied", 30*time.Second, func() bool {
				r, err := cc.GetRouting(ctx)
				return err == nil && len(r.Replicas[p]) == 1 && r.Replicas[p][0].AppliedSeq == int64(len(bs))
			})
			cancel()
			must(t, <-done)
			checkPubModels(t, n, p, universe, models[len(bs)])
			reconciled := counterValue(n.opts.Metrics.reconciled)
			wantApplies := len(bs) - int(c.at)
			for _, b := range bs[c.at:] {
				if passed[b.Seq] {
					wantApplies--
				}
			}
			if c.reconciled {
				wantApplies--
				if reconciled != 1 {
					t.Fatalf("reconciled %v batches, want 1", reconciled)
				}
			} else if reconciled != 0 {
				t.Fatalf("reconciled %v batches, want 0", reconciled)
			}
			m := n.opts.Metrics.batchesApplied
			if got := counterValue(m.WithLabelValues("delta")) + counterValue(m.WithLabelValues("snapshot")); int(got) != wantApplies {
				t.Fatalf("applied %v batches after restart, want %d", got, wantApplies)
			}
		})
	}
}

// writePubSteps is writeSteps with batch i in publication pubs[i] (nil:
// all ""); models[i] maps each publication with data to its contents
// after batch seq i. A delta of a named publication without a snapshot yet
// is passed by the node (passed[seq]); the legacy publication's first
// delta starts an empty database.
func writePubSteps(t testing.TB, objects string, parts, p int, prefix string, steps []step, pubs []string) ([]Batch, []map[string]model, map[int64]bool) {
	models := []map[string]model{{}}
	passed := map[int64]bool{}
	var bs []Batch
	for i, s := range steps {
		pub := ""
		if pubs != nil {
			pub = pubs[i]
		}
		m := writePubBatch(t, objects, parts, p, fmt.Sprintf("%s-%02d", prefix, i+1), s.kind, pub, s.ops, 0)
		bs = append(bs, Batch{Seq: int64(i + 1), Manifest: m})
		next := map[string]model{}
		for k, v := range models[i] {
			next[k] = v
		}
		if _, ok := next[pub]; !ok && pub != "" && s.kind == batch.KindDelta {
			passed[int64(i+1)] = true
		} else {
			next[pub] = models[i][pub].apply(s.kind, s.ops)
		}
		models = append(models, next)
	}
	return bs, models, passed
}

// checkPubModels compares every publication's contents with want.
func checkPubModels(t testing.TB, n *Node, p int, universe []string, want map[string]model) {
	t.Helper()
	for pub, m := range want {
		keys := make([][]byte, len(universe))
		for i, k := range universe {
			keys[i] = []byte(k)
		}
		err := n.MultiGetVersion(p, pub, keys, func(i int, v []byte, found bool) {
			w, ok := m[universe[i]]
			if found != ok || string(v) != w {
				t.Errorf("publication %q partition %d key %x: got (%q, %v), want (%q, %v)", pub, p, universe[i], v, found, w, ok)
			}
		})
		if err != nil {
			t.Fatalf("publication %q: %v", pub, err)
		}
	}
}

// counterValue reads a counter's value.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}
