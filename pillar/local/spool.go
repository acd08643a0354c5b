package local

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/parquet-go/parquet-go"

	"github.com/pillarkit/pillar/internal/pqzstd"
	"github.com/pillarkit/pillar/pillar"
)

// A transaction's enqueued records are held in memory up to spillBytes;
// past it they are written to the partitions' segment files in staging as
// they come (one open writer per partition, a row group flushed every
// spoolRowGroupBytes), so a republish of 200k records of 50 KB in one
// transaction does not hold 10 GB until its commit. The files are the
// segments the commit moves into data/; nothing is read back (a segment's
// sums are computed from the write stream: segsums.go).
const (
	spillBytes         = 64 << 20
	spoolRowGroupBytes = 1 << 20
)

// queueSpool is one partition's segment files being written in staging: a
// spool whose file reaches maxFileChunks column chunks (the same bound as a
// table file's, for the same reason: the writer keeps, and every read of
// the segment decodes, each row group's metadata) finishes it and goes on
// in the next segment of the partition. The commit gives the segments of
// one spool consecutive offsets in file order (done, then the open one).
type queueSpool struct {
	partition int
	done      []stagedQueue // finished segments, closed and synced, in order

	// The segment being written.
	name    string
	f       *segFile
	w       *parquet.GenericWriter[pillar.ExportRecord]
	count   int64
	flushed int64 // w.Size() at the last row-group flush
	groups  int   // row groups flushed into it
	next    bool  // full: the next record starts a new segment
}

// queueColumns is the number of leaf columns of a queue segment (the column
// chunks of one row group).
var queueColumns = len(parquet.SchemaOf(pillar.ExportRecord{}).Columns())

// segmentName is the staging name of partition p's n-th segment of a
// transaction.
func segmentName(p, n int) string {
	if n == 0 {
		return fmt.Sprintf("q%05d.parquet", p)
	}
	return fmt.Sprintf("q%05d-%04d.parquet", p, n)
}

// queueBuf is a transaction's export-queue records: pending in memory,
// then spooled by partition.
type queueBuf struct {
	pending      []pillar.ExportRecord
	pendingBytes int64
	spools       map[int]*queueSpool
	queued       int
}

func recordBytes(r *pillar.ExportRecord) int64 {
	return int64(len(r.Value) + len(r.PageKey) + len(r.Cause) + len(r.Op) + len(r.Priority) + len(r.Publication) + 64)
}

// addQueued appends validated records, spilling to staging past spillBytes.
func (t *tx) addQueued(ctx context.Context, recs []pillar.ExportRecord) error {
	q := &t.queue
	for i := range recs {
		q.pending = append(q.pending, recs[i])
		q.pendingBytes += recordBytes(&recs[i])
	}
	q.queued += len(recs)
	limit := int64(spillBytes)
	if t.s.opts.spillBytes > 0 {
		limit = t.s.opts.spillBytes
	}
	if q.pendingBytes > limit {
		return t.spill(ctx)
	}
	return nil
}

// spill writes the pending records to their partitions' spools.
func (t *tx) spill(ctx context.Context) error {
	q := &t.queue
	if q.spools == nil {
		q.spools = map[int]*queueSpool{}
	}
	group := int64(spoolRowGroupBytes)
	if t.s.opts.spoolGroupBytes > 0 {
		group = t.s.opts.spoolGroupBytes
	}
	for _, r := range q.pending {
		p := int(r.Partition)
		sp := q.spools[p]
		if sp == nil {
			sp = &queueSpool{partition: p}
			q.spools[p] = sp
		}
		if sp.next {
			if err := t.finishSegment(ctx, sp); err != nil {
				return err
			}
		}
		if sp.w == nil {
			if err := t.createSegment(sp); err != nil {
				return err
			}
		}
		if _, err := sp.w.Write([]pillar.ExportRecord{r}); err != nil {
			return fmt.Errorf("export queue partition %d: segment %s: %w", p, sp.name, err)
		}
		sp.count++
		if size := sp.w.Size(); size-sp.flushed > group {
			if err := sp.w.Flush(); err != nil {
				return fmt.Errorf("export queue partition %d: segment %s: %w", p, sp.name, err)
			}
			sp.flushed = sp.w.Size()
			sp.groups++
			// Another row group would take the file past the bound (the
			// one Close flushes included).
			sp.next = (sp.groups+1)*queueColumns > t.s.opts.segmentBound()
		}
	}
	clear(q.pending)
	q.pending, q.pendingBytes = q.pending[:0], 0
	return nil
}

// segmentBound is a queue segment's most column chunks: maxFileChunks,
// or the tests' segmentChunks.
func (o *Options) segmentBound() int {
	if o.segmentChunks > 0 {
		return o.segmentChunks
	}
	return maxFileChunks
}

// createSegment starts the spool's next segment file in staging.
func (t *tx) createSegment(sp *queueSpool) error {
	sp.name = segmentName(sp.partition, len(sp.done))
	raw, err := t.s.opts.FS.Create(filepath.Join(t.staging, sp.name))
	if err != nil {
		return fmt.Errorf("export queue partition %d: %w", sp.partition, err)
	}
	sp.f = newSegFile(raw)
	sp.w = newSegmentWriter(sp.f)
	sp.count, sp.flushed, sp.groups, sp.next = 0, 0, 0, false
	return nil
}

// newSegmentWriter returns the Parquet writer of a queue segment written
// through f. It has no write buffer of its own (f buffers, below its
// sums), so that each column chunk starts and ends at one of its writes
// (segsums.go). The value column has neither page bounds nor statistics
// (as sstbuilder's export files): each data page's header would carry
// its smallest and largest value twice over, uncompressed, the column
// index and the footer once more each (with 50 KB values a segment was
// 1.9 times its values and its heads, which a heads read reads, 5 MB a 48
// MB segment), and the writer would hold every page's bounds until Close.
// Nothing reads them.
func newSegmentWriter(f *segFile) *parquet.GenericWriter[pillar.ExportRecord] {
	return parquet.NewGenericWriter[pillar.ExportRecord](f, parquet.Compression(pqzstd.Default), parquet.WriteBufferSize(-1),
		parquet.SkipPageBounds(headsColumn), parquet.SkipPageStatistics(headsColumn))
}

// finishSegment closes a full segment of the spool (footer, sums, fsync:
// like a table file's rollover, in the write that needs the next file) and
// adds it to the spool's done segments.
func (t *tx) finishSegment(ctx context.Context, sp *queueSpool) error {
	st, err := t.closeSegment(ctx, sp)
	if err != nil {
		return err
	}
	if err := sp.f.Sync(); err != nil {
		return fmt.Errorf("export queue partition %d: segment %s: %w", sp.partition, sp.name, err)
	}
	if err := t.closedSegment(ctx, sp, &st); err != nil {
		return err
	}
	sp.done = append(sp.done, st)
	sp.w = nil
	t.s.hook("queue-segment-rolled")
	return nil
}

// closeSegment writes the footer of the spool's open segment and returns
// its entry, with its heads and footer checksums from the bytes written
// (segsums.go).
func (t *tx) closeSegment(ctx context.Context, sp *queueSpool) (stagedQueue, error) {
	fail := func(err error) (stagedQueue, error) {
		return stagedQueue{}, fmt.Errorf("export queue partition %d: segment %s: %w", sp.partition, sp.name, err)
	}
	if err := closeSegmentWriter(sp.w, sp.f); err != nil {
		return fail(err)
	}
	st := stagedQueue{partition: sp.partition, name: sp.name, count: sp.count, bytes: sp.f.n, crc: sp.f.sum()}
	if t.s.opts.rereadSums {
		return st, nil // closedSegment computes them
	}
	path := filepath.Join(t.staging, sp.name)
	open := func() (io.ReaderAt, func(), error) {
		if err := sp.f.buf.Flush(); err != nil {
			return nil, nil, err
		}
		f, err := t.s.opts.FS.Open(path)
		if err != nil {
			return nil, nil, err
		}
		return f, func() { f.Close() }, nil
	}
	var err error
	if st.headsCRC, st.footerCRC, err = sp.f.streamSums(ctx, sp.w.File().Metadata(), open); err != nil {
		return fail(err)
	}
	return st, nil
}

// closedSegment closes the spool's segment file (synced) and checks its
// size against the bytes written.
func (t *tx) closedSegment(ctx context.Context, sp *queueSpool, st *stagedQueue) error {
	fail := func(err error) error {
		return fmt.Errorf("export queue partition %d: segment %s: %w", sp.partition, sp.name, err)
	}
	err := sp.f.Close()
	sp.f = nil
	if err != nil {
		return fail(err)
	}
	path := filepath.Join(t.staging, sp.name)
	fi, err := os.Stat(path)
	if err != nil {
		return fail(err)
	}
	if fi.Size() != st.bytes {
		return fail(fmt.Errorf("%d bytes in the file, %d written: %w", fi.Size(), st.bytes, pillar.ErrCorrupt))
	}
	if t.s.opts.rereadSums {
		if st.headsCRC, st.footerCRC, err = t.rereadSums(ctx, path, st.bytes, st.crc); err != nil {
			return fail(err)
		}
	}
	return nil
}

// closeSpools closes the spools' files (an aborted or failed transaction).
func (t *tx) closeSpools() {
	for _, sp := range t.queue.spools {
		if sp.f != nil {
			sp.f.raw.Close() // the buffer goes with the staging
			sp.f = nil
		}
	}
}

// stageQueue finishes the segment files of every partition touched, in
// staging, before the commit lock is taken: the spools' open segments, and
// the pending records (written now), all synced in one round (concurrent
// fsyncs share the journal's commits; a spool's full segments were synced
// as it went on past them). It returns them by partition, each
// partition's in offset order.
func (t *tx) stageQueue(ctx context.Context) ([]stagedQueue, error) {
	if t.queue.queued == 0 {
		return nil, nil
	}
	if err := t.spill(ctx); err != nil {
		return nil, t.errf("commit: %w", err)
	}
	parts := make([]int, 0, len(t.queue.spools))
	for p, sp := range t.queue.spools {
		if sp.w != nil {
			parts = append(parts, p)
		}
	}
	slices.Sort(parts)
	last := make([]stagedQueue, len(parts))
	syncs := make([]func() error, len(parts))
	for i, p := range parts {
		sp := t.queue.spools[p]
		st, err := t.closeSegment(ctx, sp)
		if err != nil {
			return nil, t.errf("commit: %w", err)
		}
		last[i] = st
		syncs[i] = func() error {
			return wrapErr(fmt.Sprintf("export queue partition %d: segment %s", p, sp.name), sp.f.Sync())
		}
	}
	if err := syncAll(syncs...); err != nil {
		return nil, t.errf("commit: %w", err)
	}
	var out []stagedQueue
	for i, p := range parts {
		sp := t.queue.spools[p]
		if err := t.closedSegment(ctx, sp, &last[i]); err != nil {
			return nil, t.errf("commit: %w", err)
		}
		sp.w = nil
		out = append(append(out, sp.done...), last[i])
	}
	return out, nil
}

// rereadSums returns the heads and footer checksums of a staged segment
// the way staging computed them before stream sums: by reading the file
// back whole (segmentSums; Options.rereadSums, for tests and benchmarks).
func (t *tx) rereadSums(ctx context.Context, path string, size int64, written string) (heads, footer string, err error) {
	f, err := t.s.opts.FS.Open(path)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	return segmentSums(ctx, f, size, written)
}
