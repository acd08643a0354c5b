package ingest

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/pillarkit/pillar/internal/extsort"
	"github.com/pillarkit/pillar/pillar"
)

// The listing index makes a re-ingest of a folder cost the change: the
// table TableListing holds, in walk order, the path, size and modification
// time of every file whose page won its URL in the last folder ingest, with
// the page's key. A file whose size and modification time (milliseconds)
// are unchanged is not read again: it enters the sort as a placeholder at
// its walk position, so the first file in walk order still wins a URL
// exactly as in a full read, and the stored page stands. The listing is
// only used when the attribute AttrListing matches the run's options
// (From, BaseURL, canonical policy, include/exclude globs, size limit, the
// cleaner's version); any other ingest into the store (a crawl, other
// options) writes a new one or drops it. Options.Rehash reads every file.

// TableListing is the listing index's table.
const TableListing = "ingest/listing"

// AttrListing is the fingerprint of the options the listing was made with.
const AttrListing = "ingest/listing-options"

// cleanerVersion changes when CleanHTML or the URL rules change what a file
// makes: a listing of another version is not used.
const cleanerVersion = 1

// ListingRow is one row of TableListing.
type ListingRow struct {
	Path    string `yson:"path" parquet:"path"`
	Size    int64  `yson:"size" parquet:"size"`
	MTimeMS int64  `yson:"mtime_ms" parquet:"mtime_ms"`
	PageKey string `yson:"page_key" parquet:"page_key"`
}

// unchangedMark in Doc.HTMLBytes marks a placeholder on its way through
// the sort: a file not read because the listing says it is unchanged.
const unchangedMark = -2

func isUnchanged(d *pillar.Doc) bool { return d.HTMLBytes == unchangedMark }

// listingFingerprint is AttrListing's value for the options.
func listingFingerprint(o *Options) string {
	abs, _ := filepath.Abs(o.From)
	b, _ := json.Marshal([]any{cleanerVersion, abs, o.BaseURL, o.Canonical, o.Include, o.Exclude, o.MaxPageBytes})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// walkLess orders slash-separated relative paths as filepath.WalkDir
// visits them: segment by segment, each by name.
func walkLess(a, b string) bool {
	as, bs := strings.Split(a, "/"), strings.Split(b, "/")
	for i := 0; i < len(as) && i < len(bs); i++ {
		if as[i] != bs[i] {
			return as[i] < bs[i]
		}
	}
	return len(as) < len(bs)
}

// indexCursor reads an index table (the listing, the crawl-file index)
// row by row, one row ahead of its caller.
type indexCursor[T any] struct {
	r    pillar.RowReader
	row  T
	have bool
	err  error
}

// openIndex opens table as an index cursor when attribute attr of sn is
// fingerprint (the index was made with the run's options); nil when there
// is none to use.
func openIndex[T any](ctx context.Context, sn pillar.Snapshot, attr, fingerprint, table string) (*indexCursor[T], error) {
	var fp string
	if err := sn.Attr(ctx, attr, &fp); err != nil {
		if errors.Is(err, pillar.ErrNotFound) {
			return nil, nil
		}
		return nil, err
	}
	if fp != fingerprint {
		return nil, nil
	}
	r, err := sn.ReadTable(ctx, table, nil)
	if errors.Is(err, pillar.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ingest: read %s: %w", table, err)
	}
	c := &indexCursor[T]{r: r}
	c.advance()
	return c, nil
}

func (c *indexCursor[T]) advance() {
	c.have = c.r.Next()
	if c.have {
		var zero T
		c.row = zero
		if err := c.r.Scan(&c.row); err != nil {
			c.err, c.have = err, false
		}
	} else if err := c.r.Err(); err != nil {
		c.err = err
	}
}

func (c *indexCursor[T]) close() {
	if c != nil {
		c.r.Close()
	}
}

// listingIn reads the previous listing in walk order, alongside the walk.
type listingIn struct{ *indexCursor[ListingRow] }

// openListing opens the listing of st when it was made with the run's
// options; nil when there is none to use.
func openListing(ctx context.Context, sn pillar.Snapshot, o *Options) (*listingIn, error) {
	c, err := openIndex[ListingRow](ctx, sn, AttrListing, listingFingerprint(o), TableListing)
	if c == nil || err != nil {
		return nil, err
	}
	return &listingIn{c}, nil
}

// lookup returns the listing row of rel, the walk's next file, if any:
// rows of files no longer there are passed over.
func (l *listingIn) lookup(rel string) (ListingRow, bool) {
	for l.have && walkLess(l.row.Path, rel) {
		l.advance()
	}
	if l.have && l.row.Path == rel {
		return l.row, true
	}
	return ListingRow{}, false
}

func (l *listingIn) close() {
	if l != nil {
		l.indexCursor.close()
	}
}

// listingOut collects the new listing's rows (the winners, found in key
// order) and gives them back in walk order.
type listingOut struct {
	s *extsort.Sorter
}

func newListingOut(dir string, memory int64) *listingOut {
	return &listingOut{s: extsort.New(extsort.Options{MemoryLimit: max(memory/16, 1<<20), Dir: dir, BufferSize: 64 << 10})}
}

// racyWindow: see listingOut.add.
const racyWindow = 2 * time.Second

func (l *listingOut) add(seq uint64, row ListingRow) error {
	// A file modified within racyWindow of being listed may be changed
	// again within the same modification-time tick (the same size, the
	// same millisecond) and look unchanged: it is listed with mtime -1, which
	// no file matches, so the next run reads it (git's racy-index rule).
	if row.MTimeMS > time.Now().Add(-racyWindow).UnixMilli() {
		row.MTimeMS = -1
	}
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], seq)
	b := binary.AppendUvarint(nil, uint64(len(row.Path)))
	b = append(b, row.Path...)
	b = binary.AppendVarint(b, row.Size)
	b = binary.AppendVarint(b, row.MTimeMS)
	b = append(b, row.PageKey...)
	return l.s.Add(&extsort.Record{Key: k[:], Prefix: 8, Payload: b})
}

// write writes the rows, in walk order, as TableListing in tx, with the
// fingerprint of o.
func (l *listingOut) write(ctx context.Context, tx pillar.Tx, o *Options) error {
	it, err := extsort.Merge([]*extsort.Sorter{l.s})
	if err != nil {
		return err
	}
	defer it.Close()
	w, err := tx.WriteTable(ctx, TableListing, ListingRow{}, nil)
	if err != nil {
		return err
	}
	defer w.Close()
	for it.Next() {
		b := it.Record().Payload
		n, k := binary.Uvarint(b)
		b = b[k:]
		row := ListingRow{Path: string(b[:n])}
		b = b[n:]
		var j int
		row.Size, j = binary.Varint(b)
		b = b[j:]
		row.MTimeMS, j = binary.Varint(b)
		row.PageKey = string(b[j:])
		if err := w.Write(&row); err != nil {
			return err
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return tx.SetAttr(ctx, AttrListing, listingFingerprint(o))
}

func (l *listingOut) close() { l.s.Close() }
