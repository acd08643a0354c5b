package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/ingest"
	"github.com/pillarkit/pillar/pillar/local"
)

// storeFlag is the --store flag every store command takes.
var storeFlag = &cli.StringFlag{
	Name:     "store",
	Usage:    "store location: a directory (embedded store) or yt://<cypress path> (YTsaurus at YT_PROXY, token in YT_TOKEN)",
	EnvVars:  []string{"PILLAR_STORE"},
	Required: true,
}

// openStore opens the store named by --store. With create, a missing local
// store is created with the given partition count.
func openStore(c *cli.Context, create bool, partitions int) (pillar.Store, error) {
	loc := c.String("store")
	if strings.HasPrefix(loc, "yt://") {
		return openYTStore(c, loc, create, partitions) // cli/store_yt.go
	}
	loc = strings.TrimPrefix(loc, "file://")
	st, err := local.Open(loc, &local.Options{Partitions: 0})
	if errors.Is(err, pillar.ErrNotFound) && create {
		return local.Create(loc, &local.Options{Partitions: partitions})
	}
	if errors.Is(err, pillar.ErrNotStore) && create {
		if ents, rerr := os.ReadDir(loc); rerr == nil && len(ents) == 0 {
			return local.Create(loc, &local.Options{Partitions: partitions})
		}
	}
	if err == nil && create && partitions != 0 && c.IsSet("partitions") && st.Info().Partitions != partitions {
		return nil, fmt.Errorf("--store %s has %d partitions, --partitions says %d: %w", loc, st.Info().Partitions, partitions, pillar.ErrPartitions)
	}
	return st, err
}

// openSnapshot opens the store named by --store and a snapshot of it;
// done releases both.
func openSnapshot(c *cli.Context) (pillar.Snapshot, func(), error) {
	st, err := openStore(c, false, 0)
	if err != nil {
		return nil, nil, err
	}
	sn, err := st.Snapshot(c.Context)
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	return sn, func() { sn.Release(); st.Close() }, nil
}

func ingestCommand() *cli.Command {
	return &cli.Command{
		Name:  "ingest",
		Usage: "load pages into the docs table: a folder of HTML and text files, WARC or WET crawls, JSONL or Parquet datasets",
		Description: `Strips markup to clean text, derives each page's URL (its <link rel=canonical>, else
--base-url + the file's relative path), computes the page key and content hash and
commits all pages in one transaction. Unchanged pages keep their row; changed pages get
a new version. Only the new and changed pages are written, as a delta layer of docs (k
rows for k pages, whatever the store's size; --rewrite writes docs whole); once docs has
more than ` + fmt.Sprint(pillar.DefaultMaxLayers) + ` deltas the ingest compacts it (see pillar compact). Nested folders keep their relative path in the URL. A canonical link that
is not http(s) (a file:// link of a local docs folder) is ignored in favour of --base-url
+ the path (--canonical). Pages in other encodings (byte-order mark, <meta charset>) are
decoded to UTF-8. Binary, unreadable, oversize, duplicate-URL and meta-refresh redirect
files are skipped, and so is anything that is not a regular file. At the end one summary
gives the files by outcome with a few example paths each (--json: the same as JSON).
A re-ingest of the same folder with the same options reads only the files whose size or
modification time changed (a listing index in the store; --rehash reads every file). A
re-ingest of local crawl or dataset files reads only those new or changed since: a file of
the same size with the same modification time or SHA-256 digest is not read, and its
records that won their URL still compete with newer ones by fetch time (a crawl-file
index in the store; --rehash reads every file).

--from also takes a crawl or a page dataset: WARC files (.warc, .warc.gz, gzipped per
record or not; what wget --warc-file, Heritrix and Common Crawl write), WET files, JSON
Lines (.jsonl, .jsonl.gz, .jsonl.zst) and Parquet, as one file, a folder of them, a glob, or
an s3://bucket/prefix (the --s3-* flags and AWS credentials as elsewhere; one object on disk
under TMPDIR at a time).
From WARC, response records are pages: the URL from WARC-Target-URI, the fetch time from
WARC-Date, the charset from the HTTP Content-Type. Other statuses (3xx redirects with their
target, 4xx, 5xx), non-HTML payloads, revisit, request, metadata and warcinfo records, a
payload that fails its WARC-Payload-Digest, and damaged records (a truncated file, a corrupt
gzip member, a lying Content-Length) are counted with their file@offset, and reading resumes
at the next record. The same URL fetched twice keeps the newest fetch. A dataset row has a
url, html (or text) and optional fetched_at column; --columns maps other names. The crawl
streams through the same external sort as a folder (--memory-limit).

Examples:
   pillar ingest --store data/store --from /usr/share/doc/postgresql-doc-15/html \
       --base-url https://www.postgresql.org/docs/15/
   pillar ingest --store data/store --from ./pages --json
   pillar ingest --store data/store --from 'crawl/*.warc.gz'
   pillar ingest --store data/store --from s3://crawls/2026-11/ --s3-endpoint http://127.0.0.1:7070
   pillar ingest --store data/store --from CC-MAIN-20261101-00000.warc.wet.gz
   pillar ingest --store data/store --from pages.jsonl.zst --columns url=link,html=content,fetched_at=crawled
   pillar ingest --store data/store --from ./pages --rewrite
   pillar ingest --store data/store --from ./crawl/today --max-layers 4
   pillar ingest --store data/store --from /usr/share/doc/libxslt1-dev/html --base-url https://gnome.pages.gitlab.gnome.org/libxslt/ \
       --exclude 'html/**' --canonical ignore`,
		Flags: []cli.Flag{
			storeFlag,
			&cli.StringFlag{Name: "from", Usage: "folder of .html/.htm/.txt/.md files (walked recursively), or WARC/WET/JSONL/Parquet files: one, a folder of them or a glob", Required: true},
			&cli.StringFlag{Name: "format", Usage: "input format: folder, warc, wet, jsonl or parquet (default: by --from: its file names)"},
			&cli.StringFlag{Name: "columns", Usage: "dataset column names: url=NAME,html=NAME,text=NAME,fetched_at=NAME (default: url, html, text, fetched_at)"},
			s3EndpointFlag, s3RegionFlag, s3PathStyleFlag, // --from s3://bucket/prefix
			&cli.StringFlag{Name: "base-url", Value: "http://corpus.local/", Usage: "URL prefix + the relative path, for files without an http(s) canonical link"},
			&cli.IntFlag{Name: "partitions", Value: 64, Usage: "partition count when the store is created (fixed afterwards)"},
			&cli.Int64Flag{Name: "max-page-bytes", Value: ingest.DefaultMaxPageBytes, Usage: "reject files larger than this (named in the summary)"},
			&cli.IntFlag{Name: "workers", Usage: "parallel cleaners (default: number of CPUs)"},
			memoryLimitFlag,
			&cli.StringFlag{Name: "canonical", Value: ingest.CanonicalPrefer, Usage: "canonical links: prefer (an http(s) one is the URL, any other is ignored), ignore (always --base-url + path), require (skip pages without an http(s) one)"},
			&cli.StringSliceFlag{Name: "include", Usage: "keep only files whose relative path matches this glob (repeatable; \"*.html\", \"api/**\")"},
			&cli.StringSliceFlag{Name: "exclude", Usage: "leave out files whose relative path matches this glob (repeatable)"},
			&cli.IntFlag{Name: "max-layers", Value: pillar.DefaultMaxLayers, Usage: "compact docs after the ingest once it has more than this many delta layers (-1: never; see pillar compact)"},
			&cli.BoolFlag{Name: "rehash", Usage: "read every file (folder, crawl or dataset), not only those changed since the last ingest"},
			&cli.BoolFlag{Name: "rewrite", Usage: "write docs whole (a new base, folding its delta layers) instead of a delta of the new and changed pages"},
			&cli.BoolFlag{Name: "json", Usage: "print the summary as JSON"},
			ytRunFlags[0], ytRunFlags[1], // --pool, --job-binary: the automatic compaction on yt:// stores
		},
		Action: func(c *cli.Context) error {
			mem, err := memoryLimit(c)
			if err != nil {
				return err
			}
			if n := c.Int("max-layers"); n == 0 || n < -1 {
				return fmt.Errorf("ingest: --max-layers %d: want a count of at least 1, or -1 (never compact)", n)
			}
			cols, err := ingest.ParseColumns(c.String("columns"))
			if err != nil {
				return err
			}
			var objects ingest.Objects
			if from := c.String("from"); strings.HasPrefix(from, "s3://") || strings.HasPrefix(from, "file://") {
				o, err := openObjstore(c, "--from", from)
				if err != nil {
					return err
				}
				objects = o
			}
			st, err := openStore(c, true, c.Int("partitions"))
			if err != nil {
				return err
			}
			defer st.Close()
			stats, err := ingest.Run(c.Context, st, ingest.Options{
				From: c.String("from"), Format: c.String("format"), Columns: cols, Objects: objects, BaseURL: c.String("base-url"), MaxPageBytes: c.Int64("max-page-bytes"),
				Workers: c.Int("workers"), Logger: logger(), Progress: true, MemoryLimit: mem,
				Canonical: c.String("canonical"), Include: c.StringSlice("include"), Exclude: c.StringSlice("exclude"),
				Rewrite: c.Bool("rewrite"), Rehash: c.Bool("rehash"), Compact: ingestCompaction(c),
			})
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, stats)
			}
			fmt.Fprintf(c.App.Writer, "ingested %d pages from %d files in %.1fs (%.1f MB of HTML, %.0f pages/s)\n",
				stats.Pages, stats.Files, float64(stats.DurationMS)/1000, float64(stats.HTMLBytes)/1e6,
				float64(stats.Pages)/(float64(stats.DurationMS)/1000+1e-9))
			fmt.Fprint(c.App.Writer, stats.Summary())
			if stats.Generation > 0 {
				how := "docs rewritten whole"
				if stats.Delta {
					how = "a delta of docs"
				}
				fmt.Fprintf(c.App.Writer, "  committed generation %d: %d rows written (%s)\n", stats.Generation, stats.RowsWritten, how)
				if stats.Compacted > 0 {
					fmt.Fprintf(c.App.Writer, "  compacted docs: %d deltas folded into a new base\n", stats.Compacted)
				}
				if stats.CompactError != "" {
					fmt.Fprintf(c.App.Writer, "  the compaction of docs after it failed (the next ingest or pillar compact retries): %s\n", stats.CompactError)
				}
			}
			return nil
		},
	}
}

func tablesCommand() *cli.Command {
	return &cli.Command{
		Name:  "tables",
		Usage: "list every table with rows, size and schema, and the store's attributes",
		Description: `Examples:
   pillar tables --store data/store
   pillar tables --store data/store --schema
   pillar tables --store data/store --json
   pillar tables --store data/store --files        # TABLE<TAB>PATH per Parquet file
   duckdb -c "SELECT count(*) FROM read_parquet($(pillar tables --store data/store --files --json |
       jq -c '[.tables[] | select(.name == "docs") | .paths[]]' | tr '"' "'"))"`,
		Flags: []cli.Flag{
			storeFlag,
			&cli.BoolFlag{Name: "schema", Usage: "print each table's columns"},
			&cli.BoolFlag{Name: "json", Usage: "print the summary as JSON (snake_case keys; with --files, each table's paths)"},
			&cli.BoolFlag{Name: "files", Usage: "list each table's current Parquet files (TABLE<TAB>PATH), for DuckDB's read_parquet([...]); embedded store only"},
		},
		Action: func(c *cli.Context) error {
			sn, done, err := openSnapshot(c)
			if err != nil {
				return err
			}
			defer done()
			if c.Bool("json") || c.Bool("files") {
				return tablesMachine(c, sn) // cmd_tables_json.go
			}
			info := sn.Info()
			fmt.Printf("store %s (%s backend), %d partitions, generation %d\n\n", info.Root, info.Backend, info.Partitions, info.Generation)
			tables, err := sn.Tables(c.Context)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TABLE\tROWS\tSIZE\tFILES\tSORTED BY\tGEN\tDELTAS")
			for _, t := range tables {
				deltas := "" // a layered table's delta layers (pillar compact folds them)
				if ls, err := pillar.Layers(c.Context, sn, t.Name); err == nil && pillar.Deltas(ls) > 0 {
					deltas = fmt.Sprint(pillar.Deltas(ls))
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%d\t%s\n", t.Name, t.Rows, humanBytes(t.Bytes), t.Files, strings.Join(t.SortedBy, ","), t.Generation, deltas)
			}
			var qrows int64
			for p := 0; p < info.Partitions; p++ {
				n, err := sn.QueueEnd(c.Context, p)
				if err != nil {
					return err
				}
				qrows += n
			}
			fmt.Fprintf(tw, "(export queue)\t%d\t\t\t\t\t\n", qrows)
			tw.Flush()
			if c.Bool("schema") {
				fmt.Println()
				for _, t := range tables {
					fmt.Printf("%s: %s\n", t.Name, t.Schema)
				}
			}
			attrs, err := sn.Attrs(c.Context)
			if err != nil {
				return err
			}
			names := make([]string, 0, len(attrs))
			for k := range attrs {
				names = append(names, k)
			}
			sort.Strings(names)
			fmt.Println("\nattributes:")
			if len(names) == 0 {
				fmt.Println("  (none)")
			}
			for _, k := range names {
				var buf bytes.Buffer
				v := string(attrs[k])
				if json.Compact(&buf, attrs[k]) == nil {
					v = buf.String()
				}
				if len(v) > 160 {
					v = v[:157] + "..."
				}
				fmt.Printf("  %s = %s\n", k, v)
			}
			return nil
		},
	}
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// ingestCompaction is the automatic compaction of docs after an ingest:
// on a yt:// store with a job binary at hand, a reduce on the cluster
// (jobs.CompactMerge); otherwise the client's streaming merge.
func ingestCompaction(c *cli.Context) pillar.CompactOptions {
	o := pillar.CompactOptions{MaxLayers: c.Int("max-layers")}
	if r := ytRunner(c); r != nil {
		if _, bad := r.(errRunner); !bad {
			o.Merge = jobs.CompactMerge(r)
		}
	}
	return o
}
