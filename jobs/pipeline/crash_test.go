package pipeline

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.ytsaurus.tech/yt/go/mapreduce"

	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/local"
)

// reduceKiller SIGKILLs its own process right after its n-th Reduce or Map
// returns (its output written, not yet committed), as a crash would.
type reduceKiller struct {
	jobs.Runner
	calls, killAt int
}

func (k *reduceKiller) tick() {
	if k.calls++; k.calls == k.killAt {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
}

func (k *reduceKiller) Reduce(ctx context.Context, job mapreduce.Job, op *jobs.Op) error {
	err := k.Runner.Reduce(ctx, job, op)
	k.tick()
	return err
}

func (k *reduceKiller) Map(ctx context.Context, job mapreduce.Job, op *jobs.Op) error {
	err := k.Runner.Map(ctx, job, op)
	k.tick()
	return err
}

const crashPolicies = `
policies:
  - name: a
    exported: true
    where: url ~ "/page/(1|2|5|8)$"
  - name: b
    exported: true
    where: url ~ "/page/(2|3|13)$"
    top: {k: 2, per: host, by: text_len desc}
`

const crashPolicies2 = `
policies:
  - name: a
    exported: true
    where: url ~ "/page/(1|5|9|11)$"
  - name: b
    exported: true
    where: url ~ "/page/(2|3|13|21)$"
    top: {k: 3, per: host, by: text_len desc}
`

// crashState is what a crash test compares: subset meta generations, the
// member tables and export/state, and the queued records.
func crashState(t *testing.T, st pillar.Store) string {
	t.Helper()
	sn, err := st.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	var b strings.Builder
	for _, name := range []string{"a", "b"} {
		var m SubsetMeta
		if err := sn.Attr(ctx, AttrSubsetPrefix+name, &m); err == nil {
			fmt.Fprintf(&b, "subset %s gen %d size %d\n", name, m.Generation, m.Size)
		}
		ms, err := readMembers(ctx, sn, pillar.SubsetTable(name))
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range ms {
			fmt.Fprintf(&b, "  member %s %s\n", name, x.PageKey)
		}
	}
	err = eachRow(ctx, sn, TableExportState, true, func(s *ExportState) error {
		fmt.Fprintf(&b, "state %s %s\n", s.PageKey, s.RecordHash)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	q := queue(t, st, nil)
	sort.Strings(q)
	b.WriteString(strings.Join(q, "\n"))
	tabs, _ := sn.Tables(ctx)
	for _, ti := range tabs {
		if strings.HasPrefix(ti.Name, "tmp/") {
			fmt.Fprintf(&b, "\nscratch %s", ti.Name)
		}
	}
	return b.String()
}

// TestRecomputeCrashPoints kills a subset recompute (with export work
// queued) in a child process after each of its runner operations — the
// evaluation, top-K, membership, diff (with the membership deltas), export
// records, reconcile and any member table rewritten inside the final
// transaction — and checks that the store is
// exactly as before the recompute, that a re-run then completes, and that
// the result equals an uninterrupted run's.
func TestRecomputeCrashPoints(t *testing.T) {
	opts := Options{BulkMinPages: 1 << 30}
	asOf := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	if spec := os.Getenv("PILLAR_RECOMPUTE_CRASH"); spec != "" {
		dir, n, _ := strings.Cut(spec, "|")
		killAt, _ := strconv.Atoi(n)
		st, err := local.Open(dir, nil)
		if err != nil {
			os.Exit(3)
		}
		o := opts
		o.Runner = &reduceKiller{Runner: jobs.NewLocal(st, nil), killAt: killAt}
		Recompute(ctx, st, policies(t, crashPolicies2), asOf.Add(time.Hour), o)
		os.Exit(4) // finished before the kill point
	}
	st := newStore(t, 30)
	r, err := Rechunk(ctx, st, "tokens:size=40,overlap=8", opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Embed(ctx, st, r.Version, "hash:dim=16", opts); err != nil {
		t.Fatal(err)
	}
	if _, err := Recompute(ctx, st, policies(t, crashPolicies), asOf, opts); err != nil {
		t.Fatal(err)
	}
	if _, err := Publish(ctx, st, r.Version, "hash:dim=16", opts); err != nil {
		t.Fatal(err)
	}
	dir := st.Dir()
	st.Close()
	clean := filepath.Join(t.TempDir(), "clean")
	copyStore(t, dir, clean)
	cs, err := local.Open(clean, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := crashState(t, cs)
	if _, err := Recompute(ctx, cs, policies(t, crashPolicies2), asOf.Add(time.Hour), opts); err != nil {
		t.Fatal(err)
	}
	after := crashState(t, cs)
	cs.Close()
	if before == after {
		t.Fatal("the recompute changes nothing: the test would prove nothing")
	}
	forEachKillPoint(t, dir, "TestRecomputeCrashPoints", 6, func(work string, killAt int) string {
		return fmt.Sprintf("PILLAR_RECOMPUTE_CRASH=%s|%d", work, killAt)
	}, func(work string, killAt int) {
		ks, err := local.Open(work, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := crashState(t, ks)
		// Scratch tables of the dead run may remain until the next
		// pipeline operation takes the lock; they are not state.
		if stripScratch(got) != before {
			t.Fatalf("killed after operation %d: the store is not as before the recompute:\n%s\n--- want\n%s", killAt, got, before)
		}
		if _, err := Recompute(ctx, ks, policies(t, crashPolicies2), asOf.Add(time.Hour), opts); err != nil {
			t.Fatalf("re-run after the kill after operation %d: %v", killAt, err)
		}
		if got := crashState(t, ks); got != after {
			t.Fatalf("after the kill at %d and a re-run, the store differs from an uninterrupted run:\n%s\n--- want\n%s", killAt, got, after)
		}
		ks.Close()
	})
}

func stripScratch(s string) string {
	lines := strings.Split(s, "\n")
	lines = slices.DeleteFunc(lines, func(l string) bool { return strings.HasPrefix(l, "scratch ") })
	return strings.Join(lines, "\n")
}

func copyStore(t *testing.T, from, to string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", from, to).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
}

// TestPublishIncrementalCrashPoints kills an incremental re-publish in a
// child process after each of its runner operations (the selection of
// the changed pages, the export records, the reconcile) and checks that
// the store — export/state, the queue, the watermark — is exactly as
// before, and that a re-run then completes incrementally with the result
// of an uninterrupted run.
func TestPublishIncrementalCrashPoints(t *testing.T) {
	opts := Options{}
	var cv string
	if spec := os.Getenv("PILLAR_PUBLISH_CRASH"); spec != "" {
		parts := strings.Split(spec, "|")
		killAt, _ := strconv.Atoi(parts[2])
		st, err := local.Open(parts[0], nil)
		if err != nil {
			os.Exit(3)
		}
		o := opts
		o.Runner = &reduceKiller{Runner: jobs.NewLocal(st, nil), killAt: killAt}
		Publish(ctx, st, parts[1], "hash:dim=16", o)
		os.Exit(4) // finished before the kill point
	}
	st := newStore(t, 40)
	cv = exportedStore(t, st, incrementalPolicies, opts).Version
	editDocs(t, st, []int{1, 22}, []int{12}, []int{13})
	if _, err := Rechunk(ctx, st, "tokens:size=40,overlap=8", opts); err != nil {
		t.Fatal(err)
	}
	if _, err := Embed(ctx, st, cv, "hash:dim=16", opts); err != nil {
		t.Fatal(err)
	}
	dir := st.Dir()
	st.Close()
	state := func(s pillar.Store) string {
		t.Helper()
		sn, err := s.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer sn.Release()
		var wm Watermark
		if err := sn.Attr(ctx, AttrWatermark, &wm); err != nil {
			t.Fatalf("no watermark: %v", err)
		}
		return fmt.Sprintf("%s\nwatermark %+v", crashState(t, s), wm)
	}
	clean := filepath.Join(t.TempDir(), "clean")
	copyStore(t, dir, clean)
	cs, err := local.Open(clean, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := state(cs)
	pr, err := Publish(ctx, cs, cv, "hash:dim=16", opts)
	if err != nil {
		t.Fatal(err)
	}
	if !pr.Export.Incremental || pr.Export.Puts == 0 {
		t.Fatalf("the re-publish: %+v; want an incremental one with puts", pr.Export)
	}
	after := state(cs)
	cs.Close()
	forEachKillPoint(t, dir, "TestPublishIncrementalCrashPoints", 3, func(work string, killAt int) string {
		return fmt.Sprintf("PILLAR_PUBLISH_CRASH=%s|%s|%d", work, cv, killAt)
	}, func(work string, killAt int) {
		ks, err := local.Open(work, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := state(ks); stripScratch(got) != before {
			t.Fatalf("killed after operation %d: the store is not as before the publish:\n%s\n--- want\n%s", killAt, got, before)
		}
		pr, err := Publish(ctx, ks, cv, "hash:dim=16", opts)
		if err != nil {
			t.Fatalf("re-run after the kill after operation %d: %v", killAt, err)
		}
		if !pr.Export.Incremental {
			t.Fatalf("re-run after the kill after operation %d: %+v; want incremental", killAt, pr.Export)
		}
		if got := state(ks); got != after {
			t.Fatalf("after the kill at %d and a re-run, the store differs from an uninterrupted run:\n%s\n--- want\n%s", killAt, got, after)
		}
		ks.Close()
	})
}

// forEachKillPoint re-runs test (which must be the caller) in a child
// process on a copy of the store at dir, with env(work, killAt) set so the
// child's crash hook kills it (SIGKILL) after operation killAt, for killAt
// = 1, 2, …, and hands each killed copy to check. It stops when a child exits
// 4 (it ran fewer operations than killAt) and fails when that comes before
// minOps operations, so a run that kills nothing cannot pass.
func forEachKillPoint(t *testing.T, dir, test string, minOps int, env func(work string, killAt int) string, check func(work string, killAt int)) {
	t.Helper()
	for killAt := 1; ; killAt++ {
		work := filepath.Join(t.TempDir(), fmt.Sprintf("kill%d", killAt))
		copyStore(t, dir, work)
		cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$")
		cmd.Env = append(os.Environ(), env(work, killAt))
		out, _ := cmd.CombinedOutput()
		ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if ok && ws.Exited() && ws.ExitStatus() == 4 {
			if killAt-1 < minOps {
				t.Fatalf("%s: the run had only %d operations, want at least %d", test, killAt-1, minOps)
			}
			t.Logf("killed after each of %d operations", killAt-1)
			return
		}
		if !ok || !ws.Signaled() {
			t.Fatalf("kill point %d: child was not killed: %v\n%s", killAt, cmd.ProcessState, out)
		}
		check(work, killAt)
	}
}
