// Package rowkey encodes the key columns of a row as bytes that compare, with
// bytes.Compare, in YTsaurus key order.
//
// Column values are ordered by type first (null < int64 < uint64 < double <
// boolean < string, as on YTsaurus) and then by value. Every column encoding
// is self-delimiting, so the encoding of a column prefix is a byte prefix of
// the encoding of the whole key.
//
// An Encoder is safe for concurrent use.
package rowkey

import (
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"

	"go.ytsaurus.tech/yt/go/yson"
)

// Type tags, in YTsaurus value order.
const (
	tagNull   = 0x01
	tagInt    = 0x02
	tagUint   = 0x03
	tagDouble = 0x04
	tagBool   = 0x05
	tagString = 0x06
)

// Encoder encodes the named columns of rows.
type Encoder struct {
	cols  []string
	cache sync.Map // reflect.Type → *plan
}

// New returns an encoder of the given key columns.
func New(cols []string) *Encoder { return &Encoder{cols: append([]string(nil), cols...)} }

// Columns returns the key columns.
func (e *Encoder) Columns() []string { return e.cols }

type plan struct {
	fields [][]int // per column: field index path, nil when absent
	err    error
}

// Append appends the key of row (a struct, a pointer to one, or a map with
// string keys) to dst. A column the row lacks encodes as null.
func (e *Encoder) Append(dst []byte, row any) ([]byte, error) {
	v := reflect.ValueOf(row)
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return dst, fmt.Errorf("rowkey: nil row")
		}
		v = v.Elem()
	}
	switch v.Kind() {
	case reflect.Struct:
		p := e.plan(v.Type())
		if p.err != nil {
			return dst, p.err
		}
		for i, path := range p.fields {
			if path == nil {
				dst = append(dst, tagNull)
				continue
			}
			f, ok := fieldByPath(v, path)
			if !ok {
				dst = append(dst, tagNull)
				continue
			}
			var err error
			if dst, err = appendValue(dst, f); err != nil {
				return dst, fmt.Errorf("rowkey: column %q: %w", e.cols[i], err)
			}
		}
		return dst, nil
	case reflect.Map:
		if v.Type().Key().Kind() != reflect.String {
			return dst, fmt.Errorf("rowkey: row type %s: map keys must be strings", v.Type())
		}
		for _, c := range e.cols {
			f := v.MapIndex(reflect.ValueOf(c).Convert(v.Type().Key()))
			if !f.IsValid() {
				dst = append(dst, tagNull)
				continue
			}
			var err error
			if dst, err = appendValue(dst, f); err != nil {
				return dst, fmt.Errorf("rowkey: column %q: %w", c, err)
			}
		}
		return dst, nil
	default:
		// Anything else yson can marshal as a map (yson.RawValue, a custom
		// marshaler): go through its YSON form.
		b, err := yson.Marshal(row)
		if err != nil {
			return dst, fmt.Errorf("rowkey: row type %T: %w", row, err)
		}
		return e.AppendYSON(dst, b)
	}
}

// AppendYSON appends the key of a row given as a YSON map.
func (e *Encoder) AppendYSON(dst []byte, row []byte) ([]byte, error) {
	var m map[string]any
	if err := yson.Unmarshal(row, &m); err != nil {
		return dst, fmt.Errorf("rowkey: row is not a YSON map: %w", err)
	}
	return e.Append(dst, m)
}

func fieldByPath(v reflect.Value, path []int) (reflect.Value, bool) {
	for i, idx := range path {
		if i > 0 {
			for v.Kind() == reflect.Pointer {
				if v.IsNil() {
					return reflect.Value{}, false
				}
				v = v.Elem()
			}
		}
		v = v.Field(idx)
	}
	return v, true
}

func (e *Encoder) plan(t reflect.Type) *plan {
	if p, ok := e.cache.Load(t); ok {
		return p.(*plan)
	}
	names := map[string][]int{}
	collectFields(t, nil, names)
	p := &plan{fields: make([][]int, len(e.cols))}
	for i, c := range e.cols {
		p.fields[i] = names[c]
	}
	e.cache.Store(t, p)
	return p
}

// collectFields maps column names to field paths the way yson names struct
// fields: the tag name, else the field name; "-" skips; embedded structs
// without a tag are inlined.
func collectFields(t reflect.Type, prefix []int, out map[string][]int) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("yson")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || strings.Contains(opts, "attr") {
			continue
		}
		path := append(append([]int(nil), prefix...), i)
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				collectFields(ft, path, out)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if _, dup := out[name]; !dup {
			out[name] = path
		}
	}
}

func appendValue(dst []byte, v reflect.Value) ([]byte, error) {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return append(dst, tagNull), nil
		}
		v = v.Elem()
	}
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		dst = append(dst, tagInt)
		return binary.BigEndian.AppendUint64(dst, uint64(v.Int())^(1<<63)), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		dst = append(dst, tagUint)
		return binary.BigEndian.AppendUint64(dst, v.Uint()), nil
	case reflect.Float32, reflect.Float64:
		bits := math.Float64bits(v.Float())
		if bits&(1<<63) != 0 {
			bits = ^bits
		} else {
			bits ^= 1 << 63
		}
		dst = append(dst, tagDouble)
		return binary.BigEndian.AppendUint64(dst, bits), nil
	case reflect.Bool:
		b := byte(0)
		if v.Bool() {
			b = 1
		}
		return append(dst, tagBool, b), nil
	case reflect.String:
		return appendString(append(dst, tagString), v.String()), nil
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return appendString(append(dst, tagString), string(v.Bytes())), nil
		}
	}
	return dst, fmt.Errorf("type %s cannot be a key column", v.Type())
}

// appendString escapes 0x00 as 0x00 0xFF and terminates with 0x00 0x01, so
// that a string sorts before every longer string it prefixes.
func appendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			dst = append(dst, 0, 0xFF)
		} else {
			dst = append(dst, s[i])
		}
	}
	return append(dst, 0, 1)
}
