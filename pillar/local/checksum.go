package local

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/pillarkit/pillar/pillar"
)

// Checksums: every data file's CRC32C (Castagnoli, the polynomial with
// hardware support) is computed while it is written and recorded in the
// manifest entry that names it, as 8 hex digits. A file is verified (size
// and checksum, the whole file) the first time a Store opens it for a read;
// data files are immutable, so a Store remembers what it verified.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crcString(c uint32) string { return fmt.Sprintf("%08x", c) }

// crcFile is a File that keeps the CRC32C of what was written through it.
type crcFile struct {
	File
	crc uint32
}

func (c *crcFile) Write(b []byte) (int, error) {
	n, err := c.File.Write(b)
	c.crc = crc32.Update(c.crc, castagnoli, b[:n])
	return n, err
}

func (c *crcFile) sum() string { return crcString(c.crc) }

// ctxReader stops a long read when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(b)
}

// fileCRC returns the CRC32C and size of a file, reading all of it and
// reporting each chunk read to progress (may be nil).
func fileCRC(ctx context.Context, f *os.File, progress func(int64)) (string, int64, error) {
	h := crc32.New(castagnoli)
	var w io.Writer = h
	if progress != nil {
		w = io.MultiWriter(h, progressWriter(progress))
	}
	n, err := io.CopyBuffer(w, ctxReader{ctx, io.NewSectionReader(f, 0, 1<<62)}, make([]byte, 256<<10))
	if err != nil {
		return "", n, err
	}
	return crcString(h.Sum32()), n, nil
}

type progressWriter func(int64)

func (p progressWriter) Write(b []byte) (int, error) { p(int64(len(b))); return len(b), nil }

// openData opens a data file for reading after checking it against what
// the manifest recorded: its size, and its checksum when one is recorded
// (files written before checksums have none). A mismatch wraps
// pillar.ErrCorrupt. The checks run once per file and Store.
func (s *Store) openData(ctx context.Context, name string, size int64, sum string) (*os.File, error) {
	f, err := os.Open(filepath.Join(s.dir, "data", name))
	if err != nil {
		return nil, fmt.Errorf("file %s: %w", name, err)
	}
	if _, ok := s.verified.Load(name); ok {
		return f, nil
	}
	// Readers of one file (the splits of a job) wait for one check rather
	// than each reading the whole file.
	mu, _ := s.verifying.LoadOrStore(name, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	if _, ok := s.verified.Load(name); ok {
		return f, nil
	}
	if err := s.checkData(ctx, f, name, size, sum, nil); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// checkData verifies an open data file; a file that passes is remembered.
func (s *Store) checkData(ctx context.Context, f *os.File, name string, size int64, sum string, progress func(int64)) error {
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("file %s: %w", name, err)
	}
	if st.Size() != size {
		return fmt.Errorf("file %s: %d bytes, the manifest records %d: %w", name, st.Size(), size, pillar.ErrCorrupt)
	}
	if sum == "" {
		if progress != nil {
			progress(size)
		}
		return nil // written before checksums: nothing to compare (pillar verify reports it)
	}
	got, _, err := fileCRC(ctx, f, progress)
	if err != nil {
		return fmt.Errorf("file %s: checksum: %w", name, err)
	}
	if got != sum {
		return fmt.Errorf("file %s: checksum mismatch: the manifest records crc32c %s, the file has %s: %w", name, sum, got, pillar.ErrCorrupt)
	}
	s.verified.Store(name, struct{}{})
	return nil
}

// missingSums computes the checksum of every file m names without one
// (a store written before checksums), so that the commit built on m records
// them. Files it cannot read are left without (and logged).
func (s *Store) missingSums(ctx context.Context, m *manifest) map[string]string {
	var out map[string]string
	add := func(name string) {
		f, err := os.Open(filepath.Join(s.dir, "data", name))
		if err != nil {
			s.opts.Logger.Warn("local store: cannot add a checksum", "file", name, "err", err)
			return
		}
		defer f.Close()
		sum, _, err := fileCRC(ctx, f, nil)
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				s.opts.Logger.Warn("local store: cannot add a checksum", "file", name, "err", err)
			}
			return
		}
		if out == nil {
			out = map[string]string{}
		}
		out[name] = sum
	}
	for _, t := range m.Tables {
		for _, f := range t.Files {
			if f.CRC32C == "" {
				add(f.Name)
			}
		}
	}
	for _, q := range m.Queue {
		for _, sg := range q.Segments {
			if sg.CRC32C == "" {
				add(sg.File)
			}
		}
	}
	return out
}

// addSums records checksums computed by missingSums in m's entries that
// lack one.
func addSums(m *manifest, sums map[string]string) {
	if len(sums) == 0 {
		return
	}
	for _, t := range m.Tables {
		for i := range t.Files {
			if t.Files[i].CRC32C == "" {
				t.Files[i].CRC32C = sums[t.Files[i].Name]
			}
		}
	}
	for _, q := range m.Queue {
		for i := range q.Segments {
			if q.Segments[i].CRC32C == "" {
				q.Segments[i].CRC32C = sums[q.Segments[i].File]
			}
		}
	}
}
