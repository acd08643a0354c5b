package local

import (
	"io"
	"reflect"

	"github.com/parquet-go/parquet-go"

	"github.com/pillarkit/pillar/pillar"
)

// fileWriter is the Parquet writer of one table file: Write takes one row
// (a T or *T of the table's row type) and encodes it before it returns, so
// a caller may reuse the row's buffers.
type fileWriter interface {
	Write(row any) error
	Flush() error
	Size() int64
	Close() error
}

// typedWriters has a typed writer for the row types whose tables are
// written row by row at corpus scale. parquet-go's GenericWriter maps a
// struct's fields straight to its columns (a 384-float vector is one copy),
// where the untyped Writer deconstructs every row into values first, one
// value per float (a fifth of an embed step's CPU). Other row types use
// the untyped writer.
var typedWriters = map[reflect.Type]func(io.Writer, []parquet.WriterOption) fileWriter{}

func init() {
	registerTyped[pillar.Doc]()
	registerTyped[pillar.Chunk]()
	registerTyped[pillar.Embedding]()
}

// registerTyped gives row type T a typed writer.
func registerTyped[T any]() {
	typedWriters[reflect.TypeFor[T]()] = func(f io.Writer, opts []parquet.WriterOption) fileWriter {
		return &typedWriter[T]{w: parquet.NewGenericWriter[T](f, opts...), one: make([]T, 1)}
	}
}

// newFileWriter is the writer of a file of rows of type rt.
func newFileWriter(rt reflect.Type, f io.Writer, opts []parquet.WriterOption) fileWriter {
	if mk := typedWriters[rt]; mk != nil {
		return mk(f, opts)
	}
	return parquet.NewWriter(f, opts...)
}

// typedWriter writes rows of type T one at a time through a GenericWriter.
type typedWriter[T any] struct {
	w   *parquet.GenericWriter[T]
	one []T // the row being written
}

func (t *typedWriter[T]) Write(row any) error {
	switch r := row.(type) {
	case *T:
		t.one[0] = *r
	case T:
		t.one[0] = r
	}
	_, err := t.w.Write(t.one)
	clear(t.one) // hold no reference to the caller's buffers
	return err
}

func (t *typedWriter[T]) Flush() error { return t.w.Flush() }
func (t *typedWriter[T]) Size() int64  { return t.w.Size() }
func (t *typedWriter[T]) Close() error { return t.w.Close() }
