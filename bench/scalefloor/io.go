package scalefloor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
)

// unit is a row group of an input file: the work a worker takes at once.
type unit struct {
	path  string
	group int
}

// units lists the row groups of files, in file order.
func units(files []string) ([]unit, error) {
	var out []unit
	for _, p := range files {
		f, pf, err := openFile(p)
		if err != nil {
			return nil, err
		}
		for i := range pf.RowGroups() {
			out = append(out, unit{p, i})
		}
		f.Close()
	}
	return out, nil
}

func openFile(p string) (*os.File, *parquet.File, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, nil, fmt.Errorf("scalefloor: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("scalefloor: %w", err)
	}
	pf, err := parquet.OpenFile(f, st.Size(), parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("scalefloor: %s: %w", p, err)
	}
	return f, pf, nil
}

// readBatch is the rows a reader decodes at once.
const readBatch = 256

// readUnit calls fn with the rows of one row group, readBatch at a time
// (fn must not keep the slice).
func readUnit[T any](u unit, fn func([]T) error) error {
	f, pf, err := openFile(u.path)
	if err != nil {
		return err
	}
	defer f.Close()
	r := parquet.NewGenericRowGroupReader[T](pf.RowGroups()[u.group])
	defer r.Close()
	buf := make([]T, readBatch)
	for {
		clear(buf)
		n, err := r.Read(buf)
		if n > 0 {
			if ferr := fn(buf[:n]); ferr != nil {
				return ferr
			}
		}
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return fmt.Errorf("scalefloor: %s row group %d: %w", u.path, u.group, err)
		}
	}
}

// stream decodes every row of files in order into batches sent to the
// returned channel, which is closed at the end; the first error is stored
// in *errp before the close.
func stream[T any](files []string, stop <-chan struct{}, errp *error) <-chan []T {
	ch := make(chan []T, 4)
	go func() {
		defer close(ch)
		for _, p := range files {
			us, err := units([]string{p})
			if err != nil {
				*errp = err
				return
			}
			for _, u := range us {
				err := readUnit(u, func(rows []T) error {
					select {
					case ch <- slices.Clone(rows):
						return nil
					case <-stop:
						return errStopped
					}
				})
				if err != nil {
					if err != errStopped {
						*errp = err
					}
					return
				}
			}
		}
	}()
	return ch
}

var errStopped = fmt.Errorf("scalefloor: stopped")

// cursor walks a stream row by row.
type cursor[T any] struct {
	ch  <-chan []T
	buf []T
	i   int
	n   int64 // rows taken
}

// peek returns the next row without taking it; nil at the end.
func (c *cursor[T]) peek() *T {
	for c.i >= len(c.buf) {
		b, ok := <-c.ch
		if !ok {
			return nil
		}
		c.buf, c.i = b, 0
	}
	return &c.buf[c.i]
}

func (c *cursor[T]) take() T {
	r := c.buf[c.i]
	c.i++
	c.n++
	return r
}

// drain takes the rest of the rows.
func (c *cursor[T]) drain() {
	for c.peek() != nil {
		c.take()
	}
}

// output is how a floor writes one kind of row: the codec and row-group
// bounds of the step's writer.
type output struct {
	codec compress.Codec
	// groupRows and groupBytes cut row groups (groupBytes checked every
	// checkEvery rows, as the store's writer does every 16).
	groupRows  int64
	groupBytes int64
	page       int
	// sorted are the columns whose page bounds are kept (the rest skip
	// them, as the store's writer does for columns rows are not sorted by).
	sorted []string
	// skipStats are columns without page statistics (export's values).
	skipStats []string
}

// writer writes rows of T into one file under a scratch folder. Not safe
// for concurrent use.
type writer[T any] struct {
	o       *output
	f       *os.File
	w       *parquet.GenericWriter[T]
	rows    int64
	grp     int64
	flushed int64
	err     error
}

// files counts the floor's output files and bytes.
type files struct {
	mu    sync.Mutex
	dir   string
	n     atomic.Int64
	bytes atomic.Int64
	rows  atomic.Int64
}

func (fs *files) create(name string) (*os.File, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f, err := os.Create(filepath.Join(fs.dir, fmt.Sprintf("%05d-%s.parquet", fs.n.Add(1), name)))
	if err != nil {
		return nil, fmt.Errorf("scalefloor: %w", err)
	}
	return f, nil
}

func newWriter[T any](fs *files, name string, o *output) (*writer[T], error) {
	f, err := fs.create(name)
	if err != nil {
		return nil, err
	}
	var zero T
	schema := parquet.SchemaOf(&zero)
	opts := []parquet.WriterOption{parquet.Compression(o.codec), parquet.MaxRowsPerRowGroup(o.groupRows), parquet.PageBufferSize(o.page)}
	for _, path := range schema.Columns() {
		if len(path) == 1 && slices.Contains(o.sorted, path[0]) {
			continue
		}
		opts = append(opts, parquet.SkipPageBounds(path...))
	}
	for _, c := range o.skipStats {
		opts = append(opts, parquet.SkipPageStatistics(c))
	}
	return &writer[T]{o: o, f: f, w: parquet.NewGenericWriter[T](f, opts...)}, nil
}

// checkEvery is how many rows the writer writes between checks of the row
// group's bytes.
const checkEvery = 16

// write appends rows, cutting row groups at the output's bounds.
func (w *writer[T]) write(rows ...T) error {
	for len(rows) > 0 && w.err == nil {
		n := min(len(rows), checkEvery, int(w.o.groupRows-w.grp))
		if _, err := w.w.Write(rows[:n]); err != nil {
			w.err = fmt.Errorf("scalefloor: %s: %w", w.f.Name(), err)
			break
		}
		rows = rows[n:]
		w.rows += int64(n)
		w.grp += int64(n)
		if w.grp >= w.o.groupRows || w.w.Size()-w.flushed > w.o.groupBytes {
			if err := w.w.Flush(); err != nil {
				w.err = fmt.Errorf("scalefloor: %s: %w", w.f.Name(), err)
				break
			}
			w.flushed, w.grp = w.w.Size(), 0
		}
	}
	return w.err
}

// close finishes the file (footer; no fsync: the floor keeps nothing) and
// counts it.
func (w *writer[T]) close(fs *files) error {
	if w.err == nil {
		w.err = w.w.Close()
	}
	st, serr := w.f.Stat()
	if cerr := w.f.Close(); w.err == nil {
		w.err = cerr
	}
	if w.err == nil && serr == nil {
		fs.bytes.Add(st.Size())
		fs.rows.Add(w.rows)
	}
	return w.err
}
