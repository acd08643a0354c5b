package local

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/pillarkit/pillar/pillar"
)

// Checksums (doc.go "Checksums"): every data file's CRC32C (Castagnoli,
// the polynomial with hardware support) is computed while it is written and
// recorded in the manifest entry that names it, as 8 hex digits.
//
// A table file also gets block sums: the CRC32C of each tableBlockSize
// bytes, in a sidecar file whose own CRC32C the manifest entry records
// (manifest.go blockSums). A read of such a file (openTable) checks its
// size and the sidecar, then verifies each block the first time the Store
// reads from it (blockFile.ReadAt), so verification costs what the reads
// touch, not the file. A Store keeps one bit per block of the files it has
// read (blockVerified); nothing else outlives the open file.
//
// A file without block sums (queue segments and index files, small and
// read whole; table files written before block sums) is verified whole the
// first time a Store opens it (openData); a heads read of a queue segment
// checks its heads checksum instead (queueheads.go). Store.Verify (pillar verify)
// always reads every file whole and checks its CRC32C and every block sum
// (and a queue segment's heads and footer checksums).

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crcString(c uint32) string { return fmt.Sprintf("%08x", c) }

// tableBlockSize is the block of a table file's block sums. A read of a
// few rows touches a few pages of a column chunk (tens of KB); a block
// verifies at most this much around each, and its sum costs 4 bytes in the
// sidecar (32 KB per GB of table file).
const tableBlockSize = 128 << 10

// maxBlockSize bounds the block size a manifest may record (a read holds
// one block in memory to check it).
const maxBlockSize = 16 << 20

// crcFile is a File that keeps the CRC32C of what was written through it
// and, when block > 0, the CRC32C of each block bytes of it.
type crcFile struct {
	File
	crc uint32

	block  int64    // block size; 0: no block sums
	blocks []uint32 // sums of the completed blocks
	cur    uint32   // sum of the block being filled
	fill   int64    // its bytes so far
}

func (c *crcFile) Write(b []byte) (int, error) {
	n, err := c.File.Write(b)
	c.crc = crc32.Update(c.crc, castagnoli, b[:n])
	if c.block > 0 {
		for w := b[:n]; len(w) > 0; {
			k := min(int64(len(w)), c.block-c.fill)
			c.cur = crc32.Update(c.cur, castagnoli, w[:k])
			c.fill += k
			w = w[k:]
			if c.fill == c.block {
				c.blocks = append(c.blocks, c.cur)
				c.cur, c.fill = 0, 0
			}
		}
	}
	return n, err
}

func (c *crcFile) sum() string { return crcString(c.crc) }

// blockSidecar returns the content of the file's block-sums sidecar.
func (c *crcFile) blockSidecar() []byte {
	sums := c.blocks
	if c.fill > 0 {
		sums = append(sums, c.cur)
	}
	return encodeSums(sums)
}

func encodeSums(sums []uint32) []byte {
	out := make([]byte, 4*len(sums))
	for i, v := range sums {
		binary.BigEndian.PutUint32(out[4*i:], v)
	}
	return out
}

// numBlocks is how many blocks of size block a file of size bytes has.
func numBlocks(size, block int64) int64 { return (size + block - 1) / block }

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
	sum, _, n, err := fileSums(ctx, f, 0, progress)
	return sum, n, err
}

// fileSums is fileCRC that also returns the sum of each block bytes of the
// file (none when block is 0).
func fileSums(ctx context.Context, f *os.File, block int64, progress func(int64)) (string, []uint32, int64, error) {
	c := &crcFile{File: discard{}, block: block}
	var w io.Writer = c
	if progress != nil {
		w = io.MultiWriter(c, progressWriter(progress))
	}
	n, err := io.CopyBuffer(w, ctxReader{ctx, io.NewSectionReader(f, 0, 1<<62)}, make([]byte, 256<<10))
	if err != nil {
		return "", nil, n, err
	}
	if c.fill > 0 {
		c.blocks = append(c.blocks, c.cur)
	}
	return c.sum(), c.blocks, n, nil
}

// discard is a File that drops what is written (fileSums needs only the
// sums crcFile keeps).
type discard struct{ File }

func (discard) Write(b []byte) (int, error) { return len(b), nil }

type progressWriter func(int64)

func (p progressWriter) Write(b []byte) (int, error) { p(int64(len(b))); return len(b), nil }

// openData opens a data file for reading after checking it against what
// the manifest recorded: its size, and its checksum when one is recorded
// (files written before checksums have none). A mismatch wraps
// pillar.ErrCorrupt. The checks run once per file and Store.
func (s *Store) openData(ctx context.Context, name string, size int64, sum string) (*os.File, error) {
	checked := func() bool { _, ok := s.verified.Load(name); return ok }
	return s.openChecked(name, checked, func(f *os.File) error { return s.checkData(ctx, f, name, size, sum, nil, nil) })
}

// openChecked opens data file name for reading, after check (which
// records that it passed) unless checked says this Store already checked
// the file. Readers of one file (the splits of a job, Lorry's lanes) wait
// for one check rather than each running their own. A failed check closes
// the file and returns check's error.
func (s *Store) openChecked(name string, checked func() bool, check func(*os.File) error) (*os.File, error) {
	f, err := os.Open(filepath.Join(s.dir, "data", name))
	if err != nil {
		return nil, fmt.Errorf("file %s: %w", name, err)
	}
	if checked() {
		return f, nil
	}
	mu, _ := s.verifying.LoadOrStore(name, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	if checked() {
		return f, nil
	}
	if err := check(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// dataFile is an open data file: an *os.File (verified whole) or a
// *blockFile (verified block by block as it is read).
type dataFile interface {
	io.ReaderAt
	io.Closer
}

// openTable opens a table file for reading. A file with block sums is
// checked now for its size and, the first time this Store opens it, its
// sidecar (against the manifest); its blocks are checked as they are read.
// A file without block sums, or whose sidecar is gone, is verified whole
// (openData).
func (s *Store) openTable(ctx context.Context, fe fileEntry) (dataFile, error) {
	if fe.Blocks == nil {
		return s.openData(ctx, fe.Name, fe.Bytes, fe.CRC32C)
	}
	bits, err := s.checkedBits(fe)
	if errors.Is(err, fs.ErrNotExist) {
		// The sidecar is gone (a binary from before block sums sweeps
		// data/ of files it does not know): the manifest still has the
		// file's CRC32C, so check the file whole, as before block sums.
		if _, warned := s.noSidecar.LoadOrStore(fe.Name, struct{}{}); !warned {
			s.opts.Logger.Warn("local store: block sums missing; the file is checked whole", "file", fe.Name, "sidecar", fe.Blocks.File)
		}
		return s.openData(ctx, fe.Name, fe.Bytes, fe.CRC32C)
	}
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(s.dir, "data", fe.Name))
	if err != nil {
		return nil, fmt.Errorf("file %s: %w", fe.Name, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("file %s: %w", fe.Name, err)
	}
	if st.Size() != fe.Bytes {
		f.Close()
		return nil, fmt.Errorf("file %s: %d bytes, the manifest records %d: %w", fe.Name, st.Size(), fe.Bytes, pillar.ErrCorrupt)
	}
	return &blockFile{s: s, ctx: ctx, fe: fe, f: f, done: bits}, nil
}

// checkedBits returns the Store's verified bits of a table file (one per
// block), checking the file's sidecar whole (readSidecar) the first time:
// an entry in blockVerified means this Store checked the sidecar.
func (s *Store) checkedBits(fe fileEntry) ([]atomic.Uint64, error) {
	if v, ok := s.blockVerified.Load(fe.Name); ok {
		return v.([]atomic.Uint64), nil
	}
	if _, err := s.readSidecar(fe); err != nil {
		return nil, err
	}
	v, _ := s.blockVerified.LoadOrStore(fe.Name, make([]atomic.Uint64, (numBlocks(fe.Bytes, fe.Blocks.Size)+63)/64))
	return v.([]atomic.Uint64), nil
}

// readSidecar reads a table file's block sums and checks them against the
// manifest entry: the sidecar's CRC32C, and one sum per block of the file.
// A mismatch wraps pillar.ErrCorrupt and names the sidecar; a missing
// sidecar wraps fs.ErrNotExist.
func (s *Store) readSidecar(fe fileEntry) ([]uint32, error) {
	b := fe.Blocks
	if b.Size <= 0 || b.Size > maxBlockSize {
		return nil, fmt.Errorf("file %s: the manifest records block size %d (want 1 to %d): %w", fe.Name, b.Size, maxBlockSize, pillar.ErrCorrupt)
	}
	raw, err := os.ReadFile(filepath.Join(s.dir, "data", b.File))
	if err != nil {
		return nil, fmt.Errorf("block sums %s of file %s: %w", b.File, fe.Name, err)
	}
	if got := crcString(crc32.Checksum(raw, castagnoli)); got != b.CRC32C {
		return nil, fmt.Errorf("block sums %s of file %s: checksum mismatch: the manifest records crc32c %s, the file has %s: %w", b.File, fe.Name, b.CRC32C, got, pillar.ErrCorrupt)
	}
	if want := 4 * numBlocks(fe.Bytes, b.Size); int64(len(raw)) != want {
		return nil, fmt.Errorf("block sums %s of file %s: %d bytes, %d bytes of %d-byte blocks need %d: %w", b.File, fe.Name, len(raw), fe.Bytes, b.Size, want, pillar.ErrCorrupt)
	}
	sums := make([]uint32, len(raw)/4)
	for i := range sums {
		sums[i] = binary.BigEndian.Uint32(raw[4*i:])
	}
	return sums, nil
}

// blockFile reads a table file with block sums. ReadAt serves a block the
// Store has verified straight from the file; any other block it reads
// whole, checks against its sum (4 bytes read from the sidecar, which this
// Store checked whole when it first opened the file), records as verified
// and serves from what it checked. Blocks no read touches are never read.
type blockFile struct {
	s    *Store
	ctx  context.Context // of the open: bounds a whole-file check (sidecar gone)
	fe   fileEntry
	f    *os.File
	done []atomic.Uint64 // the Store's verified bits for this file

	mu   sync.Mutex
	side *os.File // the sidecar, opened at the first block to check
}

var blockBufs = sync.Pool{New: func() any { b := make([]byte, tableBlockSize); return &b }}

func (b *blockFile) verified(i int64) bool { return b.done[i/64].Load()&(1<<(i%64)) != 0 }

// sum returns block i's checksum from the sidecar.
func (b *blockFile) sum(i int64) (uint32, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.side == nil {
		f, err := os.Open(filepath.Join(b.s.dir, "data", b.fe.Blocks.File))
		if err != nil {
			return 0, fmt.Errorf("block sums %s of file %s: %w", b.fe.Blocks.File, b.fe.Name, err)
		}
		b.side = f
	}
	var w [4]byte
	if _, err := b.side.ReadAt(w[:], 4*i); err != nil {
		// Its length was checked: a short read means it changed since.
		return 0, fmt.Errorf("block sums %s of file %s: block %d: %v: %w", b.fe.Blocks.File, b.fe.Name, i, err, pillar.ErrCorrupt)
	}
	return binary.BigEndian.Uint32(w[:]), nil
}

// wholeInstead checks the file whole (its CRC32C, once per Store) when its
// sidecar went after this Store checked it; a file that passes has every
// block good.
func (b *blockFile) wholeInstead() error {
	if _, warned := b.s.noSidecar.LoadOrStore(b.fe.Name, struct{}{}); !warned {
		b.s.opts.Logger.Warn("local store: block sums missing; the file is checked whole", "file", b.fe.Name, "sidecar", b.fe.Blocks.File)
	}
	f, err := b.s.openData(b.ctx, b.fe.Name, b.fe.Bytes, b.fe.CRC32C)
	if err != nil {
		return err
	}
	f.Close()
	for i := range b.done {
		b.done[i].Store(^uint64(0))
	}
	return nil
}

func (b *blockFile) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("file %s: read at offset %d", b.fe.Name, off)
	}
	size, block := b.fe.Bytes, b.fe.Blocks.Size
	n := 0
	for n < len(p) && off+int64(n) < size {
		pos := off + int64(n)
		i := pos / block
		start, end := i*block, min((i+1)*block, size)
		take := int(min(int64(len(p)-n), end-pos))
		if b.verified(i) {
			k, err := b.f.ReadAt(p[n:n+take], pos)
			n += k
			if err != nil {
				return n, fmt.Errorf("file %s: %w", b.fe.Name, err)
			}
			continue
		}
		want, err := b.sum(i)
		if errors.Is(err, fs.ErrNotExist) {
			if err := b.wholeInstead(); err != nil {
				return n, err
			}
			continue // every block is verified now
		}
		if err != nil {
			return n, err
		}
		bufp := blockBufs.Get().(*[]byte)
		buf := *bufp
		if int64(len(buf)) < end-start {
			buf = make([]byte, end-start)
		}
		buf = buf[:end-start]
		if _, err := b.f.ReadAt(buf, start); err != nil {
			blockBufs.Put(bufp)
			return n, fmt.Errorf("file %s: block %d at offset %d: %w", b.fe.Name, i, start, err)
		}
		if got := crc32.Checksum(buf, castagnoli); got != want {
			blockBufs.Put(bufp)
			return n, fmt.Errorf("file %s: block %d (bytes %d to %d): checksum mismatch: the block sums record crc32c %s, the file has %s: %w",
				b.fe.Name, i, start, end, crcString(want), crcString(got), pillar.ErrCorrupt)
		}
		b.done[i/64].Or(1 << (i % 64))
		n += copy(p[n:n+take], buf[pos-start:])
		blockBufs.Put(bufp)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (b *blockFile) Close() error {
	b.mu.Lock()
	if b.side != nil {
		b.side.Close()
	}
	b.mu.Unlock()
	return b.f.Close()
}

// checkData verifies an open data file whole: its size, its checksum, and
// (blocks non-nil) its sidecar and every block sum. A file that passes is
// remembered.
func (s *Store) checkData(ctx context.Context, f *os.File, name string, size int64, sum string, blocks *blockSums, progress func(int64)) error {
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
	var want []uint32
	var block int64
	if blocks != nil {
		if want, err = s.readSidecar(fileEntry{Name: name, Bytes: size, Blocks: blocks}); err != nil {
			return err
		}
		block = blocks.Size
	}
	got, sums, _, err := fileSums(ctx, f, block, progress)
	if err != nil {
		return fmt.Errorf("file %s: checksum: %w", name, err)
	}
	// The first damaged block, when there are block sums, says where.
	for i := range want {
		if sums[i] != want[i] {
			return fmt.Errorf("file %s: block %d at offset %d: checksum mismatch: the block sums %s record crc32c %s, the file has %s: %w",
				name, i, int64(i)*block, blocks.File, crcString(want[i]), crcString(sums[i]), pillar.ErrCorrupt)
		}
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
