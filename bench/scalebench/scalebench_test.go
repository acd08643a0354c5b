package scalebench

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGenerate(t *testing.T) {
	dir := t.TempDir()
	corpus, edits := filepath.Join(dir, "c"), filepath.Join(dir, "e")
	n, err := generate(corpus, edits, 4096, 2500, 0.001, 1)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("%d edits of 2,500 pages at 0.1%%, want 2", n)
	}
	var files int
	var bytes int64
	filepath.Walk(corpus, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			files++
			bytes += fi.Size()
		}
		return nil
	})
	if files != 2500 || bytes/int64(files) < 3800 || bytes/int64(files) > 4300 {
		t.Fatalf("%d files of %d bytes on average, want 2,500 of about 4 KB", files, bytes/int64(max(files, 1)))
	}
	ed, _ := filepath.Glob(filepath.Join(edits, "*", "*.html"))
	for _, e := range ed {
		rel, _ := filepath.Rel(edits, e)
		a, _ := os.ReadFile(filepath.Join(corpus, rel))
		b, _ := os.ReadFile(e)
		if string(a) == string(b) || !strings.Contains(string(b), "edited") {
			t.Fatalf("%s: the edit is not an edited copy of the page", rel)
		}
	}
}

func TestGenerateSmallCorpusHasAnEdit(t *testing.T) {
	dir := t.TempDir()
	n, err := generate(filepath.Join(dir, "c"), filepath.Join(dir, "e"), 1024, 300, 0.001, 1)
	if err != nil || n != 1 {
		t.Fatalf("300 pages at 0.1%%: %d edits (%v), want 1", n, err)
	}
	if sizeName(4000) != "4KB" || sizeName(20480) != "20KB" {
		t.Fatalf("size names %s, %s", sizeName(4000), sizeName(20480))
	}
}

func TestEvaluate(t *testing.T) {
	r := &Report{Options: Options{Sizes: []int{4096}}}
	add := func(n int, round, name string, secs float64, rss, bytes int64) {
		r.Steps = append(r.Steps, Step{Size: 4096, N: n, Round: round, Name: name, Pages: n, Seconds: secs, MaxRSS: rss << 20, StoreBytes: bytes})
	}
	add(10, "full", "ingest", 1, 100, 1000)
	add(160, "full", "ingest", 20, 110, 16000) // rate 8 vs 10: holds; RSS 1.1×: holds
	add(10, "full", "publish", 1, 100, 1000)
	add(160, "full", "publish", 40, 400, 16000) // rate 4 vs 10 and RSS 4×: fail
	for _, name := range incrementalSteps {     // 1 s of 60 s, 100 of 32,000 bytes: holds
		add(160, "incremental", name, 0.25, 50, 25)
	}
	r.evaluate()
	got := map[string]bool{}
	for _, c := range r.Checks {
		got[c.Target] = c.Pass
	}
	want := map[string]bool{
		"4KB: peak RSS of every step ≤ 300 MB at every N":                   false,
		"4KB ingest: peak RSS at N=160 ≤ 1.2 × at N=10":                     true,
		"4KB ingest: pages/s at N=160 ≥ 0.8 × at N=10":                      true,
		"4KB publish: peak RSS at N=160 ≤ 1.2 × at N=10":                    false,
		"4KB publish: pages/s at N=160 ≥ 0.8 × at N=10":                     false,
		"4KB N=160: incremental round time ≤ 5% of the full round":          true,
		"4KB N=160: incremental round bytes written ≤ 2% of the full round": true,
		// rechunk, embed, subsets recompute and export did not run.
		"4KB rechunk: measured at N=10 and N=160": false,
		"4KB export: measured at N=10 and N=160":  false,
	}
	for k, v := range want {
		if p, ok := got[k]; !ok || p != v {
			t.Errorf("%s: pass = %v (present %v), want %v", k, p, ok, v)
		}
	}
	if md := r.Markdown(); !strings.Contains(md, "| 4KB | 160 | full | publish |") || !strings.Contains(md, "**no**") {
		t.Fatalf("markdown lacks the rows or the failed targets:\n%s", md)
	}
}

func TestWritten(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a"), []byte("12345"), 0o644)
	before := listing(dir)
	os.WriteFile(filepath.Join(dir, "b"), []byte("123"), 0o644)
	if n := written(before, listing(dir)); n != 3 {
		t.Fatalf("written = %d, want 3 (the new file only)", n)
	}
}

// A run that exercised nothing, or not enough to compare, misses its
// targets instead of passing them vacuously.
func TestEvaluateMissingMeasurementsFail(t *testing.T) {
	failed := func(r *Report) []string {
		r.evaluate()
		var out []string
		for _, c := range r.Checks {
			if !c.Pass {
				out = append(out, c.Target+": "+c.Value)
			}
		}
		return out
	}
	if f := failed(&Report{Options: Options{Sizes: []int{4096}}}); len(f) == 0 {
		t.Fatal("an empty run passed every target")
	}
	one := &Report{Options: Options{Sizes: []int{4096}}}
	for _, name := range fullSteps {
		one.Steps = append(one.Steps, Step{Size: 4096, N: 10, Round: "full", Name: name, Pages: 10, Seconds: 1, MaxRSS: 100 << 20})
	}
	for _, name := range incrementalSteps {
		one.Steps = append(one.Steps, Step{Size: 4096, N: 10, Round: "incremental", Name: name, Pages: 1, Seconds: 0.01, MaxRSS: 100 << 20})
	}
	if f := failed(one); len(f) != 1 || !strings.Contains(f[0], "compared between two N") {
		t.Fatalf("one N: failed %q, want the comparison missed", f)
	}
	one.BigN = 1_000_000 // --big was asked for and its round did not run
	if f := failed(one); len(f) != 2 || !strings.Contains(f[1], "N=1000000: the run completes") {
		t.Fatalf("unfinished --big: failed %q", f)
	}
	two := &Report{Options: Options{Sizes: []int{4096}}}
	for _, n := range []int{10, 160} {
		for _, name := range fullSteps {
			two.Steps = append(two.Steps, Step{Size: 4096, N: n, Round: "full", Name: name, Pages: n, Seconds: float64(n) / 10, MaxRSS: 100 << 20, StoreBytes: 1 << 20})
		}
	}
	f := failed(two)
	if len(f) != 1 || !strings.Contains(f[0], "incremental round measured") {
		t.Fatalf("no incremental round: failed %q", f)
	}
}

// A repeated small round is compared too: the big round must keep its rate
// against each small round, and the values show the pages per CPU-second
// and the load beside the wall-time rates. Merging runs of one N each
// numbers a second file's rounds of an N already loaded as repeats.
func TestEvaluateRepeats(t *testing.T) {
	r := &Report{Options: Options{Sizes: []int{4096}}}
	add := func(n, repeat int, secs, cpu, load float64) {
		r.Steps = append(r.Steps, Step{Size: 4096, N: n, Round: "full", Name: "ingest", Pages: n, Seconds: secs,
			CPUSeconds: cpu, LoadBefore: load, LoadAfter: load, MaxRSS: 100 << 20, Repeat: repeat})
	}
	add(10, 0, 1, 1, 2)      // 10 pages/s
	add(160, 0, 20, 17, 9)   // 8 pages/s: 0.8× of the first round
	add(10, 1, 0.5, 0.9, 10) // 20 pages/s: the big round keeps only 0.4× of this one
	r.evaluate()
	var rate Check
	for _, c := range r.Checks {
		if c.Target == "4KB ingest: pages/s at N=160 ≥ 0.8 × at N=10" {
			rate = c
		}
	}
	if rate.Pass || !strings.Contains(rate.Value, "N=160 vs N=10: 8 vs 10 (0.80×)") ||
		!strings.Contains(rate.Value, "N=160 vs N=10 (repeat 1): 8 vs 20 (0.40×)") ||
		!strings.Contains(rate.Value, "per CPU-second 9 vs 10 (0.94×)") || !strings.Contains(rate.Value, "load 9.0–9.0 vs 2.0–2.0") {
		t.Fatalf("rate check %+v", rate)
	}
	if md := r.Markdown(); !strings.Contains(md, "| 4KB | 10 (repeat 1) | full | ingest | 10 | 0.5 | 20 | 0.9 | 11 | 10.0→10.0 |") {
		t.Fatalf("markdown lacks the repeat's row:\n%s", md)
	}

	dir := t.TempDir()
	var paths []string
	for i, n := range []int{10, 160, 10} {
		one := &Report{Options: Options{Sizes: []int{4096}, MemoryLimit: "64MiB"}}
		one.Steps = []Step{{Size: 4096, N: n, Round: "full", Name: "ingest", Pages: n, Seconds: 1}}
		one.Load = []string{fmt.Sprintf("4KB, N=%d: load average 1 2 3", n)}
		p := filepath.Join(dir, fmt.Sprint(i))
		if err := one.Write(p); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, filepath.Join(p, "results.json"))
	}
	m, err := Load(paths...)
	if err != nil {
		t.Fatal(err)
	}
	var reps []int
	for _, s := range m.Steps {
		reps = append(reps, s.Repeat)
	}
	if fmt.Sprint(reps) != "[0 0 1]" || len(m.findAll(4096, 10, "full", "ingest")) != 2 {
		t.Fatalf("merged repeats %v", reps)
	}
	if len(m.Load) != 3 || m.Load[2] != "4KB, N=10 (repeat 1): load average 1 2 3" || m.Load[0] != "4KB, N=10: load average 1 2 3" {
		t.Fatalf("merged loads %q", m.Load)
	}
}

func TestKeepProfile(t *testing.T) {
	dir := t.TempDir()
	r := &round{o: &Options{Profile: filepath.Join(dir, "prof")}, size: 4096, n: 10000, repeat: 1}
	src := filepath.Join(dir, "heap.json.pprof")
	if err := r.keepProfile(src, "full", "subsets recompute"); err != nil {
		t.Fatalf("no profile written (a step whose heap stayed small): %v, want nil", err)
	}
	if err := os.WriteFile(src, []byte("profile"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.keepProfile(src, "full", "subsets recompute"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "prof", "4KB-n10000-r1-full-subsets-recompute.pprof"))
	if err != nil || string(b) != "profile" {
		t.Fatalf("kept profile: %q, %v", b, err)
	}
}
