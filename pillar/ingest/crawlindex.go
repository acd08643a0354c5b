package ingest

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/pillarkit/pillar/internal/extsort"
	"github.com/pillarkit/pillar/pillar"
)

// The crawl-file index makes a re-ingest of a crawl or dataset (local WARC,
// WET, JSONL or Parquet files) cost the change. The table TableCrawlFiles
// holds, in path order, one row per input file of the last such ingest
// (its absolute path, size, modification time and SHA-256 digest) followed
// by one row per record of the file that won its URL (page key and the
// record's fetch time). A file whose size matches and whose modification
// time or digest matches (a copied file has a new modification time and
// the same digest) is not read again: its winners enter the sort as
// placeholders carrying their fetch times, so a newer record of the same
// URL in a changed or new file still wins, and an older one still loses,
// as in a full read; where a placeholder wins, the stored page stands.
// The index is only used when AttrCrawlFiles matches the run's options
// (format, columns, base URL, canonical policy, size limit, the cleaner's
// version); a folder ingest or a crawl from an object store drops it.
// Options.Rehash reads every file.
//
// What a full read would do differently: a record that lost its URL to a
// record of a file that has since changed is not reconsidered, and the
// revisit records of an unchanged file are not applied again to a page
// that a changed file's record replaces. Both need a crawl file changed in
// place, which crawlers do not do; --rehash reads everything.

// TableCrawlFiles is the crawl-file index's table.
const TableCrawlFiles = "ingest/crawl-files"

// AttrCrawlFiles is the fingerprint of the options the index was made with.
const AttrCrawlFiles = "ingest/crawl-files"

// CrawlFileRow is one row of TableCrawlFiles: a file (PageKey empty: its
// size, modification time and digest) or one of its winners.
type CrawlFileRow struct {
	Path      string `yson:"path" parquet:"path"`
	Size      int64  `yson:"size" parquet:"size"`
	MTimeMS   int64  `yson:"mtime_ms" parquet:"mtime_ms"`
	Digest    string `yson:"digest" parquet:"digest"`
	PageKey   string `yson:"page_key" parquet:"page_key"`
	FetchedAt int64  `yson:"fetched_at" parquet:"fetched_at"`
}

// crawlFingerprint is AttrCrawlFiles's value for the options.
func crawlFingerprint(o *Options) string {
	b, _ := json.Marshal([]any{cleanerVersion, o.Format, o.Columns, o.BaseURL, o.Canonical, o.MaxPageBytes})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// fileDigest is the SHA-256 of a file's bytes, hex.
func fileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// crawlIndexIn reads the previous index in path order, alongside the
// files.
type crawlIndexIn struct{ *indexCursor[CrawlFileRow] }

// openCrawlIndex opens the crawl-file index of sn when it was made with
// the run's options; nil when there is none to use.
func openCrawlIndex(ctx context.Context, sn pillar.Snapshot, o *Options) (*crawlIndexIn, error) {
	c, err := openIndex[CrawlFileRow](ctx, sn, AttrCrawlFiles, crawlFingerprint(o), TableCrawlFiles)
	if c == nil || err != nil {
		return nil, err
	}
	return &crawlIndexIn{c}, nil
}

// file returns the file row of abs, the run's next file, passing over the
// rows of files before it (no longer there).
func (x *crawlIndexIn) file(abs string) (CrawlFileRow, bool) {
	for x.have && (x.row.Path < abs || (x.row.Path == abs && x.row.PageKey != "")) {
		x.advance()
	}
	if x.have && x.row.Path == abs {
		return x.row, true
	}
	return CrawlFileRow{}, false
}

// winners calls f with each winner row of abs (after file returned its
// file row).
func (x *crawlIndexIn) winners(abs string, f func(CrawlFileRow) error) error {
	x.advance() // past the file row
	for x.have && x.row.Path == abs && x.row.PageKey != "" {
		if err := f(x.row); err != nil {
			return err
		}
		x.advance()
	}
	return x.err
}

func (x *crawlIndexIn) close() {
	if x != nil {
		x.indexCursor.close()
	}
}

// crawlIndexOut collects the new index: the file rows as the files are
// taken (in path order), the winners as the merge finds them (in key
// order), given back in path order.
type crawlIndexOut struct {
	abs   []string
	files []CrawlFileRow // by file index; Path empty for a file not recorded
	s     *extsort.Sorter
}

func newCrawlIndexOut(dir string, memory int64, paths []string) *crawlIndexOut {
	o := &crawlIndexOut{abs: make([]string, len(paths)), files: make([]CrawlFileRow, len(paths)),
		s: extsort.New(extsort.Options{MemoryLimit: max(memory/16, 1<<20), Dir: dir, BufferSize: 64 << 10})}
	for i, p := range paths {
		o.abs[i], _ = filepath.Abs(p)
	}
	return o
}

// setFile records file i. A file modified within racyWindow of being
// read is recorded with modification time -1: the next run compares its
// digest (see listingOut.add).
func (o *crawlIndexOut) setFile(i int, size, mtimeMS int64, digest string) {
	if mtimeMS > time.Now().Add(-racyWindow).UnixMilli() {
		mtimeMS = -1
	}
	o.files[i] = CrawlFileRow{Path: o.abs[i], Size: size, MTimeMS: mtimeMS, Digest: digest}
}

// addWinner records that the page of input file i (crawlFileOf) won its
// key.
func (o *crawlIndexOut) addWinner(i int, key string, fetchedAt int64) error {
	if i < 0 || i >= len(o.files) {
		return nil
	}
	var k [4]byte
	binary.BigEndian.PutUint32(k[:], uint32(i))
	b := binary.AppendVarint(nil, fetchedAt)
	b = append(b, key...)
	return o.s.Add(&extsort.Record{Key: k[:], Prefix: 4, Payload: b})
}

// A crawl page carries its input file's index + 1 in Doc.Version through
// the sort (the merge sets Version itself for every page it writes).
func setCrawlFile(d *pillar.Doc, i int) { d.Version = int64(i) + 1 }

// crawlFileOf is the input file index setCrawlFile gave d, and clears it.
func crawlFileOf(d *pillar.Doc) int {
	i := int(d.Version) - 1
	d.Version = 0
	return i
}

// write writes the index, in path order, as TableCrawlFiles in tx, with
// the fingerprint of opts. The run's files are in abs order
// (sortByAbs), so file-index order is path order.
func (o *crawlIndexOut) write(ctx context.Context, tx pillar.Tx, opts *Options) error {
	it, err := extsort.Merge([]*extsort.Sorter{o.s})
	if err != nil {
		return err
	}
	defer it.Close()
	w, err := tx.WriteTable(ctx, TableCrawlFiles, CrawlFileRow{}, nil)
	if err != nil {
		return err
	}
	defer w.Close()
	more := it.Next()
	for i, f := range o.files {
		if f.Path != "" {
			if err := w.Write(&f); err != nil {
				return err
			}
		}
		for ; more; more = it.Next() {
			rec := it.Record()
			if int(binary.BigEndian.Uint32(rec.Key)) != i {
				break
			}
			if f.Path == "" {
				continue // a file not recorded (unreadable): its winners are read again next time
			}
			at, n := binary.Varint(rec.Payload)
			row := CrawlFileRow{Path: f.Path, PageKey: string(rec.Payload[n:]), FetchedAt: at}
			if err := w.Write(&row); err != nil {
				return err
			}
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return tx.SetAttr(ctx, AttrCrawlFiles, crawlFingerprint(opts))
}

// sortByAbs orders a crawl's files (and their formats) by absolute path,
// the index's order.
func sortByAbs(files, formats []string) {
	type ff struct{ abs, file, format string }
	x := make([]ff, len(files))
	for i := range files {
		a, _ := filepath.Abs(files[i])
		x[i] = ff{a, files[i], formats[i]}
	}
	sort.SliceStable(x, func(a, b int) bool { return x[a].abs < x[b].abs })
	for i := range x {
		files[i], formats[i] = x[i].file, x[i].format
	}
}

func (o *crawlIndexOut) close() { o.s.Close() }
