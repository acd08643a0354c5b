package sstbuilder

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/parquet-go/parquet-go"

	"github.com/pillarkit/pillar/pillar"
)

// VerifyExportFile checks a partition file's size and SHA-256 against its
// export.json entry.
func VerifyExportFile(dir string, f ExportFile) error {
	fh, err := os.Open(filepath.Join(dir, f.Name))
	if err != nil {
		return fmt.Errorf("sstbuilder: export partition %d: %w", f.Partition, err)
	}
	defer fh.Close()
	h := sha256.New()
	n, err := io.Copy(h, fh)
	if err != nil {
		return fmt.Errorf("sstbuilder: export partition %d: %s: %w", f.Partition, f.Name, err)
	}
	if n != f.Bytes {
		return fmt.Errorf("sstbuilder: export partition %d: %s has %d bytes, export.json says %d: %w", f.Partition, f.Name, n, f.Bytes, ErrCorruptExport)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != f.SHA256 {
		return fmt.Errorf("sstbuilder: export partition %d: %s sha256 %s, export.json says %s: %w", f.Partition, f.Name, got, f.SHA256, ErrCorruptExport)
	}
	return nil
}

// PartitionReader reads one partition file of an export as Rows, in file
// order. It checks each row's key syntax and op and, at the end, the row
// count in export.json; order and partition are checked by the Builder.
type PartitionReader struct {
	partition int
	name      string
	f         *os.File
	r         *parquet.GenericReader[ExportRow]
	batches   chan rowBatch // filled by the prefetching goroutine
	stop      chan struct{}
	fetched   chan struct{} // closed when the prefetching goroutine exits
	buf       []ExportRow
	i         int
	want      int64
	rows      int64
	bytes     int64
	row       Row
	keys      []byte // decoded keys of the current batch, KeySize bytes each
	err       error
	done      bool
}

// rowBatch is one batch of decoded rows; eof marks the last one.
type rowBatch struct {
	rows []ExportRow
	err  error
	eof  bool
}

// prefetchBatch is the number of rows decoded at a time; prefetchDepth
// batches are decoded ahead, so Parquet decoding overlaps the SST writing.
const (
	prefetchBatch = 64
	prefetchDepth = 4
)

// OpenPartition opens partition p of the export in dir. A partition without a
// file reads as no rows.
func OpenPartition(dir string, meta *ExportMeta, p int) (*PartitionReader, error) {
	if p < 0 || p >= meta.Partitions {
		return nil, fmt.Errorf("sstbuilder: export %s: partition %d out of range [0,%d)", meta.ID, p, meta.Partitions)
	}
	ef, ok := meta.File(p)
	r := &PartitionReader{partition: p, name: ef.Name, want: ef.Rows}
	if !ok {
		r.done = true
		return r, nil
	}
	f, err := os.Open(filepath.Join(dir, ef.Name))
	if err != nil {
		return nil, fmt.Errorf("sstbuilder: export %s: partition %d: %w", meta.ID, p, err)
	}
	r.f = f
	r.r = parquet.NewGenericReader[ExportRow](f)
	r.batches = make(chan rowBatch, prefetchDepth)
	r.stop = make(chan struct{})
	r.fetched = make(chan struct{})
	go r.prefetch()
	return r, nil
}

func (r *PartitionReader) prefetch() {
	defer close(r.fetched)
	for {
		buf := make([]ExportRow, prefetchBatch)
		n, err := r.r.Read(buf)
		b := rowBatch{rows: buf[:n], eof: errors.Is(err, io.EOF)}
		if err != nil && !b.eof {
			b.err = err
		}
		select {
		case r.batches <- b:
		case <-r.stop:
			return
		}
		if b.eof || b.err != nil {
			return
		}
	}
}

// Next advances to the next row.
func (r *PartitionReader) Next() bool {
	if r.err != nil {
		return false
	}
	for r.i >= len(r.buf) {
		if r.done {
			return false
		}
		b := <-r.batches
		r.buf, r.i = b.rows, 0
		// A fresh key buffer per batch, like Parquet's fresh value slices:
		// rows stay valid after Next (see stable).
		r.keys = make([]byte, len(b.rows)*pillar.KeySize)
		if b.err != nil {
			r.err = fmt.Errorf("sstbuilder: export partition %d: %s: read row %d: %w", r.partition, r.name, r.rows, b.err)
			return false
		}
		if b.eof {
			r.done = true
			if n := r.rows + int64(len(b.rows)); n != r.want {
				r.err = fmt.Errorf("sstbuilder: export partition %d: %s holds %d rows, export.json says %d: %w", r.partition, r.name, n, r.want, ErrCorruptExport)
				return false
			}
		}
	}
	er := &r.buf[r.i]
	key := r.keys[r.i*pillar.KeySize : (r.i+1)*pillar.KeySize]
	r.i++
	r.rows++
	if len(er.PageKey) != 2*pillar.KeySize {
		r.err = fmt.Errorf("sstbuilder: export partition %d: row %d: key %q: %w", r.partition, r.rows-1, er.PageKey, ErrBadKey)
		return false
	}
	if _, err := hex.Decode(key, []byte(er.PageKey)); err != nil {
		r.err = fmt.Errorf("sstbuilder: export partition %d: row %d: key %q: %w", r.partition, r.rows-1, er.PageKey, ErrBadKey)
		return false
	}
	r.row = Row{Key: key, Seq: er.Seq, Value: er.Value}
	switch er.Op {
	case pillar.OpPut:
	case pillar.OpDelete:
		r.row.Delete = true
	default:
		r.err = fmt.Errorf("sstbuilder: export partition %d: key %s: op %q is neither %q nor %q", r.partition, er.PageKey, er.Op, pillar.OpPut, pillar.OpDelete)
		return false
	}
	r.bytes += int64(len(er.Value)) + pillar.KeySize
	return true
}

// Row returns the current row. Unlike the general Rows contract, it stays
// valid after Next: every batch is decoded into fresh memory.
func (r *PartitionReader) Row() Row { return r.row }

// stable lets the Builder hold a row back without copying it.
func (r *PartitionReader) stable() {}

// Err returns the error that stopped Next, if any.
func (r *PartitionReader) Err() error { return r.err }

// RowsRead returns the number of rows read so far.
func (r *PartitionReader) RowsRead() int64 { return r.rows }

// Close releases the file.
func (r *PartitionReader) Close() error {
	if r.f == nil {
		return nil
	}
	close(r.stop)
	<-r.fetched // the prefetcher no longer touches the file
	r.r.Close()
	err := r.f.Close()
	r.f = nil
	return err
}
