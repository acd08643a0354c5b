package ingest

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/parquet-go/parquet-go"

	"github.com/pillarkit/pillar/pillar"
)

// ReadSignals streams a signals file (what `pillar signals import` reads)
// and calls fn with each signal and the line it came from. The first column
// is "url" (normalized and hashed to the page key) or "page_key" (32 hex
// characters); every other column is one named signal. A value that parses
// as a number (or is a Parquet number or bool, 1 for true) is numeric,
// anything else a string; an empty Parquet value (null) is no signal. A
// .parquet file is read as Parquet (line = row number + 1), anything else
// as CSV with a header row. Nothing is held beyond one row. Errors name
// the file and line.
func ReadSignals(path string, fn func(line int64, s pillar.Signal) error) error {
	var head []string
	onHead := func(h []string) error {
		if len(h) < 2 || (h[0] != "url" && h[0] != "page_key") {
			return fmt.Errorf("%s: the first column must be \"url\" or \"page_key\", then at least one signal column", path)
		}
		head = h
		return nil
	}
	return eachSignalRow(path, onHead, func(line int, rec []any) error {
		first := fmt.Sprint(rec[0])
		var key pillar.Key
		var err error
		if head[0] == "url" {
			key, _, err = pillar.KeyOfURL(first)
		} else {
			key, err = pillar.ParseKey(first)
		}
		if err != nil {
			return fmt.Errorf("%s:%d: %w", path, line, err)
		}
		for j := 1; j < len(head) && j < len(rec); j++ {
			if rec[j] == nil {
				continue // a null in Parquet: no signal
			}
			s := pillar.Signal{PageKey: key.String(), Name: head[j]}
			switch v := rec[j].(type) {
			case float64, float32, int, int32, int64, uint32, uint64:
				f, _ := strconv.ParseFloat(fmt.Sprint(v), 64)
				s.Num, s.IsNum = f, true
			case bool:
				s.IsNum = true
				if v {
					s.Num = 1
				}
			default:
				str := fmt.Sprint(v)
				if b, ok := v.([]byte); ok {
					str = string(b)
				}
				if f, err := strconv.ParseFloat(strings.TrimSpace(str), 64); err == nil {
					s.Num, s.IsNum = f, true
				} else {
					s.Str = str
				}
			}
			if err := fn(int64(line), s); err != nil {
				return err
			}
		}
		return nil
	})
}

// eachSignalRow streams the rows of a signals file: the header, then fn
// with each row's values (strings from CSV, typed values from Parquet) and
// its line.
func eachSignalRow(path string, head func([]string) error, fn func(line int, row []any) error) error {
	if strings.EqualFold(filepath.Ext(path), ".parquet") {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		pf, err := parquet.OpenFile(f, fi.Size())
		if err != nil {
			return fmt.Errorf("%s: not a Parquet file: %w", path, err)
		}
		var cols []string
		for _, fl := range pf.Schema().Fields() {
			cols = append(cols, fl.Name())
		}
		if err := head(cols); err != nil {
			return err
		}
		// Columns are only known at run time: read rows as maps.
		r := parquet.NewReader(pf)
		defer r.Close()
		for line := 2; ; line++ {
			m := map[string]any{}
			if err := r.Read(&m); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return fmt.Errorf("%s: row %d: %w", path, line-1, err)
			}
			row := make([]any, len(cols))
			for i, h := range cols {
				row[i] = m[h]
			}
			if err := fn(line, row); err != nil {
				return err
			}
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r := csv.NewReader(f)
	cols, err := r.Read()
	if err != nil {
		return fmt.Errorf("%s: header: %w", path, err)
	}
	if err := head(cols); err != nil {
		return err
	}
	for line := 2; ; line++ {
		rec, err := r.Read()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s:%d: %w", path, line, err)
		}
		row := make([]any, len(rec))
		for i, v := range rec {
			row[i] = v
		}
		if err := fn(line, row); err != nil {
			return err
		}
	}
}
