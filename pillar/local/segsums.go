package local

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"sort"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/pillarkit/pillar/pillar"
)

// Stream sums (queueheads.go): a queue segment's heads and footer
// checksums are computed from the bytes as they are written, not from the
// file read back. The Parquet writer writes straight (unbuffered) into a
// segFile, so each of its writes is a page header, a page, an index or the
// footer: a column chunk starts and ends at a write. segFile keeps the
// running CRC32C of everything written (the file's crc32c) and, at write
// boundaries, marks: the offset and the running CRC32C there. Once the
// footer is written, the writer's metadata names the value column chunks;
// the CRC32C of any byte range [a, b) follows from the running sums at a
// and b (crcRange: CRC32C is linear, so crc(A‖B) = crc(A)·x^8|B| ⊕ crc(B)),
// and the heads checksum is the ranges outside the value chunks combined
// in order (crcCombine). A boundary that falls between marks (a write the
// marks coalesced) is served by reading back the bytes between the two
// marks around it (at most 2·markGap), checked against both marks: so the
// sums always describe the bytes written, and staging reads what the
// metadata needs, not the values.

// markGap is how far apart marks may be once the row groups are written:
// the page index and footer (thrift, written field by field: hundreds of
// writes per column chunk) are marked every markGap bytes, so the footer's
// start costs a read of a few KB. The row groups' writes (a page header, a
// page: a few per column chunk) are each marked.
const markGap = 4 << 10

// segWriteBuffer is the buffer between a segFile and its file (the Parquet
// writer's own buffer is off, so that its writes stay whole).
const segWriteBuffer = 256 << 10

// crcMark is the running CRC32C of a file's first off bytes.
type crcMark struct {
	off int64
	crc uint32
}

// segFile is a queue segment's file being written: a File that keeps the
// CRC32C of what was written through it, marks of the running sum, and the
// last 8 bytes written (the footer's length and magic).
type segFile struct {
	raw   File
	buf   *bufio.Writer
	crc   uint32
	n     int64
	marks []crcMark
	tail  [8]byte
	// coalesce: mark only writes of markGap bytes or more, or markGap
	// past the last mark (the page index and footer, after the last row
	// group: thrift writes them field by field); else every write.
	coalesce bool
	// readBack counts the bytes streamSums read back (boundaries between
	// marks).
	readBack int64
}

func newSegFile(raw File) *segFile {
	return &segFile{raw: raw, buf: bufio.NewWriterSize(raw, segWriteBuffer), marks: []crcMark{{}}}
}

func (f *segFile) mark() {
	if last := f.marks[len(f.marks)-1]; last.off != f.n {
		f.marks = append(f.marks, crcMark{f.n, f.crc})
	}
}

func (f *segFile) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	big := len(b) >= markGap
	if !f.coalesce || big || f.n-f.marks[len(f.marks)-1].off >= markGap {
		f.mark()
	}
	n, err := f.buf.Write(b)
	f.crc = crc32.Update(f.crc, castagnoli, b[:n])
	f.n += int64(n)
	if n >= 8 {
		copy(f.tail[:], b[n-8:n])
	} else {
		copy(f.tail[:], f.tail[n:])
		copy(f.tail[8-n:], b[:n])
	}
	if big {
		f.mark()
	}
	return n, err
}

func (f *segFile) sum() string { return crcString(f.crc) }

// closeSegmentWriter closes w, the Parquet writer of a segment written
// through f: its last row group flushed as the others (each write marked),
// then the page index and footer (marks coalesced).
func closeSegmentWriter(w *parquet.GenericWriter[pillar.ExportRecord], f *segFile) error {
	if err := w.Flush(); err != nil {
		return err
	}
	f.coalesce = true
	return w.Close()
}

// Sync writes out the buffer and fsyncs the file.
func (f *segFile) Sync() error {
	if err := f.buf.Flush(); err != nil {
		return err
	}
	return f.raw.Sync()
}

func (f *segFile) Close() error {
	err := f.buf.Flush()
	if cerr := f.raw.Close(); err == nil {
		err = cerr
	}
	return err
}

func (f *segFile) Name() string { return f.raw.Name() }

// streamSums returns the heads and footer checksums of a segment written
// whole through f (its Parquet writer closed), whose writer's metadata is
// md. open opens the file (its bytes written out) for the reads of
// boundaries between marks; it is called at most once, and not at all
// when every boundary is at a mark.
func (f *segFile) streamSums(ctx context.Context, md *format.FileMetaData, open func() (io.ReaderAt, func(), error)) (heads, footer string, err error) {
	size := f.n
	f.mark() // the end
	if size < 12 || string(f.tail[4:]) != string(parquetMagic) {
		return "", "", fmt.Errorf("footer: no closing magic in the %d bytes written: %w", size, pillar.ErrCorrupt)
	}
	n := int64(binary.LittleEndian.Uint32(f.tail[:4]))
	if n == 0 || n > size-12 {
		return "", "", fmt.Errorf("footer: length %d does not fit the %d bytes written: %w", n, size, pillar.ErrCorrupt)
	}
	start := size - 8 - n
	ranges, err := headsRangesOf(md, start, size)
	if err != nil {
		return "", "", err
	}
	var r io.ReaderAt
	done := func() {}
	defer func() { done() }()
	at := func(x int64) (uint32, error) {
		i := sort.Search(len(f.marks), func(i int) bool { return f.marks[i].off > x }) - 1
		m := f.marks[i]
		if m.off == x {
			return m.crc, nil
		}
		// Between two marks: read them back, checked against both.
		if r == nil {
			rr, closeR, err := open()
			if err != nil {
				return 0, err
			}
			r, done = rr, closeR
		}
		next := f.marks[i+1]
		b := make([]byte, next.off-m.off)
		if _, err := r.ReadAt(b, m.off); err != nil {
			return 0, fmt.Errorf("bytes %d to %d: %w", m.off, next.off, err)
		}
		f.readBack += int64(len(b))
		if got := crc32.Update(m.crc, castagnoli, b); got != next.crc {
			return 0, fmt.Errorf("checksum mismatch: bytes %d to %d as written and as read back differ: %w", m.off, next.off, pillar.ErrCorrupt)
		}
		return crc32.Update(m.crc, castagnoli, b[:x-m.off]), nil
	}
	rangeCRC := func(a, b int64) (uint32, error) {
		ca, err := at(a)
		if err != nil {
			return 0, err
		}
		cb, err := at(b)
		if err != nil {
			return 0, err
		}
		return crcRange(ca, cb, b-a), nil
	}
	var h uint32
	for _, rg := range ranges {
		if err := ctx.Err(); err != nil {
			return "", "", err
		}
		c, err := rangeCRC(rg[0], rg[1])
		if err != nil {
			return "", "", err
		}
		h = crcCombine(h, c, rg[1]-rg[0])
	}
	ft, err := rangeCRC(start, size)
	if err != nil {
		return "", "", err
	}
	return crcString(h), crcString(ft), nil
}

// CRC32C arithmetic (as zlib's crc32_combine, for the Castagnoli
// polynomial): polynomials over GF(2) modulo P, bit-reflected.

const castagnoliReflected = 0x82f63b78

// gfMul returns a·b modulo P.
func gfMul(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0 && a != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
			a ^= m
		}
		if b&1 != 0 {
			b = b>>1 ^ castagnoliReflected
		} else {
			b >>= 1
		}
	}
	return p
}

// x2n[k] is x^(2^k) modulo P.
var x2n = func() (t [64]uint32) {
	p := uint32(1) << 30 // x^1
	for k := range t {
		t[k] = p
		p = gfMul(p, p)
	}
	return t
}()

// shiftBytes returns x^(8n) modulo P: what appending n bytes multiplies a
// CRC32C by.
func shiftBytes(n int64) uint32 {
	p := uint32(1) << 31 // x^0
	for k := 3; n != 0; k++ {
		if n&1 != 0 {
			p = gfMul(x2n[k&63], p)
		}
		n >>= 1
	}
	return p
}

// crcCombine returns the CRC32C of A‖B from crc(A), crc(B) and |B|.
func crcCombine(a, b uint32, nb int64) uint32 { return gfMul(shiftBytes(nb), a) ^ b }

// crcRange returns the CRC32C of bytes [a, b) of a stream from the running
// CRC32C at a and at b and n = b-a.
func crcRange(atA, atB uint32, n int64) uint32 { return gfMul(shiftBytes(n), atA) ^ atB }
