package cli

// The one JSON shape of every --json output (README, "JSON output"):
// snake_case keys, durations as milliseconds under a key ending in _ms,
// times in RFC 3339 (UTC). printJSON converts any result value to it, so a
// library's result struct (Go field names, nanosecond durations) prints the
// same way as a hand-written one.

import (
	"encoding"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strings"
	"time"
	"unicode"
)

// printJSON writes v in the JSON shape on one line: scripts that take the
// last line starting with '{' (bench/scalebench) or read line by line get
// the whole value; people pipe it to jq.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // predicates hold < and >
	return enc.Encode(jsonShape(reflect.ValueOf(v)))
}

var (
	durationType  = reflect.TypeOf(time.Duration(0))
	timeType      = reflect.TypeOf(time.Time{})
	marshalerType = reflect.TypeOf((*json.Marshaler)(nil)).Elem()
	textType      = reflect.TypeOf((*encoding.TextMarshaler)(nil)).Elem()
)

// jsonShape converts v: structs to maps with snake_case keys (a json tag's
// name wins; "-" and omitempty are honoured), time.Duration to milliseconds
// (its key gains _ms), time.Time to RFC 3339 UTC (zero: null), a type with
// its own MarshalJSON or MarshalText to its own encoding. Map keys are
// data, not field names, and are kept.
func jsonShape(v reflect.Value) any {
	if !v.IsValid() {
		return nil
	}
	t := v.Type()
	switch {
	case t == durationType:
		return durationMs(time.Duration(v.Int()))
	case t == timeType:
		tm := v.Interface().(time.Time)
		if tm.IsZero() {
			return nil
		}
		return tm.UTC().Format(time.RFC3339Nano)
	case t.Kind() != reflect.Pointer && t.Kind() != reflect.Interface && (t.Implements(marshalerType) || t.Implements(textType)):
		b, err := json.Marshal(v.Interface())
		if err != nil {
			return fmt.Sprint(v.Interface())
		}
		return json.RawMessage(b)
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return jsonShape(v.Elem())
	case reflect.Struct:
		m := map[string]any{}
		shapeStruct(v, m)
		return m
	case reflect.Map:
		if v.IsNil() {
			return nil
		}
		m := make(map[string]any, v.Len())
		it := v.MapRange()
		for it.Next() {
			m[fmt.Sprint(it.Key().Interface())] = jsonShape(it.Value())
		}
		return m
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			return []any{}
		}
		if t.Elem().Kind() == reflect.Uint8 {
			return v.Interface()
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = jsonShape(v.Index(i))
		}
		return out
	}
	return v.Interface()
}

func shapeStruct(v reflect.Value, m map[string]any) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" && opts == "" {
			continue
		}
		fv := v.Field(i)
		switch fv.Kind() {
		case reflect.Func, reflect.Chan, reflect.UnsafePointer:
			continue // options carry hooks and callbacks: not data
		}
		if f.Anonymous && name == "" {
			if fv.Kind() == reflect.Pointer {
				if fv.IsNil() {
					continue
				}
				fv = fv.Elem()
			}
			if fv.Kind() == reflect.Struct {
				shapeStruct(fv, m)
				continue
			}
		}
		if strings.Contains(opts, "omitempty") && fv.IsZero() {
			continue
		}
		if name == "" {
			name = snakeCase(f.Name)
		}
		if isDuration(f.Type) && !strings.HasSuffix(name, "_ms") {
			name = strings.TrimSuffix(name, "_ns") + "_ms" // the value becomes milliseconds
		}
		if f.Type.Kind() == reflect.String && durationName.MatchString(name) {
			// A library result that carries its duration as a Go duration
			// string ("1.5s"): milliseconds under _ms, as every other.
			if d, err := time.ParseDuration(fv.String()); err == nil {
				m[name+"_ms"] = durationMs(d)
				continue
			}
		}
		m[name] = jsonShape(fv)
	}
}

// durationName matches a key that names a duration (and is not a time of
// day: those end in _at).
var durationName = regexp.MustCompile(`(^|_)(elapsed|duration|took|latency|uptime|wait|interval|timeout)$`)

func isDuration(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t == durationType
}

// durationMs is d in milliseconds, whole when it is whole.
func durationMs(d time.Duration) any {
	if d%time.Millisecond == 0 {
		return d.Milliseconds()
	}
	return float64(d) / float64(time.Millisecond)
}

// snakeCase turns a Go field name into snake_case: BatchID → batch_id,
// SSTBytes → sst_bytes, OldestAge → oldest_age.
func snakeCase(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) {
			if i > 0 && (unicode.IsLower(r[i-1]) || unicode.IsDigit(r[i-1]) ||
				(i+1 < len(r) && unicode.IsLower(r[i+1]) && unicode.IsUpper(r[i-1]))) {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(c))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}
