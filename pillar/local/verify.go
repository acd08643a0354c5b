package local

import (
	"context"
	"errors"
	"fmt"
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
}

// VerifyTotal returns how many files and bytes Verify would read.
func (s *Store) VerifyTotal() (files int, bytes int64, err error) {
	m, err := s.current()
	if err != nil {
		return 0, 0, err
	}
	items := verifyItems(m)
	for _, it := range items {
		bytes += it.bytes
	}
	return len(items), bytes, nil
}

// Verify reads every data file of the current generation (each table's
// files and the export-queue segments) and checks it against the manifest:
// its size, its CRC32C, that it opens as Parquet and holds the rows the
// manifest says. It always reads the files, even ones this Store verified
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
	for _, it := range verifyItems(m) {
		if err := ctx.Err(); err != nil {
			return rep, fmt.Errorf("local store %s: verify: %w", s.dir, err)
		}
		rep.Files++
		rep.Bytes += it.bytes
		if it.sum == "" {
			rep.NoChecksum = append(rep.NoChecksum, it.VerifyFile)
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
	if err := s.checkData(ctx, f, it.File, it.bytes, it.sum, progress); err != nil {
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

// verifyItems lists a manifest's data files: tables in name order, then
// the queue by partition.
func verifyItems(m *manifest) []verifyItem {
	var out []verifyItem
	names := make([]string, 0, len(m.Tables))
	for n := range m.Tables {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, f := range m.Tables[n].Files {
			out = append(out, verifyItem{VerifyFile{n, f.Name}, f.Rows, f.Bytes, f.CRC32C})
		}
	}
	parts := make([]int, 0, len(m.Queue))
	for p := range m.Queue {
		parts = append(parts, p)
	}
	sort.Ints(parts)
	for _, p := range parts {
		for _, sg := range m.Queue[p].Segments {
			out = append(out, verifyItem{VerifyFile{fmt.Sprintf("export queue partition %d", p), sg.File}, sg.Count, sg.Bytes, sg.CRC32C})
		}
	}
	return out
}
