package local

import (
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/parquet-go/parquet-go"

	"github.com/pillarkit/pillar/pillar"
)

// Heads checksums (doc.go "Checksums"): a queue segment's entry records,
// besides the whole file's CRC32C, heads_crc32c: the CRC32C of every byte of
// the file outside its value column chunks (the footer, the page indexes
// and every other column: what ReadQueueHeads reads). A heads read checks
// only those bytes, the first time a Store reads heads of the segment, so
// Lorry's head scan past a bulk backlog of 50 KB values reads kilobytes,
// not the values; a full read (ReadQueue) still checks the whole file
// first. A segment written before heads checksums has none and is checked
// whole by either read.
//
// The value column chunks' ranges come from the file's own footer, which
// the heads checksum covers: a damaged footer fails to parse, or names
// other ranges, and the checksum over them differs.

// headsColumn is the column a heads read leaves out.
const headsColumn = "value"

// headsCRC returns the heads checksum of the queue segment file f of size
// bytes (see above).
func headsCRC(ctx context.Context, f io.ReaderAt, size int64) (string, error) {
	rs, err := headsRanges(f, size)
	if err != nil {
		return "", err
	}
	var crc uint32
	buf := make([]byte, 256<<10)
	for _, r := range rs {
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

// headsRanges returns the byte ranges [from, to) of a queue segment file
// outside its value column chunks, in file order.
func headsRanges(f io.ReaderAt, size int64) ([][2]int64, error) {
	pf, err := parquet.OpenFile(f, size, parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return nil, fmt.Errorf("footer: %w: %w", err, pillar.ErrCorrupt)
	}
	var skip [][2]int64
	for _, rg := range pf.Metadata().RowGroups {
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
			if from < 0 || md.TotalCompressedSize < 0 || to > size {
				return nil, fmt.Errorf("footer: value column chunk [%d,%d) outside the file's %d bytes: %w", from, to, size, pillar.ErrCorrupt)
			}
			skip = append(skip, [2]int64{from, to})
		}
	}
	slices.SortFunc(skip, func(a, b [2]int64) int { return int(a[0] - b[0]) })
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

// openQueueHeads opens a queue segment file for a heads read: checked whole
// (openData) when the segment has no heads checksum, else its size and
// heads checksum, once per file and Store (a file checked whole counts).
func (s *Store) openQueueHeads(ctx context.Context, seg segment) (*os.File, error) {
	if seg.HeadsCRC32C == "" || seg.CRC32C == "" {
		return s.openData(ctx, seg.File, seg.Bytes, seg.CRC32C)
	}
	name := seg.File
	f, err := os.Open(filepath.Join(s.dir, "data", name))
	if err != nil {
		return nil, fmt.Errorf("file %s: %w", name, err)
	}
	if _, ok := s.verified.Load(name); ok {
		return f, nil
	}
	if _, ok := s.headsVerified.Load(name); ok {
		return f, nil
	}
	mu, _ := s.verifying.LoadOrStore(name, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	_, whole := s.verified.Load(name)
	_, heads := s.headsVerified.Load(name)
	if whole || heads {
		return f, nil
	}
	if err := checkHeads(ctx, f, name, seg.Bytes, seg.HeadsCRC32C); err != nil {
		f.Close()
		return nil, err
	}
	s.headsVerified.Store(name, struct{}{})
	return f, nil
}

// checkHeads checks an open queue segment file's size and heads checksum.
func checkHeads(ctx context.Context, f *os.File, name string, size int64, sum string) error {
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("file %s: %w", name, err)
	}
	if st.Size() != size {
		return fmt.Errorf("file %s: %d bytes, the manifest records %d: %w", name, st.Size(), size, pillar.ErrCorrupt)
	}
	got, err := headsCRC(ctx, f, size)
	if err != nil {
		return fmt.Errorf("file %s: heads checksum: %w", name, err)
	}
	if got != sum {
		return fmt.Errorf("file %s: heads checksum mismatch: the manifest records heads_crc32c %s, the file has %s: %w", name, sum, got, pillar.ErrCorrupt)
	}
	return nil
}
