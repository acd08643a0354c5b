package local

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"slices"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/pillarkit/pillar/pillar"
)

// Heads checksums (doc.go "Checksums"): a queue segment's entry records,
// besides the whole file's CRC32C, two more:
//
//	footer_crc32c  the CRC32C of the Parquet footer (from the footer's
//	               start to the end of the file: metadata, length, magic)
//	heads_crc32c   the CRC32C of every byte of the file outside its value
//	               column chunks (the footer, the page indexes and every
//	               other column: what ReadQueueHeads reads)
//
// A heads read checks, the first time a Store reads heads of the segment,
// the footer's length and checksum before it parses the footer (a damaged
// footer never reaches the Parquet decoder), then the heads checksum over
// the ranges the checked footer names. So Lorry's head scan past a bulk
// backlog of 50 KB values reads kilobytes, not the values. A full read
// (ReadQueue) still checks the whole file first. A segment without both
// sums (written before them) is checked whole by either read.
//
// Both sums are computed at staging from the bytes as they are written,
// like the file's crc32c (segsums.go): from the running CRC32C at the
// writes where the value column chunks start and end, which the writer's
// metadata names once the footer is written. Staging does not read the
// values back (the file is not read at all unless a chunk boundary falls
// inside a write, and then only the few KB around it, checked against the
// running sums). So the sums describe the bytes that were written, and a
// byte damaged on its way to the disk fails the reads that check it (a
// heads read in the heads, a full read anywhere).

// headsColumn is the column a heads read leaves out.
const headsColumn = "value"

// parquetMagic ends (and starts) a Parquet file.
var parquetMagic = []byte("PAR1")

// parquetFooterStart returns where the Parquet footer of the file f of size
// bytes starts, after checking the closing magic and that the footer's
// length fits the file (a damaged length must not size an allocation).
func parquetFooterStart(f io.ReaderAt, size int64) (int64, error) {
	if size < 12 {
		return 0, fmt.Errorf("footer: %d bytes is too short for a Parquet file: %w", size, pillar.ErrCorrupt)
	}
	var tail [8]byte
	if _, err := f.ReadAt(tail[:], size-8); err != nil {
		return 0, fmt.Errorf("footer: %w", err)
	}
	if !bytes.Equal(tail[4:], parquetMagic) {
		return 0, fmt.Errorf("footer: no closing magic: %w", pillar.ErrCorrupt)
	}
	n := int64(binary.LittleEndian.Uint32(tail[:4]))
	if n == 0 || n > size-12 {
		return 0, fmt.Errorf("footer: length %d does not fit the file's %d bytes: %w", n, size, pillar.ErrCorrupt)
	}
	return size - 8 - n, nil
}

// openParquet is parquet.OpenFile that turns a panic of the decoder (on a
// damaged file) into an error wrapping ErrCorrupt.
func openParquet(f io.ReaderAt, size int64, opts ...parquet.FileOption) (pf *parquet.File, err error) {
	defer func() {
		if r := recover(); r != nil {
			pf, err = nil, fmt.Errorf("parquet: %v: %w", r, pillar.ErrCorrupt)
		}
	}()
	return parquet.OpenFile(f, size, opts...)
}

// headsRanges returns the byte ranges [from, to) of a queue segment file
// of size bytes outside its value column chunks, in file order; start is
// where its footer starts (parquetFooterStart checked it: the footer's
// length fits the file before the decoder sees it).
func headsRanges(f io.ReaderAt, start, size int64) ([][2]int64, error) {
	pf, err := openParquet(f, size, parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return nil, fmt.Errorf("footer: %w: %w", err, pillar.ErrCorrupt)
	}
	return headsRangesOf(pf.Metadata(), start, size)
}

// headsRangesOf returns the byte ranges [from, to) outside the value
// column chunks that md names, in file order, of a segment file of size
// bytes whose footer starts at start. Staging (from the writer's
// metadata) and a heads read (from the footer) derive the ranges the
// heads checksum covers here.
func headsRangesOf(md *format.FileMetaData, start, size int64) ([][2]int64, error) {
	var skip [][2]int64
	for _, rg := range md.RowGroups {
		for _, c := range rg.Columns {
			md := c.MetaData
			if len(md.PathInSchema) != 1 || md.PathInSchema[0] != headsColumn {
				continue
			}
			from := md.DataPageOffset
			if md.DictionaryPageOffset > 0 && md.DictionaryPageOffset < from {
				from = md.DictionaryPageOffset
			}
			to := from + md.TotalCompressedSize
			if from < 0 || md.TotalCompressedSize < 0 || to < from || to > start {
				return nil, fmt.Errorf("footer: value column chunk [%d,%d) outside the file's %d bytes before its footer: %w", from, to, start, pillar.ErrCorrupt)
			}
			skip = append(skip, [2]int64{from, to})
		}
	}
	slices.SortFunc(skip, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	var out [][2]int64
	at := int64(0)
	for _, s := range skip {
		if s[0] > at {
			out = append(out, [2]int64{at, s[0]})
		}
		at = max(at, s[1])
	}
	if at < size {
		out = append(out, [2]int64{at, size})
	}
	return out, nil
}

// crcRanges returns the CRC32C of the bytes of f in ranges (in order).
func crcRanges(ctx context.Context, f io.ReaderAt, ranges [][2]int64) (string, error) {
	var crc uint32
	buf := make([]byte, 256<<10)
	for _, r := range ranges {
		for off := r[0]; off < r[1]; {
			if err := ctx.Err(); err != nil {
				return "", err
			}
			n := min(int64(len(buf)), r[1]-off)
			if _, err := f.ReadAt(buf[:n], off); err != nil {
				return "", err
			}
			crc = crc32.Update(crc, castagnoli, buf[:n])
			off += n
		}
	}
	return crcString(crc), nil
}

// segmentSums reads a queue segment file whole once and returns its heads
// and footer checksums, after checking that its CRC32C is written, the
// CRC32C of the bytes written to it. Staging computed the sums so before
// stream sums (segsums.go); tests and benchmarks compare with it
// (Options.rereadSums).
func segmentSums(ctx context.Context, f io.ReaderAt, size int64, written string) (heads, footer string, err error) {
	start, err := parquetFooterStart(f, size)
	if err != nil {
		return "", "", err
	}
	ranges, err := headsRanges(f, start, size)
	if err != nil {
		return "", "", err
	}
	got, heads, footer, err := rangeSums(ctx, f, size, start, ranges, nil)
	if err != nil {
		return "", "", err
	}
	if got != written {
		return "", "", fmt.Errorf("checksum mismatch: the bytes written have crc32c %s, the file reads back %s: %w", written, got, pillar.ErrCorrupt)
	}
	return heads, footer, nil
}

// rangeSums reads a queue segment file of size bytes whole once and
// returns its CRC32C, the CRC32C of its bytes in ranges (its heads
// checksum, ranges from headsRanges) and from start on (its footer
// checksum), reporting each chunk read to progress (may be nil).
func rangeSums(ctx context.Context, f io.ReaderAt, size, start int64, ranges [][2]int64, progress func(int64)) (whole, heads, footer string, err error) {
	var all, h, ft uint32
	buf := make([]byte, 256<<10)
	ri := 0
	for off := int64(0); off < size; {
		if err := ctx.Err(); err != nil {
			return "", "", "", err
		}
		n := min(int64(len(buf)), size-off)
		b := buf[:n]
		if _, err := f.ReadAt(b, off); err != nil {
			return "", "", "", err
		}
		if progress != nil {
			progress(n)
		}
		all = crc32.Update(all, castagnoli, b)
		end := off + n
		for ri < len(ranges) && ranges[ri][0] < end {
			lo, hi := max(ranges[ri][0], off), min(ranges[ri][1], end)
			if lo < hi {
				h = crc32.Update(h, castagnoli, b[lo-off:hi-off])
			}
			if ranges[ri][1] > end {
				break // the range goes on in the next chunk
			}
			ri++
		}
		if end > start {
			ft = crc32.Update(ft, castagnoli, b[max(start, off)-off:])
		}
		off = end
	}
	return crcString(all), crcString(h), crcString(ft), nil
}

// openQueueHeads opens a queue segment file for a heads read: checked whole
// (openData) when the segment lacks a heads or footer checksum, else its
// size, footer checksum and heads checksum, once per file and Store (a file
// checked whole counts).
func (s *Store) openQueueHeads(ctx context.Context, seg segment) (*os.File, error) {
	if seg.HeadsCRC32C == "" || seg.FooterCRC32C == "" || seg.CRC32C == "" {
		return s.openData(ctx, seg.File, seg.Bytes, seg.CRC32C)
	}
	name := seg.File
	checked := func() bool {
		_, whole := s.verified.Load(name)
		_, heads := s.headsVerified.Load(name)
		return whole || heads
	}
	return s.openChecked(name, checked, func(f *os.File) error {
		if err := checkHeads(ctx, f, seg); err != nil {
			return fmt.Errorf("file %s: %w", name, err)
		}
		s.headsVerified.Store(name, struct{}{})
		return nil
	})
}

// checkHeads checks an open queue segment file's size, its footer's
// checksum (before the footer is parsed) and its heads checksum.
func checkHeads(ctx context.Context, f *os.File, seg segment) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := seg.Bytes
	if st.Size() != size {
		return fmt.Errorf("%d bytes, the manifest records %d: %w", st.Size(), size, pillar.ErrCorrupt)
	}
	start, err := parquetFooterStart(f, size)
	if err != nil {
		return err
	}
	got, err := crcRanges(ctx, f, [][2]int64{{start, size}})
	if err != nil {
		return fmt.Errorf("footer checksum: %w", err)
	}
	if got != seg.FooterCRC32C {
		return fmt.Errorf("footer checksum mismatch: the manifest records footer_crc32c %s, the file has %s: %w", seg.FooterCRC32C, got, pillar.ErrCorrupt)
	}
	ranges, err := headsRanges(f, start, size)
	if err != nil {
		return err
	}
	if got, err = crcRanges(ctx, f, ranges); err != nil {
		return fmt.Errorf("heads checksum: %w", err)
	}
	if got != seg.HeadsCRC32C {
		return fmt.Errorf("heads checksum mismatch: the manifest records heads_crc32c %s, the file has %s: %w", seg.HeadsCRC32C, got, pillar.ErrCorrupt)
	}
	return nil
}
