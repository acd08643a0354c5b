package cli

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/pillar"
)

// tableFiler is a snapshot whose tables are plain Parquet files on this
// machine (the embedded store, pillar/local).
type tableFiler interface {
	TableFiles(ctx context.Context, name string) ([]string, error)
}

// tablesJSON is `pillar tables --json`: snake_case keys; paths only with
// --files.
type tablesJSON struct {
	Store           string                     `json:"store"`
	Backend         string                     `json:"backend"`
	Partitions      int                        `json:"partitions"`
	Generation      int64                      `json:"generation"`
	Tables          []tableJSON                `json:"tables"`
	ExportQueueRows int64                      `json:"export_queue_rows"`
	Attributes      map[string]json.RawMessage `json:"attributes"`
}

type tableJSON struct {
	Name       string   `json:"name"`
	Rows       int64    `json:"rows"`
	Bytes      int64    `json:"bytes"`
	Files      int      `json:"files"`
	SortedBy   []string `json:"sorted_by"`
	Generation int64    `json:"generation"`
	Schema     string   `json:"schema"`
	// Paths are the table's current Parquet files (with --files), for
	// DuckDB's read_parquet([...]).
	Paths []string `json:"paths,omitempty"`
}

// tablesMachine prints `tables --json` (the whole summary as one object)
// or `tables --files` (one "TABLE<TAB>PATH" line per data file).
func tablesMachine(c *cli.Context, sn pillar.Snapshot) error {
	info := sn.Info()
	tables, err := sn.Tables(c.Context)
	if err != nil {
		return err
	}
	filer, _ := sn.(tableFiler)
	if c.Bool("files") && filer == nil {
		return fmt.Errorf("tables --files: the %s store keeps no local Parquet files (read its tables with the backend's own tools)", info.Backend)
	}
	out := tablesJSON{Store: info.Root, Backend: info.Backend, Partitions: info.Partitions, Generation: info.Generation,
		Tables: []tableJSON{}, Attributes: map[string]json.RawMessage{}}
	for _, t := range tables {
		tj := tableJSON{Name: t.Name, Rows: t.Rows, Bytes: t.Bytes, Files: t.Files, SortedBy: t.SortedBy,
			Generation: t.Generation, Schema: t.Schema}
		if tj.SortedBy == nil {
			tj.SortedBy = []string{}
		}
		if c.Bool("files") {
			if tj.Paths, err = filer.TableFiles(c.Context, t.Name); err != nil {
				return err
			}
		}
		out.Tables = append(out.Tables, tj)
	}
	if !c.Bool("json") {
		for _, t := range out.Tables {
			for _, p := range t.Paths {
				fmt.Fprintf(c.App.Writer, "%s\t%s\n", t.Name, p)
			}
		}
		return nil
	}
	for p := 0; p < info.Partitions; p++ {
		n, err := sn.QueueEnd(c.Context, p)
		if err != nil {
			return err
		}
		out.ExportQueueRows += n
	}
	attrs, err := sn.Attrs(c.Context)
	if err != nil {
		return err
	}
	for k, v := range attrs {
		if json.Valid(v) {
			out.Attributes[k] = v
		} else {
			b, _ := json.Marshal(string(v))
			out.Attributes[k] = b
		}
	}
	enc := json.NewEncoder(c.App.Writer)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
