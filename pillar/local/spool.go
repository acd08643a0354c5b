package local

import (
	"context"
	"fmt"
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
// segments the commit moves into data/; nothing is read back.
const (
	spillBytes         = 64 << 20
	spoolRowGroupBytes = 1 << 20
)

// queueSpool is one partition's segment file being written in staging.
type queueSpool struct {
	name    string
	f       *crcFile
	w       *parquet.GenericWriter[pillar.ExportRecord]
	count   int64
	flushed int64 // w.Size() at the last row-group flush
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
func (t *tx) addQueued(recs []pillar.ExportRecord) error {
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
		return t.spill()
	}
	return nil
}

// spill writes the pending records to their partitions' spools.
func (t *tx) spill() error {
	q := &t.queue
	if q.spools == nil {
		q.spools = map[int]*queueSpool{}
	}
	for _, r := range q.pending {
		p := int(r.Partition)
		sp := q.spools[p]
		if sp == nil {
			sp = &queueSpool{name: fmt.Sprintf("q%05d.parquet", p)}
			raw, err := t.s.opts.FS.Create(filepath.Join(t.staging, sp.name))
			if err != nil {
				return fmt.Errorf("export queue partition %d: %w", p, err)
			}
			sp.f = &crcFile{File: raw}
			sp.w = parquet.NewGenericWriter[pillar.ExportRecord](sp.f, parquet.Compression(pqzstd.Default))
			q.spools[p] = sp
		}
		if _, err := sp.w.Write([]pillar.ExportRecord{r}); err != nil {
			return fmt.Errorf("export queue partition %d: %w", p, err)
		}
		sp.count++
		if size := sp.w.Size(); size-sp.flushed > spoolRowGroupBytes {
			if err := sp.w.Flush(); err != nil {
				return fmt.Errorf("export queue partition %d: %w", p, err)
			}
			sp.flushed = sp.w.Size()
		}
	}
	clear(q.pending)
	q.pending, q.pendingBytes = q.pending[:0], 0
	return nil
}

// closeSpools closes the spools' files (an aborted or failed transaction).
func (t *tx) closeSpools() {
	for _, sp := range t.queue.spools {
		if sp.f != nil {
			sp.f.Close()
			sp.f = nil
		}
	}
}

// stageQueue finishes one segment file per partition touched, in staging,
// before the commit lock is taken: the spools, and the pending records
// (written now), all synced in one round (concurrent fsyncs share the
// journal's commits).
func (t *tx) stageQueue(ctx context.Context) ([]stagedQueue, error) {
	if t.queue.queued == 0 {
		return nil, nil
	}
	if err := t.spill(); err != nil {
		return nil, t.errf("commit: %w", err)
	}
	parts := make([]int, 0, len(t.queue.spools))
	for p := range t.queue.spools {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	out := make([]stagedQueue, len(parts))
	syncs := make([]func() error, len(parts))
	for i, p := range parts {
		sp := t.queue.spools[p]
		if err := sp.w.Close(); err != nil {
			return nil, t.errf("commit: export queue partition %d: %w", p, err)
		}
		out[i] = stagedQueue{partition: p, name: sp.name, count: sp.count, crc: sp.f.sum()}
		syncs[i] = func() error { return wrapErr(fmt.Sprintf("export queue partition %d", p), sp.f.Sync()) }
	}
	if err := syncAll(syncs...); err != nil {
		return nil, t.errf("commit: %w", err)
	}
	for i, p := range parts {
		sp := t.queue.spools[p]
		err := sp.f.Close()
		sp.f = nil
		if err != nil {
			return nil, t.errf("commit: export queue partition %d: %w", p, err)
		}
		st, err := os.Stat(filepath.Join(t.staging, sp.name))
		if err != nil {
			return nil, t.errf("commit: export queue partition %d: %w", p, err)
		}
		out[i].bytes = st.Size()
		// The heads and footer checksums, from the file read back whole
		// once and checked against the bytes written (queueheads.go).
		if out[i].headsCRC, out[i].footerCRC, err = t.stagedSums(ctx, filepath.Join(t.staging, sp.name), st.Size(), out[i].crc); err != nil {
			return nil, t.errf("commit: export queue partition %d: staged segment %s: %w", p, sp.name, err)
		}
	}
	return out, nil
}

// stagedSums returns the heads and footer checksums of a staged segment
// file whose written bytes have CRC32C written.
func (t *tx) stagedSums(ctx context.Context, path string, size int64, written string) (heads, footer string, err error) {
	f, err := t.s.opts.FS.Open(path)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	return segmentSums(ctx, f, size, written)
}
