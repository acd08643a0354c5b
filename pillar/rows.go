package pillar

import "fmt"

// Row types of the Pillar tables. Every type carries yson tags (YTsaurus and
// the MapReduce job protocol) and parquet tags (the embedded store). Page keys
// are stored as 32 lower-case hex characters: they sort like the raw bytes and
// a person can read them.
//
// The Parquet files are read by outside tools (DuckDB, pyarrow), so their
// columns follow SQL's habits: times are TIMESTAMP(MILLIS) (the Go field
// stays unix milliseconds in an int64), and no column is an SQL reserved word
// (start_offset, end_offset and queue_offset, where the yson names are start,
// end and offset; YTsaurus tables keep the yson names). Files written before
// the rename carry the old names; LegacyParquetColumn says which, and the
// embedded store reads an old file's column under its old name.

// Table names (logical paths under the store root).
const (
	TableDocs     = "docs"
	TableSignals  = "signals"
	PrefixChunks  = "chunks/"     // chunks/<cv>
	PrefixEmbed   = "embeddings/" // embeddings/<cv>/<model>
	PrefixSubsets = "subsets/"    // subsets/<name>
)

// ChunksTable returns the table of chunker version cv.
func ChunksTable(cv string) string { return PrefixChunks + cv }

// EmbeddingsTable returns the table of embedding version (cv, model).
func EmbeddingsTable(cv, model string) string { return PrefixEmbed + cv + "/" + model }

// SubsetTable returns the membership table of a subset.
func SubsetTable(name string) string { return PrefixSubsets + name }

// Doc is one page's current clean text: a row of the docs table, sorted by
// page_key. A changed page replaces its row and increments Version.
type Doc struct {
	PageKey     string `yson:"page_key" parquet:"page_key"`
	URL         string `yson:"url" parquet:"url"`
	Host        string `yson:"host" parquet:"host"`
	FetchedAt   int64  `yson:"fetched_at" parquet:"fetched_at,timestamp(millisecond)"` // unix milliseconds
	ContentHash string `yson:"content_hash" parquet:"content_hash"`
	Title       string `yson:"title" parquet:"title"`
	Text        string `yson:"text" parquet:"text"`
	Lang        string `yson:"lang" parquet:"lang"`
	TextLen     int64  `yson:"text_len" parquet:"text_len"`
	OutLinks    int64  `yson:"out_links" parquet:"out_links"`
	HTMLBytes   int64  `yson:"html_bytes" parquet:"html_bytes"`
	Version     int64  `yson:"version" parquet:"version"`
	UpdatedAt   int64  `yson:"updated_at" parquet:"updated_at,timestamp(millisecond)"` // unix milliseconds
}

// Signal is one named per-page signal (e.g. a quality score) imported from
// outside. Num holds numeric signals, Str string ones.
type Signal struct {
	PageKey string  `yson:"page_key" parquet:"page_key"`
	Name    string  `yson:"name" parquet:"name"`
	Num     float64 `yson:"num" parquet:"num"`
	Str     string  `yson:"str" parquet:"str"`
	IsNum   bool    `yson:"is_num" parquet:"is_num"`
}

// Chunk is one passage of a page under one chunker version, sorted by
// (page_key, chunk_no). Start and End are byte offsets into Doc.Text.
// A page with no chunks (empty text) has one row with ChunkNo = -1.
type Chunk struct {
	PageKey     string `yson:"page_key" parquet:"page_key"`
	ChunkNo     int32  `yson:"chunk_no" parquet:"chunk_no"`
	ContentHash string `yson:"content_hash" parquet:"content_hash"`
	Text        string `yson:"text" parquet:"text"`
	Start       int32  `yson:"start" parquet:"start_offset"`
	End         int32  `yson:"end" parquet:"end_offset"`
	Tokens      int32  `yson:"tokens" parquet:"tokens"`
}

// Embedding is the vector of one chunk under one embedding version.
type Embedding struct {
	PageKey     string    `yson:"page_key" parquet:"page_key"`
	ChunkNo     int32     `yson:"chunk_no" parquet:"chunk_no"`
	ContentHash string    `yson:"content_hash" parquet:"content_hash"`
	Vector      []float32 `yson:"vector" parquet:"vector,list"`
}

// SubsetMember is one page in one generation of a subset.
type SubsetMember struct {
	PageKey string  `yson:"page_key" parquet:"page_key"`
	Score   float64 `yson:"score" parquet:"score"`
	Reason  string  `yson:"reason" parquet:"reason"`
}

// LegacyParquetColumn returns the name a Parquet column had in files
// written before it was renamed away from an SQL reserved word, and whether
// it was renamed.
func LegacyParquetColumn(column string) (old string, ok bool) {
	switch column {
	case "start_offset":
		return "start", true
	case "end_offset":
		return "end", true
	case "queue_offset":
		return "offset", true
	}
	return "", false
}

// Export operations.
const (
	OpPut    = "put"
	OpDelete = "delete"
)

// ExportRecord is one entry of the partition-aligned export queue. Offsets
// are assigned at commit: dense and increasing within a partition.
type ExportRecord struct {
	Partition int32  `yson:"partition" parquet:"partition"`
	Offset    int64  `yson:"offset" parquet:"queue_offset"`
	PageKey   string `yson:"page_key" parquet:"page_key"`
	Op        string `yson:"op" parquet:"op"`
	Value     []byte `yson:"value" parquet:"value"`
	Cause     string `yson:"cause" parquet:"cause"`
	// CommittedAt is the commit time in unix milliseconds (set by the store).
	CommittedAt int64 `yson:"committed_at" parquet:"committed_at,timestamp(millisecond)"`
	// Priority is PriorityFresh or PriorityBulk, set by the operation that
	// enqueues. "" (records of older queues) is delivered as fresh.
	Priority string `yson:"priority,omitempty" parquet:"priority,optional"`
	// Publication is the serving publication the record was computed for
	// (EmbedVersionID of the published pair); Lorry delivers it in a batch
	// of that publication only. "" (records of older queues): the legacy
	// unnamed publication.
	Publication string `yson:"publication,omitempty" parquet:"publication,optional"`
}

// Export priorities. Lorry delivers a partition's fresh records ahead of its
// bulk backlog, keeping per-key order (see package lorry).
const (
	// PriorityFresh: crawl updates and policy deletes, which readers are
	// waiting for.
	PriorityFresh = "fresh"
	// PriorityBulk: backfill republishes, which fill the troughs.
	PriorityBulk = "bulk"
)

// ParsePriority checks a priority name ("" is accepted and returned as is:
// it means "the operation's default").
func ParsePriority(s string) (string, error) {
	switch s {
	case "", PriorityFresh, PriorityBulk:
		return s, nil
	}
	return "", fmt.Errorf("priority %q: want %q or %q", s, PriorityFresh, PriorityBulk)
}

// IsBulk reports whether the record is bulk work (anything else is fresh).
func (r *ExportRecord) IsBulk() bool { return r.Priority == PriorityBulk }

// Validate checks a record before it is enqueued in a store of partitions
// partitions: its key, its partition (which must be the key's) and its op.
func (r *ExportRecord) Validate(partitions int) error {
	if r.Partition < 0 || int(r.Partition) >= partitions {
		return fmt.Errorf("page %s: partition %d out of range [0,%d)", r.PageKey, r.Partition, partitions)
	}
	k, err := ParseKey(r.PageKey)
	if err != nil {
		return err
	}
	if p := k.Partition(partitions); p != int(r.Partition) {
		return fmt.Errorf("page %s: partition %d, but the key belongs to %d", r.PageKey, r.Partition, p)
	}
	if r.Op != OpPut && r.Op != OpDelete {
		return fmt.Errorf("page %s: op %q is neither put nor delete", r.PageKey, r.Op)
	}
	if _, err := ParsePriority(r.Priority); err != nil {
		return fmt.Errorf("page %s: %w", r.PageKey, err)
	}
	return nil
}
