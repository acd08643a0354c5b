package local

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pillarkit/pillar/pillar"
)

// rollOpts makes every enqueued record a row group of its own, bounds a
// segment at rollRecordsPerSegment of them (the store's own bound,
// maxFileChunks column chunks, is fullSegmentRecords: 56; at 8 the crash
// test's child commits 21 row groups instead of 146, which under -race cut
// TestKillDuringRolledQueueCommit from 91 s to a fraction) and spills past
// 1 KiB.
func rollOpts(o *Options) *Options {
	o.spoolGroupBytes = 1
	o.spillBytes = 1 << 10
	o.segmentChunks = rollRecordsPerSegment * queueColumns
	return o
}

// rollRecordsPerSegment is how many one-row-group records a segment holds
// under rollOpts.
const rollRecordsPerSegment = 8

// fullSegmentRecords is how many one-row-group records a segment holds at
// the store's own bound (maxFileChunks column chunks).
var fullSegmentRecords = maxFileChunks / queueColumns

// enqueueRolled commits, in one transaction, n[p] records of each
// partition p, interleaved (partition by partition, one at a time), with
// causes tag-p-i, and appends what it expects to want.
func enqueueRolled(t *testing.T, s *Store, c *fakeClock, n map[int]int, tag string, want map[int][]queued) {
	t.Helper()
	c.advance(time.Second)
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	left := map[int]int{}
	most := 0
	for p, k := range n {
		left[p] = k
		most = max(most, k)
	}
	for i := range most {
		for p := range s.meta.Partitions {
			if i >= n[p] {
				continue
			}
			if err := tx.Enqueue(ctx, pillar.ExportRecord{Partition: int32(p), PageKey: keyOfPartition(p, s.meta.Partitions), Op: pillar.OpPut,
				Cause: fmt.Sprintf("%s-%d-%d", tag, p, i), Value: []byte(fmt.Sprintf("value %s %d %d", tag, p, i))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tx.SetAttr(ctx, "tag", tag); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for p := range s.meta.Partitions {
		for i := range n[p] {
			want[p] = append(want[p], queued{fmt.Sprintf("%s-%d-%d", tag, p, i), c.Now().UnixMilli()})
		}
	}
}

// allSegments lists partition p's segments (index files' and tail) in
// offset order.
func allSegments(t *testing.T, s *Store, m *manifest, p int) []segment {
	t.Helper()
	var out []segment
	if q := m.Queue[p]; q != nil {
		if err := s.eachSegment(ctx, p, q, 0, func(sg segment) (bool, error) { out = append(out, sg); return true, nil }); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// checkQueueAround reads partition by partition the whole queue (values and
// heads), and a few records around every segment boundary, and compares
// with want (checkQueue reads from every offset: too slow for hundreds of
// records in 56-row-group segments under -race).
func checkQueueAround(t *testing.T, s *Store, want map[int][]queued) {
	t.Helper()
	sn, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	m := sn.(*snapshot).m
	for p, recs := range want {
		froms := []int64{0}
		var next int64
		for _, sg := range allSegments(t, s, m, p) {
			if sg.First != next {
				t.Fatalf("partition %d: segment %s starts at offset %d, the one before ends at %d", p, sg.File, sg.First, next)
			}
			next = sg.First + sg.Count
			froms = append(froms, max(sg.First-2, 0), sg.First, sg.First+1)
		}
		if next != int64(len(recs)) {
			t.Fatalf("partition %d: segments end at offset %d, want %d", p, next, len(recs))
		}
		for _, from := range froms {
			limit := 4
			if from == 0 {
				limit = len(recs) + 1
			}
			got, err := sn.ReadQueue(ctx, p, from, limit)
			if err != nil {
				t.Fatalf("partition %d from %d: %v", p, from, err)
			}
			heads, err := sn.(pillar.QueueHeadReader).ReadQueueHeads(ctx, p, from, limit)
			if err != nil {
				t.Fatalf("partition %d from %d heads: %v", p, from, err)
			}
			n := min(limit, len(recs)-int(from))
			if len(got) != n || len(heads) != n {
				t.Fatalf("partition %d from %d limit %d: %d records, %d heads, want %d", p, from, limit, len(got), len(heads), n)
			}
			for i, r := range got {
				w, h := recs[int(from)+i], heads[i]
				if r.Offset != from+int64(i) || r.Cause != w.cause || r.CommittedAt != w.committedAt ||
					h.Offset != r.Offset || h.PageKey != r.PageKey || h.CommittedAt != w.committedAt || h.Value != nil {
					t.Fatalf("partition %d offset %d: got %q at %d/%d (head at %d/%d), want %q at %d",
						p, from+int64(i), r.Cause, r.Offset, r.CommittedAt, h.Offset, h.CommittedAt, w.cause, w.committedAt)
				}
			}
		}
	}
}

// TestQueueSegmentsRollInOrder: a transaction's spool goes on in a new
// segment of its partition at its bound (rollOpts: 8 records' column chunks; the store's own, maxFileChunks, is the same code path); the segments of
// one commit get consecutive offsets in the order written, so ReadQueue,
// ReadQueueHeads and the queue index (at fanout 4 a commit of 7 segments
// becomes index files in its own commit) see every record at its offset,
// from the Store that wrote them and from a fresh one, and Verify passes.
// On the code before the bound each commit was one segment per partition
// (130 records: 130 row groups, 1,170 column chunks).
func TestQueueSegmentsRollInOrder(t *testing.T) {
	c := newFakeClock()
	dir := t.TempDir()
	s, err := Create(dir, rollOpts(&Options{Partitions: 2, Now: c.Now, queueFanout: 4}))
	if err != nil {
		t.Fatal(err)
	}
	want := map[int][]queued{}
	per := rollRecordsPerSegment
	enqueueRolled(t, s, c, map[int]int{0: 2*per + 5, 1: per + 6}, "a", want) // 3 and 2 segments
	enqueueRolled(t, s, c, map[int]int{0: 3}, "b", want)
	enqueueRolled(t, s, c, map[int]int{0: 6*per + 1, 1: per}, "c", want) // 7 and 1 (exactly full)
	m, err := s.current()
	if err != nil {
		t.Fatal(err)
	}
	wantSegs := map[int][]int64{ // records per segment, in offset order
		0: {int64(per), int64(per), 5, 3, int64(per), int64(per), int64(per), int64(per), int64(per), int64(per), 1},
		1: {int64(per), 6, int64(per)},
	}
	for p, counts := range wantSegs {
		segs := allSegments(t, s, m, p)
		var got []int64
		for _, sg := range segs {
			got = append(got, sg.Count)
			if groups, chunks := fileChunks(t, filepath.Join(dir, "data", sg.File)); chunks > s.opts.segmentBound() {
				t.Errorf("partition %d segment %s: %d column chunks (%d row groups), more than %d", p, sg.File, chunks, groups, s.opts.segmentBound())
			}
			if sg.HeadsCRC32C == "" || sg.FooterCRC32C == "" || sg.CRC32C == "" {
				t.Errorf("partition %d segment %s: sums missing: %+v", p, sg.File, sg)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(counts) {
			t.Errorf("partition %d: segments of %v records, want %v", p, got, counts)
		}
	}
	if len(m.Queue[0].Index) == 0 {
		t.Errorf("partition 0: no index file after 11 segments at fanout 4: %+v", m.Queue[0])
	}
	checkQueueAround(t, s, want)
	s2, err := Open(dir, &Options{queueFanout: 4})
	if err != nil {
		t.Fatal(err)
	}
	checkQueueAround(t, s2, want)
	rep, err := s2.Verify(ctx, nil)
	if err != nil || !rep.OK() {
		t.Fatalf("verify: %v %+v", err, rep)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "tx")); len(ents) != 0 {
		t.Errorf("staging left: %v", ents)
	}
}

// An aborted transaction that rolled its spools leaves nothing: no data
// file, no staging, the queue unchanged.
func TestQueueSegmentsRolledAbort(t *testing.T) {
	c := newFakeClock()
	dir := t.TempDir()
	s, err := Create(dir, rollOpts(&Options{Partitions: 1, Now: c.Now}))
	if err != nil {
		t.Fatal(err)
	}
	want := map[int][]queued{}
	enqueueRolled(t, s, c, map[int]int{0: 2}, "a", want)
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 * rollRecordsPerSegment {
		if err := tx.Enqueue(ctx, pillar.ExportRecord{Partition: 0, PageKey: keyOfPartition(0, 1), Op: pillar.OpPut, Cause: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	staged, _ := filepath.Glob(filepath.Join(dir, "tx", "*", "q*.parquet"))
	if len(staged) < 3 {
		t.Fatalf("setup: %d staged segment files before the abort (%v), want 3", len(staged), staged)
	}
	if err := tx.Abort(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "tx")); len(ents) != 0 {
		t.Errorf("staging left after abort: %v", ents)
	}
	checkQueueAround(t, s, want)
	checkNoOrphans(t, dir)
}

// The kill -9 test of a commit whose spools rolled: a child enqueues 3
// segments' worth in partition 0 and 2 in partition 1 (rolled while it
// enqueues: crash points there too) and kills itself at its n-th step; the
// reopened store holds the old queue or the new one, whole and in order,
// and no unnamed file or staging.
func TestKillDuringRolledQueueCommit(t *testing.T) {
	per := rollRecordsPerSegment
	n := map[int]int{0: 2*per + 5, 1: per + 5}
	if os.Getenv("PILLAR_LOCAL_CHILD") == "rolled" {
		c := newFakeClock()
		c.advance(time.Hour)
		s, err := Open(os.Getenv("PILLAR_LOCAL_DIR"), rollOpts(&Options{queueFanout: 4, Now: c.Now, crashAt: crashChild()}))
		if err != nil {
			os.Exit(3)
		}
		enqueueRolled(t, s, c, n, "new", map[int][]queued{})
		os.Exit(0)
	}
	c := newFakeClock()
	tmpl := filepath.Join(t.TempDir(), "template")
	s, err := Create(tmpl, rollOpts(&Options{Partitions: 2, Now: c.Now, queueFanout: 4}))
	if err != nil {
		t.Fatal(err)
	}
	old := map[int][]queued{}
	enqueueRolled(t, s, c, map[int]int{0: 1, 1: 2}, "old", old)
	sawOld, sawNew := false, false
	steps := crashPoints(t, "TestKillDuringRolledQueueCommit", "rolled", tmpl, 40, func(step int, dir string, killed bool, out []byte) {
		s2, err := Open(dir, &Options{queueFanout: 4})
		if err != nil {
			t.Fatalf("step %d: reopen: %v\n%s", step, err, out)
		}
		sn, _ := s2.Snapshot(ctx)
		var tag string
		if err := sn.Attr(ctx, "tag", &tag); err != nil {
			t.Fatal(err)
		}
		want := map[int][]queued{0: append([]queued(nil), old[0]...), 1: append([]queued(nil), old[1]...)}
		if tag == "new" {
			sawNew = true
			for p := range 2 {
				recs, err := sn.ReadQueue(ctx, p, int64(len(old[p])), 1)
				if err != nil || len(recs) != 1 {
					t.Fatalf("step %d: partition %d: the new records: %v %v", step, p, recs, err)
				}
				for i := range n[p] {
					want[p] = append(want[p], queued{fmt.Sprintf("new-%d-%d", p, i), recs[0].CommittedAt})
				}
				segs := allSegments(t, s2, sn.(*snapshot).m, p)
				if got, want := len(segs)-1, (n[p]+per-1)/per; got != want {
					t.Fatalf("step %d: partition %d: the commit made %d segments, want %d", step, p, got, want)
				}
			}
		} else {
			sawOld = true
		}
		sn.Release()
		checkQueueAround(t, s2, want)
		checkNoOrphans(t, dir)
		if !killed && tag != "new" {
			t.Fatalf("step %d: child finished but state is %s", step, tag)
		}
	})
	if !sawOld || !sawNew {
		t.Fatalf("crash points covered old=%v new=%v", sawOld, sawNew)
	}
	if steps < 8 {
		t.Fatalf("the child had %d steps: the rolls (2 in partition 0, 1 in 1) and 5 segment moves should be among them", steps)
	}
	t.Logf("killed at %d steps; both outcomes seen", steps)
}
