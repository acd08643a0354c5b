package pillar

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors. Every error a Store returns wraps one of these where a
// caller may want to branch on it.
var (
	// ErrNotFound: the table, attribute or store does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: another transaction committed a change to something this
	// transaction also changed (a table, an attribute) since it began. The
	// transaction is aborted; nothing of it is visible. Retry from the start.
	ErrConflict = errors.New("conflicting commit")
	// ErrNotStore: the path exists but is not a Pillar store.
	ErrNotStore = errors.New("not a pillar store")
	// ErrNewerFormat: the store was written by a newer version of the toolkit.
	ErrNewerFormat = errors.New("store format is newer than this binary supports")
	// ErrPartitions: the caller's partition count differs from the store's.
	ErrPartitions = errors.New("partition count mismatch")
	// ErrTxDone: the transaction was already committed or aborted.
	ErrTxDone = errors.New("transaction already finished")
	// ErrCorrupt: stored data does not match its recorded checksum or size
	// (a flipped byte, a truncated file). The error names the table and
	// file; nothing of the damaged file is returned.
	ErrCorrupt = errors.New("data corrupt")
)

// Info describes a store.
type Info struct {
	Backend    string // "local" or "yt"
	Root       string // directory or Cypress path
	Partitions int    // fixed for the store's life
	Format     int
	Generation int64 // the commit this snapshot reads
}

// TableInfo describes one table in a snapshot.
type TableInfo struct {
	Name   string
	Rows   int64
	Bytes  int64
	Schema string // column list, "name:type, ..."
	Files  int    // data files (embedded) or chunks (YTsaurus)
	// SortedBy names the columns the rows are sorted by, if any.
	SortedBy []string
	// Generation is the commit that last changed the table.
	Generation int64
}

// RowReader iterates rows. It has the same shape as the YTsaurus SDK's
// table reader: Next, then Scan into a pointer to a row struct.
type RowReader interface {
	Next() bool
	Scan(dst any) error
	Err() error
	Close() error
}

// RowWriter appends rows of one type to a table inside a transaction.
// Close must be called before Commit; rows of an unclosed writer are lost.
type RowWriter interface {
	Write(row any) error
	Close() error
}

// Range selects rows [Start, End) of a table by index. A nil *Range means
// all rows.
type Range struct{ Start, End int64 }

// Snapshot is a consistent, read-only view of the store at one generation.
// It stays valid while the store changes. Release it when done.
type Snapshot interface {
	Info() Info
	Tables(ctx context.Context) ([]TableInfo, error)
	Table(ctx context.Context, name string) (TableInfo, error)
	// ReadTable reads rows of the table in order; r may be nil for all rows.
	ReadTable(ctx context.Context, name string, r *Range) (RowReader, error)
	// Attr decodes a JSON attribute into dst; ErrNotFound if unset.
	Attr(ctx context.Context, name string, dst any) error
	Attrs(ctx context.Context) (map[string][]byte, error)
	// QueueEnd returns the offset the next record of a partition will get.
	QueueEnd(ctx context.Context, partition int) (int64, error)
	// ReadQueue returns up to limit records of partition from offset on.
	ReadQueue(ctx context.Context, partition int, from int64, limit int) ([]ExportRecord, error)
	// Consumed reports whether an input id was marked consumed.
	Consumed(ctx context.Context, id string) (bool, error)
	Release()
}

// QueueHeadReader is implemented by snapshots that can read export-queue
// records without decoding their values (a column projection): Lorry scans
// past a bulk backlog this way to find the fresh records behind it. The
// records it returns are ReadQueue's with Value nil.
type QueueHeadReader interface {
	ReadQueueHeads(ctx context.Context, partition int, from int64, limit int) ([]ExportRecord, error)
}

// WriteMode says what a RowWriter does to the table's existing rows.
type WriteMode int

const (
	// Replace gives the table exactly the rows written in this transaction.
	Replace WriteMode = iota
	// Append adds the rows after the table's existing ones.
	Append
)

// WriteOptions for Tx.WriteTable. The zero value replaces the table and
// records no sort order.
type WriteOptions struct {
	Mode WriteMode
	// SortedBy records that the written rows are sorted by these columns.
	// The store does not check it; writers that claim it must sort.
	SortedBy []string
	// RowGroupBytes bounds what the writer buffers before it flushes a row
	// group (an operation's memory limit shared among its open outputs).
	// A store may ignore it (YTsaurus buffers on the cluster). The default
	// value (0) is the store's own bound (embedded: 8 MiB).
	RowGroupBytes int64
	// Scratch marks an operation's intermediate table, written once, read
	// once or twice and dropped by the run that made it (a plan's todo, a
	// slice's pending rows, an export's desired records): a store may
	// trade size for speed (embedded: Snappy instead of ZSTD, several
	// times cheaper to write). The default value (false) keeps the store's
	// codec (embedded: ZSTD).
	Scratch bool
}

// Tx is one atomic change to the store: new table contents, attribute
// changes, export-queue appends and consumed-input marks become visible
// together at Commit, or not at all. Reads inside a Tx see the state it began
// from (not its own writes).
//
// Conflicts: Commit fails with ErrConflict if, since Begin, another commit
// changed a table this Tx writes or drops, or an attribute this Tx sets.
// Queue appends and consumed marks never conflict (appends get offsets after
// whatever was committed meanwhile).
type Tx interface {
	Snapshot
	// WriteTable opens a writer for a table; rowType is a value of the row
	// struct (e.g. Doc{}). Several writers of one table in one Tx add files
	// in the order their writers were opened.
	WriteTable(ctx context.Context, name string, rowType any, opts *WriteOptions) (RowWriter, error)
	DropTable(ctx context.Context, name string) error
	// SetAttr sets a JSON-encoded attribute; DeleteAttr removes it.
	SetAttr(ctx context.Context, name string, value any) error
	DeleteAttr(ctx context.Context, name string) error
	// ExpectAttr makes Commit fail with ErrConflict unless the attribute
	// still has the value it had at Begin (compare-and-swap without writing).
	ExpectAttr(ctx context.Context, name string) error
	// Enqueue appends records to the export queue; Partition must be set,
	// Offset is assigned at Commit.
	Enqueue(ctx context.Context, recs ...ExportRecord) error
	MarkConsumed(ctx context.Context, ids ...string) error
	Commit(ctx context.Context) error
	// Abort discards everything; it is safe after Commit (a no-op then).
	Abort() error
}

// Store is a versioned Pillar store with one of two backends: the embedded
// local store (Parquet files in a directory) or YTsaurus.
type Store interface {
	Info() Info
	Snapshot(ctx context.Context) (Snapshot, error)
	Begin(ctx context.Context) (Tx, error)
	Close() error
}

// Well-known attributes.
const (
	AttrPublished = "published" // Published
	AttrPrevious  = "published_previous"
	AttrRegistry  = "versions" // Registry
)

// Published is the published (chunker version, model) pair.
type Published struct {
	ChunkVersion string    `json:"chunk_version"`
	Model        string    `json:"model"`
	EmbedVersion string    `json:"embed_version"`
	At           time.Time `json:"at"`
}
