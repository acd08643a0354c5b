package jobs_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/pillarkit/pillar/pillar/local"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unicode"

	"go.ytsaurus.tech/yt/go/mapreduce"

	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/pillar"
)

// expectWordCount computes, without the runner, what WordCountMapper
// writes for docs (in order) and the per-word totals.
func expectWordCount(tables ...[]pillar.Doc) (counts []jobs.WordCount, docWords []jobs.DocWords, totals map[string]int64) {
	totals = map[string]int64{}
	for ti, docs := range tables {
		for _, d := range docs {
			seen := map[string]int64{}
			var order []string
			var n int64
			for _, w := range strings.FieldsFunc(d.Text, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
				w = strings.ToLower(w)
				if seen[w] == 0 {
					order = append(order, w)
				}
				seen[w]++
				n++
				totals[w]++
			}
			for _, w := range order {
				counts = append(counts, jobs.WordCount{Word: w, Count: seen[w]})
			}
			docWords = append(docWords, jobs.DocWords{PageKey: d.PageKey, Host: d.Host, Words: n, Table: int64(ti)})
		}
	}
	return counts, docWords, totals
}

func sortedTotals(totals map[string]int64, min int64) []jobs.WordCount {
	var out []jobs.WordCount
	for _, w := range slices.Sorted(maps.Keys(totals)) {
		if totals[w] >= min {
			out = append(out, jobs.WordCount{Word: w, Count: totals[w]})
		}
	}
	return out
}

func TestMapSeveralInputsAndOutputs(t *testing.T) {
	e := newEnv(t)
	a, b := makeDocs(1, 700), makeDocs(2, 300)
	writeTable(e, "docs_a", a)
	writeTable(e, "docs_b", b)
	var st jobs.Stats
	op := &jobs.Op{
		Inputs:  []string{"docs_a", "docs_b"},
		Outputs: []jobs.Output{{Table: "wc"}, {Table: "docwords"}},
		Workers: 3,
		Stats:   &st,
	}
	if err := e.runner.Map(context.Background(), &jobs.WordCountMapper{}, op); err != nil {
		t.Fatal(err)
	}
	wantCounts, wantDocs, _ := expectWordCount(a, b)
	if got := readTable[jobs.WordCount](e, "wc"); !slices.Equal(got, wantCounts) {
		t.Fatalf("wc: %d rows, want %d (or order differs)", len(got), len(wantCounts))
	}
	if got := readTable[jobs.DocWords](e, "docwords"); !slices.Equal(got, wantDocs) {
		t.Fatalf("docwords differ: %d rows, want %d", len(got), len(wantDocs))
	}
	if st.InputRows != 1000 || st.OutputRows != int64(len(wantCounts)+len(wantDocs)) || st.Jobs < 3 {
		t.Fatalf("stats %+v", st)
	}
}

// groupProbe is a reducer that records what a reduce job sees.
type groupProbe struct{}

type probeRow struct {
	Word      string `yson:"word" parquet:"word"`
	Count     int64  `yson:"count" parquet:"count"`
	KeySwitch bool   `yson:"key_switch" parquet:"key_switch"`
	Table     int64  `yson:"table" parquet:"table"`
	Row       int64  `yson:"row" parquet:"row"`
	Cookie    int64  `yson:"cookie" parquet:"cookie"`
	First     bool   `yson:"first" parquet:"first"` // first row of its job
}

func (*groupProbe) InputTypes() []any  { return []any{&jobs.WordCount{}, &jobs.WordCount{}} }
func (*groupProbe) OutputTypes() []any { return []any{&probeRow{}} }
func (*groupProbe) Do(ctx mapreduce.JobContext, in mapreduce.Reader, out []mapreduce.Writer) error {
	first := true
	for in.Next() {
		var wc jobs.WordCount
		in.MustScan(&wc)
		out[0].MustWrite(&probeRow{Word: wc.Word, Count: wc.Count, KeySwitch: in.KeySwitch(), Table: int64(in.TableIndex()),
			Row: in.RowIndex(), Cookie: int64(ctx.JobCookie()), First: first})
		first = false
	}
	return nil
}

func init() { mapreduce.Register(&groupProbe{}) }

func TestReduceKeySwitch(t *testing.T) {
	e := newEnv(t)
	// Two unsorted inputs sharing keys.
	var in0, in1 []jobs.WordCount
	for i := 0; i < 3000; i++ {
		in0 = append(in0, jobs.WordCount{Word: vocab[(i*7919)%97], Count: int64(i)})
		if i%3 == 0 {
			in1 = append(in1, jobs.WordCount{Word: vocab[(i*31)%97], Count: int64(-i)})
		}
	}
	writeTable(e, "in0", in0)
	writeTable(e, "in1", in1)
	op := &jobs.Op{Inputs: []string{"in0", "in1"}, Outputs: []jobs.Output{{Table: "probe"}}, ReduceBy: []string{"word"}, Workers: 3}
	if err := e.runner.Reduce(context.Background(), &groupProbe{}, op); err != nil {
		t.Fatal(err)
	}
	got := readTable[probeRow](e, "probe")
	if len(got) != len(in0)+len(in1) {
		t.Fatalf("%d rows, want %d", len(got), len(in0)+len(in1))
	}
	jobsSeen := map[int64]bool{}
	for i, r := range got {
		src := []([]jobs.WordCount){in0, in1}[r.Table]
		if r.Row < 0 || int(r.Row) >= len(src) || src[r.Row] != (jobs.WordCount{Word: r.Word, Count: r.Count}) {
			t.Fatalf("row %d: table/row index (%d, %d) does not point at (%s, %d)", i, r.Table, r.Row, r.Word, r.Count)
		}
		if r.First {
			jobsSeen[r.Cookie] = true
		}
		if i == 0 {
			continue
		}
		p := got[i-1]
		if c := cmp.Compare(p.Word, r.Word); c > 0 {
			t.Fatalf("row %d: %q after %q: not sorted", i, r.Word, p.Word)
		} else if c == 0 && (p.Table > r.Table || p.Table == r.Table && p.Row > r.Row) {
			t.Fatalf("row %d: ties not in (table, row) order", i)
		}
		newGroup := p.Word != r.Word
		if r.First && p.Cookie == r.Cookie {
			t.Fatalf("row %d: two jobs with cookie %d", i, r.Cookie)
		}
		if !r.First && p.Cookie != r.Cookie {
			t.Fatalf("row %d: job changed without a first row", i)
		}
		if r.First && !newGroup {
			t.Fatalf("row %d: key group %q split across jobs", i, r.Word)
		}
		if want := newGroup && !r.First; r.KeySwitch != want {
			t.Fatalf("row %d (%q): KeySwitch = %v, want %v (first row of job: %v)", i, r.Word, r.KeySwitch, want, r.First)
		}
	}
	if got[0].KeySwitch {
		t.Fatal("the first row of a job must not carry a key switch")
	}
	if len(jobsSeen) < 2 {
		t.Fatalf("only %d reduce jobs; the test wants several", len(jobsSeen))
	}

	// The example reducer over the same inputs: one row per word, summed.
	op = &jobs.Op{Inputs: []string{"in0", "in1"}, Outputs: []jobs.Output{{Table: "sums"}, {Table: "frequent"}}, ReduceBy: []string{"word"},
		Workers: 2, InputTypes: []any{jobs.WordCount{}, jobs.WordCount{}}}
	if err := e.runner.Reduce(context.Background(), &jobs.WordSumReducer{Frequent: 1 << 40}, op); err != nil {
		t.Fatal(err)
	}
	totals := map[string]int64{}
	for _, r := range append(slices.Clone(in0), in1...) {
		totals[r.Word] += r.Count
	}
	if got := readTable[jobs.WordCount](e, "sums"); !slices.Equal(got, sortedTotals(totals, -1<<62)) {
		t.Fatalf("sums differ: %v", got[:min(5, len(got))])
	}
	if got := readTable[jobs.WordCount](e, "frequent"); len(got) != 0 {
		t.Fatalf("frequent: %d rows, want none", len(got))
	}
}

func TestMapReduceSeveralInputsAndOutputs(t *testing.T) {
	e := newEnv(t)
	a, b := makeDocs(3, 500), makeDocs(4, 500)
	writeTable(e, "docs_a", a)
	writeTable(e, "docs_b", b)
	var st jobs.Stats
	op := &jobs.Op{
		Inputs: []string{"docs_a", "docs_b"},
		Outputs: []jobs.Output{
			{Table: "docwords"},                           // mapper output 1
			{Table: "totals", SortedBy: []string{"word"}}, // reducer output 0
			{Table: "frequent"},                           // reducer output 1
		},
		MapperOutputs: 1,
		ReduceBy:      []string{"word"},
		Workers:       4,
		Stats:         &st,
	}
	if err := e.runner.MapReduce(context.Background(), &jobs.WordCountMapper{}, &jobs.WordSumReducer{Frequent: 50}, op); err != nil {
		t.Fatal(err)
	}
	_, wantDocs, totals := expectWordCount(a, b)
	if got := readTable[jobs.DocWords](e, "docwords"); !slices.Equal(got, wantDocs) {
		t.Fatalf("docwords differ")
	}
	if got := readTable[jobs.WordCount](e, "totals"); !slices.Equal(got, sortedTotals(totals, 0)) {
		t.Fatalf("totals differ: got %d rows, want %d", len(got), len(totals))
	}
	freq := readTable[jobs.WordCount](e, "frequent")
	if want := sortedTotals(totals, 50); !slices.Equal(freq, want) || len(want) == 0 {
		t.Fatalf("frequent: got %d rows, want %d", len(freq), len(want))
	}
	ti, err := e.tableInfo("totals")
	if err != nil || !slices.Equal(ti.SortedBy, []string{"word"}) {
		t.Fatalf("totals: %+v %v", ti, err)
	}
	if st.SortedBytes == 0 || st.SpillRuns != 0 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestSort(t *testing.T) {
	e := newEnv(t)
	a, b := makeDocs(5, 400), makeDocs(6, 400)
	writeTable(e, "a", a)
	writeTable(e, "b", b)
	op := &jobs.Op{Inputs: []string{"a", "b"}, Outputs: []jobs.Output{{Table: "sorted", RowType: pillar.Doc{}}}, SortBy: []string{"host", "title"}}
	if err := e.runner.Sort(context.Background(), op); err != nil {
		t.Fatal(err)
	}
	want := append(slices.Clone(a), b...)
	slices.SortStableFunc(want, func(x, y pillar.Doc) int { return cmp.Or(cmp.Compare(x.Host, y.Host), cmp.Compare(x.Title, y.Title)) })
	if got := readTable[pillar.Doc](e, "sorted"); !slices.Equal(got, want) {
		t.Fatal("sorted table differs from a stable sort of the inputs")
	}
	ti, _ := e.tableInfo("sorted")
	if !slices.Equal(ti.SortedBy, []string{"host", "title"}) {
		t.Fatalf("SortedBy = %v", ti.SortedBy)
	}
}

// TestSortSpill sorts an input several times the memory limit; the sort
// must spill and still produce the right order.
func TestSortSpill(t *testing.T) {
	e := newEnv(t)
	docs := makeDocs(8, 6000)
	writeTable(e, "docs", docs)
	const limit = 256 << 10
	var st jobs.Stats
	op := &jobs.Op{Inputs: []string{"docs"}, Outputs: []jobs.Output{{Table: "by_text", RowType: pillar.Doc{}}},
		SortBy: []string{"text", "page_key"}, MemoryLimit: limit, Workers: 2, Stats: &st}
	if err := e.runner.Sort(context.Background(), op); err != nil {
		t.Fatal(err)
	}
	if st.SortedBytes < 4*limit {
		t.Fatalf("sorted %d bytes, the test wants at least 4× the %d limit", st.SortedBytes, limit)
	}
	if st.SpillRuns < 4 {
		t.Fatalf("%d spill runs: the sort did not spill", st.SpillRuns)
	}
	want := slices.Clone(docs)
	slices.SortFunc(want, func(x, y pillar.Doc) int {
		return cmp.Or(cmp.Compare(x.Text, y.Text), cmp.Compare(x.PageKey, y.PageKey))
	})
	if got := readTable[pillar.Doc](e, "by_text"); !slices.Equal(got, want) {
		t.Fatal("spilled sort output differs")
	}
	t.Logf("sorted %d bytes with a %d-byte limit: %d runs, %d bytes spilled", st.SortedBytes, limit, st.SpillRuns, st.SpilledBytes)

	// A MapReduce whose map output is several times the limit.
	a := makeDocs(9, 3000)
	writeTable(e, "docs2", a)
	op = &jobs.Op{Inputs: []string{"docs2"}, Outputs: []jobs.Output{{Table: "totals"}}, ReduceBy: []string{"word"},
		SortBy: []string{"word", "count"}, MemoryLimit: 64 << 10, Workers: 2, Stats: &st}
	if err := e.runner.MapReduce(context.Background(), &jobs.WordCountMapper{}, &jobs.WordSumReducer{}, op); err != nil {
		t.Fatal(err)
	}
	_, _, totals := expectWordCount(a)
	if got := readTable[jobs.WordCount](e, "totals"); !slices.Equal(got, sortedTotals(totals, 0)) {
		t.Fatal("spilled map_reduce output differs")
	}
	if st.SpillRuns < 4 || st.SortedBytes < 4*(64<<10) {
		t.Fatalf("map_reduce did not spill enough: %+v", st)
	}
}

// slowMapper blocks on every row until the test lets it go.
type slowMapper struct{ mapreduce.Untyped }

var slowRows atomic.Int64

func (*slowMapper) Do(ctx mapreduce.JobContext, in mapreduce.Reader, out []mapreduce.Writer) error {
	for in.Next() {
		var d pillar.Doc
		in.MustScan(&d)
		slowRows.Add(1)
		time.Sleep(2 * time.Millisecond)
		out[0].MustWrite(&jobs.WordCount{Word: d.Title, Count: 1})
	}
	return nil
}

func init() { mapreduce.Register(&slowMapper{}) }

func TestCancel(t *testing.T) {
	e := newEnv(t)
	writeTable(e, "docs", makeDocs(10, 5000))
	before := e.files()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	op := &jobs.Op{Inputs: []string{"docs"}, Outputs: []jobs.Output{{Table: "out", RowType: jobs.WordCount{}}}, Workers: 2}
	go func() { done <- e.runner.Map(ctx, &slowMapper{}, op) }()
	for slowRows.Load() < 20 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	start := time.Now()
	var err error
	select {
	case err = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Map did not stop within 5 s of cancellation")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("stopping took %v", d)
	}
	t.Logf("cancelled after %d rows: %v", slowRows.Load(), err)
	e.assertClean(before, "out")
}

func TestFailingAndPanickingJobs(t *testing.T) {
	e := newEnv(t)
	a, b := makeDocs(11, 800), makeDocs(12, 800)
	writeTable(e, "docs_a", a)
	writeTable(e, "docs_b", b)
	bad := b[613].Title
	for _, tc := range []struct {
		name   string
		mapper *jobs.WordCountMapper
		reduce bool
		isPan  bool
	}{
		{"map fails", &jobs.WordCountMapper{FailOn: bad}, false, false},
		{"map panics", &jobs.WordCountMapper{PanicOn: bad}, false, true},
		{"map_reduce mapper panics", &jobs.WordCountMapper{PanicOn: bad}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.files()
			op := &jobs.Op{Inputs: []string{"docs_a", "docs_b"}, Outputs: []jobs.Output{{Table: "wc"}, {Table: "dw"}}, Workers: 3}
			var err error
			if tc.reduce {
				op.ReduceBy, op.MapperOutputs = []string{"word"}, 1
				err = e.runner.MapReduce(context.Background(), tc.mapper, &jobs.WordSumReducer{}, op)
			} else {
				err = e.runner.Map(context.Background(), tc.mapper, op)
			}
			var je *jobs.JobError
			if !errors.As(err, &je) {
				t.Fatalf("err = %v, want a *JobError", err)
			}
			if je.Table != "docs_b" || je.Row != 613 || je.Phase != "map" || je.Job != "*jobs.WordCountMapper" {
				t.Fatalf("error names %s job %s at (%s, %d), want map *jobs.WordCountMapper at (docs_b, 613): %v", je.Phase, je.Job, je.Table, je.Row, err)
			}
			if errors.Is(err, jobs.ErrJobPanic) != tc.isPan || (tc.isPan && je.Stack == "") {
				t.Fatalf("panic = %v, want %v: %v", errors.Is(err, jobs.ErrJobPanic), tc.isPan, err)
			}
			if !strings.Contains(err.Error(), "input row (docs_b, 613)") || !strings.Contains(err.Error(), bad) {
				t.Fatalf("message %q lacks the row or the cause", err)
			}
			e.assertClean(before, "wc", "dw")
		})
	}
	t.Run("reducer fails", func(t *testing.T) {
		before := e.files()
		op := &jobs.Op{Inputs: []string{"docs_a"}, Outputs: []jobs.Output{{Table: "probe"}}, ReduceBy: []string{"page_key"},
			InputTypes: []any{pillar.Doc{}}, Workers: 2}
		err := e.runner.Reduce(context.Background(), &failingReducer{At: a[100].PageKey}, op)
		var je *jobs.JobError
		if !errors.As(err, &je) || je.Phase != "reduce" || je.Table != "docs_a" || je.Row != 100 {
			t.Fatalf("err = %v, want a reduce JobError at (docs_a, 100)", err)
		}
		e.assertClean(before, "probe")
	})
}

type failingReducer struct{ At string }

func (*failingReducer) InputTypes() []any  { return nil }
func (*failingReducer) OutputTypes() []any { return []any{&jobs.WordCount{}} }
func (f *failingReducer) Do(ctx mapreduce.JobContext, in mapreduce.Reader, out []mapreduce.Writer) error {
	for in.Next() {
		var d pillar.Doc
		in.MustScan(&d)
		if d.PageKey == f.At {
			return fmt.Errorf("bad page %s", d.PageKey)
		}
		out[0].MustWrite(&jobs.WordCount{Word: d.PageKey})
	}
	return nil
}

func init() { mapreduce.Register(&failingReducer{}) }

// TestCallerTx: outputs commit together with the caller's other changes;
// a failed operation aborts the caller's Tx.
func TestCallerTx(t *testing.T) {
	e := newEnv(t)
	docs := makeDocs(13, 200)
	writeTable(e, "docs", docs)
	ctx := context.Background()
	tx, err := e.store.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.SetAttr(ctx, "backfill", "done"); err != nil {
		t.Fatal(err)
	}
	op := &jobs.Op{Inputs: []string{"docs"}, Outputs: []jobs.Output{{Table: "wc"}}, Tx: tx}
	if err := e.runner.Map(ctx, &jobs.WordCountMapper{}, op); err != nil {
		t.Fatal(err)
	}
	if _, err := e.tableInfo("wc"); err == nil {
		t.Fatal("output visible before the caller committed")
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	want, _, _ := expectWordCount(docs)
	if got := readTable[jobs.WordCount](e, "wc"); !slices.Equal(got, want) {
		t.Fatal("wc differs")
	}

	tx, _ = e.store.Begin(ctx)
	op = &jobs.Op{Inputs: []string{"docs"}, Outputs: []jobs.Output{{Table: "wc2"}}, Tx: tx}
	if err := e.runner.Map(ctx, &jobs.WordCountMapper{FailOn: docs[5].Title}, op); err == nil {
		t.Fatal("want an error")
	}
	if err := tx.Commit(ctx); !errors.Is(err, pillar.ErrTxDone) {
		t.Fatalf("Commit after a failed operation: %v, want ErrTxDone", err)
	}
}

type unregistered struct{ mapreduce.Untyped }

func (*unregistered) Do(mapreduce.JobContext, mapreduce.Reader, []mapreduce.Writer) error { return nil }

func TestValidation(t *testing.T) {
	e := newEnv(t)
	writeTable(e, "docs", makeDocs(14, 10))
	ctx := context.Background()
	err := e.runner.Map(ctx, &unregistered{}, &jobs.Op{Inputs: []string{"docs"}, Outputs: []jobs.Output{{Table: "x", RowType: jobs.WordCount{}}}})
	if !errors.Is(err, jobs.ErrNotRegistered) {
		t.Fatalf("unregistered job: %v", err)
	}
	for _, op := range []*jobs.Op{
		{Inputs: []string{"docs"}},
		{Inputs: []string{"docs"}, Outputs: []jobs.Output{{Table: "docs"}}},
		{Inputs: []string{"docs"}, Outputs: []jobs.Output{{Table: "a"}, {Table: "a"}}},
		{Inputs: []string{"docs"}, Outputs: []jobs.Output{{Table: "a"}}, ReduceBy: []string{"word"}},
	} {
		if err := e.runner.Map(ctx, &jobs.WordCountMapper{}, op); !errors.Is(err, jobs.ErrInvalidOp) {
			t.Errorf("op %+v: %v, want ErrInvalidOp", op, err)
		}
	}
	err = e.runner.MapReduce(ctx, &jobs.WordCountMapper{}, &jobs.WordSumReducer{}, &jobs.Op{Inputs: []string{"docs"},
		Outputs: []jobs.Output{{Table: "a"}}, ReduceBy: []string{"word"}, SortBy: []string{"count", "word"}})
	if !errors.Is(err, jobs.ErrInvalidOp) {
		t.Errorf("reduce_by not a prefix of sort_by: %v", err)
	}
}

// panickyReducer panics on one word, or blocks forever on it until the
// context ends (Block).
type panickyReducer struct {
	Word  string
	Block bool
}

var reducerBlocked = make(chan struct{}, 16)

func (*panickyReducer) InputTypes() []any  { return nil }
func (*panickyReducer) OutputTypes() []any { return []any{&jobs.WordCount{}} }
func (p *panickyReducer) Do(ctx mapreduce.JobContext, in mapreduce.Reader, out []mapreduce.Writer) error {
	return mapreduce.GroupKeys(in, func(g mapreduce.Reader) error {
		for g.Next() {
			var wc jobs.WordCount
			g.MustScan(&wc)
			if wc.Word == p.Word {
				if p.Block {
					reducerBlocked <- struct{}{}
					for g.Next() { // returns false once the operation is cancelled
					}
					return nil
				}
				panic("reducer hates " + wc.Word)
			}
			out[0].MustWrite(&wc)
		}
		return nil
	})
}

func init() { mapreduce.Register(&panickyReducer{}) }

// TestReducePhaseFailures: a reducer that panics, and an operation
// cancelled while its reduce jobs run, leave nothing behind (no output, no
// files, no goroutines).
func TestReducePhaseFailures(t *testing.T) {
	e := newEnv(t)
	docs := makeDocs(15, 1500)
	writeTable(e, "docs", docs)
	word := strings.ToLower(vocab[7])
	op := func() *jobs.Op {
		return &jobs.Op{Inputs: []string{"docs"}, Outputs: []jobs.Output{{Table: "dw"}, {Table: "out"}}, MapperOutputs: 1,
			ReduceBy: []string{"word"}, Workers: 3, MemoryLimit: 128 << 10}
	}
	goroutines := runtime.NumGoroutine()

	before := e.files()
	err := e.runner.MapReduce(context.Background(), &jobs.WordCountMapper{}, &panickyReducer{Word: word}, op())
	var je *jobs.JobError
	if !errors.As(err, &je) || !errors.Is(err, jobs.ErrJobPanic) || je.Phase != "reduce" || je.Table != "(map output)" || je.Row < 0 {
		t.Fatalf("err = %v, want a reduce-phase panic naming a map output row", err)
	}
	if !strings.Contains(err.Error(), "reducer hates "+word) {
		t.Fatalf("cause missing: %v", err)
	}
	e.assertClean(before, "dw", "out")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- e.runner.MapReduce(ctx, &jobs.WordCountMapper{}, &panickyReducer{Word: word, Block: true}, op())
	}()
	select {
	case <-reducerBlocked:
	case err := <-done:
		t.Fatalf("finished before the reducer blocked: %v", err)
	}
	cancel()
	select {
	case err = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("MapReduce did not stop within 5 s of cancellation")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	e.assertClean(before, "dw", "out")

	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > goroutines && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		t.Fatalf("%d goroutines left over (had %d)", n, goroutines)
	}
}

// TestRowRangeInputs sorts row ranges of two tables: the job sees exactly
// those rows; a range past the end is clamped; a malformed one is refused.
func TestRowRangeInputs(t *testing.T) {
	e := newEnv(t)
	a, b := makeDocs(8, 300), makeDocs(9, 100)
	writeTable(e, "a", a)
	writeTable(e, "b", b)
	op := &jobs.Op{Inputs: []string{jobs.RowRange("a", 50, 170), jobs.RowRange("b", 90, 1000)},
		Outputs: []jobs.Output{{Table: "sorted", RowType: pillar.Doc{}}}, SortBy: []string{"page_key"}, Workers: 3}
	if err := e.runner.Sort(context.Background(), op); err != nil {
		t.Fatal(err)
	}
	want := append(slices.Clone(a[50:170]), b[90:]...)
	slices.SortStableFunc(want, func(x, y pillar.Doc) int { return cmp.Compare(x.PageKey, y.PageKey) })
	if got := readTable[pillar.Doc](e, "sorted"); !slices.Equal(got, want) {
		t.Fatalf("sorted %d rows of the ranges, want %d", len(got), len(want))
	}
	op.Inputs = []string{"a[#5:#2]"}
	if err := e.runner.Sort(context.Background(), op); !errors.Is(err, jobs.ErrInvalidOp) {
		t.Fatalf("a reversed range: %v, want ErrInvalidOp", err)
	}
}

// TestReduceMergesSortedInputs: an input recorded as sorted by the reduce's
// sort columns is merged as it is (not sorted or spilled again), next to an
// unsorted one that is; the result equals the all-sorted path's, row for
// row. An input that claims an order it does not have is an error naming it.
func TestReduceMergesSortedInputs(t *testing.T) {
	e := newEnv(t)
	var in0, in1 []jobs.WordCount
	for i := 0; i < 4000; i++ {
		in0 = append(in0, jobs.WordCount{Word: vocab[(i*7919)%211], Count: int64(i)})
		if i%3 == 0 {
			in1 = append(in1, jobs.WordCount{Word: vocab[(i*31)%97], Count: int64(-i)})
		}
	}
	writeTable(e, "in0", in0)
	writeTable(e, "in1", in1)
	sortOp := &jobs.Op{Inputs: []string{"in0"}, Outputs: []jobs.Output{{Table: "in0s", RowType: jobs.WordCount{}}}, SortBy: []string{"word"}}
	if err := e.runner.Sort(context.Background(), sortOp); err != nil {
		t.Fatal(err)
	}
	run := func(inputs []string, out string) ([]probeRow, jobs.Stats) {
		var st jobs.Stats
		op := &jobs.Op{Inputs: inputs, Outputs: []jobs.Output{{Table: out}}, ReduceBy: []string{"word"}, Workers: 2,
			MemoryLimit: 64 << 10, Stats: &st}
		if err := e.runner.Reduce(context.Background(), &groupProbe{}, op); err != nil {
			t.Fatal(err)
		}
		rows := readTable[probeRow](e, out)
		for i := range rows {
			rows[i].Cookie, rows[i].First, rows[i].KeySwitch = 0, false, false // job boundaries may differ
		}
		return rows, st
	}
	// in0u holds in0s's rows in the same order, without the SortedBy
	// record, so it goes through the sort: row indexes match too.
	writeTable(e, "in0u", readTable[jobs.WordCount](e, "in0s"))
	want, all := run([]string{"in0u", "in1"}, "probe-sorted-all")
	got, direct := run([]string{"in0s", "in1"}, "probe-direct")
	if !slices.Equal(got, want) {
		t.Fatalf("merging the sorted input gives %d rows that differ from the sorted path's %d", len(got), len(want))
	}
	if direct.SortedBytes >= all.SortedBytes/2 || direct.SortedBytes == 0 {
		t.Fatalf("sorted bytes: %d with the sorted input merged directly, %d through the sort: the sorted input was sorted again", direct.SortedBytes, all.SortedBytes)
	}

	// A table that claims an order it does not have.
	ctx := context.Background()
	tx, err := e.store.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w, err := tx.WriteTable(ctx, "liar", jobs.WordCount{}, &pillar.WriteOptions{SortedBy: []string{"word"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range in0[:300] {
		if err := w.Write(&r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	op := &jobs.Op{Inputs: []string{"liar"}, Outputs: []jobs.Output{{Table: "x"}}, ReduceBy: []string{"word"}, InputTypes: []any{jobs.WordCount{}}}
	err = e.runner.Reduce(ctx, &groupProbe{}, op)
	if err == nil || !strings.Contains(err.Error(), `"liar"`) || !strings.Contains(err.Error(), "out of order") {
		t.Fatalf("unsorted table recorded as sorted: %v, want an error naming it", err)
	}
}

// budgetFS is a local.FS whose files fail with ENOSPC once its budget of
// bytes is spent: a disk that fills up.
type budgetFS struct {
	local.OSFS
	budget atomic.Int64
}

type budgetFile struct {
	*os.File
	fs *budgetFS
}

func (f *budgetFS) Create(name string) (local.File, error) {
	file, err := f.OSFS.Create(name)
	if err != nil {
		return nil, err
	}
	return &budgetFile{File: file.(*os.File), fs: f}, nil
}

func (f *budgetFile) Write(b []byte) (int, error) {
	if f.fs.budget.Add(-int64(len(b))) < 0 {
		return 0, &fs.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	return f.File.Write(b)
}

// TestDiskFullNamesTheTable: a disk that fills up while a reduce writes its
// output fails the operation with an error naming the table and the space
// it needs; the output table does not appear.
func TestDiskFullNamesTheTable(t *testing.T) {
	ctx := context.Background()
	bfs := &budgetFS{}
	bfs.budget.Store(1 << 40)
	st, err := local.Create(filepath.Join(t.TempDir(), "store"), &local.Options{Partitions: 4, FS: bfs})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	e := &env{t: t, store: st, runner: jobs.NewLocal(st, &jobs.LocalOptions{TempDir: t.TempDir()})}
	writeTable(e, "docs", makeDocs(3, 3000))
	bfs.budget.Store(16 << 10)
	op := &jobs.Op{Inputs: []string{"docs"}, Outputs: []jobs.Output{{Table: "sorted", RowType: pillar.Doc{}}}, SortBy: []string{"page_key"}}
	err = e.runner.Sort(ctx, op)
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), `disk full writing table "sorted"`) || !strings.Contains(err.Error(), "needs about") {
		t.Fatalf("sort onto a full disk: %v", err)
	}
	if _, err := e.tableInfo("sorted"); !errors.Is(err, pillar.ErrNotFound) {
		t.Fatalf("the output table of the failed operation exists: %v", err)
	}
}

// TestEmptyInputCreatesOutputs: an operation over no rows still leaves every
// output table, empty (as the YTsaurus runner creates its outputs).
func TestEmptyInputCreatesOutputs(t *testing.T) {
	e := newEnv(t)
	writeTable[jobs.WordCount](e, "empty", nil)
	op := &jobs.Op{Inputs: []string{"empty"}, Outputs: []jobs.Output{{Table: "sums"}, {Table: "frequent"}}, ReduceBy: []string{"word"},
		InputTypes: []any{jobs.WordCount{}}}
	if err := e.runner.Reduce(context.Background(), &jobs.WordSumReducer{Frequent: 1}, op); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sums", "frequent"} {
		ti, err := e.tableInfo(name)
		if err != nil || ti.Rows != 0 {
			t.Fatalf("output %s after an empty input: %+v %v", name, ti, err)
		}
	}
}

// The outputs open at once share an eighth of the memory limit: an
// operation with few outputs keeps RowGroupShare per output, one with many
// (a recompute's diff: ten tables × two workers) gets its part, never less
// than 256 KiB, so the sum stays near the share however many there are.
func TestOutputRowGroup(t *testing.T) {
	const limit = 64 << 20
	for _, c := range []struct {
		open int
		want int64
	}{
		{0, 2 << 20}, {1, 2 << 20}, {4, 2 << 20}, {6, (8 << 20) / 6}, {20, (8 << 20) / 20}, {64, 256 << 10},
	} {
		if got := jobs.OutputRowGroup(limit, c.open); got != c.want {
			t.Errorf("jobs.OutputRowGroup(64MiB, %d) = %d, want %d", c.open, got, c.want)
		}
		if c.open >= 4 && c.open <= 32 && int64(c.open)*jobs.OutputRowGroup(limit, c.open) > jobs.OutputShare(limit) {
			t.Errorf("%d outputs buffer %d bytes, over OutputShare %d", c.open, int64(c.open)*jobs.OutputRowGroup(limit, c.open), jobs.OutputShare(limit))
		}
	}
	if got := jobs.OutputRowGroup(1<<30, 2); got != 8<<20 {
		t.Errorf("jobs.OutputRowGroup(1GiB, 2) = %d, want RowGroupShare's 8 MiB cap", got)
	}
}
