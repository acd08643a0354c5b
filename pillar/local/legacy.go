package local

import (
	"reflect"
	"strings"

	"github.com/parquet-go/parquet-go"

	"github.com/pillarkit/pillar/pillar"
)

// Files written before a column was renamed (pillar.LegacyParquetColumn)
// carry the old name, and the Parquet reader matches columns by name: read
// into today's row type, such a column would come back as zero. So a reader
// of an old file decodes into a view of the row type whose renamed fields
// carry their old names, and converts the view to the row type (the two
// differ only in tags). Queue segments need no view: the segment, not the
// file, sets a record's offset.

// fileColumns lists the top-level column names of a Parquet file.
func fileColumns(pf *parquet.File) map[string]bool {
	cols := map[string]bool{}
	for _, f := range pf.Schema().Fields() {
		cols[f.Name()] = true
	}
	return cols
}

// legacyView returns the view of row type rt that reads a file with columns
// cols, and false when rt reads the file as it is.
func legacyView(rt reflect.Type, cols map[string]bool) (reflect.Type, bool) {
	if rt.Kind() != reflect.Struct {
		return nil, false
	}
	fields := make([]reflect.StructField, rt.NumField())
	changed := false
	for i := range fields {
		f := rt.Field(i)
		if !f.IsExported() {
			return nil, false // reflect.StructOf cannot copy it; no row type has one
		}
		tag := f.Tag.Get("parquet")
		name, opts, _ := strings.Cut(tag, ",")
		if old, ok := pillar.LegacyParquetColumn(name); ok && !cols[name] && cols[old] {
			renamed := old
			if opts != "" {
				renamed += "," + opts
			}
			f.Tag = reflect.StructTag(strings.Replace(string(f.Tag), `parquet:"`+tag+`"`, `parquet:"`+renamed+`"`, 1))
			changed = true
		}
		fields[i] = f
	}
	if !changed {
		return nil, false
	}
	return reflect.StructOf(fields), true
}
