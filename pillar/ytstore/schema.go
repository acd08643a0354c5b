package ytstore

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"go.ytsaurus.tech/yt/go/schema"

	"github.com/pillarkit/pillar/pillar"
)

// SchemaFor returns the YTsaurus schema of a table of rowType's rows: the
// columns schema.Infer derives from the yson tags, strict, with the sortedBy
// columns moved to the front in that order and marked ascending (YTsaurus
// wants the key columns to be a prefix of the schema).
func SchemaFor(rowType any, sortedBy []string) (schema.Schema, error) {
	rt := reflect.TypeOf(rowType)
	for rt != nil && rt.Kind() == reflect.Pointer {
		rt = rt.Elem()
	}
	if rt == nil || rt.Kind() != reflect.Struct {
		return schema.Schema{}, fmt.Errorf("row type %T is not a struct", rowType)
	}
	s, err := schema.Infer(reflect.New(rt).Elem().Interface())
	if err != nil {
		return schema.Schema{}, fmt.Errorf("row type %s: %w", rt, err)
	}
	// schema.Infer makes a []byte column required, but a nil slice is
	// written as an entity (null), which YTsaurus refuses in a required
	// column: an export delete record (no value) would fail the commit.
	// Nil-able fields are optional.
	nilable := map[string]bool{}
	for i := 0; i < rt.NumField(); i++ {
		f := rt.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yson"), ",")
		if name == "" {
			name = f.Name
		}
		switch f.Type.Kind() {
		case reflect.Slice, reflect.Map, reflect.Pointer, reflect.Interface:
			nilable[name] = true
		}
	}
	for i := range s.Columns {
		if nilable[s.Columns[i].Name] {
			s.Columns[i].Required = false
		}
	}
	if len(sortedBy) == 0 {
		return s, nil
	}
	var keys, rest []schema.Column
	for _, name := range sortedBy {
		i := slices.IndexFunc(s.Columns, func(c schema.Column) bool { return c.Name == name })
		if i < 0 {
			return schema.Schema{}, fmt.Errorf("row type %s: sort column %q is not one of its columns", rt, name)
		}
		if slices.ContainsFunc(keys, func(c schema.Column) bool { return c.Name == name }) {
			return schema.Schema{}, fmt.Errorf("row type %s: sort column %q named twice", rt, name)
		}
		c := s.Columns[i]
		c.SortOrder = schema.SortAscending
		keys = append(keys, c)
	}
	for _, c := range s.Columns {
		if !slices.Contains(sortedBy, c.Name) {
			rest = append(rest, c)
		}
	}
	s.Columns = append(keys, rest...)
	return s, nil
}

// unsorted returns s without sort order.
func unsorted(s schema.Schema) schema.Schema {
	s = s.Copy()
	for i := range s.Columns {
		s.Columns[i].SortOrder = schema.SortNone
	}
	return s
}

func queueSchema() schema.Schema {
	s, err := SchemaFor(pillar.ExportRecord{}, nil)
	if err != nil {
		panic(err)
	}
	return s
}
