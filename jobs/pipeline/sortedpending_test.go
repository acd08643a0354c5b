package pipeline

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"go.ytsaurus.tech/yt/go/mapreduce"

	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/jobs/embedder"
	"github.com/pillarkit/pillar/jobs/embedder/fakemodel"
	"github.com/pillarkit/pillar/pillar"
)

// finishSpy records, for each finish reduce ("backfill complete …"), the
// SortedBy its pending input carried.
type finishSpy struct {
	jobs.Runner
	pending []string
}

func (s *finishSpy) Reduce(ctx context.Context, r mapreduce.Job, op *jobs.Op) error {
	if strings.HasPrefix(op.Title, "backfill complete ") {
		for _, in := range op.Inputs {
			if strings.HasPrefix(in, PendingPrefix) {
				ti, err := op.Tx.Table(ctx, in)
				if err != nil {
					return err
				}
				s.pending = append(s.pending, strings.Join(ti.SortedBy, ","))
			}
		}
	}
	return s.Runner.Reduce(ctx, r, op)
}

// orderedSpy is a finishSpy over a runner that keeps input order.
type orderedSpy struct{ *finishSpy }

func (orderedSpy) OrderedMap() bool { return true }

// Over the local runner, whose maps keep input order, a first rechunk and
// embed (three slices each) write their slices into the version table and
// finish reduces nothing; over a runner without that guarantee they go
// through the pending table and finish, and the versions are the same.
func TestFirstBuildWritesVersionTable(t *testing.T) {
	counts := map[bool][6]int64{}
	for _, ordered := range []bool{true, false} {
		st := newStore(t, 60)
		spy := &finishSpy{Runner: jobs.NewLocal(st, nil)}
		var runner jobs.Runner = spy
		if ordered {
			runner = orderedSpy{spy}
		}
		o := Options{SlicePages: 25, Runner: runner}
		r, err := Rechunk(ctx, st, "recursive:size=64,overlap=8", o)
		if err != nil {
			t.Fatal(err)
		}
		e, err := Embed(ctx, st, r.Version, "hash:dim=16", o)
		if err != nil {
			t.Fatal(err)
		}
		// Ordered, a first build's slices go to the version table itself:
		// its finish has no pending input to reduce.
		finishes := 2
		if ordered {
			finishes = 0
		}
		if r.Slices != 3 || len(spy.pending) != finishes {
			t.Fatalf("ordered=%v: %d rechunk slices, finish inputs seen %q", ordered, r.Slices, spy.pending)
		}
		want := ""
		if ordered {
			want = "page_key,chunk_no"
		}
		for i, got := range spy.pending {
			if got != want {
				t.Errorf("ordered=%v: finish %d: pending sorted by %q, want %q", ordered, i, got, want)
			}
		}
		sn, _ := st.Snapshot(ctx)
		rv, err1 := pillar.LoadVersion(ctx, sn, r.Version)
		ev, err2 := pillar.LoadVersion(ctx, sn, e.Version)
		sn.Release()
		if err1 != nil || err2 != nil || rv.State != pillar.StateComplete || ev.State != pillar.StateComplete {
			t.Fatalf("ordered=%v: versions %+v %+v (%v %v)", ordered, rv, ev, err1, err2)
		}
		counts[ordered] = [6]int64{rv.Rows, ev.Rows, rv.Pages, ev.Pages, rv.EmptyPages, ev.EmptyPages}
	}
	if counts[true] != counts[false] {
		t.Fatalf("rows, pages and empty pages (chunks, embeddings) written directly %v, through finish %v", counts[true], counts[false])
	}
}

// appendKeepsOrder claims order only for an append past the pending
// table's last page: a rerun's slice that starts at or before it, or a
// pending table already unsorted, gets no claim.
func TestAppendKeepsOrder(t *testing.T) {
	st := newStore(t, 0)
	write := func(table string, row any, sortedBy []string, keys ...string) {
		t.Helper()
		tx, _ := st.Begin(ctx)
		w, err := tx.WriteTable(ctx, table, row, &pillar.WriteOptions{SortedBy: sortedBy})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			var err error
			switch row.(type) {
			case pillar.Chunk:
				err = w.Write(&pillar.Chunk{PageKey: k})
			default:
				err = w.Write(&pillar.Doc{PageKey: k})
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		w.Close()
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	write("todo", pillar.Doc{}, []string{"page_key"}, "a", "b", "c", "d", "e")
	check := func(start int64, want bool) {
		t.Helper()
		got, err := appendKeepsOrder(ctx, st, "todo", start, "pending")
		if err != nil || got != want {
			t.Errorf("slice from todo row %d: keeps order %v (%v), want %v", start, got, err, want)
		}
	}
	check(0, true) // no pending table yet
	write("pending", pillar.Chunk{}, []string{"page_key", "chunk_no"}, "a", "b", "b")
	check(2, true)  // c after b
	check(1, false) // b again: a rerun, or a page split between slices
	check(0, false)
	write("pending", pillar.Chunk{}, nil, "a", "b")
	check(4, false) // the pending table lost its order already
}

// A first embed that fails after some slices went straight into the
// version table completes on the next run, with the same rows as a run
// that never failed.
func TestDirectEmbedResumesAfterFailure(t *testing.T) {
	st := newStore(t, 60)
	o := Options{SlicePages: 10, Batch: 4, EmbedConcurrency: 1}
	r, err := Rechunk(ctx, st, "recursive:size=64,overlap=8", o)
	if err != nil {
		t.Fatal(err)
	}
	bad := fakemodel.Start(fakemodel.Options{Dim: 8, Slots: 1, FailEvery: 40, Fail5xx: true})
	defer bad.Close()
	spec := func(s *fakemodel.Server, extra string) string {
		return fmt.Sprintf("openai:url=%s,model=m,dim=8%s", s.URL(), extra)
	}
	if _, err := Embed(ctx, st, r.Version, spec(bad, ",retries=0"), o); err == nil {
		t.Fatal("the embed with a failing model succeeded")
	}
	sn, _ := st.Snapshot(ctx)
	e, _ := embedder.Parse(spec(bad, ""), nil)
	v, err := pillar.LoadVersion(ctx, sn, pillar.EmbedVersionID(r.Version, e.ID()))
	sn.Release()
	if err != nil || v.State != pillar.StateBuilding {
		t.Fatalf("after the failure: %+v %v; want a building version", v, err)
	}
	if rows(t, st, v.Table) == 0 {
		t.Fatal("no slice was committed before the failure: the test exercised nothing")
	}
	good := fakemodel.Start(fakemodel.Options{Dim: 8, Slots: 2})
	defer good.Close()
	res, err := Embed(ctx, st, r.Version, spec(good, ""), o)
	if err != nil {
		t.Fatal(err)
	}
	fresh := newStore(t, 60)
	r2, _ := Rechunk(ctx, fresh, "recursive:size=64,overlap=8", o)
	want, err := Embed(ctx, fresh, r2.Version, spec(good, ""), o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != want.Rows || res.Pages != want.Pages || rows(t, st, res.Table) != rows(t, fresh, want.Table) {
		t.Fatalf("resumed: %d rows, %d pages, table %d; a clean run: %d, %d, %d", res.Rows, res.Pages, rows(t, st, res.Table), want.Rows, want.Pages, rows(t, fresh, want.Table))
	}
}

// planSpy records the titles of the reduces it runs and calls afterMap
// after each map.
type planSpy struct {
	*jobs.Local
	reduces  []string
	maps     int
	afterMap func(n int)
}

func (s *planSpy) Reduce(ctx context.Context, r mapreduce.Job, op *jobs.Op) error {
	s.reduces = append(s.reduces, op.Title)
	return s.Local.Reduce(ctx, r, op)
}

func (s *planSpy) Map(ctx context.Context, m mapreduce.Job, op *jobs.Op) error {
	err := s.Local.Map(ctx, m, op)
	s.maps++
	if s.afterMap != nil {
		s.afterMap(s.maps)
	}
	return err
}

func (s *planSpy) planned() int {
	n := 0
	for _, t := range s.reduces {
		if strings.HasPrefix(t, "backfill plan ") {
			n++
		}
	}
	return n
}

// A first build reads its slices from the source table itself (no plan
// reduce, no todo copy); when the source changes between two slices, the
// build plans the rest against the slices done and ends as a clean build
// of the changed source does.
func TestFirstBuildReadsSourceInPlace(t *testing.T) {
	st := newStore(t, 60)
	spy := &planSpy{Local: jobs.NewLocal(st, nil)}
	o := Options{SlicePages: 25, Runner: spy}
	r, err := Rechunk(ctx, st, "recursive:size=64,overlap=8", o)
	if err != nil {
		t.Fatal(err)
	}
	e, err := Embed(ctx, st, r.Version, "hash:dim=16", o)
	if err != nil {
		t.Fatal(err)
	}
	if n := spy.planned(); n != 0 || r.Slices != 3 || e.Slices == 0 {
		t.Fatalf("first builds ran %d plan reduces (want 0) and %d, %d slices: %q", n, r.Slices, e.Slices, spy.reduces)
	}
	assertNoTables(t, st, TodoPrefix)

	// The docs change after the first slice of another first build.
	st2 := newStore(t, 60)
	spy2 := &planSpy{Local: jobs.NewLocal(st2, nil)}
	spy2.afterMap = func(n int) {
		if n == 1 {
			writeDocs(t, st2, 60, "v2")
		}
	}
	o2 := Options{SlicePages: 25, Runner: spy2}
	r2, err := Rechunk(ctx, st2, "recursive:size=64,overlap=8", o2)
	if err != nil {
		t.Fatal(err)
	}
	if spy2.planned() == 0 {
		t.Fatalf("the source changed after slice 1 and nothing was planned again: %q", spy2.reduces)
	}
	assertNoTables(t, st2, TodoPrefix)
	fresh := newStore(t, 60)
	writeDocs(t, fresh, 60, "v2")
	want, err := Rechunk(ctx, fresh, "recursive:size=64,overlap=8", Options{SlicePages: 25})
	if err != nil {
		t.Fatal(err)
	}
	if r2.Rows != want.Rows || r2.Pages != want.Pages || rows(t, st2, r2.Table) != rows(t, fresh, want.Table) {
		t.Fatalf("rebuilt after the change: %d rows, %d pages, table %d; a clean build of the changed docs: %d, %d, %d",
			r2.Rows, r2.Pages, rows(t, st2, r2.Table), want.Rows, want.Pages, rows(t, fresh, want.Table))
	}
	if got, wantHashes := chunkHashes(t, st2, r2.Table), chunkHashes(t, fresh, want.Table); got != wantHashes {
		t.Fatalf("chunks after the change differ from a clean build's:\n%s\nwant\n%s", got, wantHashes)
	}
}

func assertNoTables(t *testing.T, st pillar.Store, prefix string) {
	t.Helper()
	sn, _ := st.Snapshot(ctx)
	defer sn.Release()
	ts, err := sn.Tables(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range ts {
		if strings.HasPrefix(ti.Name, prefix) {
			t.Errorf("table %s is left", ti.Name)
		}
	}
}

// chunkHashes lists a chunk table's (page, chunk, content hash) in order.
func chunkHashes(t *testing.T, st pillar.Store, table string) string {
	t.Helper()
	var b strings.Builder
	err := eachRow(ctx, st2snap(t, st), table, false, func(c *pillar.Chunk) error {
		fmt.Fprintf(&b, "%s %d %s %d\n", c.PageKey, c.ChunkNo, c.ContentHash, len(c.Text))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func st2snap(t *testing.T, st pillar.Store) pillar.Snapshot {
	sn, err := st.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sn.Release() })
	return sn
}
