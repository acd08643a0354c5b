package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/parquet-go/parquet-go"

	"github.com/pillarkit/pillar/pillar"
)

// VerifyOptions for Store.Verify. The zero value checks the current
// generation and reports nothing while it runs.
type VerifyOptions struct {
	// Progress, when set, is called with the bytes of each chunk read.
	Progress func(bytes int64)
}

// VerifyReport is the outcome of Store.Verify.
type VerifyReport struct {
	Store      string `json:"store"`
	Generation int64  `json:"generation"`
	Files      int    `json:"files"`
	Bytes      int64  `json:"bytes"`
	// NoChecksum lists files written before checksums: their size and
	// Parquet footer were checked, their contents could not be. The next
	// commit records their checksums.
	NoChecksum []VerifyFile `json:"no_checksum,omitempty"`
	// NoBlockSums lists table files whose block-sums sidecar is missing
	// (removed by a binary from before block sums): they were checked
	// whole against their CRC32C, as reads of them are.
	NoBlockSums []VerifyFile `json:"no_block_sums,omitempty"`
	// Problems lists every file that failed a check.
	Problems []VerifyProblem `json:"problems,omitempty"`
}

// OK reports whether no file failed.
func (r *VerifyReport) OK() bool { return len(r.Problems) == 0 }

// VerifyFile names a data file and what it holds.
type VerifyFile struct {
	Table string `json:"table"` // a table name, or "export queue partition N"
	File  string `json:"file"`
}

// VerifyProblem is one failed file.
type VerifyProblem struct {
	VerifyFile
	Error string `json:"error"`
	// Corrupt: the file does not match its size or checksum
	// (pillar.ErrCorrupt); otherwise it is missing, unreadable or not
	// valid Parquet.
	Corrupt bool `json:"corrupt"`
}

type verifyItem struct {
	VerifyFile
	rows, bytes int64
	sum         string
	blocks      *blockSums // a table file's block sums, when it has them
	// heads, footer: a queue segment's heads and footer checksums, when
	// it has them (queueheads.go).
	heads, footer string
	// index: a queue index file of this partition, checked by decoding it
	// against ref (not as Parquet).
	index     bool
	partition int
	ref       indexRef
}

// VerifyTotal returns how many files and bytes Verify would read.
func (s *Store) VerifyTotal() (files int, bytes int64, err error) {
	m, err := s.current()
	if err != nil {
		return 0, 0, err
	}
	items := verifyItems(s.dir, m)
	for _, it := range items {
		bytes += it.bytes
	}
	return len(items), bytes, nil
}

// Verify reads every data file of the current generation (each table's
// files and the export-queue segments) and checks it against the manifest:
// its size, its CRC32C (and a table file's block sums, sidecar and every
// block; a queue segment's footer and heads checksums), that it opens as
// Parquet and holds the rows the manifest says. It always reads the files, even ones this Store verified
// before. The error is for Verify itself (the store cannot be read, ctx
// ended); failed files are in the report.
func (s *Store) Verify(ctx context.Context, opts *VerifyOptions) (*VerifyReport, error) {
	o := VerifyOptions{}
	if opts != nil {
		o = *opts
	}
	sn, err := s.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	defer sn.Release()
	m := sn.(*snapshot).m
	rep := &VerifyReport{Store: s.dir, Generation: m.Generation}
	for _, it := range verifyItems(s.dir, m) {
		if err := ctx.Err(); err != nil {
			return rep, fmt.Errorf("local store %s: verify: %w", s.dir, err)
		}
		rep.Files++
		rep.Bytes += it.bytes
		if it.sum == "" {
			rep.NoChecksum = append(rep.NoChecksum, it.VerifyFile)
		}
		if it.blocks != nil {
			if _, err := os.Stat(filepath.Join(s.dir, "data", it.blocks.File)); errors.Is(err, fs.ErrNotExist) {
				rep.NoBlockSums = append(rep.NoBlockSums, it.VerifyFile)
				it.blocks = nil
			}
		}
		if err := s.verifyFile(ctx, it, o.Progress); err != nil {
			if ctx.Err() != nil {
				return rep, fmt.Errorf("local store %s: verify: %w", s.dir, ctx.Err())
			}
			rep.Problems = append(rep.Problems, VerifyProblem{VerifyFile: it.VerifyFile, Error: err.Error(), Corrupt: errors.Is(err, pillar.ErrCorrupt)})
		}
	}
	return rep, nil
}

func (s *Store) verifyFile(ctx context.Context, it verifyItem, progress func(int64)) error {
	f, err := os.Open(filepath.Join(s.dir, "data", it.File))
	if err != nil {
		return err
	}
	defer f.Close()
	if it.heads != "" && it.footer != "" && it.sum != "" {
		if err := s.verifySegment(ctx, f, it, progress); err != nil {
			return err
		}
	} else if err := s.checkData(ctx, f, it.File, it.bytes, it.sum, it.blocks, progress); err != nil {
		return err
	}
	if it.index {
		b, err := io.ReadAll(f)
		if err != nil {
			return fmt.Errorf("file %s: %w", it.File, err)
		}
		_, err = decodeIndex(b, it.partition, it.ref)
		return err
	}
	pf, err := parquet.OpenFile(f, it.bytes)
	if err != nil {
		return fmt.Errorf("file %s: not valid Parquet: %w", it.File, err)
	}
	if pf.NumRows() != it.rows {
		return fmt.Errorf("file %s: %d rows, the manifest records %d: %w", it.File, pf.NumRows(), it.rows, pillar.ErrCorrupt)
	}
	return nil
}

// verifySegment checks a queue segment that has heads and footer
// checksums, reading it whole once: its size and CRC32C (as checkData),
// then its footer and heads checksums, which heads reads check instead of
// the whole file (a sum recorded wrong would fail only them). A footer
// that cannot be read is reported after the whole file's check.
func (s *Store) verifySegment(ctx context.Context, f *os.File, it verifyItem, progress func(int64)) error {
	name, size := it.File, it.bytes
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("file %s: %w", name, err)
	}
	if st.Size() != size {
		return fmt.Errorf("file %s: %d bytes, the manifest records %d: %w", name, st.Size(), size, pillar.ErrCorrupt)
	}
	start, err := parquetFooterStart(f, size)
	var ranges [][2]int64
	if err == nil {
		ranges, err = headsRanges(f, start, size)
	}
	if err != nil {
		if cerr := s.checkData(ctx, f, name, size, it.sum, nil, progress); cerr != nil {
			return cerr
		}
		return fmt.Errorf("file %s: %w", name, err)
	}
	whole, heads, footer, err := rangeSums(ctx, f, size, start, ranges, progress)
	if err != nil {
		return fmt.Errorf("file %s: checksum: %w", name, err)
	}
	if whole != it.sum {
		return fmt.Errorf("file %s: checksum mismatch: the manifest records crc32c %s, the file has %s: %w", name, it.sum, whole, pillar.ErrCorrupt)
	}
	if footer != it.footer {
		return fmt.Errorf("file %s: footer checksum mismatch: the manifest records footer_crc32c %s, the file has %s: %w", name, it.footer, footer, pillar.ErrCorrupt)
	}
	if heads != it.heads {
		return fmt.Errorf("file %s: heads checksum mismatch: the manifest records heads_crc32c %s, the file has %s: %w", name, it.heads, heads, pillar.ErrCorrupt)
	}
	s.verified.Store(name, struct{}{})
	return nil
}

// verifyItems lists a manifest's data files: tables in name order, then
// the queue by partition: each index file followed by the segments it
// lists (read from the file as it is: when it is damaged, Verify reports
// it and cannot list its segments), then the tail.
func verifyItems(dir string, m *manifest) []verifyItem {
	var out []verifyItem
	names := make([]string, 0, len(m.Tables))
	for n := range m.Tables {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, f := range m.Tables[n].Files {
			out = append(out, verifyItem{VerifyFile: VerifyFile{n, f.Name}, rows: f.Rows, bytes: f.Bytes, sum: f.CRC32C, blocks: f.Blocks})
		}
	}
	parts := make([]int, 0, len(m.Queue))
	for p := range m.Queue {
		parts = append(parts, p)
	}
	sort.Ints(parts)
	for _, p := range parts {
		what := fmt.Sprintf("export queue partition %d", p)
		seg := func(sg segment) verifyItem {
			return verifyItem{VerifyFile: VerifyFile{what, sg.File}, rows: sg.Count, bytes: sg.Bytes, sum: sg.CRC32C, heads: sg.HeadsCRC32C, footer: sg.FooterCRC32C}
		}
		for _, r := range m.Queue[p].Index {
			out = append(out, verifyItem{VerifyFile: VerifyFile{what + " index", r.File}, bytes: r.Bytes, sum: r.CRC32C, index: true, partition: p, ref: r})
			for _, sg := range readIndexRaw(dir, p, r) {
				out = append(out, seg(sg))
			}
		}
		for _, sg := range m.Queue[p].Segments {
			out = append(out, seg(sg))
		}
	}
	return out
}
